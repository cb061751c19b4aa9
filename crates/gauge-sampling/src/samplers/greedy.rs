//! `greedy` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};

/// STUB
#[derive(Clone, Debug)]
pub struct Greedy ;

/// Build the stage as llama.cpp's init function does (a `?greedy` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build() -> Box<dyn Sampler> {
    Box::new(Greedy)
}

impl Sampler for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB greedy")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
