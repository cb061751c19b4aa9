//! The fix for candle as a drop-in: gauge's normalized repetition penalty (the published
//! `gauge-sampling` crate) on candle's logits, in candle's own decode loop.
//!
//! candle-examples' quantized example penalizes with candle's sign-branched operator (`>= 0`
//! divides by θ, else multiplies), so the penalty's strength depends on where the logits' zero
//! lies:
//!
//! ```text
//! let start_at = all_tokens.len().saturating_sub(repeat_last_n);
//! let logits = apply_repeat_penalty(&logits, repeat_penalty, &all_tokens[start_at..])?;
//! next_token = logits_processor.sample(&logits)?;
//! ```
//!
//! The drop-in keeps the loop and replaces those lines with one gauge-sampling chain,
//! `repeat_penalty_mode: "normalized"` (log-softmax first, then ℓ·θ: adding a constant to every
//! logit changes nothing), the same θ and the same window over the generated tokens:
//!
//! ```text
//! let next_token = chain.sample(&logits.to_vec1::<f32>()?)? as u32;   // accepts the token too
//! ```
//!
//! `mode: "ctrl"` is llama.cpp's sign branch, which on every row decides as candle's
//! `apply_repeat_penalty` does (tests/candle.rs checks both claims on real logits).
//!
//! ```text
//! cargo run --release -p gauge-engine --features candle --example candle_fix -- [GGUF] [PROMPT]
//! ```
//!
//! Without a GGUF path it runs the default model from gauge's cache. It loads the GGUF the way a
//! candle program does (quantized weights, the tokenizer from the GGUF's metadata) and prints the
//! continuation under candle's penalty and under gauge's, each with the logits shifted by +5 and
//! by −5: candle's text moves with the shift, gauge's does not.

use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use candle_transformers::models::quantized_llama::ModelWeights;
use gauge_sampling::{Chain, SamplingParams};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// candle-examples' quantized defaults.
pub const REPEAT_PENALTY: f32 = 1.1;
pub const REPEAT_LAST_N: usize = 64;

/// Who decides each token after the logits.
pub enum Decide {
    /// candle's own lines: `apply_repeat_penalty` over the last `last_n` generated tokens, then
    /// `LogitsProcessor` with `Sampling::ArgMax`.
    Candle {
        penalty: f32,
        last_n: usize,
        greedy: LogitsProcessor,
    },
    /// One gauge-sampling chain: penalty + greedy, holding its own window of generated tokens.
    Gauge(Chain),
}

impl Decide {
    /// candle's penalty as shipped in its example.
    pub fn candle(penalty: f32, last_n: usize) -> Self {
        Decide::Candle {
            penalty,
            last_n,
            greedy: LogitsProcessor::from_sampling(0, Sampling::ArgMax),
        }
    }

    /// gauge's penalty in `mode` ("normalized" is the fix; "ctrl" is candle's operator), greedy.
    pub fn gauge(mode: &str, penalty: f32, last_n: usize, n_vocab: usize) -> Result<Self, Error> {
        let params = SamplingParams::from_value(&serde_json::json!({
            "temperature": 0.0,
            "repeat_penalty": penalty,
            "repeat_last_n": last_n,
            "repeat_penalty_mode": mode,
        }))?;
        Ok(Decide::Gauge(Chain::from_params(&params, n_vocab, None)?))
    }

    /// The next token after `logits`; `generated` is every token generated so far.
    fn pick(&mut self, logits: &Tensor, generated: &[u32]) -> Result<u32, Error> {
        match self {
            Decide::Candle {
                penalty,
                last_n,
                greedy,
            } => {
                let start_at = generated.len().saturating_sub(*last_n);
                let logits = candle_transformers::utils::apply_repeat_penalty(
                    logits,
                    *penalty,
                    &generated[start_at..],
                )?;
                Ok(greedy.sample(&logits)?)
            }
            Decide::Gauge(chain) => Ok(chain.sample(&logits.to_vec1::<f32>()?)? as u32),
        }
    }
}

/// candle's example loop: the prompt in one forward, then one token per forward; `shift` is
/// added to every logit before the decision (0 in real use; ±c to probe the zero point).
pub fn generate(
    model: &mut ModelWeights,
    prompt: &[u32],
    steps: usize,
    shift: f32,
    decide: &mut Decide,
) -> Result<Vec<u32>, Error> {
    let device = Device::Cpu;
    let mut generated: Vec<u32> = Vec::with_capacity(steps);
    let input = Tensor::new(prompt, &device)?.unsqueeze(0)?;
    let mut logits = model.forward(&input, 0)?.squeeze(0)?;
    for index in 0..steps {
        let shifted = (&logits + f64::from(shift))?;
        let next = decide.pick(&shifted, &generated)?;
        generated.push(next);
        if index + 1 < steps {
            let input = Tensor::new(&[next], &device)?.unsqueeze(0)?;
            logits = model.forward(&input, prompt.len() + index)?.squeeze(0)?;
        }
    }
    Ok(generated)
}

/// A GGUF loaded as a candle program loads it: quantized weights and the GGUF's tokenizer; with
/// the width of a logit row.
pub fn load(path: &std::path::Path) -> Result<(ModelWeights, tokenizers::Tokenizer, usize), Error> {
    let mut file = std::fs::File::open(path)?;
    let content = gguf_file::Content::read(&mut file)?;
    let n_vocab = content
        .tensor_infos
        .get("token_embd.weight")
        .ok_or("no tensor token_embd.weight")?
        .shape
        .dims()[0];
    let tokenizer = tokenizers::Tokenizer::from_gguf(&content)?;
    let model = ModelWeights::from_gguf(content, &mut file, &Device::Cpu)?;
    Ok((model, tokenizer, n_vocab))
}

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let path = match args.next() {
        Some(p) => std::path::PathBuf::from(p),
        None => gauge_engine::resolve_model(gauge_engine::DEFAULT_MODEL)?,
    };
    let prompt = args
        .next()
        .unwrap_or_else(|| "The history of the city began in the".into());
    let (model, tok, n_vocab) = load(&path)?;
    let ids = tok.encode(prompt.as_str(), true)?.get_ids().to_vec();
    let theta = 1.3;
    println!(
        "prompt: {prompt:?} ({} tokens), θ = {theta}, window {REPEAT_LAST_N}",
        ids.len()
    );
    for (name, mode) in [
        ("candle's apply_repeat_penalty", None),
        ("gauge normalized", Some("normalized")),
    ] {
        for shift in [5.0f32, -5.0] {
            let mut decide = match mode {
                None => Decide::candle(theta, REPEAT_LAST_N),
                Some(m) => Decide::gauge(m, theta, REPEAT_LAST_N, n_vocab)?,
            };
            let out = generate(&mut model.clone(), &ids, 32, shift, &mut decide)?;
            println!("{name}, logits {shift:+}: {:?}", tok.decode(&out, true)?);
        }
    }
    Ok(())
}
