//! `gauge probe --engine candle` (cargo feature `candle`): candle-transformers' quantized llama
//! computes the logits, candle's `apply_repeat_penalty` decides ctrl, the run core does the rest.
//!
//! candle runs the GGUF dequantized to float32 (cached; see `gauge_engine::candle`). llama.cpp
//! loads that same float32 file for the tokenizer (so prompt ids are the other stacks' ids) and,
//! before the run, for the logits check: the next-token rows of the first A1 prefixes from both
//! engines (llama.cpp with f32 attention: f32 KV cache, no flash attention) must agree within `LOGIT_TOLERANCE`, or the run is
//! refused. The measured difference goes into the run's engine record.

use anyhow::{bail, Context, Result};
use gauge_engine::candle::{self, CandleOptions, CandleScope, CandleWeights};
use gauge_engine::{LlamaSource, Model, ModelOptions, Registry};
use gauge_lab::stack::EngineInfo;
use gauge_lab::ProbeConfig;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// How many A1 prefixes the logits check compares.
const CHECK_PROMPTS: usize = 3;

/// A candle source ready for a probe, the codec of the same weights, and the engine record.
pub struct CandleRun {
    pub source: candle::CandleSource,
    pub codec: Arc<Model>,
    pub engine: EngineInfo,
}

/// Which seen set the run uses (`--seen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Protocol,
    Engine,
}

impl Seen {
    /// The candle scope and its words for the record.
    fn scope(self) -> (CandleScope, &'static str) {
        match self {
            Seen::Protocol => (CandleScope::PROTOCOL, "protocol (prompt + all generated)"),
            Seen::Engine => (
                CandleScope::ENGINE,
                "engine (last 64 generated tokens, prompt excluded: candle-examples' quantized example, `repeat_last_n` 64 over `all_tokens`)",
            ),
        }
    }

    /// The probe configuration's seen set for this scope.
    pub fn apply(self, cfg: &mut ProbeConfig) {
        let (scope, _) = self.scope();
        cfg.window = scope.last_n;
        cfg.seen_prompt = scope.prompt;
    }
}

/// Load candle and llama.cpp on the float32 weights of `model`, check their logits against each
/// other and describe the run.
pub fn open(
    model: &str,
    n_ctx: u32,
    n_seq_max: u32,
    threads: u32,
    seen: Seen,
) -> Result<CandleRun> {
    let registry = Registry::from_env()?;
    let gguf: PathBuf = registry.resolve_model(model)?;
    let t0 = std::time::Instant::now();
    let (mut source, f32_path) = candle::open(
        &gguf,
        registry.cache_dir(),
        CandleOptions {
            n_ctx: n_ctx as usize,
            max_seqs: n_seq_max as usize,
            weights: CandleWeights::Float32,
        },
    )
    .with_context(|| format!("candle: loading {}", gguf.display()))?;
    eprintln!(
        "candle: {} loaded in {:.1} s (float32)",
        f32_path.display(),
        t0.elapsed().as_secs_f64()
    );
    let opts = ModelOptions {
        n_ctx: 512,
        n_seq_max: 1,
        n_threads: crate::run_args::batch_threads(threads),
        f32_attention: true,
        ..Default::default()
    };
    let codec = Arc::new(
        Model::load(&f32_path, opts)
            .with_context(|| format!("llama.cpp: loading {}", f32_path.display()))?,
    );
    if codec.n_vocab() != gauge_engine::LogitSource::n_vocab(&source) {
        bail!(
            "candle reads {} logits per row, llama.cpp {}: not the same model",
            gauge_engine::LogitSource::n_vocab(&source),
            codec.n_vocab()
        );
    }
    let prompts = gauge_lab::prefixes::a1_prefixes()[..CHECK_PROMPTS]
        .iter()
        .map(|p| codec.tokenize(&p.prefix_text, true, false))
        .collect::<Result<Vec<_>, _>>()?;
    let diff = {
        let mut reference = LlamaSource::new(Arc::clone(&codec))?;
        candle::max_abs_row_diff(&mut source, &mut reference, &prompts)?
    };
    if diff.is_nan() || diff > candle::LOGIT_TOLERANCE {
        bail!(
            "candle's logits differ from llama.cpp's on the same float32 weights by up to {diff:.3e} \
             over {CHECK_PROMPTS} prompts (tolerance {:e}): candle does not compute the same model \
             (a GGUF field read differently?); refusing to measure it",
            candle::LOGIT_TOLERANCE
        );
    }
    eprintln!("candle: logits vs llama.cpp F32 (f32 KV cache, no flash attention), max abs difference {diff:.2e}");
    let (_, seen_words) = seen.scope();
    let versions = BTreeMap::from([
        (
            "candle-core".to_string(),
            candle::CANDLE_VERSION.to_string(),
        ),
        (
            "candle-transformers".to_string(),
            candle::CANDLE_VERSION.to_string(),
        ),
    ]);
    let options = BTreeMap::from([
        ("seen".to_string(), seen_words.to_string()),
        // Two significant digits, so a rerun on the same machine resumes the same run.
        (
            "logits_vs_llama_cpp_f32_max_abs".to_string(),
            format!("{diff:.1e}"),
        ),
        ("batch".to_string(), "1 per sequence".to_string()),
    ]);
    Ok(CandleRun {
        source,
        codec,
        engine: EngineInfo {
            device: "cpu".into(),
            dtype: "float32".into(),
            versions,
            options,
        },
    })
}
