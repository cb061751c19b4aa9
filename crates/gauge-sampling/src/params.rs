//! `SamplingParams`: one request's sampling settings, with llama-server's field names.
//!
//! A request is a JSON object with the fields llama-server reads (docs/SPEC.md §2), the OpenAI names it also
//! accepts, and a few gauge fields. Deserialisation starts from llama.cpp's defaults
//! (`common_params_sampling`), or from a [`Preset`] when the request names one, and then applies
//! every field that is present. A JSON `null` counts as absent. Fields of other engines that gauge
//! does not implement (HF's `no_repeat_ngram_size`, vLLM's `min_tokens`, ...) are refused unless
//! neutral, and unknown names are left to the caller to report ([`crate::fields`]). A field of the
//! wrong JSON type is an error that names the field (llama-server logs a warning and silently
//! falls back to the default).
//!
//! Parsing only checks shapes; ranges are checked by [`SamplingParams::validate`], which knows
//! `n_vocab`. [`crate::Chain::from_params`] always validates first.
//!
//! # Names
//!
//! The fields, their aliases, what each takes and does are the rows of [`fields::SAMPLING`]
//! (docs/server.md prints them). Every name present is type-checked; two names of one setting
//! with different values are [`SamplingError::ConflictingAliases`].
//!
//! # Ranges: where gauge differs from llama.cpp
//!
//! llama-server silently clamps some fields (`set_limits`) and rejects others (`set_hard_limits`);
//! libllama clamps a few more. gauge rejects every value whose meaning would otherwise be changed
//! behind the user's back. Every error is [`SamplingError::Param`] naming the field and the allowed
//! range (token ids: [`SamplingError::TokenOutOfRange`]).
//!
//! | field | llama.cpp | gauge |
//! |---|---|---|
//! | `temperature` | clamped to `>= 0`; `<= 0` = argmax | finite, `>= 0` (error below); `0` = argmax |
//! | `top_k` | clamped to `>= 0`; `<= 0` = off | any value; `<= 0` = off (same effect as the clamp) |
//! | `top_p`, `min_p` | clamped to `[0, 1]` | `[0, 1]` |
//! | `typical_p` | no limit; `>= 1` = off | `[0, 1]` |
//! | `xtc_probability`, `xtc_threshold` | clamped to `[0, 1]` | `[0, 1]` (threshold `> 0.5` = off, as llama.cpp) |
//! | `min_keep` | hard `[0, 2^31)` | same |
//! | `repeat_last_n` | hard `>= 0`; libllama clamps `-1` to `0` = **silently off** | `>= -1`; **`-1` = the whole history** |
//! | `repeat_penalty` | finite, `> 0`, finite inverse (error) | same |
//! | `frequency_penalty`, `presence_penalty` | finite (CLI) | finite |
//! | `dry_multiplier` | no limit; `0` = off | finite, `>= 0` (a negative one would reward repetition) |
//! | `dry_base` | `< 1` silently replaced by the default | finite, `>= 1` |
//! | `dry_allowed_length` | hard `>= 0` | same |
//! | `dry_penalty_last_n` | hard `>= 0`; libllama clamps `-1` to `0` = off | `>= -1`; **`-1` = the whole history** |
//! | `dry_sequence_breakers` | non-empty array; empty strings skipped with a warning | array of non-empty strings; `[]` = none (the CLI's `none`) |
//! | `top_n_sigma` | no limit; `<= 0` = off | finite; `<= 0` = off |
//! | `mirostat` | clamped to `[0, 2]` | `0`, `1` or `2` |
//! | `mirostat_tau`, `mirostat_eta` | no limit | finite, `>= 0` |
//! | `dynatemp_range` | no limit; `<= 0` = off | finite; `<= 0` = off |
//! | `dynatemp_exponent` | no limit | finite |
//! | `adaptive_target` | clamped to `<= 1`; `< 0` = off | finite, `<= 1`; `< 0` = off |
//! | `adaptive_decay` | hard `[0, 0.99]` | same |
//! | `seed` | `-1` = random | `0..=4294967294` fixed; `-1` or `4294967295` (`LLAMA_DEFAULT_SEED`, `0xFFFFFFFF`) = random, as llama.cpp |
//! | `logit_bias` | ids outside the vocab and malformed entries skipped | error; bias finite or `-inf` (`false`) |
//! | `samplers` | unknown names/letters dropped | error; `infill` is unsupported |
//! | `n_probs` / `n_predict` | – | `>= 0` / `>= -1` (`-1` = no limit) |
//! | `penalty_exempt` (gauge) | – | ids in `0..n_vocab` |

