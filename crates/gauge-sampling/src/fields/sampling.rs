//! The table of sampling fields: names, what each takes, the GGUF key of a model's default, the
//! docs line and the reader. [`SamplingParams::from_value`] runs the readers in this order (the
//! preset first: its settings are the base the other fields override; `do_sample` after
//! `temperature`, which it overrides).

use super::{Alias, Field, JsonType, Read, Takes, BOOL, COUNT, INTEGER, LOGPROBS, NUMBER};
use crate::error::{Result, SamplingError};
use crate::params::read::{
    aliased, as_bool, as_f32, as_i32, as_i64, as_token_ref, lookup, parse_breaker_ids,
    parse_logit_bias, parse_n_probs, parse_samplers, parse_strings, type_err,
};
use crate::params::SamplingParams;
use crate::presets::Preset;
use crate::rng;
use crate::samplers::penalties::PenaltyMode;
use serde_json::{Map, Value};

/// A row whose reader sets `p.$param` from the field's first present name (every name
/// type-checked with `$read`, two that differ a conflict).
macro_rules! sets {
    ($param:ident, $read:path) => {
        Read::Own(|p, obj, f| {
            if let Some((_, x)) = aliased(obj, f.names(), $read)? {
                p.$param = x;
            }
            Ok(())
        })
    };
}

const fn row(name: &'static str, takes: Takes, doc: &'static str, read: Read) -> Field {
    Field {
        name,
        aliases: &[],
        takes,
        gguf: None,
        doc,
        read,
    }
}

impl Field {
    const fn aka(mut self, aliases: &'static [Alias]) -> Field {
        self.aliases = aliases;
        self
    }

    const fn gguf(mut self, key: &'static str) -> Field {
        self.gguf = Some(key);
        self
    }
}

const fn alias(name: &'static str, from: &'static str) -> Alias {
    Alias { name, from }
}

const fn takes(json: &'static [JsonType], text: &'static str) -> Takes {
    Takes { json, text }
}

