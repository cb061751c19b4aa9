//! A bounded load test on loopback: 8 concurrent clients × 8 requests each (half streamed),
//! every request `max_tokens` 32 with `ignore_eos`, so a complete response has exactly 32 tokens.
//! Requires 0 errors and every response complete; prints p50/p95 latency and aggregate tokens/s
//! (recorded in docs/server.md):
//!
//! ```text
//! GAUGE_LOAD_REQUESTS=20 cargo test --release -p gauge-server --test load -- --nocapture
//! ```
//!
//! (20 requests per client for the recorded measurement; 8 by default, which keeps every client
//! in flight together for several batches at a third of the CI time).
//!
//! Fixed counts, so it stops by itself; `GAUGE_LOAD_CLIENTS` / `GAUGE_LOAD_REQUESTS` /
//! `GAUGE_LOAD_TOKENS` change them for measurements. Traffic goes only to the in-process server's
//! 127.0.0.1 port.

mod common;

use std::time::{Duration, Instant};

use common::*;
use gauge_server::{RunningServer, ServerConfig};
use serde_json::{json, Value};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One request; returns the completion tokens of a complete response, or why it was not.
fn one(
    addr: std::net::SocketAddr,
    client: usize,
    i: usize,
    tokens: usize,
) -> Result<usize, String> {
    let stream = i % 2 == 1;
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": format!("Client {client}, request {i}: write a short poem about the sea.")}],
        "max_tokens": tokens,
        "ignore_eos": true,
        "seed": client * 1000 + i,
        "repeat_penalty": 1.1,
        "repeat_penalty_mode": if i % 4 < 2 { "normalized" } else { "ctrl" },
        "stream": stream,
        "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
    });
    let r = post(addr, "/v1/chat/completions", &body);
    if r.status != 200 {
        return Err(format!("status {}: {}", r.status, r.body));
    }
    if !stream {
        let v = r.json();
        let n = v["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize;
        let fin = &v["choices"][0]["finish_reason"];
        if n != tokens || fin != "length" {
            return Err(format!("incomplete: {n} tokens, finish {fin}"));
        }
        return Ok(n);
    }
    let data = r.sse_data();
    if data.last().map(String::as_str) != Some("[DONE]") {
        return Err(format!("stream without [DONE]: {:?}", data.last()));
    }
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).map_err(|e| format!("bad chunk {d}: {e}")))
        .collect::<Result<_, _>>()?;
    let n = chunks
        .last()
        .and_then(|c| c["usage"]["completion_tokens"].as_u64())
        .unwrap_or(0) as usize;
    let fin = chunks
        .iter()
        .rev()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str())
        .unwrap_or("");
    if n != tokens || fin != "length" {
        return Err(format!("incomplete stream: {n} tokens, finish {fin:?}"));
    }
    Ok(n)
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
fn eight_clients_eight_requests_each_all_complete() {
    let clients = env_or("GAUGE_LOAD_CLIENTS", 8);
    let per_client = env_or("GAUGE_LOAD_REQUESTS", 8);
    let tokens = env_or("GAUGE_LOAD_TOKENS", 32);
    let srv = RunningServer::start(ServerConfig {
        parallel: clients as u32,
        ..test_config()
    })
    .expect("server starts");
    let addr = srv.addr();
    assert!(addr.ip().is_loopback());

    let t0 = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            std::thread::spawn(move || {
                (0..per_client)
                    .map(|i| {
                        let t = Instant::now();
                        let r = one(addr, c, i, tokens);
                        (t.elapsed(), r)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<(Duration, Result<usize, String>)> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("client thread"))
        .collect();
    let wall = t0.elapsed();

    let errors: Vec<&String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .collect();
    assert!(
        errors.is_empty(),
        "{} errors, first: {}",
        errors.len(),
        errors[0]
    );
    assert_eq!(results.len(), clients * per_client);
    let total_tokens: usize = results.iter().map(|(_, r)| *r.as_ref().unwrap()).sum();
    assert_eq!(total_tokens, clients * per_client * tokens);
    let mut lat: Vec<Duration> = results.iter().map(|(d, _)| *d).collect();
    lat.sort();
    // The engine publishes its counters right after the step that sent the last event.
    let n = (clients * per_client) as u64;
    let h = wait_health(addr, 10, "every request to be accounted for", |h| {
        h["live"] == 0 && h["in_flight"] == 0 && h["requests_finished"] == n
    });
    let (steps, decode_ms, sample_ms) = (
        h["engine"]["steps"].as_f64().unwrap(),
        h["engine"]["decode_ms"].as_f64().unwrap(),
        h["engine"]["sample_ms"].as_f64().unwrap(),
    );
    println!(
        "engine: {steps} steps, decode {:.1} ms/step, sampling {:.2} ms/step ({:.3} ms/token)",
        decode_ms / steps,
        sample_ms / steps,
        sample_ms / total_tokens as f64,
    );
    println!(
        "load: {clients} clients x {per_client} requests x {tokens} tokens: 0 errors, wall {:.2} s, \
         latency p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms, aggregate {:.1} tokens/s",
        wall.as_secs_f64(),
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.95).as_secs_f64() * 1e3,
        lat.last().unwrap().as_secs_f64() * 1e3,
        total_tokens as f64 / wall.as_secs_f64(),
    );
    srv.shutdown().expect("clean shutdown");
}
