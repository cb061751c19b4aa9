//! The bootstrap's generator against CPython's `random` (reference numbers in data/pyrandom.json,
//! produced by CPython 3.11 as described in data/PROVENANCE.md).

use gauge_lab::stats::{bootstrap_ci, PyRandom};
use serde_json::Value;

fn reference() -> Value {
    serde_json::from_str(include_str!("data/pyrandom.json")).unwrap()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn getrandbits_matches_cpython_for_seed_0_and_a_two_word_seed() {
    let r = reference();
    let mut g = PyRandom::new(0);
    let got: Vec<u32> = (0..8).map(|_| g.getrandbits(32)).collect();
    assert_eq!(got, u32s(&r["seed0_getrandbits32"]));
    let mut g = PyRandom::new(12_345_678_901);
    let got: Vec<u32> = (0..4).map(|_| g.getrandbits(32)).collect();
    assert_eq!(got, u32s(&r["seed12345678901_getrandbits32"]));
}

#[test]
fn randrange_matches_cpython_rejection_sampling() {
    let r = reference();
    let mut g = PyRandom::new(0);
    let got: Vec<u32> = (0..30).map(|_| g.randrange(200)).collect();
    assert_eq!(got, u32s(&r["seed0_randrange200"]));
}

#[test]
fn bootstrap_ci_matches_the_notes_boot_ci() {
    let r = reference();
    let b = &r["bootstrap"];
    let rates: Vec<f64> = b["rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let want: Vec<f64> = b["ci95"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let got = bootstrap_ci(
        &rates,
        b["resamples"].as_u64().unwrap() as usize,
        b["seed"].as_u64().unwrap(),
    );
    assert_eq!(got.to_vec(), want);
}
