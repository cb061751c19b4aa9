//! Fuzzing of request params (issue 9): random and malformed request objects go through
//! `SamplingParams::from_value`, `Chain::from_params` and a few sampled rows without a panic. Errors
//! are fine; every error must carry a message. Case counts are bounded so each property runs in a
//! few seconds in release; a panic fails the test (proptest shrinks it to a small case).
//!
//! The RNG seed is fixed so that CI is reproducible; set `PROPTEST_RNG_SEED` (and
//! `PROPTEST_CASES`) to explore further.
//!
//! The Unicode properties found a panic (an error message cut a long value inside a multi-byte
//! character); it is fixed in `fields::short`, and they stay as its regression tests.

mod common;
use common::proptest_config;
use gauge_sampling::params::SamplingParams;
use gauge_sampling::{Chain, SamplingError, TokenId, Vocab};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Map, Value};

/// Every request field name `from_value` reads (aliases included), and the refused ones.
fn fields() -> Vec<&'static str> {
    let mut f: Vec<&'static str> = gauge_sampling::fields::sampling_names().collect();
    f.extend(gauge_sampling::fields::REFUSED.iter().map(|r| r.name));
    f
}

const SAMPLER_NAMES: &[&str] = &[
    "penalties",
    "dry",
    "top_n_sigma",
    "top-n-sigma",
    "top_k",
    "typ_p",
    "typ",
    "top_p",
    "nucleus",
    "min_p",
    "xtc",
    "temperature",
    "temp",
    "adaptive_p",
    "infill",
    "TOPK",
    "",
    "top_q",
];

/// Numbers at the edges: zero, signs, the limits of i32/u32/i64/u64/f32, subnormals, huge floats.
fn edge_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            json!(0),
            json!(-0.0),
            json!(1),
            json!(-1),
            json!(2),
            json!(0.5),
            json!(0.99),
            json!(1.0),
            json!(1.5),
            json!(40.0),
            json!(40.5),
            json!(i32::MAX),
            json!(i32::MIN),
            json!(i32::MAX as i64 + 1),
            json!(u32::MAX),
            json!(u32::MAX as u64 + 1),
            json!(i64::MAX),
            json!(i64::MIN),
            json!(u64::MAX),
            json!(f32::MAX as f64),
            json!(-(f32::MAX as f64)),
            json!(3.5e38),
            json!(-3.5e38),
            json!(1e300),
            json!(-1e300),
            json!(f64::MAX),
            json!(1e-45),
            json!(1e-300),
            json!(9.0e15),
            json!(9.1e15),
            json!(-9.1e15),
        ]),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|u| json!(u)),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |x| x.is_finite())
            .prop_map(|x| json!(x)),
        (-3.0f64..3.0).prop_map(|x| json!(x)),
        (-70i64..70).prop_map(|i| json!(i)),
    ]
}

/// Arbitrary text: any ASCII (control characters included), or (with `unicode`) any characters.
fn text(unicode: bool, max: usize) -> BoxedStrategy<String> {
    let class = if unicode { "." } else { "[\\x00-\\x7f]" };
    proptest::string::string_regex(&format!("{class}{{0,{max}}}"))
        .expect("a valid regex")
        .boxed()
}

/// Strings: sampler names and letters, preset names, infinities spelled out, and arbitrary text
/// (long enough to be cut in error messages).
fn edge_string(u: bool) -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(SAMPLER_NAMES).prop_map(|s| json!(s)),
        prop::sample::select(vec![
            "json",
            "code",
            "chat",
            "creative",
            "llama-cpp-default",
            "ctrl",
            "normalized",
            "-inf",
            "nan",
            "inf",
            "edskypmxt",
            "kpt",
            "i",
            "aaaa",
            "z",
            "\n",
            ":",
            "\"",
            " 12",
            "+3",
            "-1",
            "99999999999999999999",
        ])
        .prop_map(|s| json!(s)),
        "[edskypmxtiaz]{0,12}".prop_map(|s| json!(s)),
        text(u, 120).prop_map(|s| json!(s)),
    ]
}

fn leaf(u: bool) -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        edge_number(),
        edge_string(u),
    ]
}

