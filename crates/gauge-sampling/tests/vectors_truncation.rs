//! llama.cpp's `test-sampling` vectors for the truncation samplers, temperature and dist, replayed
//! through gauge. Every expected value comes from `data/test-sampling-vectors.json` (recorded from
//! libllama @ 0c1e570, GCC 12): output ids and their order, `p`, logits, the `sorted` flag, the
//! runtime sampler names (placeholders) and the index dist(seed 0) selected.

mod common;

use common::{assert_matches, f32s, i32s, input_candidates, vectors};
use gauge_sampling::samplers::{dist, min_p, temp, temp_ext, top_k, top_n_sigma, top_p, typical};
use gauge_sampling::{Candidates, Sampler};
use serde_json::Value;

fn param(rec: &Value, name: &str) -> f64 {
    rec["params"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("record {} has no param {name}", rec["id"]))
}

/// The stage a record exercises, built from its params as the C++ test builds it.
fn stage(rec: &Value) -> Box<dyn Sampler> {
    let f = |n| param(rec, n) as f32;
    let min_keep = || param(rec, "min_keep") as usize;
    match rec["sampler"].as_str().unwrap() {
        "temp" => temp::build(f("temp")),
        "temp_ext" => temp_ext::build(f("temp"), f("delta"), f("exponent")),
        "top_k" => top_k::build(param(rec, "k") as i32),
        "top_p" => top_p::build(f("p"), min_keep()),
        "min_p" => min_p::build(f("p"), min_keep()),
        "typical" => typical::build(f("p"), min_keep()),
        // the C++ test takes an int n: 1.00f -> 1
        "top_n_sigma" => top_n_sigma::build(param(rec, "n") as i32 as f32),
        other => panic!(
            "record {} uses sampler {other}, not covered here",
            rec["id"]
        ),
    }
}

