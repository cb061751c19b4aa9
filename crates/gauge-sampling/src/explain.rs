//! Explain one step of a chain: what every stage did to every candidate.
//!
//! [`explain_step`] runs the stages one by one on llama.cpp's reference path (fill the whole row,
//! then `apply` each stage) and records, per stage, each candidate's logit and probability before
//! and after, what the stage removed, the entropy of both distributions and any feedback state
//! the stage carries (mirostat's `mu`). It leaves the chain exactly as
//! [`Chain::sample_no_accept`] on the reference path would (same draws, same state), so the caller
//! accepts the selected token and moves on. The normal `sample` path is untouched: explaining is
//! a separate entry point and costs nothing when unused.
//!
//! A probability here is the softmax, in f64, of the logits the array holds: `p_before` over the
//! live candidates entering the stage, `p` over those leaving it. A candidate whose logit became
//! `-inf` (a ban, a mask) counts as removed, like one the stage dropped from the array.
//!
//! [`shift_step`] explains the same step on `logits + c` from a copy of the chain, and reports per
//! stage how far the distribution moved (`max |Δp|`): a shift-invariant chain stands still up to
//! f32 rounding, the sign-branched repeat penalty (`ctrl`) does not.

use crate::candidates::{Candidates, TokenData, TokenId};
use crate::chain::Chain;
use crate::error::{Result, SamplingError};

/// One candidate as one stage saw it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CandidateView {
    /// The token id.
    pub id: TokenId,
    /// The token's text, when the caller labelled the step ([`StepExplain::label`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Logit entering the stage (`None`: not a live candidate, or `-inf`).
    pub logit_before: Option<f32>,
    /// Logit leaving the stage (`None`: removed or `-inf`).
    pub logit: Option<f32>,
    /// Probability entering the stage.
    pub p_before: f64,
    /// Probability leaving the stage.
    pub p: f64,
}

/// What one stage did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StageExplain {
    /// llama.cpp's runtime name (`penalties`, `?top-k`, `dist`, ...).
    pub name: String,
    /// Whether the stage, as configured, ignores a constant added to every logit.
    pub shift_invariant: bool,
    /// Why it does not, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shift_reason: Option<&'static str>,
    /// Live candidates entering and leaving the stage.
    pub n_before: usize,
    /// Live candidates leaving the stage.
    pub n_after: usize,
    /// Entropy (nats) of the distribution entering and leaving the stage.
    pub entropy_before: f64,
    /// Entropy (nats) leaving the stage.
    pub entropy: f64,
    /// Candidates, most probable (before or after) first; cut by [`StepExplain::truncate`].
    pub candidates: Vec<CandidateView>,
    /// Candidates live before and gone (or `-inf`) after, most probable first.
    pub removed: Vec<CandidateView>,
    /// How many were removed in all (`removed` may be cut).
    pub n_removed: usize,
    /// Feedback state before and after the stage (e.g. mirostat's `mu`), when it has any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub state_before: Vec<(&'static str, f32)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    /// Feedback state after the stage.
    pub state: Vec<(&'static str, f32)>,
}

/// The token the chain selected.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Selected {
    /// The token id.
    pub id: TokenId,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The token's text, when the caller labelled the step.
    pub token: Option<String>,
    /// Its logit in the final array.
    pub logit: f32,
    /// Its probability in the final distribution.
    pub p: f64,
}

/// One explained step: every stage in chain order, then the selection.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StepExplain {
    /// Every stage, in chain order.
    pub stages: Vec<StageExplain>,
    /// The token the chain selected.
    pub selected: Selected,
}

/// The same step on shifted logits, next to the unshifted one.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ShiftExplain {
    /// Every logit moved by `c`.
    pub c: f32,
    /// The step on `logits + c`.
    pub step: StepExplain,
    /// Per stage, `max |p_shifted − p|` over every id (0 for an id missing on one side).
    pub max_abs_dp: Vec<f64>,
    /// Whether the shifted step selected the same token.
    pub same_token: bool,
}

/// A live array as `(id, logit, p)` with `p` the f64 softmax of the finite logits.
struct Snapshot {
    entries: Vec<(TokenId, f32, f64)>,
    entropy: f64,
}

