//! `SamplingParams`: request parsing, aliases, validation errors, logit-bias forms, presets and the
//! chain builder.

mod common;

use gauge_sampling::chain::ChainBuilder;
use gauge_sampling::order::SamplerType;
use gauge_sampling::params::{LogitBias, SamplingParams, TokenRef};
use gauge_sampling::presets::Preset;
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::{Chain, SamplingError, TokenId, Vocab};
use serde_json::{json, Value};

/// A tiny vocabulary: longest-match tokenization over these texts; token 0 is the only EOG.
struct TinyVocab;

const TEXTS: [&str; 10] = [
    "</s>", "hi", " there", ":", "\n", "a", "\"", "*", "hi there", "b",
];

impl Vocab for TinyVocab {
    fn n_vocab(&self) -> usize {
        TEXTS.len()
    }
    fn token_bytes(&self, id: TokenId) -> Vec<u8> {
        TEXTS[id as usize].as_bytes().to_vec()
    }
    fn tokenize(&self, text: &str) -> Vec<TokenId> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // longest match among the non-special tokens; characters it lacks are skipped
            match TEXTS
                .iter()
                .enumerate()
                .skip(1)
                .filter(|(_, t)| rest.starts_with(**t))
                .max_by_key(|(_, t)| t.len())
            {
                Some((id, t)) => {
                    out.push(id as TokenId);
                    rest = &rest[t.len()..];
                }
                None => rest = &rest[rest.chars().next().unwrap().len_utf8()..],
            }
        }
        out
    }
    fn eog_tokens(&self) -> Vec<TokenId> {
        vec![0]
    }
}

