//! `dist` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};

/// STUB
#[derive(Clone, Debug)]
pub struct Dist {
    seed: u32,
}

/// Build the stage as llama.cpp's init function does (a `?dist` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(seed: u32) -> Box<dyn Sampler> {
    Box::new(Dist { seed })
}

impl Sampler for Dist {
    fn name(&self) -> &str {
        "dist"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB dist")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
