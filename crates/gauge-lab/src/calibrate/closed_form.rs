//! The closed-form requirement (docs/PROTOCOL.md §6): on every loop token of the unpenalized
//! (θ = 1) run — a step whose greedy token is already seen — how strong a penalty would have to be
//! to push that token below its competitor, read from the step's log-probabilities.
//!
//! * Normalized: the seen top token's `ln p_top` becomes `θ′·ln p_top`; it loses to a competitor
//!   with `ln p_c` once `θ′ > ln p_c / ln p_top`. The note's competitor is the best non-argmax token
//!   (`θ′_required`); the exact variant is the best UNSEEN token (seen competitors are penalized
//!   too). Infinite when `p_top ≥ 1 − 1e-6` or `p_c ≤ 1e-12`, as in the note.
//! * Presence (subtractive α, shift-invariant): every seen logit drops by α, so the seen top token
//!   loses exactly when `α > ln p_top − ln p_unseen` (a logit gap; gauge's addition, not the
//!   note's).
//!
//! To bring the loop rate from `loop_frac` down to an anchor's target, a share
//! `q = 1 − target/loop_frac` of loop tokens must flip; cheapest first, that needs the
//! `q`-quantile of the requirement. It reads the unpenalized trajectory only and ignores cascades
//! (one flip can derail a whole loop), so it is a static diagnostic, not a prediction.

use crate::ops::SeenSet;
use crate::run::Observer;
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};

/// `ln p_top ≥ ln(1 − 1e-6)`: p_top saturated, the requirement is infinite.
const LN_P_TOP_CEIL: f64 = -1e-6;
/// `p_c ≤ 1e-12`: the competitor underflows, the requirement is infinite.
const LN_P_FLOOR: f64 = -27.631_021_115_928_547; // ln(1e-12)

/// Stands for `ln 0` (no token with any mass), which JSON cannot hold.
const LN_ZERO: f64 = f64::MIN;

/// One loop token of the θ = 1 run: its log-probabilities (natural log, computed in f64 from the
/// f32 row; `f64::MIN` for a competitor without mass).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoopToken {
    /// Generated position.
    pub pos: usize,
    pub token: TokenId,
    pub ln_p_top: f64,
    /// Best token other than the argmax (`-inf` if none has any mass).
    pub ln_p_runner: f64,
    /// Best token outside the seen set.
    pub ln_p_runner_unseen: f64,
}

impl LoopToken {
    /// `ln p_c / ln p_top`, or `None` (infinite) under the note's saturation rules.
    fn theta_for(&self, ln_p_c: f64) -> Option<f64> {
        if self.ln_p_top >= LN_P_TOP_CEIL || ln_p_c <= LN_P_FLOOR || ln_p_c.is_nan() {
            None
        } else {
            Some(ln_p_c / self.ln_p_top)
        }
    }

    /// θ′ that makes the best non-argmax token win (`None` = infinite).
    pub fn theta_required(&self) -> Option<f64> {
        self.theta_for(self.ln_p_runner)
    }

    /// θ′ that makes the best unseen token win (`None` = infinite).
    pub fn theta_required_unseen(&self) -> Option<f64> {
        self.theta_for(self.ln_p_runner_unseen)
    }

    /// Presence α that makes the best unseen token win (`None` = no unseen token has mass).
    pub fn presence_required(&self) -> Option<f64> {
        (self.ln_p_runner_unseen > LN_ZERO).then_some(self.ln_p_top - self.ln_p_runner_unseen)
    }
}

/// The note's quantile over a population of finite values plus `n_inf` infinite ones (sorted
/// after them): index `min(n − 1, max(0, ⌈q·n⌉ − 1))`; `None` when it lands in the infinite mass or
/// the population is empty.
pub fn quantile(finite_sorted: &[f64], n_inf: usize, q: f64) -> Option<f64> {
    let n = finite_sorted.len() + n_inf;
    if n == 0 {
        return None;
    }
    let i = ((q * n as f64).ceil() as i64 - 1).clamp(0, n as i64 - 1) as usize;
    finite_sorted.get(i).copied()
}

/// A requirement's distribution over the loop tokens (`None` = infinite or no data).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Requirement {
    pub n: usize,
    pub n_infinite: usize,
    pub median: Option<f64>,
    pub p10: Option<f64>,
    pub p90: Option<f64>,
    /// Share of loop tokens whose requirement exceeds the dial's ceiling (infinite ones included).
    pub frac_above_ceiling: Option<f64>,
}

