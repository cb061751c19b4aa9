//! Criterion benchmarks of whole chains, from the logit row to the accepted token (the CPU work of
//! llama.cpp's `llama_sampler_sample` after reading logits), on N(0, 3) rows from
//! `gauge_sampling::synth` (splitmix64 seed 42, 8 rows cycled) with a 64-token history accepted
//! first, and `chain/{n}/one-read`, one read of the same rows, the floor the targets are
//! ratios to. `gauge bench sampling` runs the same scenarios side by side with llama.cpp's own
//! chain.

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use gauge_sampling::synth::{bench_chain, bench_history, bench_scenarios, normal_rows};
use gauge_sampling::{Chain, TokenId};

fn build(name: &str, json: &serde_json::Value, n_vocab: usize) -> Chain {
    bench_chain(name, json, n_vocab).expect("scenario chain")
}

/// One benchmark: `chain` after accepting `history`, sampling the rows in turn.
fn time_chain(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    mut chain: Chain,
    history: &[TokenId],
    rows: &[Vec<f32>],
) {
    for &t in history {
        chain.accept_prompt(t);
    }
    let mut i = 0usize;
    group.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter(|| {
            let t = chain.sample(&rows[i % rows.len()]).expect("sample");
            i += 1;
            t
        })
    });
}

fn chains(c: &mut Criterion) {
    for n_vocab in [32_000usize, 151_936, 262_144] {
        let rows = normal_rows(n_vocab, 8, 3.0, 42);
        let history = bench_history(n_vocab);
        let mut group = c.benchmark_group(format!("chain/{n_vocab}"));
        group.sample_size(30);
        // the floor: one read of the same rows, in the same run
        let mut i = 0usize;
        group.bench_function(BenchmarkId::from_parameter("one-read"), |b| {
            b.iter(|| {
                let m = gauge_sampling::simd::one_read(&rows[i % rows.len()]);
                i += 1;
                m
            })
        });
        for (name, json) in bench_scenarios() {
            let chain = build(name, &json, n_vocab);
            time_chain(&mut group, name, chain, &history, &rows);
        }
        group.finish();
    }
}

/// The repeat penalty's two operators in llama.cpp's default chain (θ = 1.3 over the last 64
/// tokens): `ctrl`, `normalized` as it runs (its log-softmax a pending overlay transform), and
/// `normalized` on the fill path (what every token paid before the transform existed).
fn penalty_modes(c: &mut Criterion) {
    for n_vocab in [49_152usize, 151_936] {
        let rows = normal_rows(n_vocab, 8, 3.0, 42);
        let history = bench_history(n_vocab);
        let mut group = c.benchmark_group(format!("penalty/{n_vocab}"));
        group.sample_size(30);
        for (name, mode, fast) in [
            ("ctrl", "ctrl", true),
            ("normalized", "normalized", true),
            ("normalized-fill", "normalized", false),
        ] {
            let json = serde_json::json!({"seed": 42, "repeat_penalty": 1.3, "repeat_last_n": 64,
                "repeat_penalty_mode": mode});
            let chain = build(name, &json, n_vocab).with_fast_path(fast);
            time_chain(&mut group, name, chain, &history, &rows);
        }
        group.finish();
    }
}

criterion_group!(benches, chains, penalty_modes);
criterion_main!(benches);
