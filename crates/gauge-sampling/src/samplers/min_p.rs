//! `min-p`: keep candidates whose probability is at least `p` times the top one
//! (llama.cpp `llama_sampler_init_min_p(p, min_keep)`).
//!
//! Computed in **logit space**, never with probabilities: keep `logit >= max + logf(p)` (f32 add).
//! * Unsorted input first tries the fast path: one pass for the max (starting from `-FLT_MAX`, as
//!   llama.cpp does), keep the survivors **in their input order**. If at least one and at least
//!   `min_keep` survive, that is the result and `sorted` stays false.
//! * Otherwise (sorted input, or the fast path failed: `p > 1`, too few survivors, all `-inf`) the
//!   array is fully sorted and cut at the first `logit < min && i >= min_keep`, keeping at least 1.
//!
//! llama.cpp's fast path collects survivors in a fresh vector; here a counting pass decides first
//! and the compaction is done in place, so nothing is allocated and a failed attempt leaves the
//! array untouched, exactly as the copy-back-on-success does.

use crate::candidates::Candidates;
use crate::ops::partial_sort_inplace;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// Relative-probability floor.
#[derive(Clone, Debug)]
pub struct MinP {
    p: f32,
    min_keep: usize,
}

impl MinP {
    /// The stage with the relative-probability floor `p`, keeping at least `min_keep`.
    ///
    /// Unlike [`build`] this never returns a placeholder: an explicit stage is always in the
    /// chain, as a `llama_sampler_init_*` call is.
    pub fn new(p: f32, min_keep: usize) -> Self {
        MinP { p, min_keep }
    }
}

/// Build the stage as llama.cpp's init function does (a `?min-p` placeholder when disabled).
pub fn build(p: f32, min_keep: usize) -> Box<dyn Sampler> {
    if p <= 0.0 {
        return Placeholder::boxed("?min-p");
    }
    Box::new(MinP::new(p, min_keep))
}

impl MinP {
    /// The unsorted fast path; returns false (array untouched) when llama.cpp would fall back.
    fn apply_unsorted(&self, cur: &mut Candidates) -> bool {
        let s = cur.as_mut_slice();
        let mut max_logit = -f32::MAX;
        for t in s.iter() {
            if max_logit < t.logit {
                max_logit = t.logit;
            }
        }
        let min_logit = max_logit + self.p.ln();
        let kept = s.iter().filter(|t| t.logit >= min_logit).count();
        if kept == 0 || kept < self.min_keep {
            return false;
        }
        let mut w = 0;
        for r in 0..s.len() {
            if s[r].logit >= min_logit {
                s[w] = s[r];
                w += 1;
            }
        }
        cur.truncate(kept);
        true
    }
}

impl Sampler for MinP {
    fn name(&self) -> &str {
        "min-p"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.p <= 0.0 || cur.is_empty() {
            return;
        }
        if !cur.sorted && self.apply_unsorted(cur) {
            return;
        }
        if !cur.sorted {
            let n = cur.len();
            partial_sort_inplace(cur, n);
        }
        let s = cur.as_slice();
        let min_logit = s[0].logit + self.p.ln();
        let mut i = 1;
        while i < s.len() {
            if s[i].logit < min_logit && i >= self.min_keep {
                break;
            }
            i += 1;
        }
        cur.truncate(i);
    }
    /// Invariant: `logit >= max + logf(p)` compares differences of logits (up to f32 rounding).
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
        build(0.1, 1).apply(&mut c);
        assert!(c.is_empty());
    }

    #[test]
    fn size_one_is_kept_even_above_one() {
        let mut c = Candidates::from_logits(&[0.0]);
        build(2.0, 0).apply(&mut c);
        assert_eq!(c.ids(), [0]);
    }

    #[test]
    fn fast_path_keeps_input_order() {
        // threshold 2 + logf(0.3) = 0.796
        let mut c = Candidates::from_logits(&[1.0, -5.0, 2.0, 1.5]);
        build(0.3, 1).apply(&mut c);
        assert_eq!(c.ids(), [0, 2, 3]);
        assert!(!c.sorted);
    }

    #[test]
    fn min_keep_forces_the_sorted_fallback() {
        // only id 2 passes p = 0.9, but min_keep = 2 -> sorted path keeps the top two
        let mut c = Candidates::from_logits(&[1.0, -5.0, 2.0, 0.0]);
        build(0.9, 2).apply(&mut c);
        assert_eq!(c.ids(), [2, 0]);
        assert!(c.sorted);
    }

    #[test]
    fn all_minus_inf_falls_back_and_keeps_everything() {
        // fast path: max starts at -FLT_MAX, nothing is >= it, so it fails; the sorted path's
        // threshold is -inf + logf(p) = -inf and no logit is below it
        let mut c = Candidates::from_logits(&[f32::NEG_INFINITY; 3]);
        build(0.5, 0).apply(&mut c);
        assert_eq!(c.len(), 3);
        assert!(c.sorted);
    }

    #[test]
    fn zero_is_a_placeholder() {
        assert_eq!(build(0.0, 1).name(), "?min-p");
    }
}
