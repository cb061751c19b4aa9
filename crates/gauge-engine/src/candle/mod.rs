//! candle (cargo feature `candle`): a second Rust engine behind the [`LogitSource`] seam.
//!
//! - [`CandleSource`]: candle-transformers' `quantized_llama::ModelWeights` reading a
//!   llama-architecture GGUF, one KV cache per sequence, forks by clone (no recomputation).
//! - [`ensure_f32_gguf`]: the GGUF dequantized by candle to a float32 GGUF in the model cache, so
//!   candle runs f32 matmuls on the float weights the other float32 stacks run
//!   ([`CandleWeights::Float32`], the default; [`CandleWeights::Native`] keeps candle's quantized
//!   kernels, which quantize activations to q8_1 like llama.cpp's).
//! - [`CandleChain`]: candle's own decision for a probe run (shift → `apply_repeat_penalty` →
//!   `LogitsProcessor` ArgMax), with the seen scope of the protocol or of candle's example.
//! - [`max_abs_row_diff`]: the logits check of two sources on the same prompts.
//!
//! [`LogitSource`]: crate::LogitSource

mod penalty;
mod source;
mod weights;

pub use penalty::{CandleChain, CandleScope};
pub use source::{CandleOptions, CandleSource};
pub use weights::{ensure_f32_gguf, f32_gguf_path, CandleWeights};

use std::path::Path;

use crate::error::{EngineError, Result};
use crate::source::{LogitSource, SourceError};
use gauge_sampling::TokenId;

/// The candle crates this build links (run records).
pub const CANDLE_VERSION: &str = "0.11.1";

/// Largest |candle − reference| logit difference a float32 run may show on the same weights.
/// Summation order alone moves logits by ~1e-5; a model read differently is off by whole logits.
pub const LOGIT_TOLERANCE: f32 = 1e-3;

/// Open the GGUF at `gguf` for candle: with [`CandleWeights::Float32`] its float32 copy in
/// `cache_dir` (written on first use), else the file itself. Returns the source and the path
/// candle loaded.
pub fn open(
    gguf: &Path,
    cache_dir: &Path,
    opts: CandleOptions,
) -> Result<(CandleSource, std::path::PathBuf)> {
    let path = match opts.weights {
        CandleWeights::Float32 => ensure_f32_gguf(gguf, cache_dir)?,
        CandleWeights::Native => gguf.to_path_buf(),
    };
    Ok((CandleSource::load(&path, opts)?, path))
}

/// The next-token row after `tokens` on a fresh sequence of `src` (freed again).
pub fn row_after(src: &mut dyn LogitSource, tokens: &[TokenId]) -> Result<Vec<f32>, SourceError> {
    let s = src.new_sequence()?;
    let out = src
        .push(s, tokens)
        .and_then(|_| src.step())
        .and_then(|_| src.logits(s).map(<[f32]>::to_vec));
    src.free(s)?;
    out
}

/// max |a − b| over the next-token rows of `prompts` (an error if the rows differ in width).
pub fn max_abs_row_diff(
    a: &mut dyn LogitSource,
    b: &mut dyn LogitSource,
    prompts: &[Vec<TokenId>],
) -> Result<f32> {
    let mut worst = 0f32;
    for p in prompts {
        let (ra, rb) = (row_after(a, p)?, row_after(b, p)?);
        if ra.len() != rb.len() {
            return Err(EngineError::Candle(format!(
                "logit rows of {} and {} entries: not the same model",
                ra.len(),
                rb.len()
            )));
        }
        for (x, y) in ra.iter().zip(&rb) {
            let d = (x - y).abs();
            // NaN compares false: a NaN row is reported as infinitely far.
            worst = if d.is_nan() {
                f32::INFINITY
            } else {
                worst.max(d)
            };
        }
    }
    Ok(worst)
}
