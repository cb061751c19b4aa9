//! What GBNF's one-character terminals cost: the mask per token (llguidance computes the
//! allowed set, then consumes the token) along one fixed JSON text tokenized by the default
//! model, under three grammars for (nearly) the same language:
//!
//! * `gbnf` — llama.cpp's `json.gbnf` through gauge's translator (a terminal per character);
//! * `lark_terminals` — the same grammar hand-written in Lark with whole-string and whole-number
//!   terminals (safe here: JSON's strings and numbers end at a delimiter);
//! * `json_schema` — llguidance's own JSON (`{"type": "object"}` with gauge's options).
//!
//! docs/server.md reports the per-token medians (criterion time ÷ the text's token count).

mod common;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use gauge_grammar::{ConstraintRequest, ConstraintSpec, GrammarState};
use serde_json::json;

const TEXT: &str = r#"{"name":"Ada Lovelace","born":1815,"languages":["English","French"],"notes":"wrote the first \"program\", for the Analytical Engine","ratio":0.618,"active":false,"address":{"city":"London","zip":"W1"}}"#;

const LARK_JSON: &str = r#"%llguidance {}
start: object
value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" (STRING ":" value ("," STRING ":" value)*)? "}"
array: "[" (value ("," value)*)? "]"
STRING: /"([^"\\]|\\(["\\\/bfnrt]|u[0-9a-fA-F]{4}))*"/
NUMBER: /-?([0-9]|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/
"#;

fn benches(c: &mut Criterion) {
    let model = common::default_model();
    let vocab = common::grammar_vocab(&model);
    let tokens: Vec<u32> = model
        .tokenize(TEXT, false, false)
        .expect("tokenize")
        .into_iter()
        .map(|t| t as u32)
        .collect();
    eprintln!("gbnf bench: {} tokens per iteration", tokens.len());
    let json_gbnf = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/gbnf/json.gbnf"
    ))
    .expect("json.gbnf");
    let grammars = [
        ("gbnf", ConstraintSpec::Gbnf(json_gbnf)),
        ("lark_terminals", ConstraintSpec::Lark(LARK_JSON.into())),
        (
            "json_schema",
            ConstraintSpec::JsonSchema(json!({"type": "object"})),
        ),
    ];
    let mut group = c.benchmark_group("gbnf_json_mask");
    group.sample_size(10);
    for (name, spec) in grammars {
        let req = ConstraintRequest {
            spec,
            field: "bench".into(),
            lenient: false,
        };
        let state = GrammarState::compile(&req, &vocab).expect("compile");
        // The text must be in every grammar's language, or the comparison means nothing.
        let mut check = state.clone();
        for &t in &tokens {
            assert!(check.is_allowed(t), "{name}: token {t} refused");
            check.consume(t).expect("allowed");
        }
        assert!(
            check.is_accepting(),
            "{name}: the text does not end the grammar"
        );
        group.bench_function(name, |b| {
            b.iter_batched(
                || state.clone(),
                |mut st| {
                    for &t in &tokens {
                        std::hint::black_box(st.allowed());
                        st.consume(t).expect("allowed");
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(gbnf, benches);
criterion_main!(gbnf);
