//! Which implementation makes each greedy decision: gauge's own row operators ([`crate::ops`]) or
//! llama.cpp's own sampler chain through the bindings — the cross-stack check of the note's
//! driver (docs/PROTOCOL.md §8.1), so one tool shows both stacks side by side.
//!
//! The llama.cpp stack builds, per run, the driver's chain
//! ([`ReferenceChain::shifted_penalties_greedy`]): `logit-bias` adding the run's gauge `c` to every
//! token, then llama.cpp's `penalties`, then `greedy`; the prompt is accepted into the chain
//! before the first step (so it fills the penalty window, as the driver did), and every emitted
//! token after. How each operator maps:
//!
//! * `ctrl` → `penalties(last_n, θ, 0, 0)`: llama.cpp's sign branch (`<= 0` multiplies), the same
//!   fp32 operations as gauge's op, so the two stacks must agree token for token;
//! * `subtractive` → `penalties(last_n, 1, 0, α)`: llama.cpp's presence penalty is exactly
//!   `logit − α` on every seen token (θ = 1 switches it off, as in gauge's op);
//! * `normalized` has no llama.cpp counterpart: its runs stay on gauge's operator (reports mark
//!   them), so a llama-cpp run has exactly the plan of the gauge run it is compared with.
//!
//! Why the plans must match: llama.cpp's logits for one sequence depend (in the last bits) on
//! what else is in the batch — measured on gemma3-270m, where a llama-cpp run without the
//! normalized sequences differed from the gauge run at a third of the positions although the two
//! stacks agree on every decision from identical rows. With identical plans (and
//! `batch_prefixes`), agreeing decisions keep the decode trees, hence the batches, hence the rows
//! identical, and the comparison isolates the sampler.
//!
//! "No window" (the note's whole history) is a window as long as the context: llama.cpp's ring
//! buffer then never drops a token, which is what the driver's `last_n = 1024/2048` emulated.
//!
//! Cost: llama.cpp's stages touch the whole vocabulary per run and step (fill, bias, a hash
//! lookup per candidate in `penalties`, greedy), against O(|S|) per run for gauge's fast path;
//! this stack is a check, not the fast way to run the grid.

use crate::error::LabError;
use crate::ops::Op;
use crate::run::RunSpec;
use serde::{Deserialize, Serialize};

/// The llama.cpp chain of one run (llama-cpp stack).
#[cfg(feature = "llama")]
pub(crate) type LlamaChain = gauge_engine::ReferenceChain;

/// Without llama.cpp there is no chain: [`llama_chain`] refuses the stack, so no value exists.
#[cfg(not(feature = "llama"))]
#[derive(Debug)]
pub(crate) enum LlamaChain {}

#[cfg(not(feature = "llama"))]
impl LlamaChain {
    pub fn accept_prompt(&mut self, _prompt: &[gauge_sampling::TokenId]) {
        match *self {}
    }
    pub fn accept(&mut self, _token: gauge_sampling::TokenId) {
        match *self {}
    }
    pub fn sample_no_accept(&mut self, _row: &[f32]) -> Result<gauge_sampling::TokenId, LabError> {
        match *self {}
    }
}

/// The sampler stack of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    /// gauge's own operators on logit rows (exact, O(|S|) per run).
    #[default]
    Gauge,
    /// llama.cpp's `logit-bias → penalties → greedy` chain through the bindings.
    LlamaCpp,
    /// HF transformers' own processors (`RepetitionPenaltyLogitsProcessor` for ctrl), decoded in
    /// Python (`python -m gauge_sampling probe --engine hf`).
    Hf,
    /// vLLM's own `repetition_penalty` / `presence_penalty`, decoded in Python (`--engine vllm`).
    Vllm,
    /// llama-cpp-python's `Llama` (llama.cpp's own `penalties` sampler), decoded in Python
    /// (`--engine llama-cpp-python`).
    LlamaCppPython,
    /// Any running OpenAI- or llama-server-compatible server over HTTP (`--engine openai
    /// --url URL`): the shift as a full-vocabulary `logit_bias`, the server's own penalty.
    Openai,
    /// mlx-lm's `make_repetition_penalty`, decoded in Python (`--engine mlx`).
    Mlx,
    /// onnxruntime-genai's own `repetition_penalty`, decoded in Python (`--engine ort-genai`).
    OrtGenai,
    /// candle-transformers' quantized llama (the GGUF dequantized to float32) as the logit
    /// source and candle's `apply_repeat_penalty` for ctrl, decoded by the Rust run core
    /// (`gauge probe --engine candle`, cargo feature `candle`).
    Candle,
}

