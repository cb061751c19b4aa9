//! Statistics of the probe, defined as the note's analysis scripts define them (docs/PROTOCOL.md §4, §6).
//!
//! * Flip rate: position-wise mismatches of two token streams over `min(len)` positions, no
//!   re-alignment after the first divergence; pooled as Σ flips / Σ positions.
//! * CI: percentile bootstrap of the mean of per-prefix rates, 10⁴ resamples drawn with Python's
//!   `random.Random(seed).randrange(n)`, sorted means at indices `int(0.025·B)` and `int(0.975·B)`.
//!   [`PyRandom`] reproduces CPython's generator (MT19937, `init_by_array` seeding,
//!   `getrandbits`-based `randrange`) so the same per-prefix rates give the same interval as the
//!   note's scripts.
//! * Median: Python `statistics.median` (mean of the two middle values for an even count).
//! * Repetition rate ("loop check"): the fraction of generated tokens already in the prompt ∪
//!   earlier generated tokens.

use gauge_sampling::rng::Mt19937;
use gauge_sampling::TokenId;
use std::collections::HashSet;

/// Flips and compared positions between two streams (`min(len)` positions).
pub fn flips(a: &[TokenId], b: &[TokenId]) -> (u64, u64) {
    let k = a.len().min(b.len());
    let f = a[..k].iter().zip(&b[..k]).filter(|(x, y)| x != y).count();
    (f as u64, k as u64)
}

/// The first position where the streams differ (0-indexed generated offset), if any.
pub fn first_divergence(a: &[TokenId], b: &[TokenId]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Python `statistics.median`; `None` for no data.
pub fn median(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| gauge_engine::measure::median(&mut xs.to_vec()))
}

/// Repeats in a generated stream: tokens already in prompt ∪ earlier generated tokens.
pub fn repeats(prompt: &[TokenId], generated: &[TokenId]) -> u64 {
    let mut seen: HashSet<TokenId> = prompt.iter().copied().collect();
    let mut r = 0;
    for &t in generated {
        if !seen.insert(t) {
            r += 1;
        }
    }
    r
}

/// CPython's `random.Random`: MT19937 seeded through `init_by_array` with the seed's 32-bit words.
#[derive(Debug, Clone)]
pub struct PyRandom {
    mt: Mt19937,
}

impl PyRandom {
    /// `random.Random(seed)` for a non-negative integer seed.
    pub fn new(seed: u64) -> Self {
        let mut key = vec![seed as u32];
        if seed >> 32 != 0 {
            key.push((seed >> 32) as u32);
        }
        PyRandom {
            mt: Mt19937::from_key(&key),
        }
    }

    /// The next 32-bit output (`genrand_uint32`).
    pub fn next_u32(&mut self) -> u32 {
        self.mt.next_u32()
    }

    /// `getrandbits(k)` for `1 <= k <= 32`.
    pub fn getrandbits(&mut self, k: u32) -> u32 {
        debug_assert!((1..=32).contains(&k));
        self.next_u32() >> (32 - k)
    }

    /// `randrange(n)` for `1 <= n < 2³²` (`_randbelow_with_getrandbits`: rejection on
    /// `n.bit_length()` bits).
    pub fn randrange(&mut self, n: u32) -> u32 {
        if n <= 1 {
            // Python draws getrandbits(1) for n = 1 and rejects until 0; the value is 0 either way
            // but the draw advances the stream.
            if n == 1 {
                while self.getrandbits(1) >= 1 {}
            }
            return 0;
        }
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }
}

/// Percentile-bootstrap 95% interval of the mean of `per` (the note's `boot_ci`): `resamples`
/// resampled means from `PyRandom::new(seed)`, sorted, at indices `int(0.025·B)` and `int(0.975·B)`.
/// Sums are sequential f64 additions, as in Python 3.11's `sum`.
pub fn bootstrap_ci(per: &[f64], resamples: usize, seed: u64) -> [f64; 2] {
    let m = per.len();
    if m == 0 || resamples == 0 {
        return [0.0, 0.0];
    }
    let mut rng = PyRandom::new(seed);
    let mut means = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let mut s = 0.0f64;
        for _ in 0..m {
            s += per[rng.randrange(m as u32) as usize];
        }
        means.push(s / m as f64);
    }
    means.sort_by(|a, b| a.total_cmp(b));
    let lo = ((0.025 * resamples as f64) as usize).min(resamples - 1);
    let hi = ((0.975 * resamples as f64) as usize).min(resamples - 1);
    [means[lo], means[hi]]
}