use crate::candidates::TokenId;
use crate::error::{Result, SamplingError};
use crate::fields;
use crate::order::{self, SamplerType};
use crate::presets::Preset;
use crate::rng;
use crate::samplers::penalties::PenaltyMode;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub(crate) mod read;

/// llama.cpp's default DRY sequence breakers (common.h).
pub const DEFAULT_DRY_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];

/// A token given either by id or by text (text needs a vocabulary to resolve).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum TokenRef {
    /// A token id.
    Id(TokenId),
    /// Tokenized without special tokens; every resulting token is meant.
    Text(String),
}

/// One logit-bias entry. `bias = -inf` bans the token (JSON `false`).
#[derive(Clone, Debug, PartialEq)]
pub struct LogitBias {
    /// The token (an id, or text that needs a vocabulary).
    pub token: TokenRef,
    /// Added to the logit (`-inf` bans the token).
    pub bias: f32,
}

impl Serialize for LogitBias {
    /// As llama-server's pair form `[token, bias]`, with `false` for `-inf` (JSON has no infinity).
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&self.token)?;
        if self.bias == f32::NEG_INFINITY {
            t.serialize_element(&false)?;
        } else {
            t.serialize_element(&self.bias)?;
        }
        t.end()
    }
}

/// The sampling settings of one request. Defaults are llama.cpp's (`common_params_sampling`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SamplingParams {
    /// Temperature (`temp`); `<= 0` keeps only the argmax, `1` (with no dynatemp) is a no-op.
    pub temperature: f32,
    /// Dynamic temperature range; `> 0` makes the temperature depend on the entropy.
    pub dynatemp_range: f32,
    /// Dynamic temperature exponent.
    pub dynatemp_exponent: f32,
    /// `<= 0` = off.
    pub top_k: i32,
    /// `>= 1` = off.
    pub top_p: f32,
    /// `<= 0` = off.
    pub min_p: f32,
    /// Locally typical sampling; `>= 1` = off.
    pub typical_p: f32,
    /// `<= 0` = off.
    pub xtc_probability: f32,
    /// `> 0.5` = off.
    pub xtc_threshold: f32,
    /// `<= 0` = off.
    pub top_n_sigma: f32,
    /// Minimum candidates kept by top-p, min-p, typical and XTC.
    pub min_keep: i32,
    /// Penalty window: `0` = off, `-1` = the whole history (gauge; llama.cpp turns `-1` off).
    pub repeat_last_n: i32,
    /// `1` = off.
    pub repeat_penalty: f32,
    /// Frequency penalty: subtracted once per occurrence in the window (`0` = off).
    pub frequency_penalty: f32,
    /// Presence penalty: subtracted once for any occurrence in the window (`0` = off).
    pub presence_penalty: f32,
    /// gauge: how the repeat penalty is applied.
    pub repeat_penalty_mode: PenaltyMode,
    /// gauge: whether prompt tokens count as seen (llama.cpp: yes).
    pub penalize_prompt: bool,
    /// gauge: count each token at most once for the frequency penalty.
    pub penalty_once_per_token: bool,
    /// gauge: tokens the penalties never touch.
    pub penalty_exempt: Vec<TokenRef>,
    /// `0` = off.
    pub dry_multiplier: f32,
    /// DRY base of the exponential penalty.
    pub dry_base: f32,
    /// DRY: repeats up to this length are not penalized.
    pub dry_allowed_length: i32,
    /// DRY window: `0` = off, `-1` = the whole history (gauge; llama.cpp turns `-1` off).
    pub dry_penalty_last_n: i32,
    /// String breakers; `None` = llama.cpp's defaults (unless `dry_sequence_breaker_ids` is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_sequence_breakers: Option<Vec<String>>,
    /// gauge: breakers as token ids `[head, tail...]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_sequence_breaker_ids: Option<Vec<Vec<TokenId>>>,
    /// `0` = off, `1` = mirostat, `2` = mirostat v2 (both replace the whole chain but logit-bias).
    pub mirostat: i32,
    /// Mirostat target surprise (tau).
    pub mirostat_tau: f32,
    /// Mirostat learning rate (eta).
    pub mirostat_eta: f32,
    /// `< 0` = off.
    pub adaptive_target: f32,
    /// Adaptive-p decay of its running average.
    pub adaptive_decay: f32,
    /// `0xFFFFFFFF` (request `-1`) = a random seed.
    pub seed: u32,
    /// The chain's slots, in order.
    pub samplers: Vec<SamplerType>,
    /// Per-token logit bias (`false` / `-inf` bans).
    pub logit_bias: Vec<LogitBias>,
    /// Ban every end-of-generation token (needs a vocab).
    pub ignore_eos: bool,
    /// Output only: how many top probabilities to report.
    pub n_probs: i32,
    /// Output only: maximum tokens to generate, `-1` = no limit.
    pub n_predict: i32,
    /// The preset the request started from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.80,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.10,
            top_n_sigma: -1.0,
            min_keep: 0,
            repeat_last_n: 64,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repeat_penalty_mode: PenaltyMode::Ctrl,
            penalize_prompt: true,
            penalty_once_per_token: false,
            penalty_exempt: Vec::new(),
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: None,
            dry_sequence_breaker_ids: None,
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.10,
            adaptive_target: -1.0,
            adaptive_decay: 0.90,
            seed: rng::DEFAULT_SEED,
            samplers: order::DEFAULT_ORDER.to_vec(),
            logit_bias: Vec::new(),
            ignore_eos: false,
            n_probs: 0,
            n_predict: -1,
            preset: None,
        }
    }
}

