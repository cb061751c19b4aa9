//! `ReferenceChain`: llama.cpp's **own** sampler chain, built through the bindings from the same
//! [`SamplingParams`] gauge's chain is built from. It is the yardstick: cross-check tests feed the
//! same real logit rows to both chains and require the same tokens, and `gauge bench sampling`
//! times both.
//!
//! Construction follows `common_sampler_init` (docs/SPEC.md §3): the penalty parameters are validated as
//! common validates them; one `logit-bias` stage first holding the user biases (string keys
//! expanded to every token of their tokenization), `-inf` for every end-of-generation token when
//! `ignore_eos` is set (llama-server's order) and `-inf` for the model's suppress tokens; then one
//! stage per `samplers` entry (`temperature` is `temp-ext`), then `dist(seed)`. With `mirostat`
//! 1/2: `temp` then `mirostat(n_vocab, seed, tau, eta, 100)` / `mirostat-v2`.
//!
//! [`ReferenceChain::for_n_vocab`] builds the same chain for rows of any width that need not come
//! from a model (benchmarks on synthetic rows); a model then only expands DRY's string breakers.
//! [`ReferenceChain::greedy`] is the bare `logits -> greedy` chain.
//!
//! [`ReferenceChain::sample`] does exactly what `llama_sampler_sample` does on the CPU: fill a
//! token-data array with `{id: i, logit: row[i], p: 0}` for the whole vocabulary (unsorted,
//! nothing selected), apply the chain, take the selected entry, accept its token. The array is
//! reused, so a step allocates nothing. Before that it checks the row for values llama.cpp's C++
//! cannot take ([`ValidRow`]); a caller that samples the same rows many times checks them once
//! and calls [`ReferenceChain::sample_valid`], so only llama.cpp's own work is timed.
//!
//! gauge settings that llama.cpp cannot express (the `normalized` penalty, `-1` windows meaning
//! "the whole history", exemptions, token-id DRY breakers, not counting the prompt, adaptive-p
//! and infill, which llama-cpp-2 does not wrap) are refused with
//! [`EngineError::NotInLlamaCpp`] when they would change the result, rather than silently built
//! as something else.

use gauge_sampling::order::SamplerType;
use gauge_sampling::params::{SamplingParams, TokenRef, DEFAULT_DRY_BREAKERS};
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::TokenId;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use llama_cpp_2::token::LlamaToken;

use crate::error::{EngineError, Result};
use crate::model::Model;

/// mirostat v1's `m`, fixed by common.
const MIROSTAT_M: i32 = 100;

/// llama.cpp's sampler chain for one sequence.
pub struct ReferenceChain {
    chain: LlamaSampler,
    names: Vec<String>,
    cur: LlamaTokenDataArray,
    n_vocab: usize,
}

impl std::fmt::Debug for ReferenceChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceChain")
            .field("chain", &self.describe())
            .finish()
    }
}

fn not_in_llama(what: &str) -> EngineError {
    EngineError::NotInLlamaCpp(what.to_string())
}

fn name_of(s: &LlamaSampler) -> String {
    s.name()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|| "(null)".into())
}

/// A logit row checked once for what llama.cpp's C++ cannot take: NaN or `+inf` (they make its
/// sort comparators inconsistent, undefined behaviour in `std::sort`) and rows without a finite
/// value (`dist` then selects nothing). The check is a pass over the row that llama.cpp itself
/// never makes, so a benchmark checks its rows once and times only `llama_sampler_sample`'s work.
#[derive(Clone, Copy, Debug)]
pub struct ValidRow<'a>(&'a [f32]);

impl<'a> ValidRow<'a> {
    /// Check `logits` (the length is checked against the chain when sampling).
    pub fn new(logits: &'a [f32]) -> Result<Self> {
        let mut any_finite = false;
        for (i, &x) in logits.iter().enumerate() {
            if x.is_nan() || x == f32::INFINITY {
                return Err(
                    gauge_sampling::SamplingError::NonFiniteLogit { index: i, value: x }.into(),
                );
            }
            any_finite |= x.is_finite();
        }
        if !any_finite {
            return Err(gauge_sampling::SamplingError::NoFiniteLogit.into());
        }
        Ok(Self(logits))
    }

