//! `min-p` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// STUB
#[derive(Clone, Debug)]
pub struct MinP {
    p: f32,
    min_keep: usize,
}

/// Build the stage as llama.cpp's init function does (a `?min-p` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(p: f32, min_keep: usize) -> Box<dyn Sampler> {
    if p <= 0.0 {
        return Placeholder::boxed("?min-p");
    }
    Box::new(MinP { p, min_keep })
}

impl Sampler for MinP {
    fn name(&self) -> &str {
        "min-p"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB min-p")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
