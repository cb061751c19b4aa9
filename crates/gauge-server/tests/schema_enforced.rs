//! Issue 21 through the real server: no schema or grammar can abort the process, and what a
//! schema says is enforced or refused.
//!
//! * Long chains (`$ref`, `anyOf`, GBNF rules and aliases, Lark rules) once overflowed a worker
//!   thread's stack and aborted the server with every request in flight. Each is sent here; the
//!   server answers (200, or a 400 naming the limit) and keeps serving.
//! * Each schema of the issue that came back 200 with output breaking it is now a 400 naming
//!   the keyword and its JSON-pointer path; `lenient_schema: true` accepts it and reports what
//!   was dropped.
//! * `tool_choice: "required"` with an unsatisfiable tool schema is a 400, as it is named or in
//!   `response_format`.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use common::{assert_error, health, post};
use gauge_server::{RunningServer, ServerConfig};
use serde_json::{json, Map, Value};

/// A server whose body limit takes the chains (the default 1 MiB, as `gauge serve` has).
fn server() -> SocketAddr {
    static S: OnceLock<RunningServer> = OnceLock::new();
    common::started(&S, || ServerConfig {
        max_body_bytes: ServerConfig::default().max_body_bytes,
        ..common::test_config()
    })
}

fn completion(extra: Value) -> Value {
    let mut body = json!({"prompt": "x", "n_predict": 2, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// The reproduction: `n` definitions chained by `$ref` through a property.
fn ref_chain(n: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": format!("#/$defs/d{}", i + 1)}}}),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "integer"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

fn any_of_chain(n: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        defs.insert(
            format!("d{i}"),
            json!({"anyOf": [{"const": i}, {"$ref": format!("#/$defs/d{}", i + 1)}]}),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "string"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

fn gbnf_chain(n: usize) -> String {
    let mut g = String::from("root ::= r0\n");
    for i in 0..n {
        g.push_str(&format!("r{i} ::= \"x\" r{} | \"y\"\n", i + 1));
    }
    g.push_str(&format!("r{n} ::= \"z\"\n"));
    g
}

fn gbnf_aliases(n: usize) -> String {
    let mut g = String::from("root ::= a0\n");
    for i in 0..n {
        g.push_str(&format!("a{i} ::= a{}\n", i + 1));
    }
    g.push_str(&format!("a{n} ::= \"z\"\n"));
    g
}

fn lark_chain(n: usize) -> String {
    let mut g = String::from("%llguidance {}\nstart: r0\n");
    for i in 0..n {
        g.push_str(&format!("r{i}: \"x\" r{} | \"y\"\n", i + 1));
    }
    g.push_str(&format!("r{n}: \"z\"\n"));
    g
}

/// 200, or a 400 that names the limit; and the server still answers afterwards.
fn answers_and_survives(addr: SocketAddr, what: &str, body: Value) -> u16 {
    let r = post(addr, "/completion", &body);
    assert!(
        r.status == 200 || r.status == 400,
        "{what}: status {} body {}",
        r.status,
        r.body
    );
    if r.status == 400 {
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains("the most a request may send"), "{what}: {msg}");
    }
    assert_eq!(health(addr)["status"], "ok", "{what}: the server is gone");
    r.status
}

#[test]
fn chains_that_aborted_the_server_are_answered() {
    let addr = server();
    // The sizes: each overflowed a 2 MiB worker stack before.
    assert_eq!(
        answers_and_survives(
            addr,
            "$ref chain 250",
            completion(json!({"json_schema": ref_chain(250)}))
        ),
        200
    );
    assert_eq!(
        answers_and_survives(
            addr,
            "anyOf chain 300",
            completion(json!({"json_schema": any_of_chain(300)}))
        ),
        200
    );
    for (what, g) in [
        ("GBNF chain 700", gbnf_chain(700)),
        ("GBNF aliases 2000", gbnf_aliases(2000)),
        ("Lark chain 700", lark_chain(700)),
    ] {
        assert_eq!(
            answers_and_survives(addr, what, completion(json!({"grammar": g}))),
            200
        );
    }
}

#[test]
fn chains_beyond_the_limits_are_a_400_naming_the_limit() {
    let addr = server();
    let r = post(
        addr,
        "/completion",
        &completion(json!({"json_schema": ref_chain(6_000)})),
    );
    let v = assert_error(&r, 400, Some("json_schema"));
    assert_eq!(v["error"]["code"], "constraint_too_large", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("10000 subschemas"),
        "{v}"
    );
    let r = post(
        addr,
        "/completion",
        &completion(json!({"grammar": gbnf_aliases(12_000)})),
    );
    let v = assert_error(&r, 400, Some("grammar"));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("10000 rule"),
        "{v}"
    );
    assert_eq!(health(addr)["status"], "ok");
}

/// The schemas that came back 200 with output that broke them, and where the refusal
/// must point.
fn unenforced_cases() -> Vec<(Value, &'static str, &'static str)> {
    vec![
        (
            json!({"type":"integer","minimum":5,"maximum":5,"not":{"const":5}}),
            "not",
            "#/not",
        ),
        (
            json!({"type":"array","items":{"enum":[1]},"uniqueItems":true,"minItems":2,"maxItems":2}),
            "uniqueItems",
            "#/uniqueItems",
        ),
        (
            json!({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"contains":{"const":5},"minItems":1,"maxItems":2}),
            "contains",
            "#/contains",
        ),
        (
            json!({"if":{"type":"string"},"then":{"const":"yes"},"else":{"const":7}}),
            "if",
            "#/if",
        ),
        (
            json!({"type":"object","propertyNames":{"pattern":"^z"},"minProperties":1,"maxProperties":1}),
            "propertyNames",
            "#/propertyNames",
        ),
        (
            json!({"type":"object","properties":{"u":{"type":"string","format":"bogus"}}}),
            "format: \"bogus\"",
            "#/properties/u/format",
        ),
    ]
}

#[test]
fn keywords_the_grammar_does_not_enforce_are_refused_by_name_and_path() {
    let addr = server();
    for (schema, keyword, path) in unenforced_cases() {
        // llama-server's field, OpenAI's response_format, and a tool's parameters alike.
        let bodies = [
            (
                "/completion",
                "json_schema",
                completion(json!({"json_schema": schema})),
            ),
            (
                "/v1/chat/completions",
                "response_format.json_schema.schema",
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                       "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}),
            ),
            (
                "/v1/chat/completions",
                "tools[0].function.parameters",
                json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                       "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
                       "tool_choice": {"type": "function", "function": {"name": "f"}}}),
            ),
        ];
        for (route, field, body) in bodies {
            let r = post(addr, route, &body);
            let v = assert_error(&r, 400, Some(field));
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(
                msg.contains(keyword) && msg.contains(path),
                "{keyword} at {path}: {msg}"
            );
            assert_eq!(v["error"]["code"], "invalid_schema", "{v}");
        }
    }
}

#[test]
fn lenient_schema_accepts_them_and_reports_what_was_dropped() {
    let addr = server();
    for (schema, keyword, path) in unenforced_cases() {
        let r = post(
            addr,
            "/completion",
            &completion(json!({"json_schema": schema, "lenient_schema": true})),
        );
        assert_eq!(r.status, 200, "{keyword}: {}", r.body);
        // Honoured, so not reported as an unknown field (which `--strict` would refuse).
        let unknown = r.json()["gauge"]["unknown_fields"].clone();
        assert!(
            !unknown.to_string().contains("lenient_schema"),
            "{keyword}: {unknown}"
        );
        let dropped = r.json()["gauge"]["schema_dropped"].clone();
        let listed = dropped.as_array().map(|a| {
            a.iter().any(|d| {
                d.as_str()
                    .is_some_and(|d| d.contains(keyword) && d.contains(path))
            })
        });
        assert_eq!(listed, Some(true), "{keyword}: {dropped}");
    }
    let r = post(
        addr,
        "/completion",
        &completion(json!({"json_schema": {"type": "integer"}, "lenient_schema": "yes"})),
    );
    assert_error(&r, 400, Some("lenient_schema"));
}

#[test]
fn an_unsatisfiable_tool_schema_is_a_400_in_every_mode() {
    let addr = server();
    let unsat = json!({"$defs": {"n": {"$ref": "#/$defs/n"}}, "$ref": "#/$defs/n"});
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": unsat}}]);
    let chat = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "call f"}], "max_tokens": 16,
                           "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    for (what, body) in [
        (
            "required",
            chat(json!({"tools": tools, "tool_choice": "required"})),
        ),
        (
            "named",
            chat(
                json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "f"}}}),
            ),
        ),
        (
            "response_format",
            chat(
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": unsat}}}),
            ),
        ),
    ] {
        let r = post(addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 400, "{what}: {}", r.body);
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            !msg.contains('\n'),
            "{what}: one line, no parser dump: {msg}"
        );
    }
}

