//! The instrument for the Python engines (`python -m gauge_sampling probe --engine hf|vllm`):
//! gauge-lab's plans, run directories, analysis, `REPORT.md` and plots, and the registry pull.
//! Python decodes; everything else is the code `gauge probe` runs. Values cross as JSON text in
//! the shapes of gauge-lab's serde types (`config.json`, `summary.json`).

use gauge_lab::json::external::{DecodedOutput, ExternalJson};
use gauge_lab::json::JsonConfig;
use gauge_lab::probe::external::{DecodedRun, ExternalProbe};
use gauge_lab::probe::ProbeConfig;
use gauge_lab::LabError;
use gauge_sampling::TokenId;
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;

create_exception!(
    gauge_sampling,
    GateFailed,
    PyRuntimeError,
    "The validity gate failed: an op flipped at θ = 1 (every output was written)."
);

/// Bad configuration or input is a `ValueError`; file trouble an `OSError`; the gate `GateFailed`.
fn lab_error(e: LabError) -> PyErr {
    match e {
        LabError::Config { .. } | LabError::Tokenize { .. } | LabError::ConfigMismatch { .. } => {
            PyValueError::new_err(e.to_string())
        }
        LabError::Io { .. } => PyOSError::new_err(e.to_string()),
        LabError::GateFailed { .. } => GateFailed::new_err(e.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

fn json_error(what: &str, e: serde_json::Error) -> PyErr {
    PyValueError::new_err(format!("{what}: {e}"))
}

/// The probe's grids as `config.json` objects: `{"quick": ..., "full": ...}` (`gauge probe`'s
/// defaults and `--full`), model label empty.
#[pyfunction]
fn probe_grids_json() -> String {
    let full = ProbeConfig {
        model: String::new(),
        ..ProbeConfig::full_grid("")
    };
    let quick = ProbeConfig {
        model: String::new(),
        ..ProbeConfig::default()
    };
    serde_json::json!({ "quick": quick, "full": full }).to_string()
}

/// A probe configuration (`config.json`'s shape) checked by gauge-lab's validation (errors name
/// the field) with its batch fitted to `n_seq_max` live sequences, as `gauge probe` fits it.
#[pyfunction]
fn probe_config_json(config_json: &str, n_seq_max: usize) -> PyResult<String> {
    use gauge_lab::Grid;
    let mut cfg: ProbeConfig =
        serde_json::from_str(config_json).map_err(|e| json_error("config", e))?;
    cfg.validate().map_err(lab_error)?;
    if n_seq_max == 0 {
        return Err(PyValueError::new_err(
            "invalid value for `n_seq_max`: 0 (allowed: >= 1)",
        ));
    }
    cfg.fit_batch(n_seq_max);
    serde_json::to_string(&cfg).map_err(|e| json_error("config", e))
}

/// The note's A1 prefixes: `[(manifest index, text)]`.
#[pyfunction]
fn a1_prefixes() -> Vec<(usize, String)> {
    gauge_lab::prefixes::a1_prefixes()
        .iter()
        .map(|p| (p.index, p.prefix_text.clone()))
        .collect()
}

/// The terminal table of `gauge probe` for a summary (JSON text).
#[pyfunction]
fn render_probe_table(summary_json: &str) -> PyResult<String> {
    let s = serde_json::from_str(summary_json).map_err(|e| json_error("summary", e))?;
    Ok(gauge_lab::render_table(&s))
}

/// A registry name pulled into gauge's cache as `gauge models pull` does (progress on stderr), or
/// a path, checked to exist: the file's path.
#[pyfunction]
fn resolve_model(py: Python<'_>, name_or_path: &str) -> PyResult<PathBuf> {
    py.detach(|| gauge_engine::resolve_model(name_or_path))
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `gauge probe`'s default model (registry name).
#[pyfunction]
fn default_model() -> &'static str {
    gauge_engine::DEFAULT_MODEL
}

/// One probe run decoded in Python: `ProbeRun(out_root, config_json, prompts, n_vocab)` opens
/// (or resumes) `out_root/<run-id>/`.
#[pyclass(name = "ProbeRun", module = "gauge_sampling")]
pub struct PyProbeRun {
    inner: ExternalProbe,
}

#[pymethods]
impl PyProbeRun {
    #[new]
    fn new(
        out_root: PathBuf,
        config_json: &str,
        prompts: Vec<Vec<TokenId>>,
        n_vocab: usize,
    ) -> PyResult<Self> {
        let cfg: ProbeConfig =
            serde_json::from_str(config_json).map_err(|e| json_error("config", e))?;
        let inner = ExternalProbe::open(&out_root, cfg, prompts, n_vocab).map_err(lab_error)?;
        Ok(PyProbeRun { inner })
    }

    /// `out_root/<run-id>`.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.inner.dir().to_path_buf()
    }

    /// The configuration (JSON text, `config.json`'s content).
    #[getter]
    fn config_json(&self) -> String {
        serde_json::to_string(self.inner.config()).unwrap_or_default()
    }

    /// The grid in one line (`ctrl,normalized × θ {1,1.3} × ±5`), as `gauge probe` labels it.
    #[getter]
    fn grid_label(&self) -> String {
        self.inner.config().grid_label()
    }

    /// Chunks of `phase` (0: flip and zero-point runs, 1: the own-median run) still to decode.
    fn pending_chunks(&self, phase: u8) -> PyResult<Vec<usize>> {
        self.inner.pending_chunks(phase).map_err(lab_error)
    }

    /// The prefix indices of chunk `k`.
    fn chunk_prefixes(&self, k: usize) -> Vec<usize> {
        use gauge_lab::Grid;
        self.inner.config().chunk(k).collect()
    }

    /// The runs of `phase` for every prefix: JSON `[{"role", "op", "theta", "c", "alpha"}]`.
    fn plan_json(&self, phase: u8) -> PyResult<String> {
        let plan = self.inner.plan(phase).map_err(lab_error)?;
        let v: Vec<serde_json::Value> = plan
            .iter()
            .map(|s| {
                serde_json::json!({
                    "role": s.role, "op": s.op, "theta": s.theta, "c": s.c, "alpha": s.alpha,
                })
            })
            .collect();
        Ok(serde_json::Value::Array(v).to_string())
    }

    /// Append chunk `k` of `phase` durably: JSON `[{"prefix", "run", "tokens", "forward_tokens",
    /// "zero_point"?}]`, one per (prefix of the chunk, run of the plan).
    fn append_chunk(&mut self, phase: u8, k: usize, runs_json: &str) -> PyResult<()> {
        let runs: Vec<DecodedRun> =
            serde_json::from_str(runs_json).map_err(|e| json_error("runs", e))?;
        self.inner.append_chunk(phase, k, runs).map_err(lab_error)
    }

    /// Analyse and write `summary.json`, `REPORT.md` and the plots; returns the summary JSON.
    /// Raises `GateFailed` (after writing) if an op flipped at θ = 1.
    #[pyo3(signature = (plots = true))]
    fn finish(&self, py: Python<'_>, plots: bool) -> PyResult<String> {
        let s = py.detach(|| self.inner.finish(plots)).map_err(lab_error)?;
        serde_json::to_string_pretty(&s).map_err(|e| json_error("summary", e))
    }
}

/// The `penalties` stage an operator asks for at θ and α, in gauge's request fields:
/// `{"repeat_penalty", "repeat_penalty_mode", "presence_penalty"}` (gauge-lab's one map, which
/// every engine reads). An unknown `op` is a `ValueError` naming it.
#[pyfunction]
fn op_stage(op: &str, theta: f32, alpha: f32) -> PyResult<String> {
    let op = gauge_lab::ops::Op::parse(op).ok_or_else(|| {
        PyValueError::new_err(format!(
            "op: unknown operator {op:?} (allowed: ctrl, normalized, subtractive)"
        ))
    })?;
    let s = gauge_lab::ops::Penalty { op, theta, alpha }.stage();
    // An f32 as the shortest decimal that reads back to it (1.3, not 1.2999999523162842).
    let short = |x: f32| x.to_string().parse::<f64>().unwrap_or(f64::from(x));
    Ok(serde_json::json!({
        "repeat_penalty": short(s.repeat_penalty),
        "repeat_penalty_mode": s.mode,
        "presence_penalty": short(s.presence_penalty),
    })
    .to_string())
}

/// `gauge json`'s defaults as a `config.json` object (model label empty).
#[pyfunction]
fn json_defaults_json() -> String {
    let cfg = JsonConfig {
        model: String::new(),
        ..JsonConfig::default()
    };
    serde_json::to_string(&cfg).unwrap_or_default()
}

/// An A2 configuration (`config.json`'s shape) checked by gauge-lab's validation (errors name
/// the field); with `fit`, its batch fitted to `n_seq_max` live sequences as `gauge json` fits it.
#[pyfunction]
fn json_config_json(config_json: &str, n_seq_max: usize, fit: bool) -> PyResult<String> {
    use gauge_lab::Grid;
    let mut cfg: JsonConfig =
        serde_json::from_str(config_json).map_err(|e| json_error("config", e))?;
    cfg.validate().map_err(lab_error)?;
    if n_seq_max == 0 {
        return Err(PyValueError::new_err(
            "invalid value for `n_seq_max`: 0 (allowed: >= 1)",
        ));
    }
    if fit {
        cfg.fit_batch(n_seq_max);
    }
    serde_json::to_string(&cfg).map_err(|e| json_error("config", e))
}

/// The note's A2 prompts: `[(manifest index, text)]`, the user message `gauge json` sends for
/// each of the 200 schemas.
#[pyfunction]
fn a2_prompts() -> Vec<(usize, String)> {
    gauge_lab::json::schema::a2_schemas()
        .iter()
        .map(|e| (e.index, gauge_lab::json::schema::json_prompt(e)))
        .collect()
}

/// The stop strings of A2 (kept in the output).
#[pyfunction]
fn json_stop_strings() -> Vec<&'static str> {
    gauge_lab::json::STOP_STRINGS.to_vec()
}

/// The terminal table of `gauge json` for a summary (JSON text).
#[pyfunction]
fn render_json_table(summary_json: &str) -> PyResult<String> {
    let s = serde_json::from_str(summary_json).map_err(|e| json_error("summary", e))?;
    Ok(gauge_lab::json::render_json_table(&s))
}

/// One A2 run decoded in Python: `JsonRun(out_root, config_json, prompts, n_vocab)` opens (or
/// resumes) `out_root/<run-id>/`.
#[pyclass(name = "JsonRun", module = "gauge_sampling")]
pub struct PyJsonRun {
    inner: ExternalJson,
}

#[pymethods]
impl PyJsonRun {
    #[new]
    fn new(
        out_root: PathBuf,
        config_json: &str,
        prompts: Vec<Vec<TokenId>>,
        n_vocab: usize,
    ) -> PyResult<Self> {
        let cfg: JsonConfig =
            serde_json::from_str(config_json).map_err(|e| json_error("config", e))?;
        let inner = ExternalJson::open(&out_root, cfg, prompts, n_vocab).map_err(lab_error)?;
        Ok(PyJsonRun { inner })
    }

    /// `out_root/<run-id>`.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.inner.dir().to_path_buf()
    }

    /// The configuration (JSON text, `config.json`'s content).
    #[getter]
    fn config_json(&self) -> String {
        serde_json::to_string(self.inner.config()).unwrap_or_default()
    }

    /// Chunks still to decode.
    fn pending_chunks(&self) -> Vec<usize> {
        self.inner.pending_chunks()
    }

    /// The schema indices of chunk `k`.
    fn chunk_schemas(&self, k: usize) -> Vec<usize> {
        use gauge_lab::Grid;
        self.inner.config().chunk(k).collect()
    }

    /// The runs of every schema: JSON `[{"op", "theta", "c", "alpha"}]`.
    fn plan_json(&self) -> String {
        let v: Vec<serde_json::Value> = self
            .inner
            .plan()
            .iter()
            .map(
                |s| serde_json::json!({ "op": s.op, "theta": s.theta, "c": s.c, "alpha": s.alpha }),
            )
            .collect();
        serde_json::Value::Array(v).to_string()
    }

    /// Append chunk `k` durably: JSON `[{"schema", "run", "tokens", "output", "eog",
    /// "forward_tokens"}]`, one per (schema of the chunk, run of the plan).
    fn append_chunk(&mut self, k: usize, runs_json: &str) -> PyResult<()> {
        let runs: Vec<DecodedOutput> =
            serde_json::from_str(runs_json).map_err(|e| json_error("runs", e))?;
        self.inner.append_chunk(k, runs).map_err(lab_error)
    }

    /// Summarise and write `summary.json`, `REPORT.md` and the plot; returns the summary JSON.
    #[pyo3(signature = (plots = true))]
    fn finish(&self, py: Python<'_>, plots: bool) -> PyResult<String> {
        let s = py.detach(|| self.inner.finish(plots)).map_err(lab_error)?;
        serde_json::to_string_pretty(&s).map_err(|e| json_error("summary", e))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProbeRun>()?;
    m.add_class::<PyJsonRun>()?;
    m.add_function(wrap_pyfunction!(json_defaults_json, m)?)?;
    m.add_function(wrap_pyfunction!(json_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(a2_prompts, m)?)?;
    m.add_function(wrap_pyfunction!(json_stop_strings, m)?)?;
    m.add_function(wrap_pyfunction!(render_json_table, m)?)?;
    m.add("GateFailed", m.py().get_type::<GateFailed>())?;
    m.add_function(wrap_pyfunction!(probe_grids_json, m)?)?;
    m.add_function(wrap_pyfunction!(probe_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(a1_prefixes, m)?)?;
    m.add_function(wrap_pyfunction!(render_probe_table, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_model, m)?)?;
    m.add_function(wrap_pyfunction!(default_model, m)?)?;
    m.add_function(wrap_pyfunction!(op_stage, m)?)?;
    Ok(())
}
