//! Shared setup for the engine's integration tests: the default model, pulled on first use into
//! the normal cache (`$GAUGE_HOME` / `$XDG_CACHE_HOME/gauge` / `~/.cache/gauge`) and loaded once
//! per test binary.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use gauge_engine::{Model, ModelOptions, Registry, DEFAULT_MODEL};

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
