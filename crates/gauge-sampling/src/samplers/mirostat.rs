//! `mirostat` (v1), llama.cpp's `llama_sampler_init_mirostat`: a terminal sampler that steers the
//! surprise of the drawn tokens toward `tau` by choosing a top-k from an estimated Zipf exponent.
//!
//! Each step, over the fully sorted softmax:
//! 1. `s_hat` = least-squares Zipf exponent from the top `m` probabilities (f32 sums).
//! 2. `k = powf(eps * 2^mu / (1 - n_vocab^-eps), 1/s_hat)` with `eps = s_hat - 1`, where `n_vocab`
//!    is the full vocabulary size (the paper's N), not the candidate count.
//! 3. Truncate to `max(int(k), 1)`, renormalise, draw with `discrete_distribution` from the stage's
//!    own generator (no draw when a single candidate is left), then `mu -= eta * (surprise - tau)`
//!    where the surprise is `-log2` of the *renormalised* p of the drawn token.
//!
//! `int(k)` follows the x86-64 reference build: `cvttss2si` turns NaN and values outside the i32
//! range into `i32::MIN`, which `max(., 1)` then makes 1. So an overflowing `k` (e.g. all
//! probabilities equal, `s_hat = 0`, with a base above 1) keeps one token, not the whole set, and a
//! single candidate (`s_hat = 0/0`) is handled without a special case. Rust's saturating `as i32`
//! would keep everything instead.
//!
//! # Fast path
//!
//! As the first dense stage (after `temp`, recorded by the chain as a pending division) the stage
//! reads the row directly: `SortedSoftmax` gives the exact f32 sum and the sorted top without
//! sorting the vocabulary. `s_hat` needs the top `m` probabilities, the cut only the first
//! `int(k)` entries in llama.cpp's order; a `k` that reaches deep into the vocabulary (a flat
//! distribution) makes the prefix long, and past a quarter of the row the stage falls back to the
//! filled array.

use crate::candidates::Candidates;
use crate::kernels::sorted_softmax::SortedSoftmax;
use crate::kernels::Scan;
use crate::ops::{softmax_impl, top_k_impl};
use crate::overlay::Overlay;
use crate::rng::{resolve_seed, Mt19937};
use crate::sampler::{FromRow, Sampler, Shift};

/// The live mirostat v1 stage. `mu` starts at `2 * tau` and returns there on reset.
#[derive(Clone, Debug)]
pub struct Mirostat {
    n_vocab: usize,
    seed: u32,
    tau: f32,
    eta: f32,
    m: i32,
    mu: f32,
    rng: Mt19937,
    /// Scratch of the row fast path, reused across steps.
    soft: SortedSoftmax,
}

impl Mirostat {
    /// The stage with `mu = 2 * tau` and its own generator seeded from `resolve_seed(seed)`.
    pub fn new(n_vocab: usize, seed: u32, tau: f32, eta: f32, m: i32) -> Self {
        Mirostat {
            n_vocab,
            seed,
            tau,
            eta,
            m,
            mu: 2.0 * tau,
            rng: Mt19937::new(resolve_seed(seed)),
            soft: SortedSoftmax::default(),
        }
    }

    /// The current surprise limit `mu` (the feedback state).
    pub fn mu(&self) -> f32 {
        self.mu
    }

    /// The `k` this stage would use on a sorted, softmaxed set with probabilities `p` (descending),
    /// before the `max(int(k), 1)` step. Exposed so the estimator can be checked on its own.
    pub fn estimate_k(&self, p: &[f32]) -> f32 {
        self.k_of(p.len(), |i| p[i])
    }

    /// Draw from the renormalised kept set and move `mu` (both paths end here).
    fn draw(&mut self, cur: &mut Candidates) {
        let idx = self.rng.discrete(cur.as_slice().iter().map(|t| t.p));
        cur.selected = Some(idx);
        let observed_surprise = -cur.as_slice()[idx].p.log2();
        let e = observed_surprise - self.tau;
        self.mu -= self.eta * e;
    }

