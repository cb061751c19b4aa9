//! Fuzzing of traces (issue 9): random, truncated and corrupted trace JSON and `.npy` bytes go
//! through the trace loader and replay without a panic, and never allocate for sizes the input
//! does not hold. Errors are fine and must carry a message. Bounded case counts (a few seconds
//! in release); a panic fails the test. The RNG seed is fixed for reproducible CI runs; set
//! `PROPTEST_RNG_SEED` (and `PROPTEST_CASES`) to explore further.
//!
//! Sampling params inside a trace use ASCII text only: any Unicode finds a known panic in
//! params.rs (see `fuzz_params.rs`), which is not the trace loader's.

mod common;
use common::{npy_frame, proptest_config};
use gauge_sampling::trace::npy::{parse_npy_f32, read_npy_f32};
use gauge_sampling::trace::{Trace, TraceError};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Value};

/// Bounded cases; a fixed seed unless `PROPTEST_RNG_SEED` is set.
fn config(cases: u32) -> Config {
    proptest_config(cases, 0x0074_7261_6365)
}

/// Text: any characters, or ASCII only (control characters included).
fn text(unicode: bool, max: usize) -> BoxedStrategy<String> {
    let class = if unicode { "." } else { "[\\x00-\\x7f]" };
    proptest::string::string_regex(&format!("{class}{{0,{max}}}"))
        .expect("a valid regex")
        .boxed()
}

fn check_message(e: &TraceError) {
    assert!(
        !e.to_string().trim().is_empty(),
        "an error without a message: {e:?}"
    );
}

/// A JSON leaf at the edges (numbers, infinities spelled out, text).
fn leaf(u: bool) -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec![
            json!(0),
            json!(-1),
            json!(1),
            json!(2),
            json!(3),
            json!(0.5),
            json!(i32::MAX),
            json!(i32::MAX as i64 + 1),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1e300),
            json!(-1e300),
            json!(3.5e38),
            json!("-inf"),
            json!("inf"),
            json!("+inf"),
            json!("nan"),
            json!("NaN"),
            json!("rows.npy"),
            json!(""),
            json!("/dev/null"),
        ]),
        (-40.0f64..40.0).prop_map(|x| json!(x)),
        (-3i64..8).prop_map(|i| json!(i)),
        text(u, 12).prop_map(|s| json!(s)),
    ]
}

