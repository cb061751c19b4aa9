//! Fields other engines' users send are honoured with the same meaning or refused by name, never
//! dropped; two names of one setting must agree; errors name the field the client sent (issue 9).

use gauge_sampling::fields::{self, name_as_sent};
use gauge_sampling::params::SamplingParams;
use gauge_sampling::{Chain, SamplingError};
use serde_json::{json, Value};

fn parse(v: Value) -> Result<SamplingParams, SamplingError> {
    SamplingParams::from_value(&v)
}

fn err(v: Value) -> SamplingError {
    parse(v.clone()).expect_err(&format!("{v} should be refused"))
}

#[test]
fn typ_p_is_typical_p() {
    let p = parse(json!({"typ_p": 0.9})).unwrap();
    assert_eq!(p.typical_p, 0.9);
    let chain = Chain::from_params(&p, 8, None).unwrap();
    assert!(
        chain.describe().contains("-> typical "),
        "{}",
        chain.describe()
    );
}

#[test]
fn repetition_penalty_is_repeat_penalty_over_the_whole_context() {
    let p = parse(json!({"repetition_penalty": 1.3})).unwrap();
    assert_eq!(p.repeat_penalty, 1.3);
    assert_eq!(
        p.repeat_last_n, -1,
        "HF and vLLM penalise the whole context"
    );
    let p = parse(json!({"repetition_penalty": 1.3, "repeat_last_n": 64})).unwrap();
    assert_eq!((p.repeat_penalty, p.repeat_last_n), (1.3, 64));
    let p = parse(json!({"repeat_penalty": 1.3})).unwrap();
    assert_eq!(p.repeat_last_n, 64, "llama.cpp's own name keeps its window");
    let chain =
        Chain::from_params(&parse(json!({"repetition_penalty": 1.3})).unwrap(), 8, None).unwrap();
    assert!(chain.describe().contains("-> penalties "));
}

#[test]
fn max_new_tokens_is_n_predict() {
    assert_eq!(parse(json!({"max_new_tokens": 7})).unwrap().n_predict, 7);
}

#[test]
fn do_sample_false_is_greedy() {
    assert_eq!(parse(json!({"do_sample": false})).unwrap().temperature, 0.0);
    assert_eq!(parse(json!({"do_sample": true})).unwrap().temperature, 0.8);
    let e = err(json!({"do_sample": false, "temperature": 0.7}));
    assert!(matches!(e, SamplingError::ConflictingAliases { .. }), "{e}");
}

#[test]
fn refused_fields_name_themselves_and_say_what_to_use() {
    for (req, field, hint) in [
        (json!({"min_tokens": 5}), "min_tokens", "ignore_eos"),
        (json!({"top_a": 0.2}), "top_a", "min_p"),
        (json!({"tfs_z": 0.95}), "tfs_z", "min_p"),
        (json!({"length_penalty": 2.0}), "length_penalty", "beam"),
        (json!({"use_beam_search": true}), "use_beam_search", "beam"),
        (
            json!({"no_repeat_ngram_size": 3}),
            "no_repeat_ngram_size",
            "dry",
        ),
        (json!({"bad_words": ["x"]}), "bad_words", "logit_bias"),
    ] {
        let e = err(req.clone());
        assert_eq!(e.field(), Some(field), "{req}: {e}");
        let msg = e.to_string().to_lowercase();
        assert!(msg.contains(field) && msg.contains(hint), "{req}: {msg}");
    }
}

#[test]
fn refused_fields_at_their_neutral_value_are_accepted() {
    let p = parse(json!({
        "min_tokens": 0, "top_a": 0, "tfs_z": 1.0, "length_penalty": 1,
        "use_beam_search": false, "num_beams": 1, "bad_words": []
    }))
    .unwrap();
    assert_eq!(p, SamplingParams::default());
}

