//! Bad input: every case gives its exact typed error, whose message names what was wrong, and
//! nothing panics. Row errors are checked on both the row fast path and llama.cpp's fill path.
//!
//! Not repeated here (already pinned elsewhere): the out-of-range request fields listed in
//! `tests/params.rs` (`every_out_of_range_field_is_a_param_error_naming_it`, seed, logit-bias ids
//! `>= n_vocab` and `"-1"` keys, breaker and exemption ids `>= n_vocab`, wrong JSON types), malformed
//! traces (`tests/trace.rs`), and bad shifts for `gauge::check` (`tests/gauge_props.rs`).
//!
//! Decisions pinned here:
//! * `n_vocab = 0` is refused when the chain is built, not at the first step.
//! * A chain whose stages mask every candidate (a logit-bias banning every finite token) returns
//!   [`SamplingError::NoFiniteLogit`]; llama.cpp's `dist` would return a banned token with NaN
//!   probabilities, its `greedy` the first banned token.
//! * `accept` / `accept_prompt` cannot return an error (llama.cpp's `accept` cannot either): an id
//!   outside the vocabulary is recorded like any other token, takes its place in the penalty and
//!   DRY windows, and matches no candidate, so it penalises nothing.

use gauge_sampling::chain::ChainBuilder;
use gauge_sampling::order;
use gauge_sampling::params::{LogitBias, SamplingParams, TokenRef};
use gauge_sampling::{Chain, SamplingError, TokenId};
use serde_json::json;

const ROW: [f32; 5] = [1.0, 2.0, 3.0, 0.5, -1.0];

/// The default chain (top-k, top-p, min-p, temp, dist) with a fixed seed over 5 tokens.
fn default_chain() -> Chain {
    Chain::from_params(
        &SamplingParams {
            seed: 1,
            ..SamplingParams::default()
        },
        ROW.len(),
        None,
    )
    .unwrap()
}

/// `chain` on the row fast path and on the fill path.
fn both_paths(chain: &Chain) -> [(bool, Chain); 2] {
    [
        (true, chain.clone()),
        (false, chain.clone().with_fast_path(false)),
    ]
}

