//! `logit-bias`, llama.cpp's `llama_sampler_init_logit_bias`: add a fixed amount to the logits of
//! chosen tokens (`-inf` bans a token).
//!
//! Two paths, as in llama.cpp, and they treat duplicate entries differently:
//! * fast path: when the array still has the identity layout at that token
//!   (`data[token].id == token`, true for the fresh full-vocab array the chain starts from), the
//!   bias is added in O(1). Every entry for the token adds, so duplicates accumulate.
//! * slow path: entries that miss the fast path are searched for in the array; each candidate takes
//!   only the **first** matching entry. Tokens that are not in the array are ignored.
//!
//! The stage does not reorder and does not touch `sorted` (llama.cpp leaves the flag alone even
//! though a bias can break the order). The slow-path list is a buffer reused between steps.

use crate::candidates::{Candidates, TokenId};
use crate::overlay::Overlay;
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// The live logit-bias stage.
#[derive(Clone, Debug)]
pub struct LogitBias {
    n_vocab: usize,
    biases: Vec<(TokenId, f32)>,
    /// Entries that missed the fast path this step.
    to_search: Vec<(TokenId, f32)>,
}

impl LogitBias {
    /// The stage with `biases` applied in order. Unlike [`build`] this keeps an empty list (a no-op).
    pub fn new(n_vocab: usize, biases: Vec<(TokenId, f32)>) -> Self {
        LogitBias {
            n_vocab,
            biases,
            to_search: Vec::new(),
        }
    }

    /// The vocabulary size it was built for (llama.cpp only uses it on the backend path).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The `(token, bias)` entries, in order.
    pub fn biases(&self) -> &[(TokenId, f32)] {
        &self.biases
    }
}

/// Build the stage as llama.cpp's init function does (a `?logit-bias` placeholder when disabled).
pub fn build(n_vocab: usize, biases: Vec<(TokenId, f32)>) -> Box<dyn Sampler> {
    if biases.is_empty() {
        return Placeholder::boxed("?logit-bias");
    }
    Box::new(LogitBias::new(n_vocab, biases))
}

impl Sampler for LogitBias {
    fn name(&self) -> &str {
        "logit-bias"
    }

    fn apply(&mut self, cur: &mut Candidates) {
        if self.biases.is_empty() {
            return;
        }
        self.to_search.clear();
        let s = cur.as_mut_slice();
        for &(token, bias) in &self.biases {
            match usize::try_from(token) {
                Ok(i) if i < s.len() && s[i].id == token => s[i].logit += bias,
                _ => self.to_search.push((token, bias)),
            }
        }
        if self.to_search.is_empty() {
            return;
        }
        for t in s.iter_mut() {
            if let Some(&(_, bias)) = self.to_search.iter().find(|&&(token, _)| token == t.id) {
                t.logit += bias;
            }
        }
    }

    /// On the identity layout every in-range entry takes llama.cpp's fast path (`data[token].id ==
    /// token`), so duplicates all add, in list order, exactly as `apply` does.
    fn apply_sparse(&mut self, row: &[f32], ov: &mut Overlay) -> bool {
        for &(token, bias) in &self.biases {
            if let Ok(i) = usize::try_from(token) {
                if i < row.len() {
                    let v = ov.get(row, i) + bias;
                    ov.set(i, v);
                }
            }
        }
        true
    }

    /// Invariant: adding a bias commutes with adding a constant to every logit.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}
