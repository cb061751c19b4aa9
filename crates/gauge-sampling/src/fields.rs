//! Every request field name gauge knows, and what it does with each.
//!
//! Clients arrive with four vocabularies: llama-server's, OpenAI's, HF `generate`'s and vLLM's
//! `SamplingParams`. A field that one of them sends is either **honoured** with the same meaning
//! (under its own name or as an alias), or **refused** with an error that names it and says what to
//! use instead. It is never dropped in silence: dropping `repetition_penalty` would run a request
//! without the penalty its author asked for. Names gauge does not know at all are *unknown*: they
//! are accepted, as llama-server accepts them, but reported ([`unknown_fields`]), and refused in
//! strict mode.
//!
//! The tables here are the one list: [`crate::params::SamplingParams::from_value`] parses
//! [`SAMPLING_FIELDS`], checks [`ALIASES`] and [`REFUSED`]; the server adds its own names (prompt,
//! messages, stream, ...) when it looks for unknown ones.

use crate::error::{Result, SamplingError};
use serde_json::{Map, Value};

/// Names of one setting; the canonical (llama-server) name first. Every name present in a request
/// is type-checked, and two present names with different values are an error.
pub const ALIASES: &[&[&str]] = &[
    &["temperature", "temp"],
    &["typical_p", "typ_p"],
    &[
        "n_predict",
        "max_tokens",
        "max_completion_tokens",
        "max_new_tokens",
    ],
    &["repeat_penalty", "repetition_penalty"],
];

/// The canonical name of an alias (itself when it is not one).
pub fn canonical(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|names| names.contains(&name))
        .map_or(name, |names| names[0])
}

/// Every sampling field [`crate::params::SamplingParams::from_value`] reads, aliases included.
pub const SAMPLING_FIELDS: &[&str] = &[
    "preset",
    "temperature",
    "temp",
    "dynatemp_range",
    "dynatemp_exponent",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "typ_p",
    "xtc_probability",
    "xtc_threshold",
    "top_n_sigma",
    "min_keep",
    "repeat_last_n",
    "repeat_penalty",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty_mode",
    "penalize_prompt",
    "penalty_once_per_token",
    "penalty_exempt",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "dry_sequence_breaker_ids",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "adaptive_target",
    "adaptive_decay",
    "seed",
    "samplers",
    "logit_bias",
    "ignore_eos",
    "n_probs",
    "logprobs",
    "top_logprobs",
    "n_predict",
    "max_tokens",
    "max_completion_tokens",
    "max_new_tokens",
    "do_sample",
];

/// A field gauge recognises but does not implement. Its neutral value (the one that changes
/// nothing) is accepted; anything else is refused with `instead`.
#[derive(Debug)]
pub struct Refused {
    /// The request field's name.
    pub name: &'static str,
    /// Who sends it.
    pub from: &'static str,
    /// The value(s) accepted because they change nothing, as text for the error.
    pub neutral_text: &'static str,
    neutral: fn(&Value) -> bool,
    /// What to use instead.
    pub instead: &'static str,
}

fn is_zero(v: &Value) -> bool {
    v.as_f64() == Some(0.0)
}
fn is_one(v: &Value) -> bool {
    v.as_f64() == Some(1.0)
}
fn is_false(v: &Value) -> bool {
    v == &Value::Bool(false)
}
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}
fn is_true(v: &Value) -> bool {
    v == &Value::Bool(true)
}

const MIN_LEN: &str = "gauge has no minimum length: use `ignore_eos: true` with `max_tokens`, \
                       or a `logit_bias` on the end-of-generation token";
const NO_CONSTRAINT_STAGE: &str = "this face has no constraint stage: `gauge serve` and `gauge \
                                     generate` honour it (crate gauge-grammar)";
const BEAMS: &str = "gauge samples one sequence and does no beam search: use sampling, or \
                     `temperature: 0` for greedy";

