//! `LogitSource`: "give me the next logit rows", separated from llama.cpp so experiments can run on
//! a small deterministic source in unit tests and on a real model in integration tests.
//!
//! The model is driven as a set of live sequences. Each sequence has a token history; `push` queues
//! tokens, `step` evaluates every queued token of every sequence in one batch, and `logits` then
//! returns the row that predicts the token after each sequence's last token. `fork` makes a new
//! sequence that shares the parent's history (and, in the llama.cpp source, a copy of its KV cache),
//! so runs that agree so far cost one forward pass until they diverge.

use gauge_sampling::TokenId;

/// Identifies a live sequence of a `LogitSource`.
pub type SeqId = u32;

/// Errors of a logit source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The sequence would exceed the context window.
    #[error(
        "context overflow: sequence {seq} needs {needed} positions but the context holds {n_ctx}"
    )]
    ContextOverflow {
        seq: SeqId,
        needed: usize,
        n_ctx: usize,
    },
    /// More live sequences than the source supports.
    #[error("too many live sequences (max {max})")]
    TooManySequences { max: usize },
    /// Unknown or freed sequence id.
    #[error("unknown sequence {0}")]
    UnknownSequence(SeqId),
    /// A token id outside the vocabulary.
    #[error("token {token} out of range (n_vocab = {n_vocab})")]
    TokenOutOfRange { token: TokenId, n_vocab: usize },
    /// `logits` was asked for a sequence with pending tokens or never evaluated.
    #[error("sequence {0} has no logits: call step() after pushing tokens")]
    NoLogits(SeqId),
    /// The backend failed.
    #[error("backend: {0}")]
    Backend(String),
}

/// A model seen as a producer of logit rows for many sequences at once.
pub trait LogitSource {
    /// Width of a logit row.
    fn n_vocab(&self) -> usize;
    /// Context window per sequence.
    fn n_ctx(&self) -> usize;
    /// Create an empty sequence.
    fn new_sequence(&mut self) -> Result<SeqId, SourceError>;
    /// A new sequence with the same history as `parent` (which must have no pending tokens).
    fn fork(&mut self, parent: SeqId) -> Result<SeqId, SourceError>;
    /// Queue tokens to append to `seq`.
    fn push(&mut self, seq: SeqId, tokens: &[TokenId]) -> Result<(), SourceError>;
    /// Evaluate all queued tokens of all sequences (one batch where possible).
    fn step(&mut self) -> Result<(), SourceError>;
    /// The row predicting the next token of `seq` after the last `step`.
    fn logits(&self, seq: SeqId) -> Result<&[f32], SourceError>;
    /// Drop a sequence and its cache.
    fn free(&mut self, seq: SeqId) -> Result<(), SourceError>;
    /// Tokens evaluated so far (prefill + decode), for work accounting.
    fn forward_tokens(&self) -> u64;
}

/// What every source checks before queueing `tokens` on `seq`: each id is in the vocabulary, and
/// the sequence (`queued` = its evaluated plus pending tokens) still fits the context.
#[cfg(any(feature = "llama", feature = "candle"))]
pub(crate) fn check_push(
    seq: SeqId,
    tokens: &[TokenId],
    n_vocab: usize,
    queued: usize,
    n_ctx: usize,
) -> Result<(), SourceError> {
    if let Some(&token) = tokens.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
        return Err(SourceError::TokenOutOfRange { token, n_vocab });
    }
    let needed = queued + tokens.len();
    if needed > n_ctx {
        return Err(SourceError::ContextOverflow { seq, needed, n_ctx });
    }
    Ok(())
}
