//! When does a repetition penalty flip the greedy choice? The note's closed form and gauge's own
//! two-sided derivation, both evaluated on the pre-penalty facts of a position.
//!
//! # The note's closed form (docs/PROTOCOL.md §5.1)
//! On "clean" positions — top-1 seen, `z_top > 0`, runner-up unseen — the ctrl penalty flips the
//! greedy choice iff `g < z_top·(1 − 1/θ)`, with `g = z_top − z_runner`. The note evaluates the same
//! formula on the raw logits for its fix (normalized) run too.
//!
//! # gauge's derivation (ours; the note names a "two-sided variant" but never defines it)
//! Write `f` for the penalty applied to a seen value, `t` for the top-1 (first argmax of the
//! pre-penalty row `z`), `u` for the best UNSEEN token (first argmax over `i ∉ S`) and
//! `m(z_t) = z_t − f(z_t) ≥ 0` for the margin the penalty takes off the top-1.
//!
//! * ctrl: `f(v) = v/θ` for `v > 0`, `v·θ` for `v ≤ 0`. Both branches increase and meet at 0, so
//!   `f` is strictly increasing, and `f(v) ≤ v` for θ ≥ 1.
//! * If `t ∉ S` nothing can overtake it (seen values only go down): **no flip**.
//! * If `t ∈ S`, every other seen token `j` stays below it (`f(z_j) < f(z_t)`, strictly for
//!   `j < t` since `t` is the FIRST maximum), unseen tokens keep their values: the emitted token
//!   is `t` or `u`, and **flip ⟺ `z_u > f(z_t)` ⟺ `g_u < m(z_t)`**, `g_u = z_t − z_u` (an exact
//!   tie `z_u = f(z_t)` flips only if `u < t`, greedy's first-index rule).
//! * `m(z_t) = z_t·(1 − 1/θ)` for `z_t > 0` and `(θ − 1)·|z_t|` for `z_t ≤ 0`: the margin depends on
//!   the top-1 logit itself, not only on gaps, which is exactly why adding a constant `c` to every
//!   logit (the gauge) changes decisions.
//!
//! One-sided (runner-up `r` unseen): then `u = r`, so flip ⟺ `g < m(z_t)` — the note's formula
//! for `z_t > 0`, and `g < (θ − 1)·|z_t|` for `z_t ≤ 0` (the further below zero, the easier the
//! flip). A flip emits the runner-up by construction: the note's "100% of flips land on the
//! runner-up" on clean positions is a theorem, not a finding.
//!
//! Two-sided (runner-up seen, both penalized): the runner-up can never be emitted (its penalized
//! value stays below the top-1's); the competitor is `u`, with `g_u = g + δ`, `δ = z_r − z_u ≥ 0`.
//! By signs:
//! * `z_t > 0, z_r > 0` (both on the divide branch): the pair's gap shrinks to `g/θ` but never
//!   closes; flip ⟺ `g + δ < z_t·(1 − 1/θ)`. The one-sided formula `g < z_t(1 − 1/θ)` is necessary,
//!   not sufficient: it over-predicts by `δ`.
//! * `z_t > 0 ≥ z_r` (runner-up on the multiply branch): `z_u ≤ z_r ≤ 0 < z_t/θ`, **never a flip**,
//!   at any θ.
//! * `z_t ≤ 0` (everything on the multiply branch): flip ⟺ `g + δ < (θ − 1)·|z_t|`.
//!
//! normalized: the same argument on `ℓ = log_softmax(z) ≤ 0`, where `f(ℓ) = θℓ`: flip ⟺
//! `g_u < (θ − 1)·(−ln p_t)`. Gaps are shift-invariant and so is `p_t`: no gauge left. With the
//! recorded `lse = ln Σ exp(z_i − z_t)`, `−ln p_t = lse`.
//!
//! subtractive: `f(v) = v − α`, flip ⟺ `g_u < α`.
//!
//! The closed forms are evaluated in f64 on the recorded f32 values; the decoder decides in f32
//! (fp32 rounding of `f` can in principle merge two seen values and hand the win to an earlier
//! seen token), so predictions can only miss within rounding of the boundary.