#[test]
fn compile_errors_are_said_in_plain_words() {
    let addr = server();
    // Three properties required of an object that may hold one.
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}},
                        "additionalProperties": false, "minProperties": 3});
    let r = post(
        addr,
        "/completion",
        &completion(json!({"json_schema": schema})),
    );
    let v = assert_error(&r, 400, Some("json_schema"));
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        !msg.contains('\n') && !msg.contains("NoExtensionBias"),
        "{msg}"
    );
    assert!(msg.contains("minProperties"), "{msg}");
    // An overlapping oneOf cannot be enforced as exactly one.
    let schema = json!({"oneOf": [{"type": "integer"}, {"type": "number"}]});
    let r = post(
        addr,
        "/completion",
        &completion(json!({"json_schema": schema})),
    );
    let v = assert_error(&r, 400, Some("json_schema"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("oneOf"),
        "{v}"
    );
    // A disjoint oneOf is exact, and is compiled.
    let schema = json!({"oneOf": [{"type": "integer"}, {"type": "string"}]});
    let r = post(
        addr,
        "/completion",
        &completion(json!({"json_schema": schema})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn a_grammar_dead_end_is_an_error_never_a_stop() {
    let addr = server();
    // The object branch compiles, but its property can never be satisfied: an output that
    // starts it reaches a dead end after `{"a":`. The bias sends the model into it.
    let schema = json!({
        "anyOf": [
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["a"],
             "additionalProperties": false},
            {"type": "integer"}
        ],
        "$defs": {"n": {"$ref": "#/$defs/n"}}
    });
    let tok = post(addr, "/tokenize", &json!({"content": "{"})).json()["tokens"][0].clone();
    assert!(tok.is_u64(), "{tok}");
    for stream in [false, true] {
        let body = completion(json!({
            "json_schema": schema, "n_predict": 32, "stream": stream,
            "logit_bias": [[tok, 100.0]],
        }));
        let r = post(addr, "/completion", &body);
        if stream {
            let events = r.sse_data();
            let last = events.last().expect("events");
            assert!(last.contains("grammar_dead_end"), "{events:?}");
            assert!(
                !events.iter().any(|e| e.contains("\"stop_type\":\"eos\"")),
                "{events:?}"
            );
        } else {
            let v = assert_error(&r, 400, None);
            assert_eq!(v["error"]["code"], "grammar_dead_end", "{v}");
        }
    }
}
