//! `CandleSource`: candle-transformers' quantized llama as a [`LogitSource`].
//!
//! candle's `ModelWeights` keeps its KV cache inside the model value (one cache per layer, one
//! sequence per value). The weights are reference-counted tensors and the caches immutable
//! tensors that each step replaces by a concatenation, so a clone of the value is a cheap new
//! sequence that shares every weight and, for a fork, the parent's cache as it is: nothing is
//! recomputed and nothing is copied until the child steps.
//!
//! Batching: the caches are private to candle, so sequences cannot be stacked into one batch;
//! `step` runs one forward per sequence that has queued tokens (all of a sequence's queued tokens
//! in that one forward, as candle's examples prefill a prompt). Rows therefore never depend on
//! what else is in the batch.

use std::path::Path;

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::{ModelWeights, MAX_SEQ_LEN};
use gauge_sampling::TokenId;

use super::weights::{load_model, CandleWeights};
use crate::error::{EngineError, Result};
use crate::source::{check_push, LogitSource, SeqId, SourceError};

struct Seq {
    handle: SeqId,
    /// The model value that holds this sequence's KV cache.
    model: ModelWeights,
    /// Tokens in the cache.
    n_past: usize,
    pending: Vec<TokenId>,
    logits: Vec<f32>,
    has_logits: bool,
}

/// A GGUF run by candle, many sequences, each with its own KV cache.
pub struct CandleSource {
    /// The loaded model with an empty cache: every new sequence starts as a clone of it.
    base: ModelWeights,
    seqs: Vec<Seq>,
    n_vocab: usize,
    n_ctx: usize,
    max_seqs: usize,
    next_handle: SeqId,
    forward: u64,
    forward_calls: u64,
    weights: CandleWeights,
}

impl std::fmt::Debug for CandleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleSource")
            .field("n_vocab", &self.n_vocab)
            .field("n_ctx", &self.n_ctx)
            .field("live", &self.seqs.len())
            .field("weights", &self.weights)
            .field("forward_tokens", &self.forward)
            .finish()
    }
}

/// Options of a [`CandleSource`].
#[derive(Debug, Clone, Copy)]
pub struct CandleOptions {
    /// Positions per sequence (at most candle's `MAX_SEQ_LEN`, 4096: its rotary tables).
    pub n_ctx: usize,
    /// Most live sequences.
    pub max_seqs: usize,
    pub weights: CandleWeights,
}

impl Default for CandleOptions {
    fn default() -> Self {
        CandleOptions {
            n_ctx: 2048,
            max_seqs: 256,
            weights: CandleWeights::Float32,
        }
    }
}

impl CandleSource {
    /// Load `gguf` (already float32 for [`CandleWeights::Float32`]: see
    /// [`super::ensure_f32_gguf`]; [`super::open`] does both).
    pub fn load(gguf: &Path, opts: CandleOptions) -> Result<Self> {
        if opts.n_ctx == 0 || opts.n_ctx > MAX_SEQ_LEN {
            return Err(EngineError::Candle(format!(
                "invalid option `n_ctx`: {} (allowed: 1..={MAX_SEQ_LEN}, candle's rotary tables)",
                opts.n_ctx
            )));
        }
        if opts.max_seqs == 0 {
            return Err(EngineError::Candle(
                "invalid option `max_seqs`: 0 (allowed: >= 1)".into(),
            ));
        }
        let (base, n_vocab) = load_model(gguf)?;
        Ok(CandleSource {
            base,
            seqs: Vec::new(),
            n_vocab,
            n_ctx: opts.n_ctx,
            max_seqs: opts.max_seqs,
            next_handle: 0,
            forward: 0,
            forward_calls: 0,
            weights: opts.weights,
        })
    }

    /// Which weights this source runs.
    pub fn weights(&self) -> CandleWeights {
        self.weights
    }

    /// Forward passes run so far (one per sequence per `step` with queued tokens).
    pub fn forward_calls(&self) -> u64 {
        self.forward_calls
    }

