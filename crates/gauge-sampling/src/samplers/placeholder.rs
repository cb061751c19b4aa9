//! The `?name` placeholder llama.cpp puts in the chain for a disabled stage: no state, no effect.

use crate::candidates::Candidates;
use crate::overlay::Overlay;
use crate::sampler::{Sampler, Shift};

/// A disabled stage. It keeps no history, so enabling the real stage later starts from scratch.
#[derive(Clone, Debug)]
pub struct Placeholder {
    name: &'static str,
}

impl Placeholder {
    /// `name` includes the leading `?`, e.g. `"?top-k"`.
    pub fn boxed(name: &'static str) -> Box<dyn Sampler> {
        debug_assert!(name.starts_with('?'));
        Box::new(Placeholder { name })
    }
}

impl Sampler for Placeholder {
    fn name(&self) -> &str {
        self.name
    }
    fn apply(&mut self, _cur: &mut Candidates) {}
    fn apply_sparse(&mut self, _row: &[f32], _ov: &mut Overlay) -> bool {
        true
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}
