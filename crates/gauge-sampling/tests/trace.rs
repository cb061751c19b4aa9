//! Trace replay: inline rows and `.npy` rows give llama.cpp's tokens, and every malformed trace is a
//! typed error that says what is wrong.

mod common;

use gauge_sampling::trace::npy::{self, parse_npy_f32};
use gauge_sampling::trace::{replay, Logits, Trace, TraceError};
use gauge_sampling::SamplingError;
use serde_json::{json, Value};
use std::path::PathBuf;

/// A fresh scratch folder for one test (no tempfile dependency).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gauge-trace-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `.npy` file written by hand (independently of the library's writer).
fn npy_bytes(major: u8, descr: &str, fortran: bool, shape: &str, payload: &[u8]) -> Vec<u8> {
    let order = if fortran { "True" } else { "False" };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
    let prefix = if major == 1 { 10 } else { 12 };
    while (prefix + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    common::npy_frame(major, &header, payload)
}

fn f32_bytes(vals: &[f32]) -> Vec<u8> {
    vals.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn write_trace(dir: &std::path::Path, v: &Value) -> PathBuf {
    write(dir, "trace.json", v.to_string().as_bytes())
}

/// llama.cpp's `test_dist_singleton_rng`: dist(seed) makes one draw on the first call, then over
/// 256 equal logits it picks the recorded ids. As a trace: a chain that is only `dist` (empty
/// `samplers`, no bias), a first row where one token is finite (one draw, that token), then four
/// flat rows.
fn dist_rng_case() -> (u32, usize, Vec<Vec<f32>>, Vec<i32>) {
    let rec = common::vectors("test_dist_singleton_rng")
        .pop()
        .expect("dist vector");
    let seed = rec["params"]["seed"].as_u64().unwrap() as u32;
    let n_vocab = rec["then"]["n_vocab"].as_u64().unwrap() as usize;
    assert_eq!(rec["then"]["logits"], "all 0.0");
    let mut want = vec![rec["first_call"]["singleton_selected_id"].as_i64().unwrap() as i32];
    want.extend(common::i32s(&rec["then"]["singleton_ids"]));
    let mut first = vec![f32::NEG_INFINITY; n_vocab];
    first[want[0] as usize] = 0.0;
    let mut rows = vec![first];
    rows.extend((1..want.len()).map(|_| vec![0.0f32; n_vocab]));
    (seed, n_vocab, rows, want)
}

fn inf_json(x: f32) -> Value {
    if x == f32::NEG_INFINITY {
        json!("-inf")
    } else {
        json!(x)
    }
}

#[test]
fn inline_trace_reproduces_llama_cpp_dist_draws() {
    let (seed, n_vocab, rows, want) = dist_rng_case();
    let dir = scratch("inline-dist");
    let rows_json: Vec<Value> = rows
        .iter()
        .map(|r| Value::Array(r.iter().map(|&x| inf_json(x)).collect()))
        .collect();
    let path = write_trace(
        &dir,
        &json!({"n_vocab": n_vocab, "params": {"seed": seed, "samplers": []}, "logits": rows_json}),
    );
    assert_eq!(replay(&path).unwrap(), want);
}

#[test]
fn npy_trace_reproduces_llama_cpp_dist_draws() {
    let (seed, n_vocab, rows, want) = dist_rng_case();
    let dir = scratch("npy-dist");
    let flat: Vec<f32> = rows.concat();
    write(
        &dir,
        "rows.npy",
        &npy_bytes(
            1,
            "<f4",
            false,
            &format!("({}, {n_vocab})", rows.len()),
            &f32_bytes(&flat),
        ),
    );
    let path = write_trace(
        &dir,
        &json!({"n_vocab": n_vocab, "params": {"seed": seed, "samplers": ""}, "logits": "rows.npy"}),
    );
    assert_eq!(replay(&path).unwrap(), want);
}

#[test]
fn history_is_accepted_as_prompt_before_the_first_row() {
    // temp 0 = argmax after the penalty. Token 0 is in the prompt: 2.0 / 2 = 1.0 < 1.5, so row 1
    // picks 1; then both are seen: 1.0 vs 0.75, so row 2 picks 0.
    let dir = scratch("history");
    let rows = json!([[2.0, 1.5, 0.0, -1.0], [2.0, 1.5, 0.0, -1.0]]);
    let params = json!({"seed": 1, "temperature": 0, "repeat_penalty": 2.0});
    let path = write_trace(
        &dir,
        &json!({"n_vocab": 4, "params": params, "history": [0], "logits": rows}),
    );
    assert_eq!(replay(&path).unwrap(), vec![1, 0]);
    // the gauge field penalize_prompt = false: the prompt token is not seen, row 1 picks 0
    let params =
        json!({"seed": 1, "temperature": 0, "repeat_penalty": 2.0, "penalize_prompt": false});
    let path = write_trace(
        &dir,
        &json!({"n_vocab": 4, "params": params, "history": [0], "logits": rows}),
    );
    assert_eq!(replay(&path).unwrap(), vec![0, 1]);
}

#[test]
fn npy_v2_and_fortran_order_are_read() {
    let vals = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let (shape, data) =
        parse_npy_f32(&npy_bytes(2, "<f4", false, "(2, 3)", &f32_bytes(&vals))).unwrap();
    assert_eq!((shape, data), (vec![2, 3], vals.to_vec()));
    // column-major storage of [[1, 2, 3], [4, 5, 6]]
    let col = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
    let (shape, data) =
        parse_npy_f32(&npy_bytes(1, "<f4", true, "(2, 3)", &f32_bytes(&col))).unwrap();
    assert_eq!((shape, data), (vec![2, 3], vals.to_vec()));
}

#[test]
fn library_npy_writer_round_trips() {
    let vals = [0.5f32, f32::NEG_INFINITY, -2.25, 7.0];
    let mut buf = Vec::new();
    npy::write_npy_f32(&mut buf, 2, &vals).unwrap();
    assert_eq!(buf.len() % 16, 0);
    assert_eq!(parse_npy_f32(&buf).unwrap(), (vec![2, 2], vals.to_vec()));
}

#[test]
fn trace_json_round_trips_with_non_finite_logits() {
    let t = Trace::from_json(&json!({"n_vocab": 2, "params": {"seed": 3, "top_k": 1}, "history": [1], "logits": [[0.5, "-inf"]]}).to_string()).unwrap();
    assert_eq!(t.logits, Logits::Inline(vec![vec![0.5, f32::NEG_INFINITY]]));
    assert_eq!(Trace::from_json(&t.to_value().to_string()).unwrap(), t);
}

// ------------------------------------------------------------------------------------------------
// Malformed traces

fn replay_json(name: &str, v: Value) -> TraceError {
    let dir = scratch(name);
    replay(write_trace(&dir, &v)).unwrap_err()
}

#[test]
fn malformed_json_is_a_json_error() {
    let dir = scratch("bad-json");
    let p = write(&dir, "trace.json", b"{\"n_vocab\": 4, \"logits\": [[1, 2");
    assert!(matches!(replay(&p).unwrap_err(), TraceError::Json(_)));
    for (name, v) in [
        ("no-n-vocab", json!({"logits": [[1.0]]})),
        ("zero-n-vocab", json!({"n_vocab": 0, "logits": []})),
        ("no-logits", json!({"n_vocab": 1})),
        ("logits-number", json!({"n_vocab": 1, "logits": 3})),
        ("row-not-array", json!({"n_vocab": 1, "logits": [1.0]})),
        ("bad-value", json!({"n_vocab": 2, "logits": [[1.0, "big"]]})),
        (
            "history-text",
            json!({"n_vocab": 2, "history": ["a"], "logits": []}),
        ),
    ] {
        let err = replay_json(name, v.clone());
        assert!(matches!(err, TraceError::Json(_)), "{v}: {err:?}");
    }
}

#[test]
fn inline_row_of_wrong_width() {
    let err = replay_json(
        "width",
        json!({"n_vocab": 3, "logits": [[0.0, 1.0, 2.0], [0.0, 1.0]]}),
    );
    assert!(
        matches!(
            err,
            TraceError::RowWidth {
                row: 1,
                expected: 3,
                got: 2
            }
        ),
        "{err:?}"
    );
}

#[test]
fn history_id_out_of_range() {
    for (name, id) in [("hist-big", 4i64), ("hist-neg", -1)] {
        let err = replay_json(
            name,
            json!({"n_vocab": 4, "history": [1, id], "logits": []}),
        );
        assert!(
            matches!(&err, TraceError::Sampling(SamplingError::TokenOutOfRange { field, token, n_vocab: 4 }) if field == "history" && *token == id),
            "{err:?}"
        );
    }
}

#[test]
fn bad_params_are_sampling_errors() {
    let err = replay_json(
        "params-range",
        json!({"n_vocab": 2, "params": {"top_p": 2.0}, "logits": []}),
    );
    assert!(
        matches!(&err, TraceError::Sampling(SamplingError::Param { field, .. }) if field == "top_p"),
        "{err:?}"
    );
    // DRY on with its default string breakers: a trace has no vocabulary
    let err = replay_json(
        "params-vocab",
        json!({"n_vocab": 2, "params": {"dry_multiplier": 0.8}, "logits": []}),
    );
    assert!(
        matches!(err, TraceError::Sampling(SamplingError::NeedsVocab { .. })),
        "{err:?}"
    );
}

#[test]
fn nan_logit_is_rejected_by_the_chain() {
    let err = replay_json(
        "nan",
        json!({"n_vocab": 2, "params": {"seed": 1}, "logits": [[0.0, "nan"]]}),
    );
    assert!(
        matches!(
            err,
            TraceError::Sampling(SamplingError::NonFiniteLogit { index: 1, .. })
        ),
        "{err:?}"
    );
}

#[test]
fn missing_files_are_io_errors() {
    let dir = scratch("missing");
    assert!(matches!(
        replay(dir.join("nope.json")).unwrap_err(),
        TraceError::Io { .. }
    ));
    let p = write_trace(&dir, &json!({"n_vocab": 2, "logits": "absent.npy"}));
    match replay(p).unwrap_err() {
        TraceError::Io { path, .. } => assert!(path.ends_with("absent.npy")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn npy_with_wrong_dtype_shape_or_size_is_an_npy_error() {
    let four = f32_bytes(&[0.0, 1.0, 2.0, 3.0]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("f8", npy_bytes(1, "<f8", false, "(1, 2)", &four), "dtype"),
        ("be", npy_bytes(1, ">f4", false, "(2, 2)", &four), "dtype"),
        (
            "width",
            npy_bytes(1, "<f4", false, "(1, 4)", &four),
            "n_vocab",
        ),
        ("1d", npy_bytes(1, "<f4", false, "(4,)", &four), "shape"),
        (
            "3d",
            npy_bytes(1, "<f4", false, "(1, 2, 2)", &four),
            "shape",
        ),
        (
            "short",
            npy_bytes(1, "<f4", false, "(3, 2)", &four),
            "data bytes",
        ),
        (
            "long",
            npy_bytes(1, "<f4", false, "(1, 2)", &four),
            "data bytes",
        ),
        ("magic", b"PK\x03\x04 not numpy at all".to_vec(), "magic"),
        (
            "version",
            npy_bytes(9, "<f4", false, "(2, 2)", &four),
            "version",
        ),
    ];
    for (name, bytes, says) in cases {
        let dir = scratch(&format!("npy-{name}"));
        write(&dir, "rows.npy", &bytes);
        let p = write_trace(&dir, &json!({"n_vocab": 2, "logits": "rows.npy"}));
        match replay(p).unwrap_err() {
            TraceError::Npy { message, .. } => assert!(message.contains(says), "{name}: {message}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}