/// Replay one probability record and compare everything it recorded.
fn check_record(rec: &Value) {
    let call = rec["call"].as_str().unwrap_or("?");
    let id = &rec["id"];
    let mut cur = input_candidates(rec);
    let mut names = Vec::new();

    let mut st = stage(rec);
    names.push(st.name().to_string());
    st.apply(&mut cur);

    let pipeline: Vec<&str> = rec["pipeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let has_dist = pipeline.contains(&"dist(seed=0)");
    assert_eq!(
        pipeline.len(),
        if has_dist { 2 } else { 1 },
        "unexpected pipeline {pipeline:?} in #{id} {call}"
    );
    if has_dist {
        let mut d = dist::build(0);
        names.push(d.name().to_string());
        d.apply(&mut cur);
    }

    let want_names: Vec<String> = rec["llama_sampler_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, want_names, "runtime names differ in #{id} {call}");

    assert_matches(rec, &cur);

    let actual = &rec["actual"];
    assert_eq!(
        cur.len() as u64,
        actual["size"].as_u64().unwrap(),
        "size in #{id} {call}"
    );
    assert_eq!(cur.ids(), i32s(&actual["ids"]), "ids in #{id} {call}");
    // f32 values printed with %.9g round-trip, so libllama's own output can be compared bit for bit
    let got_p: Vec<u32> = cur.as_slice().iter().map(|t| t.p.to_bits()).collect();
    let want_p: Vec<u32> = f32s(&actual["p"]).iter().map(|x| x.to_bits()).collect();
    assert_eq!(
        got_p, want_p,
        "p not bit-identical to libllama in #{id} {call}"
    );
    let got_l: Vec<u32> = cur.as_slice().iter().map(|t| t.logit.to_bits()).collect();
    let want_l: Vec<u32> = f32s(&actual["logits"])
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(
        got_l, want_l,
        "logits not bit-identical to libllama in #{id} {call}"
    );
    assert_eq!(
        cur.sorted,
        actual["sorted"].as_bool().unwrap(),
        "sorted flag in #{id} {call}"
    );
    let want_sel = actual["selected"].as_i64().unwrap();
    let want_sel = if want_sel < 0 {
        None
    } else {
        Some(want_sel as usize)
    };
    assert_eq!(cur.selected, want_sel, "dist(0) selection in #{id} {call}");
}

fn check_test(test: &str, expected_count: usize) {
    let recs = vectors(test);
    assert_eq!(
        recs.len(),
        expected_count,
        "{test}: record count in the data changed"
    );
    for rec in &recs {
        check_record(rec);
    }
}

#[test]
fn test_temp_vectors() {
    check_test("test_temp", 2);
}

#[test]
fn test_temp_ext_vectors() {
    check_test("test_temp_ext", 2);
}

#[test]
fn test_top_k_vectors() {
    check_test("test_top_k", 4);
}

#[test]
fn test_top_p_vectors() {
    check_test("test_top_p", 4);
}

#[test]
fn test_min_p_vectors() {
    check_test("test_min_p", 9);
}

#[test]
fn test_typical_vectors() {
    check_test("test_typical", 2);
}

#[test]
fn test_top_n_sigma_vectors() {
    check_test("test_top_n_sigma", 3);
}

/// test_sampler_queue: n_vocab 10000, logit `logf(i)` (token 0 is -inf), each k/p/m stage followed
/// by a fresh dist(0). Covers top-p's >1024 adaptive path, min-p's unsorted path and p = 1e-12.
#[test]
fn test_sampler_queue_vectors() {
    let recs = vectors("test_sampler_queue");
    assert_eq!(recs.len(), 24);
    for rec in &recs {
        let id = &rec["id"];
        let n_vocab = param(rec, "n_vocab") as usize;
        let seq = rec["params"]["sequence"].as_str().unwrap();
        let k = param(rec, "top_k") as i32;
        let p = param(rec, "top_p") as f32;
        let m = param(rec, "min_p") as f32;
        let min_keep = param(rec, "min_keep") as usize;
        let logits: Vec<f32> = (0..n_vocab).map(|i| (i as i32 as f32).ln()).collect();
        let mut cur = Candidates::from_logits(&logits);

        let stages = rec["stages"].as_array().unwrap();
        assert_eq!(stages.len(), seq.len(), "#{id} {seq}");
        for (letter, want) in seq.chars().zip(stages) {
            let mut st = match letter {
                'k' => top_k::build(k),
                'p' => top_p::build(p, min_keep),
                'm' => min_p::build(m, min_keep),
                other => panic!("#{id}: unknown stage {other}"),
            };
            st.apply(&mut cur);
            dist::build(0).apply(&mut cur);
            let ctx = format!("#{id} sequence {seq} stage {letter} (k={k} p={p} m={m})");
            assert_eq!(
                cur.len() as u64,
                want["actual_size"].as_u64().unwrap(),
                "size in {ctx}"
            );
            assert_eq!(
                cur.sorted,
                want["actual_sorted"].as_bool().unwrap(),
                "sorted in {ctx}"
            );
            let ids = cur.ids();
            assert_eq!(
                ids[0] as i64,
                want["actual_first_id"].as_i64().unwrap(),
                "first id in {ctx}"
            );
            assert_eq!(
                *ids.last().unwrap() as i64,
                want["actual_last_id"].as_i64().unwrap(),
                "last id in {ctx}"
            );
        }
    }
}

/// dist with one candidate still consumes a draw: after that call, a singleton-fed and a
/// two-candidate-fed dist(4242) draw the same tokens from 256 equal logits.
#[test]
fn test_dist_singleton_rng_vector() {
    let recs = vectors("test_dist_singleton_rng");
    assert_eq!(recs.len(), 1);
    let rec = &recs[0];
    let seed = param(rec, "seed") as u32;
    let mut single = dist::build(seed);
    let mut control = dist::build(seed);

    let mut c1 = Candidates::from_logits(&[0.0]);
    single.apply(&mut c1);
    let mut c2 = Candidates::from_logits(&[0.0, 0.0]);
    control.apply(&mut c2);
    let first = &rec["first_call"];
    assert_eq!(
        c1.selected_token().map(i64::from),
        first["singleton_selected_id"].as_i64(),
        "singleton first call"
    );
    assert_eq!(
        c2.selected_token().map(i64::from),
        first["control_selected_id"].as_i64(),
        "control first call"
    );

    let then = &rec["then"];
    let n = then["n_vocab"].as_u64().unwrap() as usize;
    let draw = |d: &mut Box<dyn Sampler>| {
        (0..4)
            .map(|_| {
                let mut c = Candidates::from_logits(&vec![0.0; n]);
                d.apply(&mut c);
                c.selected_token().unwrap()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        draw(&mut single),
        i32s(&then["singleton_ids"]),
        "singleton draws after the 1-candidate call"
    );
    assert_eq!(
        draw(&mut control),
        i32s(&then["control_ids"]),
        "control draws"
    );
}
