//! XTC against every `test_xtc` record of llama.cpp's test-sampling vectors
//! (`data/test-sampling-vectors.json`).
//!
//! llama.cpp checks XTC without a dist step, so the expected `p` are the softmax over the whole input
//! computed inside XTC, not renormalised over the survivors. Each record is checked twice: against
//! the test's expected probabilities (|Δp| < 1e-5, as test-sampling.cpp does) and bit for bit against
//! the values libllama actually produced (ids, order, p, logits, `sorted`), which llama.cpp's
//! f32 softmax reproduces exactly when the arithmetic matches.

mod common;

use common::{assert_matches, f32s, i32s, input_candidates, vectors};
use gauge_sampling::samplers::xtc;
use serde_json::Value;

fn run(rec: &Value) -> gauge_sampling::Candidates {
    let params = &rec["params"];
    let probability = common::f32_of(&params["probability"]);
    let threshold = common::f32_of(&params["threshold"]);
    let min_keep = params["min_keep"].as_u64().unwrap() as usize;
    let seed = params["seed"].as_u64().unwrap() as u32;
    let mut stage = xtc::build(probability, threshold, min_keep, seed);
    let names: Vec<&str> = rec["llama_sampler_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(names, [stage.name()], "runtime name for {}", rec["call"]);
    let mut cur = input_candidates(rec);
    stage.apply(&mut cur);
    cur
}

#[test]
fn all_four_test_xtc_records_are_present() {
    assert_eq!(vectors("test_xtc").len(), 4);
}

#[test]
fn xtc_matches_expected_probs_of_every_record() {
    for rec in vectors("test_xtc") {
        let cur = run(&rec);
        assert_matches(&rec, &cur);
    }
}

#[test]
fn xtc_matches_libllama_output_bit_for_bit() {
    for rec in vectors("test_xtc") {
        let cur = run(&rec);
        let actual = &rec["actual"];
        assert_eq!(
            cur.len() as u64,
            actual["size"].as_u64().unwrap(),
            "size for {}",
            rec["call"]
        );
        assert_eq!(cur.ids(), i32s(&actual["ids"]), "ids for {}", rec["call"]);
        let want_p = f32s(&actual["p"]);
        let want_l = f32s(&actual["logits"]);
        for (i, t) in cur.as_slice().iter().enumerate() {
            assert_eq!(
                t.p.to_bits(),
                want_p[i].to_bits(),
                "p[{i}] = {} want {} for {}",
                t.p,
                want_p[i],
                rec["call"]
            );
            assert_eq!(
                t.logit.to_bits(),
                want_l[i].to_bits(),
                "logit[{i}] for {}",
                rec["call"]
            );
        }
        assert_eq!(
            cur.sorted,
            actual["sorted"].as_bool().unwrap(),
            "sorted for {}",
            rec["call"]
        );
        // XTC is not a terminal sampler: llama.cpp records selected = -1.
        assert_eq!(actual["selected"].as_i64().unwrap(), -1);
        assert_eq!(cur.selected, None);
    }
}