fn parse(v: Value) -> SamplingParams {
    SamplingParams::from_value(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
}

fn param_field(err: SamplingError) -> String {
    match err {
        SamplingError::Param { field, .. } => field,
        other => panic!("expected a Param error, got {other:?}"),
    }
}

// ------------------------------------------------------------------------------------------------
// Defaults, nulls, aliases

#[test]
fn defaults_print_like_llama_cpp_defaults() {
    let data = common::load_json("chain_prints.json");
    let defaults = data["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["label"].as_str().unwrap().ends_with("): defaults"))
        .unwrap();
    assert_eq!(
        SamplingParams::default().print_params(),
        defaults["params_print"].as_str().unwrap()
    );
    assert_eq!(parse(json!({})), SamplingParams::default());
}

#[test]
fn null_means_absent_and_unknown_fields_are_ignored() {
    let p = parse(
        json!({"top_k": null, "temperature": null, "stream": true, "n_keep": 5, "grammar": "root ::= x"}),
    );
    assert_eq!(p, SamplingParams::default());
}

#[test]
fn malformed_json_is_an_error() {
    assert!(matches!(
        SamplingParams::from_json("{\"top_k\": 40,"),
        Err(SamplingError::Json(_))
    ));
    assert!(matches!(
        SamplingParams::from_json("[1, 2]"),
        Err(SamplingError::Json(_))
    ));
    assert!(serde_json::from_str::<SamplingParams>("{\"top_k\": }").is_err());
}

#[test]
fn wrong_json_type_names_the_field() {
    for (req, field) in [
        (json!({"top_k": "forty"}), "top_k"),
        (json!({"top_k": 40.5}), "top_k"),
        (json!({"top_p": "0.9"}), "top_p"),
        (json!({"ignore_eos": 1}), "ignore_eos"),
        (json!({"repeat_penalty_mode": "hf"}), "repeat_penalty_mode"),
        (json!({"samplers": 7}), "samplers"),
        (
            json!({"dry_sequence_breakers": "\n"}),
            "dry_sequence_breakers",
        ),
        (json!({"penalty_exempt": [true]}), "penalty_exempt"),
        (json!({"preset": "fast"}), "preset"),
        (json!({"top_k": 1e12}), "top_k"),
    ] {
        assert_eq!(
            param_field(SamplingParams::from_value(&req).unwrap_err()),
            field,
            "{req}"
        );
    }
}

#[test]
fn integral_floats_are_accepted_for_integer_fields() {
    assert_eq!(parse(json!({"top_k": 40.0})).top_k, 40);
}

#[test]
fn server_and_openai_aliases() {
    assert_eq!(parse(json!({"temp": 0.3})).temperature, 0.3);
    // Two names with different values are a conflict (tests/request_fields.rs); equal values agree.
    assert_eq!(
        parse(json!({"temperature": 0.5, "temp": 0.5})).temperature,
        0.5
    );
    assert_eq!(parse(json!({"max_tokens": 12})).n_predict, 12);
    assert_eq!(parse(json!({"max_completion_tokens": 13})).n_predict, 13);
    assert!(SamplingParams::from_value(&json!({"n_predict": 5, "max_tokens": 12})).is_err());
    assert_eq!(parse(json!({"logprobs": 3})).n_probs, 3);
    assert_eq!(parse(json!({"logprobs": true})).n_probs, 20);
    assert_eq!(
        parse(json!({"logprobs": true, "top_logprobs": 4})).n_probs,
        4
    );
    assert_eq!(parse(json!({"logprobs": false})).n_probs, 0);
    assert_eq!(parse(json!({"n_probs": 2, "logprobs": true})).n_probs, 2);
    assert_eq!(parse(json!({"n_probs": 2, "logprobs": 2})).n_probs, 2);
    assert!(SamplingParams::from_value(&json!({"n_probs": 2, "logprobs": 7})).is_err());
    assert!(SamplingParams::from_value(&json!({"n_probs": 2, "logprobs": "x"})).is_err());
}

#[test]
fn gauge_fields_parse() {
    let p = parse(json!({
        "repeat_penalty_mode": "normalized", "penalize_prompt": false, "penalty_once_per_token": true,
        "penalty_exempt": [3, "hi"], "dry_sequence_breaker_ids": [[4], [3, 5]]
    }));
    assert_eq!(p.repeat_penalty_mode, PenaltyMode::Normalized);
    assert!(!p.penalize_prompt);
    assert!(p.penalty_once_per_token);
    assert_eq!(
        p.penalty_exempt,
        vec![TokenRef::Id(3), TokenRef::Text("hi".into())]
    );
    assert_eq!(p.dry_sequence_breaker_ids, Some(vec![vec![4], vec![3, 5]]));
}

// ------------------------------------------------------------------------------------------------
// Seed

#[test]
fn seed_minus_one_is_the_random_seed() {
    assert_eq!(parse(json!({"seed": -1})).seed, 0xFFFF_FFFF);
    assert_eq!(parse(json!({"seed": 4294967295u64})).seed, 0xFFFF_FFFF);
    assert_eq!(parse(json!({"seed": 42})).seed, 42);
    assert_eq!(SamplingParams::default().seed, 0xFFFF_FFFF);
    for bad in [json!({"seed": -2}), json!({"seed": 4294967296u64})] {
        assert_eq!(
            param_field(SamplingParams::from_value(&bad).unwrap_err()),
            "seed"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Validation: every range

#[test]
fn every_out_of_range_field_is_a_param_error_naming_it() {
    let cases = [
        (json!({"temperature": -0.1}), "temperature"),
        (json!({"dynatemp_range": 1e39}), "dynatemp_range"),
        (json!({"dynatemp_exponent": 1e39}), "dynatemp_exponent"),
        (json!({"top_p": 1.01}), "top_p"),
        (json!({"top_p": -0.01}), "top_p"),
        (json!({"min_p": 1.5}), "min_p"),
        (json!({"min_p": -0.5}), "min_p"),
        (json!({"typical_p": 1.2}), "typical_p"),
        (json!({"typical_p": -0.2}), "typical_p"),
        (json!({"xtc_probability": 1.1}), "xtc_probability"),
        (json!({"xtc_threshold": -0.1}), "xtc_threshold"),
        (json!({"top_n_sigma": 1e39}), "top_n_sigma"),
        (json!({"min_keep": -1}), "min_keep"),
        (json!({"repeat_last_n": -2}), "repeat_last_n"),
        (json!({"repeat_penalty": 0.0}), "repeat_penalty"),
        (json!({"repeat_penalty": -1.1}), "repeat_penalty"),
        (json!({"repeat_penalty": 1e39}), "repeat_penalty"),
        // finite, but its inverse overflows f32: common_sampler_init rejects it too
        (json!({"repeat_penalty": 1e-39}), "repeat_penalty"),
        (json!({"frequency_penalty": 1e39}), "frequency_penalty"),
        (json!({"presence_penalty": -1e39}), "presence_penalty"),
        (json!({"dry_multiplier": -0.5}), "dry_multiplier"),
        (json!({"dry_base": 0.9}), "dry_base"),
        (json!({"dry_allowed_length": -1}), "dry_allowed_length"),
        (json!({"dry_penalty_last_n": -2}), "dry_penalty_last_n"),
        (
            json!({"dry_sequence_breakers": ["\n", ""]}),
            "dry_sequence_breakers",
        ),
        (
            json!({"dry_sequence_breaker_ids": [[]]}),
            "dry_sequence_breaker_ids",
        ),
        (json!({"mirostat": 3}), "mirostat"),
        (json!({"mirostat": -1}), "mirostat"),
        (json!({"mirostat_tau": -1.0}), "mirostat_tau"),
        (json!({"mirostat_eta": -0.1}), "mirostat_eta"),
        (json!({"adaptive_target": 1.5}), "adaptive_target"),
        (json!({"adaptive_decay": 0.995}), "adaptive_decay"),
        (json!({"adaptive_decay": -0.1}), "adaptive_decay"),
        // `n_probs: -1` is refused at parse time, under the name sent (tests/logprobs_fields.rs).
        (json!({"n_predict": -2}), "n_predict"),
    ];
    for (req, field) in cases {
        let p = parse(req.clone());
        let err = p.validate(32000).unwrap_err();
        assert_eq!(param_field(err.clone()), field, "{req}");
        // from_params validates first, with the same error
        assert_eq!(
            Chain::from_params(&p, 32000, None).unwrap_err(),
            err,
            "{req}"
        );
    }
}

#[test]
fn range_edges_are_accepted() {
    for req in [
        json!({"temperature": 0.0, "top_p": 0.0, "min_p": 1.0, "typical_p": 0.0, "xtc_probability": 1.0, "xtc_threshold": 1.0}),
        json!({"repeat_last_n": -1, "dry_penalty_last_n": -1, "dry_base": 1.0, "top_k": -5, "mirostat": 2}),
        json!({"adaptive_target": 1.0, "adaptive_decay": 0.99, "n_predict": -1, "dry_sequence_breakers": []}),
    ] {
        parse(req.clone())
            .validate(32000)
            .unwrap_or_else(|e| panic!("{req}: {e}"));
    }
}

#[test]
fn top_k_below_zero_is_off_like_llama_cpp_clamp() {
    let chain = Chain::from_params(&parse(json!({"top_k": -3})), 100, None).unwrap();
    assert!(chain.describe().contains("-> ?top-k "));
}

// ------------------------------------------------------------------------------------------------
// Sampler names and letters

#[test]
fn samplers_as_names_or_letters() {
    let names = parse(
        json!({"samplers": ["Top-K", "nucleus", "typ", "min-p", "temp", "top_n_sigma", "XTC", "penalties", "dry"]}),
    );
    assert_eq!(
        names.samplers,
        vec![
            SamplerType::TopK,
            SamplerType::TopP,
            SamplerType::TypicalP,
            SamplerType::MinP,
            SamplerType::Temperature,
            SamplerType::TopNSigma,
            SamplerType::Xtc,
            SamplerType::Penalties,
            SamplerType::Dry
        ]
    );
    let letters = parse(json!({"samplers": "edskypmxt"}));
    assert_eq!(letters.samplers, SamplingParams::default().samplers);
}

#[test]
fn unknown_sampler_name_or_letter_is_an_error() {
    assert_eq!(
        SamplingParams::from_value(&json!({"samplers": ["top_k", "top_kk"]})).unwrap_err(),
        SamplingError::UnknownSampler("top_kk".into())
    );
    assert_eq!(
        SamplingParams::from_value(&json!({"samplers": "kpZ"})).unwrap_err(),
        SamplingError::UnknownSamplerLetter('Z')
    );
    // letters are case-sensitive, as in llama.cpp
    assert_eq!(
        SamplingParams::from_value(&json!({"samplers": "K"})).unwrap_err(),
        SamplingError::UnknownSamplerLetter('K')
    );
}

#[test]
fn infill_is_recognised_but_unsupported() {
    let p = parse(json!({"samplers": ["top_k", "infill"]}));
    assert!(matches!(
        p.validate(100),
        Err(SamplingError::Param { field, .. }) if field == "samplers"
    ));
    assert!(matches!(
        Chain::from_params(&p, 100, None),
        Err(SamplingError::Param { field, .. }) if field == "samplers"
    ));
    assert!(matches!(
        Chain::from_params(&parse(json!({"samplers": "ki"})), 100, None),
        Err(SamplingError::Param { field, .. }) if field == "samplers"
    ));
}

#[test]
fn repeated_slots_each_build_a_stage() {
    let chain = Chain::from_params(
        &parse(json!({"samplers": ["top_k", "top_k", "temperature"]})),
        100,
        None,
    )
    .unwrap();
    assert_eq!(
        chain.describe(),
        "logits -> top-k -> top-k -> temp-ext -> dist "
    );
}

// ------------------------------------------------------------------------------------------------
// logit_bias in every form

#[test]
fn logit_bias_pairs_object_and_false() {
    let pairs = parse(json!({"logit_bias": [[5, 1.5], [7, false], ["hi", -2]]}));
    assert_eq!(
        pairs.logit_bias,
        vec![
            LogitBias {
                token: TokenRef::Id(5),
                bias: 1.5
            },
            LogitBias {
                token: TokenRef::Id(7),
                bias: f32::NEG_INFINITY
            },
            LogitBias {
                token: TokenRef::Text("hi".into()),
                bias: -2.0
            },
        ]
    );
    let obj = parse(json!({"logit_bias": {"5": 1.5, "7": false, "hi": -2}}));
    let mut got = obj.logit_bias.clone();
    got.sort_by_key(|b| format!("{:?}", b.token));
    let mut want = pairs.logit_bias.clone();
    want.sort_by_key(|b| format!("{:?}", b.token));
    assert_eq!(got, want);
    // strtol rule: a key that is entirely an integer (sign allowed) is an id, anything else is text
    let keys = parse(json!({"logit_bias": {"-3": 1, "12a": 1}}));
    assert!(keys.logit_bias.contains(&LogitBias {
        token: TokenRef::Id(-3),
        bias: 1.0
    }));
    assert!(keys.logit_bias.contains(&LogitBias {
        token: TokenRef::Text("12a".into()),
        bias: 1.0
    }));
}

#[test]
fn logit_bias_malformed_entries_are_errors() {
    for bad in [
        json!({"logit_bias": [[5, true]]}),
        json!({"logit_bias": [[5]]}),
        json!({"logit_bias": [5, 1.0]}),
        json!({"logit_bias": {"5": "x"}}),
        json!({"logit_bias": 3}),
    ] {
        assert_eq!(
            param_field(SamplingParams::from_value(&bad).unwrap_err()),
            "logit_bias",
            "{bad}"
        );
    }
}

#[test]
fn logit_bias_token_out_of_range() {
    for (req, token) in [
        (json!({"logit_bias": [[10, 1.0]]}), 10),
        (json!({"logit_bias": {"-1": 1.0}}), -1),
    ] {
        let err = parse(req.clone()).validate(10).unwrap_err();
        assert_eq!(
            err,
            SamplingError::TokenOutOfRange {
                field: "logit_bias".into(),
                token,
                n_vocab: 10
            },
            "{req}"
        );
    }
    parse(json!({"logit_bias": [[9, 1.0]]}))
        .validate(10)
        .unwrap();
    // a +inf or NaN bias would poison the row; -inf (false) is the ban
    assert_eq!(
        param_field(
            parse(json!({"logit_bias": [[1, 1e39]]}))
                .validate(10)
                .unwrap_err()
        ),
        "logit_bias"
    );
}

/// Greedy over a flat row after the chain's logit-bias: which token wins.
fn greedy_pick(req: Value, vocab: Option<&dyn Vocab>) -> TokenId {
    let mut b = ChainBuilder::from_params(parse(req), TEXTS.len()).with_temperature(0.0);
    if let Some(v) = vocab {
        b = b.with_vocab(v);
    }
    let mut chain = b.build().unwrap();
    chain.sample(&[0.0; TEXTS.len()]).unwrap()
}

#[test]
fn logit_bias_string_keys_use_the_vocab() {
    let v = TinyVocab;
    // " there" is one token (2): the bias lands on it
    assert_eq!(
        greedy_pick(json!({"logit_bias": [[" there", 3.0]]}), Some(&v)),
        2
    );
    assert_eq!(greedy_pick(json!({"logit_bias": {"b": 3.0}}), Some(&v)), 9);
    // every token of a multi-token string gets the bias: "a*" = [5, 7]; an extra id bias breaks the tie
    assert_eq!(
        greedy_pick(json!({"logit_bias": [["a*", 3.0], [7, 0.5]]}), Some(&v)),
        7
    );
    assert_eq!(
        greedy_pick(json!({"logit_bias": [["a*", 3.0], [5, 0.5]]}), Some(&v)),
        5
    );
    // ids need no vocab
    assert_eq!(greedy_pick(json!({"logit_bias": [[4, 1.0]]}), None), 4);
}

#[test]
fn logit_bias_string_key_without_vocab_needs_vocab() {
    let p = parse(json!({"logit_bias": [["hi", 1.0]]}));
    assert_eq!(
        Chain::from_params(&p, 10, None).unwrap_err(),
        SamplingError::NeedsVocab {
            field: "logit_bias".into(),
            value: "hi".into()
        }
    );
}

#[test]
fn ignore_eos_bans_eog_tokens_and_needs_a_vocab() {
    let v = TinyVocab;
    let p = parse(json!({"ignore_eos": true, "temperature": 0}));
    assert!(matches!(
        Chain::from_params(&p, 10, None),
        Err(SamplingError::NeedsVocab { .. })
    ));
    let mut chain = Chain::from_params(&p, 10, Some(&v)).unwrap();
    assert!(chain.describe().starts_with("logits -> logit-bias -> "));
    let mut row = [0.0f32; 10];
    row[0] = 5.0; // EOG is the argmax but banned
    row[3] = 1.0;
    assert_eq!(chain.sample(&row).unwrap(), 3);
}

#[test]
fn vocab_size_must_match_n_vocab() {
    let v = TinyVocab;
    assert_eq!(
        param_field(Chain::from_params(&SamplingParams::default(), 11, Some(&v)).unwrap_err()),
        "n_vocab"
    );
}

// ------------------------------------------------------------------------------------------------
// DRY breakers and penalty exemptions: when a vocab is needed

#[test]
fn dry_string_breakers_need_a_vocab_only_when_dry_is_on() {
    // off: the default string breakers are never expanded
    Chain::from_params(&SamplingParams::default(), 10, None).unwrap();
    // on, default string breakers, no vocab
    let on = parse(json!({"dry_multiplier": 0.8}));
    assert!(matches!(
        Chain::from_params(&on, 10, None),
        Err(SamplingError::NeedsVocab { field, .. }) if field == "dry_sequence_breakers"
    ));
    // on, token-id breakers: no vocab needed, and they replace the default strings
    let ids = parse(json!({"dry_multiplier": 0.8, "dry_sequence_breaker_ids": [[4], [3]]}));
    assert!(Chain::from_params(&ids, 10, None)
        .unwrap()
        .describe()
        .contains("-> dry "));
    // explicit strings next to ids still need the vocab
    let both = parse(
        json!({"dry_multiplier": 0.8, "dry_sequence_breaker_ids": [[4]], "dry_sequence_breakers": [":"]}),
    );
    assert!(matches!(
        Chain::from_params(&both, 10, None),
        Err(SamplingError::NeedsVocab { .. })
    ));
    Chain::from_params(&both, 10, Some(&TinyVocab)).unwrap();
    // with a vocab the defaults expand
    assert!(Chain::from_params(&on, 10, Some(&TinyVocab))
        .unwrap()
        .describe()
        .contains("-> dry "));
    // an empty list means no string breakers (the CLI's `none`)
    let none = parse(json!({"dry_multiplier": 0.8, "dry_sequence_breakers": []}));
    Chain::from_params(&none, 10, None).unwrap();
}

#[test]
fn dry_breaker_ids_out_of_range() {
    let p = parse(json!({"dry_multiplier": 0.8, "dry_sequence_breaker_ids": [[4, 10]]}));
    assert_eq!(
        p.validate(10).unwrap_err(),
        SamplingError::TokenOutOfRange {
            field: "dry_sequence_breaker_ids".into(),
            token: 10,
            n_vocab: 10
        }
    );
}

#[test]
fn penalty_exempt_strings_need_a_vocab_only_when_penalties_are_on() {
    // The json preset lists string delimiters but has no penalty: no vocab needed.
    Chain::from_params(&Preset::Json.params(), 10, None).unwrap();
    let on = parse(json!({"preset": "json", "presence_penalty": 0.5}));
    assert!(matches!(
        Chain::from_params(&on, 10, None),
        Err(SamplingError::NeedsVocab { field, .. }) if field == "penalty_exempt"
    ));
    Chain::from_params(&on, 10, Some(&TinyVocab)).unwrap();
    let out = parse(json!({"penalty_exempt": [10]}));
    assert_eq!(
        out.validate(10).unwrap_err(),
        SamplingError::TokenOutOfRange {
            field: "penalty_exempt".into(),
            token: 10,
            n_vocab: 10
        }
    );
}

// ------------------------------------------------------------------------------------------------
// Presets and round trips

#[test]
fn preset_is_the_base_that_fields_override() {
    let p = parse(json!({"preset": "code", "temperature": 0.5}));
    assert_eq!(p.temperature, 0.5);
    assert_eq!(p.preset, Some(Preset::Code));
    assert_eq!(
        SamplingParams {
            temperature: Preset::Code.params().temperature,
            ..p
        },
        Preset::Code.params()
    );
    assert_eq!(
        parse(json!({"preset": "CREATIVE"})),
        Preset::Creative.params()
    );
}

#[test]
fn params_round_trip_through_json() {
    let mut all = vec![SamplingParams::default()];
    all.extend(Preset::ALL.iter().map(|p| p.params()));
    all.push(parse(json!({
        "seed": 7, "samplers": "kpmt", "logit_bias": [[1, false], ["hi", 2.5], [3, -0.25]],
        "dry_sequence_breakers": ["\n", "::"], "dry_sequence_breaker_ids": [[1, 2]],
        "penalty_exempt": [1, "a"], "repeat_penalty_mode": "normalized", "ignore_eos": true,
        "n_probs": 3, "n_predict": 99, "adaptive_target": 0.4, "temperature": 0.123456789
    })));
    for p in all {
        let text = serde_json::to_string(&p).unwrap();
        let back: SamplingParams = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p, "{text}");
    }
}

// ------------------------------------------------------------------------------------------------
// Builder

#[test]
fn builder_call_order_does_not_matter() {
    let a = ChainBuilder::new(100)
        .with_seed(3)
        .with_temperature(0.7)
        .with_top_k(10)
        .with_penalties(16, 1.2, 0.1, 0.0)
        .with_min_p(0.1)
        .with_logit_bias(4, 2.0)
        .with_dry(0.8, 1.75, 2, 32)
        .with_dry_breaker_ids(vec![vec![1]]);
    let b = ChainBuilder::new(100)
        .with_dry_breaker_ids(vec![vec![1]])
        .with_dry(0.8, 1.75, 2, 32)
        .with_logit_bias(4, 2.0)
        .with_min_p(0.1)
        .with_penalties(16, 1.2, 0.1, 0.0)
        .with_top_k(10)
        .with_temperature(0.7)
        .with_seed(3);
    assert_eq!(a.params(), b.params());
    let (ca, cb) = (a.build().unwrap(), b.build().unwrap());
    assert_eq!(ca.describe(), "logits -> logit-bias -> penalties -> dry -> ?top-n-sigma -> top-k -> ?typical -> top-p -> min-p -> ?xtc -> temp-ext -> dist ");
    assert_eq!(ca.describe(), cb.describe());
}

#[test]
fn greedy_builder_is_bare_greedy_until_stages_are_enabled() {
    assert_eq!(
        ChainBuilder::greedy(100).build().unwrap().describe(),
        "logits -> greedy "
    );
    let c = ChainBuilder::greedy(100)
        .with_top_k(5)
        .with_penalties(64, 1.3, 0.0, 0.0)
        .build()
        .unwrap();
    assert_eq!(c.describe(), "logits -> penalties -> top-k -> greedy ");
    assert!(ChainBuilder::greedy(100)
        .with_mirostat(2, 5.0, 0.1)
        .build()
        .is_err());
    assert!(ChainBuilder::greedy(100)
        .with_adaptive_p(0.5, 0.9)
        .build()
        .is_err());
}

#[test]
fn builder_adaptive_p_replaces_dist() {
    let c = ChainBuilder::new(100)
        .with_adaptive_p(0.5, 0.9)
        .build()
        .unwrap();
    assert!(c.describe().ends_with("-> temp-ext -> adaptive-p "));
}