impl Snapshot {
    fn of(cur: &Candidates) -> Self {
        let data = cur.as_slice();
        let max = data.iter().fold(f32::NEG_INFINITY, |m, t| m.max(t.logit));
        let mut entries: Vec<(TokenId, f32, f64)> = data
            .iter()
            .map(|t| {
                let w = if max.is_finite() && t.logit > f32::NEG_INFINITY {
                    (f64::from(t.logit) - f64::from(max)).exp()
                } else {
                    0.0
                };
                (t.id, t.logit, w)
            })
            .collect();
        let sum: f64 = entries.iter().map(|e| e.2).sum();
        let mut entropy = 0.0;
        if sum > 0.0 {
            for e in entries.iter_mut() {
                e.2 /= sum;
                if e.2 > 0.0 {
                    entropy -= e.2 * e.2.ln();
                }
            }
        }
        Snapshot { entries, entropy }
    }

    fn live(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.1 > f32::NEG_INFINITY)
            .count()
    }
}

fn finite(x: f32) -> Option<f32> {
    (x > f32::NEG_INFINITY).then_some(x)
}

/// Keep the `top` entries that sort first under `cmp` (all when `None`), sorted.
fn keep_top(
    v: &mut Vec<CandidateView>,
    top: Option<usize>,
    cmp: impl Fn(&CandidateView, &CandidateView) -> std::cmp::Ordering,
) {
    if let Some(k) = top {
        if k == 0 {
            v.clear();
            return;
        }
        if k < v.len() {
            v.select_nth_unstable_by(k - 1, &cmp);
            v.truncate(k);
        }
    }
    v.sort_by(cmp);
}

/// Compare two snapshots id by id: the candidates and the removed ones, most probable first (the
/// `top` of each when given), and how many were removed in all.
fn diff(
    before: &Snapshot,
    after: &Snapshot,
    n_vocab: usize,
    top: Option<usize>,
) -> (Vec<CandidateView>, Vec<CandidateView>, usize) {
    let mut after_of: Vec<Option<(f32, f64)>> = vec![None; n_vocab];
    for &(id, l, p) in &after.entries {
        if let Some(slot) = usize::try_from(id).ok().and_then(|i| after_of.get_mut(i)) {
            *slot = Some((l, p));
        }
    }
    let mut seen = vec![false; n_vocab];
    let mut candidates = Vec::with_capacity(before.entries.len());
    let mut removed = Vec::new();
    for &(id, l0, p0) in &before.entries {
        let idx = id as usize;
        seen[idx] = true;
        let (l1, p1) = after_of[idx].map_or((None, 0.0), |(l, p)| (finite(l), p));
        let view = CandidateView {
            id,
            token: None,
            logit_before: finite(l0),
            logit: l1,
            p_before: p0,
            p: p1,
        };
        if finite(l0).is_some() && l1.is_none() {
            removed.push(view.clone());
        }
        candidates.push(view);
    }
    // A stage never adds ids, but be exact if one did.
    for &(id, l, p) in &after.entries {
        if !seen[id as usize] {
            candidates.push(CandidateView {
                id,
                token: None,
                logit_before: None,
                logit: finite(l),
                p_before: 0.0,
                p,
            });
        }
    }
    let key = |c: &CandidateView| c.p.max(c.p_before);
    let n_removed = removed.len();
    keep_top(&mut candidates, top, |a, b| {
        key(b).total_cmp(&key(a)).then(a.id.cmp(&b.id))
    });
    keep_top(&mut removed, top, |a, b| {
        b.p_before.total_cmp(&a.p_before).then(a.id.cmp(&b.id))
    });
    (candidates, removed, n_removed)
}

/// Run one step of `chain` on `logits` stage by stage and record what each stage did.
///
/// The chain ends in the state `sample_no_accept` leaves (its generators drew, mirostat's `mu`
/// moved); the selected token is not accepted. Errors as `sample_no_accept`: a bad row, or no
/// selection.
pub fn explain_step(chain: &mut Chain, logits: &[f32]) -> Result<StepExplain> {
    explain_step_top(chain, logits, None)
}

