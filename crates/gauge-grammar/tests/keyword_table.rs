//! Every JSON Schema keyword is either enforced by the grammar or refused by name (issue 21).
//!
//! The keyword list and the cases are reference data (`tests/data/json-schema-keywords.json`,
//! from the specifications), and what is valid is decided by an independent validator (the
//! `jsonschema` crate, each schema's own draft, formats asserted), never by the code under test:
//! * a keyword the table calls enforced: on every case, the grammar accepts an instance exactly
//!   when the validator says it is valid;
//! * an annotation: adding it changes nothing, for the grammar and the validator alike;
//! * a refused keyword: a strict compile is an error naming it and its path, and a lenient one
//!   compiles and reports it as dropped.

use std::sync::OnceLock;

use gauge_grammar::keywords::{support, Support};
use gauge_grammar::{ConstraintRequest, ConstraintSpec, GrammarError, GrammarState, GrammarVocab};
use serde_json::{json, Value};

const EOS: u32 = 256;

fn byte_vocab() -> &'static GrammarVocab {
    static V: OnceLock<GrammarVocab> = OnceLock::new();
    V.get_or_init(|| {
        let mut words: Vec<Vec<u8>> = (0..256u32).map(|b| vec![b as u8]).collect();
        words.push(b"\xFF<eos>".to_vec());
        GrammarVocab::from_token_bytes(&words, &[EOS]).expect("byte vocabulary")
    })
}

fn reference() -> Value {
    serde_json::from_str(include_str!("data/json-schema-keywords.json")).expect("reference data")
}

fn compile(schema: &Value, lenient: bool) -> Result<GrammarState, GrammarError> {
    let req = ConstraintRequest::new(ConstraintSpec::JsonSchema(schema.clone()), "json_schema")
        .with_lenient(lenient);
    GrammarState::compile(&req, byte_vocab())
}

/// Does the grammar accept the compact text of `instance`?
fn accepts(state: &GrammarState, instance: &Value) -> bool {
    let mut st = state.clone();
    for &b in serde_json::to_string(instance).unwrap().as_bytes() {
        if !st.is_allowed(b as u32) {
            return false;
        }
        st.consume(b as u32).expect("allowed byte");
    }
    st.is_allowed(EOS)
}

fn valid(schema: &Value, instance: &Value) -> bool {
    // `format` asserted, as the grammar enforces it (JSON Schema leaves that to the validator).
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap_or_else(|e| panic!("the validator refuses {schema}: {e}"))
        .is_valid(instance)
}

#[test]
fn the_table_covers_every_keyword_of_every_draft() {
    let r = reference();
    for k in r["keywords"].as_array().unwrap() {
        let k = k.as_str().unwrap();
        assert!(
            support(k).is_some(),
            "`{k}` is a JSON Schema keyword missing from the table"
        );
    }
}

#[test]
fn enforced_keywords_accept_exactly_what_the_validator_accepts() {
    let r = reference();
    let mut seen = std::collections::BTreeSet::new();
    for case in r["enforced_cases"].as_array().unwrap() {
        let schema = &case["schema"];
        let st = compile(schema, false).unwrap_or_else(|e| panic!("{schema}: {e}"));
        let mut both = [false, false];
        for inst in case["instances"].as_array().unwrap() {
            let want = valid(schema, inst);
            assert_eq!(accepts(&st, inst), want, "{schema} on {inst}");
            both[want as usize] = true;
        }
        assert_eq!(
            both,
            [true, true],
            "{schema}: the case needs a valid and an invalid instance"
        );
        seen.extend(schema.as_object().unwrap().keys().cloned());
    }
    // Every keyword the table calls enforced is exercised by some case.
    for k in r["keywords"].as_array().unwrap() {
        let k = k.as_str().unwrap();
        if support(k) == Some(Support::Enforced) {
            assert!(seen.contains(k), "no case exercises enforced `{k}`");
        }
    }
}

/// A value of the right shape for `keyword` (what it holds does not matter here).
fn sample(keyword: &str) -> Value {
    match keyword {
        "$schema" => json!("https://json-schema.org/draft/2020-12/schema"),
        "$id" | "id" => json!("https://example.com/s.json"),
        "$anchor" | "$dynamicAnchor" => json!("here"),
        "$recursiveAnchor" | "uniqueItems" | "deprecated" | "readOnly" | "writeOnly" => json!(true),
        "$vocabulary" | "$defs" | "definitions" => json!({}),
        "$dynamicRef" => json!("#here"),
        "$recursiveRef" => json!("#"),
        "minContains" | "maxContains" => json!(1),
        "dependentRequired" | "dependencies" => json!({"a": ["b"]}),
        "dependentSchemas" => json!({"a": {"required": ["b"]}}),
        "examples" => json!([1]),
        "title" | "description" | "$comment" | "contentEncoding" | "contentMediaType" => {
            json!("text")
        }
        "default" => json!(1),
        _ => json!({"type": "integer"}),
    }
}