impl Stack {
    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Stack::Gauge => "gauge",
            Stack::LlamaCpp => "llama-cpp",
            Stack::Hf => "hf",
            Stack::Vllm => "vllm",
            Stack::LlamaCppPython => "llama-cpp-python",
            Stack::Openai => "openai",
            Stack::Mlx => "mlx",
            Stack::OrtGenai => "ort-genai",
            Stack::Candle => "candle",
        }
    }

    /// The stack's name in prose (reports).
    pub fn title(self) -> &'static str {
        match self {
            Stack::Gauge => "gauge",
            Stack::LlamaCpp => "llama.cpp",
            Stack::Hf => "HF transformers",
            Stack::Vllm => "vLLM",
            Stack::LlamaCppPython => "llama-cpp-python",
            Stack::Openai => "an OpenAI-compatible server",
            Stack::Mlx => "mlx-lm",
            Stack::OrtGenai => "onnxruntime-genai",
            Stack::Candle => "candle",
        }
    }

    /// The stack's own penalty that decides ctrl (reports).
    pub fn ctrl_operator(self) -> &'static str {
        match self {
            Stack::Gauge => "gauge's `ctrl` operator",
            Stack::LlamaCpp | Stack::LlamaCppPython => "llama.cpp's `penalties` sampler",
            Stack::Hf => "`RepetitionPenaltyLogitsProcessor`",
            Stack::Vllm => "`repetition_penalty`",
            Stack::Openai => "the server's `repeat_penalty` / `repetition_penalty`",
            Stack::Mlx => "`make_repetition_penalty`",
            Stack::OrtGenai => "`repetition_penalty`",
            Stack::Candle => "`candle_transformers::utils::apply_repeat_penalty`",
        }
    }

    /// Parse a name of a stack the Rust decode runs (`gauge probe --engine`): gauge, llama-cpp,
    /// candle.
    pub fn parse(s: &str) -> Option<Stack> {
        match s.trim() {
            "gauge" => Some(Stack::Gauge),
            "llama-cpp" | "llama.cpp" | "llamacpp" => Some(Stack::LlamaCpp),
            "candle" => Some(Stack::Candle),
            _ => None,
        }
    }

    /// Parse any stack name, including the Python engines (hf, vllm, llama-cpp-python, openai,
    /// mlx, ort-genai).
    pub fn parse_any(s: &str) -> Option<Stack> {
        match s.trim() {
            "hf" | "transformers" => Some(Stack::Hf),
            "vllm" => Some(Stack::Vllm),
            "llama-cpp-python" | "llama_cpp" => Some(Stack::LlamaCppPython),
            "openai" => Some(Stack::Openai),
            "mlx" | "mlx-lm" => Some(Stack::Mlx),
            "ort-genai" | "onnxruntime-genai" => Some(Stack::OrtGenai),
            other => Stack::parse(other),
        }
    }

    /// Is the stack decoded by the Python package (its logits from torch), not by [`crate::run`]?
    pub fn is_python(self) -> bool {
        !matches!(self, Stack::Gauge | Stack::LlamaCpp | Stack::Candle)
    }

    /// Does a run of this stack carry an [`EngineInfo`] (versions, weights, the logits check)?
    /// Every engine that computes its own logits does: the Python ones and candle.
    pub fn has_engine_record(self) -> bool {
        self.is_python() || self == Stack::Candle
    }

    /// Does this stack decide with a per-run engine chain in the Rust decode ([`EngineChain`])?
    pub(crate) fn has_chain(self) -> bool {
        matches!(self, Stack::LlamaCpp | Stack::Candle)
    }

    /// Refuse a Python stack where the Rust decode would run (it would silently decide with
    /// gauge's operators instead).
    pub(crate) fn check_rust_decodable(self) -> Result<(), LabError> {
        if self.is_python() {
            return Err(LabError::config(
                "sampler",
                self,
                "gauge, llama-cpp or candle (the Python engines' runs are decoded by `python -m gauge_sampling`)",
            ));
        }
        Ok(())
    }

    /// `true` for the default stack; configurations leave the field out then, so the run ids of
    /// gauge-stack runs are the ones they had before the field existed.
    pub fn is_gauge(&self) -> bool {
        *self == Stack::Gauge
    }

    /// Does this stack decide `op` itself? (Under llama-cpp, `normalized` stays on gauge's
    /// operator; under candle, which has only `apply_repeat_penalty`, everything but ctrl.)
    pub fn decides(self, op: Op) -> bool {
        match self {
            // The Python engines decide every op: their own penalties for ctrl and subtractive,
            // gauge's processor for their stack (`gauge_sampling.hf` / `.vllm` / ...) for
            // normalized.
            Stack::LlamaCpp => matches!(op, Op::Ctrl | Op::Subtractive),
            Stack::Candle => op == Op::Ctrl,
            _ => true,
        }
    }

    /// The op's label in a table of this stack: `normalized*` under llama-cpp (footnoted).
    pub fn op_label(self, op: Op) -> String {
        if self.decides(op) {
            op.name().to_string()
        } else {
            format!("{}*", op.name())
        }
    }

    /// The footnote for [`Stack::op_label`]'s star, if any op of `ops` needs it.
    pub fn footnote(self, ops: &[Op]) -> Option<&'static str> {
        let note = match self {
            Stack::Candle => {
                "* gauge's operator: candle has no normalized or presence penalty (only `apply_repeat_penalty`)"
            }
            _ => "* gauge's operator: llama.cpp has no normalized penalty",
        };
        ops.iter().any(|&o| !self.decides(o)).then_some(note)
    }
}

