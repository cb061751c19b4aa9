//! llama-server's utility routes (`/tokenize`, `/detokenize`, `/apply-template`, `/props`,
//! `/metrics`), Jinja chat templates and CORS, each through a real HTTP client (hyper's).

mod common;
mod real_client;

use std::sync::Arc;

use common::{test_config, MODEL};
use gauge_engine::{Model, ModelOptions};
use gauge_server::{RunningServer, ServerConfig};
use real_client::{get, post_json, send};
use serde_json::{json, Value};

fn start(cfg: ServerConfig) -> RunningServer {
    RunningServer::start(cfg).expect("server starts")
}

/// The model loaded directly, to check the server's answers against the engine's own.
fn model() -> Arc<Model> {
    Arc::new(Model::open(MODEL, ModelOptions::default()).expect("model loads"))
}

fn conversation() -> Value {
    json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Red."},
        {"role": "user", "content": "Another."},
    ])
}

#[test]
fn tokenize_and_detokenize_round_trip_in_llama_servers_shapes() {
    let srv = start(test_config());
    let addr = srv.addr();
    let m = model();
    let text = "Hello world, <|im_start|>café";
    let r = post_json(addr, "/tokenize", &json!({"content": text}));
    assert_eq!(r.status, 200, "{}", r.body);
    let ids: Vec<i32> = serde_json::from_value(r.json()["tokens"].clone()).unwrap();
    // parse_special defaults to true and add_special to false, as in llama-server.
    assert_eq!(ids, m.tokenize(text, false, true).unwrap());
    assert!(ids.contains(&m.tokenize("<|im_start|>", false, true).unwrap()[0]));

    let plain = post_json(
        addr,
        "/tokenize",
        &json!({"content": text, "parse_special": false}),
    );
    let plain_ids: Vec<i32> = serde_json::from_value(plain.json()["tokens"].clone()).unwrap();
    assert_eq!(plain_ids, m.tokenize(text, false, false).unwrap());
    assert_ne!(plain_ids, ids);

    let with = post_json(
        addr,
        "/tokenize",
        &json!({"content": text, "with_pieces": true}),
    );
    let pieces = with.json()["tokens"].as_array().unwrap().clone();
    assert_eq!(pieces.len(), ids.len());
    let mut joined = Vec::new();
    for (p, &id) in pieces.iter().zip(&ids) {
        assert_eq!(p["id"], id);
        match &p["piece"] {
            Value::String(s) => joined.extend_from_slice(s.as_bytes()),
            Value::Array(b) => joined.extend(b.iter().map(|x| x.as_u64().unwrap() as u8)),
            other => panic!("piece {other}"),
        }
    }
    assert_eq!(String::from_utf8(joined).unwrap(), text);

    let back = post_json(addr, "/detokenize", &json!({"tokens": ids}));
    assert_eq!(back.status, 200, "{}", back.body);
    assert_eq!(back.json()["content"], text);

    let bad = post_json(addr, "/detokenize", &json!({"tokens": [1, -5]}));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["error"]["param"], "tokens[1]");
    let bad = post_json(addr, "/tokenize", &json!({"content": 5}));
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["param"], "content");
}

#[test]
fn apply_template_gives_the_prompt_the_chat_endpoint_uses() {
    let srv = start(test_config());
    let addr = srv.addr();
    let msgs = conversation();
    let r = post_json(addr, "/apply-template", &json!({"messages": msgs}));
    assert_eq!(r.status, 200, "{}", r.body);
    let prompt = r.json()["prompt"].as_str().unwrap().to_string();
    let pairs = [
        ("system", "You are terse."),
        ("user", "Name a colour."),
        ("assistant", "Red."),
        ("user", "Another."),
    ];
    assert_eq!(prompt, model().apply_chat_messages(&pairs).unwrap());
    // The chat endpoint evaluates exactly that many prompt tokens.
    let chat = post_json(
        addr,
        "/v1/chat/completions",
        &json!({"messages": msgs, "max_tokens": 1}),
    );
    let n = model().tokenize_prompt(&prompt).unwrap().len();
    assert_eq!(chat.json()["usage"]["prompt_tokens"], n);
    let bad = post_json(addr, "/apply-template", &json!({"messages": []}));
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["param"], "messages");
}

