//! The HTTP API against the real default model: response shapes, sampling fields per request,
//! logprobs, stop strings, streaming, and every client error as an OpenAI-shaped 4xx.
//!
//! Expected texts are never hard-coded: where a test needs the model's output it asks for it
//! first (greedy) and checks the property against that (a stop string cuts it, a ban changes it,
//! a replayed seed repeats it).

mod common;

use common::*;
use serde_json::{json, Value};

fn chat_body(extra: Value) -> Value {
    let mut b = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Name three colours."}],
        "max_tokens": 12,
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

const FRANCE: &str = "The capital of France is";

fn greedy_completion(extra: Value) -> Value {
    let mut b = json!({"prompt": FRANCE, "max_tokens": 8, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    let r = post(shared(), "/v1/completions", &b);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

#[test]
fn chat_completion_has_openai_shape_and_usage() {
    let r = post(shared(), "/v1/chat/completions", &chat_body(json!({})));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], MODEL);
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let c = &v["choices"][0];
    assert_eq!(c["message"]["role"], "assistant");
    assert!(c["message"]["content"].is_string());
    assert!(["stop", "length"].contains(&c["finish_reason"].as_str().unwrap()));
    let u = &v["usage"];
    let (p, n) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    );
    assert!(p > 5 && (1..=12).contains(&n), "{u}");
    assert_eq!(u["total_tokens"].as_u64().unwrap(), p + n);
    assert!(
        v.get("gauge").is_none(),
        "the chain is echoed only on request"
    );
}

#[test]
fn max_tokens_is_honoured_exactly_with_ignore_eos() {
    let r = post(
        shared(),
        "/v1/chat/completions",
        &chat_body(json!({"max_tokens": 7, "ignore_eos": true})),
    );
    let v = r.json();
    assert_eq!(v["usage"]["completion_tokens"], 7, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[test]
fn echo_chain_shows_the_per_request_normalized_penalty() {
    let r = post(
        shared(),
        "/v1/chat/completions",
        &chat_body(json!({
            "repeat_penalty": 1.3, "repeat_penalty_mode": "normalized",
            "top_k": 20, "echo_chain": true,
        })),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let g = &r.json()["gauge"];
    let chain = g["chain"].as_str().unwrap();
    assert!(chain.starts_with("logits -> penalties -> "), "{chain}");
    assert!(
        chain.contains("top-k") && chain.trim_end().ends_with("dist"),
        "{chain}"
    );
    assert_eq!(g["params"]["repeat_penalty_mode"], "normalized");
    assert_eq!(g["params"]["top_k"], 20);
    // -1 (the default) is resolved to a concrete seed the client can replay
    assert!(g["seed"].as_u64().unwrap() < u32::MAX as u64);
    // the default request has the penalty stage off
    let r = post(
        shared(),
        "/v1/chat/completions",
        &chat_body(json!({"echo_chain": true})),
    );
    let chain = r.json()["gauge"]["chain"].as_str().unwrap().to_string();
    assert!(chain.starts_with("logits -> ?penalties"), "{chain}");
}

#[test]
fn preset_and_samplers_fields_shape_the_chain() {
    let r = post(
        shared(),
        "/v1/chat/completions",
        &chat_body(json!({"preset": "chat", "samplers": "kt", "echo_chain": true})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let g = &r.json()["gauge"];
    assert_eq!(g["params"]["preset"], "chat");
    assert_eq!(g["params"]["repeat_penalty_mode"], "normalized");
    assert_eq!(g["chain"], "logits -> top-k -> temp-ext -> dist ");
}

#[test]
fn a_reported_seed_replays_the_same_text() {
    let body = chat_body(json!({"max_tokens": 16, "temperature": 1.0, "echo_chain": true}));
    let first = post(shared(), "/v1/chat/completions", &body).json();
    let seed = first["gauge"]["seed"].clone();
    let mut again = body.clone();
    again["seed"] = seed.clone();
    let second = post(shared(), "/v1/chat/completions", &again).json();
    assert_eq!(second["gauge"]["seed"], seed);
    assert_eq!(
        first["choices"][0]["message"]["content"],
        second["choices"][0]["message"]["content"]
    );
}

#[test]
fn logit_bias_bans_a_token_in_id_string_and_object_forms() {
    let base = greedy_completion(json!({"max_tokens": 1, "logprobs": 0}));
    let first = base["choices"][0]["logprobs"]["tokens"][0]
        .as_str()
        .unwrap()
        .to_string();
    let greedy_text = base["choices"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(first, greedy_text);
    // The first token's id, from llama-server's endpoint with return_tokens.
    let r = post(
        shared(),
        "/completion",
        &json!({"prompt": FRANCE, "n_predict": 1, "temperature": 0, "return_tokens": true}),
    );
    let id = r.json()["tokens"][0].as_i64().unwrap();
    for bias in [
        json!([[id, false]]),
        json!({ id.to_string(): -100.0 }),
        json!([[first.clone(), false]]),
        json!({ first.clone(): false }),
    ] {
        let v = greedy_completion(json!({"max_tokens": 1, "logit_bias": bias}));
        let text = v["choices"][0]["text"].as_str().unwrap();
        assert_ne!(
            text, greedy_text,
            "the ban {bias} did not change the greedy token"
        );
    }
}

#[test]
fn stop_string_cuts_the_text_and_reports_stop() {
    let full = greedy_completion(json!({"max_tokens": 12, "ignore_eos": true}));
    let text = full["choices"][0]["text"].as_str().unwrap().to_string();
    // a stop string taken from the middle of the greedy text
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 6, "{text:?}");
    let start = chars.len() / 2;
    let stop: String = chars[start..start + 2].iter().collect();
    let cut = &text[..text.find(&stop).unwrap()];
    let v =
        greedy_completion(json!({"max_tokens": 12, "ignore_eos": true, "stop": [stop.clone()]}));
    assert_eq!(v["choices"][0]["text"], cut, "stop {stop:?}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // llama-server reports the word that stopped it
    let n = post(
        shared(),
        "/completion",
        &json!({"prompt": FRANCE, "n_predict": 12, "temperature": 0, "ignore_eos": true, "stop": [stop.clone()]}),
    )
    .json();
    assert_eq!(n["content"], cut);
    assert_eq!(n["stop_type"], "word");
    assert_eq!(n["stopping_word"], stop);
}

#[test]
fn completion_logprobs_are_the_models_log_softmax() {
    let v = greedy_completion(json!({"max_tokens": 4, "logprobs": 3}));
    let lp = &v["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 4);
    for (i, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
        let top = top.as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 3);
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(chosen <= 0.0);
        // greedy: the chosen token is the most likely one
        let best = top
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!((best - chosen).abs() < 1e-6, "{top:?} vs {chosen}");
        let mass: f64 = top.values().map(|x| x.as_f64().unwrap().exp()).sum();
        assert!(mass <= 1.0 + 1e-5);
    }
    let offs: Vec<u64> = lp["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(offs[0], 0);
    assert!(offs.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn chat_logprobs_list_top_alternatives_most_likely_first() {
    let r = post(
        shared(),
        "/v1/chat/completions",
        &chat_body(json!({"max_tokens": 3, "logprobs": true, "top_logprobs": 4})),
    );
    let v = r.json();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    for t in content {
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 4);
        let lps: Vec<f64> = top.iter().map(|x| x["logprob"].as_f64().unwrap()).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]), "{lps:?}");
        assert!(t["bytes"].is_array() && t["token"].is_string());
        assert!(t["logprob"].as_f64().unwrap() <= 0.0);
    }
}

#[test]
fn chat_stream_is_sse_ending_in_done_with_usage_chunk() {
    let r = post(
        shared(),
        "/v1/chat/completions",
        &chat_body(json!({"stream": true, "max_tokens": 6, "ignore_eos": true,
                          "stream_options": {"include_usage": true}})),
    );
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let data = r.sse_data();
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 6);
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(!text.is_empty());
}

#[test]
fn streamed_text_equals_the_non_streamed_text() {
    let body = json!({"prompt": FRANCE, "max_tokens": 10, "temperature": 0, "ignore_eos": true});
    let whole = post(shared(), "/v1/completions", &body).json();
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let r = post(shared(), "/v1/completions", &sb);
    let data = r.sse_data();
    assert_eq!(data.last().unwrap(), "[DONE]");
    let text: String = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, whole["choices"][0]["text"].as_str().unwrap());
}

#[test]
fn native_completion_streams_tokens_and_ends_with_stop_true() {
    let r = post(
        shared(),
        "/completion",
        &json!({"prompt": FRANCE, "n_predict": 5, "stream": true, "n_probs": 2, "ignore_eos": true}),
    );
    let data = r.sse_data();
    let chunks: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks.len(), 6, "5 tokens and the final object: {data:?}");
    for c in &chunks[..5] {
        assert_eq!(c["stop"], false);
        assert_eq!(c["tokens"].as_array().unwrap().len(), 1);
        assert_eq!(
            c["completion_probabilities"][0]["top_logprobs"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["stop"], true);
    assert_eq!(last["stop_type"], "limit");
    assert_eq!(last["tokens_predicted"], 5);
    assert!(last["generation_settings"]["temperature"].is_number());
    assert!(last["timings"]["predicted_per_second"].is_number());
}

#[test]
fn prompt_as_token_ids_and_n_predict_zero_work() {
    let t = post(
        shared(),
        "/completion",
        &json!({"prompt": FRANCE, "n_predict": 4, "temperature": 0, "return_tokens": true}),
    )
    .json();
    // the tokens of the prompt itself: ask with n_predict 0 for nothing but the count
    let ids = post(
        shared(),
        "/completion",
        &json!({"prompt": FRANCE, "n_predict": 0}),
    )
    .json();
    assert_eq!(ids["tokens_predicted"], 0);
    assert_eq!(ids["content"], "");
    let n = ids["tokens_evaluated"].as_u64().unwrap() as usize;
    assert!(n > 0);
    // prompt given as ids (the generated ids appended to the text prompt make a second prompt)
    let gen: Vec<i64> = t["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    let a = post(
        shared(),
        "/completion",
        &json!({"prompt": [gen[0]], "n_predict": 2, "temperature": 0}),
    )
    .json();
    assert_eq!(a["tokens_evaluated"], 1);
    let bad = post(
        shared(),
        "/completion",
        &json!({"prompt": [10_000_000], "n_predict": 2}),
    );
    assert_error(&bad, 400, Some("prompt"));
}

#[test]
fn models_and_health() {
    let m = get(shared(), "/v1/models").json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], MODEL);
    assert_eq!(m["data"][0]["meta"]["n_vocab"], 49152);
    let h = health(shared());
    assert_eq!(h["status"], "ok");
    assert_eq!(h["parallel"], 4);
}

// ---- client errors ------------------------------------------------------------------------

#[test]
fn invalid_sampling_fields_are_400_naming_field_and_range() {
    let cases = [
        (json!({"top_p": 1.5}), "top_p", "[0, 1]"),
        (json!({"temperature": -1}), "temperature", ">= 0"),
        (
            json!({"repeat_penalty_mode": "bogus"}),
            "repeat_penalty_mode",
            "normalized",
        ),
        (json!({"mirostat": 3}), "mirostat", "0 (off), 1 or 2"),
        (json!({"top_k": "many"}), "top_k", "an integer"),
        (
            json!({"logit_bias": {"99999999": 1}}),
            "logit_bias",
            "n_vocab",
        ),
        (json!({"samplers": ["top_k", "nope"]}), "samplers", "nope"),
        (json!({"preset": "fast"}), "preset", "fast"),
        (json!({"seed": -5}), "seed", "4294967295"),
        (json!({"stop": [""]}), "stop", "non-empty"),
        (json!({"stream": "yes"}), "stream", "true or false"),
        (
            json!({"top_logprobs": 500, "logprobs": true}),
            "top_logprobs",
            "0..=100",
        ),
        (json!({"n": 2}), "n", "one choice"),
        (json!({"messages": []}), "messages", "non-empty"),
        (
            json!({"messages": [{"role": "wizard", "content": "hi"}]}),
            "messages[0].role",
            "user",
        ),
    ];
    for (extra, field, allowed) in cases {
        let r = post(shared(), "/v1/chat/completions", &chat_body(extra.clone()));
        let v = assert_error(&r, 400, Some(field));
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(allowed),
            "{extra}: message {msg:?} should contain {allowed:?}"
        );
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
}

#[test]
fn max_tokens_over_the_server_limit_is_400_under_the_name_used() {
    for name in ["max_tokens", "max_completion_tokens", "n_predict"] {
        let mut b = json!({"prompt": "hi"});
        b[name] = json!(100_000);
        let r = post(shared(), "/v1/completions", &b);
        let v = assert_error(&r, 400, Some(name));
        assert!(v["error"]["message"].as_str().unwrap().contains("0..=256"));
    }
}

#[test]
fn prompt_longer_than_the_context_is_400_context_length_exceeded() {
    let long = "word ".repeat(2000);
    let r = post(
        shared(),
        "/v1/completions",
        &json!({"prompt": long, "max_tokens": 4}),
    );
    let v = assert_error(&r, 400, Some("prompt"));
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("512"));
}

#[test]
fn malformed_json_and_wrong_shapes_are_400() {
    let r = request(shared(), "POST", "/v1/chat/completions", &[], b"{not json");
    let v = assert_error(&r, 400, None);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("malformed JSON"));
    let r = post(shared(), "/v1/completions", &json!([1, 2]));
    assert_error(&r, 400, None);
    let r = post(shared(), "/v1/completions", &json!({"max_tokens": 3}));
    assert_error(&r, 400, Some("prompt"));
    let r = post(
        shared(),
        "/v1/completions",
        &json!({"prompt": "", "max_tokens": 3}),
    );
    assert_error(&r, 400, Some("prompt"));
}

#[test]
fn body_over_the_limit_is_413() {
    let big = json!({"prompt": "x".repeat(100 * 1024)});
    let r = post(shared(), "/v1/completions", &big);
    let v = assert_error(&r, 413, None);
    assert!(v["error"]["message"].as_str().unwrap().contains("65536"));
}

#[test]
fn unknown_route_is_404_and_wrong_method_405_in_openai_shape() {
    assert_error(&get(shared(), "/v1/engines"), 404, None);
    assert_error(&get(shared(), "/v1/chat/completions"), 405, None);
}

#[test]
fn unsupported_features_are_refused_not_ignored() {
    for (extra, field) in [
        // Tools without a tool_choice mean OpenAI's "auto", which gauge cannot serve.
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}]}),
            "tool_choice",
        ),
        (json!({"functions": [{"name": "f"}]}), "functions"),
    ] {
        let r = post(shared(), "/v1/chat/completions", &chat_body(extra));
        assert_error(&r, 400, Some(field));
    }
    let r = post(
        shared(),
        "/v1/completions",
        &json!({"prompt": "a", "echo": true}),
    );
    assert_error(&r, 400, Some("echo"));
}