/// Where a Python stack ran. Part of the configuration (and so of the run id): another device,
/// dtype or package version can move near-ties, so it starts a new run directory instead of
/// resuming one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineInfo {
    /// `cpu`, `cuda`, ...
    pub device: String,
    /// The model's dtype (`float32`, `bfloat16`, `float16`).
    pub dtype: String,
    /// Package → version (python, torch, transformers, vllm, gauge_sampling).
    pub versions: std::collections::BTreeMap<String, String>,
    /// Engine options that can change the numbers (vLLM's `tensor_parallel_size`), as text.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub options: std::collections::BTreeMap<String, String>,
}

impl EngineInfo {
    /// `cpu, float32` (+ options): the short form for tables.
    pub fn describe(&self) -> String {
        let mut s = format!("{}, {}", self.device, self.dtype);
        for (k, v) in &self.options {
            s.push_str(&format!(", {k}={v}"));
        }
        s
    }
}

/// A Python stack needs its [`EngineInfo`] and takes no penalty window (its penalties see the
/// whole prompt and output); candle needs its record and takes a window (its scope is decoded
/// here); gauge and llama-cpp have no engine record.
pub(crate) fn check_engine(
    stack: Stack,
    engine: Option<&EngineInfo>,
    window: Option<usize>,
) -> Result<(), LabError> {
    match (stack.has_engine_record(), engine, window) {
        (true, None, _) => Err(LabError::config(
            "engine",
            "null",
            "the device, dtype and versions of the engine's run",
        )),
        (false, Some(e), _) => Err(LabError::config(
            "engine",
            e.describe(),
            "null for the gauge and llama-cpp stacks",
        )),
        (true, Some(_), Some(_)) if !stack.is_python() => Ok(()),
        (true, Some(_), Some(n)) => Err(LabError::config(
            "window",
            n,
            "none for the Python engines (their seen set is `--seen`: the protocol's whole prompt and output, or the engine's own default, recorded in `engine.options`)",
        )),
        _ => Ok(()),
    }
}

