//! The grammar stage's cost per token: the mask alone (llguidance), and whole chains with and
//! without the stage and the penalties, at the default model's vocabulary (49,152, from its
//! GGUF) and at Qwen2's (151,936: the Qwen tokenizer's 151,669 tokens from a `tokenizer.json`,
//! padded with unused ids to the model's row length, as Qwen2 GGUFs are; set
//! `GAUGE_QWEN_TOKENIZER` to the file, see scripts/fetch-qwen-tokenizer.sh; skipped without it).
//!
//! One iteration replays a fixed 64-token trajectory through an A2-like JSON schema (sampled once
//! under the grammar from random rows, so it walks keys, strings, numbers and arrays) on random
//! rows: per token, the chain samples from the row and then accepts the trajectory's token.
//! docs/bench.md divides by 64.

mod common;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use gauge_grammar::{
    constrain, ConstraintRequest, ConstraintSpec, GrammarStage, GrammarState, GrammarVocab,
};
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::{Chain, SamplingParams};
use serde_json::json;

const STEPS: usize = 64;
const ROWS: usize = 8;

fn schema() -> ConstraintRequest {
    ConstraintRequest {
        spec: ConstraintSpec::JsonSchema(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "minimum": 0},
                "email": {"type": "string", "format": "email"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]},
                "active": {"type": "boolean"}
            },
            "required": ["name", "age", "tags", "address"]
        })),
        field: "bench".into(),
        lenient: false,
    }
}

fn rows(n: usize) -> Vec<Vec<f32>> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    (0..ROWS)
        .map(|_| {
            (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s >> 40) as f32 / (1u64 << 24) as f32 * 12.0 - 6.0
                })
                .collect()
        })
        .collect()
}

fn params(repeat: f32, mode: PenaltyMode) -> SamplingParams {
    SamplingParams {
        repeat_penalty: repeat,
        repeat_penalty_mode: mode,
        repeat_last_n: 64,
        seed: 7,
        ..SamplingParams::default()
    }
}

fn gguf_vocab() -> GrammarVocab {
    common::grammar_vocab(&common::default_model())
}

/// The Qwen tokenizer's tokens (byte-level BPE through llguidance's reader), padded to 151,936.
fn qwen_vocab() -> Option<GrammarVocab> {
    let Ok(path) = std::env::var("GAUGE_QWEN_TOKENIZER") else {
        eprintln!("mask bench: GAUGE_QWEN_TOKENIZER not set, skipping the 151,936 vocabulary (scripts/fetch-qwen-tokenizer.sh)");
        return None;
    };
    let text = std::fs::read_to_string(&path).expect("read tokenizer.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("tokenizer.json");
    let mut words = llguidance::token_bytes_from_tokenizer_json(&v).expect("token bytes");
    assert!(words.len() <= 151_936, "{} tokens", words.len());
    words.resize(151_936, Vec::new());
    // <|endoftext|> and <|im_end|>.
    Some(GrammarVocab::from_token_bytes(&words, &[151_643, 151_645]).expect("vocab"))
}

/// A trajectory through the schema: the constrained default chain on random rows.
fn trajectory(vocab: &GrammarVocab, rows: &[Vec<f32>]) -> Vec<i32> {
    let p = params(1.0, PenaltyMode::Ctrl);
    let chain = Chain::from_params(&p, vocab.n_vocab(), None).expect("chain");
    let mut chain = constrain(
        chain,
        GrammarStage::compile(&schema(), vocab, &p).expect("compile"),
    );
    (0..STEPS)
        .map(|i| chain.sample(&rows[i % ROWS]).expect("sample"))
        .collect()
}

fn bench_vocab(c: &mut Criterion, label: &str, vocab: &GrammarVocab) {
    let n = vocab.n_vocab();
    let rows = rows(n);
    let traj = trajectory(vocab, &rows);
    let mut group = c.benchmark_group(format!("grammar/{label}"));
    group.sample_size(10);
    let state = GrammarState::compile(&schema(), vocab).expect("compile");
    group.bench_function("mask_only", |b| {
        b.iter_batched(
            || state.clone(),
            |mut st| {
                for &t in &traj {
                    std::hint::black_box(st.allowed());
                    st.consume(t as u32).expect("trajectory token");
                }
            },
            BatchSize::SmallInput,
        )
    });
    // (name, θ, mode, grammar: None = no grammar, Some(in_overlay) = the stage with that switch)
    let cases: [(&str, f32, PenaltyMode, Option<bool>); 9] = [
        ("chain", 1.0, PenaltyMode::Ctrl, None),
        ("chain+ctrl1.3", 1.3, PenaltyMode::Ctrl, None),
        ("chain+normalized1.3", 1.3, PenaltyMode::Normalized, None),
        ("grammar+chain", 1.0, PenaltyMode::Ctrl, Some(false)),
        ("grammar+chain+ctrl1.3", 1.3, PenaltyMode::Ctrl, Some(false)),
        (
            "grammar+chain+normalized1.3",
            1.3,
            PenaltyMode::Normalized,
            Some(false),
        ),
        ("grammar-overlay+chain", 1.0, PenaltyMode::Ctrl, Some(true)),
        (
            "grammar-overlay+chain+ctrl1.3",
            1.3,
            PenaltyMode::Ctrl,
            Some(true),
        ),
        (
            "grammar-overlay+chain+normalized1.3",
            1.3,
            PenaltyMode::Normalized,
            Some(true),
        ),
    ];
    for (name, repeat, mode, grammar) in cases {
        let p = params(repeat, mode);
        let mut chain = Chain::from_params(&p, n, None).expect("chain");
        if let Some(in_overlay) = grammar {
            let stage = GrammarStage::new(state.clone()).with_mask_in_overlay(in_overlay);
            chain = constrain(chain, stage);
        }
        group.bench_function(name, |b| {
            b.iter_batched(
                || chain.clone(),
                |mut ch| {
                    for (i, &t) in traj.iter().enumerate() {
                        std::hint::black_box(ch.sample_no_accept(&rows[i % ROWS]).expect("sample"));
                        ch.accept(t);
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    bench_vocab(c, "49152", &gguf_vocab());
    if let Some(v) = qwen_vocab() {
        bench_vocab(c, "151936", &v);
    }
}

criterion_group!(mask, benches);
criterion_main!(mask);
