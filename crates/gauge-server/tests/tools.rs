//! OpenAI `tools` / `tool_choice` through the real server on the default model: a named choice
//! and `"required"` give `tool_calls` whose arguments parse and validate against the tool's
//! `parameters` schema, streamed and not; tool-call history is rendered as text turns;
//! `"auto"`, unknown names, bad schemas, malformed history and `tool_choice` without tools are
//! 400s naming the field.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use common::{assert_error, post, Resp};
use gauge_lab::json::schema::parse_json;
use gauge_server::{RunningServer, ServerConfig};
use serde_json::{json, Value};

fn server() -> SocketAddr {
    static S: OnceLock<RunningServer> = OnceLock::new();
    common::started(&S, || ServerConfig {
        threads: common::decode_threads(),
        ctx_size: 2048,
        parallel: 2,
        max_body_bytes: ServerConfig::default().max_body_bytes,
        ..common::test_config()
    })
}

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 30},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": false}}})
}

fn add() -> Value {
    json!({"type": "function", "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
            "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
            "required": ["a", "b"], "additionalProperties": false}}})
}

/// Do `args` (parsed arguments) satisfy the tool's schema? Checked by hand from the schemas
/// above, not by the grammar engine under test.
fn valid_args(name: &str, args: &Value) -> bool {
    let o = match args.as_object() {
        Some(o) => o,
        None => return false,
    };
    match name {
        "get_weather" => {
            o.len() == 2
                && o["city"].as_str().is_some_and(|c| c.chars().count() <= 30)
                && ["celsius", "fahrenheit"].contains(&o["unit"].as_str().unwrap_or(""))
        }
        "add" => {
            o.len() == 2
                && ["a", "b"]
                    .iter()
                    .all(|k| o[*k].as_i64().is_some_and(|x| (-1000..=1000).contains(&x)))
        }
        _ => false,
    }
}

fn chat(body: Value) -> Resp {
    post(server(), "/v1/chat/completions", &body)
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The calls of a non-streamed response, checked for OpenAI's shape.
fn tool_calls(v: &Value) -> Vec<(String, Value)> {
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{v}");
    assert!(c["message"]["content"].is_null(), "{v}");
    assert_eq!(c["message"]["role"], "assistant", "{v}");
    let calls = c["message"]["tool_calls"].as_array().expect("tool_calls");
    calls
        .iter()
        .map(|t| {
            assert_eq!(t["type"], "function", "{t}");
            assert!(
                t["id"].as_str().is_some_and(|s| s.starts_with("call_")),
                "{t}"
            );
            let args = t["function"]["arguments"]
                .as_str()
                .expect("arguments string");
            let parsed: Value =
                parse_json(args).unwrap_or_else(|e| panic!("arguments {args:?} do not parse: {e}"));
            (t["function"]["name"].as_str().unwrap().to_string(), parsed)
        })
        .collect()
}

#[test]
fn named_tool_choice_gives_valid_arguments() {
    for (seed, temperature, penalty) in [(1, 0.0, 1.0), (4, 1.2, 1.3)] {
        let r = chat(json!({
            "messages": user("What is the weather in Paris?"),
            "tools": [weather(), add()],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "temperature": temperature, "seed": seed, "repeat_penalty": penalty,
        }));
        assert_eq!(r.status, 200, "{}", r.body);
        let calls = tool_calls(&r.json());
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "get_weather");
        assert!(valid_args("get_weather", &calls[0].1), "{:?}", calls[0]);
    }
}

/// A "required" request the default model answers with two calls and then closes the array
/// (greedy; with sampling this 135M model often repeats calls until the length limit).
fn required_greedy() -> Value {
    json!({
        "messages": user("Add 2 and 40."),
        "tools": [weather(), add()],
        "tool_choice": "required",
        "temperature": 0,
    })
}

#[test]
fn required_tool_choice_gives_calls_of_the_tools() {
    let r = chat(required_greedy());
    assert_eq!(r.status, 200, "{}", r.body);
    let calls = tool_calls(&r.json());
    assert!(!calls.is_empty());
    for (name, args) in &calls {
        assert!(valid_args(name, args), "{name} {args}");
    }
    // Without parallel calls, exactly one.
    let r = chat(json!({
        "messages": user("Add 2 and 40, and tell me the weather in Oslo."),
        "tools": [weather(), add()],
        "tool_choice": "required",
        "parallel_tool_calls": false,
        "temperature": 0.7, "seed": 8,
    }));
    assert_eq!(r.status, 200, "{}", r.body);
    let calls = tool_calls(&r.json());
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(valid_args(&calls[0].0, &calls[0].1), "{calls:?}");
}

