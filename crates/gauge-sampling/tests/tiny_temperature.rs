//! A temperature whose division overflows f32 (a tiny `t`, or logits near f32's range) gives the
//! distribution `softmax(z / t)` means, computed as `softmax((z - max) / t)`: for a tiny `t` that is
//! the argmax (the `t → 0` limit), on the row fast path and the fill path, in the plain,
//! dynamic-temperature and mirostat chains. Before the fix, `t = 1e-39` turned the logits into
//! `±inf`, the softmax into NaN, and picked a non-argmax token (issue 9).

use gauge_sampling::params::SamplingParams;
use gauge_sampling::Chain;
use serde_json::{json, Value};

/// Build the chain for `req` on `row`, on both paths, and sample with several seeds.
fn tokens(req: Value, row: &[f32]) -> Vec<i32> {
    let mut out = Vec::new();
    for seed in 0..16u32 {
        let mut req = req.clone();
        req["seed"] = json!(seed);
        let params = SamplingParams::from_value(&req).unwrap();
        for fast in [true, false] {
            let mut chain = Chain::from_params(&params, row.len(), None)
                .unwrap()
                .with_fast_path(fast);
            let tok = chain
                .sample(row)
                .unwrap_or_else(|e| panic!("{req} (fast path {fast}): {e}"));
            out.push(tok);
        }
    }
    out
}

fn all_argmax(req: Value, row: &[f32], argmax: i32) {
    let toks = tokens(req.clone(), row);
    assert!(
        toks.iter().all(|&t| t == argmax),
        "{req}: expected token {argmax} every time, got {toks:?}"
    );
}

const ROW: [f32; 4] = [0.5, 3.0, 1.0, 2.9];

#[test]
fn tiny_temperature_picks_the_argmax() {
    all_argmax(json!({"temperature": 1e-39}), &ROW, 1);
}

#[test]
fn tiny_temperature_all_negative_logits_is_not_every_logit_inf() {
    all_argmax(json!({"temperature": 1e-45}), &[-3.0, -1.0, -2.0, -5.0], 1);
}

#[test]
fn temperature_below_f32_range_is_greedy_like_zero() {
    // 1e-50 rounds to 0.0 in f32: the same rule, not a different one.
    all_argmax(json!({"temperature": 1e-50}), &ROW, 1);
    all_argmax(json!({"temperature": 0}), &ROW, 1);
}

#[test]
fn tiny_temperature_first_in_the_chain_uses_the_same_rule() {
    // temperature before top-k: on the fast path it would be a pending division.
    all_argmax(
        json!({"temperature": 1e-39, "samplers": ["temperature", "top_k", "top_p"]}),
        &ROW,
        1,
    );
}

#[test]
fn tiny_dynamic_temperature_picks_the_argmax() {
    all_argmax(
        json!({"temperature": 1e-39, "dynatemp_range": 1e-39}),
        &ROW,
        1,
    );
}

#[test]
fn tiny_temperature_under_mirostat_picks_the_argmax() {
    all_argmax(json!({"temperature": 1e-39, "mirostat": 1}), &ROW, 1);
    all_argmax(json!({"temperature": 1e-39, "mirostat": 2}), &ROW, 1);
}

#[test]
fn large_logits_overflow_at_moderate_temperature_too() {
    // 3e38 / 0.5 overflows: the distribution is computed from z - max, not drawn from NaN.
    let row = [1.0e38, 3.0e38, -2.0e38, 2.9e38];
    all_argmax(json!({"temperature": 0.5}), &row, 1);
    all_argmax(
        json!({"temperature": 0.5, "samplers": ["temperature", "top_k"]}),
        &row,
        1,
    );
}

#[test]
fn overflowing_ties_share_the_mass_instead_of_collapsing() {
    // Two equal maxima near f32's range at t = 0.5: softmax gives each 1/2. (Greedy would always
    // pick the first; a NaN draw picks anything.)
    let toks = tokens(
        json!({"temperature": 0.5, "top_k": 0, "top_p": 1.0, "min_p": 0}),
        &[3.0e38, -1.0, 3.0e38],
    );
    assert!(toks.contains(&0) && toks.contains(&2), "{toks:?}");
    assert!(!toks.contains(&1), "{toks:?}");
}

#[test]
fn temperature_without_overflow_still_samples() {
    // Nothing changes where the division does not overflow: at t = 2 both near-tied tokens are
    // drawn.
    let toks = tokens(json!({"temperature": 2.0, "top_k": 0, "min_p": 0}), &ROW);
    assert!(toks.contains(&1) && toks.contains(&3), "{toks:?}");
}
