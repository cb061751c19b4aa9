//! gauge-engine (skeleton): real GGUF models through llama.cpp, sampled by gauge's chain.

pub mod source;

pub use source::{LogitSource, SeqId, SourceError};
