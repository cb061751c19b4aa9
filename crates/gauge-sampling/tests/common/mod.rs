//! Shared loaders for the reference data in `data/` (see `data/PROVENANCE.md`), and the row
//! generators and chain helpers of the fast-path tests (which compare gauge with itself, fast path
//! against fill path, so they need rows of chosen shapes rather than reference data).
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

/// `n_rows` rows of `n_vocab` N(0, sigma²) logits (splitmix64 `seed`); a `quantum > 0` rounds them
/// to its multiples, which makes ties common.
pub fn shaped_rows(
    n_vocab: usize,
    n_rows: usize,
    seed: u64,
    sigma: f64,
    quantum: f64,
) -> Vec<Vec<f32>> {
    let mut g = gauge_sampling::synth::SplitMix64(seed);
    (0..n_rows)
        .map(|_| {
            (0..n_vocab)
                .map(|_| quantize(g.next_normal() * sigma, quantum))
                .collect()
        })
        .collect()
}

/// `x` rounded to a multiple of `quantum` (`0` = no rounding), as f32: quantized rows make ties.
pub fn quantize(x: f64, quantum: f64) -> f32 {
    if quantum > 0.0 {
        ((x / quantum).round() * quantum) as f32
    } else {
        x as f32
    }
}

/// The chain a llama-server style request builds (`params` as JSON).
pub fn chain_for(json: &Value, n_vocab: usize) -> gauge_sampling::Chain {
    let params: gauge_sampling::params::SamplingParams =
        serde_json::from_value(json.clone()).unwrap();
    gauge_sampling::Chain::from_params(&params, n_vocab, None).unwrap()
}

/// A candidate array as exact bits: `(id, logit bits, p bits)`.
pub fn bits(c: &[TokenData]) -> Vec<(i32, u32, u32)> {
    c.iter()
        .map(|t| (t.id, t.logit.to_bits(), t.p.to_bits()))
        .collect()
}

/// A `.npy` file framed by hand (independently of the library's reader): magic, version `major.0`,
/// the header length (u16 for v1, u32 for v2/v3), `header` as given (padding and newline
/// included), then `payload`.
pub fn npy_frame(major: u8, header: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([major, 0]);
    if major == 1 {
        out.extend((header.len() as u16).to_le_bytes());
    } else {
        out.extend((header.len() as u32).to_le_bytes());
    }
    out.extend(header.as_bytes());
    out.extend(payload);
    out
}

/// proptest settings for the fuzz tests: bounded cases, and a fixed seed unless
/// `PROPTEST_RNG_SEED` is set, so CI is reproducible.
pub fn proptest_config(cases: u32, seed: u64) -> proptest::test_runner::Config {
    use proptest::test_runner::{Config, RngSeed};
    let mut c = Config {
        cases,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    if c.rng_seed == RngSeed::Random {
        c.rng_seed = RngSeed::Fixed(seed);
    }
    c
}

/// Run `f` once on every instruction-set level this machine can execute, forced one by one on
/// this thread ([`gauge_sampling::simd::testing`]), and check from the kernels' counters that the
/// forced level, and only it, ran. The fast-path exactness tests run their whole body this way, so
/// each vector path is compared with the fill path bit for bit.
pub fn on_every_level(mut f: impl FnMut()) {
    use gauge_sampling::simd::{available, testing, Level};
    for level in available() {
        testing::force(Some(level));
        let before = testing::runs();
        f();
        let after = testing::runs();
        testing::force(None);
        for l in Level::ALL {
            let ran = after[l as usize] - before[l as usize];
            if l == level {
                assert!(ran > 0, "forced {}: no kernel ran on it", l.name());
            } else {
                assert_eq!(
                    ran,
                    0,
                    "forced {}: {ran} calls ran on {}",
                    level.name(),
                    l.name()
                );
            }
        }
    }
}
