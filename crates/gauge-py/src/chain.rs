//! `gauge_sampling.Chain`: gauge's sampler chain, built from request fields by the same parser as
//! the CLI and the server.

use crate::params::to_value;
use crate::row::Row;
use crate::value_error;
use crate::vocab::PyVocab;
use gauge_sampling::{gauge, Candidates, Chain, SamplingParams, Shift, TokenId};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;

/// llama.cpp's sampler chain for one request.
///
/// `Chain(params, n_vocab, vocab=None)`: `params` is a dict or a JSON string of gauge's request
/// fields (llama-server / OpenAI names, `repeat_penalty_mode`, ...). `vocab` (optional) resolves
/// fields given as text; see the package docs for the methods it needs.
#[pyclass(name = "Chain", module = "gauge_sampling")]
pub struct PyChain {
    /// Behind a mutex so `sample` can release the GIL: a second thread calling the same chain waits.
    chain: Mutex<Chain>,
    n_vocab: usize,
}

impl PyChain {
    fn lock(&self) -> std::sync::MutexGuard<'_, Chain> {
        // A panic inside the chain would be a bug; the state it left is still a valid chain.
        self.chain.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl PyChain {
    #[new]
    #[pyo3(signature = (params, n_vocab, vocab = None))]
    fn new(
        params: &Bound<'_, PyAny>,
        n_vocab: usize,
        vocab: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let value = to_value(params)?;
        let params = SamplingParams::from_value(&value).map_err(value_error)?;
        params.validate(n_vocab).map_err(value_error)?;
        let vocab = vocab.map(|v| PyVocab::new(v, n_vocab));
        let built = Chain::from_params(&params, n_vocab, vocab.as_ref().map(|v| v as _));
        if let Some(err) = vocab.and_then(|v| v.error.into_inner()) {
            return Err(err);
        }
        Ok(PyChain {
            chain: Mutex::new(built.map_err(value_error)?),
            n_vocab,
        })
    }

    /// The vocabulary size the chain was built for.
    #[getter]
    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Sample one token from a 1-D float32 row (numpy array or CPU torch tensor, read in place,
    /// GIL released) and accept it.
    fn sample(&self, py: Python<'_>, row: &Bound<'_, PyAny>) -> PyResult<TokenId> {
        let row = Row::borrow(row)?;
        let values = row.values();
        let res = py.detach(|| self.lock().sample(values));
        drop(row);
        res.map_err(value_error)
    }

    /// Sample one token without accepting it (call `accept` once the caller decides).
    fn sample_no_accept(&self, py: Python<'_>, row: &Bound<'_, PyAny>) -> PyResult<TokenId> {
        let row = Row::borrow(row)?;
        let values = row.values();
        let res = py.detach(|| self.lock().sample_no_accept(values));
        drop(row);
        res.map_err(value_error)
    }

    /// Record a generated token (penalty and DRY windows, mirostat state).
    fn accept(&self, token: TokenId) {
        self.lock().accept(token)
    }

    /// Record prompt tokens, in order (the penalties see the prompt, as in llama.cpp).
    fn accept_prompt(&self, tokens: Vec<TokenId>) {
        let mut chain = self.lock();
        for t in tokens {
            chain.accept_prompt(t);
        }
    }

    /// Forget the history and reseed the generators.
    fn reset(&self) {
        self.lock().reset()
    }

    /// llama.cpp's chain print, e.g. `logits -> penalties -> ... -> dist `.
    fn describe(&self) -> String {
        self.lock().describe()
    }

    /// One step on `row + c` and on `row − c` after `history` (the chain itself is untouched):
    /// the two tokens, whether they agree, `max |Δp|`, and each stage's declared shift behaviour.
    fn check_gauge<'py>(
        &self,
        py: Python<'py>,
        row: &Bound<'py, PyAny>,
        history: Vec<TokenId>,
        c: f32,
    ) -> PyResult<Bound<'py, PyDict>> {
        let row = Row::borrow(row)?;
        let values = row.values();
        let report = py.detach(|| gauge::check(&self.lock(), values, &history, c));
        drop(row);
        let report = report.map_err(value_error)?;
        let stages = report
            .stages
            .iter()
            .map(|(name, shift)| {
                let d = PyDict::new(py);
                d.set_item("name", name)?;
                d.set_item("shift_invariant", shift.is_invariant())?;
                if let Shift::Variant(why) = shift {
                    d.set_item("why", *why)?;
                }
                Ok(d)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let out = PyDict::new(py);
        out.set_item("c", report.c)?;
        out.set_item("token_plus", report.token_plus)?;
        out.set_item("token_minus", report.token_minus)?;
        out.set_item("tokens_agree", report.tokens_agree)?;
        out.set_item("max_abs_dp", report.max_abs_dp)?;
        out.set_item("stages", stages)?;
        Ok(out)
    }

    /// The logits after the first `n_stages` stages, by token id, from a copy of the chain's
    /// current state (history included; the chain itself is untouched). Removed tokens are
    /// `-inf`. For comparing other implementations with gauge's stages, e.g. the penalties stage
    /// alone: `Chain({"samplers": ["penalties"], ...}, n).apply_stages(row, 1)`.
    fn apply_stages(
        &self,
        py: Python<'_>,
        row: &Bound<'_, PyAny>,
        n_stages: usize,
    ) -> PyResult<Vec<f32>> {
        let row = Row::borrow(row)?;
        let values = row.values();
        let out = py.detach(|| {
            let chain = self.lock();
            chain.validate_row(values)?;
            if n_stages > chain.stages().len() {
                return Err(gauge_sampling::SamplingError::param(
                    "n_stages",
                    n_stages,
                    &format!(
                        "0..={} (the stages of {})",
                        chain.stages().len(),
                        chain.describe()
                    ),
                ));
            }
            let mut cur = Candidates::from_logits(values);
            for st in chain.stages()[..n_stages].iter() {
                st.clone().apply(&mut cur);
            }
            let mut by_id = vec![f32::NEG_INFINITY; values.len()];
            for t in cur.as_slice() {
                if let Some(slot) = usize::try_from(t.id).ok().and_then(|i| by_id.get_mut(i)) {
                    *slot = t.logit;
                }
            }
            Ok(by_id)
        });
        drop(row);
        out.map_err(value_error)
    }

    fn __repr__(&self) -> String {
        format!(
            "Chain(n_vocab={}, chain={:?})",
            self.n_vocab,
            self.lock().describe()
        )
    }
}