    pub fn as_slice(&self) -> &'a [f32] {
        self.0
    }
}

impl ReferenceChain {
    /// Build llama.cpp's chain for `params` on `model`'s vocabulary.
    pub fn from_params(params: &SamplingParams, model: &Model) -> Result<Self> {
        build(params, model.n_vocab(), Some(model), true)
    }

    /// llama.cpp's chain for rows of any width `n_vocab` that need not come from a model
    /// (`gauge bench sampling` runs it on synthetic rows of 32000..262144 logits).
    ///
    /// Most of llama.cpp's samplers never look at a vocabulary; logit-bias and mirostat v1 take
    /// `n_vocab`. DRY is the exception: llama.cpp only takes its breakers as strings, expanded
    /// against a vocabulary, so `dry_vocab` supplies one (its breaker tokens then act on these
    /// rows by id). It serves nothing else: the rows have no vocabulary, so string logit-bias
    /// keys and `ignore_eos` are [`SamplingError::NeedsVocab`](gauge_sampling::SamplingError),
    /// and no suppress tokens are added.
    pub fn for_n_vocab(
        params: &SamplingParams,
        n_vocab: usize,
        dry_vocab: Option<&Model>,
    ) -> Result<Self> {
        if n_vocab == 0 || n_vocab > i32::MAX as usize {
            return Err(EngineError::option(
                "n_vocab",
                n_vocab,
                "1..=2147483647 (a non-empty vocabulary of 32-bit token ids)",
            ));
        }
        build(params, n_vocab, dry_vocab, false)
    }

    /// `logits -> greedy`: the bare `llama_sampler_init_greedy` chain (the first maximal logit).
    pub fn greedy(n_vocab: usize) -> Result<Self> {
        if n_vocab == 0 || n_vocab > i32::MAX as usize {
            return Err(EngineError::option(
                "n_vocab",
                n_vocab,
                "1..=2147483647 (a non-empty vocabulary of 32-bit token ids)",
            ));
        }
        Ok(Self::from_stages(vec![LlamaSampler::greedy()], n_vocab))
    }

    /// The note's llama.cpp driver chain (docs/PROTOCOL.md §8.1), used by gauge-lab's cross-stack
    /// `--sampler llama-cpp`: `logit-bias` adding `shift` to EVERY token (the gauge; the stage is
    /// left out when `shift == 0`, as the A2 driver has none) → `penalties(last_n, repeat, freq,
    /// present)` → `greedy`. No suppress tokens, no `dist`: exactly what the driver applied.
    pub fn shifted_penalties_greedy(
        n_vocab: usize,
        shift: f32,
        last_n: i32,
        repeat: f32,
        freq: f32,
        present: f32,
    ) -> Result<Self> {
        if n_vocab == 0 || n_vocab > i32::MAX as usize {
            return Err(EngineError::option(
                "n_vocab",
                n_vocab,
                "1..=2147483647 (a non-empty vocabulary of 32-bit token ids)",
            ));
        }
        if !shift.is_finite() {
            return Err(EngineError::option("shift", shift, "finite"));
        }
        if last_n < 0 {
            return Err(EngineError::option("last_n", last_n, ">= 0 (0 = off)"));
        }
        if !repeat.is_finite() || repeat <= 0.0 || !(1.0 / repeat).is_finite() {
            return Err(EngineError::option(
                "repeat_penalty",
                repeat,
                "finite, > 0, with a finite inverse",
            ));
        }
        if !freq.is_finite() || !present.is_finite() {
            return Err(EngineError::option(
                "frequency_penalty / presence_penalty",
                format!("{freq} / {present}"),
                "finite",
            ));
        }
        let mut stages = Vec::with_capacity(3);
        if shift != 0.0 {
            let bias: Vec<LlamaLogitBias> = (0..n_vocab as i32)
                .map(|t| LlamaLogitBias::new(LlamaToken(t), shift))
                .collect();
            stages.push(LlamaSampler::logit_bias(n_vocab as i32, &bias));
        }
        stages.push(LlamaSampler::penalties(
            n_vocab as i32,
            last_n,
            repeat,
            freq,
            present,
        ));
        stages.push(LlamaSampler::greedy());
        Ok(Self::from_stages(stages, n_vocab))
    }