#[test]
fn annotations_change_nothing() {
    let r = reference();
    let base = json!({"type": "integer"});
    let instances = [json!(1), json!("a"), json!(null)];
    for k in r["keywords"].as_array().unwrap() {
        let k = k.as_str().unwrap();
        if support(k) != Some(Support::Annotation) {
            continue;
        }
        let mut schema = base.clone();
        schema[k] = sample(k);
        let st = compile(&schema, false).unwrap_or_else(|e| panic!("{schema}: {e}"));
        for inst in &instances {
            assert_eq!(accepts(&st, inst), valid(&base, inst), "`{k}` on {inst}");
        }
    }
}

#[test]
fn refused_keywords_are_named_with_their_path_and_lenient_reports_them() {
    let r = reference();
    for k in r["keywords"].as_array().unwrap() {
        let k = k.as_str().unwrap();
        let Some(Support::Refused(_)) = support(k) else {
            continue;
        };
        let mut inner = json!({"type": "array"});
        inner[k] = sample(k);
        let schema = json!({"type": "object", "properties": {"p": inner}});
        let path = format!("#/properties/p/{k}");
        match compile(&schema, false) {
            Err(GrammarError::Unenforced {
                keyword, path: p, ..
            }) => {
                assert_eq!((keyword.as_str(), p.as_str()), (k, path.as_str()))
            }
            Err(e) => panic!("`{k}`: {e}"),
            Ok(_) => panic!("`{k}` compiled strictly"),
        }
        let st = compile(&schema, true).unwrap_or_else(|e| panic!("lenient `{k}`: {e}"));
        assert!(
            st.dropped()
                .iter()
                .any(|u| u.keyword == k && u.path == path),
            "`{k}`: {:?}",
            st.dropped()
        );
    }
    // An unknown format is refused like a keyword; a known one is enforced (cases above).
    match compile(&json!({"type": "string", "format": "bogus"}), false) {
        Err(GrammarError::Unenforced { keyword, path, .. }) => {
            assert_eq!(
                (keyword.as_str(), path.as_str()),
                ("format: \"bogus\"", "#/format")
            )
        }
        other => panic!("{other:?}"),
    }
}

/// docs/server.md's keyword table and limits say what the code does: every keyword in the row of
/// its treatment, every enforced format, and the two size limits.
#[test]
fn the_server_docs_list_every_keyword_as_the_table_treats_it() {
    use gauge_grammar::keywords::{FORMATS, KEYWORDS, MAX_SCHEMA_NODES};
    use gauge_grammar::limits::MAX_GRAMMAR_RULES;
    let doc = include_str!("../../../docs/server.md");
    let row = |label: &str| -> Vec<&str> {
        let line = doc
            .lines()
            .find(|l| l.starts_with(&format!("| {label}")))
            .unwrap_or_else(|| panic!("docs/server.md has no `| {label}` row"));
        line.split('`').skip(1).step_by(2).collect()
    };
    for (label, want) in [
        ("enforced", |s: Support| s == Support::Enforced),
        ("annotation", |s: Support| s == Support::Annotation),
        ("refused", |s: Support| matches!(s, Support::Refused(_))),
    ] as [(&str, fn(Support) -> bool); 3]
    {
        let listed = row(label);
        let table: Vec<&str> = KEYWORDS
            .iter()
            .filter(|(_, s)| want(*s))
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(listed, table, "docs/server.md's `{label}` row");
    }
    let formats = doc
        .lines()
        .find(|l| l.starts_with("- `format` is enforced for"))
        .expect("the formats line");
    let listed: Vec<&str> = formats
        .split(';')
        .next()
        .unwrap()
        .split('`')
        .skip(3)
        .step_by(2)
        .collect();
    assert_eq!(listed, FORMATS, "docs/server.md's format list");
    let limits = |n: usize| format!("| {} |", fmt_thousands(n));
    assert!(doc.contains(&limits(MAX_SCHEMA_NODES)), "schema limit");
    assert!(doc.contains(&limits(MAX_GRAMMAR_RULES)), "grammar limit");
}

fn fmt_thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