use crate::delim::facts::RowFacts;
use crate::ops::Op;

/// Which case of the derivation a position is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slice {
    /// Top-1 unseen: no penalty can flip it.
    TopUnseen,
    /// Top-1 seen, runner-up unseen, `z_top > 0`: the note's "clean" positions.
    Clean,
    /// Top-1 seen, runner-up unseen, `z_top ≤ 0`.
    OneSidedNonPositive,
    /// Top-1 and runner-up both seen.
    TwoSided,
}

/// The case of a position.
pub fn slice(f: &RowFacts) -> Slice {
    if !f.top1_seen {
        Slice::TopUnseen
    } else if f.top2_seen {
        Slice::TwoSided
    } else if f.z_top > 0.0 {
        Slice::Clean
    } else {
        Slice::OneSidedNonPositive
    }
}

/// The note's closed form: `gap < z_top·(1 − 1/θ)`.
pub fn note_predicts_flip(gap: f64, z_top: f64, theta: f64) -> bool {
    gap < z_top * (1.0 - 1.0 / theta)
}

/// The note's predictor on a position (raw logits, runner-up as the competitor).
pub fn note_prediction(f: &RowFacts, theta: f32) -> bool {
    let z_top = f64::from(f.z_top);
    note_predicts_flip(z_top - f64::from(f.z2), z_top, f64::from(theta))
}

/// ctrl's margin `m(z) = z − f(z)`: `z(1 − 1/θ)` above zero, `(θ − 1)|z|` at or below it.
pub fn ctrl_margin(z_top: f64, theta: f64) -> f64 {
    if z_top > 0.0 {
        z_top * (1.0 - 1.0 / theta)
    } else {
        (theta - 1.0) * -z_top
    }
}

/// The margin the operator takes off a seen top-1 (in the logit units where gaps are measured).
pub fn margin(op: Op, theta: f32, alpha: f32, f: &RowFacts) -> f64 {
    let theta = f64::from(theta);
    match op {
        Op::Ctrl => ctrl_margin(f64::from(f.z_top), theta),
        // −ℓ_top = lse ≥ 0, so the multiply branch always applies.
        Op::Normalized => (theta - 1.0) * f64::from(f.lse),
        Op::Subtractive => f64::from(alpha),
        #[cfg(test)]
        Op::TestNoise => 0.0,
    }
}