    fn from_stages(stages: Vec<LlamaSampler>, n_vocab: usize) -> Self {
        let names = stages.iter().map(name_of).collect();
        Self {
            chain: LlamaSampler::chain(stages, true),
            names,
            cur: LlamaTokenDataArray::new(Vec::with_capacity(n_vocab), false),
            n_vocab,
        }
    }
}

/// The common construction. `model` is the rows' own vocabulary when `model_is_vocab` (strings,
/// `ignore_eos` and suppress tokens resolve through it); otherwise it only expands DRY breakers.
fn build(
    params: &SamplingParams,
    n_vocab: usize,
    model: Option<&Model>,
    model_is_vocab: bool,
) -> Result<ReferenceChain> {
    params.validate(n_vocab)?;
    check_expressible(params)?;
    // common_sampler_init's own checks (it throws std::invalid_argument).
    let r = params.repeat_penalty;
    if !r.is_finite() || r <= 0.0 || !(1.0 / r).is_finite() {
        return Err(EngineError::option(
            "repeat_penalty",
            r,
            "finite, > 0, with a finite inverse",
        ));
    }
    if !params.frequency_penalty.is_finite() {
        return Err(EngineError::option(
            "frequency_penalty",
            params.frequency_penalty,
            "finite",
        ));
    }
    if !params.presence_penalty.is_finite() {
        return Err(EngineError::option(
            "presence_penalty",
            params.presence_penalty,
            "finite",
        ));
    }

    let mut stages: Vec<LlamaSampler> = Vec::with_capacity(params.samplers.len() + 2);
    // Names of stages that exist only as a print: a disabled DRY without a vocabulary is
    // llama.cpp's stateless `?dry` no-op, which the bindings cannot build without a model.
    let mut print_only: Vec<(usize, &'static str)> = Vec::new();
    let vocab = if model_is_vocab { model } else { None };
    let biases = merged_biases(params, n_vocab, vocab)?;
    if !biases.is_empty() {
        stages.push(LlamaSampler::logit_bias(n_vocab as i32, &biases));
    }
    let seed = params.seed;
    let min_keep = params.min_keep.max(0) as usize;
    match params.mirostat {
        0 => {
            for slot in &params.samplers {
                let s = match slot {
                    SamplerType::Penalties => LlamaSampler::penalties(
                        n_vocab as i32,
                        params.repeat_last_n,
                        params.repeat_penalty,
                        params.frequency_penalty,
                        params.presence_penalty,
                    ),
                    SamplerType::Dry => {
                        let Some(model) = model else {
                            if dry_enabled(params) {
                                let value = match &params.dry_sequence_breakers {
                                    Some(b) => format!("{b:?}"),
                                    None => format!("{DEFAULT_DRY_BREAKERS:?}"),
                                };
                                return Err(gauge_sampling::SamplingError::NeedsVocab {
                                    field: "dry_sequence_breakers".into(),
                                    value,
                                }
                                .into());
                            }
                            print_only.push((stages.len(), "?dry"));
                            continue;
                        };
                        let breakers: Vec<String> = match &params.dry_sequence_breakers {
                            Some(b) => b.clone(),
                            None => DEFAULT_DRY_BREAKERS.iter().map(|s| s.to_string()).collect(),
                        };
                        if breakers.iter().any(|b| b.contains('\0')) {
                            return Err(EngineError::option(
                                "dry_sequence_breakers",
                                format!("{breakers:?}"),
                                "strings without NUL bytes",
                            ));
                        }
                        LlamaSampler::dry(
                            model.llama(),
                            params.dry_multiplier,
                            params.dry_base,
                            params.dry_allowed_length,
                            params.dry_penalty_last_n,
                            breakers.iter().map(|b| b.as_bytes()),
                        )
                    }
                    SamplerType::TopNSigma => LlamaSampler::top_n_sigma(params.top_n_sigma),
                    SamplerType::TopK => LlamaSampler::top_k(params.top_k),
                    SamplerType::TypicalP => LlamaSampler::typical(params.typical_p, min_keep),
                    SamplerType::TopP => LlamaSampler::top_p(params.top_p, min_keep),
                    SamplerType::MinP => LlamaSampler::min_p(params.min_p, min_keep),
                    SamplerType::Xtc => LlamaSampler::xtc(
                        params.xtc_probability,
                        params.xtc_threshold,
                        min_keep,
                        seed,
                    ),
                    SamplerType::Temperature => LlamaSampler::temp_ext(
                        params.temperature,
                        params.dynatemp_range,
                        params.dynatemp_exponent,
                    ),
                    SamplerType::Infill => {
                        return Err(not_in_llama(
                            "the infill sampler (not wrapped by llama-cpp-2)",
                        ))
                    }
                    SamplerType::AdaptiveP => {
                        return Err(not_in_llama(
                            "the adaptive-p sampler (not wrapped by llama-cpp-2)",
                        ))
                    }
                };
                stages.push(s);
            }
            stages.push(LlamaSampler::dist(seed));
        }
        1 => {
            stages.push(LlamaSampler::temp(params.temperature));
            stages.push(LlamaSampler::mirostat(
                n_vocab as i32,
                seed,
                params.mirostat_tau,
                params.mirostat_eta,
                MIROSTAT_M,
            ));
        }
        2 => {
            stages.push(LlamaSampler::temp(params.temperature));
            stages.push(LlamaSampler::mirostat_v2(
                seed,
                params.mirostat_tau,
                params.mirostat_eta,
            ));
        }
        m => return Err(EngineError::option("mirostat", m, "0, 1 or 2")),
    }
    let mut chain = ReferenceChain::from_stages(stages, n_vocab);
    for &(at, name) in print_only.iter().rev() {
        chain.names.insert(at, name.to_string());
    }
    Ok(chain)
}

impl ReferenceChain {
    /// llama.cpp's chain print (`common_sampler_print`): `"logits "` then `"-> name "` per stage.
    pub fn describe(&self) -> String {
        let mut s = String::from("logits ");
        for n in &self.names {
            s.push_str("-> ");
            s.push_str(n);
            s.push(' ');
        }
        s
    }

    /// The runtime names of the stages (`?penalties` for a placeholder, ...).
    pub fn stage_names(&self) -> &[String] {
        &self.names
    }

    /// `llama_sampler_sample` on a logit row: fill, apply, select, accept.
    pub fn sample(&mut self, logits: &[f32]) -> Result<TokenId> {
        self.sample_valid(ValidRow::new(logits)?)
    }

    /// Fill, apply and select, without accepting.
    pub fn sample_no_accept(&mut self, logits: &[f32]) -> Result<TokenId> {
        self.sample_valid_no_accept(ValidRow::new(logits)?)
    }

    /// [`ReferenceChain::sample`] on a row checked beforehand: exactly the CPU work of
    /// `llama_sampler_sample` after it reads the logits (fill, apply, select, accept).
    pub fn sample_valid(&mut self, row: ValidRow<'_>) -> Result<TokenId> {
        let tok = self.sample_valid_no_accept(row)?;
        self.accept(tok);
        Ok(tok)
    }

    /// [`ReferenceChain::sample_no_accept`] on a row checked beforehand.
    pub fn sample_valid_no_accept(&mut self, row: ValidRow<'_>) -> Result<TokenId> {
        let logits = row.0;
        if logits.len() != self.n_vocab {
            return Err(gauge_sampling::SamplingError::RowLength {
                expected: self.n_vocab,
                got: logits.len(),
            }
            .into());
        }
        let data = &mut self.cur.data;
        data.clear();
        data.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
        );
        self.cur.sorted = false;
        self.cur.selected = None;
        self.chain.apply(&mut self.cur);
        self.cur.selected_token().map(|t| t.0).ok_or_else(|| {
            gauge_sampling::SamplingError::Empty("llama.cpp's chain selected nothing".into()).into()
        })
    }

    /// The candidates left by the last sample, as `(id, logit, p)` in array order.
    pub fn last_candidates(&self) -> impl Iterator<Item = (TokenId, f32, f32)> + '_ {
        self.cur.data.iter().map(|d| (d.id().0, d.logit(), d.p()))
    }

    /// Accept a token into every stage (`llama_sampler_accept` on the chain). An id outside the
    /// vocabulary is ignored rather than passed to C code that does not check it.
    pub fn accept(&mut self, token: TokenId) {
        if token >= 0 && (token as usize) < self.n_vocab {
            self.chain.accept(LlamaToken(token));
        }
    }

    /// Accept prompt tokens, as llama-server and llama-completion do before generating.
    pub fn accept_prompt(&mut self, tokens: &[TokenId]) {
        for &t in tokens {
            self.accept(t);
        }
    }

    /// Reset every stage (history, RNG reseeded).
    pub fn reset(&mut self) {
        self.chain.reset();
    }
}

