//! `SamplingParams`: one request's sampling settings, with llama-server's field names.
//!
//! A request is a JSON object with the fields llama-server reads (docs/SPEC.md §2), the OpenAI names it also
//! accepts, and a few gauge fields. Deserialisation starts from llama.cpp's defaults
//! (`common_params_sampling`), or from a [`Preset`] when the request names one, and then applies
//! every field that is present. A JSON `null` counts as absent. Fields of other engines that gauge
//! does not implement (HF's `no_repeat_ngram_size`, vLLM's `min_tokens`, ...) are refused unless
//! neutral, and unknown names are left to the caller to report ([`crate::fields`]). A field of the wrong JSON type is an error that names the field (llama-server logs a
//! warning and silently falls back to the default).
//!
//! Parsing only checks shapes; ranges are checked by [`SamplingParams::validate`], which knows
//! `n_vocab`. [`crate::Chain::from_params`] always validates first.
//!
//! # Aliases
//!
//! Every name present is type-checked; two names of one setting with different values are
//! [`SamplingError::ConflictingAliases`].
//!
//! | field | also accepted as | note |
//! |---|---|---|
//! | `temperature` | `temp` | HF `do_sample: false` sets it to 0 (greedy) |
//! | `typical_p` | `typ_p` | |
//! | `n_probs` | `logprobs` (an integer, or OpenAI's `true` = `top_logprobs`, default 20) | `n_probs` first; counts that differ conflict; `top_logprobs` needs `logprobs: true` (as llama-server) |
//! | `n_predict` | `max_tokens`, `max_completion_tokens`, `max_new_tokens` (HF) | |
//! | `repeat_penalty` | `repetition_penalty` (HF, vLLM) | under the HF/vLLM name the window defaults to the whole history (`repeat_last_n: -1`), their scope |
//! | `samplers` | an array of names, or a string of letters (`"edskypmxt"`) | – |
//! | `logit_bias` | `[[token, bias], ...]` or `{"token": bias}`; token = id or text; bias `false` = ban | – |
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
//!
//! # gauge fields
//!
//! * `repeat_penalty_mode`: `"ctrl"` (llama.cpp's sign branch on raw logits, default) or
//!   `"normalized"` (the penalty on log-softmax, shift-invariant).
//! * `penalize_prompt` (default `true`, as llama.cpp): prompt tokens count as seen.
//! * `penalty_once_per_token` (default `false`): the frequency penalty counts a token once.
//! * `penalty_exempt`: token ids, or strings (every token of their tokenization; needs a vocab),
//!   that the penalties never touch.
//! * `dry_sequence_breaker_ids`: DRY breakers as token ids `[[head, tail...], ...]`, for chains built
//!   without a vocabulary. When present it replaces llama.cpp's default string breakers; strings given
//!   explicitly in `dry_sequence_breakers` are added to it.
//! * `preset`: a [`Preset`] name; its settings are the base the other fields override.

use crate::candidates::TokenId;
use crate::error::{Result, SamplingError};
use crate::fields;
use crate::order::{self, SamplerType};
use crate::presets::Preset;
use crate::rng;
use crate::samplers::penalties::PenaltyMode;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

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

// ---------------------------------------------------------------------------------------------
// Parsing

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A type error for `field`: the value's JSON text and what was expected.
fn type_err(field: &str, v: &Value, expected: &str) -> SamplingError {
    SamplingError::param(
        field,
        format!("{} ({})", fields::short(v), kind(v)),
        expected,
    )
}

/// The first of `names` present with a non-null value.
fn lookup<'a>(
    obj: &'a Map<String, Value>,
    names: &[&'static str],
) -> Option<(&'static str, &'a Value)> {
    names
        .iter()
        .find_map(|&n| obj.get(n).filter(|v| !v.is_null()).map(|v| (n, v)))
}

