//! `LlamaSource`: the [`LogitSource`] of a real model, many sequences in one llama.cpp context.
//!
//! Each live sequence owns a llama.cpp sequence id (a *slot*, `0..n_seq_max`). Public [`SeqId`]s
//! are handles that are never reused, so a stale handle is an error rather than a silent alias
//! of whatever sequence took its slot; slots are recycled by [`LogitSource::free`].
//!
//! The decode loop ([`LogitSource::step`]): the queued tokens of every sequence are laid out by
//! [`crate::batch`] (positions, one logit row per sequence), cut into `n_batch`-token
//! `llama_batch`es and decoded in order; after each decode the rows of the sequences that
//! finished in that chunk are copied into per-slot buffers. The copy (one row per sequence per
//! step) keeps `logits(seq)` valid across later decodes and lets a fork inherit its parent's row.
//!
//! Forks: `llama_memory_seq_cp(parent, child)` gives the child the parent's KV cache, so runs that
//! share a prefix compute it once. With the default per-sequence KV streams (`kv_unified =
//! false`) the copy is a buffer copy done by llama.cpp at the next decode; with a unified cache it
//! only tags the cells.
//!
//! Context overflow is checked in `push` (a sequence may hold at most `n_ctx` tokens), so it is a
//! typed error before anything reaches llama.cpp. If a decode fails anyway (no KV slot), the
//! sequences of that step are rolled back to their length before the step and their queues are
//! dropped, so the source stays usable.

use std::sync::Arc;

use gauge_sampling::TokenId;
use llama_cpp_2::context::params::{KvCacheType, LlamaContextParams};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::DecodeError;

use crate::batch::{plan_sequence, PlanEntry};
use crate::error::{EngineError, Result};
use crate::model::{Model, ModelOptions};
use crate::source::{check_push, LogitSource, SeqId, SourceError};

struct Slot {
    handle: Option<SeqId>,
    /// Tokens in the KV cache.
    n_past: usize,
    pending: Vec<TokenId>,
    /// The row predicting the next token, valid when `has_logits`.
    logits: Vec<f32>,
    has_logits: bool,
}

/// A llama.cpp context seen as a [`LogitSource`].
pub struct LlamaSource {
    // Field order is drop order: the context and the batch must go before the model they borrow.
    ctx: LlamaContext<'static>,
    batch: LlamaBatch<'static>,
    model: Arc<Model>,
    n_vocab: usize,
    n_ctx: usize,
    n_batch: usize,
    slots: Vec<Slot>,
    next_handle: SeqId,
    plan: Vec<PlanEntry>,
    forward: u64,
    decode_calls: u64,
}

impl std::fmt::Debug for LlamaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaSource")
            .field("model", &self.model.path())
            .field("n_ctx", &self.n_ctx)
            .field("n_seq_max", &self.slots.len())
            .field("live", &self.live())
            .field("forward_tokens", &self.forward)
            .finish()
    }
}

impl LlamaSource {
    /// A source with the model's own options (`n_ctx` per sequence, `n_seq_max`, `n_batch`, ...).
    pub fn new(model: Arc<Model>) -> Result<Self> {
        let opts = model.options().clone();
        Self::with_options(model, &opts)
    }

