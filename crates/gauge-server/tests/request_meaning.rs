//! No silent change of meaning over HTTP, against the real default model (issue 9): tiny
//! temperatures, aliases of other engines, conflicting names, refused and unknown fields, `--strict`.
//! Expected texts are asked of the model first (greedy), never hard-coded.

mod common;

use common::*;
use gauge_server::{RunningServer, ServerConfig};
use serde_json::{json, Value};

const FRANCE: &str = "The capital of France is";

fn completion(extra: Value) -> Resp {
    let mut b = json!({"prompt": FRANCE, "max_tokens": 10});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    post(shared(), "/v1/completions", &b)
}

fn text(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["choices"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn tiny_temperature_answers_like_temperature_zero() {
    let greedy = text(&completion(json!({"temperature": 0})));
    for seed in [1, 2, 3] {
        let tiny = text(&completion(json!({"temperature": 1e-39, "seed": seed})));
        assert_eq!(tiny, greedy, "seed {seed}");
    }
}

#[test]
fn repetition_penalty_is_honoured_not_dropped() {
    // HF's name must run the penalty: the chain shows it, and the text equals the one under
    // llama.cpp's name with the same (whole-context) window.
    let r = completion(json!({"temperature": 0, "repetition_penalty": 1.5, "echo_chain": true}));
    let v = r.json();
    assert!(
        v["gauge"]["chain"]
            .as_str()
            .unwrap()
            .contains("-> penalties "),
        "{v}"
    );
    let same = completion(json!({"temperature": 0, "repeat_penalty": 1.5, "repeat_last_n": -1}));
    assert_eq!(text(&r), text(&same));
}

#[test]
fn typ_p_alias_builds_the_typical_stage() {
    let r = completion(json!({"typ_p": 0.9, "echo_chain": true}));
    assert_eq!(r.status, 200, "{}", r.body);
    let chain = r.json()["gauge"]["chain"].as_str().unwrap().to_string();
    assert!(chain.contains("-> typical "), "{chain}");
}

#[test]
fn conflicting_max_tokens_names_both() {
    let r = completion(json!({"max_tokens": 3, "max_completion_tokens": 20}));
    let v = assert_error(&r, 400, Some("max_tokens"));
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("max_completion_tokens"), "{msg}");
    let r = completion(json!({"max_tokens": 5, "max_completion_tokens": "abc"}));
    assert_error(&r, 400, Some("max_completion_tokens"));
    let r = completion(json!({"max_tokens": null, "n_predict": 5, "max_new_tokens": "x"}));
    assert_error(&r, 400, Some("max_new_tokens"));
}

#[test]
fn range_error_names_the_alias_sent() {
    let r = completion(json!({"max_tokens": -3}));
    assert_error(&r, 400, Some("max_tokens"));
}

#[test]
fn infill_sampler_error_names_samplers() {
    let r = completion(json!({"samplers": ["infill"]}));
    assert_error(&r, 400, Some("samplers"));
}

#[test]
fn refused_fields_are_400_naming_them() {
    for (field, value) in [
        ("min_tokens", json!(4)),
        ("top_a", json!(0.1)),
        ("tfs_z", json!(0.9)),
        ("length_penalty", json!(2.0)),
        ("use_beam_search", json!(true)),
    ] {
        let r = completion(json!({ field: value }));
        let v = assert_error(&r, 400, Some(field));
        assert_eq!(v["error"]["code"], "unsupported_value", "{v}");
    }
}

#[test]
fn logit_bias_empty_key_is_refused() {
    let r = completion(json!({"logit_bias": {"": -100}}));
    assert_error(&r, 400, Some("logit_bias"));
}

#[test]
fn unknown_fields_are_listed_in_the_response() {
    let r = completion(json!({"temperature": 0, "frobnicate": 1, "model": MODEL}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["gauge"]["unknown_fields"], json!(["frobnicate"]));
    // and at the end of a stream
    let r = completion(json!({"temperature": 0, "frobnicate": 1, "stream": true}));
    let data = r.sse_data();
    let listed = data.iter().any(|d| {
        serde_json::from_str::<Value>(d)
            .map(|v| v["gauge"]["unknown_fields"] == json!(["frobnicate"]))
            .unwrap_or(false)
    });
    assert!(listed, "{data:?}");
    // a known request has no such list
    let r = completion(json!({"temperature": 0}));
    assert!(r.json().get("gauge").is_none());
}

#[test]
fn strict_server_refuses_unknown_fields() {
    let server = RunningServer::start(ServerConfig {
        strict: true,
        ..test_config()
    })
    .expect("server starts");
    let body = json!({"prompt": FRANCE, "max_tokens": 2, "frobnicate": 1});
    let r = post(server.addr(), "/v1/completions", &body);
    let v = assert_error(&r, 400, Some("frobnicate"));
    assert_eq!(v["error"]["code"], "unknown_field");
    let body = json!({"prompt": FRANCE, "max_tokens": 2, "model": MODEL, "user": "u"});
    assert_eq!(post(server.addr(), "/v1/completions", &body).status, 200);
}