/// One setting that has several names: every present name is converted (so each is type-checked
/// under its own name), and two present names with different values are an error naming both.
/// Returns the first present name in `names` order, with its value.
fn aliased<T: PartialEq + std::fmt::Debug>(
    obj: &Map<String, Value>,
    names: &[&'static str],
    conv: fn(&str, &Value) -> Result<T>,
) -> Result<Option<(&'static str, T)>> {
    let mut first: Option<(&'static str, T)> = None;
    for &n in names {
        let Some(v) = obj.get(n).filter(|v| !v.is_null()) else {
            continue;
        };
        let x = conv(n, v)?;
        match &first {
            None => first = Some((n, x)),
            Some((f, fx)) if *fx != x => {
                return Err(SamplingError::ConflictingAliases {
                    first: f.to_string(),
                    first_value: fields::short(&obj[*f]),
                    second: n.to_string(),
                    second_value: fields::short(v),
                })
            }
            Some(_) => {}
        }
    }
    Ok(first)
}

fn as_f32(field: &str, v: &Value) -> Result<f32> {
    v.as_f64()
        .map(|x| x as f32)
        .ok_or_else(|| type_err(field, v, "a number"))
}

/// An integer; an integral float such as `40.0` is accepted, as nlohmann's `get<int>` does.
fn as_i64(field: &str, v: &Value) -> Result<i64> {
    if let Some(i) = v.as_i64() {
        return Ok(i);
    }
    if let Some(u) = v.as_u64() {
        return i64::try_from(u).map_err(|_| SamplingError::param(field, u, "a 32-bit integer"));
    }
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(x as i64),
        _ => Err(type_err(field, v, "an integer")),
    }
}

fn as_i32(field: &str, v: &Value) -> Result<i32> {
    let i = as_i64(field, v)?;
    i32::try_from(i).map_err(|_| SamplingError::param(field, i, "a 32-bit integer"))
}

fn as_bool(field: &str, v: &Value) -> Result<bool> {
    v.as_bool()
        .ok_or_else(|| type_err(field, v, "true or false"))
}

fn as_token_id(field: &str, v: &Value) -> Result<TokenId> {
    let i = as_i64(field, v)?;
    // Range against n_vocab is checked by `validate`; here only the integer type.
    i32::try_from(i).map_err(|_| SamplingError::param(field, i, "a token id (a 32-bit integer)"))
}

fn as_token_ref(field: &str, v: &Value) -> Result<TokenRef> {
    match v {
        Value::String(s) => Ok(TokenRef::Text(s.clone())),
        Value::Number(_) => Ok(TokenRef::Id(as_token_id(field, v)?)),
        _ => Err(type_err(field, v, "a token id or a string")),
    }
}

/// A bias: a number, or `false` for a ban (`-inf`).
fn as_bias(v: &Value) -> Result<f32> {
    match v {
        Value::Bool(false) => Ok(f32::NEG_INFINITY),
        Value::Number(_) => as_f32("logit_bias", v),
        _ => Err(type_err(
            "logit_bias",
            v,
            "a number, or false to ban the token",
        )),
    }
}

/// llama-server's object-key rule: a key that parses completely as a base-10 integer (`strtol`,
/// which allows leading white space and a sign) is a token id, anything else is text.
fn key_as_token(key: &str) -> Result<TokenRef> {
    let t = key.trim_start();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let i: i64 = t.parse().unwrap_or(i64::MAX);
        return i32::try_from(i)
            .map(TokenRef::Id)
            .map_err(|_| SamplingError::param("logit_bias", key, "a token id (a 32-bit integer)"));
    }
    if key.is_empty() {
        return Err(SamplingError::param(
            "logit_bias",
            "\"\"",
            "a token id or a non-empty string (the empty string names no token)",
        ));
    }
    Ok(TokenRef::Text(key.to_string()))
}