fn junk(u: bool) -> impl Strategy<Value = Value> {
    leaf(u).prop_recursive(3, 24, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(text(u, 6), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Inline rows: mostly of a small width, with numbers, infinities as strings and junk.
fn rows() -> impl Strategy<Value = Value> {
    let cell = prop_oneof![
        6 => (-20.0f64..20.0).prop_map(|x| json!(x)),
        2 => Just(json!("-inf")),
        1 => leaf(true),
    ];
    prop_oneof![
        prop::collection::vec(
            prop::collection::vec(cell.clone(), 0..6).prop_map(Value::Array),
            0..5
        )
        .prop_map(Value::Array),
        prop::collection::vec(prop::collection::vec(cell, 4).prop_map(Value::Array), 0..6)
            .prop_map(Value::Array),
        junk(true),
    ]
}

/// Sampling params for a trace: a few fields with plausible values, or junk.
fn params() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        (
            any::<u32>(),
            0i32..5,
            0.0f64..2.0,
            1.0f64..1.5,
            any::<bool>()
        )
            .prop_map(|(seed, top_k, temp, rep, normalized)| json!({
                "seed": seed, "top_k": top_k, "temperature": temp, "repeat_penalty": rep,
                "repeat_penalty_mode": if normalized { "normalized" } else { "ctrl" },
            })),
        junk(false),
    ]
}

/// A trace object with the right field names and random values, sometimes with a field missing.
fn trace_value() -> impl Strategy<Value = Value> {
    (
        prop_oneof![4 => Just(json!(4)), 1 => (0i64..7).prop_map(|n| json!(n)), 1 => leaf(true)],
        params(),
        prop_oneof![
            prop::collection::vec((-2i64..7).prop_map(|i| json!(i)), 0..6).prop_map(Value::Array),
            junk(true),
        ],
        rows(),
        prop::collection::vec(any::<bool>(), 4),
    )
        .prop_map(|(n_vocab, params, history, logits, keep)| {
            let mut m = serde_json::Map::new();
            for (k, (name, v)) in [
                ("n_vocab", n_vocab),
                ("params", params),
                ("history", history),
                ("logits", logits),
            ]
            .into_iter()
            .enumerate()
            {
                if keep[k] || k == 0 {
                    m.insert(name.to_string(), v);
                }
            }
            Value::Object(m)
        })
}

/// Parse a trace from text and, for inline rows, replay it.
fn exercise_trace_text(text: &str) {
    let trace = match Trace::from_json(text) {
        Ok(t) => t,
        Err(e) => return check_message(&e),
    };
    // `.npy` names are not opened here (the file tests below do that).
    if let gauge_sampling::trace::Logits::Inline(_) = trace.logits {
        match trace.rows(std::path::Path::new(".")) {
            Ok(rows) => {
                if let Err(e) = trace.replay_rows(&rows) {
                    check_message(&e);
                }
            }
            Err(e) => check_message(&e),
        }
    }
    // A trace whose params are valid serialises and parses again.
    if trace.params.validate(trace.n_vocab).is_ok() {
        let again = Trace::from_json(&trace.to_value().to_string());
        assert!(again.is_ok(), "{trace:?} does not round-trip: {again:?}");
    }
}

proptest! {
    #![proptest_config(config(2500))]

    #[test]
    fn random_trace_objects_never_panic(v in trace_value()) {
        exercise_trace_text(&v.to_string());
    }

    #[test]
    fn any_json_as_a_trace_never_panics(v in junk(true)) {
        exercise_trace_text(&v.to_string());
    }

    /// A valid trace's text cut anywhere, or with one byte replaced.
    #[test]
    fn truncated_or_corrupted_trace_text_never_panics(
        v in trace_value(),
        cut in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let text = v.to_string().into_bytes();
        let cut_text = String::from_utf8_lossy(&text[..cut.index(text.len() + 1)]).into_owned();
        exercise_trace_text(&cut_text);
        if !text.is_empty() {
            let mut bad = text.clone();
            bad[at.index(text.len())] = byte;
            exercise_trace_text(&String::from_utf8_lossy(&bad));
        }
    }
}

// -------------------------------------------------------------------------------------------------
// .npy bytes

/// A well-formed `.npy` of `<f4` values: version, shape, order and padding chosen at random.
fn npy_file() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![1u8, 2, 3]),
        prop::collection::vec(0usize..5, 0..4),
        any::<bool>(),
        0usize..70,
        any::<bool>(),
    )
        .prop_flat_map(|(major, shape, fortran, pad, quote)| {
            let count: usize = shape.iter().product();
            prop::collection::vec(any::<f32>(), count).prop_map(move |vals| {
                let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
                let shape_text = match dims.len() {
                    1 => format!("({},)", dims[0]),
                    _ => format!("({})", dims.join(", ")),
                };
                let q = if quote { '\'' } else { '"' };
                // gauge reads Fortran order for up to 2 dimensions only.
                let order = if fortran && shape.len() <= 2 { "True" } else { "False" };
                let mut header = format!(
                    "{{{q}descr{q}: {q}<f4{q}, {q}fortran_order{q}: {order}, {q}shape{q}: {shape_text}, }}"
                );
                header.push_str(&" ".repeat(pad));
                header.push('\n');
                let payload: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
                npy_frame(major, &header, &payload)
            })
        })
}

