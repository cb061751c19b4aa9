//! `GET /metrics`: llama-server's Prometheus metrics (`llamacpp:*`) plus gauge's connection
//! counters (`gauge:*`), in the Prometheus text exposition format (version 0.0.4).
//!
//! Unlike llama-server, the route is always on (it needs the API key when one is set): the
//! numbers are the ones `/health` already shows, so there is nothing extra to hide; both count
//! every sequence however it ended (see [`Metrics`]).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};

use crate::api::AppState;
use crate::engine::Finish;

/// Totals over every sequence the engine ran, however it ended (finished, failed, cut at
/// shutdown, or left by its client mid-stream): the engine records them when it frees the
/// sequence, so `llamacpp:tokens_predicted_total` is `/health`'s `tokens_generated`. llama-server
/// counts only requests that finish; a cancelled stream's tokens were generated all the same.
#[derive(Debug, Default)]
pub struct Metrics {
    prompt_tokens: AtomicU64,
    prompt_us: AtomicU64,
    predicted_tokens: AtomicU64,
    predicted_us: AtomicU64,
    /// Largest prompt + generated tokens one request held (llama-server's `n_tokens_max`).
    n_tokens_max: AtomicU64,
}

impl Metrics {
    /// Count one request that finished normally.
    pub(crate) fn record(&self, f: &Finish) {
        self.record_parts(
            f.prompt_tokens,
            f.completion_tokens,
            f.prompt_ms,
            f.decode_ms,
        );
    }

    /// Count one sequence: prompt tokens processed, tokens generated, and the time of each.
    pub(crate) fn record_parts(
        &self,
        prompt: usize,
        generated: usize,
        prompt_ms: f64,
        decode_ms: f64,
    ) {
        let us = |ms: f64| (ms * 1e3).max(0.0) as u64;
        self.prompt_tokens
            .fetch_add(prompt as u64, Ordering::Relaxed);
        self.prompt_us.fetch_add(us(prompt_ms), Ordering::Relaxed);
        self.predicted_tokens
            .fetch_add(generated as u64, Ordering::Relaxed);
        self.predicted_us
            .fetch_add(us(decode_ms), Ordering::Relaxed);
        self.n_tokens_max
            .fetch_max((prompt + generated) as u64, Ordering::Relaxed);
    }
}

/// One metric with its `# HELP` and `# TYPE` lines.
fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

pub(crate) async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let m = &st.stats.metrics;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    let (pt, ps) = (load(&m.prompt_tokens), load(&m.prompt_us) / 1e6);
    let (gt, gs) = (load(&m.predicted_tokens), load(&m.predicted_us) / 1e6);
    let per_s = |n: f64, s: f64| if s > 0.0 { n / s } else { 0.0 };
    let steps = st.stats.steps.load(Ordering::Relaxed) as f64;
    let seq_steps = st.stats.seq_steps.load(Ordering::Relaxed) as f64;
    let mut out = String::with_capacity(2048);
    let c = "counter";
    let g = "gauge";
    metric(
        &mut out,
        "llamacpp:prompt_tokens_total",
        c,
        "Number of prompt tokens processed.",
        pt,
    );
    metric(
        &mut out,
        "llamacpp:prompt_seconds_total",
        c,
        "Prompt process time in seconds.",
        ps,
    );
    metric(
        &mut out,
        "llamacpp:tokens_predicted_total",
        c,
        "Number of generation tokens processed.",
        gt,
    );
    metric(
        &mut out,
        "llamacpp:tokens_predicted_seconds_total",
        c,
        "Predict process time in seconds.",
        gs,
    );
    metric(
        &mut out,
        "llamacpp:n_decode_total",
        c,
        "Total number of llama_decode() calls.",
        steps,
    );
    metric(
        &mut out,
        "llamacpp:n_tokens_max",
        c,
        "Largest number of tokens (prompt + generated) one request held.",
        load(&m.n_tokens_max),
    );
    metric(
        &mut out,
        "llamacpp:prompt_tokens_seconds",
        g,
        "Average prompt throughput in tokens/s.",
        per_s(pt, ps),
    );
    metric(
        &mut out,
        "llamacpp:predicted_tokens_seconds",
        g,
        "Average generation throughput in tokens/s.",
        per_s(gt, gs),
    );
    metric(
        &mut out,
        "llamacpp:n_busy_slots_per_decode",
        g,
        "Average number of busy slots per llama_decode() call.",
        if steps > 0.0 { seq_steps / steps } else { 0.0 },
    );
    metric(
        &mut out,
        "llamacpp:requests_processing",
        g,
        "Number of requests processing.",
        st.stats.live.load(Ordering::Relaxed) as f64,
    );
    metric(
        &mut out,
        "llamacpp:requests_deferred",
        g,
        "Number of requests deferred.",
        st.stats.waiting.load(Ordering::Relaxed) as f64,
    );
    metric(
        &mut out,
        "gauge:connections_open",
        g,
        "HTTP connections open now.",
        st.conns.open() as f64,
    );
    metric(
        &mut out,
        "gauge:connections_evicted_total",
        c,
        "Idle connections closed to make room at the connection limit.",
        st.conns.evicted.load(Ordering::Relaxed) as f64,
    );
    metric(
        &mut out,
        "gauge:connections_refused_total",
        c,
        "Connections refused with 503 at the limit (every connection busy).",
        st.conns.refused.load(Ordering::Relaxed) as f64,
    );
    metric(
        &mut out,
        "gauge:max_connections",
        g,
        "The connection limit in effect.",
        st.limits.max_connections as f64,
    );
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        out,
    )
        .into_response()
}