    /// `estimate_k` over any indexable set of probabilities (the candidate array, without copying).
    #[inline]
    fn k_of(&self, n: usize, p: impl Fn(usize) -> f32) -> f32 {
        // `size_t(m - 1)`: a non-positive m wraps to a huge bound, so only the set size limits the loop.
        let limit = self.m.wrapping_sub(1) as usize;
        let mut sum_ti_bi = 0.0f32;
        let mut sum_ti_sq = 0.0f32;
        let mut i = 0usize;
        while i < limit && i + 1 < n {
            let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b_i = (p(i) / p(i + 1)).ln();
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
            i += 1;
        }
        let s_hat = sum_ti_bi / sum_ti_sq;
        let eps = s_hat - 1.0;
        // n_vocab is an int32 in llama.cpp, converted to float for powf.
        let n_vocab = self.n_vocab as i32 as f32;
        ((eps * 2.0f32.powf(self.mu)) / (1.0 - n_vocab.powf(-eps))).powf(1.0 / s_hat)
    }
}

/// C++ `int(x)` for a float as GCC emits it on x86-64 (`cvttss2si`): truncation toward zero, and
/// the "integer indefinite" `i32::MIN` for NaN or anything outside the i32 range.
#[inline]
pub(crate) fn x86_float_to_int(x: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        x as i32
    } else {
        i32::MIN
    }
}

/// Build the stage as llama.cpp's init function does (mirostat has no placeholder form).
pub fn build(n_vocab: usize, seed: u32, tau: f32, eta: f32, m: i32) -> Box<dyn Sampler> {
    Box::new(Mirostat::new(n_vocab, seed, tau, eta, m))
}

impl Sampler for Mirostat {
    fn name(&self) -> &str {
        "mirostat"
    }

    fn apply(&mut self, cur: &mut Candidates) {
        // llama.cpp asserts here; an empty set has nothing to select.
        if cur.is_empty() {
            cur.selected = None;
            return;
        }
        softmax_impl(cur, true);
        let s = cur.as_slice();
        let k = self.k_of(s.len(), |i| s[i].p);
        top_k_impl(cur, x86_float_to_int(k).max(1));
        softmax_impl(cur, true);
        self.draw(cur);
    }

    /// The same step from "row + overlay" without sorting the vocabulary (see the module docs).
    fn apply_from_row(&mut self, row: &[f32], ov: &Overlay, cur: &mut Candidates) -> FromRow {
        match self.soft.run(row, ov) {
            Scan::Done => {}
            Scan::Ambiguous => return FromRow::Declined,
            Scan::Invalid => return FromRow::Invalid,
        }
        let n = row.len();
        // s_hat reads p_0 .. p_{min(m, n) - 1}
        let need = (self.m.wrapping_sub(1) as usize).saturating_add(1).min(n);
        if !self.soft.ensure_len(row, ov, need) {
            return FromRow::Declined;
        }
        // top_k_impl on the sorted set keeps min(max(int(k), 1), n); every candidate sum (see
        // SortedSoftmax::sum_candidate) must give the same count, or the sum is settled first
        let keep_for = |this: &Self, sum: f32| {
            let sorted = this.soft.sorted();
            let k = this.k_of(n, |i| sorted[i].e / sum);
            (x86_float_to_int(k).max(1) as usize).min(n)
        };
        let mut keep = keep_for(self, self.soft.sum_candidate(0));
        if (1..self.soft.n_sum_candidates())
            .any(|j| keep_for(self, self.soft.sum_candidate(j)) != keep)
        {
            match self
                .soft
                .resolve_sum(row, ov)
                .then(|| self.soft.sum())
                .flatten()
            {
                Some(s) => keep = keep_for(self, s),
                None => return FromRow::Declined,
            }
        }
        if keep > n / 4 || !self.soft.fix_order(row, ov, keep) {
            return FromRow::Declined;
        }
        self.soft.write_softmax_of_prefix(keep, cur);
        self.draw(cur);
        FromRow::Done
    }

    fn explain_state(&self) -> Vec<(&'static str, f32)> {
        vec![("mu", self.mu)]
    }

    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.rng = Mt19937::new(resolve_seed(self.seed));
    }

    /// Invariant: everything it computes comes from softmax probabilities and their order.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}
