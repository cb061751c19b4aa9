//! The table of request fields (`fields::SAMPLING`) is the one list (issue 22 §2): every name in
//! it, aliases included, is read by the parser (a wrong type is an error naming it and saying
//! what the table says it takes), the params serialise under its names, no name is in two lists,
//! and docs/server.md's field table is the table's text.

#[path = "../../test-support/skip.rs"]
mod skip;

use gauge_sampling::fields::{self, JsonType, SAMPLING};
use gauge_sampling::params::SamplingParams;
use gauge_sampling::Preset;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// One value of each JSON type (an integer and a fraction for the two kinds of number).
fn samples() -> [Value; 6] {
    [
        json!(true),
        json!(7),
        json!(0.5),
        json!("x"),
        json!([]),
        json!({}),
    ]
}

#[test]
fn every_name_with_a_wrong_type_is_an_error_naming_it() {
    let mut checked = 0;
    for f in SAMPLING {
        let wrong: Vec<Value> = samples()
            .into_iter()
            .filter(|v| !f.takes.accepts(v))
            .collect();
        assert!(!wrong.is_empty(), "{} takes every JSON type", f.name);
        for name in f.names() {
            for v in &wrong {
                let req = json!({ name: v });
                let e = SamplingParams::from_value(&req).expect_err(&format!(
                    "{req} must be refused: {} takes {}",
                    f.name, f.takes.text
                ));
                assert_eq!(e.field(), Some(name), "{req}: {e}");
                let msg = e.to_string();
                assert!(
                    msg.contains(&format!("`{name}`")) && msg.contains(f.takes.text),
                    "{req}: the error should name `{name}` and say it takes {:?}: {msg}",
                    f.takes.text
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} requests checked");
}

#[test]
fn a_name_belongs_to_one_field_and_one_list() {
    let mut seen = BTreeSet::new();
    let other_lists = fields::REFUSED
        .iter()
        .map(|r| r.name)
        .chain(fields::NO_EFFECT_FIELDS.iter().copied());
    for name in fields::sampling_names().chain(other_lists) {
        assert!(seen.insert(name), "`{name}` is listed twice");
    }
    for f in SAMPLING {
        if let Some(with) = f.read_with() {
            let reader = fields::field(with).expect("read_with names a field");
            assert!(
                reader.read_with().is_none(),
                "{} is read by a reader",
                f.name
            );
        }
        if let Some(key) = f.gguf {
            assert!(key.starts_with("general.sampling."), "{key}");
            assert_eq!(fields::by_gguf_key(key).map(|g| g.name), Some(f.name));
        }
    }
}

/// `to_value` writes the table's canonical names: the struct's serde names are no fourth list.
#[test]
fn params_serialise_under_the_tables_names() {
    let mut p = Preset::Json.params();
    p.dry_sequence_breakers = Some(vec!["\n".into()]);
    p.dry_sequence_breaker_ids = Some(vec![vec![1]]);
    let written: BTreeSet<String> = p.to_value().as_object().unwrap().keys().cloned().collect();
    let own: BTreeSet<String> = SAMPLING
        .iter()
        .filter(|f| f.read_with().is_none() && f.name != "do_sample")
        .map(|f| f.name.to_string())
        .collect();
    assert_eq!(
        written, own,
        "to_value's keys vs the table's fields with their own reader"
    );
    // And they read back: the names of the table, as the table's readers read them.
    assert_eq!(SamplingParams::from_value(&p.to_value()).unwrap(), p);
}

#[test]
fn json_types_in_the_catalog_are_the_tables() {
    let c = fields::catalog();
    let rows = c["sampling"].as_array().unwrap();
    assert_eq!(rows.len(), SAMPLING.len());
    for (row, f) in rows.iter().zip(SAMPLING) {
        assert_eq!(row["name"], f.name);
        let types: Vec<&str> = f.takes.json.iter().map(|t| t.name()).collect();
        assert_eq!(row["json"], json!(types));
        let names: Vec<&str> = f.names().collect();
        let mut from_catalog = vec![row["name"].as_str().unwrap()];
        from_catalog.extend(
            row["aliases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["name"].as_str().unwrap()),
        );
        assert_eq!(from_catalog, names);
    }
    assert_eq!(
        c["refused"].as_array().unwrap().len(),
        fields::REFUSED.len()
    );
    assert!(JsonType::Integer.name() == "integer");
}

const BEGIN: &str = "<!-- sampling-fields: generated from gauge_sampling::fields::SAMPLING; regenerate with \
                     GAUGE_WRITE_DOCS=1 cargo test --release -p gauge-sampling --test fields_table -->\n";
const END: &str = "<!-- end sampling-fields -->";

/// docs/server.md's field table is `markdown_table()`; every refused and no-effect name is in
/// the page too. `GAUGE_WRITE_DOCS=1` rewrites the table.
#[test]
fn docs_server_md_lists_the_table() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/server.md");
    let Ok(doc) = std::fs::read_to_string(&path) else {
        skip::skip_unless_ci(&format!(
            "{} is missing (a packaged crate has no docs/)",
            path.display()
        ));
        return;
    };
    let start = doc
        .find(BEGIN)
        .expect("docs/server.md has the begin marker")
        + BEGIN.len();
    let end = start
        + doc[start..]
            .find(END)
            .expect("docs/server.md has the end marker");
    let table = fields::markdown_table();
    if std::env::var_os("GAUGE_WRITE_DOCS").is_some() {
        let new = format!("{}{table}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, new).expect("writing docs/server.md");
    } else {
        assert!(
            doc[start..end] == table,
            "docs/server.md's field table differs from gauge_sampling::fields::SAMPLING: \
             regenerate it with GAUGE_WRITE_DOCS=1 cargo test --release -p gauge-sampling \
             --test fields_table"
        );
    }
    for name in fields::REFUSED
        .iter()
        .map(|r| r.name)
        .chain(fields::NO_EFFECT_FIELDS.iter().copied())
        .chain(fields::CONSTRAINT_FIELDS.iter().copied())
    {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/server.md does not mention `{name}`"
        );
    }
}
