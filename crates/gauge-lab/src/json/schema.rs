//! The A2 schema manifest, the prompt, extraction of the first JSON object and validation
//! (docs/PROTOCOL.md §5.2).
//!
//! * The prompt embeds `json.dumps(schema, indent=2)` exactly as Python writes it: manifest key
//!   order, `", "`-free item separators with newlines, `": "` after keys, `ensure_ascii` escapes.
//!   The schema's raw manifest text is re-laid token by token (numbers verbatim: the manifest was
//!   written by Python, so they already are Python's `repr`), so no order-preserving map is needed.
//! * Extraction (`first_json`): the first `{`, a naive brace count (braces inside strings count
//!   too), the substring at depth 0 parsed as JSON; only the first balanced object is tried.
//! * Validation: the validator class the note recorded for the schema (its own draft), format
//!   keywords as annotations only, no remote references.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::OnceLock;

const MANIFEST: &str = include_str!("../../../../data/a2-schemas.json");

/// One schema of the manifest.
#[derive(Debug, Clone)]
pub struct SchemaEntry {
    /// Position in the manifest.
    pub index: usize,
    /// JSONSchemaBench `unique_id`.
    pub id: String,
    /// Python `jsonschema` validator class the note used (its draft).
    pub validator: String,
    /// The schema as Python's `json.dumps(schema, indent=2)` prints it.
    pub dumped: String,
    /// The parsed schema.
    pub schema: Value,
}

#[derive(Deserialize)]
struct RawEntry<'a> {
    id: String,
    validator: String,
    #[serde(borrow)]
    schema: &'a RawValue,
}

#[derive(Deserialize)]
struct Manifest<'a> {
    #[serde(borrow)]
    schemas: Vec<RawEntry<'a>>,
}

/// All 200 schemas, in manifest order.
pub fn a2_schemas() -> &'static [SchemaEntry] {
    static S: OnceLock<Vec<SchemaEntry>> = OnceLock::new();
    S.get_or_init(|| {
        // The manifest is compiled in and checked by a test, so a parse failure is a build defect.
        let Ok(m) = serde_json::from_str::<Manifest<'_>>(MANIFEST) else {
            return Vec::new();
        };
        m.schemas
            .into_iter()
            .enumerate()
            .map(|(index, e)| SchemaEntry {
                index,
                id: e.id,
                validator: e.validator,
                dumped: python_dumps_indent2(e.schema.get()).unwrap_or_default(),
                schema: serde_json::from_str(e.schema.get()).unwrap_or(Value::Null),
            })
            .collect()
    })
}

/// The prompt of the note's JSON task for a schema.
pub fn json_prompt(entry: &SchemaEntry) -> String {
    format!(
        "Output ONLY a single JSON object that conforms to this JSON Schema. Do not include any explanation.\nJSON Schema:\n{}\nJSON object:\n",
        entry.dumped
    )
}

/// Python's string escaping with `ensure_ascii=True`.
fn py_escape(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Re-lay JSON text as Python's `json.dumps(value, indent=2)` (ensure_ascii, default separators).
/// Returns `None` for malformed input.
pub fn python_dumps_indent2(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() * 2);
    let b = text.as_bytes();
    let mut i = 0usize;
    let mut depth = 0usize;
    // After an opening bracket we wait to see whether the container is empty.
    let mut just_opened = false;
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\n' | b'\r' | b'\t' => {
                i += 1;
                continue;
            }
            b'{' | b'[' => {
                if just_opened {
                    newline(&mut out, depth);
                }
                out.push(c as char);
                depth += 1;
                just_opened = true;
                i += 1;
                continue;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if !just_opened {
                    newline(&mut out, depth);
                }
                out.push(c as char);
                just_opened = false;
                i += 1;
                continue;
            }
            b',' => {
                out.push(',');
                newline(&mut out, depth);
                i += 1;
                continue;
            }
            b':' => {
                out.push_str(": ");
                i += 1;
                continue;
            }
            _ => {}
        }
        if just_opened {
            newline(&mut out, depth);
            just_opened = false;
        }
        if c == b'"' {
            // Find the end of the string token, then re-escape its value.
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            let tok = text.get(start..=i)?;
            let s: String = serde_json::from_str(tok).ok()?;
            py_escape(&s, &mut out);
            i += 1;
        } else {
            // number / true / false / null: verbatim
            let start = i;
            while i < b.len()
                && !matches!(
                    b[i],
                    b',' | b'}' | b']' | b':' | b' ' | b'\n' | b'\r' | b'\t'
                )
            {
                i += 1;
            }
            out.push_str(text.get(start..i)?);
        }
    }
    (depth == 0).then_some(out)
}

