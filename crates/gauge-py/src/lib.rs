//! The `gauge_sampling._native` extension module: gauge's sampler chain and trace replay for
//! Python. The pure-Python parts of the package (`gauge_sampling.hf`, `gauge_sampling.vllm`) live
//! in `python/gauge_sampling`.

mod chain;
mod lab;
mod params;
mod row;
mod vocab;

use gauge_sampling::trace::{self, TraceError};
use gauge_sampling::TokenId;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// Every sampling error is bad input: a `ValueError` with the message the CLI prints.
pub(crate) fn value_error(e: gauge_sampling::SamplingError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Replay a trace file (JSON with `params`, `n_vocab`, `history` and inline or `.npy` logit rows):
/// the token the chain picks for each row, exactly as `gauge replay` does.
#[pyfunction]
fn replay(py: Python<'_>, trace_path: std::path::PathBuf) -> PyResult<Vec<TokenId>> {
    py.detach(|| trace::replay(&trace_path))
        .map_err(|e| match e {
            TraceError::Io { .. } => PyOSError::new_err(e.to_string()),
            other => PyValueError::new_err(other.to_string()),
        })
}

/// gauge's request fields (a dict or a JSON string), parsed exactly as the CLI and the server parse
/// them and with every default filled in, as JSON text of canonical names. With `n_vocab`, the
/// ranges that depend on the vocabulary are checked too. Bad fields raise `ValueError` with the
/// CLI's message.
#[pyfunction]
#[pyo3(signature = (params, n_vocab = None))]
fn parse_params_json(params: &Bound<'_, PyAny>, n_vocab: Option<usize>) -> PyResult<String> {
    let value = params::to_value(params)?;
    let parsed = gauge_sampling::SamplingParams::from_value(&value).map_err(value_error)?;
    // Without a vocabulary size, token ids only need to be non-negative.
    parsed
        .validate(n_vocab.unwrap_or(i32::MAX as usize))
        .map_err(value_error)?;
    Ok(parsed.to_value().to_string())
}

/// Every request field gauge knows, as JSON text: the table `parse_params` and `Chain` read
/// (`gauge_sampling::fields::catalog`, the text C's `gauge_request_fields()` returns).
#[pyfunction]
fn request_fields_json() -> String {
    gauge_sampling::fields::catalog().to_string()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<chain::PyChain>()?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(parse_params_json, m)?)?;
    m.add_function(wrap_pyfunction!(request_fields_json, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    lab::register(m)?;
    Ok(())
}
