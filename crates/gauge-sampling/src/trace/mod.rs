//! Offline replay: run recorded logit rows through a chain, without a model.
//!
//! A trace is a JSON file:
//!
//! ```json
//! {"n_vocab": 4, "params": {"seed": 42, "top_k": 2}, "history": [1, 2],
//!  "logits": [[0.1, 2.0, -1.0, "-inf"], [0.0, 0.5, 0.25, 3.0]]}
//! ```
//!
//! * `params`: a sampling request ([`SamplingParams`], llama-server names; default: llama.cpp's
//!   defaults). There is no vocabulary in a trace, so strings that need one (DRY's default string
//!   breakers when DRY is on, string logit-bias keys) are errors: give token ids
//!   (`dry_sequence_breaker_ids`).
//! * `history`: token ids accepted as prompt tokens before the first row (default: none).
//! * `logits`: the rows inline (numbers, or the strings `"-inf"`, `"inf"`, `"nan"`, which JSON cannot
//!   spell), or the name of a `.npy` file, relative to the trace file, holding a little-endian
//!   float32 array of shape `(rows, n_vocab)` (format versions 1.0, 2.0 and 3.0; C or Fortran order).
//!
//! [`replay`] builds the chain, accepts the history, then for every row samples one token and
//! accepts it, exactly as `llama_sampler_sample` does, and returns the tokens. Every problem with the
//! file is a typed [`TraceError`] that says which part is wrong; the whole trace is checked before
//! the first row is sampled.
//!
//! Both files must be regular files (a FIFO or a device is refused before it is opened), and no
//! more of a `.npy` file is read than its header declares, after checking that the file has exactly
//! that size.
//!
//! The `.npy` reader (`npy` with the `testing` feature, internal otherwise) is a few dozen lines
//! rather than a dependency: gauge only needs one dtype.

use crate::candidates::TokenId;
use crate::chain::Chain;
use crate::error::SamplingError;
use crate::params::SamplingParams;
use serde_json::{Map, Value};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The `.npy` reader and writer (little-endian float32 only): internal, public only with the
/// `testing` feature (this crate's trace and fuzz tests).
#[cfg(feature = "testing")]
pub mod npy;
#[cfg(not(feature = "testing"))]
mod npy;
use npy::read_npy_f32;

/// What can go wrong loading or replaying a trace. New kinds of failure may be added: match
/// with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The trace or its `.npy` file cannot be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The trace is not valid JSON, or a field has the wrong shape.
    #[error("malformed trace: {0}")]
    Json(String),
    /// The `.npy` file is not a little-endian float32 array of shape `(rows, n_vocab)`.
    #[error("bad .npy file {path}: {message}")]
    Npy {
        /// The `.npy` file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A logit row does not have `n_vocab` values.
    #[error("logit row {row} has {got} values but n_vocab is {expected}")]
    RowWidth {
        /// The row's index.
        row: usize,
        /// `n_vocab`.
        expected: usize,
        /// The row's width.
        got: usize,
    },
    /// Parameters, history ids or a logit value rejected by the chain.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
}

/// Where a trace's logit rows are.
#[derive(Clone, Debug, PartialEq)]
pub enum Logits {
    /// Rows written in the trace itself.
    Inline(Vec<Vec<f32>>),
    /// A `.npy` file, relative to the trace file.
    File(PathBuf),
}

/// A parsed trace file (the rows are loaded separately, see [`Trace::load`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// Vocabulary size: the width of every logit row.
    pub n_vocab: usize,
    /// The sampling request.
    pub params: SamplingParams,
    /// Token ids accepted as prompt tokens before the first row.
    pub history: Vec<TokenId>,
    /// The rows, inline or a `.npy` file name.
    pub logits: Logits,
}

/// Logit rows stored contiguously, `n_vocab` values each.
#[derive(Clone, Debug, PartialEq)]
pub struct LogitRows {
    n_vocab: usize,
    data: Vec<f32>,
}

impl LogitRows {
    /// `data.len()` must be a multiple of `n_vocab` (checked by the callers in this module).
    fn new(n_vocab: usize, data: Vec<f32>) -> Self {
        Self { n_vocab, data }
    }