#[test]
fn required_cut_by_the_length_limit_comes_back_as_text() {
    let mut body = required_greedy();
    body["max_tokens"] = json!(6);
    let r = chat(body);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "length", "{v}");
    assert!(c["message"].get("tool_calls").is_none(), "{v}");
    let text = c["message"]["content"].as_str().expect("content text");
    assert!(text.trim_start().starts_with('['), "{text:?}");
    assert!(serde_json::from_str::<Value>(text).is_err(), "{text:?}");
}

/// The SSE chunks of a streamed request, as JSON (without `[DONE]`).
fn stream_chunks(body: Value) -> Vec<Value> {
    let r = chat(body);
    assert_eq!(r.status, 200, "{}", r.body);
    let data = r.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("chunk JSON"))
        .collect()
}

/// Accumulate streamed tool-call deltas the way OpenAI clients do (by `index`).
fn accumulate(chunks: &[Value]) -> (Vec<(String, String)>, String) {
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut finish = String::new();
    for c in chunks {
        let ch = &c["choices"][0];
        if let Some(f) = ch["finish_reason"].as_str() {
            finish = f.to_string();
        }
        assert!(
            ch["delta"]["content"].is_null() || ch["delta"]["content"] == "",
            "text content in a tool-call stream: {c}"
        );
        for t in ch["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = t["index"].as_u64().expect("index") as usize;
            if i == calls.len() {
                assert!(
                    t["id"].as_str().is_some(),
                    "first delta of a call has its id: {t}"
                );
                calls.push((String::new(), String::new()));
            }
            if let Some(n) = t["function"]["name"].as_str() {
                calls[i].0.push_str(n);
            }
            if let Some(a) = t["function"]["arguments"].as_str() {
                calls[i].1.push_str(a);
            }
        }
    }
    (calls, finish)
}

