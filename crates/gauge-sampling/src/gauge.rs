//! Shift invariance ("gauge"): which stages of a chain care where the logits sit, and a runtime check.
//!
//! Softmax ignores a constant added to every logit, so a model's logits are only defined up to that
//! constant: the gauge. A stage is *shift-invariant* when its output distribution does not depend
//! on the gauge. Every llama.cpp stage is, except the sign-branched repeat penalty (`ctrl`), which
//! multiplies or divides depending on whether a raw logit is `<= 0`: moving the row moves which
//! tokens are multiplied and which are divided.
//!
//! Two tools:
//! * [`crate::Chain::shift_report`] / [`is_shift_invariant`]: what each stage declares ([`crate::Sampler::shift`]), from its
//!   configuration alone.
//! * [`check`]: runs one step of the chain on `z + c` and on `z − c` from the same state and compares
//!   the chosen tokens and the final distributions.
//!
//! # "Invariant" under f32 rounding
//!
//! In exact arithmetic an invariant chain gives identical distributions on `z + c` and `z − c`. In
//! f32, `z + c` is itself rounded (to about `ulp(|z| + |c|)`, `2^-23` relative), and so is every
//! later difference, so the two final distributions differ by a few ulps of the logits: `max |Δp|`
//! is of the order of `1e-6 · (|z|max + |c|)` for an invariant chain, against the order of the
//! probabilities themselves for a variant one. The chosen tokens can differ only when two
//! candidates are within that rounding of each other (a near-tie) or, for a random terminal
//! sampler, when the draw lands within that rounding of a boundary. A report therefore says
//! "invariant" as "agreeing up to f32 rounding", and callers choose the tolerance.

use crate::candidates::{Candidates, TokenId};
use crate::chain::Chain;
use crate::error::{Result, SamplingError};
use crate::sampler::Shift;

/// The outcome of [`check`] for one logit row and one shift `c`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GaugeReport {
    /// The shift: the two runs see `z + c` and `z − c`.
    pub c: f32,
    /// The token chosen on `z + c`.
    pub token_plus: TokenId,
    /// The token chosen on `z − c`.
    pub token_minus: TokenId,
    /// Whether the two runs chose the same token.
    pub tokens_agree: bool,
    /// `max |p₊(id) − p₋(id)|` over every id in either final candidate set, with `p` the softmax
    /// of that set's final logits (0 for an id missing from a set).
    pub max_abs_dp: f64,
    /// Each stage's declared behaviour, in chain order.
    pub stages: Vec<(String, Shift)>,
}

impl GaugeReport {
    /// True when the tokens agree and `max_abs_dp <= tol`.
    pub fn is_invariant(&self, tol: f64) -> bool {
        self.tokens_agree && self.max_abs_dp <= tol
    }
}

/// True when every stage of the chain declares itself shift-invariant.
pub fn is_shift_invariant(chain: &Chain) -> bool {
    chain.stages().iter().all(|s| s.shift().is_invariant())
}

/// Run one step of `chain` on `logits + c` and on `logits − c` and compare.
///
/// The chain itself is not touched: two clones each accept `history` (through `accept`, as
/// generated tokens) and then sample once without accepting. Both clones start from the same RNG
/// state, so a random terminal sampler makes the same draw in both runs.
///
/// Errors: `c` not finite; a row the chain rejects (wrong length, NaN, +inf, including a `z ± c`
/// that overflows f32); a chain that selects nothing.
pub fn check(chain: &Chain, logits: &[f32], history: &[TokenId], c: f32) -> Result<GaugeReport> {
    if !c.is_finite() {
        return Err(SamplingError::param("c", c, "a finite shift"));
    }
    chain.validate_row(logits)?;
    let (token_plus, final_plus) = run_shifted(chain, logits, history, c)?;
    let (token_minus, final_minus) = run_shifted(chain, logits, history, -c)?;
    Ok(GaugeReport {
        c,
        token_plus,
        token_minus,
        tokens_agree: token_plus == token_minus,
        max_abs_dp: max_abs_dp(&final_plus, &final_minus),
        stages: chain.shift_report(),
    })
}

