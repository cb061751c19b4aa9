//! The row fast path (sparse stages, then the first dense stage straight from the raw row) must
//! be bit-identical to llama.cpp's fill-then-apply path: same tokens, same final candidate arrays
//! (ids, logits and `p` bits), same feedback state. First the chains `gauge bench sampling` runs,
//! then the expensive stages' own fast paths (mirostat without the full sort, temperature and
//! top-n-sigma as pending transforms, dist from the row). Rows come in several shapes: wide and
//! narrow normals, heavy ties (quantised logits), flat rows, rows with bans and biases, so that
//! every decline path and the tie replays run too.
//!
//! Each comparison would prove nothing if the fast chain quietly took the fill path as well, so
//! the chain's fast-path counters (`gauge_sampling::chain::testing`, `testing` feature) are
//! checked: every step of the fast chain goes through the fast path and every step of the other
//! through the fill, and on every instruction-set level each test builds arrays straight from the
//! row at least once ([`each_level`]).

mod common;

use common::{bits, chain_for};
use gauge_sampling::chain::testing::{counts, FastPathCounts};
use gauge_sampling::synth::{bench_history, bench_scenarios, SplitMix64};
use gauge_sampling::Chain;

/// [`common::on_every_level`], and on each level the row fast path must have built the array
/// straight from the row at least once (a `Sampler::apply_from_row` that always declined would
/// make both sides take the fill path and every comparison pass).
fn each_level(f: impl FnMut()) {
    each_level_expecting(true, f)
}

/// [`common::on_every_level`], checking on each level whether the fast chain's steps built their
/// array from the row (`from_row`) or all declined (a test of the decline path).
fn each_level_expecting(from_row: bool, mut f: impl FnMut()) {
    common::on_every_level(|| {
        let before = counts();
        f();
        let d = counts() - before;
        if from_row {
            assert!(
                d.from_row > 0,
                "no step built its array from the row: {d:?}"
            );
        } else {
            assert!(
                d.from_row == 0 && d.declined > 0,
                "expected only declines: {d:?}"
            );
        }
    });
}

/// Row shapes: `(sigma, quantum)`; a quantum > 0 rounds logits to multiples of it (ties).
const SHAPES: [(f64, f64); 7] = [
    (3.0, 0.0),
    (1.0, 0.0),
    (8.0, 0.0),
    (3.0, 0.5),
    (0.3, 0.25),
    (3.0, 1.0 / 64.0),
    (0.0, 0.0),
];

fn rows(n_vocab: usize, n_rows: usize, seed: u64, shape: (f64, f64)) -> Vec<Vec<f32>> {
    common::shaped_rows(n_vocab, n_rows, seed, shape.0, shape.1)
}

/// What [`assert_same_run`] saw: the fast chain's counts over the run, and the longest array the
/// fill chain left (mirostat's kept set).
struct RunStats {
    fast: FastPathCounts,
    slow_max_len: usize,
}

