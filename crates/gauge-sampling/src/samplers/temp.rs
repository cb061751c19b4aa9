//! `temp`: plain temperature (llama.cpp `llama_sampler_init_temp`).
//!
//! `t > 0` divides every logit by `t` (a division, not a multiplication by `1/t`: the two round
//! differently). `t <= 0` keeps the first maximal logit and masks the rest to `-inf`, without
//! reordering or shrinking the array; `dist` afterwards still draws. `sorted` is left as it was.
//! common uses this stage only in the mirostat chains; the normal temperature slot is `temp-ext`.
//!
//! On the chain's row fast path, `t > 0` is recorded as a pending division in the overlay instead
//! of dividing 150k logits into a filled array: the next dense stage divides as it reads (the same
//! f32 division per element). The `t <= 0` mask depends on the whole row and takes the slow path.

use crate::candidates::Candidates;
use crate::ops::{temp_impl, temp_overflows};
use crate::overlay::{Overlay, Transform};
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// Divide the logits by a temperature.
#[derive(Clone, Debug)]
pub struct Temp {
    t: f32,
}

impl Temp {
    /// The stage with temperature `t`.
    ///
    /// Unlike [`build`] this never returns a placeholder: an explicit stage is always in the
    /// chain, as a `llama_sampler_init_*` call is.
    pub fn new(t: f32) -> Self {
        Temp { t }
    }
}

/// Build the stage as llama.cpp's init function does (a `?temp` placeholder when disabled).
pub fn build(t: f32) -> Box<dyn Sampler> {
    if t == 1.0 {
        return Placeholder::boxed("?temp");
    }
    Box::new(Temp::new(t))
}

impl Sampler for Temp {
    fn name(&self) -> &str {
        "temp"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        temp_impl(cur, self.t);
    }
    fn apply_sparse(&mut self, row: &[f32], ov: &mut Overlay) -> bool {
        self.t > 0.0
            && self.t.is_finite()
            && !(self.t < 1.0 && temp_overflows(ov.max_abs_bound(row), self.t))
            && ov.push_transform(Transform::Div(self.t))
    }
    /// Invariant: a shift `c` becomes a shift `c / t`, which softmax ignores (up to f32 rounding);
    /// the `t <= 0` argmax does not depend on a shift at all.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_set_is_untouched() {
        let mut c = Candidates::new();
        build(0.0).apply(&mut c);
        build(0.5).apply(&mut c);
        assert!(c.is_empty());
    }

    #[test]
    fn size_one_at_temp_zero_keeps_its_logit() {
        let mut c = Candidates::from_logits(&[-2.0]);
        build(0.0).apply(&mut c);
        assert_eq!(c.as_slice()[0].logit, -2.0);
    }

    #[test]
    fn negative_temp_masks_like_zero() {
        let mut c = Candidates::from_logits(&[1.0, 2.0, 0.0]);
        build(-1.0).apply(&mut c);
        let l: Vec<f32> = c.as_slice().iter().map(|t| t.logit).collect();
        assert_eq!(l, [f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY]);
        assert!(!c.sorted);
    }

    #[test]
    fn one_is_a_placeholder() {
        assert_eq!(build(1.0).name(), "?temp");
        assert_eq!(build(0.999).name(), "temp");
    }
}
