//! Shared setup for the engine's integration tests: the default model, pulled on first use into
//! the normal cache (`$GAUGE_HOME` / `$XDG_CACHE_HOME/gauge` / `~/.cache/gauge`) and loaded once
//! per test binary.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use gauge_engine::{
    LlamaSource, LogitSource, Model, ModelOptions, ReferenceChain, Registry, DEFAULT_MODEL,
};
use gauge_sampling::params::SamplingParams;
use gauge_sampling::Chain;

/// Path of the default model, pulled if needed.
pub fn default_model_path() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        Registry::from_env()
            .expect("cache dir")
            .resolve_model(DEFAULT_MODEL)
            .unwrap_or_else(|e| panic!("pulling {DEFAULT_MODEL}: {e}"))
    })
    .clone()
}

/// The default model, loaded once, with room for several sequences.
pub fn model() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| {
        // One thread per model: the tests of a binary run in parallel on a 2-core machine, and
        // ggml's spinning threads slow down badly when they outnumber the cores.
        let opts = ModelOptions {
            n_ctx: 512,
            n_seq_max: 4,
            n_threads: 1,
            ..Default::default()
        };
        Arc::new(Model::load(default_model_path(), opts).expect("load default model"))
    })
    .clone()
}

pub const STEPS: usize = 64;

pub const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "{\"name\": \"Alice\", \"age\": 31, \"languages\": [\"en\", \"fr\"], \"address\": {",
];

/// Run `params` through gauge's chain and llama.cpp's chain on the same rows of `model`, for
/// every prompt of [`PROMPTS`] as parallel sequences, [`STEPS`] steps; panic on the first
/// disagreement with both candidate sets.
pub fn run_case(model: &Arc<Model>, name: &str, params: SamplingParams) {
    run_case_steps(model, name, params, STEPS)
}

pub fn run_case_steps(model: &Arc<Model>, name: &str, params: SamplingParams, steps: usize) {
    let mut src = LlamaSource::new(model.clone()).unwrap();
    let mut seqs = Vec::new();
    for p in PROMPTS {
        let toks = model.tokenize_prompt(p).unwrap();
        let mut gauge = Chain::from_params(&params, model.n_vocab(), Some(&**model))
            .unwrap_or_else(|e| panic!("{name}: gauge chain: {e}"));
        let mut reference = ReferenceChain::from_params(&params, model)
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
    for step in 0..steps {
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
