//! `top-k` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// STUB
#[derive(Clone, Debug)]
pub struct TopK {
    k: i32,
}

/// Build the stage as llama.cpp's init function does (a `?top-k` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(k: i32) -> Box<dyn Sampler> {
    if k <= 0 {
        return Placeholder::boxed("?top-k");
    }
    Box::new(TopK { k })
}

impl Sampler for TopK {
    fn name(&self) -> &str {
        "top-k"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB top-k")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