#[test]
fn streamed_tool_calls_accumulate_to_valid_calls() {
    let chunks = stream_chunks(json!({
        "messages": user("What is 12 plus 30?"),
        "tools": [add()],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
        "temperature": 0.5, "seed": 6, "stream": true,
    }));
    // Arguments arrive in pieces, one delta per token.
    assert!(chunks.len() > 4, "{chunks:?}");
    let (calls, finish) = accumulate(&chunks);
    assert_eq!(finish, "tool_calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "add");
    let args: Value = parse_json(&calls[0].1).expect("streamed arguments parse");
    assert!(valid_args("add", &args), "{args}");

    // "required" streamed: the same calls as the same request not streamed (greedy).
    let whole = tool_calls(&chat(required_greedy()).json());
    let mut body = required_greedy();
    body["stream"] = json!(true);
    let (streamed, finish) = accumulate(&stream_chunks(body));
    assert_eq!(finish, "tool_calls");
    let streamed: Vec<(String, Value)> = streamed
        .into_iter()
        .map(|(n, a)| (n, parse_json(&a).expect("streamed arguments parse")))
        .collect();
    assert_eq!(streamed, whole);
}

#[test]
fn a_call_cut_by_the_length_limit_or_a_stop_string_keeps_that_reason() {
    let r = chat(json!({
        "messages": user("Weather in Paris?"),
        "tools": [weather()],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "max_tokens": 3,
    }));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    let args = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert!(serde_json::from_str::<Value>(args).is_err(), "{args}");
    // Cut by a stop string: "stop", never "tool_calls", since the arguments are unfinished.
    let r = chat(json!({
        "messages": user("Weather in Paris?"),
        "tools": [weather()],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "stop": ["unit"],
    }));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let args = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert!(
        !args.contains("unit") && serde_json::from_str::<Value>(args).is_err(),
        "{args}"
    );
}

#[test]
fn none_ignores_the_tools() {
    let r = chat(json!({
        "messages": user("Say hi."),
        "tools": [weather()],
        "tool_choice": "none",
        "max_tokens": 8, "echo_chain": true,
    }));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
    assert!(
        v["choices"][0]["message"].get("tool_calls").is_none(),
        "{v}"
    );
    assert!(
        !v["gauge"]["chain"].as_str().unwrap().contains("grammar"),
        "{v}"
    );
}

#[test]
fn bad_tool_requests_are_400s_naming_the_field() {
    let base = |extra: Value| {
        let mut b = json!({"messages": user("hi"), "tools": [weather()]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    // "auto", stated or by default.
    let e = assert_error(
        &chat(base(json!({"tool_choice": "auto"}))),
        400,
        Some("tool_choice"),
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"required\""),
        "{e}"
    );
    assert_error(&chat(base(json!({}))), 400, Some("tool_choice"));
    assert_error(
        &chat(base(json!({"tool_choice": "sometimes"}))),
        400,
        Some("tool_choice"),
    );
    // An unknown name.
    let e = assert_error(
        &chat(base(
            json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}}),
        )),
        400,
        Some("tool_choice.function.name"),
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("get_weather"),
        "{e}"
    );
    // tool_choice without tools.
    assert_error(
        &chat(json!({"messages": user("hi"), "tool_choice": "required"})),
        400,
        Some("tool_choice"),
    );
    // A parameters schema that is not a schema, and one the engine cannot compile.
    let mut bad = weather();
    bad["function"]["parameters"] = json!("object");
    assert_error(
        &chat(json!({"messages": user("hi"), "tools": [add(), bad], "tool_choice": "required"})),
        400,
        Some("tools[1].function.parameters"),
    );
    let mut bad = weather();
    bad["function"]["parameters"] =
        json!({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}, "required": ["x"]});
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "get_weather"}}),
    ] {
        assert_error(
            &chat(
                json!({"messages": user("hi"), "tools": [add(), bad.clone()], "tool_choice": choice}),
            ),
            400,
            Some("tools[1].function.parameters"),
        );
    }
    // Bad tool shapes.
    assert_error(
        &chat(
            json!({"messages": user("hi"), "tools": [{"type": "retrieval"}], "tool_choice": "required"}),
        ),
        400,
        Some("tools[0].type"),
    );
    assert_error(
        &chat(
            json!({"messages": user("hi"), "tools": [{"type": "function", "function": {"name": "a b"}}], "tool_choice": "required"}),
        ),
        400,
        Some("tools[0].function.name"),
    );
    assert_error(
        &chat(base(
            json!({"tool_choice": "required", "parallel_tool_calls": "yes"}),
        )),
        400,
        Some("parallel_tool_calls"),
    );
    // Tools with another constraint; tools off chat.
    assert_error(
        &chat(base(
            json!({"tool_choice": "required", "response_format": {"type": "json_object"}}),
        )),
        400,
        Some("response_format"),
    );
    assert_error(
        &post(
            server(),
            "/v1/completions",
            &json!({"prompt": "hi", "tools": [weather()]}),
        ),
        400,
        Some("tools"),
    );
    // /explain rebuilds its companion chains without constraints: a tool call is refused there.
    assert_error(
        &post(
            server(),
            "/explain",
            &base(json!({"tool_choice": "required"})),
        ),
        400,
        Some("tool_choice"),
    );
    // Malformed tool-call history.
    let bad_history = |call: Value| {
        json!([{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": null, "tool_calls": call}])
    };
    assert_error(
        &chat(json!({"messages": bad_history(json!("get_weather"))})),
        400,
        Some("messages[1].tool_calls"),
    );
    assert_error(
        &chat(
            json!({"messages": bad_history(json!([{"id": "c", "type": "function", "function": {"name": "f"}}]))}),
        ),
        400,
        Some("messages[1].tool_calls[0].function"),
    );
    let legacy = json!([{"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}}]);
    assert_error(
        &chat(json!({"messages": legacy})),
        400,
        Some("messages[0].function_call"),
    );
    assert_error(
        &chat(json!({"messages": [{"role": "robot", "content": "hi"}]})),
        400,
        Some("messages[0].role"),
    );
}

fn history() -> Value {
    json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 degrees"}
    ])
}

#[test]
fn tool_call_history_is_rendered_as_text_turns() {
    // /apply-template shows the prompt chat uses: the tools' system message, the call as the
    // JSON array gauge asks for, the result as a user turn naming the function.
    let r = post(
        server(),
        "/apply-template",
        &json!({"messages": history(), "tools": [weather()], "tool_choice": "required"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let prompt = r.json()["prompt"].as_str().unwrap().to_string();
    let at = |needle: &str| {
        prompt
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in the prompt:\n{prompt}"))
    };
    let order = [
        at("You can call these functions"),
        at("`get_weather`: Current weather in a city."),
        at("What is the weather in Paris?"),
        at(r#"[{"name":"get_weather","parameters":{"city":"Paris","unit":"celsius"}}]"#),
        at("Result of `get_weather`: sunny, 21 degrees"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{prompt}");
    // The usual loop's last step: the result back, the tools still listed, a text answer.
    let r = chat(
        json!({"messages": history(), "tools": [weather()], "tool_choice": "none",
                        "max_tokens": 24}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{v}"
    );
    // ... or another call, with the history in the prompt.
    let r = chat(json!({"messages": history(), "tools": [weather(), add()],
                        "tool_choice": {"type": "function", "function": {"name": "add"}}, "seed": 1}));
    assert_eq!(r.status, 200, "{}", r.body);
    let calls = tool_calls(&r.json());
    assert!(valid_args("add", &calls[0].1), "{calls:?}");
}
