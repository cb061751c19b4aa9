//! Server behaviour over time, each test on its own server (so `/health` counters are its own):
//! batching, slow and vanishing clients, the concurrency limit, the API key, graceful shutdown.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::*;
use gauge_server::{RunningServer, ServerConfig};
use serde_json::{json, Value};

fn start(cfg: ServerConfig) -> RunningServer {
    RunningServer::start(cfg).expect("server starts")
}

fn long_stream(max_tokens: usize) -> Value {
    json!({
        "prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": true,
        "stream": true,
    })
}

#[test]
fn concurrent_requests_share_the_batch_and_a_stalled_reader_stalls_nobody() {
    let srv = start(test_config());
    let addr = srv.addr();
    // A client that sends a streaming request and then never reads.
    let stalled = open(addr, "/v1/completions", &long_stream(250), &[]);
    wait_health(addr, 30, "the stalled stream to start", |h| h["live"] == 1);
    // Three more requests at once; all decode next to the stalled one.
    let t0 = Instant::now();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                post(
                    addr,
                    "/v1/completions",
                    &json!({"prompt": "Hello", "max_tokens": 16, "ignore_eos": true}),
                )
            })
        })
        .collect();
    let seen_live = wait_health(addr, 30, "4 live sequences", |h| h["live"] == 4);
    assert_eq!(seen_live["parallel"], 4);
    for w in workers {
        let r = w.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["usage"]["completion_tokens"], 16);
    }
    let elapsed = t0.elapsed();
    // The stalled stream is still running (it wants 250 tokens): the others did not wait for it.
    wait_health(addr, 5, "only the stalled stream to be left", |h| {
        h["requests_finished"] == 3 && h["live"] == 1
    });
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
    drop(stalled);
    wait_health(addr, 30, "the stalled stream to be freed", |h| {
        h["live"] == 0 && h["in_flight"] == 0
    });
}

#[test]
fn a_disconnected_stream_stops_its_sequence_and_frees_its_slot() {
    let srv = start(test_config());
    let addr = srv.addr();
    let mut s = open(
        addr,
        "/v1/chat/completions",
        &json!({
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 250, "ignore_eos": true, "stream": true,
        }),
        &[],
    );
    let mut buf = Vec::new();
    assert!(
        read_until(&mut s, &mut buf, b"\"content\":\""),
        "{}",
        String::from_utf8_lossy(&buf)
    );
    drop(s);
    let h = wait_health(addr, 30, "the sequence to be freed", |h| {
        h["live"] == 0 && h["in_flight"] == 0 && h["requests_finished"] == 1
    });
    let made = h["tokens_generated"].as_u64().unwrap();
    assert!(
        made < 100,
        "the engine kept generating after the client left: {made} tokens"
    );
    // The slot is reusable.
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn a_non_streaming_client_that_hangs_up_frees_its_sequence() {
    let srv = start(test_config());
    let addr = srv.addr();
    let s = open(
        addr,
        "/v1/completions",
        &json!({
            "prompt": "Once upon a time", "max_tokens": 250, "ignore_eos": true,
        }),
        &[],
    );
    wait_health(addr, 30, "the request to start", |h| h["live"] == 1);
    drop(s);
    let h = wait_health(addr, 30, "the sequence to be freed", |h| {
        h["live"] == 0 && h["in_flight"] == 0
    });
    let made = h["tokens_generated"].as_u64().unwrap();
    assert!(
        made < 200,
        "the engine kept generating after the client left: {made} tokens"
    );
}

#[test]
fn beyond_parallel_plus_queue_requests_get_429_in_openai_shape() {
    let srv = start(ServerConfig {
        parallel: 1,
        max_queue: 0,
        ..test_config()
    });
    let addr = srv.addr();
    let mut a = open(addr, "/v1/completions", &long_stream(60), &[]);
    wait_health(addr, 30, "the first request to run", |h| {
        h["in_flight"] == 1
    });
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    let v = assert_error(&r, 429, None);
    assert_eq!(v["error"]["code"], "server_busy");
    // The first request is unaffected and completes.
    let mut buf = Vec::new();
    assert!(read_until(&mut a, &mut buf, b"data: [DONE]"));
    wait_health(addr, 30, "the place to be released", |h| {
        h["in_flight"] == 0
    });
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn waiting_requests_queue_for_a_sequence_and_all_complete() {
    let srv = start(ServerConfig {
        parallel: 1,
        max_queue: 4,
        ..test_config()
    });
    let addr = srv.addr();
    let workers: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                post(
                    addr,
                    "/v1/completions",
                    &json!({"prompt": format!("Story {i}:"), "max_tokens": 6, "ignore_eos": true}),
                )
            })
        })
        .collect();
    for w in workers {
        let r = w.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["usage"]["completion_tokens"], 6);
    }
}

