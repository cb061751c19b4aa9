//! Shared loaders for the reference data in `data/` (see `data/PROVENANCE.md`).
#![allow(dead_code)]

use gauge_sampling::{Candidates, TokenData};
use serde_json::Value;

/// Path of a file in the workspace `data/` folder.
pub fn data_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(name)
}

/// Parse a JSON file from `data/`.
pub fn load_json(name: &str) -> Value {
    let text =
        std::fs::read_to_string(data_path(name)).unwrap_or_else(|e| panic!("read {name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {name}: {e}"))
}

/// All records of llama.cpp's test-sampling vectors with `test == name`.
pub fn vectors(test: &str) -> Vec<Value> {
    let v = load_json("test-sampling-vectors.json");
    v["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["test"] == test)
        .cloned()
        .collect()
}

/// A float that may be encoded as "-inf", "inf" or "nan".
pub fn f32_of(v: &Value) -> f32 {
    match v {
        Value::Number(n) => n.as_f64().unwrap() as f32,
        Value::String(s) => match s.as_str() {
            "-inf" => f32::NEG_INFINITY,
            "inf" => f32::INFINITY,
            "nan" => f32::NAN,
            other => panic!("bad float string {other}"),
        },
        other => panic!("not a float: {other}"),
    }
}

pub fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(f32_of).collect()
}

pub fn i32s(v: &Value) -> Vec<i32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap() as i32)
        .collect()
}

/// The test's input array: `{id: i, logit: input_logits[i], p: input_probs[i]}`, unsorted.
pub fn input_candidates(rec: &Value) -> Candidates {
    let logits = f32s(&rec["input_logits"]);
    let probs = f32s(&rec["input_probs"]);
    let data = logits
        .iter()
        .zip(&probs)
        .enumerate()
        .map(|(i, (&logit, &p))| TokenData {
            id: i as i32,
            logit,
            p,
        })
        .collect();
    Candidates::from_data(data, false)
}

/// Check ids, order and |Δp| < 1e-5 against the record's `actual` ids and `expected_probs`.
pub fn assert_matches(rec: &Value, cur: &Candidates) {
    let want_ids = i32s(&rec["actual"]["ids"]);
    let want_p = f32s(&rec["expected_probs"]);
    let got_ids = cur.ids();
    assert_eq!(got_ids, want_ids, "ids/order differ for {}", rec["call"]);
    assert_eq!(cur.len(), want_p.len(), "size differs for {}", rec["call"]);
    for (t, &w) in cur.as_slice().iter().zip(&want_p) {
        assert!(
            (t.p - w).abs() < 1e-5,
            "p of id {} is {} but expected {} in {}",
            t.id,
            t.p,
            w,
            rec["call"]
        );
    }
}