impl SamplingParams {
    /// Parse a request object: each field of [`fields::SAMPLING`] read in the table's order (see
    /// the module docs for aliases and `null`).
    pub fn from_value(v: &Value) -> Result<SamplingParams> {
        let obj = v.as_object().ok_or_else(|| {
            SamplingError::Json(format!(
                "expected a JSON object of sampling fields, got {}",
                read::kind(v)
            ))
        })?;
        fields::check_refused(obj)?;
        let mut p = SamplingParams::default();
        for f in fields::SAMPLING {
            if let fields::Read::Own(read) = f.read {
                read(&mut p, obj, f)?;
            }
        }
        Ok(p)
    }

    /// Parse a request from JSON text. Malformed JSON is [`SamplingError::Json`].
    pub fn from_json(text: &str) -> Result<SamplingParams> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| SamplingError::Json(e.to_string()))?;
        SamplingParams::from_value(&v)
    }

    /// The request as a JSON object with canonical names (parses back to the same params).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("SamplingParams serialises to JSON")
    }

    /// The seed the samplers will use: `seed` itself, or a fresh random one for `0xFFFFFFFF`.
    /// Each sampler resolves its own seed, so with a random seed this is only indicative.
    pub fn resolved_seed(&self) -> u32 {
        rng::resolve_seed(self.seed)
    }

    /// Whether the chain's terminal is mirostat (which drops every slot but logit-bias).
    pub fn uses_mirostat(&self) -> bool {
        self.mirostat != 0
    }

    // -----------------------------------------------------------------------------------------
    // Validation

    /// Check every field's range (see the table in the module docs).
    pub fn validate(&self, n_vocab: usize) -> Result<()> {
        fn finite(field: &str, x: f32) -> Result<()> {
            if x.is_finite() {
                Ok(())
            } else {
                Err(SamplingError::param(field, x, "a finite number"))
            }
        }
        fn range(field: &str, x: f32, lo: f32, hi: f32, allowed: &str) -> Result<()> {
            if x.is_finite() && x >= lo && x <= hi {
                Ok(())
            } else {
                Err(SamplingError::param(field, x, allowed))
            }
        }
        fn at_least(field: &str, x: f32, lo: f32) -> Result<()> {
            range(field, x, lo, f32::MAX, &format!("a finite number >= {lo}"))
        }
        fn token(field: &str, id: TokenId, n_vocab: usize) -> Result<()> {
            if id >= 0 && (id as usize) < n_vocab {
                Ok(())
            } else {
                Err(SamplingError::TokenOutOfRange {
                    field: field.to_string(),
                    token: id as i64,
                    n_vocab,
                })
            }
        }

        at_least("temperature", self.temperature, 0.0)?;
        finite("dynatemp_range", self.dynatemp_range)?;
        finite("dynatemp_exponent", self.dynatemp_exponent)?;
        range("top_p", self.top_p, 0.0, 1.0, "[0, 1] (1 = off)")?;
        range("min_p", self.min_p, 0.0, 1.0, "[0, 1] (0 = off)")?;
        range("typical_p", self.typical_p, 0.0, 1.0, "[0, 1] (1 = off)")?;
        range(
            "xtc_probability",
            self.xtc_probability,
            0.0,
            1.0,
            "[0, 1] (0 = off)",
        )?;
        range(
            "xtc_threshold",
            self.xtc_threshold,
            0.0,
            1.0,
            "[0, 1] (> 0.5 = off)",
        )?;
        finite("top_n_sigma", self.top_n_sigma)?;
        if self.min_keep < 0 {
            return Err(SamplingError::param("min_keep", self.min_keep, ">= 0"));
        }
        if self.repeat_last_n < -1 {
            return Err(SamplingError::param(
                "repeat_last_n",
                self.repeat_last_n,
                ">= -1 (0 = off, -1 = whole history)",
            ));
        }
        // common_sampler_init's own check: the penalty and its inverse must both be finite.
        if !(self.repeat_penalty.is_finite()
            && self.repeat_penalty > 0.0
            && (1.0 / self.repeat_penalty).is_finite())
        {
            return Err(SamplingError::param(
                "repeat_penalty",
                self.repeat_penalty,
                "a finite number > 0 with a finite inverse (1 = off)",
            ));
        }
        finite("frequency_penalty", self.frequency_penalty)?;
        finite("presence_penalty", self.presence_penalty)?;
        at_least("dry_multiplier", self.dry_multiplier, 0.0)?;
        // llama.cpp silently ignores a base below 1 (the server substitutes its default, libllama
        // turns DRY off); an explicit error is clearer than either.
        at_least("dry_base", self.dry_base, 1.0)?;
        if self.dry_allowed_length < 0 {
            return Err(SamplingError::param(
                "dry_allowed_length",
                self.dry_allowed_length,
                ">= 0",
            ));
        }
        if self.dry_penalty_last_n < -1 {
            return Err(SamplingError::param(
                "dry_penalty_last_n",
                self.dry_penalty_last_n,
                ">= -1 (0 = off, -1 = whole history)",
            ));
        }
        if let Some(bs) = &self.dry_sequence_breakers {
            if let Some(b) = bs.iter().find(|b| b.is_empty()) {
                return Err(SamplingError::param(
                    "dry_sequence_breakers",
                    format!("{b:?}"),
                    "non-empty strings",
                ));
            }
        }
        if let Some(ids) = &self.dry_sequence_breaker_ids {
            for seq in ids {
                if seq.is_empty() {
                    return Err(SamplingError::param(
                        "dry_sequence_breaker_ids",
                        "[]",
                        "non-empty [head, tail...] arrays",
                    ));
                }
                for &t in seq {
                    token("dry_sequence_breaker_ids", t, n_vocab)?;
                }
            }
        }
        if !(0..=2).contains(&self.mirostat) {
            return Err(SamplingError::param(
                "mirostat",
                self.mirostat,
                "0 (off), 1 or 2",
            ));
        }
        at_least("mirostat_tau", self.mirostat_tau, 0.0)?;
        at_least("mirostat_eta", self.mirostat_eta, 0.0)?;
        range(
            "adaptive_target",
            self.adaptive_target,
            f32::MIN,
            1.0,
            "a finite number <= 1 (< 0 = off)",
        )?;
        range(
            "adaptive_decay",
            self.adaptive_decay,
            0.0,
            0.99,
            "[0, 0.99]",
        )?;
        for lb in &self.logit_bias {
            if let TokenRef::Id(id) = lb.token {
                token("logit_bias", id, n_vocab)?;
            }
            if !(lb.bias.is_finite() || lb.bias == f32::NEG_INFINITY) {
                return Err(SamplingError::param(
                    "logit_bias",
                    lb.bias,
                    "a finite bias, or -inf (false) to ban",
                ));
            }
        }
        for t in &self.penalty_exempt {
            if let TokenRef::Id(id) = *t {
                token("penalty_exempt", id, n_vocab)?;
            }
        }
        if self.samplers.contains(&SamplerType::Infill) {
            return Err(SamplingError::param(
                "samplers",
                "\"infill\"",
                "the other sampler names (gauge has no infill stage; remove it from `samplers`)",
            ));
        }
        if self.n_probs < 0 {
            return Err(SamplingError::param("n_probs", self.n_probs, ">= 0"));
        }
        if self.n_predict < -1 {
            return Err(SamplingError::param(
                "n_predict",
                self.n_predict,
                ">= -1 (-1 = no limit)",
            ));
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Print

    /// llama.cpp's `common_params_sampling::print()`: four tab-indented lines, floats as `%.3f`.
    pub fn print_params(&self) -> String {
        // Rust's `{:.3}` rounds the exact binary value half-to-even, as glibc's printf does.
        let f = |x: f32| format!("{:.3}", x as f64);
        format!(
            "\trepeat_last_n = {}, repeat_penalty = {}, frequency_penalty = {}, presence_penalty = {}\n\
             \tdry_multiplier = {}, dry_base = {}, dry_allowed_length = {}, dry_penalty_last_n = {}\n\
             \ttop_k = {}, top_p = {}, min_p = {}, xtc_probability = {}, xtc_threshold = {}, typical_p = {}, top_n_sigma = {}, temp = {}\n\
             \tmirostat = {}, mirostat_lr = {}, mirostat_ent = {}, adaptive_target = {}, adaptive_decay = {}",
            self.repeat_last_n,
            f(self.repeat_penalty),
            f(self.frequency_penalty),
            f(self.presence_penalty),
            f(self.dry_multiplier),
            f(self.dry_base),
            self.dry_allowed_length,
            self.dry_penalty_last_n,
            self.top_k,
            f(self.top_p),
            f(self.min_p),
            f(self.xtc_probability),
            f(self.xtc_threshold),
            f(self.typical_p),
            f(self.top_n_sigma),
            f(self.temperature),
            self.mirostat,
            f(self.mirostat_eta),
            f(self.mirostat_tau),
            f(self.adaptive_target),
            f(self.adaptive_decay),
        )
    }
}

impl<'de> Deserialize<'de> for SamplingParams {
    /// Through a `serde_json::Value`, so `null`, aliases and the two-shaped fields are handled in one
    /// place ([`SamplingParams::from_value`]).
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        SamplingParams::from_value(&v).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for SamplingParams {
    type Err = SamplingError;
    fn from_str(s: &str) -> Result<Self> {
        SamplingParams::from_json(s)
    }
}
