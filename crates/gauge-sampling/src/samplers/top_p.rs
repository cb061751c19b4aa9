//! `top-p` (nucleus): keep the smallest prefix, in descending probability, whose f32 running sum
//! reaches `p` (llama.cpp `llama_sampler_init_top_p(p, min_keep)`).
//!
//! Exact behaviour reproduced:
//! * probabilities come from `softmax_impl(cur, false)` over the current set (no sort first, so
//!   `max` is `data[0]` when the array is already sorted);
//! * the cut is `cum >= p && i + 1 >= min_keep` on an **f32** running sum (`>=`, unlike typical's
//!   `>`); if rounding keeps the sum below `p`, everything is kept;
//! * an unsorted array of more than 1024 candidates is not fully sorted up front: the top 256 are
//!   bucket-sorted into a side buffer, and only if the sum has not reached `p` after 256 candidates
//!   is the **whole** array bucket-sorted into the buffer (llama.cpp's adaptive path). The survivors
//!   are then copied back. Smaller unsorted arrays are sorted in place.
//! * the output is sorted descending with `sorted = true`; `p` keeps the pre-truncation softmax.
//!
//! The side buffer lives in the stage (llama.cpp's `buf_sort`), so steady-state steps allocate
//! nothing.

use crate::candidates::Candidates;
use crate::ops::{partial_sort_inplace, softmax_impl};
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;
use crate::sort::BucketSorter;

/// Above this many unsorted candidates, top-p sorts lazily through the side buffer.
const ADAPTIVE_MIN: usize = 1024;
/// Size of the first lazy sort.
const ADAPTIVE_K: usize = 256;

/// Nucleus truncation.
#[derive(Clone, Debug)]
pub struct TopP {
    p: f32,
    min_keep: usize,
    buf: BucketSorter,
}

impl TopP {
    /// The stage with nucleus mass `p`, keeping at least `min_keep`.
    ///
    /// Unlike [`build`] this never returns a placeholder: an explicit stage is always in the
    /// chain, as a `llama_sampler_init_*` call is.
    pub fn new(p: f32, min_keep: usize) -> Self {
        TopP {
            p,
            min_keep,
            buf: BucketSorter::new(),
        }
    }
}

/// Build the stage as llama.cpp's init function does (a `?top-p` placeholder when disabled).
pub fn build(p: f32, min_keep: usize) -> Box<dyn Sampler> {
    if p >= 1.0 {
        return Placeholder::boxed("?top-p");
    }
    Box::new(TopP::new(p, min_keep))
}

impl Sampler for TopP {
    fn name(&self) -> &str {
        "top-p"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        // llama.cpp's softmax asserts on an empty array; an empty set has nothing to truncate
        if self.p >= 1.0 || cur.is_empty() {
            return;
        }
        softmax_impl(cur, false);
        let size = cur.len();
        let lazy = !cur.sorted && size > ADAPTIVE_MIN;
        let mut k = size;
        if lazy {
            k = ADAPTIVE_K.min(size);
            self.buf.sort(cur.as_slice(), k);
        } else if !cur.sorted {
            partial_sort_inplace(cur, size);
        }

        let mut cum = 0.0f32;
        let mut last_idx = size;
        for i in 0..size {
            let pi = if lazy {
                self.buf.buf()[i].p
            } else {
                cur.as_slice()[i].p
            };
            cum += pi;
            if cum >= self.p && i + 1 >= self.min_keep {
                last_idx = i + 1;
                break;
            }
            // side buffer used up: sort everything. (llama.cpp re-sorts once more at i == size-1,
            // which reproduces the same buffer, so that no-op is skipped.)
            if lazy && i + 1 == k && k < size {
                k = size;
                self.buf.sort(cur.as_slice(), k);
            }
        }

        if lazy {
            cur.as_mut_slice()[..last_idx].copy_from_slice(&self.buf.buf()[..last_idx]);
            cur.sorted = true;
        }
        cur.truncate(last_idx);
    }
    /// Invariant: softmax, and so the nucleus, ignores a common shift (up to f32 rounding).
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
        let mut c = Candidates::from_logits(&[1.0]);
        build(0.5, 0).apply(&mut c);
        assert_eq!(c.ids(), [0]);
        assert!(c.sorted);
    }

    #[test]
    fn min_keep_overrides_the_cut() {
        // p = 0 keeps one token unless min_keep asks for more
        let mut c = Candidates::from_logits(&[0.0, 3.0, 1.0, 2.0]);
        build(0.0, 3).apply(&mut c);
        assert_eq!(c.ids(), [1, 3, 2]);
    }

    #[test]
    fn min_keep_above_size_keeps_everything() {
        let mut c = Candidates::from_logits(&[0.0, 3.0]);
        build(0.0, 10).apply(&mut c);
        assert_eq!(c.ids(), [1, 0]);
    }

    #[test]
    fn lazy_path_matches_the_full_sort_path() {
        // 2000 unsorted candidates (lazy path) vs the same set marked sorted after a full sort
        let logits: Vec<f32> = (0..2000)
            .map(|i| ((i * 7919) % 2000) as f32 / 400.0)
            .collect();
        for p in [0.01f32, 0.3, 0.9, 0.999] {
            let mut lazy = Candidates::from_logits(&logits);
            build(p, 1).apply(&mut lazy);
            let mut full = Candidates::from_logits(&logits);
            partial_sort_inplace(&mut full, 2000);
            build(p, 1).apply(&mut full);
            assert_eq!(lazy.ids(), full.ids(), "p={p}");
            assert!(lazy.sorted);
        }
    }

    #[test]
    fn p_at_least_one_is_a_placeholder() {
        assert_eq!(build(1.0, 1).name(), "?top-p");
        assert_eq!(build(0.95, 1).name(), "top-p");
    }
}