/// Any JSON value, nested a few levels deep.
fn junk(u: bool) -> impl Strategy<Value = Value> {
    leaf(u).prop_recursive(3, 32, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text(u, 8), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `logit_bias` in every shape: pair arrays, objects keyed by id or text, and broken variants.
fn logit_bias(n_vocab: usize, u: bool) -> impl Strategy<Value = Value> {
    let id = prop_oneof![
        (-3i64..n_vocab as i64 + 3).prop_map(|i| json!(i)),
        edge_number(),
        edge_string(u),
    ];
    let bias = prop_oneof![
        Just(json!(false)),
        Just(json!(true)),
        edge_number(),
        (-20.0f64..20.0).prop_map(|x| json!(x)),
        leaf(u),
    ];
    let key = prop_oneof![
        (-3i64..n_vocab as i64 + 3).prop_map(|i| i.to_string()),
        Just(" 1".to_string()),
        Just("+2".to_string()),
        Just("99999999999999".to_string()),
        text(u, 6),
    ];
    prop_oneof![
        prop::collection::vec(
            (id.clone(), bias.clone()).prop_map(|(t, b)| json!([t, b])),
            0..6
        )
        .prop_map(Value::Array),
        prop::collection::btree_map(key, bias.clone(), 0..6)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        prop::collection::vec(junk(u), 0..4).prop_map(Value::Array),
        prop::collection::vec(
            (id, bias.clone(), bias).prop_map(|(t, a, b)| json!([t, a, b])),
            1..3
        )
        .prop_map(Value::Array),
        junk(u),
    ]
}

/// `samplers` as a list of names (good and bad) or a string of letters.
fn samplers(u: bool) -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::collection::vec(prop::sample::select(SAMPLER_NAMES), 0..12).prop_map(|v| json!(v)),
        "[edskypmxtaiz]{0,14}".prop_map(|s| json!(s)),
        prop::collection::vec(leaf(u), 0..4).prop_map(Value::Array),
    ]
}

/// A value for one named field: usually of a plausible type at the edges, sometimes junk.
fn field_value(name: &'static str, n_vocab: usize, u: bool) -> BoxedStrategy<Value> {
    let ids = || {
        prop::collection::vec(
            prop_oneof![(-2i64..n_vocab as i64 + 2).prop_map(|i| json!(i)), leaf(u)],
            0..5,
        )
    };
    match name {
        "samplers" => samplers(u).boxed(),
        "logit_bias" => logit_bias(n_vocab, u).boxed(),
        "dry_sequence_breaker_ids" => prop_oneof![
            prop::collection::vec(ids().prop_map(Value::Array), 0..4).prop_map(Value::Array),
            junk(u),
        ]
        .boxed(),
        "penalty_exempt" => prop_oneof![ids().prop_map(Value::Array), junk(u)].boxed(),
        "dry_sequence_breakers" => prop_oneof![
            prop::collection::vec(edge_string(u), 0..5).prop_map(Value::Array),
            junk(u),
        ]
        .boxed(),
        "repeat_penalty_mode" | "preset" => prop_oneof![4 => edge_string(u), 1 => junk(u)].boxed(),
        "penalize_prompt" | "penalty_once_per_token" | "ignore_eos" | "logprobs" => {
            prop_oneof![3 => any::<bool>().prop_map(Value::Bool), 1 => junk(u)].boxed()
        }
        _ => prop_oneof![6 => edge_number(), 1 => junk(u)].boxed(),
    }
}

/// A request object: some known fields (with values aimed at them), some unknown junk fields.
fn request(n_vocab: usize, u: bool) -> impl Strategy<Value = Value> {
    let known = prop::collection::vec(
        prop::sample::select(fields())
            .prop_flat_map(move |f| (Just(f), field_value(f, n_vocab, u))),
        0..10,
    );
    let unknown = prop::collection::btree_map(text(u, 10), junk(u), 0..3);
    (known, unknown).prop_map(|(known, unknown)| {
        let mut m: Map<String, Value> = unknown.into_iter().collect();
        for (f, v) in known {
            m.insert(f.to_string(), v);
        }
        Value::Object(m)
    })
}

/// A logit row: mostly moderate values, some `-inf`, occasionally huge magnitudes or NaN/+inf.
fn row(n_vocab: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(
        prop_oneof![
            8 => -30.0f32..30.0,
            2 => Just(f32::NEG_INFINITY),
            1 => prop::sample::select(vec![f32::MAX, -f32::MAX, 1e30, -1e30, 1e-40, 0.0, -0.0]),
            1 => any::<f32>(),
        ],
        n_vocab,
    )
}

/// A byte-level vocabulary over `n` tokens (token `b % n` for byte `b`), last token end-of-text:
/// enough to exercise the string forms of logit bias, DRY breakers, exemptions and `ignore_eos`.
struct ByteVocab(usize);