#[test]
fn api_key_is_required_everywhere_but_health() {
    let srv = start(ServerConfig {
        api_key: Some("sekret".into()),
        ..test_config()
    });
    let addr = srv.addr();
    assert_eq!(get(addr, "/health").status, 200);
    let r = get(addr, "/v1/models");
    let v = assert_error(&r, 401, None);
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let wrong = request(
        addr,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer nope")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    let ok = request(
        addr,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer sekret")],
        b"",
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
    let ok = request(addr, "GET", "/v1/models", &[("X-Api-Key", "sekret")], b"");
    assert_eq!(ok.status, 200);
    let body = json!({"prompt": "Hi", "max_tokens": 2}).to_string();
    let r = request(addr, "POST", "/v1/completions", &[], body.as_bytes());
    assert_eq!(r.status, 401);
}

#[test]
fn graceful_shutdown_lets_in_flight_streams_finish() {
    let srv = start(test_config());
    let addr = srv.addr();
    let mut s = open(addr, "/v1/completions", &long_stream(30), &[]);
    let mut buf = Vec::new();
    assert!(read_until(&mut s, &mut buf, b"data: "));
    let stopper = std::thread::spawn(move || srv.shutdown());
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    buf.extend_from_slice(&rest);
    let r = parse(&buf);
    let data = r.sse_data();
    assert_eq!(
        data.last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.body
    );
    let fin: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(fin["choices"][0]["finish_reason"], "length", "{fin}");
    stopper.join().unwrap().expect("clean shutdown");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening"
    );
}

