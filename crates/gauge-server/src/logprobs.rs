//! Token log-probabilities for `logprobs` / `n_probs`.
//!
//! As llama-server without `post_sampling_probs`: the probabilities are the model's own, the
//! softmax of the raw logit row (before any sampler), so they describe the model and not the
//! chain; the chosen token's log-probability comes from the same distribution even when a
//! penalty or a truncation made it the pick. llama-server sorts the whole vocabulary for this;
//! here one pass finds the maximum, one pass the log-sum-exp (accumulated in `f64`), and the top
//! `n` come from a bounded selection into a reused buffer, so a step costs O(vocab) and no
//! allocation beyond the output.

use gauge_sampling::TokenId;
use serde_json::{Map, Value};

use crate::config::MAX_N_PROBS;
use crate::error::ApiError;

/// The server's limit on alternatives per token, checked under the name the client sent
/// (`n_probs`, `logprobs` or `top_logprobs`) before the sampling library parses them (which
/// type-checks each name, refuses `top_logprobs` without `logprobs: true` and counts that
/// disagree).
pub(crate) fn check_counts(o: &Map<String, Value>) -> Result<(), ApiError> {
    for name in ["n_probs", "logprobs", "top_logprobs"] {
        let Some(v) = o.get(name).filter(|v| v.is_number()) else {
            continue;
        };
        if !v
            .as_f64()
            .is_some_and(|x| (0.0..=MAX_N_PROBS as f64).contains(&x))
        {
            return Err(ApiError::field(name, v, &format!("0..={MAX_N_PROBS}")));
        }
    }
    Ok(())
}

/// Reused scratch for [`top_logprobs`].
#[derive(Clone, Debug, Default)]
pub struct LogprobScratch {
    top: Vec<(f32, TokenId)>,
}

/// `log p(token)` under `softmax(row)` and the `n` most likely tokens with their log-probs, most
/// likely first (ties: lower id first). Returns `None` for a row with no finite logit.
pub fn top_logprobs(
    row: &[f32],
    token: TokenId,
    n: usize,
    scratch: &mut LogprobScratch,
    out: &mut Vec<(TokenId, f32)>,
) -> Option<f32> {
    out.clear();
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return None;
    }
    let sum: f64 = row.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let log_z = max as f64 + sum.ln();
    let lp = |x: f32| (x as f64 - log_z) as f32;

    if n > 0 {
        // Keep the best n in `top`, sorted descending by (logit, -id); insert by binary search.
        let top = &mut scratch.top;
        top.clear();
        let better = |a: (f32, TokenId), b: (f32, TokenId)| a.0 > b.0 || (a.0 == b.0 && a.1 < b.1);
        for (i, &x) in row.iter().enumerate() {
            let cand = (x, i as TokenId);
            if top.len() == n && !better(cand, top[n - 1]) {
                continue;
            }
            let at = top.partition_point(|&e| better(e, cand));
            if top.len() == n {
                top.pop();
            }
            top.insert(at, cand);
        }
        out.extend(top.iter().map(|&(x, id)| (id, lp(x))));
    }
    let chosen = row.get(usize::try_from(token).ok()?)?;
    Some(lp(*chosen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_beyond_the_server_limit_are_refused_under_the_name_sent() {
        for (body, field) in [
            (serde_json::json!({"top_logprobs": 1e12}), "top_logprobs"),
            (serde_json::json!({"top_logprobs": -5}), "top_logprobs"),
            (serde_json::json!({"logprobs": -1}), "logprobs"),
            (serde_json::json!({"logprobs": 101}), "logprobs"),
            (serde_json::json!({"n_probs": 500}), "n_probs"),
        ] {
            let e = check_counts(body.as_object().unwrap()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}");
            assert!(e.message.contains("0..=100"), "{body}: {}", e.message);
        }
        for ok in [
            serde_json::json!({"logprobs": true, "top_logprobs": 100}),
            serde_json::json!({"n_probs": 0, "logprobs": false}),
            serde_json::json!({"top_logprobs": "5"}),
        ] {
            assert!(check_counts(ok.as_object().unwrap()).is_ok(), "{ok}");
        }
    }

    #[test]
    fn log_probs_are_the_softmax_of_the_raw_row() {
        let row = [1.0f32, 3.0, 2.0, 3.0];
        let mut out = Vec::new();
        let lp = top_logprobs(&row, 2, 3, &mut LogprobScratch::default(), &mut out).unwrap();
        let z: f64 = row.iter().map(|&x| (x as f64).exp()).sum();
        let want = |x: f32| ((x as f64).exp() / z).ln() as f32;
        assert!((lp - want(2.0)).abs() < 1e-6);
        // descending, the tie between ids 1 and 3 broken by the lower id
        let ids: Vec<TokenId> = out.iter().map(|e| e.0).collect();
        assert_eq!(ids, [1, 3, 2]);
        for &(id, l) in &out {
            assert!((l - want(row[id as usize])).abs() < 1e-6);
        }
        let total: f64 = row.iter().map(|&x| (want(x) as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    #[test]
    fn banned_tokens_get_minus_infinity_and_n_larger_than_the_row_is_fine() {
        let row = [f32::NEG_INFINITY, 0.0];
        let mut out = Vec::new();
        let lp = top_logprobs(&row, 0, 5, &mut LogprobScratch::default(), &mut out).unwrap();
        assert_eq!(lp, f32::NEG_INFINITY);
        assert_eq!(out, [(1, 0.0), (0, f32::NEG_INFINITY)]);
        let none = top_logprobs(
            &[f32::NEG_INFINITY],
            0,
            1,
            &mut LogprobScratch::default(),
            &mut out,
        );
        assert_eq!(none, None);
    }
}
