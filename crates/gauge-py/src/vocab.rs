//! A Python tokenizer as gauge's `Vocab`, for the request fields that name text (string logit
//! biases, DRY string breakers, string penalty exemptions, `ignore_eos`).
//!
//! The object needs `tokenize(text) -> list[int]` (no BOS/EOS, no special-token parsing),
//! `token_bytes(id) -> bytes` and `eog_tokens() -> list[int]`. It is only consulted while the chain
//! is built; a method that fails makes the build fail with that error.

use gauge_sampling::{TokenId, Vocab};
use pyo3::prelude::*;
use std::cell::RefCell;

pub struct PyVocab<'py> {
    obj: Bound<'py, PyAny>,
    n_vocab: usize,
    /// The first error a Python method raised (the `Vocab` trait cannot return one).
    pub error: RefCell<Option<PyErr>>,
}

impl<'py> PyVocab<'py> {
    pub fn new(obj: Bound<'py, PyAny>, n_vocab: usize) -> Self {
        PyVocab {
            obj,
            n_vocab,
            error: RefCell::new(None),
        }
    }

    /// The value of a Python call, or None after recording its error.
    fn record<T>(&self, result: PyResult<T>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                None
            }
        }
    }
}

impl Vocab for PyVocab<'_> {
    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn token_bytes(&self, id: TokenId) -> Vec<u8> {
        let r = self.obj.call_method1("token_bytes", (id,));
        self.record(r.and_then(|b| b.extract::<Vec<u8>>()))
            .unwrap_or_default()
    }

    fn tokenize(&self, text: &str) -> Vec<TokenId> {
        let r = self.obj.call_method1("tokenize", (text,));
        self.record(r.and_then(|t| t.extract::<Vec<TokenId>>()))
            .unwrap_or_default()
    }

    fn eog_tokens(&self) -> Vec<TokenId> {
        let r = self.obj.call_method0("eog_tokens");
        self.record(r.and_then(|t| t.extract::<Vec<TokenId>>()))
            .unwrap_or_default()
    }
}