    /// Sequences alive now.
    pub fn live(&self) -> usize {
        self.seqs.len()
    }

    fn index(&self, seq: SeqId) -> Result<usize, SourceError> {
        self.seqs
            .iter()
            .position(|s| s.handle == seq)
            .ok_or(SourceError::UnknownSequence(seq))
    }

    fn new_handle(&mut self) -> Result<SeqId, SourceError> {
        if self.seqs.len() >= self.max_seqs {
            return Err(SourceError::TooManySequences { max: self.max_seqs });
        }
        let h = self.next_handle;
        self.next_handle = self
            .next_handle
            .checked_add(1)
            .ok_or_else(|| SourceError::Backend("sequence handles exhausted".into()))?;
        Ok(h)
    }
}

fn backend(e: candle_core::Error) -> SourceError {
    SourceError::Backend(format!("candle: {e}"))
}

/// One forward of `tokens` after `n_past` cached positions; the row after the last token.
fn forward(
    model: &mut ModelWeights,
    tokens: &[TokenId],
    n_past: usize,
) -> Result<Vec<f32>, SourceError> {
    let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
    let x = Tensor::new(ids.as_slice(), &Device::Cpu)
        .and_then(|t| t.unsqueeze(0))
        .map_err(backend)?;
    let logits = model.forward(&x, n_past).map_err(backend)?;
    logits
        .squeeze(0)
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(backend)
}

impl LogitSource for CandleSource {
    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn new_sequence(&mut self) -> Result<SeqId, SourceError> {
        let handle = self.new_handle()?;
        let mut model = self.base.clone();
        model.clear_kv_cache();
        self.seqs.push(Seq {
            handle,
            model,
            n_past: 0,
            pending: Vec::new(),
            logits: Vec::new(),
            has_logits: false,
        });
        Ok(handle)
    }

    fn fork(&mut self, parent: SeqId) -> Result<SeqId, SourceError> {
        let i = self.index(parent)?;
        if !self.seqs[i].pending.is_empty() {
            return Err(SourceError::Backend(format!(
                "fork of sequence {parent} with queued tokens: step() first"
            )));
        }
        let handle = self.new_handle()?;
        let p = &self.seqs[i];
        let child = Seq {
            handle,
            model: p.model.clone(),
            n_past: p.n_past,
            pending: Vec::new(),
            logits: p.logits.clone(),
            has_logits: p.has_logits,
        };
        self.seqs.push(child);
        Ok(handle)
    }

    fn push(&mut self, seq: SeqId, tokens: &[TokenId]) -> Result<(), SourceError> {
        let i = self.index(seq)?;
        let s = &mut self.seqs[i];
        check_push(
            seq,
            tokens,
            self.n_vocab,
            s.n_past + s.pending.len(),
            self.n_ctx,
        )?;
        s.pending.extend_from_slice(tokens);
        if !tokens.is_empty() {
            s.has_logits = false;
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), SourceError> {
        for s in self.seqs.iter_mut().filter(|s| !s.pending.is_empty()) {
            // On failure the sequence keeps its old length and drops its queue, so the source
            // stays usable (candle replaced no cache: the forward returned early).
            let pending = std::mem::take(&mut s.pending);
            let before = s.model.clone();
            match forward(&mut s.model, &pending, s.n_past) {
                Ok(row) => {
                    s.n_past += pending.len();
                    s.logits = row;
                    s.has_logits = true;
                    self.forward += pending.len() as u64;
                    self.forward_calls += 1;
                }
                Err(e) => {
                    s.model = before;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn logits(&self, seq: SeqId) -> Result<&[f32], SourceError> {
        let s = &self.seqs[self.index(seq)?];
        if !s.has_logits || !s.pending.is_empty() {
            return Err(SourceError::NoLogits(seq));
        }
        Ok(&s.logits)
    }

    fn free(&mut self, seq: SeqId) -> Result<(), SourceError> {
        let i = self.index(seq)?;
        self.seqs.swap_remove(i);
        Ok(())
    }

    fn forward_tokens(&self) -> u64 {
        self.forward
    }
}