/// Parse JSON text as the note's Python driver (`json.loads`) reads it, as far as a [`Value`]
/// can hold it. RFC 8259 puts no bound on a number's size and Python keeps a huge integer exact
/// (and a huge float as ±inf), but serde_json refuses a number beyond f64's range: a model that
/// writes 400 digits inside a grammar would count as a parse error here and as valid JSON there.
/// Such a number stands in as ±`f64::MAX`, which keeps its JSON type and its verdict against
/// every finite bound. (`NaN` and `Infinity`, which Python also reads, are not JSON and stay
/// errors.)
pub fn parse_json(text: &str) -> serde_json::Result<Value> {
    serde_json::from_str(text).or_else(|e| {
        // `RawValue` checks the syntax without computing numbers: where the text is not JSON,
        // its error is the one to report.
        serde_json::from_str::<&RawValue>(text)?;
        serde_json::from_str(&clamp_huge_numbers(text)).map_err(|_| e)
    })
}

/// `text` (syntactically valid JSON) with every number literal that overflows f64 replaced by
/// ±`f64::MAX`; strings are copied untouched.
fn clamp_huge_numbers(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let start = i;
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(b.len());
            }
            b'-' | b'0'..=b'9' => {
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let lit = &text[start..i];
                if lit.parse::<f64>().is_ok_and(f64::is_infinite) {
                    let sign = if lit.starts_with('-') { "-" } else { "" };
                    out.push_str(&format!("{sign}{:e}", f64::MAX));
                    continue;
                }
            }
            _ => i += 1,
        }
        out.push_str(&text[start..i]);
    }
    out
}

/// What `first_json` found in an output.
#[derive(Debug, Clone, PartialEq)]
pub enum Extracted {
    /// No `{`, or no balanced `}`.
    NoJson,
    /// A balanced substring that is not valid JSON.
    Unparsed(String),
    /// A balanced substring and its value.
    Parsed(String, Value),
}

/// The note's `first_json`: the first balanced `{…}` by naive brace counting, parsed.
pub fn first_json(text: &str) -> Extracted {
    let Some(start) = text.find('{') else {
        return Extracted::NoJson;
    };
    let mut depth = 0i64;
    for (off, ch) in text[start..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let sub = &text[start..start + off + 1];
                    return match parse_json(sub) {
                        Ok(v) => Extracted::Parsed(sub.to_string(), v),
                        Err(_) => Extracted::Unparsed(sub.to_string()),
                    };
                }
            }
            _ => {}
        }
    }
    Extracted::NoJson
}

/// A compiled validator for one schema (or the reason it could not be built: every output then
/// counts as invalid, as a Python validator exception did).
#[derive(Debug)]
pub struct SchemaCheck {
    validator: Result<jsonschema::Validator, String>,
}

impl SchemaCheck {
    /// Compile `entry`'s schema with its own draft, format checks off.
    pub fn new(entry: &SchemaEntry) -> Self {
        Self::build(entry, false)
    }

    /// The same with `format` asserted (dates, e-mails, URIs, ...), as constrained A2 reports.
    pub fn with_formats(entry: &SchemaEntry) -> Self {
        Self::build(entry, true)
    }

    fn build(entry: &SchemaEntry, formats: bool) -> Self {
        use jsonschema::Draft;
        let draft = match entry.validator.as_str() {
            "Draft3Validator" | "Draft4Validator" => Draft::Draft4,
            "Draft6Validator" => Draft::Draft6,
            "Draft7Validator" => Draft::Draft7,
            "Draft201909Validator" => Draft::Draft201909,
            _ => Draft::Draft202012,
        };
        let validator = jsonschema::options()
            .with_draft(draft)
            .should_validate_formats(formats)
            .build(&entry.schema)
            .map_err(|e| e.to_string());
        SchemaCheck { validator }
    }