#[test]
fn jinja_renders_the_models_template_as_llama_cpp_formats_it() {
    // SmolLM2's template is ChatML: minijinja rendering the GGUF's Jinja text must agree with
    // llama.cpp's C++ ChatML formatter, byte for byte.
    let srv = start(ServerConfig {
        jinja: true,
        ..test_config()
    });
    let r = post_json(
        srv.addr(),
        "/apply-template",
        &json!({"messages": conversation()}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let pairs = [
        ("system", "You are terse."),
        ("user", "Name a colour."),
        ("assistant", "Red."),
        ("user", "Another."),
    ];
    assert_eq!(
        r.json()["prompt"],
        model().apply_chat_messages(&pairs).unwrap()
    );
    // Without a system message the template adds SmolLM's default one (a Jinja branch).
    let r = post_json(
        srv.addr(),
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    let p = r.json()["prompt"].as_str().unwrap().to_string();
    assert!(p.starts_with("<|im_start|>system\n"), "{p}");
    assert!(
        p.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        "{p}"
    );
}

#[test]
fn a_custom_jinja_template_with_python_methods_and_raise_exception() {
    let tmpl = "{% for m in messages %}{% if m.role == 'assistant' and loop.first %}\
                {{ raise_exception('the first turn must not be the assistant') }}{% endif %}\
                [{{ m.role.upper() }}] {{ m.content.strip() }}\n{% endfor %}\
                {% if add_generation_prompt %}[ASSISTANT]{% endif %}";
    let srv = start(ServerConfig {
        jinja: true,
        chat_template: Some(tmpl.into()),
        ..test_config()
    });
    let r = post_json(
        srv.addr(),
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "  Hi there  "}]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["prompt"], "[USER] Hi there\n[ASSISTANT]");
    let props = get(srv.addr(), "/props").json();
    assert_eq!(props["chat_template"], tmpl);
    let r = post_json(
        srv.addr(),
        "/v1/chat/completions",
        &json!({"messages": [{"role": "assistant", "content": "x"}], "max_tokens": 1}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let e = r.json();
    assert_eq!(e["error"]["param"], "messages");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the first turn must not be the assistant"),
        "{e}"
    );
}

#[test]
fn a_builtin_template_name_works_and_an_unknown_one_stops_the_server() {
    let srv = start(ServerConfig {
        chat_template: Some("llama3".into()),
        ..test_config()
    });
    let r = post_json(
        srv.addr(),
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    let p = r.json()["prompt"].as_str().unwrap().to_string();
    assert!(
        p.contains("<|start_header_id|>user<|end_header_id|>"),
        "{p}"
    );
    drop(srv);
    let err = RunningServer::start(ServerConfig {
        chat_template: Some("no-such-template".into()),
        ..test_config()
    })
    .expect_err("an unknown template name is refused");
    let msg = err.to_string();
    assert!(
        msg.contains("--chat-template") && msg.contains("--jinja"),
        "{msg}"
    );
    let err = RunningServer::start(ServerConfig {
        jinja: true,
        chat_template: Some("{% for m in messages %}".into()),
        ..test_config()
    })
    .expect_err("a broken Jinja template is refused");
    assert!(err.to_string().contains("--jinja"), "{err}");
}

#[test]
fn props_report_the_servers_settings() {
    let srv = start(ServerConfig {
        parallel: 3,
        ..test_config()
    });
    let r = get(srv.addr(), "/props");
    assert_eq!(r.status, 200, "{}", r.body);
    let p = r.json();
    assert_eq!(p["total_slots"], 3);
    assert_eq!(p["default_generation_settings"]["n_ctx"], 512);
    assert_eq!(p["default_generation_settings"]["params"]["n_predict"], 256);
    assert_eq!(p["default_generation_settings"]["params"]["top_k"], 40);
    assert_eq!(p["chat_template"], model().chat_template_text().unwrap());
    assert!(p["model_path"].as_str().unwrap().ends_with(".gguf"), "{p}");
    assert_eq!(p["eos_token"], "<|im_end|>");
    assert_eq!(p["gpu_backend"], Value::Null);
    // The llama.cpp build's CPU features, as llama.cpp reports them (issue 23 §5).
    let cpu = p["gauge"]["llama_cpp_cpu"]
        .as_str()
        .unwrap_or_else(|| panic!("{p}"));
    assert_eq!(cpu, gauge_engine::llama_cpp_cpu_features());
    assert!(cpu.split(' ').any(|f| f == "SSE3" || f == "NEON"), "{cpu}");
}

/// `name value` lines of a Prometheus text body, with HELP and TYPE lines checked.
fn prometheus(body: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut typed = std::collections::HashSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            typed.insert(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(' ').unwrap_or_else(|| panic!("{line}"));
        assert!(typed.contains(name), "no TYPE before {line}");
        out.push((
            name.to_string(),
            value.parse().unwrap_or_else(|_| panic!("{line}")),
        ));
    }
    out
}

#[test]
fn metrics_count_tokens_in_prometheus_text() {
    let srv = start(test_config());
    let addr = srv.addr();
    let before = get(addr, "/metrics");
    assert_eq!(before.status, 200);
    assert!(before
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let m0 = prometheus(&before.body);
    let value = |m: &[(String, f64)], n: &str| {
        m.iter()
            .find(|(k, _)| k == n)
            .unwrap_or_else(|| panic!("no {n}"))
            .1
    };
    assert_eq!(value(&m0, "llamacpp:tokens_predicted_total"), 0.0);
    for _ in 0..2 {
        let r = post_json(
            addr,
            "/completion",
            &json!({"prompt": "One two three", "n_predict": 5, "ignore_eos": true}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // The engine finishes its bookkeeping for a step just after it sends the last token.
    common::wait_health(addr, 30, "the engine to be idle", |h| h["live"] == 0);
    let m1 = prometheus(&get(addr, "/metrics").body);
    assert_eq!(value(&m1, "llamacpp:tokens_predicted_total"), 10.0);
    let n_prompt = model().tokenize_prompt("One two three").unwrap().len() as f64;
    assert_eq!(value(&m1, "llamacpp:prompt_tokens_total"), 2.0 * n_prompt);
    // One prefill step, then one step per further token: 5 decodes per request.
    assert_eq!(value(&m1, "llamacpp:n_decode_total"), 10.0, "{m1:?}");
    assert_eq!(value(&m1, "llamacpp:n_busy_slots_per_decode"), 1.0);
    assert!(value(&m1, "llamacpp:tokens_predicted_seconds_total") > 0.0);
    assert_eq!(value(&m1, "llamacpp:n_tokens_max"), n_prompt + 5.0);
    assert_eq!(value(&m1, "llamacpp:requests_processing"), 0.0);
    assert!(value(&m1, "gauge:connections_open") >= 1.0);
}

#[test]
fn cors_answers_preflights_and_allows_only_listed_origins() {
    let srv = start(ServerConfig {
        cors_origins: vec!["http://localhost:3000".into()],
        api_key: Some("k3y".into()),
        ..test_config()
    });
    let addr = srv.addr();
    // A preflight needs no key (browsers send none).
    let pre = send(
        addr,
        "OPTIONS",
        "/v1/chat/completions",
        &[
            ("origin", "http://localhost:3000"),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization, content-type",
            ),
        ],
        "",
    );
    assert_eq!(pre.status, 204, "{}", pre.body);
    assert_eq!(
        pre.header("access-control-allow-origin").as_deref(),
        Some("http://localhost:3000")
    );
    assert!(pre
        .header("access-control-allow-methods")
        .unwrap()
        .contains("POST"));
    assert_eq!(
        pre.header("access-control-allow-headers").as_deref(),
        Some("authorization, content-type")
    );
    // The real request carries the header, also on an error.
    let r = send(
        addr,
        "GET",
        "/v1/models",
        &[("origin", "http://localhost:3000")],
        "",
    );
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("access-control-allow-origin").as_deref(),
        Some("http://localhost:3000")
    );
    let ok = send(
        addr,
        "GET",
        "/v1/models",
        &[
            ("origin", "http://localhost:3000"),
            ("authorization", "Bearer k3y"),
        ],
        "",
    );
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("vary").as_deref(), Some("Origin"));
    // Another origin: no header, and its preflight is refused.
    let other = send(
        addr,
        "GET",
        "/health",
        &[("origin", "https://evil.example")],
        "",
    );
    assert_eq!(other.status, 200);
    assert_eq!(other.header("access-control-allow-origin"), None);
    let pre = send(
        addr,
        "OPTIONS",
        "/v1/models",
        &[
            ("origin", "https://evil.example"),
            ("access-control-request-method", "GET"),
        ],
        "",
    );
    assert_eq!(pre.status, 403, "{}", pre.body);
}

#[test]
fn without_cors_no_cors_header_is_sent_and_star_allows_any_origin() {
    let srv = start(test_config());
    let r = send(
        srv.addr(),
        "GET",
        "/health",
        &[("origin", "http://a.example")],
        "",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), None);
    drop(srv);
    let srv = start(ServerConfig {
        cors_origins: vec!["*".into()],
        ..test_config()
    });
    let r = send(
        srv.addr(),
        "GET",
        "/health",
        &[("origin", "http://a.example")],
        "",
    );
    assert_eq!(
        r.header("access-control-allow-origin").as_deref(),
        Some("*")
    );
}
