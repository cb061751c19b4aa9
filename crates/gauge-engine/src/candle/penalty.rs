//! candle's own decision for one probe run: a shift of every logit by `c` (a logits processor
//! placed before the penalty), then `candle_transformers::utils::apply_repeat_penalty` (`>= 0`
//! divides by θ, else multiplies; each distinct token of the context once), then the greedy pick
//! of candle's `LogitsProcessor` (`Sampling::ArgMax`: the first maximum), as candle-examples'
//! quantized example decodes.
//!
//! The context is the run's history: every prompt token (when the scope includes the prompt) and
//! every accepted token, cut to the last `last_n` when a window is set. candle's example passes
//! `all_tokens[len - repeat_last_n..]` where `all_tokens` holds only the generated tokens (the
//! prompt is never in it) and `repeat_last_n` defaults to 64: [`CandleScope::ENGINE`].

use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use gauge_sampling::TokenId;

use crate::error::{EngineError, Result};

/// Which tokens candle's penalty sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CandleScope {
    /// The prompt is part of the context.
    pub prompt: bool,
    /// Only the last `n` tokens of the context (`None`: all of it).
    pub last_n: Option<usize>,
}

impl CandleScope {
    /// The probe protocol's seen set: prompt + every generated token, no window.
    pub const PROTOCOL: CandleScope = CandleScope {
        prompt: true,
        last_n: None,
    };
    /// candle-examples' quantized example as shipped: the last `repeat_last_n = 64` generated
    /// tokens (`all_tokens` never holds the prompt).
    pub const ENGINE: CandleScope = CandleScope {
        prompt: false,
        last_n: Some(64),
    };
}

/// One run's chain: shift → candle's `apply_repeat_penalty` → candle's greedy.
pub struct CandleChain {
    c: f32,
    penalty: f32,
    scope: CandleScope,
    context: Vec<u32>,
    greedy: LogitsProcessor,
    shifted: Vec<f32>,
}

impl std::fmt::Debug for CandleChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleChain")
            .field("c", &self.c)
            .field("penalty", &self.penalty)
            .field("scope", &self.scope)
            .field("context_len", &self.context.len())
            .finish()
    }
}

impl CandleChain {
    /// A chain adding `c` to every logit and penalizing with `penalty` (θ > 0, finite).
    pub fn new(c: f32, penalty: f32, scope: CandleScope) -> Result<Self> {
        if !(penalty.is_finite() && penalty > 0.0) {
            return Err(EngineError::Candle(format!(
                "invalid repeat penalty {penalty} (allowed: finite > 0)"
            )));
        }
        if !c.is_finite() {
            return Err(EngineError::Candle(format!(
                "invalid shift {c} (allowed: finite)"
            )));
        }
        Ok(CandleChain {
            c,
            penalty,
            scope,
            context: Vec::new(),
            // The seed is unused by ArgMax.
            greedy: LogitsProcessor::from_sampling(0, Sampling::ArgMax),
            shifted: Vec::new(),
        })
    }

    /// The prompt, before the first step (kept only if the scope includes the prompt).
    pub fn accept_prompt(&mut self, prompt: &[TokenId]) {
        if self.scope.prompt {
            self.context.extend(prompt.iter().map(|&t| t as u32));
        }
    }

    /// A generated token joins the context.
    pub fn accept(&mut self, token: TokenId) {
        self.context.push(token as u32);
    }

    /// The context candle's penalty sees now.
    pub fn context(&self) -> &[u32] {
        let start = self
            .scope
            .last_n
            .map_or(0, |n| self.context.len().saturating_sub(n));
        &self.context[start..]
    }

    /// candle's pick on `row` (the token is not accepted).
    pub fn sample_no_accept(&mut self, row: &[f32]) -> Result<TokenId> {
        self.shifted.clear();
        self.shifted.extend(row.iter().map(|&z| z + self.c));
        let err = |e: candle_core::Error| EngineError::Candle(e.to_string());
        let logits =
            Tensor::from_slice(&self.shifted, self.shifted.len(), &Device::Cpu).map_err(err)?;
        let start = self
            .scope
            .last_n
            .map_or(0, |n| self.context.len().saturating_sub(n));
        let logits = candle_transformers::utils::apply_repeat_penalty(
            &logits,
            self.penalty,
            &self.context[start..],
        )
        .map_err(err)?;
        let t = self.greedy.sample(&logits).map_err(err)?;
        Ok(t as TokenId)
    }
}