/// A damaged copy: cut short, bytes overwritten, the header length field or text rewritten.
fn damaged(file: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let n = file.len();
    prop_oneof![
        (0..=n).prop_map({
            let f = file.clone();
            move |cut| f[..cut].to_vec()
        }),
        prop::collection::vec((0..n.max(1), any::<u8>()), 1..6).prop_map({
            let f = file.clone();
            move |edits| {
                let mut f = f.clone();
                for (i, b) in edits {
                    if i < f.len() {
                        f[i] = b;
                    }
                }
                f
            }
        }),
        (any::<u32>(), any::<bool>()).prop_map({
            let f = file.clone();
            move |(len, wide)| {
                let mut f = f.clone();
                if f.len() >= 12 {
                    if wide {
                        f[8..12].copy_from_slice(&len.to_le_bytes());
                    } else {
                        f[8..10].copy_from_slice(&(len as u16).to_le_bytes());
                    }
                }
                f
            }
        }),
        (
            prop::sample::select(vec![
                "(99999999999, 99999999999)",
                "(18446744073709551615, 2)",
                "(-1, 2)",
                "(2, 2, 2, 2, 2, 2)",
                "()",
                "(",
                ")",
                "(,)",
                "(3L, 4L)",
                "'<f8'",
                "True",
                "é",
                "",
            ]),
            any::<prop::sample::Index>(),
        )
            .prop_map({
                let f = file;
                move |(text, at)| {
                    let mut f = f.clone();
                    let i = at.index(f.len() + 1);
                    f.splice(i..i, text.bytes());
                    f
                }
            }),
    ]
}

proptest! {
    #![proptest_config(config(3000))]

    /// Well-formed files parse to their own values (the fuzzer's generator is right), and every
    /// damaged copy either parses or is a message, never a panic.
    #[test]
    fn damaged_npy_bytes_never_panic(
        (file, bad) in npy_file().prop_flat_map(|f| (Just(f.clone()), damaged(f)))
    ) {
        let (shape, data) = parse_npy_f32(&file).expect("a well-formed file parses");
        prop_assert_eq!(data.len(), shape.iter().product::<usize>());
        if let Ok((shape, data)) = parse_npy_f32(&bad) {
            prop_assert_eq!(data.len(), shape.iter().product::<usize>());
        }
    }

    /// Random bytes, with or without the magic in front.
    #[test]
    fn random_bytes_as_npy_never_panic(
        magic in any::<bool>(),
        version in prop::collection::vec(any::<u8>(), 0..6),
        rest in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut b = if magic { b"\x93NUMPY".to_vec() } else { Vec::new() };
        b.extend(version);
        b.extend(rest);
        if let Err(e) = parse_npy_f32(&b) {
            prop_assert!(!e.message().is_empty());
        }
    }

    /// The stated length disagrees with what the reader holds: a short reader is an error, a
    /// longer one is read only as far as the stated length.
    #[test]
    fn npy_length_that_disagrees_with_the_reader_never_panics(
        file in npy_file(),
        delta in -20i64..20,
    ) {
        let len = (file.len() as i64 + delta).max(0) as u64;
        let mut src = &file[..];
        let res = read_npy_f32(&mut src, len);
        if delta == 0 {
            prop_assert!(res.is_ok());
        }
        let read = file.len() - src.len();
        prop_assert!(read as u64 <= len, "read {} bytes of a stated {}", read, len);
    }
}

/// Write the file into a scratch folder and load it through a trace, so the regular-file path is
/// fuzzed too (fewer cases: each one touches the file system).
fn load_from_disk(
    dir: &std::path::Path,
    npy: &[u8],
    n_vocab: usize,
) -> Result<Vec<i32>, TraceError> {
    std::fs::write(dir.join("rows.npy"), npy).unwrap();
    let trace = dir.join("trace.json");
    std::fs::write(
        &trace,
        json!({"n_vocab": n_vocab, "params": {"seed": 3}, "logits": "rows.npy"}).to_string(),
    )
    .unwrap();
    gauge_sampling::trace::replay(&trace)
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn damaged_npy_files_through_replay_never_panic(
        bad in npy_file().prop_flat_map(damaged),
        n_vocab in 1usize..5,
    ) {
        let dir = std::env::temp_dir().join(format!("gauge-fuzz-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        if let Err(e) = load_from_disk(&dir, &bad, n_vocab) {
            check_message(&e);
        }
    }
}
