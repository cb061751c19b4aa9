//! HTTP routes and the JSON shapes of OpenAI's and llama-server's APIs.
//!
//! Every generation handler follows one path: read the body (counting bytes against
//! `--max-body-bytes`, all of it within `--body-timeout`), parse JSON, take an in-flight place (429 beyond `parallel + max_queue`),
//! prepare the job on a blocking worker ([`crate::request::prepare`]), hand it to the engine, then
//! either collect the events into one JSON response or turn them into server-sent events as they
//! come. The in-flight place is an RAII guard owned by the response (the SSE stream for
//! streaming requests), so it is released exactly when the client is done or gone.
//!
//! Streams end with `data: [DONE]` on the OpenAI endpoints; llama-server's `/completion` ends with
//! a chunk that has `"stop": true`, as llama-server does. A failure after the stream started is
//! sent as a `data: {"error": {...}}` event (the `openai` client raises it as an `APIError`).
//!
//! Here: the shared state, the in-flight place and the one generation path; `routes` (the
//! router, health, models, the drain), `body` (reading a request body under its limits),
//! `response` (the JSON shapes of a finished request, token logprobs), `stream` (server-sent
//! events).

mod body;
mod response;
mod routes;
mod stream;

pub(crate) use body::read_json;
pub(crate) use routes::router;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gauge_engine::Model;
use serde_json::{json, Value};
use tokio::sync::mpsc::unbounded_channel;

use crate::config::ServerConfig;
use crate::engine::{EngineStats, Job, Msg};
use crate::error::ApiError;
use crate::request::{prepare, Endpoint, Prepared};
use response::{collect, Meta};
use stream::stream_response;

/// Shared by every handler.
pub(crate) struct AppState {
    pub cfg: ServerConfig,
    pub model: Arc<Model>,
    pub model_id: String,
    pub engine: std::sync::mpsc::Sender<Msg>,
    pub stats: Arc<EngineStats>,
    pub in_flight: AtomicUsize,
    pub draining: AtomicBool,
    pub next_id: AtomicU64,
    /// Unix time the server started (ids, `/v1/models`).
    pub started: u64,
    /// Open connections (the limit, `/metrics`, shutdown).
    pub conns: Arc<crate::conn::Tracker>,
    /// Timeouts and the connection limit in effect.
    pub limits: crate::conn::Limits,
    /// The model's grammar vocabulary, built by the first constrained request.
    pub grammars: crate::request::GrammarCache,
}

/// One in-flight place; released on drop.
pub(crate) struct InFlight(Arc<AppState>);

impl InFlight {
    pub(crate) fn acquire(st: &Arc<AppState>) -> Result<InFlight, ApiError> {
        let max = st.cfg.max_in_flight();
        let prev = st.in_flight.fetch_add(1, Ordering::AcqRel);
        if prev >= max {
            st.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::busy(prev, max));
        }
        Ok(InFlight(Arc::clone(st)))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

pub(super) async fn generate(st: Arc<AppState>, ep: Endpoint, body: Body) -> Response {
    match generate_inner(st, ep, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn generate_inner(st: Arc<AppState>, ep: Endpoint, body: Body) -> Result<Response, ApiError> {
    if st.draining.load(Ordering::Relaxed) {
        return Err(ApiError::shutting_down());
    }
    let value = read_json(&st, body).await?;
    let guard = InFlight::acquire(&st)?;
    let st2 = Arc::clone(&st);
    let prep: Prepared = tokio::task::spawn_blocking(move || {
        prepare(ep, &value, &st2.model, &st2.cfg, &st2.grammars)
    })
    .await
    .map_err(|e| ApiError::internal(format!("preparing the request: {e}")))??;

    let n = st.next_id.fetch_add(1, Ordering::Relaxed);
    let prefix = match ep {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completions => "cmpl",
        Endpoint::Native => "gauge",
    };
    let mut echo = prep.echo_chain.then(|| {
        json!({
            "chain": prep.chain.describe(),
            "seed": prep.params.seed,
            "params": prep.params.to_value(),
        })
    });
    if !prep.unknown_fields.is_empty() {
        // Accepted as llama-server accepts them, but never in silence: in the log and the response.
        eprintln!(
            "gauge serve: {prefix}-{n}: unknown request fields ignored: {}",
            prep.unknown_fields.join(", ")
        );
        echo.get_or_insert_with(|| json!({}))["unknown_fields"] = json!(prep.unknown_fields);
    }
    if !prep.schema_dropped.is_empty() {
        // `lenient_schema`: the output may break these keywords, so the response says which.
        echo.get_or_insert_with(|| json!({}))["schema_dropped"] = json!(prep.schema_dropped);
    }
    let mut settings = prep.params.to_value();
    if let Value::Object(m) = &mut settings {
        m.insert("n_predict".into(), json!(prep.max_tokens));
        m.insert("stop".into(), json!(prep.stop));
        m.insert("stream".into(), json!(prep.stream));
    }
    let meta = Meta {
        ep,
        id: format!("{prefix}-{:x}-{n}", st.started),
        created: unix_now(),
        model: Arc::clone(&st.model),
        model_id: st.model_id.clone(),
        logprobs: prep.logprobs,
        include_usage: prep.include_usage,
        return_tokens: prep.return_tokens,
        echo,
        settings,
        prompt_text: prep.prompt_text,
        n_prompt: prep.prompt.len(),
        tools: prep.tools,
    };
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt: prep.prompt,
        chain: prep.chain,
        max_tokens: prep.max_tokens,
        logprobs: prep.logprobs,
        n_probs: prep.n_probs,
        stop: prep.stop,
        ignore_eos: prep.ignore_eos,
        explain: None,
        dead_end: prep.dead_end,
        events: tx,
    };
    st.engine
        .send(Msg::Job(Box::new(job)))
        .map_err(|_| ApiError::shutting_down())?;
    if prep.stream {
        Ok(stream_response(meta, rx, guard))
    } else {
        collect(meta, rx).await.map(|v| Json(v).into_response())
    }
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