/// [`explain_step`] keeping only the `top` most probable candidates and removed entries per stage
/// (the counts still describe the whole set): the same as `explain_step` then
/// [`StepExplain::truncate`], without sorting the whole vocabulary at every stage.
pub fn explain_step_top(
    chain: &mut Chain,
    logits: &[f32],
    top: Option<usize>,
) -> Result<StepExplain> {
    chain.validate_row(logits)?;
    let n_vocab = chain.n_vocab();
    let mut cur = Candidates::from_logits(logits);
    let mut before = Snapshot::of(&cur);
    let mut stages = Vec::with_capacity(chain.stages().len());
    for st in chain.stages_mut() {
        let state_before = st.explain_state();
        st.apply(&mut cur);
        let after = Snapshot::of(&cur);
        let (candidates, removed, n_removed) = diff(&before, &after, n_vocab, top);
        let shift = st.shift();
        stages.push(StageExplain {
            name: st.name().to_string(),
            shift_invariant: shift.is_invariant(),
            shift_reason: match shift {
                crate::Shift::Invariant => None,
                crate::Shift::Variant(why) => Some(why),
            },
            n_before: before.live(),
            n_after: after.live(),
            entropy_before: before.entropy,
            entropy: after.entropy,
            n_removed,
            candidates,
            removed,
            state_before,
            state: st.explain_state(),
        });
        before = after;
    }
    let chosen: Option<TokenData> = cur.selected.and_then(|i| cur.as_slice().get(i)).copied();
    let t = match chosen {
        Some(t) if t.logit > f32::NEG_INFINITY => t,
        Some(_) => return Err(SamplingError::NoFiniteLogit),
        None => {
            return Err(SamplingError::Empty(
                "no candidate was selected (the chain has no terminal sampler)".into(),
            ))
        }
    };
    let p = before
        .entries
        .iter()
        .find(|e| e.0 == t.id)
        .map_or(0.0, |e| e.2);
    Ok(StepExplain {
        stages,
        selected: Selected {
            id: t.id,
            token: None,
            logit: t.logit,
            p,
        },
    })
}

/// The same step on `logits + c` from a copy of `chain` (not touched), which must be in the state
/// it had before [`explain_step`] gave `unshifted` on `logits` (clone it first).
///
/// Compare before [`StepExplain::truncate`]: `max_abs_dp` reads every candidate.
pub fn shift_step(
    chain: &Chain,
    logits: &[f32],
    unshifted: &StepExplain,
    c: f32,
) -> Result<ShiftExplain> {
    if !c.is_finite() {
        return Err(SamplingError::param("shift", c, "a finite number"));
    }
    let shifted: Vec<f32> = logits.iter().map(|&z| z + c).collect();
    let mut copy = chain.clone();
    let step = explain_step(&mut copy, &shifted)?;
    let max_abs_dp = unshifted
        .stages
        .iter()
        .zip(&step.stages)
        .map(|(a, b)| max_abs_dp(&a.candidates, &b.candidates))
        .collect();
    Ok(ShiftExplain {
        c,
        same_token: step.selected.id == unshifted.selected.id,
        max_abs_dp,
        step,
    })
}

/// The final distribution of one step on `logits + c`, as a copy of `chain` would leave it: the
/// selected token and the `top` most probable candidates. Cheaper than [`shift_step`] (no
/// per-stage records); the playground's shift slider shows this for `ctrl` and `normalized`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FinalView {
    /// The shift added to every logit.
    pub c: f32,
    /// The token the chain selected on the shifted row.
    pub selected: TokenId,
    /// `(id, p)`, most probable first.
    pub top: Vec<(TokenId, f64)>,
}

/// See [`FinalView`]. `chain` is not touched.
pub fn final_under_shift(chain: &Chain, logits: &[f32], c: f32, top: usize) -> Result<FinalView> {
    if !c.is_finite() {
        return Err(SamplingError::param("shift", c, "a finite number"));
    }
    let shifted: Vec<f32> = logits.iter().map(|&z| z + c).collect();
    let mut copy = chain.clone().with_fast_path(false);
    let selected = copy.sample_no_accept(&shifted)?;
    let snap = Snapshot::of(copy.last_candidates());
    let mut dist: Vec<(TokenId, f64)> = snap
        .entries
        .iter()
        .filter(|e| e.2 > 0.0)
        .map(|e| (e.0, e.2))
        .collect();
    dist.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    dist.truncate(top);
    Ok(FinalView {
        c,
        selected,
        top: dist,
    })
}