fn parse_logit_bias(v: &Value) -> Result<Vec<LogitBias>> {
    let mut out = Vec::new();
    match v {
        Value::Array(items) => {
            for item in items {
                match item.as_array().map(|a| a.as_slice()) {
                    Some([Value::String(t), _]) if t.is_empty() => {
                        return Err(SamplingError::param(
                            "logit_bias",
                            "\"\"",
                            "a token id or a non-empty string (the empty string names no token)",
                        ))
                    }
                    Some([tok, bias]) => out.push(LogitBias {
                        token: as_token_ref("logit_bias", tok)?,
                        bias: as_bias(bias)?,
                    }),
                    _ => return Err(type_err("logit_bias", item, "a [token, bias] pair")),
                }
            }
        }
        Value::Object(map) => {
            for (k, b) in map {
                out.push(LogitBias {
                    token: key_as_token(k)?,
                    bias: as_bias(b)?,
                });
            }
        }
        _ => {
            return Err(type_err(
                "logit_bias",
                v,
                "an array of [token, bias] pairs or an object {token: bias}",
            ))
        }
    }
    Ok(out)
}

fn parse_samplers(v: &Value) -> Result<Vec<SamplerType>> {
    match v {
        Value::String(letters) => order::parse_letters(letters),
        Value::Array(items) => items
            .iter()
            .map(|x| match x {
                Value::String(s) => SamplerType::from_name(s),
                _ => Err(type_err("samplers", x, "a sampler name")),
            })
            .collect(),
        _ => Err(type_err(
            "samplers",
            v,
            "an array of names or a string of letters",
        )),
    }
}

fn parse_strings(field: &str, v: &Value) -> Result<Vec<String>> {
    let items = v
        .as_array()
        .ok_or_else(|| type_err(field, v, "an array of strings"))?;
    items
        .iter()
        .map(|x| {
            x.as_str()
                .map(str::to_string)
                .ok_or_else(|| type_err(field, x, "a string"))
        })
        .collect()
}

fn parse_breaker_ids(v: &Value) -> Result<Vec<Vec<TokenId>>> {
    const F: &str = "dry_sequence_breaker_ids";
    let items = v
        .as_array()
        .ok_or_else(|| type_err(F, v, "an array of token-id arrays [[head, tail...], ...]"))?;
    items
        .iter()
        .map(|seq| {
            let ids = seq
                .as_array()
                .ok_or_else(|| type_err(F, seq, "an array of token ids [head, tail...]"))?;
            ids.iter().map(|t| as_token_id(F, t)).collect()
        })
        .collect()
}

/// A count of alternatives per token under `field`: an integer `>= 0`, named as sent.
fn as_count(field: &str, v: &Value) -> Result<i32> {
    let n = as_i64(field, v).map_err(|_| type_err(field, v, "an integer >= 0"))?;
    if n < 0 {
        return Err(SamplingError::param(field, n, ">= 0"));
    }
    i32::try_from(n).map_err(|_| SamplingError::param(field, n, "an integer in 0..=2147483647"))
}