/// Run both paths for `steps` steps (each accepting its own token) and compare everything.
fn assert_same_run(
    name: &str,
    chain: &Chain,
    rows: &[Vec<f32>],
    history: &[i32],
    steps: usize,
    compare_arrays: bool,
) -> RunStats {
    let mut stats = RunStats {
        fast: FastPathCounts::default(),
        slow_max_len: 0,
    };
    let mut fast = chain.clone().with_fast_path(true);
    let mut slow = chain.clone().with_fast_path(false);
    for &t in history {
        fast.accept_prompt(t);
        slow.accept_prompt(t);
    }
    for step in 0..steps {
        let row = &rows[step % rows.len()];
        let c0 = counts();
        let a = fast.sample(row).unwrap();
        let c1 = counts();
        let b = slow.sample(row).unwrap();
        let d_fast = c1 - c0;
        let d_slow = counts() - c1;
        stats.fast = stats.fast + d_fast;
        stats.slow_max_len = stats.slow_max_len.max(slow.last_candidates().len());
        assert_eq!(
            (d_fast.from_row + d_fast.declined, d_fast.fill),
            (1, 0),
            "{name}: step {step}: the fast chain did not take the fast path"
        );
        let fill_only = FastPathCounts {
            fill: 1,
            ..FastPathCounts::default()
        };
        assert_eq!(
            d_slow, fill_only,
            "{name}: step {step}: the fill chain did not fill"
        );
        assert_eq!(
            a, b,
            "{name}: step {step}: fast path chose {a}, fill path chose {b}"
        );
        let sel = |c: &Chain| {
            let cur = c.last_candidates();
            let t = cur.as_slice()[cur.selected.unwrap()];
            (t.id, t.logit.to_bits())
        };
        assert_eq!(
            sel(&fast),
            sel(&slow),
            "{name}: step {step}: selected candidate differs"
        );
        assert_eq!(
            feedback_bits(&fast),
            feedback_bits(&slow),
            "{name}: step {step}: feedback state (mirostat's mu) differs"
        );
        if d_fast.wide_draws == 1 {
            // mirostat-v2's wide path leaves only the drawn candidate, with its renormalised p
            let cur = fast.last_candidates();
            let slow_cur = slow.last_candidates();
            assert_eq!(
                bits(cur.as_slice()),
                bits(&[slow_cur.as_slice()[slow_cur.selected.unwrap()]]),
                "{name}: step {step}: drawn candidate differs"
            );
        } else if compare_arrays {
            assert_eq!(
                bits(fast.last_candidates().as_slice()),
                bits(slow.last_candidates().as_slice()),
                "{name}: step {step}: final candidate arrays differ"
            );
        }
    }
    stats
}

/// Every stage's feedback state (`explain_state`: mirostat's `mu`) as bits.
fn feedback_bits(c: &Chain) -> Vec<(&'static str, u32)> {
    c.stages()
        .iter()
        .flat_map(|s| s.explain_state())
        .map(|(k, v)| (k, v.to_bits()))
        .collect()
}

#[test]
fn fast_path_matches_fill_path_on_every_bench_chain() {
    each_level(|| {
        for n_vocab in [1000usize, 32000] {
            for ties in [false, true] {
                let rows = rows(
                    n_vocab,
                    6,
                    42 + ties as u64,
                    (3.0, if ties { 0.5 } else { 0.0 }),
                );
                let history = bench_history(n_vocab);
                for (name, json) in bench_scenarios() {
                    let chain = gauge_sampling::synth::bench_chain(name, &json, n_vocab).unwrap();
                    assert_same_run(
                        &format!("{name}/{n_vocab}/ties={ties}"),
                        &chain,
                        &rows,
                        &history,
                        24,
                        !name.starts_with("greedy"),
                    );
                }
            }
        }
    });
}

#[test]
fn fast_path_matches_fill_path_with_bans_and_biases() {
    each_level(|| {
        // -inf bans, +/- biases on the top tokens, penalties that reorder the top: the overlay carries
        // all of them into the top-k scan.
        let n_vocab = 5000;
        let mut rows = rows(n_vocab, 4, 9, (3.0, 0.0));
        for r in rows.iter_mut() {
            for i in (0..n_vocab).step_by(7) {
                r[i] = f32::NEG_INFINITY;
            }
        }
        let json = serde_json::json!({"seed": 3, "top_k": 5, "repeat_penalty": 1.5, "repeat_last_n": -1,
            "frequency_penalty": 0.5, "logit_bias": [[1, 3.0], [2, false], [1, 1.0]], "temperature": 0.0});
        let c = chain_for(&json, n_vocab);
        assert_same_run("bans+biases", &c, &rows, &[1, 2, 3, 1], 40, true);
        // top_k larger than 128 exercises the bucket-sort equivalence
        let json = serde_json::json!({"seed": 5, "top_k": 300, "temperature": 1.3});
        let c = chain_for(&json, n_vocab);
        assert_same_run("top_k 300", &c, &rows, &[], 40, true);
    });
}

