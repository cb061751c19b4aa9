//! `typical`: locally typical sampling (llama.cpp `llama_sampler_init_typical(p, min_keep)`).
//!
//! Keep the candidates whose surprise `-log p` is closest to the entropy, in that order, until their
//! probabilities add up to more than `p`:
//! 1. `softmax_impl(cur, true)`: full sort, `sorted = true`;
//! 2. `entropy = Σ -p·logf(p)` (f32, array order);
//! 3. `shifted_i = fabsf(-logf(p_i) - entropy)`;
//! 4. indices sorted by `shifted` ascending with **libstdc++'s `std::sort`** (unstable: tied scores
//!    come out in introsort order, e.g. `typical({0.4,0.2,0.2,0.2}, 0.5)` gives ids `[1,3,2]`);
//! 5. cut at `cum > p && (min_keep == 0 || i >= min_keep - 1)` (strict `>`, f32 running sum);
//! 6. the array is rewritten in **typicality order**, `sorted = false`, `p` stays the
//!    pre-truncation softmax.
//!
//! # Deliberate deviation from llama.cpp
//!
//! llama.cpp has no guard for `p == 0` in step 2: a masked candidate (a `-inf` logit left by
//! top-n-sigma, temp 0 or a `-inf` logit bias, or a logit so far below the max that `expf`
//! underflows) contributes `0 · logf(0) = 0 · -inf = NaN`, the
//! entropy becomes NaN, every sort key is NaN, and the cut depends on how introsort shuffles NaN
//! keys (docs/SPEC.md §6.14). Here a `p == 0` candidate contributes 0 (the limit `p·log p → 0`, and what
//! temp-ext already does). Its own score is then `+inf`, so it sorts last and is only kept if
//! everything else is. The result differs from llama.cpp only in cases where llama.cpp's output is
//! NaN-driven. Pinned by `typical_with_a_masked_candidate_has_finite_entropy`.
//!
//! Scratch vectors live in the stage, so steady-state steps allocate nothing.

use crate::candidates::{Candidates, TokenData};
use crate::ops::softmax_impl;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;
use crate::sort::sort_by;

/// Locally typical truncation.
#[derive(Clone, Debug)]
pub struct Typical {
    p: f32,
    min_keep: usize,
    shifted: Vec<f32>,
    indices: Vec<usize>,
    out: Vec<TokenData>,
}

impl Typical {
    /// The stage with typical mass `p`, keeping at least `min_keep`.
    ///
    /// Unlike [`build`] this never returns a placeholder: an explicit stage is always in the
    /// chain, as a `llama_sampler_init_*` call is.
    pub fn new(p: f32, min_keep: usize) -> Self {
        Typical {
            p,
            min_keep,
            shifted: Vec::new(),
            indices: Vec::new(),
            out: Vec::new(),
        }
    }
}

/// Build the stage as llama.cpp's init function does (a `?typical` placeholder when disabled).
pub fn build(p: f32, min_keep: usize) -> Box<dyn Sampler> {
    if p >= 1.0 {
        return Placeholder::boxed("?typical");
    }
    Box::new(Typical::new(p, min_keep))
}

/// The entropy `Σ -p·logf(p)` in f32, array order, with `0·log 0 = 0` (see the module docs).
fn entropy(s: &[TokenData]) -> f32 {
    let mut h = 0.0f32;
    for t in s {
        if t.p != 0.0 {
            h += -t.p * t.p.ln();
        }
    }
    h
}

impl Sampler for Typical {
    fn name(&self) -> &str {
        "typical"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        // llama.cpp's softmax asserts on an empty array; an empty set has nothing to truncate
        if self.p >= 1.0 || cur.is_empty() {
            return;
        }
        softmax_impl(cur, true);
        let s = cur.as_slice();
        let h = entropy(s);

        self.shifted.clear();
        self.shifted.extend(s.iter().map(|t| (-t.p.ln() - h).abs()));
        self.indices.clear();
        self.indices.extend(0..s.len());
        let shifted = &self.shifted;
        sort_by(&mut self.indices, |&a, &b| shifted[a] < shifted[b]);

        let mut cum = 0.0f32;
        let mut last_idx = self.indices.len();
        for (i, &idx) in self.indices.iter().enumerate() {
            cum += s[idx].p;
            if cum > self.p && (self.min_keep == 0 || i >= self.min_keep - 1) {
                last_idx = i + 1;
                break;
            }
        }

        self.out.clear();
        self.out
            .extend(self.indices[..last_idx].iter().map(|&idx| s[idx]));
        cur.as_mut_slice()[..last_idx].copy_from_slice(&self.out);
        cur.truncate(last_idx);
        cur.sorted = false;
    }
    /// Invariant: it only reads softmax probabilities, which ignore a common shift (up to f32
    /// rounding).
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_set_stays_empty() {
        let mut c = Candidates::new();
        build(0.5, 1).apply(&mut c);
        assert!(c.is_empty());
    }

    #[test]
    fn size_one_is_kept() {
        let mut c = Candidates::from_logits(&[0.3]);
        build(0.5, 0).apply(&mut c);
        assert_eq!(c.ids(), [0]);
        assert_eq!(c.as_slice()[0].p, 1.0);
        assert!(!c.sorted, "typical always clears sorted");
    }

    #[test]
    fn min_keep_keeps_at_least_that_many() {
        let mut c = Candidates::from_logits(&[5.0, 0.0, -1.0, -2.0]);
        build(0.0, 3).apply(&mut c);
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn typical_with_a_masked_candidate_has_finite_entropy() {
        // Regression for the deliberate deviation: llama.cpp computes 0 * logf(0) = NaN here and
        // the cut is decided by NaN comparisons. gauge treats 0 log 0 as 0.
        let logits = [0.0f32, -1.0, -2.0, f32::NEG_INFINITY];
        let mut c = Candidates::from_logits(&logits);
        softmax_impl(&mut c, true);
        let h = entropy(c.as_slice());
        assert!(h.is_finite() && h > 0.0, "entropy {h}");

        let mut c = Candidates::from_logits(&logits);
        build(0.9, 0).apply(&mut c);
        assert!(c.as_slice().iter().all(|t| t.p.is_finite()));
        assert!(
            !c.ids().contains(&3),
            "the masked candidate has score +inf and is cut"
        );

        // and the result equals the same set without the masked candidate
        let mut d = Candidates::from_logits(&logits[..3]);
        build(0.9, 0).apply(&mut d);
        assert_eq!(c.ids(), d.ids());
    }

    #[test]
    fn masked_candidate_is_kept_only_when_everything_is() {
        let mut c = Candidates::from_logits(&[0.0, f32::NEG_INFINITY]);
        build(0.999_999_9, 2).apply(&mut c);
        assert_eq!(c.ids(), [0, 1]);
    }
}
