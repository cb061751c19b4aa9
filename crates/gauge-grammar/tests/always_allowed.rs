//! The constraint's promise: under any sampler setting, every chosen token is one the grammar
//! allows. Real grammars (a JSON schema, a Lark grammar, a regex) compiled for the default
//! model's real vocabulary (a GBNF grammar among them); random parameters (every stage, random order, biases that push
//! forbidden tokens up by +100) on random rows with forbidden spikes. An independent
//! grammar state checks every chosen token; the run ends only where the grammar allows it.

use std::sync::{Arc, OnceLock};

use gauge_engine::{Model, ModelOptions, Registry, DEFAULT_MODEL};
use gauge_grammar::{
    constrain, ConstraintRequest, ConstraintSpec, GrammarStage, GrammarState, GrammarVocab,
};
use gauge_sampling::order::DEFAULT_ORDER;
use gauge_sampling::params::{LogitBias, TokenRef};
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::{Chain, SamplerType, SamplingError, SamplingParams};
use proptest::prelude::*;
use serde_json::json;

fn model_and_vocab() -> &'static (Arc<Model>, GrammarVocab) {
    static M: OnceLock<(Arc<Model>, GrammarVocab)> = OnceLock::new();
    M.get_or_init(|| {
        let path = Registry::from_env()
            .expect("cache dir")
            .resolve_model(DEFAULT_MODEL)
            .unwrap_or_else(|e| panic!("pulling {DEFAULT_MODEL}: {e}"));
        let opts = ModelOptions {
            n_ctx: 256,
            n_threads: 1,
            ..Default::default()
        };
        let model = Arc::new(Model::load(path, opts).expect("load default model"));
        let vocab =
            GrammarVocab::from_token_bytes(&model.grammar_token_bytes(), &model.grammar_eos())
                .expect("grammar vocabulary");
        (model, vocab)
    })
}

/// The constraints under test: a schema with nested objects, arrays, enums and bounds (the shape
/// of the A2 schemas), a Lark grammar, a regex and llama.cpp's arithmetic GBNF.
fn constraints() -> Vec<ConstraintRequest> {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "bc", "def"]}, "maxItems": 3},
            "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"]},
            "ok": {"type": "boolean"}
        },
        "required": ["name", "age", "address"],
        "additionalProperties": false
    });
    vec![
        ConstraintRequest { spec: ConstraintSpec::JsonSchema(schema), field: "json_schema".into(), lenient: false },
        ConstraintRequest {
            spec: ConstraintSpec::Lark(
                "start: \"(\" list \")\"\nlist: item (\",\" item)*\nitem: NUMBER | WORD\nNUMBER: /[0-9]{1,4}/\nWORD: /[a-z]{1,6}/\n".into(),
            ),
            field: "grammar".into(),
            lenient: false,
        },
        ConstraintRequest { spec: ConstraintSpec::Regex("(yes|no|maybe) [A-Z][a-z]{0,8}\\.".into()), field: "guided_regex".into(), lenient: false },
        ConstraintRequest {
            spec: ConstraintSpec::Gbnf(
                std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gbnf/arithmetic.gbnf"))
                    .expect("arithmetic.gbnf"),
            ),
            field: "grammar".into(),
            lenient: false,
        },
    ]
}

/// Random sampler parameters: every stage reachable, the order shuffled.
fn params() -> impl Strategy<Value = SamplingParams> {
    let order = Just(DEFAULT_ORDER.to_vec()).prop_shuffle();
    (
        (
            prop_oneof![Just(0.0f32), 0.05f32..3.0],
            0i32..60,
            0.1f32..=1.0,
            0.0f32..0.5,
            0.2f32..=1.0,
        ),
        (
            0.0f32..=1.0,
            0.0f32..0.6,
            prop_oneof![Just(-1.0f32), 0.0f32..3.0],
            0.0f32..2.0,
        ),
        (
            1.0f32..2.5,
            prop_oneof![Just(-1i32), 0i32..80],
            -1.0f32..2.0,
            -1.0f32..2.0,
            any::<bool>(),
        ),
        (
            prop_oneof![Just(0.0f32), 0.1f32..2.0],
            0i32..3,
            any::<u32>(),
            order,
            any::<bool>(),
        ),
        proptest::collection::vec(
            (0i32..49152, prop_oneof![Just(100.0f32), -5.0f32..5.0]),
            0..6,
        ),
    )
        .prop_map(
            |(
                (t, k, p, minp, typ),
                (xp, xt, sigma, dyn_r),
                (rep, last_n, freq, pres, norm),
                (dry, miro, seed, order, adaptive),
                bias,
            )| {
                let mut samplers = order;
                if adaptive {
                    samplers.push(SamplerType::AdaptiveP);
                }
                SamplingParams {
                    temperature: t,
                    dynatemp_range: dyn_r,
                    top_k: k,
                    top_p: p,
                    min_p: minp,
                    typical_p: typ,
                    xtc_probability: xp,
                    xtc_threshold: xt,
                    top_n_sigma: sigma,
                    repeat_penalty: rep,
                    repeat_last_n: last_n,
                    frequency_penalty: freq,
                    presence_penalty: pres,
                    repeat_penalty_mode: if norm {
                        PenaltyMode::Normalized
                    } else {
                        PenaltyMode::Ctrl
                    },
                    dry_multiplier: dry,
                    mirostat: miro,
                    seed,
                    samplers,
                    logit_bias: bias
                        .into_iter()
                        .map(|(id, b)| LogitBias {
                            token: TokenRef::Id(id),
                            bias: b,
                        })
                        .collect(),
                    ..SamplingParams::default()
                }
            },
        )
}