#[test]
fn bad_rows_are_errors_on_both_paths() {
    common::on_every_level(|| {
        use gauge_sampling::SamplingError;
        let n = 300;
        for (name, json) in bench_scenarios() {
            let base = gauge_sampling::synth::bench_chain(name, &json, n).unwrap();
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

#[test]
fn mirostat_v2_fast_path_matches_the_full_sort() {
    each_level(|| {
        for (si, &shape) in SHAPES.iter().enumerate() {
            for (n_vocab, temp) in [
                (200usize, 0.8f32),
                (1000, 1.0),
                (5000, 0.8),
                (32000, 0.8),
                (3000, 1.7),
            ] {
                for (tau, eta) in [(5.0f32, 0.1f32), (3.0, 0.5), (9.0, 0.2)] {
                    let json = serde_json::json!({"seed": 42 + si, "mirostat": 2, "mirostat_tau": tau,
                        "mirostat_eta": eta, "temperature": temp});
                    let rows = rows(n_vocab, 4, 7 + si as u64, shape);
                    let chain = chain_for(&json, n_vocab);
                    let name =
                        format!("mirostat-v2 n={n_vocab} t={temp} tau={tau} shape={shape:?}");
                    assert_same_run(&name, &chain, &rows, &[], 24, true);
                }
            }
        }
    });
}

#[test]
fn mirostat_v2_fast_path_with_bans_and_biases_matches() {
    each_level(|| {
        let n_vocab = 4000;
        for (si, &shape) in SHAPES.iter().enumerate() {
            let mut rows = rows(n_vocab, 3, 100 + si as u64, shape);
            for r in rows.iter_mut() {
                for i in (0..n_vocab).step_by(11) {
                    r[i] = f32::NEG_INFINITY;
                }
            }
            let json = serde_json::json!({"seed": 5, "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.3,
                "temperature": 0.7, "logit_bias": [[1, 30.0], [2, false], [3, 5.5], [4, -2.0], [1, 0.25]]});
            let chain = chain_for(&json, n_vocab);
            assert_same_run(
                &format!("mirostat-v2 biased shape={shape:?}"),
                &chain,
                &rows,
                &[],
                20,
                true,
            );
        }
    });
}

/// Rows like a confident model's: a tail far below the top (mostly under llama.cpp's lowest bucket
/// edge, `v < -10`, and tied when `quantum > 0`), a few hundred mid values and a handful of clear
/// winners. Mirostat's `mu` climbs on them until the cut reaches into the tail.
fn peaked_rows(n_vocab: usize, n_rows: usize, seed: u64, quantum: f64) -> Vec<Vec<f32>> {
    let mut g = SplitMix64(seed);
    (0..n_rows)
        .map(|_| {
            (0..n_vocab)
                .map(|i| {
                    let x = if i % 7919 == 3 {
                        9.0 + g.next_normal()
                    } else if i % 97 == 5 {
                        g.next_normal() * 3.0
                    } else {
                        -14.0 + g.next_normal() * 2.0
                    };
                    common::quantize(x, quantum)
                })
                .collect()
        })
        .collect()
}

/// The regression of docs/bench.md: on peaked rows `mu` grows until the cut keeps most or all of
/// the vocabulary. On the way the cut passes through the tied tail in the lowest non-empty bucket
/// (which llama.cpp's full sort heap-sorts instead of introsorting), then the fast path hands over
/// to the full sort; every step must match the fill path.
#[test]
fn mirostat_v2_on_peaked_rows_matches_the_full_sort_as_the_cut_deepens() {
    each_level(|| {
        for (n_vocab, quantum) in [
            (4000usize, 0.25f64),
            (4000, 0.0),
            (20_000, 0.125),
            (20_000, 0.0),
        ] {
            let rows = peaked_rows(n_vocab, 3, 11 + n_vocab as u64, quantum);
            let json = serde_json::json!({"seed": 3, "mirostat": 2, "mirostat_tau": 5.0,
                "mirostat_eta": 0.1, "temperature": 0.8});
            let chain = chain_for(&json, n_vocab);
            let name = format!("mirostat-v2 peaked n={n_vocab} q={quantum}");
            let stats = assert_same_run(&name, &chain, &rows, &[], 200, true);
            // the run must have reached the whole vocabulary (else it did not test the wide path)
            assert_eq!(
                stats.slow_max_len, n_vocab,
                "{name}: cut never reached the tail"
            );
            assert!(
                stats.fast.wide_draws > 0,
                "{name}: the wide path never drew: {:?}",
                stats.fast
            );
        }
    });
}

/// A `mu` beyond every row's surprise keeps the whole vocabulary from the first step: where the
/// row spreads beyond the sorted head (sigma 3 or more, 8 nats at temperature 0.8), the wide path
/// draws without sorting (`kernels::wide_draw`); narrow rows are all head and decline to the full
/// sort.
#[test]
fn mirostat_v2_keeping_the_whole_vocabulary_matches_the_full_sort() {
    each_level(|| {
        for (si, &shape) in SHAPES.iter().enumerate() {
            for n_vocab in [1000usize, 20_000] {
                let json = serde_json::json!({"seed": 9 + si, "mirostat": 2, "mirostat_tau": 60.0,
                    "mirostat_eta": 0.3, "temperature": 0.8});
                let rows = rows(n_vocab, 3, 70 + si as u64, shape);
                let chain = chain_for(&json, n_vocab);
                let name = format!("mirostat-v2 wide n={n_vocab} shape={shape:?}");
                let stats = assert_same_run(&name, &chain, &rows, &[], 24, true);
                assert_eq!(stats.slow_max_len, n_vocab, "{name}");
                if shape.0 >= 3.0 && n_vocab == 20_000 {
                    assert!(
                        stats.fast.wide_draws >= 12,
                        "{name}: the wide path drew {} of 24 steps",
                        stats.fast.wide_draws
                    );
                }
            }
        }
    });
}

/// top-n-sigma as a lazy mask: the chain's bound decides top-k's result when the k-th value is
/// clearly above the band, and the exact cut is computed otherwise (few survivors, a k-th value
/// near the cut, heavy ties); every case must match the fill path.
#[test]
fn top_n_sigma_fast_path_matches_the_fill_path() {
    each_level(|| {
        let n_vocab = 6000;
        for (si, &shape) in SHAPES.iter().enumerate() {
            let rows = rows(n_vocab, 3, 300 + si as u64, shape);
            for (n_sigma, top_k) in [
                (2.0f32, 40),
                (0.5, 40),
                (1.0, 3),
                (3.0, 200),
                (0.05, 10),
                (1.5, 0),
            ] {
                let json = serde_json::json!({"seed": 11, "top_n_sigma": n_sigma, "top_k": top_k,
                    "logit_bias": [[1, 4.0], [2, false]], "repeat_last_n": 64, "repeat_penalty": 1.3,
                    "temperature": 0.9});
                let chain = chain_for(&json, n_vocab);
                let name = format!("top-n-sigma {n_sigma} top-k {top_k} shape={shape:?}");
                assert_same_run(&name, &chain, &rows, &[1, 5, 9, 5, 1], 12, true);
            }
        }
    });
}

#[test]
fn all_enabled_like_chains_match_the_fill_path() {
    each_level(|| {
        for n_vocab in [1000usize, 20_000] {
            for (si, &shape) in SHAPES.iter().enumerate() {
                let rows = rows(n_vocab, 4, 500 + si as u64, shape);
                let json = serde_json::json!({"seed": 42, "logit_bias": [[1, 0.5], [2, -0.5], [3, 1.0], [7, 2.0], [8, false]],
                    "repeat_last_n": 64, "repeat_penalty": 1.1, "frequency_penalty": 0.1, "presence_penalty": 0.1,
                    "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 64,
                    "dry_sequence_breaker_ids": [[13], [25]],
                    "top_n_sigma": 2.0, "top_k": 40, "typical_p": 0.95, "top_p": 0.95, "min_p": 0.05,
                    "xtc_probability": 1.0, "xtc_threshold": 0.1, "temperature": 0.8, "dynatemp_range": 0.5, "dynatemp_exponent": 1.0});
                let chain = chain_for(&json, n_vocab);
                let history: Vec<i32> = (0..64).map(|i| i * 7 % 50).collect();
                assert_same_run(
                    &format!("all-enabled n={n_vocab} shape={shape:?}"),
                    &chain,
                    &rows,
                    &history,
                    16,
                    true,
                );
            }
        }
    });
}

/// Custom orders put the lazy mask before other transforms or stages that read every value.
#[test]
fn top_n_sigma_in_custom_orders_matches_the_fill_path() {
    each_level(|| {
        let n_vocab = 3000;
        let rows = rows(n_vocab, 3, 900, (3.0, 0.0));
        for order in [
            vec!["top_n_sigma", "temperature", "top_k"],
            vec!["temperature", "top_n_sigma", "top_k"],
            vec!["top_n_sigma", "penalties", "top_k", "temperature"],
            vec!["top_n_sigma", "min_p", "temperature"],
            vec!["top_n_sigma", "temperature"],
        ] {
            let json = serde_json::json!({"seed": 3, "samplers": order, "top_n_sigma": 1.5, "top_k": 20,
                "min_p": 0.1, "temperature": 0.7, "repeat_last_n": 16, "repeat_penalty": 1.2});
            let chain = chain_for(&json, n_vocab);
            // dist over the whole (masked) vocabulary keeps only the selected candidate on the fast path
            let whole = order.len() == 2;
            assert_same_run(
                &format!("order {order:?}"),
                &chain,
                &rows,
                &[4, 8, 15, 16, 23, 42],
                10,
                !whole,
            );
        }
        // greedy after a lazy mask reads the exact values
        let g = gauge_sampling::chain::ChainBuilder::greedy(n_vocab)
            .with_top_n_sigma(0.5)
            .build()
            .unwrap();
        assert_same_run("greedy + top-n-sigma", &g, &rows, &[], 6, false);
    });
}

#[test]
fn mirostat_v1_fast_path_matches_the_full_sort() {
    each_level(|| {
        for (si, &shape) in SHAPES.iter().enumerate() {
            for (n_vocab, temp) in [(300usize, 0.8f32), (4000, 1.0), (20_000, 0.8)] {
                for (tau, eta) in [(5.0f32, 0.1f32), (2.0, 0.5), (9.0, 0.2)] {
                    let json = serde_json::json!({"seed": 7 + si, "mirostat": 1, "mirostat_tau": tau,
                        "mirostat_eta": eta, "temperature": temp, "logit_bias": [[3, 2.5], [4, false]]});
                    let rows = rows(n_vocab, 4, 40 + si as u64, shape);
                    let chain = chain_for(&json, n_vocab);
                    let name = format!("mirostat n={n_vocab} t={temp} tau={tau} shape={shape:?}");
                    assert_same_run(&name, &chain, &rows, &[], 20, true);
                }
            }
        }
    });
}

/// The selected candidate of the last step: `(id, logit bits, p bits)`.
fn selected(c: &Chain) -> (i32, u32, u32) {
    let cur = c.last_candidates();
    let t = cur.as_slice()[cur.selected.unwrap()];
    (t.id, t.logit.to_bits(), t.p.to_bits())
}

/// dist over the whole vocabulary (a temperature-only chain) reads the row: same tokens, and the
/// selected candidate carries the same logit and `p` as in the filled array.
#[test]
fn dist_over_the_whole_vocabulary_matches_the_fill_path() {
    each_level(|| {
        for (si, &shape) in SHAPES.iter().enumerate() {
            for (n_vocab, temp) in [(50usize, 0.8f32), (5000, 0.7), (40_000, 1.0), (3000, 1.6)] {
                let json = serde_json::json!({"seed": 21 + si, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                    "temperature": temp, "logit_bias": [[2, 3.0], [3, false]], "repeat_last_n": 8, "repeat_penalty": 1.2});
                let rows = rows(n_vocab, 3, 60 + si as u64, shape);
                let chain = chain_for(&json, n_vocab);
                let mut fast = chain.clone().with_fast_path(true);
                let mut slow = chain.with_fast_path(false);
                for step in 0..30 {
                    let row = &rows[step % rows.len()];
                    let (a, b) = (fast.sample(row).unwrap(), slow.sample(row).unwrap());
                    assert_eq!(a, b, "n={n_vocab} t={temp} shape={shape:?} step {step}");
                    assert_eq!(
                        selected(&fast),
                        selected(&slow),
                        "n={n_vocab} step {step}: selected candidate"
                    );
                }
            }
        }
    });
}

/// Regression (found by the chain proptests): an id edited before the lazy top-n-sigma mask (DRY,
/// logit-bias) and again after it (penalties) must not change the cut, which comes from what the
/// mask saw; and an edit after the mask is final, never masked again.
#[test]
fn an_entry_edited_before_and_after_the_sigma_mask_keeps_the_masks_cut() {
    each_level(|| {
        let n_vocab = 400;
        for (si, &shape) in SHAPES.iter().enumerate().take(3) {
            let rows = rows(n_vocab, 4, 1200 + si as u64, shape);
            for (temp, range) in [(0.0f32, 0.84f32), (0.8, 0.0), (1.3, 0.5)] {
                let json = serde_json::json!({"seed": 9, "temperature": temp, "dynatemp_range": range,
                    "dynatemp_exponent": 1.8, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "top_n_sigma": 1.0,
                    "repeat_last_n": 8, "repeat_penalty": 0.5, "dry_multiplier": 0.1, "dry_base": 1.0,
                    "dry_allowed_length": 0, "dry_penalty_last_n": 8, "dry_sequence_breaker_ids": [],
                    "logit_bias": [[5, 1.5], [6, -0.5]],
                    "samplers": ["dry", "top_n_sigma", "penalties", "top_k", "temperature"]});
                let chain = chain_for(&json, n_vocab);
                let history = [5, 6, 7, 5, 6, 8, 5, 9];
                assert_same_run(
                    &format!("edited around the mask t={temp} shape={shape:?}"),
                    &chain,
                    &rows,
                    &history,
                    20,
                    range > 0.0,
                );
            }
        }
    });
}

/// gauge's normalized penalty records its log-softmax as a pending transform; every reader after
/// it (top-k, top-n-sigma's band, mirostat, dist, greedy, custom orders with a division or an edit
/// before it) must see exactly what the filled array holds.
#[test]
fn normalized_penalty_chains_match_the_fill_path() {
    each_level(|| {
        let n_vocab = 6000;
        let history: Vec<i32> = (0..48).map(|i| i * 13 % 97).collect();
        let base = serde_json::json!({"repeat_penalty_mode": "normalized", "repeat_penalty": 1.3,
            "repeat_last_n": 64, "logit_bias": [[1, 3.0], [2, false], [13, -1.5]]});
        let cases = [
            serde_json::json!({"seed": 1}),
            serde_json::json!({"temperature": 0.0}),
            serde_json::json!({"seed": 2, "mirostat": 2, "mirostat_tau": 4.0, "temperature": 0.8}),
            serde_json::json!({"seed": 3, "mirostat": 1, "temperature": 0.9}),
            serde_json::json!({"seed": 4, "top_n_sigma": 1.5, "top_k": 0, "temperature": 0.7}),
            serde_json::json!({"seed": 5, "top_n_sigma": 2.0, "top_k": 30, "frequency_penalty": 0.2,
                "presence_penalty": 0.3, "min_p": 0.05, "typical_p": 0.9, "xtc_probability": 1.0,
                "xtc_threshold": 0.1, "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2,
                "dry_penalty_last_n": 64, "dry_sequence_breaker_ids": [[13], [25]]}),
            serde_json::json!({"seed": 6, "samplers": ["temperature", "penalties", "top_k"], "temperature": 0.6, "top_k": 50}),
            serde_json::json!({"seed": 7, "samplers": ["top_n_sigma", "temperature", "penalties", "top_k"],
                "top_n_sigma": 1.0, "temperature": 1.4, "top_k": 8}),
            serde_json::json!({"seed": 8, "samplers": ["penalties", "temperature"], "temperature": 0.5}),
        ];
        for (si, &shape) in SHAPES.iter().enumerate() {
            let rows = rows(n_vocab, 3, 1300 + si as u64, shape);
            for case in &cases {
                let mut json = base.clone();
                json.as_object_mut()
                    .unwrap()
                    .extend(case.as_object().unwrap().clone());
                let chain = chain_for(&json, n_vocab);
                let name = format!("normalized {case} shape={shape:?}");
                // dist over the whole vocabulary keeps only the selected candidate on the fast path
                let whole = case["samplers"] == serde_json::json!(["penalties", "temperature"]);
                assert_same_run(&name, &chain, &rows, &history, 12, !whole);
            }
        }
    });
}

/// Every row kernel above runs on every level only if each level's intrinsics are compiled into
/// its body. An intrinsic called from a closure (which does not inherit the body's target
/// features) becomes a call to an out-of-line function: the chains stay bit-identical, so no test
/// above notices, but AVX2's top-k ran at half the baseline's speed that way (its 64-entry mask
/// folded over a closure). This binary links every dispatched kernel; in an optimised build none
/// of `core::arch`'s vector intrinsics may be left as a function of its own (std's `_xgetbv`, the
/// feature detection, aside).
#[test]
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[cfg_attr(
    debug_assertions,
    ignore = "an unoptimised build calls every intrinsic out of line"
)]
fn no_vector_intrinsic_is_left_out_of_line() {
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let names = elf_function_names(&exe);
    assert!(
        names.iter().any(|n| n.contains("fast_vs_fill")),
        "no symbol table read ({} function names)",
        names.len()
    );
    let calls: Vec<&String> = (names.iter())
        .filter(|n| n.contains("core_arch") && !n.contains("xgetbv"))
        .collect();
    assert!(calls.is_empty(), "intrinsics compiled as calls: {calls:?}");
}

/// The names of the `FUNC` symbols in a little-endian ELF64 file's symbol table.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn elf_function_names(elf: &[u8]) -> Vec<String> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not an ELF64 file");
    let (shoff, shentsize, shnum) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    let section = |i: usize| shoff + i * shentsize;
    let mut names = Vec::new();
    for i in 0..shnum {
        let sh = section(i);
        if u32_at(sh + 4) != 2 {
            continue; // SHT_SYMTAB only
        }
        let (off, size, entsize) = (u64_at(sh + 0x18), u64_at(sh + 0x20), u64_at(sh + 0x38));
        let strtab = u64_at(section(u32_at(sh + 0x28)) + 0x18);
        for sym in (off..off + size).step_by(entsize) {
            if elf[sym + 4] & 0xf != 2 {
                continue; // STT_FUNC only
            }
            let name = &elf[strtab + u32_at(sym)..];
            let end = name.iter().position(|&b| b == 0).unwrap();
            names.push(String::from_utf8_lossy(&name[..end]).into_owned());
        }
    }
    names
}