impl std::fmt::Display for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The engine's own chain of one run (llama-cpp and candle stacks): it holds the run's history
/// and makes the run's decisions.
#[derive(Debug)]
pub(crate) enum EngineChain {
    Llama(LlamaChain),
    /// Boxed: candle's chain carries its seen set inline (432 bytes against llama.cpp's 88).
    #[cfg(feature = "candle")]
    Candle(Box<gauge_engine::candle::CandleChain>),
}

impl EngineChain {
    pub fn accept_prompt(&mut self, prompt: &[gauge_sampling::TokenId]) {
        match self {
            EngineChain::Llama(c) => c.accept_prompt(prompt),
            #[cfg(feature = "candle")]
            EngineChain::Candle(c) => c.accept_prompt(prompt),
        }
    }
    pub fn accept(&mut self, token: gauge_sampling::TokenId) {
        match self {
            EngineChain::Llama(c) => c.accept(token),
            #[cfg(feature = "candle")]
            EngineChain::Candle(c) => c.accept(token),
        }
    }
    pub fn sample_no_accept(&mut self, row: &[f32]) -> Result<gauge_sampling::TokenId, LabError> {
        match self {
            EngineChain::Llama(c) => Ok(c.sample_no_accept(row)?),
            #[cfg(feature = "candle")]
            EngineChain::Candle(c) => Ok(c.sample_no_accept(row)?),
        }
    }
}

/// The chain of one run of `stack` before any token is accepted (`None` where gauge's operator
/// decides the run). `window` is the penalty window (`None`: all of the history); `n_ctx` is the
/// context, llama.cpp's "no window"; `seen_prompt`: the prompt is part of the history.
pub(crate) fn engine_chain<R>(
    stack: Stack,
    spec: &RunSpec<R>,
    n_vocab: usize,
    window: Option<usize>,
    n_ctx: usize,
) -> Result<Option<EngineChain>, LabError> {
    match stack {
        Stack::LlamaCpp => {
            Ok(llama_chain(spec, n_vocab, window.unwrap_or(n_ctx))?.map(EngineChain::Llama))
        }
        Stack::Candle => candle_chain(spec, window),
        _ => Ok(None),
    }
}

/// candle's chain of one run: ctrl only (candle has no other penalty).
#[cfg(feature = "candle")]
fn candle_chain<R>(
    spec: &RunSpec<R>,
    window: Option<usize>,
) -> Result<Option<EngineChain>, LabError> {
    if spec.op != Op::Ctrl {
        return Ok(None);
    }
    let scope = gauge_engine::candle::CandleScope {
        prompt: true,
        last_n: window,
    };
    Ok(Some(EngineChain::Candle(Box::new(
        gauge_engine::candle::CandleChain::new(spec.c, spec.theta, scope)?,
    ))))
}

#[cfg(not(feature = "candle"))]
fn candle_chain<R>(
    _spec: &RunSpec<R>,
    _window: Option<usize>,
) -> Result<Option<EngineChain>, LabError> {
    Err(LabError::config(
        "sampler",
        Stack::Candle,
        "gauge or llama-cpp (this build of gauge-lab has no candle: cargo feature `candle`)",
    ))
}

/// The llama.cpp driver chain of one run, before any token is accepted (`None` for an op
/// llama.cpp does not have: gauge's operator decides that run). `last_n` is the penalty window
/// (the context length for "no window").
#[cfg(not(feature = "llama"))]
pub(crate) fn llama_chain<R>(
    _spec: &RunSpec<R>,
    _n_vocab: usize,
    _last_n: usize,
) -> Result<Option<LlamaChain>, LabError> {
    Err(LabError::config(
        "sampler",
        Stack::LlamaCpp,
        "gauge (this build of gauge-lab has no llama.cpp: feature `llama`)",
    ))
}

