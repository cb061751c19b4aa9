//! Typed errors of the sampling library.

use thiserror::Error;

/// Everything that can go wrong when building or running a chain. New kinds of failure may be
/// added: match with a wildcard arm.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum SamplingError {
    /// A parameter is outside the range it is allowed to take.
    #[error("invalid value for `{field}`: {value} (allowed: {allowed})")]
    Param {
        /// The request field.
        field: String,
        /// The value sent.
        value: String,
        /// What the field accepts.
        allowed: String,
    },
    /// A logit is NaN or +inf (-inf is a legitimate ban).
    #[error("logit at token {index} is {value}: logits must be finite or -inf")]
    NonFiniteLogit {
        /// The token id (the row's index).
        index: usize,
        /// The logit found there.
        value: f32,
    },
    /// Every logit is -inf: nothing can be sampled.
    #[error("every logit is -inf: nothing can be sampled")]
    NoFiniteLogit,
    /// The candidate set is empty (empty vocabulary, or a stage removed everything).
    #[error("empty candidate set: {0}")]
    Empty(String),
    /// The logit row does not have the chain's vocabulary size.
    #[error("logit row has {got} entries but the chain was built for n_vocab = {expected}")]
    RowLength {
        /// The chain's vocabulary size.
        expected: usize,
        /// The row's length.
        got: usize,
    },
    /// A token id is not in `0..n_vocab`.
    #[error("token id {token} in `{field}` is out of range (n_vocab = {n_vocab})")]
    TokenOutOfRange {
        /// The request field.
        field: String,
        /// The token id sent.
        token: i64,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// A sampler name in `samplers` / `--samplers` is not known.
    #[error("unknown sampler name `{0}` (known: penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature, adaptive_p, infill and their aliases)")]
    UnknownSampler(String),
    /// A letter in `--sampler-seq` is not known.
    #[error("unknown sampler letter `{0}` (known: e d s k y p m x t i a)")]
    UnknownSamplerLetter(char),
    /// A string needed a vocabulary (logit_bias key, string DRY breaker, exemption) and none was given.
    #[error(
        "`{field}` uses the string {value:?}, which needs a vocabulary; pass token ids instead"
    )]
    NeedsVocab {
        /// The request field.
        field: String,
        /// The string that needs a vocabulary.
        value: String,
    },
    /// Malformed JSON for a request or config.
    #[error("malformed JSON: {0}")]
    Json(String),
    /// A field another engine (HF, vLLM, older llama.cpp) reads, set to a value gauge cannot honour.
    #[error("`{field}` = {value} is not supported: {detail}")]
    NotSupported {
        /// The request field.
        field: String,
        /// The value sent.
        value: String,
        /// Why, and what to send instead.
        detail: String,
    },
    /// Two names of one setting (e.g. `max_tokens` and `max_completion_tokens`) with different values.
    #[error("`{first}` = {first_value} and `{second}` = {second_value} name the same setting with different values; send one of them")]
    ConflictingAliases {
        /// The first name sent.
        first: String,
        /// Its value.
        first_value: String,
        /// The other name sent.
        second: String,
        /// Its value.
        second_value: String,
    },
}

impl SamplingError {
    /// The request field this error is about, if it is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            SamplingError::Param { field, .. }
            | SamplingError::TokenOutOfRange { field, .. }
            | SamplingError::NeedsVocab { field, .. }
            | SamplingError::NotSupported { field, .. } => Some(field),
            SamplingError::ConflictingAliases { first, .. } => Some(first),
            SamplingError::UnknownSampler(_) | SamplingError::UnknownSamplerLetter(_) => {
                Some("samplers")
            }
            _ => None,
        }
    }

    /// Shorthand for a parameter error.
    pub fn param(field: &str, value: impl std::fmt::Display, allowed: &str) -> Self {
        SamplingError::Param {
            field: field.to_string(),
            value: value.to_string(),
            allowed: allowed.to_string(),
        }
    }
}

/// The crate's result type: [`SamplingError`] unless said otherwise.
pub type Result<T, E = SamplingError> = std::result::Result<T, E>;
