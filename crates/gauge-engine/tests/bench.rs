//! The bench library on tiny sizes: the rows it produces, the ratio, the JSON shape, agreement
//! between gauge's and llama.cpp's chains, bad options refused, and a short decode run.

mod common;

use std::sync::Arc;

use gauge_engine::bench::{
    median, run_decode_bench, run_sampling_bench, DecodeBenchOptions, Row, RowSet,
    SamplingBenchOptions, SYNTHETIC_LABEL,
};
use gauge_engine::EngineError;
use gauge_sampling::synth::normal_rows;
use gauge_sampling::SamplingError;

fn tiny(chains: &[&str]) -> SamplingBenchOptions {
    SamplingBenchOptions {
        row_sets: vec![RowSet::synthetic(1000)],
        chains: chains.iter().map(|s| s.to_string()).collect(),
        iters: 8,
        block: 4,
        agree_steps: 16,
        dry_vocab: None,
        progress: false,
    }
}

#[test]
fn synthetic_rows_are_the_documented_normal_rows() {
    let set = RowSet::synthetic(1000);
    assert_eq!(set.label, SYNTHETIC_LABEL);
    assert_eq!(set.n_vocab(), 1000);
    assert_eq!(set.rows, normal_rows(1000, 8, 3.0, 42));
}

#[test]
fn vocabulary_free_chains_give_one_row_each_with_the_ratio_and_full_agreement() {
    let chains = ["greedy", "greedy+ctrl", "default", "mirostat-v2"];
    let rows = run_sampling_bench(&tiny(&chains)).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.chain.as_str()).collect();
    assert_eq!(names, chains);
    for r in &rows {
        assert_eq!(r.n_vocab, 1000);
        assert_eq!(r.rows, SYNTHETIC_LABEL);
        assert!(r.gauge_us > 0.0 && r.gauge_us.is_finite(), "{r:?}");
        assert!(r.llama_cpp_us > 0.0 && r.llama_cpp_us.is_finite(), "{r:?}");
        assert_eq!(r.ratio, r.llama_cpp_us / r.gauge_us);
        // The fastest block is no slower than the median one.
        assert!(
            r.gauge_min_us > 0.0 && r.gauge_min_us <= r.gauge_us,
            "{r:?}"
        );
        assert!(
            r.llama_cpp_min_us > 0.0 && r.llama_cpp_min_us <= r.llama_cpp_us,
            "{r:?}"
        );
        assert_eq!(r.blocks, 2);
        assert_eq!(r.tokens_compared, 16);
        // gauge is llama.cpp-exact on these chains: every choice must be the same.
        assert_eq!(r.tokens_agree, r.tokens_compared, "{r:?}");
    }
}

#[test]
fn json_rows_carry_the_documented_keys() {
    let rows = run_sampling_bench(&tiny(&["greedy"])).unwrap();
    let v = serde_json::to_value(&rows).unwrap();
    let list = v.as_array().expect("a JSON list");
    assert_eq!(list.len(), 1);
    let obj = list[0].as_object().unwrap();
    for key in ["chain", "n_vocab", "gauge_us", "llama_cpp_us", "ratio"] {
        assert!(obj.contains_key(key), "missing {key}: {obj:?}");
    }
    assert_eq!(obj["chain"], "greedy");
    assert_eq!(obj["n_vocab"], 1000);
    let back: Vec<Row> = serde_json::from_value(v).unwrap();
    assert_eq!(back, rows);
}

#[test]
fn ratio_is_llama_cpp_time_over_gauge_time() {
    let r = Row::new("default", 32000, SYNTHETIC_LABEL, 20.0, 90.0);
    assert_eq!(r.ratio, 4.5);
}

#[test]
fn median_of_odd_and_even_counts() {
    assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    assert!(median(&mut []).is_nan());
}

#[test]
fn dry_chains_without_a_vocabulary_are_refused() {
    let err = run_sampling_bench(&tiny(&["default+penalties+dry"])).unwrap_err();
    assert!(
        matches!(err, EngineError::Sampling(SamplingError::NeedsVocab { .. })),
        "{err}"
    );
}

#[test]
fn bad_sampling_options_are_typed_errors() {
    let err = run_sampling_bench(&tiny(&["no-such-chain"])).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Option {
                field: "chains",
                ..
            }
        ),
        "{err}"
    );
    let mut o = tiny(&["greedy"]);
    o.iters = 0;
    assert!(matches!(
        run_sampling_bench(&o).unwrap_err(),
        EngineError::Option { field: "iters", .. }
    ));
    let mut o = tiny(&["greedy"]);
    o.block = 0;
    assert!(matches!(
        run_sampling_bench(&o).unwrap_err(),
        EngineError::Option { field: "block", .. }
    ));
    let mut o = tiny(&["greedy"]);
    o.row_sets = vec![RowSet {
        label: "ragged".into(),
        rows: vec![vec![0.0; 10], vec![0.0; 11]],
        warmup: 0,
    }];
    assert!(matches!(
        run_sampling_bench(&o).unwrap_err(),
        EngineError::Option {
            field: "row_sets",
            ..
        }
    ));
    let mut o = tiny(&["greedy"]);
    o.row_sets = vec![RowSet {
        label: "nan".into(),
        rows: vec![vec![0.0, f32::NAN]],
        warmup: 0,
    }];
    assert!(matches!(
        run_sampling_bench(&o).unwrap_err(),
        EngineError::Sampling(SamplingError::NonFiniteLogit { index: 1, .. })
    ));
}