/// The llama.cpp driver chain of one run (see above).
#[cfg(feature = "llama")]
pub(crate) fn llama_chain<R>(
    spec: &RunSpec<R>,
    n_vocab: usize,
    last_n: usize,
) -> Result<Option<LlamaChain>, LabError> {
    let stage = spec.penalty().stage();
    if !matches!(spec.op, Op::Ctrl | Op::Subtractive) {
        return Ok(None);
    }
    let (repeat, present) = (stage.repeat_penalty, stage.presence_penalty);
    let last_n = i32::try_from(last_n).unwrap_or(i32::MAX);
    Ok(Some(LlamaChain::shifted_penalties_greedy(
        n_vocab, spec.c, last_n, repeat, 0.0, present,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_default_is_gauge() {
        for s in [Stack::Gauge, Stack::LlamaCpp, Stack::Candle] {
            assert_eq!(Stack::parse(s.name()), Some(s));
            assert!(s.check_rust_decodable().is_ok());
            let j = serde_json::to_string(&s).unwrap();
            assert_eq!(j, format!("\"{}\"", s.name()));
        }
        assert_eq!(Stack::default(), Stack::Gauge);
        assert_eq!(Stack::parse("vllm"), None);
    }

    #[test]
    fn python_stacks_parse_only_where_asked_and_decide_every_op() {
        assert_eq!(Stack::parse("hf"), None, "the CLI's --sampler takes no hf");
        assert_eq!(Stack::parse_any("hf"), Some(Stack::Hf));
        assert_eq!(Stack::parse_any("vllm"), Some(Stack::Vllm));
        assert_eq!(Stack::parse_any("llama-cpp"), Some(Stack::LlamaCpp));
        assert!(Op::ALL.iter().all(|&o| Stack::Vllm.decides(o)));
        assert!(Stack::Hf.footnote(&Op::ALL).is_none());
        assert!(Stack::Hf.check_rust_decodable().is_err());
        assert!(Stack::LlamaCpp.check_rust_decodable().is_ok());
        for s in [
            Stack::LlamaCppPython,
            Stack::Openai,
            Stack::Mlx,
            Stack::OrtGenai,
        ] {
            assert_eq!(Stack::parse_any(s.name()), Some(s));
            assert_eq!(Stack::parse(s.name()), None);
            assert!(s.is_python() && s.check_rust_decodable().is_err());
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.name())
            );
        }
    }

    #[test]
    fn candle_decides_ctrl_only_and_carries_an_engine_record() {
        assert!(Stack::Candle.decides(Op::Ctrl));
        assert!(!Stack::Candle.decides(Op::Normalized) && !Stack::Candle.decides(Op::Subtractive));
        assert!(Stack::Candle.footnote(&Op::ALL).unwrap().contains("candle"));
        assert!(Stack::Candle.has_engine_record() && !Stack::Candle.is_python());
        assert!(check_engine(Stack::Candle, None, None).is_err());
        #[cfg(not(feature = "candle"))]
        {
            let spec = RunSpec {
                role: (),
                op: Op::Ctrl,
                theta: 1.3,
                c: 5.0,
                alpha: 1.0,
            };
            let e = engine_chain(Stack::Candle, &spec, 16, None, 64).unwrap_err();
            assert!(e.to_string().contains("candle"), "{e}");
        }
    }

    #[cfg(feature = "llama")]
    #[test]
    fn normalized_stays_on_gauges_operator_under_llama_cpp() {
        let spec = |op| RunSpec {
            role: (),
            op,
            theta: 1.3,
            c: 5.0,
            alpha: 1.0,
        };
        assert!(llama_chain(&spec(Op::Normalized), 16, 64)
            .unwrap()
            .is_none());
        let ctrl = llama_chain(&spec(Op::Ctrl), 16, 64).unwrap().unwrap();
        assert_eq!(
            ctrl.describe(),
            "logits -> logit-bias -> penalties -> greedy "
        );
        assert_eq!(Stack::LlamaCpp.op_label(Op::Normalized), "normalized*");
        assert_eq!(Stack::LlamaCpp.op_label(Op::Ctrl), "ctrl");
        assert!(Stack::LlamaCpp.footnote(&Op::ALL).is_some());
        assert!(Stack::Gauge.footnote(&Op::ALL).is_none());
        assert!(Stack::LlamaCpp.footnote(&[Op::Ctrl]).is_none());
    }
}
