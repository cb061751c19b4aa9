//! `mirostat` (STUB: not implemented yet).

use crate::candidates::Candidates;
use crate::sampler::{Sampler, Shift};

/// STUB
#[derive(Clone, Debug)]
pub struct Mirostat {
    n_vocab: usize,
    seed: u32,
    tau: f32,
    eta: f32,
    m: i32,
}

/// Build the stage as llama.cpp's init function does (a `?mirostat` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(n_vocab: usize, seed: u32, tau: f32, eta: f32, m: i32) -> Box<dyn Sampler> {
    Box::new(Mirostat { n_vocab, seed, tau, eta, m })
}

impl Sampler for Mirostat {
    fn name(&self) -> &str {
        "mirostat"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB mirostat")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