/// Alternatives per token, from llama-server's `n_probs`, OpenAI legacy completions' `logprobs`
/// (a count) or OpenAI chat's `logprobs: true` with `top_logprobs` (default 20). Every name
/// present is type-checked under its own name, two counts that differ are a conflict, and
/// `top_logprobs` without `logprobs: true` is refused as llama-server refuses it ("top_logprobs
/// requires logprobs to be set to true") instead of being dropped. `None`: none of them is sent.
fn parse_n_probs(obj: &Map<String, Value>) -> Result<Option<i32>> {
    let n_probs = match lookup(obj, &["n_probs"]) {
        Some((f, v)) => Some((f, v, as_count(f, v)?)),
        None => None,
    };
    // `None`: absent; `Some(None)`: a boolean; `Some(Some(n))`: a count.
    let logprobs = match lookup(obj, &["logprobs"]) {
        None => None,
        Some((_, Value::Bool(b))) => Some((Value::Bool(*b), None)),
        Some((f, v @ Value::Number(_))) => Some((v.clone(), Some(as_count(f, v)?))),
        Some((f, v)) => return Err(type_err(f, v, "true, false or an integer >= 0")),
    };
    let top = match lookup(obj, &["top_logprobs"]) {
        Some((f, v)) => Some((f, v, as_count(f, v)?)),
        None => None,
    };
    let conflict = |a: &str, av: &Value, b: &str, bv: &Value| SamplingError::ConflictingAliases {
        first: a.into(),
        first_value: fields::short(av),
        second: b.into(),
        second_value: fields::short(bv),
    };
    if let Some((tf, tv, t)) = top {
        match &logprobs {
            Some((_, Some(l))) if *l != t => {
                return Err(conflict("logprobs", &obj["logprobs"], tf, tv))
            }
            Some((_, Some(_))) | Some((Value::Bool(true), None)) => {}
            _ => {
                return Err(SamplingError::param(
                    tf,
                    fields::short(tv),
                    "only with `logprobs: true` (top_logprobs requires logprobs to be set to \
                     true; or send `n_probs`)",
                ))
            }
        }
        if let Some((nf, nv, n)) = n_probs {
            if n != t {
                return Err(conflict(nf, nv, tf, tv));
            }
        }
    }
    if let (Some((nf, nv, n)), Some((_, Some(l)))) = (n_probs, &logprobs) {
        if n != *l {
            return Err(conflict(nf, nv, "logprobs", &obj["logprobs"]));
        }
    }
    Ok(match (n_probs, logprobs) {
        (Some((_, _, n)), _) => Some(n),
        (None, Some((_, Some(l)))) => Some(l),
        // OpenAI chat: `logprobs: true` asks for `top_logprobs` alternatives (llama-server: 20).
        (None, Some((Value::Bool(true), None))) => Some(top.map_or(20, |t| t.2)),
        (None, Some(_)) => Some(0),
        (None, None) => None,
    })
}