/// Every sampling field, in the order [`SamplingParams::from_value`] reads them.
pub const SAMPLING: &[Field] = &[
    row(
        "preset",
        takes(&[JsonType::String], "a preset name"),
        "a preset's settings are the base the request's other fields override",
        Read::Own(read_preset),
    ),
    row(
        "temperature",
        NUMBER,
        "`0` = greedy; where `logit / t` overflows f32 (`1e-39`) the distribution is computed \
         from `z - max`: for a tiny `t`, the argmax, never a NaN draw",
        sets!(temperature, as_f32),
    )
    .aka(&[alias("temp", "")])
    .gguf("general.sampling.temp"),
    row(
        "do_sample",
        BOOL,
        "HF `generate`: `false` = greedy (`temperature: 0`); with a positive `temperature` it is \
         a conflict",
        Read::Own(read_do_sample),
    ),
    row(
        "dynatemp_range",
        NUMBER,
        "`> 0`: the temperature follows the entropy (dynamic temperature)",
        sets!(dynatemp_range, as_f32),
    ),
    row(
        "dynatemp_exponent",
        NUMBER,
        "the dynamic temperature's exponent",
        sets!(dynatemp_exponent, as_f32),
    ),
    row("top_k", INTEGER, "`<= 0` = off", sets!(top_k, as_i32)).gguf("general.sampling.top_k"),
    row("top_p", NUMBER, "`1` = off", sets!(top_p, as_f32)).gguf("general.sampling.top_p"),
    row("min_p", NUMBER, "`0` = off", sets!(min_p, as_f32)).gguf("general.sampling.min_p"),
    row(
        "min_keep",
        INTEGER,
        "candidates top-p, min-p, typical and XTC always keep",
        sets!(min_keep, as_i32),
    ),
    row(
        "top_n_sigma",
        NUMBER,
        "`<= 0` = off",
        sets!(top_n_sigma, as_f32),
    ),
    row(
        "typical_p",
        NUMBER,
        "locally typical sampling; `1` = off",
        sets!(typical_p, as_f32),
    )
    .aka(&[alias("typ_p", "")]),
    row(
        "xtc_probability",
        NUMBER,
        "`0` = off",
        sets!(xtc_probability, as_f32),
    )
    .gguf("general.sampling.xtc_probability"),
    row(
        "xtc_threshold",
        NUMBER,
        "`> 0.5` = off",
        sets!(xtc_threshold, as_f32),
    )
    .gguf("general.sampling.xtc_threshold"),
    row(
        "repeat_penalty",
        NUMBER,
        "θ of the multiplicative penalty, `1` = off; under the HF/vLLM name the window is their \
         scope, the whole context (`repeat_last_n: -1`), unless `repeat_last_n` is sent",
        Read::Own(read_repeat_penalty),
    )
    .aka(&[alias("repetition_penalty", "HF, vLLM")])
    .gguf("general.sampling.penalty_repeat"),
    row(
        "repeat_last_n",
        INTEGER,
        "the penalty window: `0` = off, `-1` = the whole history (llama.cpp turns `-1` off)",
        sets!(repeat_last_n, as_i32),
    )
    .gguf("general.sampling.penalty_last_n"),
    row(
        "frequency_penalty",
        NUMBER,
        "subtracted once per occurrence in the window",
        sets!(frequency_penalty, as_f32),
    ),
    row(
        "presence_penalty",
        NUMBER,
        "subtracted once for any occurrence in the window",
        sets!(presence_penalty, as_f32),
    ),
    row(
        "repeat_penalty_mode",
        takes(&[JsonType::String], "\"ctrl\" or \"normalized\""),
        "gauge's own: `\"ctrl\"` (llama.cpp's sign branch on raw logits, the default) or \
         `\"normalized\"` (the penalty on log-softmax, shift-invariant)",
        Read::Own(read_penalty_mode),
    ),
    row(
        "penalize_prompt",
        BOOL,
        "gauge's own: prompt tokens count as seen (default `true`, as llama.cpp)",
        sets!(penalize_prompt, as_bool),
    ),
    row(
        "penalty_once_per_token",
        BOOL,
        "gauge's own: the frequency penalty counts a token once",
        sets!(penalty_once_per_token, as_bool),
    ),
    row(
        "penalty_exempt",
        takes(&[JsonType::Array], "an array of token ids or strings"),
        "gauge's own: tokens the penalties never touch (a string: every token of its \
         tokenization)",
        Read::Own(read_penalty_exempt),
    ),
    row(
        "dry_multiplier",
        NUMBER,
        "DRY's strength, `0` = off",
        sets!(dry_multiplier, as_f32),
    ),
    row(
        "dry_base",
        NUMBER,
        "the base of DRY's exponential penalty",
        sets!(dry_base, as_f32),
    ),
    row(
        "dry_allowed_length",
        INTEGER,
        "DRY leaves repeats up to this length alone",
        sets!(dry_allowed_length, as_i32),
    ),
    row(
        "dry_penalty_last_n",
        INTEGER,
        "DRY's window: `0` = off, `-1` = the whole history (llama.cpp turns `-1` off)",
        sets!(dry_penalty_last_n, as_i32),
    ),
    row(
        "dry_sequence_breakers",
        takes(&[JsonType::Array], "an array of strings"),
        "strings that end a DRY match; `[]` = none",
        Read::Own(read_dry_breakers),
    ),
    row(
        "dry_sequence_breaker_ids",
        takes(
            &[JsonType::Array],
            "an array of token-id arrays [[head, tail...], ...]",
        ),
        "gauge's own: breakers as token ids, for chains built without a vocabulary; they replace \
         the default string breakers (strings sent in `dry_sequence_breakers` are added)",
        Read::Own(read_dry_breaker_ids),
    ),
    row(
        "mirostat",
        INTEGER,
        "`0` = off, `1`, `2` (v2): the terminal, replacing every stage but logit-bias",
        sets!(mirostat, as_i32),
    )
    .gguf("general.sampling.mirostat"),
    row(
        "mirostat_tau",
        NUMBER,
        "mirostat's target surprise",
        sets!(mirostat_tau, as_f32),
    )
    .gguf("general.sampling.mirostat_tau"),
    row(
        "mirostat_eta",
        NUMBER,
        "mirostat's learning rate",
        sets!(mirostat_eta, as_f32),
    )
    .gguf("general.sampling.mirostat_eta"),
    row(
        "adaptive_target",
        NUMBER,
        "adaptive-p's target probability; `< 0` = off",
        sets!(adaptive_target, as_f32),
    ),
    row(
        "adaptive_decay",
        NUMBER,
        "the decay of adaptive-p's running average",
        sets!(adaptive_decay, as_f32),
    ),
    row(
        "seed",
        INTEGER,
        "`-1` or `4294967295` (`LLAMA_DEFAULT_SEED`) = random, drawn once per request and \
         reported with `echo_chain`",
        Read::Own(read_seed),
    ),
    row(
        "samplers",
        takes(
            &[JsonType::Array, JsonType::String],
            "an array of names or a string of letters",
        ),
        "the chain's stages in order: names, or letters (`\"edskypmxt\"`)",
        Read::Own(|p, obj, f| {
            if let Some((_, v)) = lookup(obj, &[f.name]) {
                p.samplers = parse_samplers(v)?;
            }
            Ok(())
        }),
    )
    .gguf("general.sampling.sequence"),
    row(
        "logit_bias",
        takes(
            &[JsonType::Array, JsonType::Object],
            "an array of [token, bias] pairs or an object {token: bias}",
        ),
        "pairs or an object; token by id or non-empty text; `false` bans",
        Read::Own(|p, obj, f| {
            if let Some((_, v)) = lookup(obj, &[f.name]) {
                p.logit_bias = parse_logit_bias(v)?;
            }
            Ok(())
        }),
    ),
    row(
        "ignore_eos",
        BOOL,
        "bans every end-of-generation token",
        sets!(ignore_eos, as_bool),
    ),
    row(
        "n_predict",
        INTEGER,
        "tokens to generate; `-1` = no limit (the server's `--max-tokens`)",
        sets!(n_predict, as_i32),
    )
    .aka(&[
        alias("max_tokens", "OpenAI"),
        alias("max_completion_tokens", "OpenAI"),
        alias("max_new_tokens", "HF"),
    ]),
    row(
        "n_probs",
        COUNT,
        "alternatives per token in the response (the server: 0..=100); each of `n_probs`, \
         `logprobs` and `top_logprobs` is type-checked, counts that differ are a conflict",
        Read::Own(|p, obj, _| {
            if let Some(n) = parse_n_probs(obj)? {
                p.n_probs = n;
            }
            Ok(())
        }),
    ),
    row(
        "logprobs",
        LOGPROBS,
        "OpenAI: a count (completions), or `true` for `top_logprobs` alternatives (chat, default \
         20); sets `n_probs`",
        Read::With("n_probs"),
    ),
    row(
        "top_logprobs",
        COUNT,
        "OpenAI chat: alternatives per token, only with `logprobs: true` (otherwise an error, as \
         llama-server's \"top_logprobs requires logprobs to be set to true\")",
        Read::With("n_probs"),
    ),
];

