//! `top-n-sigma`: mask every candidate more than `n` standard deviations below the top logit
//! (llama.cpp `llama_sampler_init_top_n_sigma(n)`).
//!
//! Over the logits that are not `-inf`: `max` (starting from `data[0]`), f32 `sum` and `count`,
//! `mean = sum / count`; `acc += pow(l - mean, 2)` where C++ `pow(float, int)` is a **double** pow
//! rounded back to f32 by each `+=`; **population** std `sqrt(acc / count)`. Candidates with
//! `logit < max - n·std` become `-inf`. Nothing is reordered or removed and `sorted` is untouched:
//! the masked entries stay in the array and reach later stages (typical's NaN in llama.cpp,
//! docs/SPEC.md §6.14, which gauge's typical avoids).
//!
//! On the chain's row fast path the stage does not compute its cut: one vectorised pass bounds it
//! rigorously (`band::sigma_band`) and the mask is recorded as a lazy mask in the overlay, with
//! `exact_cut` to compute the cut. That exact cut, with llama.cpp's sequential f32 sums, is
//! computed only if a later reader meets an entry inside the bound's band (see `overlay`); top-k
//! right after it usually never does.

mod band;

use crate::candidates::Candidates;
use crate::ops::top_n_sigma_cut;
use crate::overlay::{LazyCut, Overlay, StageValues};
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;
use band::{sigma_band, SigmaBand};

/// The stage's exact cut over the values it saw (`-inf`, masking nothing, for fewer than two):
/// what the overlay calls when a reader needs the lazy mask's exact cut.
fn exact_cut(values: &StageValues<'_>, n: f32) -> f32 {
    top_n_sigma_cut(|| values.iter(), n).unwrap_or(f32::NEG_INFINITY)
}

/// Mask logits far below the maximum, measured in standard deviations.
#[derive(Clone, Debug)]
pub struct TopNSigma {
    n: f32,
}

impl TopNSigma {
    /// The stage with logits within `n` standard deviations of the maximum kept.
    ///
    /// Unlike [`build`] this never returns a placeholder: an explicit stage is always in the
    /// chain, as a `llama_sampler_init_*` call is.
    pub fn new(n: f32) -> Self {
        TopNSigma { n }
    }
}

/// Build the stage as llama.cpp's init function does (a `?top-n-sigma` placeholder when disabled).
pub fn build(n: f32) -> Box<dyn Sampler> {
    if n <= 0.0 {
        return Placeholder::boxed("?top-n-sigma");
    }
    Box::new(TopNSigma::new(n))
}

impl Sampler for TopNSigma {
    fn name(&self) -> &str {
        "top-n-sigma"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.n <= 0.0 {
            return;
        }
        let s = cur.as_mut_slice();
        let Some(cut) = top_n_sigma_cut(|| s.iter().map(|t| t.logit), self.n) else {
            return;
        };
        for t in s.iter_mut() {
            if t.logit < cut {
                t.logit = f32::NEG_INFINITY;
            }
        }
    }
    /// Record the mask as a lazy transform with a bound on its cut (see the module docs). `false`
    /// (take the slow path) for NaN/+inf, which the chain then reports, or when two transforms are
    /// already pending.
    fn apply_sparse(&mut self, row: &[f32], ov: &mut Overlay) -> bool {
        if self.n <= 0.0 || row.len() <= 1 {
            return true;
        }
        // its band is over the whole row; with an allowed set it must see only the allowed array
        if ov.keep_mask().is_some() {
            return false;
        }
        ov.prepare();
        match sigma_band(row, ov, self.n) {
            SigmaBand::Invalid => false,
            SigmaBand::NoMask => true,
            SigmaBand::Band(lo, hi) => ov.push_lazy_mask(
                lo,
                hi,
                LazyCut {
                    f: exact_cut,
                    arg: self.n,
                },
            ),
        }
    }
    /// Invariant: `max - n·std` moves with a common shift (and scales with temperature), so the
    /// masked set is the same up to f32 rounding.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(c: &Candidates) -> Vec<f32> {
        c.as_slice().iter().map(|t| t.logit).collect()
    }

    #[test]
    fn empty_and_single_are_untouched() {
        let mut c = Candidates::new();
        build(1.0).apply(&mut c);
        assert!(c.is_empty());
        let mut c = Candidates::from_logits(&[-7.0]);
        build(1.0).apply(&mut c);
        assert_eq!(logits(&c), [-7.0]);
    }

    #[test]
    fn population_std_over_finite_logits_only() {
        // finite logits 0, 2, 1: mean 1, population std sqrt(2/3) ~ 0.816 (the sample std would
        // be 1 and keep the 1.0) -> cut 1.18: 0 and 1 are masked; the -inf does not count
        let mut c = Candidates::from_logits(&[0.0, 2.0, f32::NEG_INFINITY, 1.0]);
        build(1.0).apply(&mut c);
        assert_eq!(
            logits(&c),
            [f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY, f32::NEG_INFINITY]
        );
        assert_eq!(c.len(), 4, "size unchanged");
        assert_eq!(c.ids(), [0, 1, 2, 3], "order unchanged");
    }

    #[test]
    fn all_minus_inf_is_left_alone() {
        let mut c = Candidates::from_logits(&[f32::NEG_INFINITY; 3]);
        build(1.0).apply(&mut c);
        assert_eq!(logits(&c), [f32::NEG_INFINITY; 3]);
    }

    #[test]
    fn equal_logits_keep_everything() {
        let mut c = Candidates::from_logits(&[0.5; 5]);
        build(0.1).apply(&mut c);
        assert_eq!(logits(&c), [0.5; 5]);
    }

    #[test]
    fn non_positive_n_is_a_placeholder() {
        assert_eq!(build(0.0).name(), "?top-n-sigma");
        assert_eq!(build(-1.0).name(), "?top-n-sigma");
    }

    #[test]
    fn lazy_sigma_mask_uses_the_values_it_saw_even_after_later_edits() {
        // finite 0, 2, 1 (and an edit 5 -> 1 before the mask): mean 1, population std sqrt(2/3),
        // cut 2 - 0.816 = 1.18; a later edit of id 0 to 9 must not change the cut
        let row = [0.0f32, 2.0, f32::NEG_INFINITY, 5.0];
        let mut ov = Overlay::default();
        ov.reset(row.len());
        ov.set(3, 1.0);
        let cut = LazyCut {
            f: exact_cut,
            arg: 1.0,
        };
        assert!(ov.push_lazy_mask(-100.0, 100.0, cut));
        assert!(!ov.push_lazy_mask(0.0, 0.0, cut), "one lazy mask");
        ov.set(0, 9.0);
        let cut = ov.lazy_cut(&row);
        assert!((cut - (2.0 - (2.0f32 / 3.0).sqrt())).abs() < 1e-6, "{cut}");
        let got: Vec<f32> = (0..4).map(|i| ov.get(&row, i)).collect();
        assert_eq!(got, [9.0, 2.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        let mut c = Candidates::new();
        ov.materialize(&row, &mut c);
        let filled: Vec<f32> = c.as_slice().iter().map(|t| t.logit).collect();
        assert_eq!(filled, got);
    }
}
