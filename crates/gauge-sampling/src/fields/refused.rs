//! Fields gauge knows but does not sample with: refused unless neutral ([`REFUSED`]), read by the
//! constraint stage ([`CONSTRAINT_FIELDS`]), or accepted with no effect ([`NO_EFFECT_FIELDS`]).

use super::short;
use crate::error::{Result, SamplingError};
use serde_json::{Map, Value};

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
/// instead of dropping the constraint. They are not in the known set of [`unknown_fields`](super::unknown_fields): a
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