impl Vocab for ByteVocab {
    fn n_vocab(&self) -> usize {
        self.0
    }
    fn token_bytes(&self, id: TokenId) -> Vec<u8> {
        vec![id as u8]
    }
    fn tokenize(&self, text: &str) -> Vec<TokenId> {
        text.bytes()
            .map(|b| (b as usize % self.0) as TokenId)
            .collect()
    }
    fn eog_tokens(&self) -> Vec<TokenId> {
        vec![self.0 as TokenId - 1]
    }
}

fn check_message(e: &SamplingError) {
    let msg = e.to_string();
    assert!(!msg.trim().is_empty(), "an error without a message: {e:?}");
    if let SamplingError::Param { field, allowed, .. } = e {
        assert!(!field.is_empty() && !allowed.is_empty(), "{e:?}");
    }
}

/// Parse, build and sample: the whole path a request takes. Errors are checked for a message.
fn exercise(req: &Value, n_vocab: usize, with_vocab: bool, prompt: &[TokenId], rows: &[Vec<f32>]) {
    let params = match SamplingParams::from_value(req) {
        Ok(p) => p,
        Err(e) => return check_message(&e),
    };
    let vocab = ByteVocab(n_vocab);
    let vocab: Option<&dyn Vocab> = with_vocab.then_some(&vocab as &dyn Vocab);
    let mut chain = match Chain::from_params(&params, n_vocab, vocab) {
        Ok(c) => c,
        Err(e) => return check_message(&e),
    };
    // Params good enough for a chain also round-trip through their canonical JSON.
    let again = SamplingParams::from_value(&params.to_value());
    assert!(
        again.is_ok(),
        "to_value of {params:?} does not parse: {again:?}"
    );
    for &t in prompt {
        chain.accept_prompt(t);
    }
    for r in rows {
        match chain.sample(r) {
            Ok(t) => assert!(
                (0..n_vocab as TokenId).contains(&t),
                "token {t} of {n_vocab}"
            ),
            Err(e) => check_message(&e),
        }
    }
}

/// Bounded cases; a fixed seed unless `PROPTEST_RNG_SEED` is set.
fn config(cases: u32) -> Config {
    proptest_config(cases, 0x6761_7567_6539)
}

/// A request with every field name and random values, with a prompt and rows to sample.
fn request_case(
    u: bool,
) -> impl Strategy<Value = (usize, Value, Vec<TokenId>, Vec<Vec<f32>>, bool)> {
    (1usize..48).prop_flat_map(move |n| {
        (
            Just(n),
            request(n, u),
            prop::collection::vec(0..n as TokenId, 0..12),
            prop::collection::vec(row(n), 1..5),
            any::<bool>(),
        )
    })
}

fn any_value_case(v: &Value) {
    match SamplingParams::from_value(v) {
        Ok(p) => {
            let _ = Chain::from_params(&p, 8, None).map_err(|e| check_message(&e));
        }
        Err(e) => check_message(&e),
    }
}

proptest! {
    #![proptest_config(config(3000))]

    /// Any JSON value at all as the request.
    #[test]
    fn any_json_value_as_a_request_never_panics(v in junk(false)) {
        any_value_case(&v);
    }

    /// Arbitrary text (and text cut from a valid request) through `from_json`.
    #[test]
    fn any_text_as_a_request_never_panics(
        text in prop_oneof![
            text(false, 200),
            (0usize..200).prop_map(|n| {
                let s = r#"{"temperature": 0.7, "logit_bias": {"12": false, "a": -1.5}, "samplers": ["top_k", "dry"], "seed": 4294967295, "top_k": 1e400, "x": [[[]]]}"#;
                s.chars().take(n).collect::<String>()
            }),
        ]
    ) {
        if let Err(e) = SamplingParams::from_json(&text) {
            check_message(&e);
        }
    }
}

proptest! {
    #![proptest_config(config(3000))]

    /// Requests with the right names and random (often wrong or extreme) values, built into a
    /// chain with or without a vocabulary, fed a prompt and sampled for a few rows.
    #[test]
    fn random_requests_parse_build_and_sample_without_panicking(
        (n_vocab, req, prompt, rows, with_vocab) in request_case(false)
    ) {
        exercise(&req, n_vocab, with_vocab, &prompt, &rows);
    }
}

proptest! {
    #![proptest_config(config(1500))]

    /// The same with any Unicode text (found the multi-byte cut panic; see the module doc).
    #[test]
    fn random_unicode_requests_never_panic(
        (n_vocab, req, prompt, rows, with_vocab) in request_case(true)
    ) {
        exercise(&req, n_vocab, with_vocab, &prompt, &rows);
    }

    #[test]
    fn any_unicode_json_value_as_a_request_never_panics(v in junk(true)) {
        any_value_case(&v);
    }
}

