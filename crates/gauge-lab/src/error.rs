//! Errors of the lab: one enum, variants with the facts needed to act on them.

use gauge_engine::{EngineError, SourceError};
use std::path::PathBuf;

/// Everything that can stop an experiment.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A configuration value is out of range.
    #[error("invalid value for `{field}`: {value} (allowed: {allowed})")]
    Config {
        field: String,
        value: String,
        allowed: String,
    },
    /// The model source failed.
    #[error("model source: {0}")]
    Source(#[from] SourceError),
    /// llama.cpp's sampler chain (the `llama-cpp` stack) refused a setting or a row.
    #[error("llama.cpp sampler: {0}")]
    Engine(#[from] EngineError),
    /// The tokenizer callback failed or returned nothing.
    #[error("tokenizing prefix {prefix}: {message}")]
    Tokenize { prefix: usize, message: String },
    /// Reading or writing a result file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A result file could not be parsed.
    #[error("{path}: line {line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The run directory holds a different configuration than the one asked for.
    #[error("{path} holds a different configuration; use another --out or remove the directory")]
    ConfigMismatch { path: PathBuf },
    /// The validity gate failed: an operator changed its output under the gauge at θ = 1.
    #[error("VALIDITY GATE FAILED at θ = 1: {details}. The shift changed greedy decisions with the penalty off, so the flip rates measure numerical noise, not the operator; results were written but must not be used")]
    GateFailed { details: String },
    /// The run was stopped on purpose (test hook); starting it again resumes it.
    #[error("run stopped after {chunks} chunks (resume by running the same command again)")]
    Aborted { chunks: usize },
    /// Rendering a plot failed.
    #[error("plot {name}: {message}")]
    Plot { name: String, message: String },
}

impl LabError {
    /// Shorthand for a configuration error.
    pub fn config(field: &str, value: impl std::fmt::Display, allowed: &str) -> Self {
        LabError::Config {
            field: field.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }

    /// Attach a path to an I/O error.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LabError {
        let path = path.into();
        move |source| LabError::Io { path, source }
    }
}
