//! The `Sampler` trait: one stage of a chain.

use crate::candidates::{Candidates, TokenId};

/// How a stage responds to a constant added to every logit (a change of gauge).
///
/// Softmax ignores such a constant, so a stage whose output changes with it is reading a coordinate
/// the model never fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "reason", rename_all = "snake_case")]
pub enum Shift {
    /// Output unchanged (up to f32 rounding) when every logit moves by the same constant.
    Invariant,
    /// Output depends on where the logits sit; the string says why.
    Variant(&'static str),
}

impl Shift {
    pub fn is_invariant(self) -> bool {
        matches!(self, Shift::Invariant)
    }
}

/// One stage of a sampler chain, with llama.cpp's `llama_sampler_i` semantics.
///
/// `apply` never fails: the chain validates its input once (finite logits, non-empty set) before the
/// stages run, exactly as llama.cpp's samplers trust `llama_sampler_sample`.
pub trait Sampler: Send + std::fmt::Debug {
    /// The runtime name llama.cpp prints in the chain (`top-k`, `?top-k` for a placeholder, ...).
    fn name(&self) -> &str;
    /// Transform the candidate set in place.
    fn apply(&mut self, cur: &mut Candidates);
    /// Record a token that was accepted into the sequence (prompt tokens included).
    fn accept(&mut self, _token: TokenId) {}
    /// Record a prompt token. Defaults to `accept`, as llama.cpp's server and CLI feed the prompt
    /// through `accept`; a stage may be configured to ignore prompt tokens.
    fn accept_prompt(&mut self, token: TokenId) {
        self.accept(token)
    }
    /// Forget all history and reseed generators.
    fn reset(&mut self) {}
    /// Whether this stage, as configured, is shift-invariant.
    fn shift(&self) -> Shift;
    /// A copy with the same state (used by the runtime gauge check).
    fn box_clone(&self) -> Box<dyn Sampler>;
}

impl Clone for Box<dyn Sampler> {
    fn clone(&self) -> Self {
        self.box_clone()
    }
}
