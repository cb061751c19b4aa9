//! The `Sampler` trait: one stage of a chain.

use crate::candidates::{Candidates, TokenId};
use crate::overlay::Overlay;

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
    /// True for [`Shift::Invariant`].
    pub fn is_invariant(self) -> bool {
        matches!(self, Shift::Invariant)
    }
}

/// Outcome of [`Sampler::apply_from_row`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FromRow {
    /// The array is exactly what fill + `apply` would leave.
    Done,
    /// Not done; the chain fills the array and calls `apply`.
    Declined,
    /// The row holds NaN or +inf; the chain reports it.
    Invalid,
}

/// One stage of a sampler chain, with llama.cpp's `llama_sampler_i` semantics.
///
/// `apply` never fails: the chain validates its input once (finite logits, non-empty set) before the
/// stages run, exactly as llama.cpp's samplers trust `llama_sampler_sample`.
pub trait Sampler: CloneSampler + Send + std::fmt::Debug {
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
    /// Sparse form of `apply`, used while the array would still be llama.cpp's freshly filled
    /// identity layout (`data[i].id == i`, unsorted): record the stage's effect as edits to single
    /// logits in `ov` (read current values with `ov.get(row, id)`). Return `false` if this stage
    /// cannot (the default); the chain then materialises the array and calls `apply`. Stages whose
    /// effect touches a few ids (logit-bias, penalties, DRY) implement it so the chain never fills a
    /// vocabulary-sized array for them.
    fn apply_sparse(&mut self, _row: &[f32], _ov: &mut Overlay) -> bool {
        false
    }
    /// First-dense-stage form of `apply`: produce exactly the array `apply` would leave, reading
    /// "row + edits" directly instead of a filled array, and checking the row for NaN/+inf on the
    /// way (so validation costs no separate pass). Returns `Declined` when that is not possible
    /// exactly (e.g. ties whose order depends on llama.cpp's sort); the chain takes the slow path.
    fn apply_from_row(&mut self, _row: &[f32], _ov: &Overlay, _cur: &mut Candidates) -> FromRow {
        FromRow::Declined
    }
    /// Whether `apply_from_row` handles an allowed set recorded with [`Overlay::keep_only`]
    /// (removed ids read as `-inf`, but the array it leaves must be the one over the allowed
    /// entries only). The chain fills the array for a stage that does not say so.
    fn reads_keep_mask(&self) -> bool {
        false
    }
    /// Feedback state worth showing when a step is explained (mirostat's `mu`); none by default.
    fn explain_state(&self) -> Vec<(&'static str, f32)> {
        Vec::new()
    }
    /// Forget all history and reseed generators.
    fn reset(&mut self) {}
    /// Whether this stage, as configured, is shift-invariant.
    fn shift(&self) -> Shift;
    /// A copy with the same state (used by the runtime gauge check). Provided for every `Clone`
    /// stage by [`CloneSampler`]; there is no reason to override it.
    fn box_clone(&self) -> Box<dyn Sampler> {
        self.clone_sampler()
    }
}

/// Boxed copies of a stage, implemented once for every `Sampler + Clone`, so a stage only derives
/// `Clone` instead of writing its own `box_clone`.
pub trait CloneSampler {
    /// A boxed copy with the same state.
    fn clone_sampler(&self) -> Box<dyn Sampler>;
}

impl<T: Sampler + Clone + 'static> CloneSampler for T {
    fn clone_sampler(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn Sampler> {
    fn clone(&self) -> Self {
        self.box_clone()
    }
}