    /// Number of rows.
    pub fn n_rows(&self) -> usize {
        self.data.len().checked_div(self.n_vocab).unwrap_or(0)
    }

    /// Row width.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Row `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&[f32]> {
        self.iter().nth(i)
    }

    /// The rows in order.
    pub fn iter(&self) -> impl Iterator<Item = &[f32]> {
        self.data.chunks_exact(self.n_vocab.max(1))
    }
}

fn json_err(msg: impl Into<String>) -> TraceError {
    TraceError::Json(msg.into())
}

fn f32_of(v: &Value) -> Option<f32> {
    match v {
        Value::Number(n) => n.as_f64().map(|x| x as f32),
        Value::String(s) => match s.as_str() {
            "-inf" => Some(f32::NEG_INFINITY),
            "inf" | "+inf" => Some(f32::INFINITY),
            "nan" => Some(f32::NAN),
            _ => None,
        },
        _ => None,
    }
}

impl Trace {
    /// Parse trace JSON text (the `.npy` file, if any, is not read here).
    pub fn from_json(text: &str) -> Result<Trace, TraceError> {
        let v: Value = serde_json::from_str(text).map_err(|e| json_err(e.to_string()))?;
        let obj = v
            .as_object()
            .ok_or_else(|| json_err("expected a JSON object"))?;
        let n_vocab = obj
            .get("n_vocab")
            .and_then(Value::as_u64)
            .filter(|&n| n > 0 && n <= i32::MAX as u64)
            .ok_or_else(|| json_err("`n_vocab` must be a positive integer"))?
            as usize;
        let params = match obj.get("params") {
            None | Some(Value::Null) => SamplingParams::default(),
            Some(p) => SamplingParams::from_value(p)?,
        };
        let history = match obj.get("history") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|t| {
                    let id = t
                        .as_i64()
                        .ok_or_else(|| json_err(format!("`history` holds {t}, not a token id")))?;
                    if id < 0 || id >= n_vocab as i64 {
                        return Err(SamplingError::TokenOutOfRange {
                            field: "history".into(),
                            token: id,
                            n_vocab,
                        }
                        .into());
                    }
                    Ok(id as TokenId)
                })
                .collect::<Result<_, TraceError>>()?,
            Some(_) => return Err(json_err("`history` must be an array of token ids")),
        };
        let logits = match obj.get("logits") {
            Some(Value::String(file)) => Logits::File(PathBuf::from(file)),
            Some(Value::Array(rows)) => {
                let mut out = Vec::with_capacity(rows.len());
                for (r, row) in rows.iter().enumerate() {
                    let row = row
                        .as_array()
                        .ok_or_else(|| json_err(format!("logit row {r} is not an array")))?;
                    if row.len() != n_vocab {
                        return Err(TraceError::RowWidth {
                            row: r,
                            expected: n_vocab,
                            got: row.len(),
                        });
                    }
                    let vals = row
                        .iter()
                        .enumerate()
                        .map(|(i, x)| {
                            f32_of(x).ok_or_else(|| {
                                json_err(format!("logit row {r}, token {i}: {x} is not a number"))
                            })
                        })
                        .collect::<Result<Vec<f32>, _>>()?;
                    out.push(vals);
                }
                Logits::Inline(out)
            }
            _ => {
                return Err(json_err(
                    "`logits` must be an array of rows or the name of a .npy file",
                ))
            }
        };
        Ok(Trace {
            n_vocab,
            params,
            history,
            logits,
        })
    }

    /// Read a trace file and its rows (a `.npy` name is resolved relative to the trace's folder).
    /// Both must be regular files: a FIFO would block and a device such as `/dev/zero` never ends.
    pub fn load(path: impl AsRef<Path>) -> Result<(Trace, LogitRows), TraceError> {
        let path = path.as_ref();
        let (file, len) = open_regular(path)?;
        let mut text = String::new();
        file.take(len)
            .read_to_string(&mut text)
            .map_err(|e| TraceError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        let trace = Trace::from_json(&text)?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        let rows = trace.rows(base)?;
        Ok((trace, rows))
    }

    /// The logit rows, reading the `.npy` file relative to `base` if the trace names one.
    pub fn rows(&self, base: &Path) -> Result<LogitRows, TraceError> {
        match &self.logits {
            Logits::Inline(rows) => Ok(LogitRows::new(self.n_vocab, rows.concat())),
            Logits::File(name) => {
                let path = base.join(name);
                let (mut file, len) = open_regular(&path)?;
                let npy_err = |message: String| TraceError::Npy {
                    path: path.clone(),
                    message,
                };
                let (shape, data) =
                    read_npy_f32(&mut file, len).map_err(|e| npy_err(e.to_string()))?;
                match shape.as_slice() {
                    [_, cols] if *cols == self.n_vocab => Ok(LogitRows::new(self.n_vocab, data)),
                    [_, cols] => Err(npy_err(format!(
                        "rows have {cols} values but n_vocab is {}",
                        self.n_vocab
                    ))),
                    _ => Err(npy_err(format!(
                        "shape {shape:?}: expected (rows, n_vocab = {})",
                        self.n_vocab
                    ))),
                }
            }
        }
    }

    /// Build the chain, accept the history as prompt tokens, then sample and accept one token per row.
    pub fn replay_rows(&self, rows: &LogitRows) -> Result<Vec<TokenId>, TraceError> {
        if rows.n_vocab() != self.n_vocab {
            return Err(TraceError::RowWidth {
                row: 0,
                expected: self.n_vocab,
                got: rows.n_vocab(),
            });
        }
        let mut chain = Chain::from_params(&self.params, self.n_vocab, None)?;
        for &t in &self.history {
            chain.accept_prompt(t);
        }
        let mut out = Vec::with_capacity(rows.n_rows());
        for row in rows.iter() {
            out.push(chain.sample(row)?);
        }
        Ok(out)
    }

    /// The trace as JSON (inline rows use `"-inf"`-style strings for non-finite values).
    pub fn to_value(&self) -> Value {
        let num = |x: f32| -> Value {
            if x.is_finite() {
                serde_json::json!(x)
            } else if x.is_nan() {
                Value::String("nan".into())
            } else if x > 0.0 {
                Value::String("inf".into())
            } else {
                Value::String("-inf".into())
            }
        };
        let logits = match &self.logits {
            Logits::Inline(rows) => Value::Array(
                rows.iter()
                    .map(|r| Value::Array(r.iter().map(|&x| num(x)).collect()))
                    .collect(),
            ),
            Logits::File(p) => Value::String(p.to_string_lossy().into_owned()),
        };
        let mut m = Map::new();
        m.insert("n_vocab".into(), self.n_vocab.into());
        m.insert("params".into(), self.params.to_value());
        m.insert("history".into(), self.history.clone().into());
        m.insert("logits".into(), logits);
        Value::Object(m)
    }
}

/// Replay the trace file at `path`: the tokens the chain picks, one per logit row.
pub fn replay(path: impl AsRef<Path>) -> Result<Vec<TokenId>, TraceError> {
    let (trace, rows) = Trace::load(path)?;
    trace.replay_rows(&rows)
}

/// Open `path` only if it is a regular file, and return it with its size. The type is checked
/// before opening (opening a FIFO blocks until a writer appears) and again on the open handle (in
/// case the path was swapped in between).
fn open_regular(path: &Path) -> Result<(File, u64), TraceError> {
    let io = |message: String| TraceError::Io {
        path: path.to_path_buf(),
        message,
    };
    let not_regular = |t: std::fs::FileType| {
        io(format!(
            "not a regular file ({}); traces and their .npy rows must be regular files",
            file_kind(t)
        ))
    };
    let meta = std::fs::metadata(path).map_err(|e| io(e.to_string()))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    let file = File::open(path).map_err(|e| io(e.to_string()))?;
    let meta = file.metadata().map_err(|e| io(e.to_string()))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    Ok((file, meta.len()))
}

/// A word for a file type that is not a regular file.
fn file_kind(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}