/// The population of one requirement: sorted finite values and the count of infinite ones.
#[derive(Debug, Clone, Default)]
pub struct Population {
    pub finite: Vec<f64>,
    pub n_inf: usize,
}

impl Population {
    /// Collect `req` over `loops`.
    pub fn of(loops: &[LoopToken], req: impl Fn(&LoopToken) -> Option<f64>) -> Population {
        let mut p = Population::default();
        for l in loops {
            match req(l) {
                Some(v) => p.finite.push(v),
                None => p.n_inf += 1,
            }
        }
        p.finite.sort_by(f64::total_cmp);
        p
    }

    /// The distribution summary with `ceiling` the dial's search maximum.
    pub fn describe(&self, ceiling: f64) -> Requirement {
        let n = self.finite.len() + self.n_inf;
        let above = self.finite.iter().filter(|&&v| v > ceiling).count() + self.n_inf;
        let q = |q| quantile(&self.finite, self.n_inf, q);
        Requirement {
            n,
            n_infinite: self.n_inf,
            median: q(0.5),
            p10: q(0.1),
            p90: q(0.9),
            frac_above_ceiling: (n > 0).then(|| above as f64 / n as f64),
        }
    }

    /// The static requirement for an anchor: the `q = 1 − target/loop_frac` quantile; `floor` (no
    /// penalty) when `q ≤ 0`. `Ok(None)` = infinite; `Err(())` = no loop tokens to read.
    pub fn for_target(&self, loop_frac: f64, target: f64, floor: f64) -> StaticRequirement {
        if loop_frac <= 0.0 || !loop_frac.is_finite() {
            return StaticRequirement {
                q: None,
                value: None,
                infinite: false,
            };
        }
        let q = 1.0 - target / loop_frac;
        if q <= 0.0 {
            return StaticRequirement {
                q: Some(q),
                value: Some(floor),
                infinite: false,
            };
        }
        let v = quantile(&self.finite, self.n_inf, q.min(1.0));
        StaticRequirement {
            q: Some(q),
            value: v,
            infinite: v.is_none(),
        }
    }
}

/// The static (closed-form) requirement for one anchor.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StaticRequirement {
    /// Share of loop tokens that must flip (`null` without loop tokens).
    pub q: Option<f64>,
    /// The requirement (`null` when infinite or unknown).
    pub value: Option<f64>,
    /// The quantile lands in the infinite mass.
    pub infinite: bool,
}

/// Log-probabilities of one row's argmax, its best other token and its best unseen token.
pub fn loop_token(pos: usize, row: &[f32], seen: &SeenSet, top: usize) -> LoopToken {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&z| (z as f64 - max).exp()).sum();
    let lse = max + sum.ln();
    let (mut runner, mut unseen) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for (i, &z) in row.iter().enumerate() {
        let z = z as f64;
        if i != top && z > runner {
            runner = z;
        }
        if !seen.contains(i as TokenId) && z > unseen {
            unseen = z;
        }
    }
    let ln_p = |z: f64| {
        let v = z - lse;
        if v.is_finite() {
            v
        } else {
            LN_ZERO
        }
    };
    LoopToken {
        pos,
        token: top as TokenId,
        ln_p_top: ln_p(row[top] as f64),
        ln_p_runner: ln_p(runner),
        ln_p_runner_unseen: ln_p(unseen),
    }
}

/// Records the loop tokens of one run per job (the unpenalized run of the first round).
pub(crate) struct LoopRecorder<'a> {
    /// The run index whose decisions are read.
    pub run: usize,
    /// `[job]`: loop tokens so far.
    pub loops: Vec<Vec<LoopToken>>,
    /// `[job]`: decisions so far.
    steps: Vec<usize>,
    pub bar: &'a indicatif::ProgressBar,
}

impl<'a> LoopRecorder<'a> {
    pub fn new(run: usize, jobs: usize, bar: &'a indicatif::ProgressBar) -> Self {
        LoopRecorder {
            run,
            loops: vec![Vec::new(); jobs],
            steps: vec![0; jobs],
            bar,
        }
    }
}

impl Observer for LoopRecorder<'_> {
    fn record(&mut self, job: usize, run: usize, row: &[f32], seen: &SeenSet, pick: TokenId) {
        if run != self.run {
            return;
        }
        let pos = self.steps[job];
        self.steps[job] += 1;
        if seen.contains(pick) {
            self.loops[job].push(loop_token(pos, row, seen, pick as usize));
        }
    }

    fn stepped(&mut self) {
        self.bar.inc(self.loops.len() as u64);
    }
}
