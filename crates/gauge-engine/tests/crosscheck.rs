//! gauge's chain against llama.cpp's own chain (through the bindings) on the SAME real logit
//! rows: for every case and prompt both must pick the same token at every one of 64 steps.
//!
//! Each case runs its prompts as parallel sequences of one `LlamaSource` (one batch per step);
//! the sequence continues with the token both chains picked, so the rows stay shared. A failure
//! prints the step, the two tokens and both chains' final candidate sets around the choice.

mod common;

use common::run_case;
use gauge_sampling::params::SamplingParams;

#[test]
fn greedy_temperature_zero_matches_llama_cpp() {
    run_case(
        &common::model(),
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
        &common::model(),
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
        &common::model(),
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
        &common::model(),
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
        &common::model(),
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
