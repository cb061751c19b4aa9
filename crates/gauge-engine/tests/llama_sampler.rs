//! gauge's samplers as llama-cpp-2 `LlamaSampler`s (`gauge_engine::llama_sampler`), inside
//! llama.cpp chains, on the default model's rows: the ctrl penalty equals llama.cpp's own, the
//! whole chain equals gauge's `Chain`, and a truncated array is reported, not silently changed.

mod common;

use std::sync::Arc;

use gauge_engine::llama_sampler;
use gauge_engine::{LlamaSource, LogitSource, Model};
use gauge_sampling::params::SamplingParams;
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::Chain;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;

const STEPS: usize = 32;

fn array_of(row: &[f32]) -> LlamaTokenDataArray {
    LlamaTokenDataArray::from_iter(
        row.iter()
            .enumerate()
            .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
        false,
    )
}

/// Decode every prompt `STEPS` tokens: `init(prompt)` makes a sampler that has seen the prompt,
/// `pick(sampler, row)` chooses a token and accepts it.
fn decode<S>(
    model: &Arc<Model>,
    init: impl Fn(&[i32]) -> S,
    pick: impl Fn(&mut S, &[f32]) -> i32,
) -> Vec<Vec<i32>> {
    let mut out = Vec::new();
    for prompt in common::PROMPTS {
        let tokens = model.tokenize_prompt(prompt).expect("tokenize");
        let mut sampler = init(&tokens);
        let mut src = LlamaSource::new(Arc::clone(model)).expect("source");
        let seq = src.new_sequence().expect("sequence");
        src.push(seq, &tokens).expect("push");
        src.step().expect("step");
        let mut got = Vec::new();
        for _ in 0..STEPS {
            let t = pick(&mut sampler, src.logits(seq).expect("logits"));
            got.push(t);
            src.push(seq, &[t]).expect("push");
            src.step().expect("step");
        }
        out.push(got);
    }
    out
}

fn run_llama(model: &Arc<Model>, make: impl Fn() -> LlamaSampler) -> Vec<Vec<i32>> {
    decode(
        model,
        |prompt| {
            let mut c = make();
            for &t in prompt {
                c.accept(LlamaToken(t));
            }
            c
        },
        |c, row| {
            let mut arr = array_of(row);
            arr.apply_sampler(c);
            let t = arr.selected_token().expect("a terminal selected").0;
            c.accept(LlamaToken(t));
            t
        },
    )
}

#[test]
fn ctrl_penalty_in_a_llama_chain_equals_llama_cpp_penalties() {
    let model = common::model();
    let n_vocab = model.n_vocab();
    let gauge = run_llama(&model, || {
        LlamaSampler::chain_simple([
            llama_sampler::penalties(n_vocab, 64, 1.3, 0.0, 0.0, PenaltyMode::Ctrl).unwrap(),
            LlamaSampler::greedy(),
        ])
    });
    let llama = run_llama(&model, || {
        LlamaSampler::chain_simple([
            LlamaSampler::penalties(n_vocab as i32, 64, 1.3, 0.0, 0.0),
            LlamaSampler::greedy(),
        ])
    });
    assert_eq!(gauge, llama);
    let plain = run_llama(&model, LlamaSampler::greedy);
    assert_ne!(
        plain, llama,
        "the penalty changed nothing: the check would prove nothing"
    );
}

#[test]
fn whole_chain_as_llama_sampler_equals_gauge_chain() {
    let model = common::model();
    let n_vocab = model.n_vocab();
    let params = SamplingParams::from_json(
        r#"{"temperature": 0.8, "seed": 42, "repeat_penalty": 1.3,
            "repeat_penalty_mode": "normalized", "repeat_last_n": -1}"#,
    )
    .unwrap();
    let as_llama = run_llama(&model, || {
        llama_sampler::from_params(&params, n_vocab).unwrap()
    });
    let own = decode(
        &model,
        |prompt| {
            let mut c = Chain::from_params(&params, n_vocab, None).unwrap();
            for &t in prompt {
                c.accept_prompt(t);
            }
            c
        },
        |c, row| c.sample(row).unwrap(),
    );
    assert_eq!(as_llama, own);
}

#[test]
fn normalized_penalty_reports_a_truncated_array() {
    let n_vocab = 100;
    let mut s = llama_sampler::penalties(n_vocab, 64, 1.5, 0.0, 0.0, PenaltyMode::Normalized)
        .expect("valid parameters");
    assert_eq!(
        s.name().unwrap().to_str().unwrap(),
        "gauge-penalties-normalized"
    );
    s.accept(LlamaToken(3));
    let row: Vec<f32> = (0..n_vocab).map(|i| (i % 17) as f32 * 0.5).collect();

    // The full row: penalised, no error.
    let mut full = array_of(&row);
    full.apply_sampler(&mut s);
    assert_eq!(llama_sampler::sampler_error(&s), None);
    assert_ne!(full.data[3].logit(), row[3]);

    // Ten entries (as after a top-k): passed through unchanged, and the reason is kept.
    let mut cut = array_of(&row[..10]);
    cut.apply_sampler(&mut s);
    let err = llama_sampler::sampler_error(&s).expect("the skip is reported");
    assert!(err.contains("needs all 100 candidates"), "{err}");
    for (i, d) in cut.data.iter().enumerate() {
        assert_eq!(d.logit(), row[i]);
    }
    s.reset();
    assert_eq!(llama_sampler::sampler_error(&s), None);
    // Not a gauge sampler: no error to report.
    assert_eq!(llama_sampler::sampler_error(&LlamaSampler::greedy()), None);
}

#[test]
fn bad_parameters_are_errors_naming_the_field() {
    let e = llama_sampler::penalties(100, -2, 1.3, 0.0, 0.0, PenaltyMode::Ctrl).unwrap_err();
    assert!(e.to_string().contains("repeat_last_n"), "{e}");
    let e = llama_sampler::penalties(0, 64, 1.3, 0.0, 0.0, PenaltyMode::Ctrl).unwrap_err();
    assert!(e.to_string().contains("n_vocab"), "{e}");
}