/// llama.cpp's test in `llama_sampler_init_dry` (a negative window is refused earlier).
fn dry_enabled(p: &SamplingParams) -> bool {
    p.dry_multiplier != 0.0 && p.dry_base >= 1.0 && p.dry_penalty_last_n != 0
}

/// Refuse gauge-only settings that would change what the chain does.
fn check_expressible(p: &SamplingParams) -> Result<()> {
    let uses = |t: SamplerType| p.mirostat == 0 && p.samplers.contains(&t);
    let pen_on = uses(SamplerType::Penalties)
        && p.repeat_last_n != 0
        && !(p.repeat_penalty == 1.0 && p.frequency_penalty == 0.0 && p.presence_penalty == 0.0);
    if pen_on {
        if p.repeat_last_n < 0 {
            return Err(not_in_llama(
                "repeat_last_n = -1 as the whole history (llama.cpp clamps it to 0 = off)",
            ));
        }
        if p.repeat_penalty_mode != PenaltyMode::Ctrl && p.repeat_penalty != 1.0 {
            return Err(not_in_llama("repeat_penalty_mode = normalized"));
        }
        if !p.penalize_prompt {
            return Err(not_in_llama("penalize_prompt = false"));
        }
        if p.penalty_once_per_token && p.frequency_penalty != 0.0 {
            return Err(not_in_llama("penalty_once_per_token"));
        }
        if !p.penalty_exempt.is_empty() {
            return Err(not_in_llama("penalty_exempt"));
        }
    }
    let dry_on = uses(SamplerType::Dry) && dry_enabled(p);
    if dry_on {
        if p.dry_penalty_last_n < 0 {
            return Err(not_in_llama(
                "dry_penalty_last_n = -1 as the whole history (llama.cpp clamps it to 0 = off)",
            ));
        }
        if p.dry_sequence_breaker_ids.is_some() {
            return Err(not_in_llama("dry_sequence_breaker_ids (token-id breakers)"));
        }
    }
    Ok(())
}

