//! The FIXCAL matching rule (docs/PROTOCOL.md §6, the note's `bisect_match`), written as a replay
//! over the evaluations made so far: it returns the verdict, or the one dial value it needs next.
//! Replaying from the start every round keeps no search state, so a resumed run (whose cache is
//! the raw file) takes exactly the same path as an uninterrupted one.
//!
//! Per anchor and metric, with target `t` (the raw metric at the anchor), `s = sign(metric)` and
//! tolerance `tol`:
//! 1. TRIVIAL if the dial at its low end already suppresses enough: `s·m(lo) ≥ s·t − tol`;
//! 2. else UNREACHABLE if the high end falls short by more than `tol`: `s·m(hi) < s·t − tol`
//!    (reported with the achieved value and the shortfall `|m(hi) − t|`, never extrapolated);
//! 3. else bisect: `mid = (lo + hi)/2`; MATCHED at the first mid with `|m − t| ≤ tol`; if `s·m < s·t`
//!    (too little suppression) `lo = mid`, else `hi = mid`; after `max_iters` midpoints, MATCHED at
//!    `hi` (the smallest evaluated value reaching the anchor's suppression) with `converged = false`.

use super::metrics::Metric;
use serde::{Deserialize, Serialize};

/// How a dial matched an anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    /// A dial value within tolerance of the target was found (or, not converged, the upper bracket).
    Matched,
    /// The dial's low end (no penalty) already suppresses as much as the anchor.
    Trivial,
    /// The dial's high end still suppresses less than the anchor, by more than the tolerance.
    Unreachable,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Matched => "MATCHED",
            Verdict::Trivial => "TRIVIAL",
            Verdict::Unreachable => "UNREACHABLE",
        })
    }
}

/// The search interval and budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Search {
    /// The dial's no-penalty end (θ′ = 1, α = 0).
    pub lo: f64,
    /// The ceiling (θ′ = 10 in the note).
    pub hi: f64,
    /// Most midpoints evaluated (12 in the note).
    pub max_iters: usize,
}

/// The outcome for one (anchor, metric, dial).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatchResult {
    pub metric: Metric,
    /// The raw metric at the anchor.
    pub target: f64,
    pub verdict: Verdict,
    /// The matched dial value (`lo` for TRIVIAL, `null` for UNREACHABLE).
    pub value: Option<f64>,
    /// The metric at `value` (at the ceiling for UNREACHABLE).
    pub achieved: f64,
    /// `achieved − target`.
    pub delta: f64,
    /// UNREACHABLE only: `|achieved − target|`.
    pub shortfall: Option<f64>,
    /// Within tolerance (false for UNREACHABLE and for an exhausted budget).
    pub converged: bool,
    /// The last bracket `[lo, hi]` (`null` for UNREACHABLE).
    pub bracket: Option<[f64; 2]>,
    /// Midpoints evaluated.
    pub iters: usize,
}

/// One replay: done, or the dial value that must be evaluated before it can go on.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Done(MatchResult),
    Need(f64),
}

/// Replay the matching rule for `metric` towards `target`; `metric_at(v)` is the metric at dial
/// value `v` if it was evaluated.
pub fn find_match(
    metric: Metric,
    target: f64,
    search: Search,
    metric_at: impl Fn(f64) -> Option<f64>,
) -> Step {
    let (s, tol) = (metric.sign(), metric.tolerance());
    let need = |v: f64| metric_at(v).ok_or(Step::Need(v));
    let run = || -> Result<MatchResult, Step> {
        let result = |verdict: Verdict,
                      value: Option<f64>,
                      achieved: f64,
                      converged: bool,
                      bracket: Option<[f64; 2]>,
                      iters: usize| MatchResult {
            metric,
            target,
            verdict,
            value,
            achieved,
            delta: achieved - target,
            shortfall: (verdict == Verdict::Unreachable).then(|| (achieved - target).abs()),
            converged,
            bracket,
            iters,
        };
        let m_lo = need(search.lo)?;
        if s * m_lo >= s * target - tol {
            let b = Some([search.lo, search.lo]);
            return Ok(result(Verdict::Trivial, Some(search.lo), m_lo, true, b, 0));
        }
        let m_hi = need(search.hi)?;
        if s * m_hi < s * target - tol {
            return Ok(result(Verdict::Unreachable, None, m_hi, false, None, 0));
        }
        let (mut lo, mut hi, mut hi_val) = (search.lo, search.hi, m_hi);
        for it in 1..=search.max_iters {
            let mid = 0.5 * (lo + hi);
            let m = need(mid)?;
            if (m - target).abs() <= tol {
                return Ok(result(
                    Verdict::Matched,
                    Some(mid),
                    m,
                    true,
                    Some([lo, hi]),
                    it,
                ));
            }
            if s * m < s * target {
                lo = mid;
            } else {
                hi = mid;
                hi_val = m;
            }
        }
        let b = Some([lo, hi]);
        Ok(result(
            Verdict::Matched,
            Some(hi),
            hi_val,
            false,
            b,
            search.max_iters,
        ))
    };
    match run() {
        Ok(r) => Step::Done(r),
        Err(step) => step,
    }
}
