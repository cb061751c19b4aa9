//! Issue 21, "Fields dropped or misnamed" and "Smaller", on a real server and the default model:
//! `top_logprobs` is honoured or refused (never ignored) on every route, errors name the field
//! sent, `/explain` treats unknown fields as the other routes do, `prompt` with `messages` is
//! refused, `/metrics` agrees with `/health` after a cancelled stream, a repeated `Authorization`
//! header is a 401, hyper's 414 / 431 answers carry the JSON error body, and every sampling field
//! sent with a wrong type is a 400 naming it.

mod common;

use std::io::Read;
use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use gauge_server::{RunningServer, ServerConfig};
use serde_json::{json, Value};

fn chat(extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    b.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    b
}

fn plain(extra: Value) -> Value {
    let mut b = json!({"prompt": "Hi", "max_tokens": 2});
    b.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    b
}

#[test]
fn top_logprobs_on_completion_is_type_checked_not_ignored() {
    for bad in [
        json!(-5),
        json!("5"),
        json!(1e12),
        json!(true),
        json!("abc"),
    ] {
        let r = post(
            shared(),
            "/completion",
            &plain(json!({"top_logprobs": bad})),
        );
        let v = assert_error(&r, 400, Some("top_logprobs"));
        assert!(v.get("gauge").is_none(), "{v}");
    }
    // A well-typed value without `logprobs: true` is refused too, as llama-server refuses it.
    let r = post(shared(), "/completion", &plain(json!({"top_logprobs": 5})));
    let v = assert_error(&r, 400, Some("top_logprobs"));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("top_logprobs requires logprobs to be set to true"),
        "{v}"
    );
    // With it, honoured: 5 alternatives per token.
    let r = post(
        shared(),
        "/completion",
        &plain(json!({"logprobs": true, "top_logprobs": 5})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let top = &v["completion_probabilities"][0]["top_logprobs"];
    assert_eq!(top.as_array().map(Vec::len), Some(5), "{v}");
}

#[test]
fn top_logprobs_without_logprobs_true_is_400_on_chat_and_completions() {
    for (path, body) in [
        ("/v1/chat/completions", chat(json!({"top_logprobs": 3}))),
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": false, "top_logprobs": 3})),
        ),
        ("/v1/completions", plain(json!({"top_logprobs": 3}))),
        (
            "/v1/completions",
            plain(json!({"logprobs": false, "top_logprobs": 3})),
        ),
    ] {
        let r = post(shared(), path, &body);
        let v = assert_error(&r, 400, Some("top_logprobs"));
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("top_logprobs requires logprobs to be set to true"),
            "{path} {body}: {v}"
        );
    }
}