/// Fields of HF `generate`, vLLM and older llama.cpp that gauge refuses unless neutral.
pub const REFUSED: &[Refused] = &[
    Refused {
        name: "min_tokens",
        from: "vLLM",
        neutral_text: "0",
        neutral: is_zero,
        instead: MIN_LEN,
    },
    Refused {
        name: "min_new_tokens",
        from: "HF generate",
        neutral_text: "0",
        neutral: is_zero,
        instead: MIN_LEN,
    },
    Refused {
        name: "min_length",
        from: "HF generate",
        neutral_text: "0",
        neutral: is_zero,
        instead: MIN_LEN,
    },
    Refused {
        name: "max_length",
        from: "HF generate",
        neutral_text: "none",
        neutral: |_| false,
        instead: "`max_length` counts the prompt too; use `max_tokens` (new tokens only)",
    },
    Refused {
        name: "top_a",
        from: "KoboldCpp / text-generation-webui",
        neutral_text: "0",
        neutral: is_zero,
        instead: "top-a is not one of llama.cpp's samplers; `min_p` is the closest (a cut \
                  relative to the top probability)",
    },
    Refused {
        name: "tfs_z",
        from: "older llama.cpp",
        neutral_text: "1",
        neutral: is_one,
        instead: "tail-free sampling was removed from llama.cpp; use `min_p` or `top_n_sigma`",
    },
    Refused {
        name: "penalize_nl",
        from: "older llama.cpp",
        neutral_text: "false",
        neutral: is_false,
        instead: "removed from llama.cpp (newlines are penalised like any token); exempt a \
                  token from the penalties with `penalty_exempt`",
    },
    Refused {
        name: "epsilon_cutoff",
        from: "HF generate",
        neutral_text: "0",
        neutral: is_zero,
        instead: "use `min_p` (a cut relative to the top probability)",
    },
    Refused {
        name: "eta_cutoff",
        from: "HF generate",
        neutral_text: "0",
        neutral: is_zero,
        instead: "use `min_p` or `typical_p`",
    },
    Refused {
        name: "no_repeat_ngram_size",
        from: "HF generate",
        neutral_text: "0",
        neutral: is_zero,
        instead: "use DRY (`dry_multiplier`, `dry_allowed_length`), which penalises repeated \
                  sequences",
    },
    Refused {
        name: "encoder_repetition_penalty",
        from: "HF generate",
        neutral_text: "1",
        neutral: is_one,
        instead: "gauge runs decoder-only models; use `repeat_penalty`",
    },
    Refused {
        name: "length_penalty",
        from: "HF generate / vLLM",
        neutral_text: "1",
        neutral: is_one,
        instead: BEAMS,
    },
    Refused {
        name: "use_beam_search",
        from: "vLLM",
        neutral_text: "false",
        neutral: is_false,
        instead: BEAMS,
    },
    Refused {
        name: "num_beams",
        from: "HF generate",
        neutral_text: "1",
        neutral: is_one,
        instead: BEAMS,
    },
    Refused {
        name: "num_beam_groups",
        from: "HF generate",
        neutral_text: "1",
        neutral: is_one,
        instead: BEAMS,
    },
    Refused {
        name: "diversity_penalty",
        from: "HF generate",
        neutral_text: "0",
        neutral: is_zero,
        instead: BEAMS,
    },
    Refused {
        name: "early_stopping",
        from: "HF generate / vLLM",
        neutral_text: "false",
        neutral: is_false,
        instead: BEAMS,
    },
    Refused {
        name: "penalty_alpha",
        from: "HF generate",
        neutral_text: "0",
        neutral: is_zero,
        instead: "contrastive search is not supported; use sampling",
    },
    Refused {
        name: "num_return_sequences",
        from: "HF generate",
        neutral_text: "1",
        neutral: is_one,
        instead: "one sequence per request; send several requests with different seeds",
    },
    Refused {
        name: "bad_words_ids",
        from: "HF generate",
        neutral_text: "[]",
        neutral: is_empty,
        instead: "ban single tokens with `logit_bias: [[id, false]]`",
    },
    Refused {
        name: "bad_words",
        from: "vLLM",
        neutral_text: "[]",
        neutral: is_empty,
        instead: "ban tokens with `logit_bias: [[\"word\", false]]`",
    },
    Refused {
        name: "suppress_tokens",
        from: "HF generate",
        neutral_text: "[]",
        neutral: is_empty,
        instead: "ban tokens with `logit_bias: [[id, false]]`",
    },
    Refused {
        name: "sequence_bias",
        from: "HF generate",
        neutral_text: "{}",
        neutral: is_empty,
        instead: "bias single tokens with `logit_bias`",
    },
    Refused {
        name: "allowed_token_ids",
        from: "vLLM",
        neutral_text: "[]",
        neutral: is_empty,
        instead: "ban the other tokens with `logit_bias`, or constrain the output with a \
                  grammar (`grammar`, `json_schema`, `response_format`)",
    },
    Refused {
        name: "stop_token_ids",
        from: "vLLM",
        neutral_text: "[]",
        neutral: is_empty,
        instead: "use `stop` strings (end-of-generation tokens always stop unless \
                  `ignore_eos` is set)",
    },
    Refused {
        name: "include_stop_str_in_output",
        from: "vLLM",
        neutral_text: "false",
        neutral: is_false,
        instead: "the matched stop string is not included in the output",
    },
    Refused {
        name: "prompt_logprobs",
        from: "vLLM",
        neutral_text: "0",
        neutral: is_zero,
        instead: "only generated tokens have log-probabilities (`logprobs`)",
    },
    Refused {
        name: "skip_special_tokens",
        from: "vLLM",
        neutral_text: "true",
        neutral: is_true,
        instead: "special tokens are always left out of the text",
    },
    Refused {
        name: "guided_json",
        from: "vLLM",
        neutral_text: "none",
        neutral: |_| false,
        instead: NO_CONSTRAINT_STAGE,
    },
    Refused {
        name: "guided_regex",
        from: "vLLM",
        neutral_text: "none",
        neutral: |_| false,
        instead: NO_CONSTRAINT_STAGE,
    },
    Refused {
        name: "guided_choice",
        from: "vLLM",
        neutral_text: "none",
        neutral: |_| false,
        instead: NO_CONSTRAINT_STAGE,
    },
    Refused {
        name: "guided_grammar",
        from: "vLLM",
        neutral_text: "none",
        neutral: |_| false,
        instead: NO_CONSTRAINT_STAGE,
    },
    Refused {
        name: "structured_outputs",
        from: "vLLM",
        neutral_text: "none",
        neutral: |_| false,
        instead:
            "vLLM's newer form is not read: send `guided_json`, `guided_regex`, `guided_choice`, \
                  `guided_grammar` or `response_format` to a face with a constraint stage \
                  (`gauge serve`)",
    },
];

