//! `gauge replay --trace` and `gauge chain --params` treat an unknown sampling field the same way
//! (issue 21): named on stderr and ignored, refused with `--strict` (exit 2).

mod common;
use common::*;
use serde_json::{json, Value};

/// A trace whose `params` misspell `temperature`: at temperature 0 the argmax (token 1) wins every
/// row; at the default temperature the seeded draw may pick either token.
fn typo_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let trace = json!({
        "n_vocab": 2,
        "params": {"temprature": 0, "seed": 7},
        "logits": vec![vec![0.0f32, 0.5]; 4],
    });
    let path = dir.join("trace.json");
    std::fs::write(&path, trace.to_string()).unwrap();
    path
}

#[test]
fn replay_names_an_unknown_params_field_and_strict_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = typo_trace(dir.path());
    let path = path.to_str().unwrap();

    let o = gauge(&["replay", "--trace", path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("temprature") && stderr(&o).contains("--strict"),
        "replay must name the unknown field: {}",
        stderr(&o)
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tokens"].as_array().unwrap().len(), 4, "{v}");

    let o = gauge(&["replay", "--trace", path, "--strict"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("temprature"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "nothing is replayed: {}", stdout(&o));
}

#[test]
fn chain_and_replay_word_an_unknown_field_alike() {
    let dir = tempfile::tempdir().unwrap();
    let trace = typo_trace(dir.path());
    let params = dir.path().join("params.json");
    std::fs::write(&params, r#"{"temprature": 0, "seed": 7}"#).unwrap();
    let replay = gauge(&["replay", "--trace", trace.to_str().unwrap()]);
    let chain = gauge(&["chain", "--params", params.to_str().unwrap()]);
    for (what, o) in [("replay", &replay), ("chain", &chain)] {
        assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(o));
        let err = stderr(o);
        assert!(
            err.contains("ignoring unknown field(s) `temprature`"),
            "{what}: {err}"
        );
    }
    let strict = gauge(&["chain", "--params", params.to_str().unwrap(), "--strict"]);
    assert_eq!(strict.status.code(), Some(2), "{}", stderr(&strict));
    assert!(
        stderr(&strict).contains("temprature"),
        "{}",
        stderr(&strict)
    );
}