/// One step on `logits + c` from a clone of `chain` that has accepted `history`: the chosen token
/// and the final set as `(id, p)` sorted by id.
fn run_shifted(
    chain: &Chain,
    logits: &[f32],
    history: &[TokenId],
    c: f32,
) -> Result<(TokenId, Vec<(TokenId, f64)>)> {
    // The row fast path may leave only the chosen candidate in `last_candidates`; the comparison
    // needs the whole final set, so the clones take the fill path (same token, by construction).
    let mut ch = chain.clone().with_fast_path(false);
    for &t in history {
        ch.accept(t);
    }
    // -inf stays -inf; a finite value that overflows becomes ±inf and the chain rejects the row.
    let shifted: Vec<f32> = logits.iter().map(|&z| z + c).collect();
    let token = ch.sample_no_accept(&shifted)?;
    Ok((token, final_distribution(ch.last_candidates())))
}

/// Softmax (in f64) of the final set's logits, as `(id, p)` sorted by id. Terminal samplers differ
/// in whether they write `p`, so it is recomputed from the logits every stage leaves behind.
fn final_distribution(cur: &Candidates) -> Vec<(TokenId, f64)> {
    let data = cur.as_slice();
    let max = data.iter().fold(f32::NEG_INFINITY, |m, t| m.max(t.logit));
    let mut out: Vec<(TokenId, f64)> = data
        .iter()
        .map(|t| {
            let w = if max.is_finite() {
                (f64::from(t.logit) - f64::from(max)).exp()
            } else {
                0.0
            };
            (t.id, w)
        })
        .collect();
    let sum: f64 = out.iter().map(|&(_, w)| w).sum();
    if sum > 0.0 {
        for e in out.iter_mut() {
            e.1 /= sum;
        }
    }
    out.sort_by_key(|&(id, _)| id);
    out
}

/// `max |Δp|` between two id-sorted distributions, an id missing from one side counting as `p = 0`.
fn max_abs_dp(a: &[(TokenId, f64)], b: &[(TokenId, f64)]) -> f64 {
    let (mut i, mut j, mut worst) = (0, 0, 0.0f64);
    while i < a.len() || j < b.len() {
        let d = match (a.get(i), b.get(j)) {
            (Some(&(ia, pa)), Some(&(ib, pb))) if ia == ib => {
                i += 1;
                j += 1;
                pa - pb
            }
            (Some(&(ia, pa)), Some(&(ib, _))) if ia < ib => {
                i += 1;
                pa
            }
            (Some(&(_, pa)), None) => {
                i += 1;
                pa
            }
            (_, Some(&(_, pb))) => {
                j += 1;
                pb
            }
            (None, None) => break,
        };
        worst = worst.max(d.abs());
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_abs_dp_counts_missing_ids_as_zero() {
        let a = [(0, 0.5), (2, 0.5)];
        let b = [(0, 0.25), (1, 0.75)];
        assert_eq!(max_abs_dp(&a, &b), 0.75);
        assert_eq!(max_abs_dp(&b, &a), 0.75);
        assert_eq!(max_abs_dp(&a, &a), 0.0);
    }

    #[test]
    fn final_distribution_is_a_softmax_by_id() {
        let cur = Candidates::from_data(
            vec![
                crate::TokenData {
                    id: 3,
                    logit: 0.0,
                    p: 0.0,
                },
                crate::TokenData {
                    id: 1,
                    logit: f32::NEG_INFINITY,
                    p: 0.0,
                },
                crate::TokenData {
                    id: 2,
                    logit: 0.0,
                    p: 0.0,
                },
            ],
            false,
        );
        assert_eq!(final_distribution(&cur), vec![(1, 0.0), (2, 0.5), (3, 0.5)]);
    }
}
