//! The engine's error type: one enum the CLI can print, grouping the registry, llama.cpp, the
//! logit source and the sampling chain.

use std::path::PathBuf;

use crate::registry::RegistryError;
use crate::source::SourceError;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Finding, pulling or checking a model file.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// llama.cpp could not load the model (truncated or unsupported GGUF, out of memory, ...).
    #[error("llama.cpp could not load {path}: {detail}")]
    Load { path: PathBuf, detail: String },
    /// llama.cpp could not create a context (n_ctx too large for memory, bad parameters, ...).
    #[error("llama.cpp could not create a context: {0}")]
    Context(String),
    /// The llama.cpp backend could not be initialised.
    #[error("llama.cpp backend: {0}")]
    Backend(String),
    /// An option is out of range.
    #[error("invalid option `{field}`: {value} (allowed: {allowed})")]
    Option {
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
    /// A token id outside the vocabulary.
    #[error("token {token} out of range (n_vocab = {n_vocab})")]
    TokenOutOfRange { token: i32, n_vocab: usize },
    /// Text that llama.cpp cannot take (too long for its i32 lengths, or an interior NUL where
    /// a C string is needed).
    #[error("text rejected: {0}")]
    Text(String),
    /// The model has no chat template but one was asked for.
    #[error("the model has no chat template (use a plain prompt, or an instruct model)")]
    NoChatTemplate,
    /// llama.cpp failed to apply the chat template.
    #[error("applying the chat template failed: {0}")]
    ChatTemplate(String),
    /// The prompt is empty after tokenization.
    #[error("the prompt is empty (no tokens)")]
    EmptyPrompt,
    /// A logit-source failure (context overflow, ...).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A sampling-chain failure.
    #[error(transparent)]
    Sampling(#[from] gauge_sampling::SamplingError),
    /// candle (feature `candle`) could not read, convert or run a model.
    #[error("candle: {0}")]
    Candle(String),
    /// A llama.cpp feature the reference chain cannot express.
    #[error("llama.cpp's chain cannot express this: {0}")]
    NotInLlamaCpp(String),
}

impl EngineError {
    #[cfg(feature = "llama")]
    pub(crate) fn option(
        field: &'static str,
        value: impl std::fmt::Display,
        allowed: &'static str,
    ) -> Self {
        EngineError::Option {
            field,
            value: value.to_string(),
            allowed,
        }
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
