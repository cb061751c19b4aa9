//! `logit-bias` (STUB: not implemented yet).

use crate::candidates::{Candidates, TokenId};
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// STUB
#[derive(Clone, Debug)]
pub struct LogitBias {
    n_vocab: usize,
    biases: Vec<(TokenId, f32)>,
}

/// Build the stage as llama.cpp's init function does (a `?logit-bias` placeholder when disabled).
#[allow(clippy::too_many_arguments)]
pub fn build(n_vocab: usize, biases: Vec<(TokenId, f32)>) -> Box<dyn Sampler> {
    if biases.is_empty() {
        return Placeholder::boxed("?logit-bias");
    }
    Box::new(LogitBias { n_vocab, biases })
}

impl Sampler for LogitBias {
    fn name(&self) -> &str {
        "logit-bias"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        unimplemented!("STUB logit-bias")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
