//! `Chain`: ordered stages, the sample loop, and llama.cpp's chain print.

use crate::candidates::{Candidates, TokenId};
use crate::error::{Result, SamplingError};
use crate::sampler::{Sampler, Shift};

/// An ordered list of stages applied to one candidate array, ending in a terminal sampler.
#[derive(Clone, Debug)]
pub struct Chain {
    stages: Vec<Box<dyn Sampler>>,
    n_vocab: usize,
    cur: Candidates,
}

impl Chain {
    /// A chain over `stages` (in order) for a vocabulary of `n_vocab` logits.
    pub fn from_stages(n_vocab: usize, stages: Vec<Box<dyn Sampler>>) -> Self {
        Self { stages, n_vocab, cur: Candidates::new() }
    }

    /// The vocabulary size this chain expects.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The stages, in order.
    pub fn stages(&self) -> &[Box<dyn Sampler>] {
        &self.stages
    }

    /// llama.cpp's chain print: `"logits "` then `"-> name "` per stage (note the trailing space).
    pub fn describe(&self) -> String {
        let mut s = String::from("logits ");
        for st in &self.stages {
            s.push_str("-> ");
            s.push_str(st.name());
            s.push(' ');
        }
        s
    }

    /// Per-stage shift behaviour, in chain order.
    pub fn shift_report(&self) -> Vec<(String, Shift)> {
        self.stages.iter().map(|s| (s.name().to_string(), s.shift())).collect()
    }

    /// Check a logit row: right length, no NaN, no +inf, at least one finite value.
    pub fn validate_row(&self, logits: &[f32]) -> Result<()> {
        if logits.len() != self.n_vocab {
            return Err(SamplingError::RowLength { expected: self.n_vocab, got: logits.len() });
        }
        if logits.is_empty() {
            return Err(SamplingError::Empty("the vocabulary is empty".into()));
        }
        let mut any_finite = false;
        for (i, &x) in logits.iter().enumerate() {
            if x.is_nan() || x == f32::INFINITY {
                return Err(SamplingError::NonFiniteLogit { index: i, value: x });
            }
            any_finite |= x.is_finite();
        }
        if !any_finite {
            return Err(SamplingError::NoFiniteLogit);
        }
        Ok(())
    }

    /// Apply every stage to `cur` in order (llama.cpp `llama_sampler_apply` on a chain).
    pub fn apply(&mut self, cur: &mut Candidates) {
        for st in self.stages.iter_mut() {
            st.apply(cur);
        }
    }

    /// Sample one token from a logit row and accept it: the work of `llama_sampler_sample`.
    pub fn sample(&mut self, logits: &[f32]) -> Result<TokenId> {
        let tok = self.sample_no_accept(logits)?;
        self.accept(tok);
        Ok(tok)
    }

    /// Run the chain on a logit row and return the selected token without accepting it.
    pub fn sample_no_accept(&mut self, logits: &[f32]) -> Result<TokenId> {
        self.validate_row(logits)?;
        let mut cur = std::mem::take(&mut self.cur);
        cur.fill(logits);
        self.apply(&mut cur);
        let tok = cur.selected_token();
        self.cur = cur;
        tok.ok_or_else(|| SamplingError::Empty("no candidate was selected (the chain has no terminal sampler, or every candidate was removed)".into()))
    }

    /// The candidate array left by the last `sample` (for inspection: ids, p, order).
    pub fn last_candidates(&self) -> &Candidates {
        &self.cur
    }

    /// Accept a generated token into every stage.
    pub fn accept(&mut self, token: TokenId) {
        for st in self.stages.iter_mut() {
            st.accept(token);
        }
    }

    /// Accept a prompt token into every stage.
    pub fn accept_prompt(&mut self, token: TokenId) {
        for st in self.stages.iter_mut() {
            st.accept_prompt(token);
        }
    }

    /// Reset every stage (history, RNG).
    pub fn reset(&mut self) {
        for st in self.stages.iter_mut() {
            st.reset();
        }
    }
}