/// User biases, then `-inf` for EOG tokens (`ignore_eos`), then `-inf` for suppress tokens.
/// Without the rows' vocabulary only id biases are possible.
fn merged_biases(
    p: &SamplingParams,
    n_vocab: usize,
    vocab: Option<&Model>,
) -> Result<Vec<LlamaLogitBias>> {
    let needs_vocab = |field: &str, value: &str| -> EngineError {
        gauge_sampling::SamplingError::NeedsVocab {
            field: field.to_string(),
            value: value.to_string(),
        }
        .into()
    };
    let mut out = Vec::new();
    for b in &p.logit_bias {
        match &b.token {
            TokenRef::Id(id) => {
                // llama.cpp's logit-bias indexes the array with the id: check it first.
                if *id < 0 || *id as usize >= n_vocab {
                    return Err(EngineError::TokenOutOfRange {
                        token: *id,
                        n_vocab,
                    });
                }
                out.push(LlamaLogitBias::new(LlamaToken(*id), b.bias));
            }
            TokenRef::Text(text) => {
                let model = vocab.ok_or_else(|| needs_vocab("logit_bias", text))?;
                for t in model.tokenize(text, false, false)? {
                    out.push(LlamaLogitBias::new(LlamaToken(t), b.bias));
                }
            }
        }
    }
    if p.ignore_eos {
        let model = vocab.ok_or_else(|| needs_vocab("ignore_eos", "true"))?;
        out.extend(
            model
                .eog_tokens()
                .iter()
                .map(|&t| LlamaLogitBias::new(LlamaToken(t), f32::NEG_INFINITY)),
        );
    }
    if let Some(model) = vocab {
        out.extend(
            model
                .suppress_tokens()
                .iter()
                .map(|&t| LlamaLogitBias::new(LlamaToken(t), f32::NEG_INFINITY)),
        );
    }
    Ok(out)
}
