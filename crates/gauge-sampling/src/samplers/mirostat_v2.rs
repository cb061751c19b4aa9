//! `mirostat-v2` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};

/// STUB
#[derive(Clone, Debug)]
pub struct MirostatV2 {
    seed: u32,
    tau: f32,
    eta: f32,
}

/// Build the stage as llama.cpp's init function does (a `?mirostat-v2` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(seed: u32, tau: f32, eta: f32) -> Box<dyn Sampler> {
    Box::new(MirostatV2 { seed, tau, eta })
}

impl Sampler for MirostatV2 {
    fn name(&self) -> &str {
        "mirostat-v2"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB mirostat-v2")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
