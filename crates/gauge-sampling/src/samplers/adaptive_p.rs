//! `adaptive-p` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};

/// STUB
#[derive(Clone, Debug)]
pub struct AdaptiveP {
    target: f32,
    decay: f32,
    seed: u32,
}

/// Build the stage as llama.cpp's init function does (a `?adaptive-p` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(target: f32, decay: f32, seed: u32) -> Box<dyn Sampler> {
    Box::new(AdaptiveP { target, decay, seed })
}

impl Sampler for AdaptiveP {
    fn name(&self) -> &str {
        "adaptive-p"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB adaptive-p")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
