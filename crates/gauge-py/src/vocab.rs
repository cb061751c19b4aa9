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

    fn call<T: for<'a> FromPyObject<'a, 'py>>(&self, method: &str, args: impl IntoPyObject<'py, Target = pyo3::types::PyTuple>) -> Option<T> {
        match self.obj.call_method1(method, args).and_then(|r| r.extract::<T>().map_err(Into::into)) {
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
        self.call("token_bytes", (id,)).unwrap_or_default()
    }

    fn tokenize(&self, text: &str) -> Vec<TokenId> {
        self.call("tokenize", (text,)).unwrap_or_default()
    }

    fn eog_tokens(&self) -> Vec<TokenId> {
        self.call("eog_tokens", ()).unwrap_or_default()
    }
}
