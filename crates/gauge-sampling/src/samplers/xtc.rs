//! `xtc` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// STUB
#[derive(Clone, Debug)]
pub struct Xtc {
    probability: f32,
    threshold: f32,
    min_keep: usize,
    seed: u32,
}

/// Build the stage as llama.cpp's init function does (a `?xtc` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Box<dyn Sampler> {
    if probability <= 0.0 || threshold > 0.5 {
        return Placeholder::boxed("?xtc");
    }
    Box::new(Xtc { probability, threshold, min_keep, seed })
}

impl Sampler for Xtc {
    fn name(&self) -> &str {
        "xtc"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB xtc")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
