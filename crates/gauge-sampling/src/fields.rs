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
//! [`SAMPLING`] is the one list of sampling fields: each row holds the names, what the field
//! takes, the GGUF key of a model's default, the docs line and the reader.
//! [`crate::params::SamplingParams::from_value`] runs the readers in the table's order,
//! [`unknown_fields`] and the layers of defaults ([`is_set`], [`overlay`]) read its names,
//! docs/server.md's field table is [`markdown_table`]'s output, and the Python and C faces list
//! it from [`catalog`]. The server adds its own names (prompt, messages, stream, ...) when it
//! looks for unknown ones.

mod catalog;
mod layers;
mod refused;
mod sampling;

pub use catalog::{catalog, markdown_table};
pub use layers::{is_set, overlay};
pub use refused::{check_refused, Refused, CONSTRAINT_FIELDS, NO_EFFECT_FIELDS, REFUSED};
pub use sampling::SAMPLING;

use crate::error::{Result, SamplingError};
use crate::params::SamplingParams;
use serde_json::{Map, Value};

/// A JSON type a field accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonType {
    /// `true` or `false`.
    Bool,
    /// A number with no fractional part (`40.0` counts, as llama-server's `get<int>` reads it).
    Integer,
    /// Any number, integers included.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl JsonType {
    /// The type's name in [`catalog`] (`"integer"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            JsonType::Bool => "bool",
            JsonType::Integer => "integer",
            JsonType::Number => "number",
            JsonType::String => "string",
            JsonType::Array => "array",
            JsonType::Object => "object",
        }
    }
}

/// What a field takes: its JSON types, and the text an error for any other type says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Takes {
    /// The JSON types accepted; a value of another type is an error naming the field.
    pub json: &'static [JsonType],
    /// What the field takes, as its type error and the docs say it.
    pub text: &'static str,
}

impl Takes {
    /// Whether `v` has one of the JSON types the field takes (`null`, which counts as absent,
    /// always does). A value of the right type may still be out of range.
    pub fn accepts(&self, v: &Value) -> bool {
        v.is_null()
            || self.json.iter().any(|t| match (t, v) {
                (JsonType::Bool, Value::Bool(_))
                | (JsonType::Number, Value::Number(_))
                | (JsonType::String, Value::String(_))
                | (JsonType::Array, Value::Array(_))
                | (JsonType::Object, Value::Object(_)) => true,
                (JsonType::Integer, Value::Number(n)) => {
                    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|x| x.fract() == 0.0)
                }
                _ => false,
            })
    }
}

/// Any number (the readers' text for a wrong type, so an error and the docs agree).
pub const NUMBER: Takes = Takes {
    json: &[JsonType::Number],
    text: "a number",
};
/// An integer.
pub const INTEGER: Takes = Takes {
    json: &[JsonType::Integer],
    text: "an integer",
};
/// `true` or `false`.
pub const BOOL: Takes = Takes {
    json: &[JsonType::Bool],
    text: "true or false",
};
/// A count of alternatives per token (`n_probs`, `top_logprobs`).
pub const COUNT: Takes = Takes {
    json: &[JsonType::Integer],
    text: "an integer >= 0",
};
/// OpenAI's `logprobs`: a count (completions) or a switch (chat).
pub const LOGPROBS: Takes = Takes {
    json: &[JsonType::Bool, JsonType::Integer],
    text: "true, false or an integer >= 0",
};

/// Another name of a field's value. Every name present is type-checked, and two present names
/// with different values are an error naming both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alias {
    /// The name.
    pub name: &'static str,
    /// Who sends it (for the docs); empty when it is llama.cpp's own.
    pub from: &'static str,
}

/// How [`SamplingParams::from_value`] reads a field.
#[derive(Clone, Copy)]
pub(crate) enum Read {
    /// Its own reader: parses every name of the field present in the request into the params.
    Own(fn(&mut SamplingParams, &Map<String, Value>, &Field) -> Result<()>),
    /// Read with the named field, which reads this one too (`logprobs` with `n_probs`).
    With(&'static str),
}

/// One sampling request field: a row of [`SAMPLING`].
#[derive(Clone, Copy)]
pub struct Field {
    /// llama-server's name: the canonical one, which `SamplingParams::to_value` writes.
    pub name: &'static str,
    /// Other names of the same value.
    pub aliases: &'static [Alias],
    /// What it takes.
    pub takes: Takes,
    /// The key of a model's GGUF that gives its default (`general.sampling.top_k`), if any.
    pub gguf: Option<&'static str>,
    /// What it does, for the docs (one line of Markdown).
    pub doc: &'static str,
    pub(crate) read: Read,
}

impl std::fmt::Debug for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Field")
            .field("name", &self.name)
            .field("aliases", &self.aliases)
            .field("takes", &self.takes)
            .field("gguf", &self.gguf)
            .field("read_with", &self.read_with())
            .finish()
    }
}

impl Field {
    /// The canonical name, then the aliases.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        std::iter::once(self.name).chain(self.aliases.iter().map(|a| a.name))
    }

    /// The field whose reader reads this one too, if another does (`n_probs` for `logprobs`).
    pub fn read_with(&self) -> Option<&'static str> {
        match self.read {
            Read::With(name) => Some(name),
            Read::Own(_) => None,
        }
    }

    /// The setting this field is a name of when layers of defaults stack: its own name, or the
    /// field it is read with.
    pub fn setting(&self) -> &'static str {
        self.read_with().unwrap_or(self.name)
    }
}

/// The field with `name` as its name or an alias.
pub fn field(name: &str) -> Option<&'static Field> {
    SAMPLING.iter().find(|f| f.names().any(|n| n == name))
}

/// The field whose default a model's GGUF gives under `key` (`general.sampling.temp`).
pub fn by_gguf_key(key: &str) -> Option<&'static Field> {
    SAMPLING.iter().find(|f| f.gguf == Some(key))
}

/// Every sampling field name, aliases included, in the table's order.
pub fn sampling_names() -> impl Iterator<Item = &'static str> {
    SAMPLING.iter().flat_map(Field::names)
}

/// The canonical name of an alias (itself when it is not one).
pub fn canonical(name: &str) -> &str {
    field(name).map_or(name, |f| f.name)
}

/// The names in `obj` that gauge does not know (neither sampling, refused, no-effect, nor one of
/// `also_known`), sorted.
pub fn unknown_fields(obj: &Map<String, Value>, also_known: &[&str]) -> Vec<String> {
    let known = |k: &str| {
        field(k).is_some()
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
    let sent = |name: &str| -> Option<String> {
        let f = SAMPLING.iter().find(|f| f.name == name)?;
        if obj.get(name).is_some_and(|v| !v.is_null()) {
            return None;
        }
        f.names()
            .find(|n| obj.get(*n).is_some_and(|v| !v.is_null()))
            .map(str::to_string)
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