#[test]
fn dry_chains_agree_with_llama_cpp_through_the_models_breakers() {
    let model = common::model();
    let mut o = tiny(&["default+penalties+dry"]);
    o.dry_vocab = Some(Arc::clone(&model));
    let rows = run_sampling_bench(&o).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].tokens_agree, rows[0].tokens_compared,
        "{:?}",
        rows[0]
    );
}

#[test]
fn model_rows_have_the_models_width_and_run_every_chain() {
    let model = common::model();
    let set = RowSet::from_model(&model, "smollm2", 3, 2).unwrap();
    assert_eq!(set.rows.len(), 3);
    assert_eq!(set.n_vocab(), model.n_vocab());
    // Two different prompts: the third row is not a continuation of the second.
    assert_ne!(set.rows[1], set.rows[2]);
    let o = SamplingBenchOptions {
        row_sets: vec![set],
        iters: 2,
        block: 2,
        agree_steps: 4,
        dry_vocab: Some(Arc::clone(&model)),
        ..Default::default()
    };
    let rows = run_sampling_bench(&o).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.chain.as_str()).collect();
    // the one-read row first, then every scenario
    assert_eq!(
        names,
        [
            "one-read",
            "greedy",
            "greedy+ctrl",
            "greedy+normalized",
            "default",
            "default+penalties+dry",
            "all-enabled",
            "default+ctrl",
            "default+normalized",
            "mirostat-v2"
        ]
    );
    assert!(rows
        .iter()
        .all(|r| r.simd == gauge_sampling::simd::detected().name()));
    assert!(rows
        .iter()
        .all(|r| r.n_vocab == model.n_vocab() && r.rows == "smollm2"));
}

#[test]
fn decode_bench_reports_both_samplers_per_width() {
    let model = common::model();
    let o = DecodeBenchOptions {
        widths: vec![1, 2],
        tokens: 3,
        rounds: 1,
        n_threads: 1,
        ..Default::default()
    };
    let rows = run_decode_bench(&model, &o).unwrap();
    assert_eq!(rows.iter().map(|r| r.n_seq).collect::<Vec<_>>(), [1, 2]);
    for r in &rows {
        assert_eq!(r.tokens_per_run, r.n_seq * 3);
        assert!(r.gauge_tps > 0.0 && r.llama_cpp_tps > 0.0, "{r:?}");
        assert!(
            r.gauge_overhead_pct > 0.0 && r.gauge_overhead_pct < 100.0,
            "{r:?}"
        );
        assert!(
            r.llama_cpp_overhead_pct > 0.0 && r.llama_cpp_overhead_pct < 100.0,
            "{r:?}"
        );
    }
    let bad = DecodeBenchOptions {
        widths: vec![0],
        ..o
    };
    assert!(matches!(
        run_decode_bench(&model, &bad).unwrap_err(),
        EngineError::Option {
            field: "widths",
            ..
        }
    ));
}

/// llama.cpp's print of the default chain, from `data/chain_prints.json` (entry 0: defaults).
fn llama_cpp_default_print() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/chain_prints.json");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let e = &data["entries"][0];
    assert!(e["label"].as_str().unwrap().ends_with(": defaults"), "{e}");
    e["chain"].as_str().unwrap().to_string()
}

#[test]
fn reference_without_a_model_prints_the_disabled_dry_as_llama_cpp_does() {
    let params = gauge_sampling::params::SamplingParams::default();
    let r = gauge_engine::ReferenceChain::for_n_vocab(&params, 32000, None).unwrap();
    assert_eq!(r.describe(), llama_cpp_default_print());
    // And it samples: the print-only `?dry` is not a stage that could break the chain.
    let mut r = r;
    let row = &RowSet::synthetic(32000).rows[0];
    let t = r.sample(row).unwrap();
    assert!((0..32000).contains(&t));
}

#[test]
fn reference_for_n_vocab_refuses_what_needs_the_rows_vocabulary() {
    let model = common::model();
    let params: gauge_sampling::params::SamplingParams =
        serde_json::from_value(serde_json::json!({"ignore_eos": true})).unwrap();
    let err = gauge_engine::ReferenceChain::for_n_vocab(&params, 1000, Some(&model)).unwrap_err();
    assert!(
        matches!(err, EngineError::Sampling(SamplingError::NeedsVocab { .. })),
        "{err}"
    );
    let params: gauge_sampling::params::SamplingParams =
        serde_json::from_value(serde_json::json!({"logit_bias": [[1000, 1.0]]})).unwrap();
    assert!(gauge_engine::ReferenceChain::for_n_vocab(&params, 1000, None).is_err());
    assert!(gauge_engine::ReferenceChain::for_n_vocab(&Default::default(), 0, None).is_err());
    assert!(gauge_engine::ReferenceChain::greedy(0).is_err());
}
