//! The grammar stage's row path (its allowed set recorded in the overlay, `Overlay::keep_only`, so
//! the first dense stage reads "row + edits + allowed set") must leave the chain exactly where
//! llama.cpp's fill path leaves it
//! (`apply` filtering the full array): the same token and the same final candidate array, bit for
//! bit, step after step, with and without penalties (whose seen tokens are then found in a masked
//! array) and DRY. A synthetic vocabulary keeps the test free of any model.

use gauge_grammar::{constrain, ConstraintRequest, ConstraintSpec, GrammarStage, GrammarVocab};
use gauge_sampling::chain::testing::counts;
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::synth::{normal_rows, SplitMix64};
use gauge_sampling::{Chain, SamplingParams};
use serde_json::json;

/// Every byte, then 3,000 random words over JSON's characters, then an end-of-generation token.
fn vocab() -> (GrammarVocab, usize) {
    let mut words: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
    let alphabet = b"{}[]\":, abcdefxyz0123456789-.\n";
    let mut rng = SplitMix64(11);
    for _ in 0..3000 {
        let len = 2 + (rng.next_u64() % 5) as usize;
        let w = (0..len)
            .map(|_| alphabet[(rng.next_u64() % alphabet.len() as u64) as usize])
            .collect();
        words.push(w);
    }
    words.push(b"<eos>".to_vec());
    let eos = (words.len() - 1) as u32;
    let v = GrammarVocab::from_token_bytes(&words, &[eos]).expect("vocab");
    (v, words.len())
}

fn params(repeat_penalty: f32, mode: PenaltyMode, dry: f32, temperature: f32) -> SamplingParams {
    SamplingParams {
        repeat_penalty,
        repeat_penalty_mode: mode,
        repeat_last_n: 64,
        dry_multiplier: dry,
        temperature,
        seed: 5,
        // Breakers are strings that need a tokenizer; none here.
        dry_sequence_breakers: Some(vec![]),
        ..SamplingParams::default()
    }
}

#[test]
fn row_path_is_the_fill_path_bit_for_bit() {
    let (vocab, n) = vocab();
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "n", "tags"]
    });
    let req = ConstraintRequest {
        spec: ConstraintSpec::JsonSchema(schema),
        field: "json_schema".into(),
        lenient: false,
    };
    let settings = [
        params(1.0, PenaltyMode::Ctrl, 0.0, 0.8),
        params(1.3, PenaltyMode::Ctrl, 0.0, 0.8),
        params(1.3, PenaltyMode::Normalized, 0.0, 0.8),
        params(1.3, PenaltyMode::Ctrl, 0.8, 0.8),
        params(1.3, PenaltyMode::Ctrl, 0.0, 0.0),
    ];
    let normal = normal_rows(n, 16, 3.0, 21);
    // the same in quarter units: top-k's 40 then hold ties nearly every step, which only the heap
    // replay over the allowed entries settles
    let tied: Vec<Vec<f32>> = normal
        .iter()
        .map(|r| r.iter().map(|&x| (x * 4.0).round() / 4.0).collect())
        .collect();
    let cases = settings.iter().flat_map(|p| {
        [(p, false), (p, true)]
            .into_iter()
            .flat_map(|(p, o)| [(p, o, &normal), (p, o, &tied)])
    });
    for (k, (p, in_overlay, rows)) in cases.enumerate() {
        let make = |fast: bool| {
            let chain = Chain::from_params(p, n, None).expect("chain");
            let stage = GrammarStage::compile(&req, &vocab, p)
                .expect("compile")
                .with_mask_in_overlay(in_overlay);
            constrain(chain, stage).with_fast_path(fast)
        };
        let (mut fast, mut slow) = (make(true), make(false));
        let mut steps = 0;
        let before = counts();
        for step in 0..96 {
            let row = &rows[step % rows.len()];
            let (a, b) = (fast.sample(row), slow.sample(row));
            let (Ok(a), Ok(b)) = (a, b) else {
                panic!("setting {k} step {step}: a path failed");
            };
            assert_eq!(a, b, "setting {k} step {step}: row path {a}, fill path {b}");
            let arr = |c: &Chain| -> Vec<(i32, u32, u32)> {
                let cur = c.last_candidates();
                cur.as_slice()
                    .iter()
                    .map(|t| (t.id, t.logit.to_bits(), t.p.to_bits()))
                    .collect()
            };
            assert_eq!(arr(&fast), arr(&slow), "setting {k} step {step}");
            steps += 1;
            if a as usize == n - 1 {
                break;
            }
        }
        assert!(steps >= 8, "setting {k}: only {steps} steps before the end");
        // the comparison proves something only if the fast chain read the allowed set from the
        // overlay (top-k from "row + edits + mask"), not a filled array of the allowed entries
        let d = counts() - before;
        // (inside the JSON structure fewer than top-k's 40 tokens are allowed: the kernel then
        // declines and the chain fills the allowed entries, which the comparison covers too)
        if !in_overlay {
            assert_eq!(d.kept_from_row, 0, "setting {k}: {d:?}");
            continue;
        }
        assert!(
            d.kept_from_row >= 8,
            "setting {k}: the allowed set was read from the overlay on {} of {steps} steps: {d:?}",
            d.kept_from_row
        );
    }
}
