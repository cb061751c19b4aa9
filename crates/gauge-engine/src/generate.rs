//! The generation loop: prompt in, tokens and text out, sampled by a gauge [`Chain`].
//!
//! One run: tokenize the prompt (through the model's chat template when asked), accept every
//! prompt token into the chain (`Chain::accept_prompt`, as llama-server and llama-completion feed
//! the prompt to `accept`), prefill it in one step, then loop: sample from the row, stop on an
//! end-of-generation token (unless `ignore_eos`), stream the token's text through the callback,
//! push the token, step. Text is streamed through [`Utf8Stream`], so a character split across
//! tokens is delivered whole.
//!
//! This is what `gauge generate` calls; the caller builds the chain (`Chain::from_params`) so the
//! same loop serves every sampler configuration.

use std::sync::Arc;
use std::time::Instant;

use gauge_sampling::{Chain, TokenId};

use crate::error::{EngineError, Result};
use crate::llama_source::LlamaSource;
use crate::model::{Model, ModelOptions, Utf8Stream};
use crate::source::{LogitSource, SeqId, SourceError};

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct GenerateRequest {
    pub prompt: String,
    /// Wrap the prompt as one user message in the model's chat template (assistant turn opened).
    pub chat: bool,
    /// Most tokens to generate; `None` = until an end-of-generation token or the context is full.
    pub max_tokens: Option<usize>,
    /// Keep going past end-of-generation tokens (the chain should also ban them, as
    /// `SamplingParams::ignore_eos` does).
    pub ignore_eos: bool,
}

impl Default for GenerateRequest {
    fn default() -> Self {
        Self {
            prompt: String::new(),
            chat: false,
            max_tokens: Some(128),
            ignore_eos: false,
        }
    }
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced an end-of-generation token (not included in the output).
    Eog { token: TokenId },
    /// `max_tokens` were generated.
    MaxTokens,
    /// The sequence filled the context window.
    ContextFull,
    /// The callback asked to stop.
    Cancelled,
}

/// Wall-clock split of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Timings {
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub sample_ms: f64,
}

/// The result of one run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Generation {
    /// The text the prompt became after the chat template (if any).
    pub prompt_text: String,
    pub prompt_tokens: Vec<TokenId>,
    /// Generated tokens, without the final end-of-generation token.
    pub tokens: Vec<TokenId>,
    /// Their text (control tokens render as nothing).
    pub text: String,
    pub stop: StopReason,
    pub timings: Timings,
}

/// A model with a one-sequence context, reusable across prompts.
#[derive(Debug)]
pub struct Generator {
    source: LlamaSource,
    seq: Option<SeqId>,
}

impl Generator {
    /// A generator over `model` with the model's `n_ctx` (one sequence).
    pub fn new(model: Arc<Model>) -> Result<Self> {
        let opts = ModelOptions {
            n_seq_max: 1,
            ..model.options().clone()
        };
        Ok(Self {
            source: LlamaSource::with_options(model, &opts)?,
            seq: None,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        self.source.model()
    }

    /// The token ids the request's prompt becomes (chat template applied when asked).
    pub fn prompt_tokens(&self, req: &GenerateRequest) -> Result<(String, Vec<TokenId>)> {
        let model = self.source.model();
        let text = if req.chat {
            model.apply_chat_template(&req.prompt)?
        } else {
            req.prompt.clone()
        };
        let toks = model.tokenize_prompt(&text)?;
        if toks.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        Ok((text, toks))
    }

    /// Generate with `chain`, calling `on_text` with each new piece of text; `on_text` returns
    /// `false` to stop (e.g. the output pipe closed).
    pub fn generate(
        &mut self,
        req: &GenerateRequest,
        chain: &mut Chain,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        self.generate_with(req, chain, &mut |c, row| c.sample(row), on_text)
    }

    /// [`Generator::generate`] with the sampling step in the caller's hands: `sample` gets the
    /// chain and each step's logit row, and must return the token and accept it into the chain
    /// (as `Chain::sample` does). `gauge explain` records every stage this way.
    pub fn generate_with(
        &mut self,
        req: &GenerateRequest,
        chain: &mut Chain,
        sample: &mut dyn FnMut(&mut Chain, &[f32]) -> gauge_sampling::Result<TokenId>,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        let model = Arc::clone(self.source.model());
        if chain.n_vocab() != model.n_vocab() {
            return Err(gauge_sampling::SamplingError::RowLength {
                expected: chain.n_vocab(),
                got: model.n_vocab(),
            }
            .into());
        }
        let (prompt_text, prompt_tokens) = self.prompt_tokens(req)?;
        if let Some(s) = self.seq.take() {
            self.source.free(s)?;
        }
        let seq = self.source.new_sequence()?;
        self.seq = Some(seq);

        let n_ctx = self.source.n_ctx();
        if prompt_tokens.len() >= n_ctx {
            return Err(SourceError::ContextOverflow {
                seq,
                needed: prompt_tokens.len() + 1,
                n_ctx,
            }
            .into());
        }
        for &t in &prompt_tokens {
            chain.accept_prompt(t);
        }
        let mut timings = Timings::default();
        let t0 = Instant::now();
        self.source.push(seq, &prompt_tokens)?;
        self.source.step()?;
        timings.prefill_ms = t0.elapsed().as_secs_f64() * 1e3;

        let mut tokens = Vec::new();
        let mut text = String::new();
        let mut piece_bytes = Vec::with_capacity(64);
        let mut piece = String::with_capacity(64);
        let mut utf8 = Utf8Stream::new();
        let max = req.max_tokens.unwrap_or(usize::MAX);
        let stop = loop {
            if tokens.len() >= max {
                break StopReason::MaxTokens;
            }
            let ts = Instant::now();
            let tok = sample(chain, self.source.logits(seq)?)?;
            timings.sample_ms += ts.elapsed().as_secs_f64() * 1e3;
            if !req.ignore_eos && model.is_eog(tok) {
                break StopReason::Eog { token: tok };
            }
            tokens.push(tok);
            piece_bytes.clear();
            model.token_piece_into(tok, false, &mut piece_bytes)?;
            piece.clear();
            utf8.push(&piece_bytes, &mut piece);
            if !piece.is_empty() {
                text.push_str(&piece);
                if !on_text(&piece) {
                    break StopReason::Cancelled;
                }
            }
            if tokens.len() >= max {
                break StopReason::MaxTokens;
            }
            if self.source.seq_len(seq)? + 1 > n_ctx {
                break StopReason::ContextFull;
            }
            let td = Instant::now();
            self.source.push(seq, &[tok])?;
            self.source.step()?;
            timings.decode_ms += td.elapsed().as_secs_f64() * 1e3;
        };
        piece.clear();
        utf8.finish(&mut piece);
        if !piece.is_empty() {
            text.push_str(&piece);
            on_text(&piece);
        }
        Ok(Generation {
            prompt_text,
            prompt_tokens,
            tokens,
            text,
            stop,
            timings,
        })
    }
}

/// One-shot: a fresh [`Generator`] over `model`, one run.
pub fn generate(
    model: Arc<Model>,
    req: &GenerateRequest,
    chain: &mut Chain,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation> {
    Generator::new(model)?.generate(req, chain, on_text)
}
