//! The row fast path (sparse stages + first dense stage from the raw row) must choose exactly the
//! tokens llama.cpp's fill-then-apply path chooses, and leave the same candidate array whenever
//! it keeps one. Rows are drawn with and without heavy ties so the decline paths run too.

mod common;

use common::{bits, chain_for};
use gauge_sampling::synth::{bench_history, bench_scenarios};
use gauge_sampling::Chain;

fn rows(n_vocab: usize, n_rows: usize, seed: u64, ties: bool) -> Vec<Vec<f32>> {
    common::shaped_rows(n_vocab, n_rows, seed, 3.0, if ties { 0.5 } else { 0.0 })
}

fn assert_same_run(
    name: &str,
    mut fast: Chain,
    mut slow: Chain,
    rows: &[Vec<f32>],
    history: &[i32],
    steps: usize,
) {
    for &t in history {
        fast.accept_prompt(t);
        slow.accept_prompt(t);
    }
    for step in 0..steps {
        let row = &rows[step % rows.len()];
        let a = fast.sample(row).unwrap();
        let b = slow.sample(row).unwrap();
        assert_eq!(
            a, b,
            "{name}: step {step}: fast path chose {a}, fill path chose {b}"
        );
        if !name.starts_with("greedy") {
            assert_eq!(
                bits(fast.last_candidates().as_slice()),
                bits(slow.last_candidates().as_slice()),
                "{name}: step {step}: final candidate arrays differ"
            );
        }
    }
}

#[test]
fn fast_path_matches_fill_path_on_every_bench_chain() {
    common::on_every_level(|| {
        for n_vocab in [1000usize, 32000] {
            for ties in [false, true] {
                let rows = rows(n_vocab, 6, 42 + ties as u64, ties);
                let history = bench_history(n_vocab);
                for (name, json) in bench_scenarios() {
                    let (fast, slow) = if name == "greedy" {
                        let g = gauge_sampling::chain::ChainBuilder::greedy(n_vocab)
                            .build()
                            .unwrap();
                        (g.clone(), g.with_fast_path(false))
                    } else {
                        let c = chain_for(&json, n_vocab);
                        (c.clone(), c.with_fast_path(false))
                    };
                    assert_same_run(
                        &format!("{name}/{n_vocab}/ties={ties}"),
                        fast,
                        slow,
                        &rows,
                        &history,
                        24,
                    );
                }
            }
        }
    });
}

#[test]
fn fast_path_matches_fill_path_with_bans_and_biases() {
    common::on_every_level(|| {
        // -inf bans, +/- biases on the top tokens, penalties that reorder the top: the overlay carries
        // all of them into the top-k scan.
        let n_vocab = 5000;
        let mut rows = rows(n_vocab, 4, 9, false);
        for r in rows.iter_mut() {
            for i in (0..n_vocab).step_by(7) {
                r[i] = f32::NEG_INFINITY;
            }
        }
        let json = serde_json::json!({"seed": 3, "top_k": 5, "repeat_penalty": 1.5, "repeat_last_n": -1,
            "frequency_penalty": 0.5, "logit_bias": [[1, 3.0], [2, false], [1, 1.0]], "temperature": 0.0});
        let c = chain_for(&json, n_vocab);
        assert_same_run(
            "bans+biases",
            c.clone(),
            c.with_fast_path(false),
            &rows,
            &[1, 2, 3, 1],
            40,
        );
        // top_k larger than 128 exercises the bucket-sort equivalence
        let json = serde_json::json!({"seed": 5, "top_k": 300, "temperature": 1.3});
        let c = chain_for(&json, n_vocab);
        assert_same_run(
            "top_k 300",
            c.clone(),
            c.with_fast_path(false),
            &rows,
            &[],
            40,
        );
    });
}

#[test]
fn bad_rows_are_errors_on_both_paths() {
    common::on_every_level(|| {
        use gauge_sampling::SamplingError;
        let n = 300;
        for (name, json) in bench_scenarios() {
            let base = if name == "greedy" {
                gauge_sampling::chain::ChainBuilder::greedy(n)
                    .build()
                    .unwrap()
            } else {
                chain_for(&json, n)
            };
            for fast in [true, false] {
                let mut chain = base.clone().with_fast_path(fast);
                for (pos, bad) in [(0usize, f32::NAN), (7, f32::INFINITY), (299, f32::NAN)] {
                    let mut row = vec![0.5f32; n];
                    row[pos] = bad;
                    match chain.sample(&row) {
                        Err(SamplingError::NonFiniteLogit { index, .. }) => {
                            assert_eq!(index, pos, "{name}")
                        }
                        other => panic!("{name} fast={fast}: {bad} at {pos} gave {other:?}"),
                    }
                }
                assert!(
                    matches!(
                        chain.sample(&vec![f32::NEG_INFINITY; n]),
                        Err(SamplingError::NoFiniteLogit)
                    ),
                    "{name}"
                );
                assert!(
                    matches!(
                        chain.sample(&vec![0.0; n - 1]),
                        Err(SamplingError::RowLength { .. })
                    ),
                    "{name}"
                );
            }
        }
    });
}