    /// Does `value` conform? `Err` when the schema itself could not be compiled.
    pub fn check(&self, value: &Value) -> Result<bool, String> {
        match &self.validator {
            Ok(v) => Ok(v.is_valid(value)),
            Err(e) => Err(e.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    #[test]
    fn numbers_beyond_f64_parse_as_python_reads_them() {
        // The CI failure of session 5: a grammar-valid output with a huge number.
        let big = "9".repeat(400);
        let text = format!(
            "{{\"n\": {big}, \"m\": -{big}.5, \"e\": 1e999, \"s\": \"1e999 {big}\", \"k\": 12}}"
        );
        assert!(serde_json::from_str::<Value>(&text).is_err());
        let v = parse_json(&text).expect("valid JSON parses");
        assert_eq!(v["n"].as_f64(), Some(f64::MAX));
        assert_eq!(v["m"].as_f64(), Some(-f64::MAX));
        assert_eq!(v["e"].as_f64(), Some(f64::MAX));
        assert_eq!(v["s"], format!("1e999 {big}"), "strings are untouched");
        assert_eq!(v["k"], 12);
        // It validates as the integer it is, and fails a finite bound as Python would.
        let schema = |s: Value| jsonschema::validator_for(&s).unwrap();
        assert!(schema(json!({"type": "integer"})).is_valid(&v["n"]));
        assert!(!schema(json!({"type": "number", "maximum": 1e300})).is_valid(&v["n"]));
        // Text that is not JSON still fails, with serde_json's own error.
        let err = parse_json("{\"n\": 1e999,}").unwrap_err();
        assert!(err.to_string().starts_with("key must be a string"), "{err}");
        assert!(parse_json("[NaN]").is_err());
    }

    #[test]
    fn manifest_has_the_notes_200_schemas() {
        let s = a2_schemas();
        assert_eq!(s.len(), 200);
        let ids: Vec<&str> = s.iter().take(5).map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["o90308", "o33695", "o24544", "o79712", "o31168"]);
        assert!(s
            .iter()
            .all(|e| !e.dumped.is_empty() && e.schema.is_object()));
    }

    #[test]
    fn dumps_lays_out_like_python_indent2() {
        let got = python_dumps_indent2(
            r#"{"b": [1, 2.5e-05, {}], "a": {"x": [], "é": "q\"\n\u00e9"}, "n": null}"#,
        )
        .unwrap();
        let want = "{\n  \"b\": [\n    1,\n    2.5e-05,\n    {}\n  ],\n  \"a\": {\n    \"x\": [],\n    \"\\u00e9\": \"q\\\"\\n\\u00e9\"\n  },\n  \"n\": null\n}";
        assert_eq!(got, want);
        assert_eq!(python_dumps_indent2("{\"a\": 1"), None);
        assert_eq!(
            python_dumps_indent2("\"\u{1F600}\"").unwrap(),
            "\"\\ud83d\\ude00\""
        );
    }

    #[test]
    fn first_json_takes_the_first_balanced_object_naively() {
        assert_eq!(first_json("no braces"), Extracted::NoJson);
        assert_eq!(first_json("x {\"a\": 1"), Extracted::NoJson);
        match first_json("Sure: {\"a\": {\"b\": 2}} and {\"c\": 3}") {
            Extracted::Parsed(s, v) => {
                assert_eq!(s, "{\"a\": {\"b\": 2}}");
                assert_eq!(v["a"]["b"], 2);
            }
            other => panic!("{other:?}"),
        }
        // braces inside strings count too (the note's naive scan)
        assert_eq!(
            first_json("{\"a\": \"}\"}"),
            Extracted::Unparsed("{\"a\": \"}".into())
        );
    }

    #[test]
    fn validation_uses_the_schemas_draft_and_ignores_formats() {
        let mk = |validator: &str, schema: Value| SchemaEntry {
            index: 0,
            id: "t".into(),
            validator: validator.into(),
            dumped: String::new(),
            schema,
        };
        let s = mk(
            "Draft7Validator",
            serde_json::json!({"type": "object", "required": ["u"], "properties": {"u": {"type": "string", "format": "uri"}}}),
        );
        let c = SchemaCheck::new(&s);
        assert_eq!(c.check(&serde_json::json!({"u": "not a uri"})), Ok(true));
        assert_eq!(c.check(&serde_json::json!({"u": 3})), Ok(false));
        assert_eq!(c.check(&serde_json::json!({})), Ok(false));
        // draft-04 boolean exclusiveMaximum vs 2020-12 numeric
        let d4 = mk(
            "Draft4Validator",
            serde_json::json!({"maximum": 5, "exclusiveMaximum": true}),
        );
        assert_eq!(
            SchemaCheck::new(&d4).check(&serde_json::json!(5)),
            Ok(false)
        );
        assert_eq!(SchemaCheck::new(&d4).check(&serde_json::json!(4)), Ok(true));
    }

    #[test]
    fn every_manifest_schema_compiles() {
        let bad: Vec<String> = a2_schemas()
            .iter()
            .filter_map(|e| {
                SchemaCheck::new(e)
                    .validator
                    .err()
                    .map(|m| format!("{}: {m}", e.id))
            })
            .collect();
        assert!(bad.is_empty(), "{bad:?}");
    }
}
