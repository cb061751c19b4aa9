//! `top-k`: keep the `k` largest logits, sorted descending (llama.cpp `llama_sampler_init_top_k`).
//!
//! apply is `top_k_impl`: an unsorted array gets an exact libstdc++ partial sort of its top k (heap
//! for k <= 128, bucket sort above), a sorted one is only truncated. `p` is left stale, as in
//! llama.cpp. Note the bucket path's quirk (docs/SPEC.md §6.15): a `+inf` logit lands in the lowest bucket,
//! so top-k with k > 128 drops it while k <= 128 keeps it first. gauge reproduces both; the chain
//! rejects `+inf` in the logit row, so only a stage that writes `+inf` (a logit bias) can hit this.

use crate::candidates::Candidates;
use crate::candidates::{TokenData, TokenId};
use crate::kernels::{top_k::top_k_unique, Scan};
use crate::ops::top_k_impl;
use crate::overlay::Overlay;
use crate::sampler::{FromRow, Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// Keep the `k` most likely candidates.
#[derive(Clone, Debug)]
pub struct TopK {
    k: i32,
    /// Scratch for the row scan, reused across steps.
    buf: Vec<(f32, u32)>,
}

impl TopK {
    /// The stage with the `k` most likely candidates kept.
    ///
    /// Unlike [`build`] this never returns a placeholder: an explicit stage is always in the
    /// chain, as a `llama_sampler_init_*` call is.
    pub fn new(k: i32) -> Self {
        TopK { k, buf: Vec::new() }
    }
}

/// Build the stage as llama.cpp's init function does (a `?top-k` placeholder when disabled).
pub fn build(k: i32) -> Box<dyn Sampler> {
    if k <= 0 {
        return Placeholder::boxed("?top-k");
    }
    Box::new(TopK::new(k))
}

impl Sampler for TopK {
    fn name(&self) -> &str {
        "top-k"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        top_k_impl(cur, self.k);
    }
    /// One pass over the row; exact whenever the top k are free of ties (see `scan`).
    fn apply_from_row(&mut self, row: &[f32], ov: &Overlay, cur: &mut Candidates) -> FromRow {
        let k = (self.k.max(0) as usize).min(row.len());
        match top_k_unique(row, ov, k, None, &mut self.buf) {
            Scan::Done => {}
            Scan::Ambiguous => return FromRow::Declined,
            Scan::Invalid => return FromRow::Invalid,
        }
        cur.set_data(
            self.buf.iter().map(|&(logit, id)| TokenData {
                id: id as TokenId,
                logit,
                p: 0.0,
            }),
            true,
        );
        FromRow::Done
    }
    /// The kernel reads removed ids as `-inf` and declines whenever one could be among the k
    /// (fewer than k finite allowed entries) or a tie would need the heap replay, which walks the
    /// identity layout: then its k are the k of the allowed array, in the same order.
    fn reads_keep_mask(&self) -> bool {
        true
    }
    /// Invariant: the kept set is the k largest logits, which a common shift does not change. Only
    /// the order among exactly tied logits can depend on where the 128 bucket boundaries fall.
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
        build(3).apply(&mut c);
        assert!(c.is_empty());
    }

    #[test]
    fn size_one_is_kept_and_marked_sorted() {
        let mut c = Candidates::from_logits(&[0.5]);
        build(3).apply(&mut c);
        assert_eq!(c.ids(), [0]);
        assert!(c.sorted);
    }

    #[test]
    fn k_larger_than_size_sorts_everything() {
        let mut c = Candidates::from_logits(&[0.1, 0.3, 0.2]);
        build(10).apply(&mut c);
        assert_eq!(c.ids(), [1, 2, 0]);
    }

    #[test]
    fn disabled_is_a_placeholder() {
        assert_eq!(build(0).name(), "?top-k");
        assert_eq!(build(-1).name(), "?top-k");
    }
}