fn read_preset(p: &mut SamplingParams, obj: &Map<String, Value>, f: &Field) -> Result<()> {
    match lookup(obj, &[f.name]) {
        Some((_, Value::String(name))) => *p = name.parse::<Preset>()?.params(),
        Some((n, other)) => return Err(type_err(n, other, f.takes.text)),
        None => {}
    }
    Ok(())
}

/// HF `generate`: `do_sample: false` is greedy, whatever the temperature would be.
fn read_do_sample(p: &mut SamplingParams, obj: &Map<String, Value>, f: &Field) -> Result<()> {
    let Some((n, v)) = lookup(obj, &[f.name]) else {
        return Ok(());
    };
    if !as_bool(n, v)? {
        if let Some((t, tv)) = lookup(obj, &["temperature", "temp"]) {
            if as_f32(t, tv)? > 0.0 {
                return Err(SamplingError::ConflictingAliases {
                    first: n.into(),
                    first_value: "false".into(),
                    second: t.into(),
                    second_value: super::short(tv),
                });
            }
        }
        p.temperature = 0.0;
    }
    Ok(())
}

fn read_repeat_penalty(p: &mut SamplingParams, obj: &Map<String, Value>, f: &Field) -> Result<()> {
    if let Some((n, x)) = aliased(obj, f.names(), as_f32)? {
        p.repeat_penalty = x;
        // HF's and vLLM's `repetition_penalty` is the same operator (their `< 0` and llama.cpp's
        // `<= 0` agree at 0) over the whole context: keep that scope unless a window is given.
        if n == "repetition_penalty" && lookup(obj, &["repeat_last_n"]).is_none() {
            p.repeat_last_n = -1;
        }
    }
    Ok(())
}

fn read_penalty_mode(p: &mut SamplingParams, obj: &Map<String, Value>, f: &Field) -> Result<()> {
    if let Some((n, v)) = lookup(obj, &[f.name]) {
        p.repeat_penalty_mode = match v.as_str() {
            Some("ctrl") => PenaltyMode::Ctrl,
            Some("normalized") => PenaltyMode::Normalized,
            _ => return Err(type_err(n, v, f.takes.text)),
        };
    }
    Ok(())
}

fn read_penalty_exempt(p: &mut SamplingParams, obj: &Map<String, Value>, f: &Field) -> Result<()> {
    if let Some((n, v)) = lookup(obj, &[f.name]) {
        let items = v.as_array().ok_or_else(|| type_err(n, v, f.takes.text))?;
        p.penalty_exempt = items
            .iter()
            .map(|x| as_token_ref(n, x))
            .collect::<Result<_>>()?;
    }
    Ok(())
}

fn read_dry_breakers(p: &mut SamplingParams, obj: &Map<String, Value>, f: &Field) -> Result<()> {
    if let Some((n, v)) = lookup(obj, &[f.name]) {
        p.dry_sequence_breakers = Some(parse_strings(n, v)?);
    }
    Ok(())
}

fn read_dry_breaker_ids(p: &mut SamplingParams, obj: &Map<String, Value>, f: &Field) -> Result<()> {
    if let Some((_, v)) = lookup(obj, &[f.name]) {
        p.dry_sequence_breaker_ids = Some(parse_breaker_ids(v)?);
    }
    Ok(())
}

fn read_seed(p: &mut SamplingParams, obj: &Map<String, Value>, f: &Field) -> Result<()> {
    if let Some((n, v)) = lookup(obj, &[f.name]) {
        let s = as_i64(n, v)?;
        p.seed = match s {
            -1 => rng::DEFAULT_SEED,
            0..=0xFFFF_FFFF => s as u32,
            _ => {
                return Err(SamplingError::param(
                    n,
                    s,
                    "0..=4294967294 for a fixed seed, or -1 / 4294967295 (LLAMA_DEFAULT_SEED) \
                     for a random one",
                ))
            }
        };
    }
    Ok(())
}
