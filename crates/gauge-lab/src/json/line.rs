//! A2's raw line: one decoded output, how it stopped, and its verdict against the schema.

use super::schema::{self, first_json, Extracted, SchemaCheck, SchemaEntry};
use crate::ops::Op;
use crate::run::resume::ChunkLine;
use crate::run::RunSpec;
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};

/// Stop strings of the note's JSON task (kept in the output).
pub const STOP_STRINGS: [&str; 2] = ["\n\n", "```"];

/// One decoded output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonLine {
    pub chunk: usize,
    /// Manifest index of the schema.
    pub schema: usize,
    /// JSONSchemaBench id.
    pub id: String,
    /// Index in the plan.
    pub run: usize,
    pub op: Op,
    pub theta: f32,
    pub prompt_tokens: usize,
    pub tokens: Vec<TokenId>,
    /// `eog`, `stop_string` or `max_tokens`.
    pub stop: String,
    /// The generated text.
    pub output: String,
    /// The first brace-balanced substring, if any.
    pub extracted: Option<String>,
    /// Parseable and schema-valid.
    pub valid: bool,
    /// `valid`, `no_json`, `parse_error`, `schema_invalid` or `validator_error: …`.
    pub reason: String,
    pub forward_tokens: u64,
    pub naive_forward_tokens: u64,
    /// Constrained runs: the grammar engine could not compile the schema, so the output was
    /// decoded without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar_error: Option<String>,
}

impl ChunkLine for JsonLine {
    fn unit(&self) -> (u8, usize) {
        (0, self.chunk)
    }
    fn key(&self) -> (u8, usize, usize) {
        (0, self.schema, self.run)
    }
}

/// Where one decoded output belongs.
pub(crate) struct DecodedAt<'a> {
    pub chunk: usize,
    pub entry: &'a SchemaEntry,
    /// Index in the plan.
    pub run: usize,
    pub prompt_tokens: usize,
}

/// What a decode produced for one output.
pub(crate) struct Decoded {
    /// Generated tokens (an end-of-generation token included).
    pub tokens: Vec<TokenId>,
    /// The generated text (control tokens render as nothing).
    pub output: String,
    /// The last token ended generation.
    pub eog: bool,
    pub forward_tokens: u64,
}

impl JsonLine {
    /// The scored line of one output: the stop reason by `gauge json`'s rule (end-of-generation,
    /// else a stop string in the generated text, else the token limit) and the verdict; `whole`
    /// parses the whole output (a constrained run whose grammar compiled).
    pub(crate) fn of_run(
        at: DecodedAt<'_>,
        spec: &RunSpec,
        d: Decoded,
        checker: &SchemaCheck,
        whole: bool,
        grammar_error: Option<String>,
    ) -> JsonLine {
        let stop = if d.eog {
            "eog"
        } else if STOP_STRINGS.iter().any(|s| d.output.contains(s)) {
            "stop_string"
        } else {
            "max_tokens"
        };
        let (valid, reason, extracted) = if whole {
            score_whole(&d.output, checker)
        } else {
            score(&d.output, checker)
        };
        JsonLine {
            chunk: at.chunk,
            schema: at.entry.index,
            id: at.entry.id.clone(),
            run: at.run,
            op: spec.op,
            theta: spec.theta,
            prompt_tokens: at.prompt_tokens,
            naive_forward_tokens: (at.prompt_tokens + d.tokens.len()).saturating_sub(1) as u64,
            tokens: d.tokens,
            stop: stop.into(),
            output: d.output,
            extracted,
            valid,
            reason,
            forward_tokens: d.forward_tokens,
            grammar_error,
        }
    }
}

/// (valid, reason, extracted substring) of one output.
pub fn score(output: &str, checker: &SchemaCheck) -> (bool, String, Option<String>) {
    match first_json(output) {
        Extracted::NoJson => (false, "no_json".into(), None),
        Extracted::Unparsed(s) => (false, "parse_error".into(), Some(s)),
        Extracted::Parsed(s, v) => match checker.check(&v) {
            Ok(true) => (true, "valid".into(), Some(s)),
            Ok(false) => (false, "schema_invalid".into(), Some(s)),
            Err(e) => (false, format!("validator_error: {e}"), Some(s)),
        },
    }
}

/// (valid, reason, parsed text) of a constrained output: the whole output is the JSON value.
pub fn score_whole(output: &str, checker: &SchemaCheck) -> (bool, String, Option<String>) {
    let t = output.trim();
    if t.is_empty() {
        return (false, "no_json".into(), None);
    }
    match schema::parse_json(t) {
        Err(_) => (false, "parse_error".into(), Some(t.to_string())),
        Ok(v) => match checker.check(&v) {
            Ok(true) => (true, "valid".into(), Some(t.to_string())),
            Ok(false) => (false, "schema_invalid".into(), Some(t.to_string())),
            Err(e) => (false, format!("validator_error: {e}"), Some(t.to_string())),
        },
    }
}