/// A deterministic random row: noise in [-8, 8] with spikes of +25 on random tokens (most of
/// them forbidden at any position) and, on even steps from step 16, on the end-of-generation
/// token (earlier, where the grammar forbids it, it is one more temptation).
fn row(n: usize, seed: u64, step: usize, eos: u32) -> Vec<f32> {
    let mut s = seed ^ (step as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut r: Vec<f32> = (0..n)
        .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 * 16.0 - 8.0)
        .collect();
    for _ in 0..32 {
        let i = (next() % n as u64) as usize;
        r[i] = 25.0;
    }
    if step.is_multiple_of(2) && step >= 16 {
        r[eos as usize] = 30.0;
    }
    r
}

const STEPS: usize = 32;

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn chosen_token_is_always_allowed(params in params(), which in 0usize..4, row_seed in any::<u64>()) {
        let (model, vocab) = model_and_vocab();
        let n = model.n_vocab();
        let req = &constraints()[which];
        let chain = match Chain::from_params(&params, n, Some(&**model)) {
            Ok(c) => c,
            // Parameter sets the chain itself refuses are not this test's subject.
            Err(SamplingError::Param { .. }) => return Ok(()),
            Err(e) => panic!("chain: {e}"),
        };
        let stage = GrammarStage::compile(req, vocab, &params).expect("compile");
        let mut chain = constrain(chain, stage);
        prop_assert!(chain.describe().starts_with("logits -> grammar -> "));
        // Prompt tokens reach the chain as in a real run; they must not move the grammar.
        for t in model.tokenize_prompt("Output JSON: {\"a\": 1}").unwrap() {
            chain.accept_prompt(t);
        }
        let mut check = GrammarState::compile(req, vocab).expect("compile");
        for step in 0..STEPS {
            let r = row(n, row_seed, step, vocab.eos()[0]);
            match chain.sample(&r) {
                Ok(tok) => {
                    prop_assert!(check.is_allowed(tok as u32), "step {step}: token {tok} ({:?}) is not allowed by {} ({})", String::from_utf8_lossy(&model.token_bytes_checked(tok, true).unwrap()), req.field, chain.describe());
                    prop_assert!(check.consume(tok as u32).is_ok());
                    if model.is_eog(tok) {
                        break;
                    }
                }
                // A bias of -inf on every allowed token, or a stage that leaves nothing finite:
                // an error, never a forbidden token.
                Err(SamplingError::NoFiniteLogit) | Err(SamplingError::Empty(_)) => break,
                Err(e) => panic!("step {step}: {e}"),
            }
        }
    }
}

/// Without the stage the same rows pick forbidden tokens almost at once, so the property above
/// is not vacuous.
#[test]
fn without_the_stage_the_rows_pick_forbidden_tokens() {
    let (model, vocab) = model_and_vocab();
    let n = model.n_vocab();
    // A fixed seed (the default one is random) and a few rows per grammar: a grammar counts as
    // tempted when any of its rows picks a token it forbids.
    let params = SamplingParams {
        seed: 7,
        ..SamplingParams::default()
    };
    let mut forbidden = 0;
    let all = constraints();
    for (i, req) in all.iter().enumerate() {
        let mut chain = Chain::from_params(&params, n, Some(&**model)).unwrap();
        let mut check = GrammarState::compile(req, vocab).unwrap();
        let tempted = (0..8).any(|k| {
            let tok = chain
                .sample_no_accept(&row(n, (i * 8 + k) as u64 + 1, 1, vocab.eos()[0]))
                .unwrap();
            !check.is_allowed(tok as u32)
        });
        forbidden += usize::from(tempted);
    }
    assert_eq!(
        forbidden,
        all.len(),
        "the random rows should tempt every grammar"
    );
}