#[test]
fn after_the_grace_period_streams_are_cut_with_an_error_event() {
    let srv = start(ServerConfig {
        shutdown_grace: Duration::ZERO,
        ..test_config()
    });
    let addr = srv.addr();
    let mut s = open(addr, "/v1/completions", &long_stream(250), &[]);
    let mut buf = Vec::new();
    assert!(read_until(&mut s, &mut buf, b"data: "));
    let t0 = Instant::now();
    let stopper = std::thread::spawn(move || srv.shutdown());
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    buf.extend_from_slice(&rest);
    let data = parse(&buf).sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let err: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(err["error"]["code"], "shutting_down", "{err}");
    stopper.join().unwrap().expect("clean shutdown");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_long_prompt_prefilled_in_small_chunks_gives_the_same_greedy_text() {
    let prompt = "The history of the city begins with a small village by the river. ".repeat(12);
    let body = json!({"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": true});
    let whole = start(test_config());
    let a = post(whole.addr(), "/v1/completions", &body).json();
    drop(whole);
    let chunked = start(ServerConfig {
        prefill_chunk: 16,
        ..test_config()
    });
    let addr = chunked.addr();
    // A stream decodes next to the chunked prefill.
    let mut s = open(addr, "/v1/completions", &long_stream(40), &[]);
    let mut buf = Vec::new();
    assert!(read_until(&mut s, &mut buf, b"data: "));
    let b = post(addr, "/v1/completions", &body).json();
    let n = a["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(n > 100, "the prompt should span many chunks: {n} tokens");
    assert_eq!(b["usage"]["prompt_tokens"], n);
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    assert!(read_until(&mut s, &mut buf, b"data: [DONE]"));
}

#[test]
fn bearer_scheme_is_parsed_strictly() {
    let srv = start(ServerConfig {
        api_key: Some("sekret".into()),
        ..test_config()
    });
    let addr = srv.addr();
    let status =
        |value: &str| request(addr, "GET", "/v1/models", &[("Authorization", value)], b"").status;
    assert_eq!(status("Bearer sekret"), 200);
    assert_eq!(status("Bearer  sekret"), 401, "two spaces");
    assert_eq!(
        status("bearer sekret"),
        200,
        "the scheme is case-insensitive"
    );
    assert_eq!(status("Bearer\tsekret"), 401, "tab separator");
    assert_eq!(status("Bearer sekret x"), 401, "a second word");
    assert_eq!(status("Bearer sek ret"), 401, "a space inside");
    assert_eq!(status("Bearersekret"), 401);
    assert_eq!(status("Basic sekret"), 401);
    assert_eq!(status("sekret"), 401);
    // Whitespace at the very end of the header line is not part of the value (RFC 9110 5.5:
    // optional whitespace, removed by every HTTP parser), so `Bearer sekret ` is the same
    // header as `Bearer sekret`; nothing is trimmed by gauge itself.
    assert_eq!(status("Bearer sekret "), 200);
    let x = |value: &str| request(addr, "GET", "/v1/models", &[("X-Api-Key", value)], b"").status;
    assert_eq!(x("sekret"), 200);
    assert_eq!(x("sekret x"), 401);
    assert_eq!(x("sekret2"), 401);
}

#[test]
fn an_api_key_that_no_header_can_carry_is_refused() {
    for key in ["", " sekret", "sek ret", "sekret\n", "clé"] {
        let err = RunningServer::start(ServerConfig {
            api_key: Some(key.into()),
            ..test_config()
        })
        .expect_err("refused");
        assert!(err.to_string().contains("api_key"), "{key:?}: {err}");
    }
}

#[test]
fn new_requests_during_the_grace_period_get_503() {
    let srv = start(ServerConfig {
        shutdown_grace: Duration::from_secs(60),
        ..test_config()
    });
    let addr = srv.addr();
    let mut s = open(addr, "/v1/completions", &long_stream(250), &[]);
    let mut buf = Vec::new();
    assert!(read_until(&mut s, &mut buf, b"data: "));
    let stopper = std::thread::spawn(move || srv.shutdown());
    // Until the signal lands requests succeed; from then on, 503 -- never a refused connection.
    let t0 = Instant::now();
    let refusal = loop {
        let c = std::net::TcpStream::connect(addr);
        assert!(
            c.is_ok(),
            "connection refused during the grace period: {c:?}"
        );
        drop(c);
        let r = get(addr, "/v1/models");
        if r.status == 503 {
            break r;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(t0.elapsed() < Duration::from_secs(30), "never drained");
        std::thread::sleep(Duration::from_millis(20));
    };
    let v = assert_error(&refusal, 503, None);
    assert_eq!(v["error"]["code"], "shutting_down");
    assert_eq!(refusal.header("connection"), Some("close"));
    let gen = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(gen.status, 503);
    // The stream in flight is unaffected and finishes; then the server stops.
    assert!(read_until(&mut s, &mut buf, b"data: [DONE]"));
    drop(s);
    stopper.join().unwrap().expect("clean shutdown");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening"
    );
}

#[test]
fn a_completion_stream_cut_by_shutdown_ends_with_its_stop_chunk() {
    let srv = start(ServerConfig {
        shutdown_grace: Duration::ZERO,
        ..test_config()
    });
    let addr = srv.addr();
    let mut s = open(
        addr,
        "/completion",
        &json!({"prompt": "Once upon a time", "n_predict": 250, "ignore_eos": true, "stream": true}),
        &[],
    );
    let mut buf = Vec::new();
    assert!(read_until(&mut s, &mut buf, b"data: "));
    let stopper = std::thread::spawn(move || srv.shutdown());
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    buf.extend_from_slice(&rest);
    let data = parse(&buf).sse_data();
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["stop"], true, "{data:?}");
    assert_eq!(last["error"]["code"], "shutting_down", "{last}");
    let n = last["tokens_predicted"].as_u64().unwrap();
    assert!(n < 250, "{last}");
    stopper.join().unwrap().expect("clean shutdown");
}