impl SamplingParams {
    /// Parse a request object (see the module docs for names, aliases and `null`).
    pub fn from_value(v: &Value) -> Result<SamplingParams> {
        let obj = v.as_object().ok_or_else(|| {
            SamplingError::Json(format!(
                "expected a JSON object of sampling fields, got {}",
                kind(v)
            ))
        })?;
        fields::check_refused(obj)?;
        let mut p = match lookup(obj, &["preset"]) {
            Some((_, Value::String(name))) => name.parse::<Preset>()?.params(),
            Some((f, other)) => return Err(type_err(f, other, "a preset name")),
            None => SamplingParams::default(),
        };

        macro_rules! set {
            ($field:ident, $conv:ident, [$($name:literal),+]) => {
                if let Some((_, x)) = aliased(obj, &[$($name),+], $conv)? {
                    p.$field = x;
                }
            };
        }
        set!(temperature, as_f32, ["temperature", "temp"]);
        set!(dynatemp_range, as_f32, ["dynatemp_range"]);
        set!(dynatemp_exponent, as_f32, ["dynatemp_exponent"]);
        set!(top_k, as_i32, ["top_k"]);
        set!(top_p, as_f32, ["top_p"]);
        set!(min_p, as_f32, ["min_p"]);
        set!(typical_p, as_f32, ["typical_p", "typ_p"]);
        set!(xtc_probability, as_f32, ["xtc_probability"]);
        set!(xtc_threshold, as_f32, ["xtc_threshold"]);
        set!(top_n_sigma, as_f32, ["top_n_sigma"]);
        set!(min_keep, as_i32, ["min_keep"]);
        set!(repeat_last_n, as_i32, ["repeat_last_n"]);
        if let Some((f, x)) = aliased(obj, &["repeat_penalty", "repetition_penalty"], as_f32)? {
            p.repeat_penalty = x;
            // HF's and vLLM's `repetition_penalty` is the same operator (their `< 0` and llama.cpp's
            // `<= 0` agree at 0) over the whole context: keep that scope unless a window is given.
            if f == "repetition_penalty" && lookup(obj, &["repeat_last_n"]).is_none() {
                p.repeat_last_n = -1;
            }
        }
        set!(frequency_penalty, as_f32, ["frequency_penalty"]);
        set!(presence_penalty, as_f32, ["presence_penalty"]);
        set!(penalize_prompt, as_bool, ["penalize_prompt"]);
        set!(penalty_once_per_token, as_bool, ["penalty_once_per_token"]);
        set!(dry_multiplier, as_f32, ["dry_multiplier"]);
        set!(dry_base, as_f32, ["dry_base"]);
        set!(dry_allowed_length, as_i32, ["dry_allowed_length"]);
        set!(dry_penalty_last_n, as_i32, ["dry_penalty_last_n"]);
        set!(mirostat, as_i32, ["mirostat"]);
        set!(mirostat_tau, as_f32, ["mirostat_tau"]);
        set!(mirostat_eta, as_f32, ["mirostat_eta"]);
        set!(adaptive_target, as_f32, ["adaptive_target"]);
        set!(adaptive_decay, as_f32, ["adaptive_decay"]);
        set!(ignore_eos, as_bool, ["ignore_eos"]);
        set!(
            n_predict,
            as_i32,
            [
                "n_predict",
                "max_tokens",
                "max_completion_tokens",
                "max_new_tokens"
            ]
        );
        // HF `generate`: `do_sample: false` is greedy, whatever the temperature would be.
        if let Some((f, v)) = lookup(obj, &["do_sample"]) {
            if !as_bool(f, v)? {
                if let Some((t, tv)) = lookup(obj, &["temperature", "temp"]) {
                    if as_f32(t, tv)? > 0.0 {
                        return Err(SamplingError::ConflictingAliases {
                            first: "do_sample".into(),
                            first_value: "false".into(),
                            second: t.into(),
                            second_value: fields::short(tv),
                        });
                    }
                }
                p.temperature = 0.0;
            }
        }

        if let Some((f, v)) = lookup(obj, &["repeat_penalty_mode"]) {
            p.repeat_penalty_mode = match v.as_str() {
                Some("ctrl") => PenaltyMode::Ctrl,
                Some("normalized") => PenaltyMode::Normalized,
                _ => return Err(type_err(f, v, "\"ctrl\" or \"normalized\"")),
            };
        }
        if let Some((f, v)) = lookup(obj, &["penalty_exempt"]) {
            let items = v
                .as_array()
                .ok_or_else(|| type_err(f, v, "an array of token ids or strings"))?;
            p.penalty_exempt = items
                .iter()
                .map(|x| as_token_ref(f, x))
                .collect::<Result<_>>()?;
        }
        if let Some((f, v)) = lookup(obj, &["dry_sequence_breakers"]) {
            p.dry_sequence_breakers = Some(parse_strings(f, v)?);
        }
        if let Some((_, v)) = lookup(obj, &["dry_sequence_breaker_ids"]) {
            p.dry_sequence_breaker_ids = Some(parse_breaker_ids(v)?);
        }
        if let Some((f, v)) = lookup(obj, &["seed"]) {
            let s = as_i64(f, v)?;
            p.seed = match s {
                -1 => rng::DEFAULT_SEED,
                0..=0xFFFF_FFFF => s as u32,
                _ => return Err(SamplingError::param(f, s, "0..=4294967294 for a fixed seed, or -1 / 4294967295 (LLAMA_DEFAULT_SEED) for a random one")),
            };
        }
        if let Some((_, v)) = lookup(obj, &["samplers"]) {
            p.samplers = parse_samplers(v)?;
        }
        if let Some((_, v)) = lookup(obj, &["logit_bias"]) {
            p.logit_bias = parse_logit_bias(v)?;
        }
        if let Some(n) = parse_n_probs(obj)? {
            p.n_probs = n;
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