    /// A source with explicit options (the model's options are ignored).
    pub fn with_options(model: Arc<Model>, opts: &ModelOptions) -> Result<Self> {
        opts.validate()?;
        let n_seq = opts.n_seq_max as usize;
        // Per-sequence streams split n_ctx evenly, so ask for n_ctx per sequence in total.
        let total_ctx = opts
            .n_ctx
            .checked_mul(opts.n_seq_max)
            .filter(|&t| t <= 1 << 22)
            .ok_or_else(|| {
                EngineError::option(
                    "n_ctx * n_seq_max",
                    format!("{} * {}", opts.n_ctx, opts.n_seq_max),
                    "<= 4194304",
                )
            })?;
        let n_batch = opts.n_batch.min(total_ctx.max(1));
        let params = LlamaContextParams::default()
            .with_n_ctx(std::num::NonZeroU32::new(total_ctx))
            .with_n_batch(n_batch)
            .with_n_ubatch(n_batch)
            .with_n_seq_max(opts.n_seq_max)
            .with_n_threads(opts.threads())
            .with_n_threads_batch(opts.threads())
            .with_kv_unified(opts.kv_unified);
        let params = if opts.f32_attention {
            params
                .with_type_k(KvCacheType::F32)
                .with_type_v(KvCacheType::F32)
                .with_flash_attention_policy(llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED)
        } else {
            params
        };
        let ctx = model.new_context(params)?;
        // SAFETY: the context borrows the model, which lives in the `Arc` this struct holds; the
        // `Arc`'s pointee never moves, and the field order drops the context before the `Arc`.
        let ctx: LlamaContext<'static> =
            unsafe { std::mem::transmute::<LlamaContext<'_>, LlamaContext<'static>>(ctx) };
        let n_vocab = model.n_vocab();
        let slots = (0..n_seq)
            .map(|_| Slot {
                handle: None,
                n_past: 0,
                pending: Vec::new(),
                logits: Vec::new(),
                has_logits: false,
            })
            .collect();
        Ok(Self {
            ctx,
            batch: LlamaBatch::new(n_batch as usize, 1),
            model,
            n_vocab,
            n_ctx: opts.n_ctx as usize,
            n_batch: n_batch as usize,
            slots,
            next_handle: 0,
            plan: Vec::new(),
            forward: 0,
            decode_calls: 0,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Most sequences alive at once.
    pub fn n_seq_max(&self) -> usize {
        self.slots.len()
    }

    /// Sequences alive now.
    pub fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.handle.is_some()).count()
    }

    /// Tokens in the KV cache for `seq` (not counting queued ones).
    pub fn seq_len(&self, seq: SeqId) -> std::result::Result<usize, SourceError> {
        Ok(self.slots[self.slot(seq)?].n_past)
    }

    /// `llama_decode` calls so far.
    pub fn decode_calls(&self) -> u64 {
        self.decode_calls
    }

    fn slot(&self, seq: SeqId) -> std::result::Result<usize, SourceError> {
        self.slots
            .iter()
            .position(|s| s.handle == Some(seq))
            .ok_or(SourceError::UnknownSequence(seq))
    }

    fn alloc_slot(&mut self) -> std::result::Result<(usize, SeqId), SourceError> {
        let idx = self.slots.iter().position(|s| s.handle.is_none()).ok_or(
            SourceError::TooManySequences {
                max: self.slots.len(),
            },
        )?;
        let handle = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1);
        let n_vocab = self.n_vocab;
        let s = &mut self.slots[idx];
        s.handle = Some(handle);
        s.n_past = 0;
        s.pending.clear();
        s.has_logits = false;
        if s.logits.len() != n_vocab {
            s.logits = vec![0.0; n_vocab];
        }
        Ok((idx, handle))
    }

    /// Remove every cell of `slot` from position `p0` on.
    fn kv_truncate(&mut self, slot: usize, p0: usize) -> std::result::Result<(), SourceError> {
        let p0 = if p0 == 0 { None } else { Some(p0 as u32) };
        self.ctx
            .kv_cache_seq_rm(slot as i32, p0, None)
            .map_err(|e| SourceError::Backend(format!("removing KV cells of slot {slot}: {e}")))
    }

    /// Undo a failed step: drop the step's cells and queues of every sequence involved.
    fn rollback(&mut self, involved: &[(usize, usize)]) {
        for &(slot, n_past) in involved {
            let _ = self.kv_truncate(slot, n_past);
            let s = &mut self.slots[slot];
            s.n_past = n_past;
            s.pending.clear();
            s.has_logits = false;
        }
    }
}

impl LogitSource for LlamaSource {
    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn new_sequence(&mut self) -> std::result::Result<SeqId, SourceError> {
        let (idx, handle) = self.alloc_slot()?;
        // A recycled slot was cleared by `free`; clear again in case a failed step left cells.
        if let Err(e) = self.kv_truncate(idx, 0) {
            self.slots[idx].handle = None;
            return Err(e);
        }
        Ok(handle)
    }