#[test]
fn conflicting_aliases_name_both() {
    for (req, a, b) in [
        (
            json!({"max_tokens": 3, "max_completion_tokens": 20}),
            "max_tokens",
            "max_completion_tokens",
        ),
        (
            json!({"n_predict": 3, "max_tokens": 4}),
            "n_predict",
            "max_tokens",
        ),
        (
            json!({"temperature": 0.5, "temp": 0.6}),
            "temperature",
            "temp",
        ),
        (
            json!({"repeat_penalty": 1.1, "repetition_penalty": 1.3}),
            "repeat_penalty",
            "repetition_penalty",
        ),
        (
            json!({"typical_p": 0.5, "typ_p": 0.9}),
            "typical_p",
            "typ_p",
        ),
    ] {
        let e = err(req.clone());
        let msg = e.to_string();
        assert!(
            matches!(e, SamplingError::ConflictingAliases { .. })
                && msg.contains(&format!("`{a}`"))
                && msg.contains(&format!("`{b}`")),
            "{req}: {msg}"
        );
    }
    // The same value under two names is one request, not a conflict.
    assert_eq!(
        parse(json!({"max_tokens": 3, "max_completion_tokens": 3}))
            .unwrap()
            .n_predict,
        3
    );
}

#[test]
fn every_alias_is_type_checked() {
    for (req, field) in [
        (
            json!({"max_tokens": 5, "max_completion_tokens": "abc"}),
            "max_completion_tokens",
        ),
        (json!({"n_predict": 5, "max_tokens": "abc"}), "max_tokens"),
        (json!({"temperature": 0.5, "temp": "hot"}), "temp"),
        (json!({"max_new_tokens": [1]}), "max_new_tokens"),
    ] {
        let e = err(req.clone());
        assert_eq!(e.field(), Some(field), "{req}: {e}");
    }
}

#[test]
fn range_errors_name_the_field_the_client_sent() {
    let req = json!({"max_tokens": -5});
    let p = parse(req.clone()).unwrap();
    let e = name_as_sent(p.validate(8).unwrap_err(), &req);
    assert_eq!(e.field(), Some("max_tokens"), "{e}");
    assert!(e.to_string().contains("`max_tokens`"), "{e}");
    let req = json!({"typ_p": 1.5});
    let e = name_as_sent(parse(req.clone()).unwrap().validate(8).unwrap_err(), &req);
    assert_eq!(e.field(), Some("typ_p"), "{e}");
}

#[test]
fn infill_sampler_error_names_samplers() {
    let p = parse(json!({"samplers": ["infill"]})).unwrap();
    let e = Chain::from_params(&p, 8, None).unwrap_err();
    assert_eq!(e.field(), Some("samplers"), "{e}");
}

#[test]
fn seed_error_says_4294967295_is_random() {
    let e = err(json!({"seed": 4294967296u64}));
    let msg = e.to_string();
    assert!(
        msg.contains("LLAMA_DEFAULT_SEED") && msg.contains("4294967295"),
        "{msg}"
    );
    assert_eq!(
        parse(json!({"seed": 4294967295u64})).unwrap().seed,
        parse(json!({"seed": -1})).unwrap().seed
    );
}

#[test]
fn logit_bias_empty_string_is_refused_not_dropped() {
    for req in [
        json!({"logit_bias": {"": -100}}),
        json!({"logit_bias": [["", -100]]}),
    ] {
        let e = err(req.clone());
        assert_eq!(e.field(), Some("logit_bias"), "{req}: {e}");
    }
}

#[test]
fn unknown_fields_are_listed_not_refused() {
    let req =
        json!({"temperature": 0.5, "model": "x", "frobnicate": 1, "prompt": "hi", "zeta": null});
    let obj = req.as_object().unwrap();
    assert!(parse(req.clone()).is_ok());
    assert_eq!(
        fields::unknown_fields(obj, &["prompt"]),
        ["frobnicate", "zeta"]
    );
}

#[test]
fn long_multibyte_values_in_errors_do_not_panic() {
    // An error message cuts long values; the cut must fall on a character boundary.
    let long = "€".repeat(100);
    let e = err(json!({"temperature": long}));
    assert_eq!(e.field(), Some("temperature"));
}
