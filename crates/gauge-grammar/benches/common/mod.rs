//! What both grammar benches load: the default model (one llama.cpp thread) and its grammar
//! vocabulary.

use std::sync::Arc;

use gauge_engine::{Model, ModelOptions, Registry, DEFAULT_MODEL};
use gauge_grammar::GrammarVocab;

/// The default model, pulled into gauge's cache on first use.
pub fn default_model() -> Arc<Model> {
    let path = Registry::from_env()
        .expect("cache dir")
        .resolve_model(DEFAULT_MODEL)
        .expect("default model");
    let opts = ModelOptions {
        n_threads: 1,
        ..Default::default()
    };
    Arc::new(Model::load(path, opts).expect("load"))
}

/// `model`'s token bytes and end-of-generation ids as a grammar vocabulary.
pub fn grammar_vocab(model: &Model) -> GrammarVocab {
    GrammarVocab::from_token_bytes(&model.grammar_token_bytes(), &model.grammar_eos())
        .expect("vocab")
}
