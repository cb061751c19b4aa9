//! gauge's chain against llama.cpp's own chain (through the bindings) on the SAME real logit
//! rows: for every case and prompt both must pick the same token at every one of 64 steps.
//!
//! Each case runs its prompts as parallel sequences of one `LlamaSource` (one batch per step);
//! the sequence continues with the token both chains picked, so the rows stay shared. A failure
//! prints the step, the two tokens and both chains' final candidate sets around the choice.

mod common;

use gauge_engine::{LlamaSource, LogitSource, ReferenceChain};
use gauge_sampling::params::SamplingParams;
use gauge_sampling::Chain;

const STEPS: usize = 64;

const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "{\"name\": \"Alice\", \"age\": 31, \"languages\": [\"en\", \"fr\"], \"address\": {",
];

fn run_case(name: &str, params: SamplingParams) {
    let model = common::model();
    let mut src = LlamaSource::new(model.clone()).unwrap();
    let mut seqs = Vec::new();
    for p in PROMPTS {
        let toks = model.tokenize_prompt(p).unwrap();
        let mut gauge = Chain::from_params(&params, model.n_vocab(), Some(&*model))
            .unwrap_or_else(|e| panic!("{name}: gauge chain: {e}"));
        let mut reference = ReferenceChain::from_params(&params, &model)
            .unwrap_or_else(|e| panic!("{name}: llama.cpp chain: {e}"));
        assert_eq!(
            gauge.describe(),
            reference.describe(),
            "{name}: the chains print the same"
        );
        for &t in &toks {
            gauge.accept_prompt(t);
        }
        reference.accept_prompt(&toks);
        let s = src.new_sequence().unwrap();
        src.push(s, &toks).unwrap();
        seqs.push((p, s, gauge, reference, Vec::new()));
    }
    src.step().unwrap();
    for step in 0..STEPS {
        for (prompt, s, gauge, reference, out) in seqs.iter_mut() {
            let row = src.logits(*s).unwrap();
            let tg = gauge
                .sample(row)
                .unwrap_or_else(|e| panic!("{name}: gauge sample: {e}"));
            let tr = reference
                .sample(row)
                .unwrap_or_else(|e| panic!("{name}: llama.cpp sample: {e}"));
            if tg != tr {
                let gc: Vec<_> = gauge
                    .last_candidates()
                    .as_slice()
                    .iter()
                    .take(8)
                    .map(|d| (d.id, d.logit, d.p))
                    .collect();
                let rc: Vec<_> = reference.last_candidates().take(8).collect();
                panic!(
                    "{name}: prompt {prompt:?}, step {step}: gauge picked {tg}, llama.cpp picked {tr}\n\
                     after {out:?}\n gauge candidates (first 8): {gc:?}\n llama candidates (first 8): {rc:?}"
                );
            }
            out.push(tg);
            src.push(*s, &[tg]).unwrap();
        }
        src.step().unwrap();
    }
    for (prompt, _, _, _, out) in &seqs {
        eprintln!("{name}: {prompt:?} -> {:?}", model.detokenize(out).unwrap());
    }
}

#[test]
fn greedy_temperature_zero_matches_llama_cpp() {
    run_case(
        "greedy (temp 0)",
        SamplingParams {
            temperature: 0.0,
            seed: 1234,
            ..Default::default()
        },
    );
}

#[test]
fn default_chain_with_seed_matches_llama_cpp() {
    run_case(
        "default chain seed 42",
        SamplingParams {
            seed: 42,
            ..Default::default()
        },
    );
}

#[test]
fn ctrl_penalties_with_frequency_and_presence_match_llama_cpp() {
    run_case(
        "penalties ctrl 1.3 + freq + presence",
        SamplingParams {
            seed: 7,
            repeat_penalty: 1.3,
            frequency_penalty: 0.2,
            presence_penalty: 0.3,
            repeat_last_n: 64,
            ..Default::default()
        },
    );
}

#[test]
fn dry_matches_llama_cpp() {
    run_case(
        "dry 0.8/1.75/2/64",
        SamplingParams {
            seed: 99,
            dry_multiplier: 0.8,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            temperature: 1.0,
            ..Default::default()
        },
    );
}

#[test]
fn mirostat_v2_matches_llama_cpp() {
    run_case(
        "mirostat v2 tau 5 eta 0.1",
        SamplingParams {
            seed: 2024,
            mirostat: 2,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            ..Default::default()
        },
    );
}