fn parse(v: serde_json::Value) -> SamplingParams {
    SamplingParams::from_value(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
}

/// Asserts a `Param` error for `field` whose message names the field.
#[track_caller]
fn assert_param_error(err: SamplingError, want_field: &str) {
    let msg = err.to_string();
    match err {
        SamplingError::Param { field, .. } => assert_eq!(field, want_field, "{msg}"),
        other => panic!("expected a Param error for `{want_field}`, got {other:?}"),
    }
    assert!(
        msg.contains(&format!("`{want_field}`")),
        "message does not name `{want_field}`: {msg}"
    );
}

// ------------------------------------------------------------------------------------------------
// Logit rows

#[test]
fn nan_logit_is_non_finite_logit_naming_the_token() {
    for (fast, mut chain) in both_paths(&default_chain()) {
        let mut row = ROW;
        row[3] = f32::NAN;
        let err = chain.sample(&row).unwrap_err();
        assert!(
            matches!(err, SamplingError::NonFiniteLogit { index: 3, value } if value.is_nan()),
            "fast={fast}: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("token 3") && msg.contains("NaN"),
            "fast={fast}: {msg}"
        );
    }
}

#[test]
fn plus_inf_logit_is_non_finite_logit_naming_the_token() {
    for (fast, mut chain) in both_paths(&default_chain()) {
        let mut row = ROW;
        row[0] = f32::INFINITY;
        let err = chain.sample(&row).unwrap_err();
        assert_eq!(
            err,
            SamplingError::NonFiniteLogit {
                index: 0,
                value: f32::INFINITY
            },
            "fast={fast}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("token 0") && msg.contains("is inf"),
            "fast={fast}: {msg}"
        );
    }
}

#[test]
fn all_neg_inf_row_is_no_finite_logit() {
    for (fast, mut chain) in both_paths(&default_chain()) {
        let err = chain.sample(&[f32::NEG_INFINITY; 5]).unwrap_err();
        assert_eq!(err, SamplingError::NoFiniteLogit, "fast={fast}");
        assert!(
            err.to_string().contains("every logit is -inf"),
            "fast={fast}: {err}"
        );
    }
}

#[test]
fn row_of_the_wrong_length_is_row_length_with_both_sizes() {
    for (fast, mut chain) in both_paths(&default_chain()) {
        for len in [4usize, 6, 1000] {
            let err = chain.sample(&vec![0.5; len]).unwrap_err();
            assert_eq!(
                err,
                SamplingError::RowLength {
                    expected: 5,
                    got: len
                },
                "fast={fast}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("has {len} entries")) && msg.contains("n_vocab = 5"),
                "fast={fast}: {msg}"
            );
        }
    }
}

#[test]
fn empty_row_is_row_length_for_a_non_empty_vocabulary() {
    for (fast, mut chain) in both_paths(&default_chain()) {
        let err = chain.sample(&[]).unwrap_err();
        assert_eq!(
            err,
            SamplingError::RowLength {
                expected: 5,
                got: 0
            },
            "fast={fast}"
        );
        assert!(
            err.to_string().contains("has 0 entries"),
            "fast={fast}: {err}"
        );
    }
}

#[test]
fn a_rejected_row_leaves_the_chain_state_untouched() {
    // The next valid step must give what it gives on a chain that never saw the bad row.
    let p = parse(
        json!({"seed": 9, "repeat_penalty": 1.5, "dry_multiplier": 1.0, "dry_sequence_breaker_ids": []}),
    );
    let fresh = Chain::from_params(&p, 5, None).unwrap();
    for (fast, mut chain) in both_paths(&fresh) {
        let mut reference = fresh.clone().with_fast_path(fast);
        for t in [2, 1, 2] {
            chain.accept_prompt(t);
            reference.accept_prompt(t);
        }
        assert!(chain.sample(&[0.0, f32::NAN, 0.0, 0.0, 0.0]).is_err());
        assert!(chain.sample(&[0.0; 3]).is_err());
        for _ in 0..5 {
            assert_eq!(
                chain.sample(&ROW).unwrap(),
                reference.sample(&ROW).unwrap(),
                "fast={fast}"
            );
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Empty vocabulary

#[test]
fn empty_vocabulary_is_refused_at_build_time() {
    let errs = [
        Chain::from_params(&SamplingParams::default(), 0, None).unwrap_err(),
        ChainBuilder::new(0).build().unwrap_err(),
        ChainBuilder::greedy(0).build().unwrap_err(),
        Chain::from_params(&parse(json!({"mirostat": 1})), 0, None).unwrap_err(),
    ];
    for err in errs {
        assert!(
            err.to_string().contains("invalid value for `n_vocab`: 0"),
            "{err}"
        );
        assert_param_error(err, "n_vocab");
    }
}

#[test]
fn vocabulary_beyond_32_bit_token_ids_is_refused_at_build_time() {
    let n = i32::MAX as usize + 1;
    assert_param_error(ChainBuilder::greedy(n).build().unwrap_err(), "n_vocab");
    // the largest representable vocabulary builds (no allocation happens before the first row)
    ChainBuilder::greedy(i32::MAX as usize).build().unwrap();
}

#[test]
fn chain_from_stages_over_an_empty_vocabulary_is_empty_at_the_first_step() {
    // `from_stages` cannot fail; the empty row is then reported by `sample`.
    let chain = Chain::from_stages(0, vec![gauge_sampling::samplers::greedy::build()]);
    for (fast, mut chain) in both_paths(&chain) {
        let err = chain.sample(&[]).unwrap_err();
        assert_eq!(
            err,
            SamplingError::Empty("the vocabulary is empty".into()),
            "fast={fast}"
        );
        assert!(
            err.to_string()
                .contains("empty candidate set: the vocabulary is empty"),
            "{err}"
        );
    }
}

#[test]
fn chain_without_a_terminal_is_empty_selection() {
    let chain = Chain::from_stages(5, vec![gauge_sampling::samplers::top_k::build(2)]);
    for (fast, mut chain) in both_paths(&chain) {
        let err = chain.sample(&ROW).unwrap_err();
        assert!(
            matches!(&err, SamplingError::Empty(m) if m.contains("no candidate was selected")),
            "fast={fast}: {err:?}"
        );
        assert!(err.to_string().contains("no terminal sampler"), "{err}");
    }
}

// ------------------------------------------------------------------------------------------------
// Every candidate masked by the chain itself

#[test]
fn logit_bias_banning_every_finite_token_is_no_finite_logit_not_a_banned_token() {
    // Regression: the row is valid (finite values), but the bias bans all of them. llama.cpp's dist
    // then computes NaN probabilities and falls back to the last candidate (a banned token).
    let ban_all =
        |b: ChainBuilder<'static>| (0..5).fold(b, |b, t| b.with_logit_bias(t, f32::NEG_INFINITY));
    let chains = [
        (
            "dist",
            ban_all(ChainBuilder::new(5).with_seed(1)).build().unwrap(),
        ),
        ("greedy", ban_all(ChainBuilder::greedy(5)).build().unwrap()),
        (
            "mirostat",
            ban_all(ChainBuilder::new(5).with_seed(1).with_mirostat(1, 5.0, 0.1))
                .build()
                .unwrap(),
        ),
        (
            "mirostat-v2",
            ban_all(ChainBuilder::new(5).with_seed(1).with_mirostat(2, 5.0, 0.1))
                .build()
                .unwrap(),
        ),
        (
            "adaptive-p",
            ban_all(ChainBuilder::new(5).with_seed(1).with_adaptive_p(0.5, 0.9))
                .build()
                .unwrap(),
        ),
        (
            "temp 0",
            ban_all(ChainBuilder::new(5).with_seed(1).with_temperature(0.0))
                .build()
                .unwrap(),
        ),
    ];
    for (name, chain) in chains {
        for (fast, mut chain) in both_paths(&chain) {
            assert_eq!(
                chain.sample(&ROW),
                Err(SamplingError::NoFiniteLogit),
                "{name} fast={fast}"
            );
        }
    }
    // Banning all but one finite token still samples that token.
    let chain = (0..4)
        .fold(ChainBuilder::new(5).with_seed(1), |b, t| {
            b.with_logit_bias(t, f32::NEG_INFINITY)
        })
        .build()
        .unwrap();
    for (fast, mut chain) in both_paths(&chain) {
        assert_eq!(chain.sample(&ROW), Ok(4), "fast={fast}");
    }
}

#[test]
fn penalties_that_push_every_token_to_minus_inf_are_no_finite_logit() {
    // A (finite, accepted) frequency penalty so large that a token seen twice ends at -inf
    // (2 * 3e38 overflows). Seen once, it is -3e38: finite, and still a candidate.
    let p = parse(
        json!({"seed": 1, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "frequency_penalty": 3e38, "repeat_last_n": -1}),
    );
    let chain = Chain::from_params(&p, 5, None).unwrap();
    for (fast, mut chain) in both_paths(&chain) {
        for t in [0, 1, 2, 3, 0, 1, 2, 3] {
            chain.accept_prompt(t);
        }
        assert_eq!(
            chain.sample(&ROW),
            Ok(4),
            "fast={fast}: the only token not seen twice"
        );
        chain.accept_prompt(4);
        assert_eq!(
            chain.sample(&ROW),
            Err(SamplingError::NoFiniteLogit),
            "fast={fast}"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Request fields not covered by tests/params.rs

#[test]
fn nan_in_every_float_field_is_a_param_error_naming_it() {
    // NaN cannot come through JSON, only through the struct (the builder, a program).
    type Set = fn(&mut SamplingParams);
    let cases: [(&str, Set); 18] = [
        ("temperature", |p| p.temperature = f32::NAN),
        ("dynatemp_range", |p| p.dynatemp_range = f32::NAN),
        ("dynatemp_exponent", |p| p.dynatemp_exponent = f32::NAN),
        ("top_p", |p| p.top_p = f32::NAN),
        ("min_p", |p| p.min_p = f32::NAN),
        ("typical_p", |p| p.typical_p = f32::NAN),
        ("xtc_probability", |p| p.xtc_probability = f32::NAN),
        ("xtc_threshold", |p| p.xtc_threshold = f32::NAN),
        ("top_n_sigma", |p| p.top_n_sigma = f32::NAN),
        ("repeat_penalty", |p| p.repeat_penalty = f32::NAN),
        ("frequency_penalty", |p| p.frequency_penalty = f32::NAN),
        ("presence_penalty", |p| p.presence_penalty = f32::NAN),
        ("dry_multiplier", |p| p.dry_multiplier = f32::NAN),
        ("dry_base", |p| p.dry_base = f32::NAN),
        ("mirostat_tau", |p| p.mirostat_tau = f32::NAN),
        ("mirostat_eta", |p| p.mirostat_eta = f32::NAN),
        ("adaptive_target", |p| p.adaptive_target = f32::NAN),
        ("adaptive_decay", |p| p.adaptive_decay = f32::NAN),
    ];
    for (field, set) in cases {
        let mut p = SamplingParams::default();
        set(&mut p);
        let err = p.validate(100).unwrap_err();
        assert!(err.to_string().contains("NaN"), "{field}: {err}");
        assert_eq!(
            Chain::from_params(&p, 100, None).unwrap_err(),
            err,
            "{field}"
        );
        assert_param_error(err, field);
    }
    let mut p = SamplingParams::default();
    p.logit_bias.push(LogitBias {
        token: TokenRef::Id(3),
        bias: f32::NAN,
    });
    let err = p.validate(100).unwrap_err();
    assert!(err.to_string().contains("NaN"), "{err}");
    assert_param_error(err, "logit_bias");
    // the builder takes the same path
    assert_param_error(
        ChainBuilder::new(100)
            .with_temperature(f32::NAN)
            .build()
            .unwrap_err(),
        "temperature",
    );
    assert_param_error(
        ChainBuilder::new(100)
            .with_logit_bias(3, f32::NAN)
            .build()
            .unwrap_err(),
        "logit_bias",
    );
}

#[test]
fn infinite_values_not_covered_by_the_params_tests_are_param_errors() {
    // 1e39 parses to f32 +inf (and -1e39 to -inf).
    for (req, field) in [
        (json!({"temperature": 1e39}), "temperature"),
        (json!({"top_p": 1e39}), "top_p"),
        (json!({"min_p": -1e39}), "min_p"),
        (json!({"dry_multiplier": 1e39}), "dry_multiplier"),
        (json!({"dry_base": 1e39}), "dry_base"),
        (json!({"mirostat_tau": 1e39}), "mirostat_tau"),
        (json!({"mirostat_eta": 1e39}), "mirostat_eta"),
        (json!({"adaptive_target": -1e39}), "adaptive_target"),
        (json!({"adaptive_decay": 1e39}), "adaptive_decay"),
        (json!({"xtc_probability": -1e39}), "xtc_probability"),
    ] {
        let err = parse(req.clone()).validate(100).unwrap_err();
        assert!(err.to_string().contains("inf"), "{req}: {err}");
        assert_param_error(err, field);
    }
}

#[test]
fn xtc_probability_below_zero_and_threshold_above_one_are_param_errors() {
    // llama-server clamps both into [0, 1]; gauge refuses (see the params module docs).
    for (req, field) in [
        (json!({"xtc_probability": -0.1}), "xtc_probability"),
        (json!({"xtc_threshold": 1.1}), "xtc_threshold"),
    ] {
        let err = parse(req.clone()).validate(100).unwrap_err();
        assert!(err.to_string().contains("[0, 1]"), "{req}: {err}");
        assert_param_error(err, field);
    }
}

#[test]
fn negative_token_ids_are_token_out_of_range_naming_the_field() {
    let cases: [(ChainBuilder<'static>, &str, i64); 4] = [
        (
            ChainBuilder::new(10).with_logit_bias(-5, 1.0),
            "logit_bias",
            -5,
        ),
        (
            ChainBuilder::greedy(10).with_logit_bias(-1, f32::NEG_INFINITY),
            "logit_bias",
            -1,
        ),
        (
            ChainBuilder::new(10)
                .with_penalties(64, 1.1, 0.0, 0.0)
                .with_penalty_exempt([3, -1]),
            "penalty_exempt",
            -1,
        ),
        (
            ChainBuilder::new(10)
                .with_dry(0.8, 1.75, 2, 64)
                .with_dry_breaker_ids(vec![vec![1], vec![2, -2]]),
            "dry_sequence_breaker_ids",
            -2,
        ),
    ];
    for (builder, want_field, want_token) in cases {
        let err = builder.build().unwrap_err();
        let msg = err.to_string();
        assert_eq!(
            err,
            SamplingError::TokenOutOfRange {
                field: want_field.into(),
                token: want_token,
                n_vocab: 10
            },
            "{msg}"
        );
        assert!(
            msg.contains(&format!("token id {want_token} in `{want_field}`"))
                && msg.contains("n_vocab = 10"),
            "{msg}"
        );
    }
    // the request's pair form (tests/params.rs covers the object form's "-1" key)
    let err = parse(json!({"logit_bias": [[-7, 2.0]]}))
        .validate(10)
        .unwrap_err();
    assert_eq!(
        err,
        SamplingError::TokenOutOfRange {
            field: "logit_bias".into(),
            token: -7,
            n_vocab: 10
        }
    );
}

#[test]
fn logit_bias_id_at_n_vocab_through_the_builder_is_token_out_of_range() {
    let err = ChainBuilder::new(10)
        .with_logit_bias(10, 1.0)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        SamplingError::TokenOutOfRange {
            field: "logit_bias".into(),
            token: 10,
            n_vocab: 10
        }
    );
    assert!(
        err.to_string()
            .contains("token id 10 in `logit_bias` is out of range (n_vocab = 10)"),
        "{err}"
    );
}

#[test]
fn unknown_sampler_name_message_names_it_and_lists_the_known_ones() {
    for err in [
        SamplingParams::from_value(&json!({"samplers": ["top_k", "nucleus_sampling"]}))
            .unwrap_err(),
        order::parse_names(&["min_p", "nucleus_sampling"]).unwrap_err(),
    ] {
        assert_eq!(
            err,
            SamplingError::UnknownSampler("nucleus_sampling".into())
        );
        let msg = err.to_string();
        assert!(
            msg.contains("`nucleus_sampling`") && msg.contains("known: penalties, dry"),
            "{msg}"
        );
    }
}

#[test]
fn unknown_sampler_letter_message_names_it_and_lists_the_known_ones() {
    for err in [
        SamplingParams::from_value(&json!({"samplers": "kpq"})).unwrap_err(),
        order::parse_letters("ekq").unwrap_err(),
    ] {
        assert_eq!(err, SamplingError::UnknownSamplerLetter('q'));
        let msg = err.to_string();
        assert!(
            msg.contains("`q`") && msg.contains("known: e d s k y p m x t i a"),
            "{msg}"
        );
    }
}

#[test]
fn malformed_json_params_message_gives_the_position() {
    for (text, at) in [
        ("{\"top_k\": 40,", "line 1 column 13"),
        ("{\"top_k\": 40\n \"top_p\": 0.9}", "line 2 column 2"),
        ("{\"top_k\": 4O}", "line 1 column 12"),
        ("", "line 1 column 0"),
    ] {
        let err = SamplingParams::from_json(text).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, SamplingError::Json(_)), "{text:?}: {err:?}");
        assert!(
            msg.starts_with("malformed JSON: ") && msg.contains(at),
            "{text:?}: {msg}"
        );
    }
    // Valid JSON that is not an object names what it got.
    let err = SamplingParams::from_json("[40]").unwrap_err();
    assert!(
        matches!(&err, SamplingError::Json(m) if m.contains("expected a JSON object") && m.contains("an array")),
        "{err:?}"
    );
}

// ------------------------------------------------------------------------------------------------
// History ids outside the vocabulary

/// Greedy with ctrl penalties over `window` and DRY, after `prompt`; the first `steps` tokens.
fn greedy_tokens(window: i32, prompt: &[TokenId], fast: bool, steps: usize) -> Vec<TokenId> {
    let mut chain = ChainBuilder::greedy(5)
        .with_penalties(window, 3.0, 0.5, 0.5)
        .with_dry(2.0, 2.0, 1, window)
        .with_dry_breaker_ids(vec![])
        .build()
        .unwrap()
        .with_fast_path(fast);
    for &t in prompt {
        chain.accept_prompt(t);
    }
    (0..steps).map(|_| chain.sample(&ROW).unwrap()).collect()
}

#[test]
fn out_of_range_history_ids_penalise_nothing_and_do_not_panic() {
    let bad: [TokenId; 6] = [5, 7, -1, -3, TokenId::MAX, TokenId::MIN];
    for fast in [true, false] {
        // Whole-history window: the bad ids change nothing.
        let mut with_bad = vec![2, 2, 1];
        with_bad.extend_from_slice(&bad);
        assert_eq!(
            greedy_tokens(-1, &with_bad, fast, 8),
            greedy_tokens(-1, &[2, 2, 1], fast, 8),
            "fast={fast}"
        );
        // Through `accept` too, and on every terminal kind (no panic, a valid token each step).
        for req in [
            json!({"seed": 2, "repeat_penalty": 1.3}),
            json!({"seed": 2, "mirostat": 1}),
            json!({"seed": 2, "mirostat": 2}),
            json!({"seed": 2, "samplers": ["top_k", "adaptive_p"], "adaptive_target": 0.3}),
        ] {
            let mut chain = Chain::from_params(&parse(req.clone()), 5, None)
                .unwrap()
                .with_fast_path(fast);
            for &t in &bad {
                chain.accept_prompt(t);
                chain.accept(t);
            }
            for _ in 0..4 {
                let t = chain.sample(&ROW).unwrap_or_else(|e| panic!("{req}: {e}"));
                assert!((0..5).contains(&t), "{req}: {t}");
            }
        }
    }
}

#[test]
fn out_of_range_history_ids_take_a_place_in_the_window() {
    // As in llama.cpp's ring buffers: with a window of 2, two bad ids push the real token 2 out,
    // so the result is that of an empty history; a single bad id leaves 2 in the window.
    for fast in [true, false] {
        let empty = greedy_tokens(2, &[], fast, 1);
        let seen_2 = greedy_tokens(2, &[2], fast, 1);
        assert_ne!(
            empty, seen_2,
            "the test needs token 2's penalty to change the choice"
        );
        assert_eq!(greedy_tokens(2, &[2, 9, -4], fast, 1), empty, "fast={fast}");
        assert_eq!(greedy_tokens(2, &[2, 9], fast, 1), seen_2, "fast={fast}");
    }
}
