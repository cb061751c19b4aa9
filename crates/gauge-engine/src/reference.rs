//! `ReferenceChain`: llama.cpp's **own** sampler chain, built through the bindings from the same
//! [`SamplingParams`] gauge's chain is built from. It is the yardstick: cross-check tests feed the
//! same real logit rows to both chains and require the same tokens, and `gauge bench sampling`
//! times both.
//!
//! Construction follows `common_sampler_init` (SPEC §3): the penalty parameters are validated as
//! common validates them; one `logit-bias` stage first holding the user biases (string keys
//! expanded to every token of their tokenization), `-inf` for every end-of-generation token when
//! `ignore_eos` is set (llama-server's order) and `-inf` for the model's suppress tokens; then one
//! stage per `samplers` entry (`temperature` is `temp-ext`), then `dist(seed)`. With `mirostat`
//! 1/2: `temp` then `mirostat(n_vocab, seed, tau, eta, 100)` / `mirostat-v2`.
//!
//! [`ReferenceChain::sample`] does exactly what `llama_sampler_sample` does on the CPU: fill a
//! token-data array with `{id: i, logit: row[i], p: 0}` for the whole vocabulary (unsorted,
//! nothing selected), apply the chain, take the selected entry, accept its token. The array is
//! reused, so a step allocates nothing.
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

impl ReferenceChain {
    /// Build llama.cpp's chain for `params` on `model`'s vocabulary.
    pub fn from_params(params: &SamplingParams, model: &Model) -> Result<Self> {
        let n_vocab = model.n_vocab();
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
        let biases = merged_biases(params, model)?;
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
                            let breakers: Vec<String> = match &params.dry_sequence_breakers {
                                Some(b) => b.clone(),
                                None => {
                                    DEFAULT_DRY_BREAKERS.iter().map(|s| s.to_string()).collect()
                                }
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
        let names = stages.iter().map(name_of).collect();
        Ok(Self {
            chain: LlamaSampler::chain(stages, true),
            names,
            cur: LlamaTokenDataArray::new(Vec::with_capacity(n_vocab), false),
            n_vocab,
        })
    }

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
        let tok = self.sample_no_accept(logits)?;
        self.accept(tok);
        Ok(tok)
    }

    /// Fill, apply and select, without accepting.
    pub fn sample_no_accept(&mut self, logits: &[f32]) -> Result<TokenId> {
        if logits.len() != self.n_vocab {
            return Err(gauge_sampling::SamplingError::RowLength {
                expected: self.n_vocab,
                got: logits.len(),
            }
            .into());
        }
        // NaN or +inf would make llama.cpp's sort comparators inconsistent (undefined behaviour
        // in std::sort), and an all -inf row makes dist select nothing: refuse as gauge does.
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
    let dry_on = uses(SamplerType::Dry)
        && p.dry_multiplier != 0.0
        && p.dry_base >= 1.0
        && p.dry_penalty_last_n != 0;
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
fn merged_biases(p: &SamplingParams, model: &Model) -> Result<Vec<LlamaLogitBias>> {
    let mut out = Vec::new();
    for b in &p.logit_bias {
        match &b.token {
            TokenRef::Id(id) => {
                model.check_token(*id)?;
                out.push(LlamaLogitBias::new(LlamaToken(*id), b.bias));
            }
            TokenRef::Text(text) => {
                for t in model.tokenize(text, false, false)? {
                    out.push(LlamaLogitBias::new(LlamaToken(t), b.bias));
                }
            }
        }
    }
    if p.ignore_eos {
        out.extend(
            model
                .eog_tokens()
                .iter()
                .map(|&t| LlamaLogitBias::new(LlamaToken(t), f32::NEG_INFINITY)),
        );
    }
    out.extend(
        model
            .suppress_tokens()
            .iter()
            .map(|&t| LlamaLogitBias::new(LlamaToken(t), f32::NEG_INFINITY)),
    );
    Ok(out)
}