/// The minimal case the fuzzer found: a wrong-type value longer than 80 bytes of JSON whose byte 77
/// falls inside `é`.
#[test]
fn wrong_type_value_with_multibyte_text_is_an_error_not_a_panic() {
    let req = json!({ "temperature": format!("a{}", "é".repeat(40)) });
    let e = SamplingParams::from_value(&req).unwrap_err();
    assert!(e.to_string().contains("temperature"), "{e}");
}

/// Requests that parse and build with valid values only, so that sampling itself is stressed
/// (every stage on, extreme but legal settings, long histories).
fn legal_request(n_vocab: usize) -> impl Strategy<Value = Value> {
    let unit = || prop_oneof![Just(0.0f64), Just(1.0), 0.0f64..=1.0];
    (
        (
            prop_oneof![Just(0.0f64), Just(1e-6), 0.0f64..5.0, Just(1e30)],
            prop_oneof![-2i32..(n_vocab as i32 + 2), Just(i32::MAX)],
            unit(),
            unit(),
            unit(),
            unit(),
            prop_oneof![Just(0.0f64), 0.0f64..1.0],
            prop_oneof![Just(-1.0f64), 0.0f64..5.0, Just(1e30)],
        ),
        (
            prop_oneof![Just(1.0f64), 0.01f64..4.0, Just(1e-30), Just(1e30)],
            prop_oneof![Just(0.0f64), -5.0f64..5.0, Just(1e30)],
            prop_oneof![Just(0.0f64), 0.0f64..5.0, Just(1e30)],
            prop_oneof![Just(1.0f64), 1.0f64..4.0, Just(1e30)],
            0i32..6,
            prop_oneof![Just(-1i32), 0i32..40],
            0i32..=2,
            prop_oneof![Just(-1.0f64), 0.0f64..=1.0],
        ),
        (
            0.0f64..=0.99,
            prop_oneof![Just(-1.0f64), 0.0f64..3.0],
            prop::sample::select(vec!["ctrl", "normalized"]),
            prop::collection::vec(prop::sample::select(&SAMPLER_NAMES[..14]), 0..12),
            prop::collection::vec((0..n_vocab as i64, prop_oneof![Just(json!(false)), (-50.0f64..50.0).prop_map(|x| json!(x))]), 0..4),
            prop::collection::vec(prop::collection::vec(0..n_vocab as i64, 1..3), 0..3),
            any::<u32>(),
            prop_oneof![Just(-1.0f64), -1.0f64..4.0],
        ),
    )
        .prop_map(
            |(
                (temp, top_k, top_p, min_p, typical_p, xtc_p, xtc_t, sigma),
                (rep, freq, pres, dry_base, dry_len, last_n, mirostat, adaptive),
                (decay, dynatemp, mode, samplers, bias, breakers, seed, dry_mult),
            )| {
                json!({
                    "temperature": temp, "top_k": top_k, "top_p": top_p, "min_p": min_p,
                    "typical_p": typical_p, "xtc_probability": xtc_p, "xtc_threshold": xtc_t,
                    "top_n_sigma": sigma, "repeat_penalty": rep, "frequency_penalty": freq,
                    "presence_penalty": pres, "dry_multiplier": dry_mult.max(0.0), "dry_base": dry_base,
                    "dry_allowed_length": dry_len, "repeat_last_n": last_n, "dry_penalty_last_n": last_n,
                    "mirostat": mirostat, "adaptive_target": adaptive, "adaptive_decay": decay,
                    "dynatemp_range": dynatemp, "repeat_penalty_mode": mode, "samplers": samplers,
                    "logit_bias": bias.into_iter().map(|(t, b)| json!([t, b])).collect::<Vec<_>>(),
                    "dry_sequence_breaker_ids": breakers, "seed": seed,
                })
            },
        )
}

proptest! {
    #![proptest_config(config(800))]

    #[test]
    fn legal_requests_sample_valid_tokens_without_panicking(
        (n_vocab, req, prompt, rows) in (1usize..40).prop_flat_map(|n| (
            Just(n),
            legal_request(n),
            prop::collection::vec(0..n as TokenId, 0..40),
            prop::collection::vec(row(n), 1..8),
        ))
    ) {
        exercise(&req, n_vocab, false, &prompt, &rows);
    }
}