/// Independent two-sample percentile bootstrap of `mean(a) − mean(b)` (the note's confidence
/// contrast, docs/PROTOCOL.md §5.1): per resample, `len(a)` draws from `a` then `len(b)` draws from `b`
/// with `PyRandom::new(seed).randrange`, sorted differences at `int(0.025·B)` and `int(0.975·B)`
/// (indices 250 and 9750 for 10⁴). `None` when either sample is empty.
pub fn bootstrap_diff_ci(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Option<[f64; 2]> {
    if a.is_empty() || b.is_empty() || resamples == 0 {
        return None;
    }
    let mut rng = PyRandom::new(seed);
    let mean_of = |xs: &[f64], rng: &mut PyRandom| {
        let mut s = 0.0f64;
        for _ in 0..xs.len() {
            s += xs[rng.randrange(xs.len() as u32) as usize];
        }
        s / xs.len() as f64
    };
    let mut diffs = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let ma = mean_of(a, &mut rng);
        let mb = mean_of(b, &mut rng);
        diffs.push(ma - mb);
    }
    diffs.sort_by(|x, y| x.total_cmp(y));
    let lo = ((0.025 * resamples as f64) as usize).min(resamples - 1);
    let hi = ((0.975 * resamples as f64) as usize).min(resamples - 1);
    Some([diffs[lo], diffs[hi]])
}

/// The arithmetic mean (`None` for no data).
pub fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The f64 nearest to the shortest decimal of an f32 (1.3f32 → 1.3), so JSON shows θ as typed.
pub fn f32_to_decimal_f64(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sample_bootstrap_brackets_the_difference_of_means() {
        let a: Vec<f64> = (0..40).map(|i| 10.0 + (i % 5) as f64).collect();
        let b: Vec<f64> = (0..60).map(|i| 4.0 + (i % 3) as f64).collect();
        let d = mean(&a).unwrap() - mean(&b).unwrap();
        let ci = bootstrap_diff_ci(&a, &b, 2000, 0).unwrap();
        assert!(ci[0] < d && d < ci[1], "{ci:?} {d}");
        assert_eq!(
            bootstrap_diff_ci(&[1.0; 5], &[0.5; 7], 100, 0),
            Some([0.5, 0.5])
        );
        assert_eq!(bootstrap_diff_ci(&[], &[1.0], 100, 0), None);
        assert_eq!(Some(ci), bootstrap_diff_ci(&a, &b, 2000, 0));
    }

    #[test]
    fn flips_count_every_position_after_divergence() {
        let a = [1, 2, 3, 4, 5];
        let b = [1, 2, 9, 4, 7];
        assert_eq!(flips(&a, &b), (2, 5));
        assert_eq!(first_divergence(&a, &b), Some(2));
        assert_eq!(first_divergence(&a, &a), None);
        assert_eq!(flips(&a, &b[..3]), (1, 3));
    }

    #[test]
    fn median_matches_python_statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn repeats_count_prompt_and_earlier_generated_tokens() {
        assert_eq!(repeats(&[1, 2], &[3, 1, 3, 4, 4]), 3);
        assert_eq!(repeats(&[], &[5, 6, 7]), 0);
    }

    #[test]
    fn bootstrap_of_constant_rates_is_degenerate() {
        assert_eq!(bootstrap_ci(&[0.25; 17], 1000, 0), [0.25, 0.25]);
        assert_eq!(bootstrap_ci(&[0.5], 10, 3), [0.5, 0.5]);
        assert_eq!(bootstrap_ci(&[], 10, 3), [0.0, 0.0]);
    }

    #[test]
    fn bootstrap_interval_brackets_the_mean_and_is_deterministic() {
        let per: Vec<f64> = (0..50).map(|i| (i % 7) as f64 / 8.0).collect();
        let mean = per.iter().sum::<f64>() / 50.0;
        let a = bootstrap_ci(&per, 2000, 0);
        assert!(a[0] < mean && mean < a[1], "{a:?} {mean}");
        assert_eq!(a, bootstrap_ci(&per, 2000, 0));
        assert_ne!(a, bootstrap_ci(&per, 2000, 1));
    }
}
