//! `top-n-sigma` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// STUB
#[derive(Clone, Debug)]
pub struct TopNSigma {
    n: f32,
}

/// Build the stage as llama.cpp's init function does (a `?top-n-sigma` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(n: f32) -> Box<dyn Sampler> {
    if n <= 0.0 {
        return Placeholder::boxed("?top-n-sigma");
    }
    Box::new(TopNSigma { n })
}

impl Sampler for TopNSigma {
    fn name(&self) -> &str {
        "top-n-sigma"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB top-n-sigma")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
