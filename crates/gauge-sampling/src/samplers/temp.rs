//! `temp` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// STUB
#[derive(Clone, Debug)]
pub struct Temp {
    t: f32,
}

/// Build the stage as llama.cpp's init function does (a `?temp` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(t: f32) -> Box<dyn Sampler> {
    if t == 1.0 {
        return Placeholder::boxed("?temp");
    }
    Box::new(Temp { t })
}

impl Sampler for Temp {
    fn name(&self) -> &str {
        "temp"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB temp")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
