//! What a request asks the output to match, read from the request's own field names.
//!
//! The names come from three APIs: OpenAI's `response_format` (`json_object`, `json_schema`),
//! llama-server's `json_schema` and `grammar`, and vLLM's `guided_json`, `guided_regex`,
//! `guided_choice` and `guided_grammar`. One request carries at most one of them.

use serde_json::{Map, Value};

use crate::error::GrammarError;

/// Every request field a constraint is read from (see `gauge_sampling::fields::CONSTRAINT_FIELDS`,
/// the same list, which the field tables use so these names are known).
pub const CONSTRAINT_FIELDS: &[&str] = gauge_sampling::fields::CONSTRAINT_FIELDS;

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintSpec {
    /// A JSON Schema (any draft llguidance reads; `strict` or not, it is enforced).
    JsonSchema(Value),
    /// Any JSON object (OpenAI's JSON mode).
    AnyJson,
    /// A Lark grammar in llguidance's dialect (llama.cpp's `%llguidance` line is allowed).
    Lark(String),
    /// A GBNF grammar (llama.cpp's format), translated to Lark when compiled.
    Gbnf(String),
    /// A regular expression the whole output matches.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
}

impl ConstraintSpec {
    /// What kind of constraint, for messages ("JSON schema", "grammar", ...).
    pub fn kind(&self) -> &'static str {
        match self {
            ConstraintSpec::JsonSchema(_) => "JSON schema",
            ConstraintSpec::AnyJson => "JSON object grammar",
            ConstraintSpec::Lark(_) => "grammar",
            ConstraintSpec::Gbnf(_) => "GBNF grammar",
            ConstraintSpec::Regex(_) => "regex",
            ConstraintSpec::Choice(_) => "choice list",
        }
    }

    /// A short label for chain prints and logs.
    pub fn label(&self) -> &'static str {
        match self {
            ConstraintSpec::JsonSchema(_) => "json_schema",
            ConstraintSpec::AnyJson => "json_object",
            ConstraintSpec::Lark(_) => "lark",
            ConstraintSpec::Gbnf(_) => "gbnf",
            ConstraintSpec::Regex(_) => "regex",
            ConstraintSpec::Choice(_) => "choice",
        }
    }
}

/// A constraint and the request field (as a path, e.g. `response_format.json_schema.schema`) it
/// came from, so a compile error can name it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstraintRequest {
    pub spec: ConstraintSpec,
    pub field: String,
    /// Compile a JSON schema even where it uses keywords the grammar does not enforce (they are
    /// then dropped and reported, see [`crate::keywords`]); by default such a schema is refused.
    pub lenient: bool,
}

/// The request field that asks for a lenient schema compile (see [`ConstraintRequest::lenient`]).
pub const LENIENT_FIELD: &str = "lenient_schema";

impl ConstraintRequest {
    /// A strict constraint read from `field`.
    pub fn new(spec: ConstraintSpec, field: impl Into<String>) -> Self {
        Self {
            spec,
            field: field.into(),
            lenient: false,
        }
    }

    /// The same constraint, compiled leniently or not.
    pub fn with_lenient(mut self, lenient: bool) -> Self {
        self.lenient = lenient;
        self
    }
}

fn field_err(field: &str, v: &Value, allowed: &str) -> GrammarError {
    let mut value = v.to_string();
    if value.len() > 80 {
        let mut cut = 77;
        while !value.is_char_boundary(cut) {
            cut -= 1;
        }
        value.truncate(cut);
        value.push_str("...");
    }
    GrammarError::Field {
        field: field.to_string(),
        value,
        allowed: allowed.to_string(),
    }
}

/// A schema given as an object, a boolean, or (vLLM) a JSON string holding one.
fn schema_value(field: &str, v: &Value) -> Result<Value, GrammarError> {
    match v {
        Value::Object(_) | Value::Bool(_) => Ok(v.clone()),
        Value::String(s) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(|x| x.is_object() || x.is_boolean())
            .ok_or_else(|| {
                field_err(
                    field,
                    v,
                    "a JSON Schema (an object, or a string holding one)",
                )
            }),
        _ => Err(field_err(field, v, "a JSON Schema object")),
    }
}

fn text(field: &str, v: &Value, what: &str) -> Result<String, GrammarError> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| field_err(field, v, what))
}