/// `max |p_a(id) − p_b(id)|` over the ids of either list (an id missing counts as `p = 0`).
fn max_abs_dp(a: &[CandidateView], b: &[CandidateView]) -> f64 {
    let mut pa: Vec<(TokenId, f64)> = a.iter().map(|c| (c.id, c.p)).collect();
    let mut pb: Vec<(TokenId, f64)> = b.iter().map(|c| (c.id, c.p)).collect();
    pa.sort_by_key(|e| e.0);
    pb.sort_by_key(|e| e.0);
    let (mut i, mut j, mut worst) = (0, 0, 0.0f64);
    while i < pa.len() || j < pb.len() {
        let d = match (pa.get(i), pb.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                i += 1;
                j += 1;
                x.1 - y.1
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                i += 1;
                x.1
            }
            (Some(x), None) => {
                i += 1;
                x.1
            }
            (_, Some(y)) => {
                j += 1;
                y.1
            }
            (None, None) => break,
        };
        worst = worst.max(d.abs());
    }
    worst
}

impl StepExplain {
    /// Keep the `top` most probable candidates and removed entries of every stage (the counts
    /// `n_before`, `n_after`, `n_removed` still describe the whole set).
    pub fn truncate(&mut self, top: usize) {
        for s in &mut self.stages {
            s.candidates.truncate(top);
            s.removed.truncate(top);
        }
    }

    /// Fill every `token` field from `text_of`.
    pub fn label(&mut self, text_of: &dyn Fn(TokenId) -> String) {
        for s in &mut self.stages {
            for c in s.candidates.iter_mut().chain(s.removed.iter_mut()) {
                c.token = Some(text_of(c.id));
            }
        }
        self.selected.token = Some(text_of(self.selected.id));
    }

    /// The stage named `name` (first match).
    pub fn stage(&self, name: &str) -> Option<&StageExplain> {
        self.stages.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::ChainBuilder;

    #[test]
    fn penalties_stage_matches_the_lesson_row() {
        // the, dog, ran seen; repeat 1.5 (lesson Example 1)
        let mut chain = ChainBuilder::new(6)
            .with_penalties(64, 1.5, 0.0, 0.0)
            .with_top_k(0)
            .with_top_p(1.0)
            .with_min_p(0.0)
            .build()
            .unwrap();
        for t in [0, 4, 5] {
            chain.accept_prompt(t);
        }
        let step = explain_step(&mut chain, &[2.0, 1.0, 0.5, 0.1, -0.5, -1.0]).unwrap();
        let pen = step.stage("penalties").unwrap();
        let the = pen.candidates.iter().find(|c| c.id == 0).unwrap();
        assert!((the.logit.unwrap() - 1.3333).abs() < 1e-3);
        assert!((the.p_before - 0.534).abs() < 5e-4 && (the.p - 0.381).abs() < 5e-4);
        assert_eq!(pen.n_removed, 0);
        assert!(!pen.shift_invariant);
    }

    #[test]
    fn explaining_leaves_the_chain_where_sampling_would() {
        let row = [0.3f32, 1.2, -0.7, 2.2, 0.0, 1.9, -2.0, 0.5];
        let make = || {
            ChainBuilder::new(8)
                .with_seed(7)
                .with_xtc(0.5, 0.1)
                .build()
                .unwrap()
                .with_fast_path(false)
        };
        let (mut a, mut b) = (make(), make());
        for _ in 0..20 {
            let ta = a.sample_no_accept(&row).unwrap();
            let tb = explain_step(&mut b, &row).unwrap().selected.id;
            assert_eq!(ta, tb);
            a.accept(ta);
            b.accept(tb);
        }
    }

    #[test]
    fn shift_reports_ctrl_moving() {
        let mut chain = ChainBuilder::new(6)
            .with_penalties(64, 1.5, 0.0, 0.0)
            .build()
            .unwrap();
        for t in [0, 4, 5] {
            chain.accept_prompt(t);
        }
        let row = [2.0, 1.0, 0.5, 0.1, -0.5, -1.0];
        let copy = chain.clone();
        let step = explain_step(&mut chain, &row).unwrap();
        let s = shift_step(&copy, &row, &step, 3.0).unwrap();
        assert!(s.max_abs_dp[0] > 0.01, "{:?}", s.max_abs_dp);
    }
}
