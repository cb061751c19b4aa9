//! `temp-ext`: temperature with an optional entropy-driven range ("dynamic temperature";
//! llama.cpp `llama_sampler_init_temp_ext(t, delta, exponent)`). common puts this stage in the
//! `temperature` slot with `(temp, dynatemp_range, dynatemp_exponent)`.
//!
//! * `delta <= 0`: plain `temp_impl(t)` (including the `t <= 0` argmax mask).
//! * `delta > 0` (and more than one candidate): full sort + softmax, normalised entropy
//!   `H / logf(n)` (f32, zero probabilities skipped), `T = min_t + (max_t - min_t) · powf(norm,
//!   exponent)` with `min_t = max(0, t - delta)`, `max_t = t + delta`; then `temp_impl(T)` and a
//!   softmax recomputed in **f64** (`exp` of the f64 difference, the f64 values summed, each `p`
//!   stored as f32 and then divided in f64). The array stays sorted with normalised `p`.

use crate::candidates::Candidates;
use crate::ops::{softmax_impl, temp_impl, temp_overflows};
use crate::overlay::{Overlay, Transform};
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// Temperature, optionally scaled by the normalised entropy of the current set.
#[derive(Clone, Debug)]
pub struct TempExt {
    t: f32,
    delta: f32,
    exponent: f32,
}

impl TempExt {
    /// The stage with temperature `t`, dynamic range `delta` and `exponent`.
    ///
    /// Unlike [`build`] this never returns a placeholder: an explicit stage is always in the
    /// chain, as a `llama_sampler_init_*` call is.
    pub fn new(t: f32, delta: f32, exponent: f32) -> Self {
        TempExt { t, delta, exponent }
    }
}

/// Build the stage as llama.cpp's init function does (a `?temp-ext` placeholder when disabled).
pub fn build(t: f32, delta: f32, exponent: f32) -> Box<dyn Sampler> {
    if t == 1.0 && delta <= 0.0 {
        return Placeholder::boxed("?temp-ext");
    }
    Box::new(TempExt::new(t, delta, exponent))
}

impl TempExt {
    fn apply_dynamic(&self, cur: &mut Candidates) {
        let min_temp = (self.t - self.delta).max(0.0);
        let max_temp = self.t + self.delta;
        if cur.len() <= 1 {
            return;
        }
        let max_entropy = -(1.0f32 / cur.len() as f32).ln();
        softmax_impl(cur, true);

        let mut entropy = 0.0f32;
        for t in cur.as_slice() {
            if t.p > 0.0 {
                entropy -= t.p * t.p.ln();
            }
        }
        let norm = entropy / max_entropy;
        let dyn_temp = min_temp + (max_temp - min_temp) * norm.powf(self.exponent);

        temp_impl(cur, dyn_temp);

        let s = cur.as_mut_slice();
        let max_l = s[0].logit as f64;
        let mut cum = 0.0f64;
        for t in s.iter_mut() {
            let p = (t.logit as f64 - max_l).exp();
            t.p = p as f32;
            cum += p;
        }
        for t in s.iter_mut() {
            t.p = (t.p as f64 / cum) as f32;
        }
    }
}

impl Sampler for TempExt {
    fn name(&self) -> &str {
        "temp-ext"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if self.delta > 0.0 {
            self.apply_dynamic(cur);
        } else {
            temp_impl(cur, self.t);
        }
    }
    /// Plain temperature (`delta <= 0`, `t > 0`) is a pending division on the chain's row fast
    /// path (see `temp`); the dynamic form needs the whole sorted softmax.
    fn apply_sparse(&mut self, row: &[f32], ov: &mut Overlay) -> bool {
        self.delta <= 0.0
            && self.t > 0.0
            && self.t.is_finite()
            && !(self.t < 1.0 && temp_overflows(ov.max_abs_bound(row), self.t))
            && ov.push_transform(Transform::Div(self.t))
    }
    /// Invariant: the entropy and the softmax ignore a common shift, and dividing a shift by the
    /// temperature leaves a shift (all up to f32 rounding).
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_single_are_untouched_by_the_dynamic_path() {
        let mut c = Candidates::new();
        build(0.8, 0.5, 1.0).apply(&mut c);
        assert!(c.is_empty());
        let mut c = Candidates::from_logits(&[2.0]);
        build(0.8, 0.5, 1.0).apply(&mut c);
        assert_eq!(c.as_slice()[0].logit, 2.0);
        assert_eq!(c.as_slice()[0].p, 0.0, "size 1 returns before any softmax");
    }

    #[test]
    fn uniform_input_gets_the_max_temperature() {
        // normalised entropy 1 -> T = t + delta = 2 -> logits halved
        let mut c = Candidates::from_logits(&[1.0; 4]);
        build(1.5, 0.5, 1.0).apply(&mut c);
        assert!(c.sorted);
        for t in c.as_slice() {
            assert_eq!(t.logit, 0.5);
            assert_eq!(t.p, 0.25);
        }
    }

    #[test]
    fn dynamic_output_is_sorted_and_normalised() {
        let mut c = Candidates::from_logits(&[0.1, 3.0, -1.0, 2.0, f32::NEG_INFINITY]);
        build(0.8, 0.5, 1.0).apply(&mut c);
        assert_eq!(c.ids(), [1, 3, 0, 2, 4]);
        let sum: f64 = c.as_slice().iter().map(|t| t.p as f64).sum();
        assert!((sum - 1.0).abs() < 1e-6);
    }

    #[test]
    fn zero_delta_is_plain_temperature() {
        let mut c = Candidates::from_logits(&[1.0, 2.0]);
        build(2.0, 0.0, 1.0).apply(&mut c);
        assert_eq!(c.as_slice()[1].logit, 1.0);
        assert!(!c.sorted);
    }

    #[test]
    fn placeholder_only_for_t_one_without_range() {
        assert_eq!(build(1.0, 0.0, 1.0).name(), "?temp-ext");
        assert_eq!(build(1.0, 0.5, 1.0).name(), "temp-ext");
        assert_eq!(build(0.0, 0.0, 1.0).name(), "temp-ext");
    }
}
