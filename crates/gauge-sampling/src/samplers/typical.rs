//! `typical` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// STUB
#[derive(Clone, Debug)]
pub struct Typical {
    p: f32,
    min_keep: usize,
}

/// Build the stage as llama.cpp's init function does (a `?typical` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(p: f32, min_keep: usize) -> Box<dyn Sampler> {
    if p >= 1.0 {
        return Placeholder::boxed("?typical");
    }
    Box::new(Typical { p, min_keep })
}

impl Sampler for Typical {
    fn name(&self) -> &str {
        "typical"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB typical")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
