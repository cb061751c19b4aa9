//! `temp-ext` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// STUB
#[derive(Clone, Debug)]
pub struct TempExt {
    t: f32,
    delta: f32,
    exponent: f32,
}

/// Build the stage as llama.cpp's init function does (a `?temp-ext` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(t: f32, delta: f32, exponent: f32) -> Box<dyn Sampler> {
    if t == 1.0 && delta <= 0.0 {
        return Placeholder::boxed("?temp-ext");
    }
    Box::new(TempExt { t, delta, exponent })
}

impl Sampler for TempExt {
    fn name(&self) -> &str {
        "temp-ext"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB temp-ext")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