    fn fork(&mut self, parent: SeqId) -> std::result::Result<SeqId, SourceError> {
        let p = self.slot(parent)?;
        if !self.slots[p].pending.is_empty() {
            return Err(SourceError::NoLogits(parent));
        }
        let (c, handle) = self.alloc_slot()?;
        let undo = |this: &mut Self, e: SourceError| {
            this.slots[c].handle = None;
            e
        };
        if let Err(e) = self.kv_truncate(c, 0) {
            return Err(undo(self, e));
        }
        if self.slots[p].n_past > 0 {
            if let Err(e) = self.ctx.copy_kv_cache_seq(p as i32, c as i32, None, None) {
                return Err(undo(
                    self,
                    SourceError::Backend(format!("copying KV cache: {e}")),
                ));
            }
        }
        let (n_past, has_logits) = (self.slots[p].n_past, self.slots[p].has_logits);
        // Copy the parent's row without a temporary: split the slot slice around the two indices.
        let (a, b) = if p < c {
            let (lo, hi) = self.slots.split_at_mut(c);
            (&lo[p], &mut hi[0])
        } else {
            let (lo, hi) = self.slots.split_at_mut(p);
            (&hi[0], &mut lo[c])
        };
        b.logits.copy_from_slice(&a.logits);
        b.n_past = n_past;
        b.has_logits = has_logits;
        Ok(handle)
    }

    fn push(&mut self, seq: SeqId, tokens: &[TokenId]) -> std::result::Result<(), SourceError> {
        let i = self.slot(seq)?;
        let s = &mut self.slots[i];
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

    fn step(&mut self) -> std::result::Result<(), SourceError> {
        let mut plan = std::mem::take(&mut self.plan);
        plan.clear();
        for (i, s) in self.slots.iter().enumerate() {
            if s.handle.is_some() && !s.pending.is_empty() {
                plan_sequence(i, s.n_past, &s.pending, &mut plan);
            }
        }
        if plan.is_empty() {
            self.plan = plan;
            return Ok(());
        }
        let mut result = Ok(());
        for chunk in plan.chunks(self.n_batch) {
            self.batch.clear();
            for e in chunk {
                if let Err(err) =
                    self.batch
                        .add(LlamaToken(e.token), e.pos, &[e.slot as i32], e.logits)
                {
                    result = Err(SourceError::Backend(format!("filling the batch: {err}")));
                    break;
                }
            }
            if result.is_err() {
                break;
            }
            self.decode_calls += 1;
            if let Err(err) = self.ctx.decode(&mut self.batch) {
                let first = chunk[0].slot;
                let s = &self.slots[first];
                result = Err(match err {
                    DecodeError::NoKvCacheSlot => SourceError::ContextOverflow {
                        seq: s.handle.unwrap_or(0),
                        needed: s.n_past + s.pending.len(),
                        n_ctx: self.n_ctx,
                    },
                    other => SourceError::Backend(format!("llama_decode: {other}")),
                });
                break;
            }
            self.forward += chunk.len() as u64;
            for (k, e) in chunk.iter().enumerate() {
                if e.logits {
                    let row = self.ctx.get_logits_ith(k as i32);
                    let s = &mut self.slots[e.slot];
                    s.logits.copy_from_slice(&row[..self.n_vocab]);
                }
            }
        }
        if let Err(e) = result {
            let involved: Vec<(usize, usize)> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.handle.is_some() && !s.pending.is_empty())
                .map(|(i, s)| (i, s.n_past))
                .collect();
            self.rollback(&involved);
            self.plan = plan;
            return Err(e);
        }
        for s in self.slots.iter_mut() {
            if s.handle.is_some() && !s.pending.is_empty() {
                s.n_past += s.pending.len();
                s.pending.clear();
                s.has_logits = true;
            }
        }
        self.plan = plan;
        Ok(())
    }

    fn logits(&self, seq: SeqId) -> std::result::Result<&[f32], SourceError> {
        let s = &self.slots[self.slot(seq)?];
        if !s.has_logits || !s.pending.is_empty() {
            return Err(SourceError::NoLogits(seq));
        }
        Ok(&s.logits)
    }

    fn free(&mut self, seq: SeqId) -> std::result::Result<(), SourceError> {
        let i = self.slot(seq)?;
        let res = self.kv_truncate(i, 0);
        let s = &mut self.slots[i];
        s.handle = None;
        s.n_past = 0;
        s.pending.clear();
        s.has_logits = false;
        res
    }

    fn forward_tokens(&self) -> u64 {
        self.forward
    }
}