#[test]
fn n_probs_logprobs_and_top_logprobs_that_differ_are_conflicting_fields() {
    for (path, body) in [
        (
            "/v1/chat/completions",
            chat(json!({"n_probs": 3, "logprobs": true, "top_logprobs": 5})),
        ),
        (
            "/v1/completions",
            plain(json!({"logprobs": 2, "top_logprobs": 7})),
        ),
        (
            "/completion",
            plain(json!({"n_probs": 3, "logprobs": true, "top_logprobs": 5})),
        ),
    ] {
        let r = post(shared(), path, &body);
        let v = assert_error(&r, 400, None);
        assert_eq!(
            v["error"]["code"], "conflicting_fields",
            "{path} {body}: {v}"
        );
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("top_logprobs"), "{msg}");
    }
    // Agreeing values are one request.
    let r = post(
        shared(),
        "/v1/completions",
        &plain(json!({"logprobs": 2, "top_logprobs": 2})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn negative_logprobs_errors_name_the_field_sent() {
    for (path, body, field) in [
        (
            "/v1/completions",
            plain(json!({"logprobs": -1})),
            "logprobs",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": true, "top_logprobs": -1})),
            "top_logprobs",
        ),
        ("/completion", plain(json!({"n_probs": -1})), "n_probs"),
    ] {
        let r = post(shared(), path, &body);
        let v = assert_error(&r, 400, Some(field));
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("0..=100"), "{msg}");
        if field != "n_probs" {
            assert!(!msg.contains("n_probs"), "{msg}");
        }
    }
}

/// One value of each JSON type (an integer and a fraction for the two kinds of number).
fn samples() -> [Value; 6] {
    [
        json!(true),
        json!(7),
        json!(0.5),
        json!("x"),
        json!([]),
        json!({}),
    ]
}

/// Issue 22 §2 on the wire: every name of gauge's table of sampling fields (aliases included),
/// sent with a type the table says it does not take, is a 400 naming it, on the native and both
/// OpenAI routes and `/explain` (every wrong type on `/completion`, the first elsewhere).
#[test]
fn every_sampling_field_with_a_wrong_type_is_a_400_naming_it() {
    let with = |base: Value, name: &str, v: &Value| {
        let mut b = base;
        b[name] = v.clone();
        b
    };
    let chat_base = json!({"messages": [{"role": "user", "content": "Hi"}]});
    let plain_base = json!({"prompt": "Hi"});
    let mut sent = 0;
    for f in gauge_sampling::fields::SAMPLING {
        let wrong: Vec<Value> = samples()
            .into_iter()
            .filter(|v| !f.takes.accepts(v))
            .collect();
        for name in f.names() {
            let mut requests = vec![
                (
                    "/v1/chat/completions",
                    with(chat_base.clone(), name, &wrong[0]),
                ),
                ("/v1/completions", with(plain_base.clone(), name, &wrong[0])),
                ("/explain", with(plain_base.clone(), name, &wrong[0])),
            ];
            for v in &wrong {
                requests.push(("/completion", with(plain_base.clone(), name, v)));
            }
            for (path, body) in requests {
                let r = post(shared(), path, &body);
                let head: String = r.body.chars().take(300).collect();
                assert!(r.status == 400, "{path} {body}: {} {head}", r.status);
                assert_error(&r, 400, Some(name));
                sent += 1;
            }
        }
    }
    assert!(sent > 200, "only {sent} requests sent");
}

#[test]
fn explain_lists_unknown_fields_and_refuses_a_misspelt_explain_key() {
    let r = post(
        shared(),
        "/explain",
        &json!({"prompt": "Hi", "n_predict": 1, "frobnicate": 1, "explain": {"top": 2}}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["gauge"]["unknown_fields"],
        json!(["frobnicate"]),
        "{}",
        r.body
    );
    let r = post(
        shared(),
        "/explain",
        &json!({"prompt": "Hi", "n_predict": 1, "explain": {"topp": 3}}),
    );
    let v = assert_error(&r, 400, Some("explain.topp"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("`top`"),
        "{v}"
    );
}

#[test]
fn explain_under_strict_refuses_unknown_fields_as_the_other_routes_do() {
    static STRICT: OnceLock<RunningServer> = OnceLock::new();
    let addr = started(&STRICT, || ServerConfig {
        strict: true,
        ..test_config()
    });
    for path in ["/explain", "/completion"] {
        let r = post(
            addr,
            path,
            &json!({"prompt": "Hi", "n_predict": 1, "frobnicate": 1}),
        );
        let v = assert_error(&r, 400, Some("frobnicate"));
        assert_eq!(v["error"]["code"], "unknown_field", "{path}: {v}");
    }
}

#[test]
fn prompt_and_messages_together_are_refused() {
    let body = json!({
        "prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1
    });
    for (path, param) in [
        ("/v1/chat/completions", "prompt"),
        ("/v1/completions", "messages"),
        ("/completion", "messages"),
        ("/explain", "prompt"),
    ] {
        let r = post(shared(), path, &body);
        let v = assert_error(&r, 400, Some(param));
        assert_eq!(v["error"]["code"], "conflicting_fields", "{path}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("`prompt`") && msg.contains("`messages`"),
            "{msg}"
        );
    }
}

/// `(name, value)` of each sample line of a Prometheus text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn metrics_and_health_agree_after_a_cancelled_stream() {
    let srv = RunningServer::start(test_config()).expect("server starts");
    let addr = srv.addr();
    // One request that finishes, one stream cut by its client after 4 tokens.
    let r = post(
        addr,
        "/completion",
        &json!({"prompt": "One two", "n_predict": 3, "ignore_eos": true}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let mut s = open(
        addr,
        "/completion",
        &json!({"prompt": "One two", "n_predict": 200, "ignore_eos": true, "stream": true}),
        &[],
    );
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while buf.windows(6).filter(|w| w == b"data: ").count() < 4 {
        let n = s.read(&mut chunk).expect("stream");
        assert!(
            n > 0,
            "stream ended early: {}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
    drop(s);
    let h = wait_health(addr, 60, "the cancelled stream to be freed", |h| {
        h["live"] == 0 && h["in_flight"] == 0 && h["requests_finished"] == 2
    });
    std::thread::sleep(Duration::from_millis(50));
    let h2 = health(addr);
    assert_eq!(h, h2, "the counters still moved");
    let m = get(addr, "/metrics").body;
    let generated = h["tokens_generated"].as_f64().unwrap();
    assert!(generated >= 7.0, "{h}");
    assert_eq!(
        metric(&m, "llamacpp:tokens_predicted_total"),
        generated,
        "/metrics and /health disagree: {h}\n{m}"
    );
}

#[test]
fn a_repeated_authorization_header_is_401() {
    static KEYED: OnceLock<RunningServer> = OnceLock::new();
    let addr = started(&KEYED, || ServerConfig {
        api_key: Some("K".into()),
        ..test_config()
    });
    let ok = request(
        addr,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer K")],
        b"",
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
    for pair in [
        ["Bearer nope", "Bearer K"],
        ["Bearer K", "Bearer nope"],
        ["Bearer K", "Bearer K"],
    ] {
        let r = request(
            addr,
            "GET",
            "/v1/models",
            &[("Authorization", pair[0]), ("Authorization", pair[1])],
            b"",
        );
        let v = assert_error(&r, 401, None);
        assert_eq!(v["error"]["code"], "invalid_api_key", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("`Authorization` header is sent more than once"),
            "{pair:?}: {v}"
        );
    }
}

#[test]
fn uri_too_long_and_headers_too_large_get_the_json_error_body() {
    let long = format!("/v1/models?{}", "a".repeat(70_000));
    let r = request(shared(), "GET", &long, &[], b"");
    let v = assert_error(&r, 414, None);
    assert_eq!(v["error"]["code"], "uri_too_long", "{v}");
    assert_eq!(r.header("content-type"), Some("application/json"));

    let names: Vec<String> = (0..150).map(|i| format!("X-H{i}")).collect();
    let headers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    let r = request(shared(), "GET", "/v1/models", &headers, b"");
    let v = assert_error(&r, 431, None);
    assert_eq!(v["error"]["code"], "headers_too_large", "{v}");

    // A request line hyper cannot parse: 400 in the same shape.
    let mut c = std::net::TcpStream::connect(shared()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    std::io::Write::write_all(&mut c, b"G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let v = assert_error(&parse(&raw), 400, None);
    assert_eq!(v["error"]["code"], "malformed_request", "{v}");

    // The server still answers.
    assert_eq!(get(shared(), "/health").status, 200);
}
