//! Readers of request values: JSON → the typed setting, or an error naming the field as sent and
//! saying what it takes. The table of fields ([`crate::fields::SAMPLING`]) says which reader each
//! field uses; the texts of simple types are the table's ([`crate::fields::NUMBER`], ...), so an
//! error and the docs say the same.

use super::{LogitBias, TokenRef};
use crate::candidates::TokenId;
use crate::error::{Result, SamplingError};
use crate::fields::{self, Takes, BOOL, COUNT, INTEGER, LOGPROBS, NUMBER};
use crate::order::{self, SamplerType};
use serde_json::{Map, Value};

pub(crate) fn kind(v: &Value) -> &'static str {
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
pub(crate) fn type_err(field: &str, v: &Value, expected: &str) -> SamplingError {
    SamplingError::param(
        field,
        format!("{} ({})", fields::short(v), kind(v)),
        expected,
    )
}

/// The first of `names` present with a non-null value.
pub(crate) fn lookup<'a>(
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
pub(crate) fn aliased<T: PartialEq + std::fmt::Debug>(
    obj: &Map<String, Value>,
    names: impl IntoIterator<Item = &'static str>,
    conv: fn(&str, &Value) -> Result<T>,
) -> Result<Option<(&'static str, T)>> {
    let mut first: Option<(&'static str, T)> = None;
    for n in names {
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

pub(crate) fn as_f32(field: &str, v: &Value) -> Result<f32> {
    v.as_f64()
        .map(|x| x as f32)
        .ok_or_else(|| type_err(field, v, NUMBER.text))
}

/// An integer; an integral float such as `40.0` is accepted, as nlohmann's `get<int>` does.
pub(crate) fn as_i64(field: &str, v: &Value) -> Result<i64> {
    if let Some(i) = v.as_i64() {
        return Ok(i);
    }
    if let Some(u) = v.as_u64() {
        return i64::try_from(u).map_err(|_| SamplingError::param(field, u, "a 32-bit integer"));
    }
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(x as i64),
        _ => Err(type_err(field, v, INTEGER.text)),
    }
}

pub(crate) fn as_i32(field: &str, v: &Value) -> Result<i32> {
    let i = as_i64(field, v)?;
    i32::try_from(i).map_err(|_| SamplingError::param(field, i, "a 32-bit integer"))
}

pub(crate) fn as_bool(field: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| type_err(field, v, BOOL.text))
}

pub(crate) fn as_token_id(field: &str, v: &Value) -> Result<TokenId> {
    let i = as_i64(field, v)?;
    // Range against n_vocab is checked by `validate`; here only the integer type.
    i32::try_from(i).map_err(|_| SamplingError::param(field, i, "a token id (a 32-bit integer)"))
}

pub(crate) fn as_token_ref(field: &str, v: &Value) -> Result<TokenRef> {
    match v {
        Value::String(s) => Ok(TokenRef::Text(s.clone())),
        Value::Number(_) => Ok(TokenRef::Id(as_token_id(field, v)?)),
        _ => Err(type_err(field, v, "a token id or a string")),
    }
}

/// A bias: a number, or `false` for a ban (`-inf`).
pub(crate) fn as_bias(v: &Value) -> Result<f32> {
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
pub(crate) fn key_as_token(key: &str) -> Result<TokenRef> {
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

pub(crate) fn parse_logit_bias(v: &Value) -> Result<Vec<LogitBias>> {
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

pub(crate) fn parse_samplers(v: &Value) -> Result<Vec<SamplerType>> {
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

pub(crate) fn parse_strings(field: &str, v: &Value) -> Result<Vec<String>> {
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

pub(crate) fn parse_breaker_ids(v: &Value) -> Result<Vec<Vec<TokenId>>> {
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

/// A count of alternatives per token under `field`: an integer `>= 0`, named as sent; a value of
/// another type is an error saying `takes`.
fn as_count(field: &str, v: &Value, takes: &Takes) -> Result<i32> {
    let n = as_i64(field, v).map_err(|_| type_err(field, v, takes.text))?;
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
pub(crate) fn parse_n_probs(obj: &Map<String, Value>) -> Result<Option<i32>> {
    let n_probs = match lookup(obj, &["n_probs"]) {
        Some((f, v)) => Some((f, v, as_count(f, v, &COUNT)?)),
        None => None,
    };
    // `None`: absent; `Some(None)`: a boolean; `Some(Some(n))`: a count.
    let logprobs = match lookup(obj, &["logprobs"]) {
        None => None,
        Some((_, Value::Bool(b))) => Some((Value::Bool(*b), None)),
        Some((f, v @ Value::Number(_))) => Some((v.clone(), Some(as_count(f, v, &LOGPROBS)?))),
        Some((f, v)) => return Err(type_err(f, v, LOGPROBS.text)),
    };
    let top = match lookup(obj, &["top_logprobs"]) {
        Some((f, v)) => Some((f, v, as_count(f, v, &COUNT)?)),
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
