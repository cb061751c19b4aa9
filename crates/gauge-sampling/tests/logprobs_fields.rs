//! `n_probs`, `logprobs` and `top_logprobs` (issue 21, "Fields dropped or misnamed"): every name
//! is type-checked under its own name, counts that differ conflict, `top_logprobs` without
//! `logprobs: true` is refused as llama-server refuses it, and errors name the field sent.

use gauge_sampling::params::SamplingParams;
use gauge_sampling::SamplingError;
use serde_json::{json, Value};

fn n_probs(v: Value) -> i32 {
    SamplingParams::from_value(&v)
        .unwrap_or_else(|e| panic!("{v}: {e}"))
        .n_probs
}

fn err(v: Value) -> SamplingError {
    match SamplingParams::from_value(&v) {
        Ok(p) => panic!("{v} was accepted (n_probs = {})", p.n_probs),
        Err(e) => e,
    }
}

#[test]
fn top_logprobs_of_any_bad_type_or_value_is_refused_naming_it() {
    for bad in [
        json!(-5),
        json!("5"),
        json!(1e12),
        json!(true),
        json!("abc"),
    ] {
        for logprobs in [json!(true), Value::Null] {
            let req = json!({"logprobs": logprobs, "top_logprobs": bad});
            let e = err(req.clone());
            assert_eq!(e.field(), Some("top_logprobs"), "{req}: {e}");
            assert!(e.to_string().contains("top_logprobs"), "{req}: {e}");
        }
    }
}

#[test]
fn top_logprobs_without_logprobs_true_is_refused_as_llama_server_does() {
    for req in [
        json!({"top_logprobs": 5}),
        json!({"logprobs": false, "top_logprobs": 5}),
        json!({"n_probs": 5, "top_logprobs": 5}),
    ] {
        let e = err(req.clone());
        assert_eq!(e.field(), Some("top_logprobs"), "{req}: {e}");
        assert!(
            e.to_string()
                .contains("top_logprobs requires logprobs to be set to true"),
            "{req}: {e}"
        );
    }
    assert_eq!(n_probs(json!({"logprobs": true, "top_logprobs": 5})), 5);
    assert_eq!(n_probs(json!({"logprobs": true, "top_logprobs": 0})), 0);
    assert_eq!(n_probs(json!({"logprobs": true})), 20);
}

#[test]
fn n_probs_and_top_logprobs_that_differ_are_conflicting_fields() {
    for (req, a, b) in [
        (
            json!({"n_probs": 3, "logprobs": true, "top_logprobs": 5}),
            "n_probs",
            "top_logprobs",
        ),
        (
            json!({"logprobs": 2, "top_logprobs": 7}),
            "logprobs",
            "top_logprobs",
        ),
        (json!({"n_probs": 2, "logprobs": 7}), "n_probs", "logprobs"),
    ] {
        match err(req.clone()) {
            SamplingError::ConflictingAliases { first, second, .. } => {
                assert_eq!((first.as_str(), second.as_str()), (a, b), "{req}")
            }
            other => panic!("{req}: expected a conflict, got {other:?}"),
        }
    }
    // Agreeing counts are one request.
    assert_eq!(
        n_probs(json!({"n_probs": 3, "logprobs": true, "top_logprobs": 3})),
        3
    );
    assert_eq!(n_probs(json!({"logprobs": 2, "top_logprobs": 2})), 2);
    assert_eq!(n_probs(json!({"n_probs": 2, "logprobs": true})), 2);
}

#[test]
fn negative_logprobs_errors_name_the_field_sent_not_n_probs() {
    for (req, field) in [
        (json!({"logprobs": -1}), "logprobs"),
        (
            json!({"logprobs": true, "top_logprobs": -1}),
            "top_logprobs",
        ),
        (json!({"n_probs": -1}), "n_probs"),
        (json!({"logprobs": "x"}), "logprobs"),
    ] {
        let e = err(req.clone());
        assert_eq!(e.field(), Some(field), "{req}: {e}");
        let msg = e.to_string();
        assert!(msg.contains(field) && msg.contains(">= 0"), "{req}: {msg}");
    }
}
