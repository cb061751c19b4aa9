//! Synthetic logit rows and the benchmark scenarios, shared by the criterion benches and
//! `gauge bench sampling` so both measure the same work on the same numbers.
//!
//! The generator is documented so anyone can reproduce the rows: splitmix64 (seed 42) gives 64-bit
//! words; the top 53 bits of two words make uniforms `u1, u2` in (0, 1]; Box–Muller
//! `sqrt(-2 ln u1) * cos(2π u2)` gives a standard normal, scaled by `sigma` and rounded to f32.
//! Rows are drawn one after another from one stream.

/// splitmix64, the generator behind every synthetic row.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn next_open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller, cosine branch only).
    pub fn next_normal(&mut self) -> f64 {
        let u1 = self.next_open01();
        let u2 = self.next_open01();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// `n_rows` rows of `n_vocab` logits, each N(0, sigma²), from splitmix64(`seed`).
pub fn normal_rows(n_vocab: usize, n_rows: usize, sigma: f64, seed: u64) -> Vec<Vec<f32>> {
    let mut g = SplitMix64(seed);
    (0..n_rows)
        .map(|_| {
            (0..n_vocab)
                .map(|_| (g.next_normal() * sigma) as f32)
                .collect()
        })
        .collect()
}

/// A 64-token history (ids spread over the vocabulary, with repeats) fed through `accept` before
/// timing, so penalties and DRY have work to do.
pub fn bench_history(n_vocab: usize) -> Vec<i32> {
    let mut g = SplitMix64(7);
    let pool: Vec<i32> = (0..24)
        .map(|_| (g.next_u64() % n_vocab as u64) as i32)
        .collect();
    (0..64)
        .map(|_| pool[(g.next_u64() % pool.len() as u64) as usize])
        .collect()
}

/// The benchmark chains as request JSON (llama-server field names), named as in the README table.
/// A name that starts with `greedy` is `logits -> greedy` with the request's penalties, if any, in
/// their slot before it; [`bench_chain`] builds each one.
pub fn bench_scenarios() -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    vec![
        ("greedy", json!({})),
        // The instrument's own chain: greedy decoding under each repeat operator (θ 1.3, last 64).
        (
            "greedy+ctrl",
            json!({"repeat_penalty": 1.3, "repeat_last_n": 64, "repeat_penalty_mode": "ctrl"}),
        ),
        (
            "greedy+normalized",
            json!({"repeat_penalty": 1.3, "repeat_last_n": 64, "repeat_penalty_mode": "normalized"}),
        ),
        ("default", json!({"seed": 42})),
        (
            "default+penalties+dry",
            json!({"seed": 42, "repeat_last_n": 64, "repeat_penalty": 1.1,
                   "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 64,
                   "dry_sequence_breaker_ids": [[13], [25], [29], [47]]}),
        ),
        (
            "all-enabled",
            json!({"seed": 42, "logit_bias": [[1, 0.5], [2, -0.5], [3, 1.0], [4, -1.0], [5, 0.25], [6, -0.25], [7, 2.0], [8, -2.0]],
                   "repeat_last_n": 64, "repeat_penalty": 1.1, "frequency_penalty": 0.1, "presence_penalty": 0.1,
                   "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 64,
                   "dry_sequence_breaker_ids": [[13], [25], [29], [47]],
                   "top_n_sigma": 2.0, "top_k": 40, "typical_p": 0.95, "top_p": 0.95, "min_p": 0.05,
                   "xtc_probability": 1.0, "xtc_threshold": 0.1, "temperature": 0.8, "dynatemp_range": 0.5, "dynatemp_exponent": 1.0}),
        ),
        // The repeat penalty's two operators in the default chain (θ 1.3 over the last 64 tokens);
        // llama.cpp has only `ctrl`, so `gauge bench sampling` runs ctrl on its side of both.
        (
            "default+ctrl",
            json!({"seed": 42, "repeat_penalty": 1.3, "repeat_last_n": 64, "repeat_penalty_mode": "ctrl"}),
        ),
        (
            "default+normalized",
            json!({"seed": 42, "repeat_penalty": 1.3, "repeat_last_n": 64, "repeat_penalty_mode": "normalized"}),
        ),
        (
            "mirostat-v2",
            json!({"seed": 42, "mirostat": 2, "mirostat_tau": 5.0, "mirostat_eta": 0.1, "temperature": 0.8}),
        ),
    ]
}

/// The chain of a [`bench_scenarios`] entry at `n_vocab`.
pub fn bench_chain(
    name: &str,
    json: &serde_json::Value,
    n_vocab: usize,
) -> crate::Result<crate::Chain> {
    let p = crate::params::SamplingParams::from_value(json)?;
    if !name.starts_with("greedy") {
        return crate::Chain::from_params(&p, n_vocab, None);
    }
    let mut b = crate::chain::ChainBuilder::greedy(n_vocab);
    if json.get("repeat_penalty").is_some() {
        b = b
            .with_penalties(
                p.repeat_last_n,
                p.repeat_penalty,
                p.frequency_penalty,
                p.presence_penalty,
            )
            .with_penalty_mode(p.repeat_penalty_mode);
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_reproducible_and_roughly_normal() {
        let a = normal_rows(20_000, 1, 3.0, 42);
        let b = normal_rows(20_000, 1, 3.0, 42);
        assert_eq!(a, b);
        let r = &a[0];
        let mean = r.iter().map(|&x| x as f64).sum::<f64>() / r.len() as f64;
        let var = r.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / r.len() as f64;
        assert!(mean.abs() < 0.1, "mean {mean}");
        assert!((var.sqrt() - 3.0).abs() < 0.1, "std {}", var.sqrt());
    }
}