/// Fields that constrain the output to a grammar: read by the constraint stage (crate
/// `gauge-grammar`), never by [`crate::params::SamplingParams::from_value`]. A face with that
/// stage (the server, `gauge generate`) reads them and removes them before parsing the sampling
/// fields; vLLM's `guided_*` are also in [`REFUSED`], so a face without the stage refuses them
/// instead of dropping the constraint. They are not in the known set of [`unknown_fields`]: a
/// face with the stage passes them as `also_known`, one without reports them. `response_format`
/// `{"type": "text"}` and empty strings are neutral.
pub const CONSTRAINT_FIELDS: &[&str] = &[
    "response_format",
    "json_schema",
    "grammar",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
];

/// Accepted, with no effect on the generated tokens (identification, bookkeeping, caching hints).
pub const NO_EFFECT_FIELDS: &[&str] = &[
    "model",
    "user",
    "metadata",
    "store",
    "service_tier",
    "cache_prompt",
    "id_slot",
    "timings_per_token",
    "return_progress",
    "use_cache",
    "pad_token_id",
    "output_scores",
    "return_dict_in_generate",
];

/// Refuse a field of [`REFUSED`] set to anything but its neutral value.
pub fn check_refused(obj: &Map<String, Value>) -> Result<()> {
    for r in REFUSED {
        if let Some(v) = obj.get(r.name).filter(|v| !v.is_null()) {
            if !(r.neutral)(v) {
                return Err(SamplingError::NotSupported {
                    field: r.name.to_string(),
                    value: short(v),
                    detail: format!(
                        "{} (a {} field; accepted only as {})",
                        r.instead, r.from, r.neutral_text
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The names in `obj` that gauge does not know (neither sampling, refused, no-effect, nor one of
/// `also_known`), sorted.
pub fn unknown_fields(obj: &Map<String, Value>, also_known: &[&str]) -> Vec<String> {
    let known = |k: &str| {
        SAMPLING_FIELDS.contains(&k)
            || NO_EFFECT_FIELDS.contains(&k)
            || REFUSED.iter().any(|r| r.name == k)
            || also_known.contains(&k)
    };
    let mut out: Vec<String> = obj.keys().filter(|k| !known(k)).cloned().collect();
    out.sort();
    out
}

/// A value's JSON text, cut for an error message.
pub(crate) fn short(v: &Value) -> String {
    let mut text = v.to_string();
    if text.len() > 80 {
        let mut cut = 77;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

/// Rename the field of a range error to the alias the client sent: `validate` knows the canonical
/// name only, but an error about `n_predict` puzzles a client that sent `max_tokens`.
pub fn name_as_sent(err: SamplingError, request: &Value) -> SamplingError {
    let Some(obj) = request.as_object() else {
        return err;
    };
    let sent = |field: &str| -> Option<String> {
        let names = ALIASES.iter().find(|names| names[0] == field)?;
        if obj.get(field).is_some_and(|v| !v.is_null()) {
            return None;
        }
        names
            .iter()
            .find(|n| obj.get(**n).is_some_and(|v| !v.is_null()))
            .map(|n| n.to_string())
    };
    match err {
        SamplingError::Param {
            field,
            value,
            allowed,
        } => SamplingError::Param {
            field: sent(&field).unwrap_or(field),
            value,
            allowed,
        },
        other => other,
    }
}

// ---------------------------------------------------------------------------------------------
// Layers of defaults
//
// A request is the top of a stack: llama.cpp's built-in defaults (in `SamplingParams::default`),
// then a model's GGUF defaults (`general.sampling.*`), then a server's or a command line's
// settings, then the request's own fields. llama.cpp applies a lower layer's value only where no
// higher layer set that field (common.cpp's `user_sampling_config` bit per field); these two
// functions are that rule over request objects, with every name of a setting counted as it.

/// Names that count as one setting when layers are stacked, besides [`ALIASES`]: the names of
/// the alternatives count (a request's `logprobs: true` must replace a default `n_probs`).
const LAYER_GROUPS: &[&[&str]] = &[&["n_probs", "logprobs", "top_logprobs"]];

/// Whether `a` and `b` name the same setting.
fn same_setting(a: &str, b: &str) -> bool {
    a == b
        || ALIASES
            .iter()
            .chain(LAYER_GROUPS)
            .any(|names| names.contains(&a) && names.contains(&b))
}

fn present<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

/// Whether the layer `obj` sets the setting `field` (any of its names, with a non-null value; a
/// JSON `null` counts as absent). A `preset` sets every setting (its values are the base the rest
/// of the request overrides); HF's `do_sample: false` sets the temperature (to 0); HF's and
/// vLLM's `repetition_penalty` sets the penalty window too (to the whole history, their scope).
pub fn is_set(obj: &Map<String, Value>, field: &str) -> bool {
    if present(obj, "preset").is_some() {
        return true;
    }
    if obj
        .iter()
        .any(|(k, v)| !v.is_null() && same_setting(k, field))
    {
        return true;
    }
    match canonical(field) {
        "temperature" => present(obj, "do_sample") == Some(&Value::Bool(false)),
        "repeat_last_n" => present(obj, "repetition_penalty").is_some(),
        _ => false,
    }
}

/// `top` layered over `base`: `base`'s value of each setting `top` does not set ([`is_set`]),
/// and everything `top` sets. `null`s in `top` are dropped (absent, so `base` shows through).
pub fn overlay(base: &Map<String, Value>, top: &Map<String, Value>) -> Map<String, Value> {
    let mut out: Map<String, Value> = base
        .iter()
        .filter(|(k, _)| !is_set(top, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in top {
        if !v.is_null() {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod layer_tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn a_setting_is_set_under_any_of_its_names() {
        let user = obj(json!({"temp": 0.5, "max_tokens": 3, "logprobs": true, "x": null}));
        assert!(is_set(&user, "temperature"));
        assert!(is_set(&user, "n_predict"));
        assert!(is_set(&user, "n_probs"));
        assert!(!is_set(&user, "top_k"));
        assert!(!is_set(&user, "x"), "null is absent");
        assert!(is_set(&obj(json!({"preset": "json"})), "top_k"));
        assert!(is_set(&obj(json!({"do_sample": false})), "temperature"));
        assert!(!is_set(&obj(json!({"do_sample": true})), "temperature"));
        assert!(is_set(
            &obj(json!({"repetition_penalty": 1.2})),
            "repeat_last_n"
        ));
    }

    #[test]
    fn overlay_keeps_the_base_only_where_the_top_is_silent() {
        let base = obj(json!({"top_k": 7, "temperature": 0.3, "repeat_last_n": 32, "n_probs": 2}));
        let top =
            obj(json!({"temp": 0.9, "repetition_penalty": 1.1, "logprobs": true, "top_k": null}));
        let out = overlay(&base, &top);
        assert_eq!(
            Value::Object(out),
            json!({"top_k": 7, "temp": 0.9, "repetition_penalty": 1.1, "logprobs": true})
        );
        let preset = overlay(&base, &obj(json!({"preset": "code"})));
        assert_eq!(Value::Object(preset), json!({"preset": "code"}));
    }
}