/// gauge's two-sided predictor: does `op` at `theta` flip this position? θ = 1 switches every
/// penalty off (no flip), as in the decoder.
pub fn predicts_flip(op: Op, theta: f32, alpha: f32, f: &RowFacts) -> bool {
    if theta == 1.0 || !f.top1_seen || f.unseen < 0 {
        return false;
    }
    let g_u = f64::from(f.z_top) - f64::from(f.z_unseen);
    g_u < margin(op, theta, alpha, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Facts for hand-made rows: top-1 = 0, runner-up = 1, best unseen = `u`.
    fn facts(z_top: f32, z2: f32, top1_seen: bool, top2_seen: bool, z_u: f32) -> RowFacts {
        RowFacts {
            top1: 0,
            z_top,
            runner: 1,
            z2,
            top1_seen,
            top2_seen,
            unseen: if top2_seen { 2 } else { 1 },
            z_unseen: if top2_seen { z_u } else { z2 },
            lse: 0.5,
        }
    }

    #[test]
    fn note_formula_on_known_gaps() {
        // z_top = 10, θ = 1.25: margin 10·(1 − 0.8) = 2
        assert!(note_predicts_flip(1.9, 10.0, 1.25));
        assert!(!note_predicts_flip(2.1, 10.0, 1.25));
        // a non-positive top-1 gets a non-positive threshold: never predicted
        assert!(!note_predicts_flip(0.1, -3.0, 1.5));
    }

    #[test]
    fn one_sided_matches_the_note_above_zero_and_flips_the_sign_below() {
        let theta = 1.25;
        // z_top = 10: 10/1.25 = 8 < 8.5 → flip; gap 1.5 < 2 as the note says
        let f = facts(10.0, 8.5, true, false, 0.0);
        assert_eq!(slice(&f), Slice::Clean);
        assert!(predicts_flip(Op::Ctrl, theta, 1.0, &f));
        assert!(note_prediction(&f, theta));
        let f = facts(10.0, 7.5, true, false, 0.0);
        assert!(!predicts_flip(Op::Ctrl, theta, 1.0, &f) && !note_prediction(&f, theta));
        // z_top = −4: penalized −5; runner-up −4.9 → flip (gap 0.9 < 0.25·4 = 1)
        let f = facts(-4.0, -4.9, true, false, 0.0);
        assert_eq!(slice(&f), Slice::OneSidedNonPositive);
        assert!(predicts_flip(Op::Ctrl, theta, 1.0, &f));
        assert!(!note_prediction(&f, theta), "the note's form misses it");
        assert!(!predicts_flip(
            Op::Ctrl,
            theta,
            1.0,
            &facts(-4.0, -5.1, true, false, 0.0)
        ));
    }

    #[test]
    fn two_sided_uses_the_best_unseen_token_by_sign_case() {
        let theta = 1.25;
        // both on the divide branch: runner-up 9.5 is penalized to 7.6 < 8; the unseen 7.9 < 8
        // does not flip though g = 0.5 < 2 (the note's form over-predicts by δ = 1.6)
        let f = facts(10.0, 9.5, true, true, 7.9);
        assert_eq!(slice(&f), Slice::TwoSided);
        assert!(note_prediction(&f, theta));
        assert!(!predicts_flip(Op::Ctrl, theta, 1.0, &f));
        assert!(predicts_flip(
            Op::Ctrl,
            theta,
            1.0,
            &facts(10.0, 9.5, true, true, 8.1)
        ));
        // runner-up on the multiply branch: every unseen value ≤ 0 < z_top/θ, never a flip
        for th in [1.1f32, 2.0, 10.0] {
            assert!(!predicts_flip(
                Op::Ctrl,
                th,
                1.0,
                &facts(0.5, -0.01, true, true, -0.02)
            ));
        }
        // everything ≤ 0: −2 → −2.5; unseen −2.4 flips, −2.6 does not
        assert!(predicts_flip(
            Op::Ctrl,
            theta,
            1.0,
            &facts(-2.0, -2.1, true, true, -2.4)
        ));
        assert!(!predicts_flip(
            Op::Ctrl,
            theta,
            1.0,
            &facts(-2.0, -2.1, true, true, -2.6)
        ));
    }

    #[test]
    fn unseen_top1_and_theta_one_never_flip() {
        let f = facts(10.0, 9.99, false, true, 9.99);
        assert_eq!(slice(&f), Slice::TopUnseen);
        for op in Op::ALL {
            assert!(!predicts_flip(op, 1.5, 1.0, &f));
            assert!(!predicts_flip(
                op,
                1.0,
                1.0,
                &facts(10.0, 9.99, true, false, 0.0)
            ));
        }
        let mut all_seen = facts(1.0, 0.5, true, true, 0.0);
        all_seen.unseen = -1;
        assert!(!predicts_flip(Op::Ctrl, 3.0, 1.0, &all_seen));
    }

    #[test]
    fn normalized_margin_depends_on_confidence_only() {
        // lse = 0.5 (= −ln p_top): θ = 1.5 takes 0.25 off; the gap to the unseen token decides
        let f = facts(30.0, 29.8, true, false, 0.0);
        assert!(predicts_flip(Op::Normalized, 1.5, 1.0, &f));
        let f = facts(30.0, 29.7, true, false, 0.0);
        assert!(!predicts_flip(Op::Normalized, 1.5, 1.0, &f));
        // the same gaps at another gauge decide the same
        let g = facts(-70.0, -70.2, true, false, 0.0);
        assert!(predicts_flip(Op::Normalized, 1.5, 1.0, &g));
        // subtractive: gap < α
        assert!(predicts_flip(
            Op::Subtractive,
            1.3,
            1.0,
            &facts(5.0, 4.1, true, false, 0.0)
        ));
        assert!(!predicts_flip(
            Op::Subtractive,
            1.3,
            1.0,
            &facts(5.0, 3.9, true, false, 0.0)
        ));
    }
}
