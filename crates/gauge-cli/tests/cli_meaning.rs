//! The CLI never changes a request's meaning in silence (issue 9): `gauge chain` with DRY and no
//! model, `--model` resolving breakers, `--params` files with aliases and unknown fields, `--strict`.

mod common;
use common::*;
use serde_json::Value;
use std::io::Write;

fn params_file(json: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(json.as_bytes()).unwrap();
    f
}

#[test]
fn chain_with_dry_and_no_model_prints_unresolved_breakers() {
    let o = gauge(&["chain", "--dry-multiplier", "0.8"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("-> dry "), "{out}");
    assert!(out.contains("unresolved"), "{out}");
    let o = gauge(&["chain", "--dry-multiplier", "0.8", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["chain"].as_str().unwrap().contains("-> dry "), "{v}");
    assert_eq!(v["notes"].as_array().unwrap().len(), 1, "{v}");
}

#[test]
fn chain_with_a_model_resolves_dry_breakers() {
    let o = gauge(&[
        "chain",
        "--dry-multiplier",
        "0.8",
        "--model",
        "smollm2-135m-instruct",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["chain"].as_str().unwrap().contains("-> dry "), "{v}");
    assert_eq!(v["notes"], serde_json::json!([]), "{v}");
}

#[test]
fn chain_with_string_bias_and_no_model_says_to_pass_one() {
    let f = params_file(r#"{"logit_bias": {"hello": -1}}"#);
    let o = gauge(&["chain", "--params", f.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--model"), "{}", stderr(&o));
}

#[test]
fn params_file_alias_is_overridden_by_the_flag_not_conflicting() {
    let f = params_file(r#"{"temp": 0.5, "max_tokens": 3}"#);
    let o = gauge(&[
        "chain",
        "--params",
        f.path().to_str().unwrap(),
        "--temp",
        "0.7",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["params"].as_str().unwrap().contains("temp = 0.700"),
        "{v}"
    );
}

#[test]
fn params_file_conflicting_aliases_exit_2_naming_both() {
    let f = params_file(r#"{"max_tokens": 3, "max_completion_tokens": 20}"#);
    let o = gauge(&["chain", "--params", f.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("max_tokens") && err.contains("max_completion_tokens"),
        "{err}"
    );
}

#[test]
fn params_file_unknown_fields_are_listed_and_strict_refuses_them() {
    let f = params_file(r#"{"temperature": 0.5, "frobnicate": 1}"#);
    let path = f.path().to_str().unwrap();
    let o = gauge(&["chain", "--params", path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("frobnicate"), "{}", stderr(&o));
    let o = gauge(&["chain", "--params", path, "--strict"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("frobnicate"), "{}", stderr(&o));
}

#[test]
fn refused_field_in_params_file_exits_2_naming_it() {
    let f = params_file(r#"{"min_tokens": 5}"#);
    let o = gauge(&["chain", "--params", f.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("min_tokens"), "{}", stderr(&o));
}