/// `response_format`: `text` (no constraint), `json_object` (any JSON; llama-server also reads a
/// `schema` beside it), `json_schema` with `json_schema.schema` (OpenAI; `strict` may be either).
fn response_format(v: &Value) -> Result<Option<ConstraintRequest>, GrammarError> {
    const F: &str = "response_format";
    let allowed = "{\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {...}}}";
    let o = v.as_object().ok_or_else(|| field_err(F, v, allowed))?;
    let ty = o.get("type").and_then(Value::as_str);
    match ty {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(match o.get("schema").filter(|s| !s.is_null()) {
            Some(s) => ConstraintRequest {
                spec: ConstraintSpec::JsonSchema(schema_value("response_format.schema", s)?),
                field: "response_format.schema".into(),
                lenient: false,
            },
            None => ConstraintRequest {
                spec: ConstraintSpec::AnyJson,
                field: F.into(),
                lenient: false,
            },
        })),
        Some("json_schema") => {
            let js = o
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    field_err(
                        "response_format.json_schema",
                        o.get("json_schema").unwrap_or(&Value::Null),
                        "an object with a `schema`",
                    )
                })?;
            if let Some(s) = js.get("strict").filter(|s| !s.is_null() && !s.is_boolean()) {
                return Err(field_err(
                    "response_format.json_schema.strict",
                    s,
                    "true or false",
                ));
            }
            let field = "response_format.json_schema.schema";
            let schema = js
                .get("schema")
                .filter(|s| !s.is_null())
                .ok_or_else(|| field_err(field, &Value::Null, "a JSON Schema object"))?;
            Ok(Some(ConstraintRequest {
                spec: ConstraintSpec::JsonSchema(schema_value(field, schema)?),
                field: field.into(),
                lenient: false,
            }))
        }
        _ => Err(field_err(
            "response_format.type",
            o.get("type").unwrap_or(&Value::Null),
            "\"text\", \"json_object\" or \"json_schema\"",
        )),
    }
}

/// A grammar field's text as a constraint. llama-server's `grammar` is GBNF unless it starts
/// with `%llguidance` (llama.cpp's own marker for an llguidance Lark grammar); vLLM's
/// `guided_grammar` is GBNF when a line defines a rule with `::=` and Lark otherwise (vLLM's
/// `grammar_is_likely_lark`).
pub fn grammar_text(field: &str, g: String) -> ConstraintSpec {
    let gbnf = if crate::gbnf::is_llguidance_lark(&g) {
        false
    } else if field == "guided_grammar" {
        crate::gbnf::looks_like_gbnf(&g)
    } else {
        true
    };
    if gbnf {
        ConstraintSpec::Gbnf(g)
    } else {
        ConstraintSpec::Lark(g)
    }
}

/// One field's constraint (`None` when the field holds its neutral value).
fn one(name: &str, v: &Value) -> Result<Option<ConstraintRequest>, GrammarError> {
    let req = |spec| Ok(Some(ConstraintRequest::new(spec, name)));
    match name {
        "response_format" => response_format(v),
        LENIENT_FIELD => Ok(None),
        "json_schema" | "guided_json" => req(ConstraintSpec::JsonSchema(schema_value(name, v)?)),
        "grammar" | "guided_grammar" => {
            let g = text(
                name,
                v,
                "a grammar as a string (GBNF, or Lark starting with `%llguidance`)",
            )?;
            if g.trim().is_empty() {
                return Ok(None);
            }
            req(grammar_text(name, g))
        }
        "guided_regex" => req(ConstraintSpec::Regex(text(
            name,
            v,
            "a regular expression string",
        )?)),
        "guided_choice" => {
            let allowed = "a non-empty array of strings";
            let a = v
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| field_err(name, v, allowed))?;
            let choices = a
                .iter()
                .map(|x| text(name, x, allowed))
                .collect::<Result<Vec<_>, _>>()?;
            req(ConstraintSpec::Choice(choices))
        }
        _ => Ok(None),
    }
}

impl ConstraintRequest {
    /// The constraint a request body asks for, if any. Null fields are absent; two constraint
    /// fields are an error naming both.
    pub fn from_request(
        obj: &Map<String, Value>,
    ) -> Result<Option<ConstraintRequest>, GrammarError> {
        let lenient = match obj.get(LENIENT_FIELD) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => return Err(field_err(LENIENT_FIELD, v, "true or false")),
        };
        let mut found: Option<ConstraintRequest> = None;
        for &name in CONSTRAINT_FIELDS {
            let Some(v) = obj.get(name).filter(|v| !v.is_null()) else {
                continue;
            };
            if let Some(mut c) = one(name, v)? {
                c.lenient = lenient;
                if let Some(first) = &found {
                    return Err(GrammarError::Conflict {
                        first: first.field.clone(),
                        second: c.field,
                    });
                }
                found = Some(c);
            }
        }
        Ok(found)
    }

    /// The request without its constraint fields: what `SamplingParams::from_value` reads once
    /// the constraint is taken care of (it refuses vLLM's `guided_*`, which only a face with a
    /// constraint stage may accept).
    pub fn strip(obj: &Map<String, Value>) -> Map<String, Value> {
        obj.iter()
            .filter(|(k, _)| !CONSTRAINT_FIELDS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
