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

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri};
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use gauge_engine::Model;
use gauge_sampling::TokenId;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::config::ServerConfig;
use crate::engine::{EngineStats, Event, Finish, Job, Msg, TokenProb};
use crate::error::ApiError;
use crate::request::{prepare, Endpoint, Prepared};
use crate::tools::ToolMode;

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

pub(crate) fn router(st: Arc<AppState>) -> Router {
    use crate::llama_routes as llama;
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/completion", post(native))
        .route("/tokenize", post(llama::tokenize))
        .route("/detokenize", post(llama::detokenize))
        .route("/apply-template", post(llama::apply_template))
        .route("/props", get(llama::props))
        .route("/metrics", get(crate::metrics::metrics))
        .route("/explain", post(crate::explain::explain))
        .route("/", get(crate::playground::page))
        .route("/playground/{asset}", get(crate::playground::asset))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        // Outermost last: CORS (preflights answered before the key), then the drain, then the key.
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&st),
            crate::auth::auth,
        ))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&st), drain))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&st),
            crate::cors::cors,
        ))
        .with_state(st)
}

/// During the shutdown grace period every new request gets 503 `shutting_down` (and the
/// connection is closed), as the docs promise, instead of a refused connection.
async fn drain(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if st.draining.load(Ordering::Relaxed) {
        let mut r = ApiError::shutting_down().into_response();
        r.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return r;
    }
    next.run(req).await
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(uri.path())
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    if st.draining.load(Ordering::Relaxed) {
        return ApiError::shutting_down().into_response();
    }
    Json(json!({
        "status": "ok",
        "model": st.model_id,
        "parallel": st.cfg.parallel,
        "live": st.stats.live.load(Ordering::Relaxed),
        "waiting": st.stats.waiting.load(Ordering::Relaxed),
        "in_flight": st.in_flight.load(Ordering::Relaxed),
        "requests_finished": st.stats.finished.load(Ordering::Relaxed),
        "tokens_generated": st.stats.tokens.load(Ordering::Relaxed),
        "engine": {
            "steps": st.stats.steps.load(Ordering::Relaxed),
            "decode_ms": st.stats.decode_us.load(Ordering::Relaxed) as f64 / 1e3,
            "sample_ms": st.stats.sample_us.load(Ordering::Relaxed) as f64 / 1e3,
        },
    }))
    .into_response()
}

async fn models(State(st): State<Arc<AppState>>) -> Json<Value> {
    let info = st.model.info();
    Json(json!({
        "object": "list",
        "data": [{
            "id": st.model_id,
            "object": "model",
            "created": st.started,
            "owned_by": "gauge",
            "meta": {
                "n_vocab": info.n_vocab,
                "n_ctx_train": info.n_ctx_train,
                "n_params": info.n_params,
                "size": info.size_bytes,
                "ctx_size": st.cfg.ctx_size,
                "parallel": st.cfg.parallel,
                "max_tokens": st.cfg.max_tokens,
            }
        }]
    }))
}

async fn chat(State(st): State<Arc<AppState>>, body: Body) -> Response {
    generate(st, Endpoint::Chat, body).await
}

async fn completions(State(st): State<Arc<AppState>>, body: Body) -> Response {
    generate(st, Endpoint::Completions, body).await
}

async fn native(State(st): State<Arc<AppState>>, body: Body) -> Response {
    generate(st, Endpoint::Native, body).await
}

/// The body as JSON, read under the server's size limit and body timeout.
pub(crate) async fn read_json(st: &AppState, body: Body) -> Result<Value, ApiError> {
    let bytes = read_body(body, st.cfg.max_body_bytes, st.cfg.body_timeout).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(None, format!("malformed JSON: {e}")))
}

/// The body, refused with 413 as soon as it passes `limit` bytes, and with 408 when it has not
/// all arrived within `timeout` (a half-sent body would otherwise hold the request forever).
pub(crate) async fn read_body(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Vec<u8>, ApiError> {
    match tokio::time::timeout(timeout, read_body_unbounded(body, limit)).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::invalid(
            None,
            format!(
                "the request body did not arrive within {} s (the server's --body-timeout)",
                timeout.as_secs_f64()
            ),
        )
        .with_status(StatusCode::REQUEST_TIMEOUT)
        .with_code("request_timeout")),
    }
}

async fn read_body_unbounded(body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = || {
        ApiError::invalid(
            None,
            format!(
                "the request body is larger than {limit} bytes (the server's --max-body-bytes)"
            ),
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE)
        .with_code("request_too_large")
    };
    let mut out = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid(None, format!("reading the request body: {e}")))?;
        if out.len() + chunk.len() > limit {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

async fn generate(st: Arc<AppState>, ep: Endpoint, body: Body) -> Response {
    match generate_inner(st, ep, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// What a response needs besides the events.
struct Meta {
    ep: Endpoint,
    id: String,
    created: u64,
    model: Arc<Model>,
    model_id: String,
    logprobs: bool,
    include_usage: bool,
    return_tokens: bool,
    /// `"gauge": {...}` when the request asked for `echo_chain` or sent unknown fields.
    echo: Option<Value>,
    /// llama-server's `generation_settings`.
    settings: Value,
    prompt_text: String,
    n_prompt: usize,
    /// The output is a tool call (chat with tools): the response carries `tool_calls`.
    tools: Option<ToolMode>,
}

impl Meta {
    /// The id of the response's `i`-th tool call.
    fn call_id(&self, i: usize) -> String {
        let tail: String = self
            .id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        format!("call_{tail}_{i}")
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

// ---------------------------------------------------------------------------------------------
// Token rendering

/// JSON has no infinity: a banned alternative shows as OpenAI's floor, -9999.
fn lp(x: f32) -> f64 {
    if x.is_finite() {
        x as f64
    } else {
        -9999.0
    }
}

/// A token's text (control tokens shown) and bytes.
fn token_text(model: &Model, id: TokenId) -> (String, Vec<u8>) {
    let bytes = model.token_bytes_checked(id, true).unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// OpenAI chat `logprobs.content[i]`.
fn chat_logprob(model: &Model, id: TokenId, p: &TokenProb) -> Value {
    let (text, bytes) = token_text(model, id);
    let top: Vec<Value> = p
        .top
        .iter()
        .map(|&(t, l)| {
            let (tt, tb) = token_text(model, t);
            json!({"token": tt, "logprob": lp(l), "bytes": tb})
        })
        .collect();
    json!({"token": text, "logprob": lp(p.logprob), "bytes": bytes, "top_logprobs": top})
}

/// llama-server `completion_probabilities[i]`.
fn native_logprob(model: &Model, id: TokenId, p: &TokenProb) -> Value {
    let (text, bytes) = token_text(model, id);
    let top: Vec<Value> = p
        .top
        .iter()
        .map(|&(t, l)| {
            let (tt, tb) = token_text(model, t);
            json!({"id": t, "token": tt, "bytes": tb, "logprob": lp(l)})
        })
        .collect();
    json!({"id": id, "token": text, "bytes": bytes, "logprob": lp(p.logprob), "top_logprobs": top})
}

/// OpenAI legacy completions `logprobs` for a run of tokens starting at `offset` characters.
#[derive(Default)]
struct LegacyLogprobs {
    tokens: Vec<Value>,
    token_logprobs: Vec<Value>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<Value>,
}

impl LegacyLogprobs {
    fn push(&mut self, model: &Model, id: TokenId, p: &TokenProb, offset: &mut usize) {
        let (text, _) = token_text(model, id);
        let mut top = Map::new();
        for &(t, l) in &p.top {
            top.entry(token_text(model, t).0).or_insert(json!(lp(l)));
        }
        self.tokens.push(json!(text));
        self.token_logprobs.push(json!(lp(p.logprob)));
        self.top_logprobs.push(Value::Object(top));
        self.text_offset.push(json!(*offset));
        *offset += text.chars().count();
    }

    fn value(self) -> Value {
        json!({
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        })
    }
}

fn usage(f: &Finish) -> Value {
    json!({
        "prompt_tokens": f.prompt_tokens,
        "completion_tokens": f.completion_tokens,
        "total_tokens": f.prompt_tokens + f.completion_tokens,
    })
}

fn timings(f: &Finish) -> Value {
    let per_s = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    json!({
        "prompt_n": f.prompt_tokens,
        "prompt_ms": f.prompt_ms,
        "prompt_per_second": per_s(f.prompt_tokens, f.prompt_ms),
        "predicted_n": f.completion_tokens,
        "predicted_ms": f.decode_ms,
        "predicted_per_token_ms": if f.completion_tokens > 0 { f.decode_ms / f.completion_tokens as f64 } else { 0.0 },
        "predicted_per_second": per_s(f.completion_tokens, f.decode_ms),
    })
}

// ---------------------------------------------------------------------------------------------
// Non-streaming

async fn collect(meta: Meta, mut rx: UnboundedReceiver<Event>) -> Result<Value, ApiError> {
    let mut text = String::new();
    let mut tokens: Vec<TokenId> = Vec::new();
    let mut chat_lp: Vec<Value> = Vec::new();
    let mut legacy = LegacyLogprobs::default();
    let mut offset = 0usize;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token {
                id, text: t, prob, ..
            } => {
                text.push_str(&t);
                tokens.push(id);
                if let Some(p) = &prob {
                    match meta.ep {
                        Endpoint::Chat => chat_lp.push(chat_logprob(&meta.model, id, p)),
                        Endpoint::Completions => legacy.push(&meta.model, id, p, &mut offset),
                        Endpoint::Native => chat_lp.push(native_logprob(&meta.model, id, p)),
                    }
                }
            }
            Event::Done(f) => {
                text.push_str(&f.tail);
                return Ok(full_response(&meta, text, tokens, chat_lp, legacy, &f));
            }
            Event::Failed(e) => return Err(e),
        }
    }
    Err(ApiError::internal(
        "the engine stopped before the request finished",
    ))
}

fn full_response(
    meta: &Meta,
    text: String,
    tokens: Vec<TokenId>,
    lps: Vec<Value>,
    legacy: LegacyLogprobs,
    f: &Finish,
) -> Value {
    let mut v = match meta.ep {
        Endpoint::Chat => json!({
            "id": meta.id,
            "object": "chat.completion",
            "created": meta.created,
            "model": meta.model_id,
            "system_fingerprint": fingerprint(),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": if meta.logprobs { json!({"content": lps}) } else { Value::Null },
                "finish_reason": f.reason.openai(),
            }],
            "usage": usage(f),
        }),
        Endpoint::Completions => json!({
            "id": meta.id,
            "object": "text_completion",
            "created": meta.created,
            "model": meta.model_id,
            "system_fingerprint": fingerprint(),
            "choices": [{
                "index": 0,
                "text": text,
                "logprobs": if meta.logprobs { legacy.value() } else { Value::Null },
                "finish_reason": f.reason.openai(),
            }],
            "usage": usage(f),
        }),
        Endpoint::Native => {
            let mut v = native_final(meta, text, f);
            if meta.return_tokens {
                v["tokens"] = json!(tokens);
            }
            if meta.logprobs {
                v["completion_probabilities"] = json!(lps);
            }
            v
        }
    };
    if let (Endpoint::Chat, Some(mode)) = (meta.ep, &meta.tools) {
        let text = v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (message, finish) =
            crate::tools::message(mode, &text, &|i| meta.call_id(i), f.reason.openai());
        v["choices"][0]["message"] = message;
        v["choices"][0]["finish_reason"] = json!(finish);
    }
    if let Some(e) = &meta.echo {
        v["gauge"] = e.clone();
    }
    v
}

fn fingerprint() -> String {
    format!("gauge-{}", env!("CARGO_PKG_VERSION"))
}

/// llama-server's final `/completion` object (`content` is the whole text, or the tail when
/// streaming).
fn native_final(meta: &Meta, content: String, f: &Finish) -> Value {
    let word = match &f.reason {
        crate::engine::FinishReason::Stop(w) => w.clone(),
        _ => String::new(),
    };
    json!({
        "index": 0,
        "id_slot": -1,
        "content": content,
        "tokens": [],
        "stop": true,
        "model": meta.model_id,
        "tokens_predicted": f.completion_tokens,
        "tokens_evaluated": f.prompt_tokens,
        "generation_settings": meta.settings,
        "prompt": meta.prompt_text,
        "has_new_line": false,
        "truncated": false,
        "stop_type": f.reason.stop_type(),
        "stopping_word": word,
        "tokens_cached": f.prompt_tokens + f.completion_tokens,
        "timings": timings(f),
        "usage": usage(f),
    })
}

// ---------------------------------------------------------------------------------------------
// Streaming

struct StreamState {
    meta: Meta,
    rx: UnboundedReceiver<Event>,
    out: VecDeque<String>,
    done: bool,
    predicted: usize,
    offset: usize,
    /// A tool-call output so far: a "required" array is sent when complete (split into calls);
    /// a named call's arguments decide the finish reason.
    held: String,
    /// Held until the stream ends (the client read everything or went away).
    _guard: InFlight,
}

impl StreamState {
    fn chunk(&self, choice: Value) -> Value {
        let object = match self.meta.ep {
            Endpoint::Chat => "chat.completion.chunk",
            _ => "text_completion",
        };
        json!({
            "id": self.meta.id,
            "object": object,
            "created": self.meta.created,
            "model": self.meta.model_id,
            "system_fingerprint": fingerprint(),
            "choices": [choice],
        })
    }

    fn push(&mut self, v: Value) {
        self.out.push_back(v.to_string());
    }

    fn start(&mut self) {
        if self.meta.ep == Endpoint::Chat {
            // A named tool call announces the call first (OpenAI's shape); its arguments follow
            // as `tool_calls[0].function.arguments` deltas.
            let delta = match &self.meta.tools {
                Some(ToolMode::Named(name)) => json!({"role": "assistant", "content": null,
                    "tool_calls": [{"index": 0, "id": self.meta.call_id(0), "type": "function",
                                    "function": {"name": name, "arguments": ""}}]}),
                Some(ToolMode::Required) => json!({"role": "assistant", "content": null}),
                None => json!({"role": "assistant", "content": ""}),
            };
            let c = self.chunk(json!({
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": null,
            }));
            self.push(c);
        }
    }

    /// A piece of a tool-call output (chat with tools).
    fn tool_chunk(&mut self, text: &str, logprobs: Value) {
        match &self.meta.tools {
            Some(ToolMode::Named(_)) => {
                // Kept too: the finish reason depends on whether the arguments are complete.
                self.held.push_str(text);
                if text.is_empty() && logprobs.is_null() {
                    return;
                }
                let c = self.chunk(json!({
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": text}}]},
                    "logprobs": logprobs,
                    "finish_reason": null,
                }));
                self.push(c);
            }
            _ => self.held.push_str(text),
        }
    }

    /// The end of a tool-call output: a "required" array's calls, one chunk each, and the
    /// finish reason ("tool_calls", or the engine's when cut).
    fn tool_finish(&mut self, finish: &str) -> String {
        let mode = self.meta.tools.clone().expect("tool output");
        let held = std::mem::take(&mut self.held);
        let (message, reason) =
            crate::tools::message(&mode, &held, &|i| self.meta.call_id(i), finish);
        if mode == ToolMode::Required {
            let delta = match message.get("tool_calls").and_then(Value::as_array) {
                Some(calls) => calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let mut c = c.clone();
                        c["index"] = json!(i);
                        json!({"tool_calls": [c]})
                    })
                    .collect::<Vec<_>>(),
                None => vec![json!({"content": held})],
            };
            for d in delta {
                let c = self.chunk(
                    json!({"index": 0, "delta": d, "logprobs": null, "finish_reason": null}),
                );
                self.push(c);
            }
        }
        reason
    }

    fn text_chunk(&mut self, text: &str, id: Option<TokenId>, prob: Option<&TokenProb>) {
        self.predicted += usize::from(id.is_some());
        match self.meta.ep {
            Endpoint::Chat => {
                let logprobs = match (id, prob) {
                    (Some(id), Some(p)) => {
                        json!({"content": [chat_logprob(&self.meta.model, id, p)]})
                    }
                    _ => Value::Null,
                };
                if self.meta.tools.is_some() {
                    return self.tool_chunk(text, logprobs);
                }
                if text.is_empty() && logprobs.is_null() {
                    return;
                }
                let c = self.chunk(json!({
                    "index": 0,
                    "delta": {"content": text},
                    "logprobs": logprobs,
                    "finish_reason": null,
                }));
                self.push(c);
            }
            Endpoint::Completions => {
                let logprobs = match (id, prob) {
                    (Some(id), Some(p)) => {
                        let mut l = LegacyLogprobs::default();
                        l.push(&self.meta.model, id, p, &mut self.offset);
                        l.value()
                    }
                    _ => Value::Null,
                };
                if text.is_empty() && logprobs.is_null() {
                    return;
                }
                let c = self.chunk(json!({
                    "index": 0,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": null,
                }));
                self.push(c);
            }
            Endpoint::Native => {
                let mut v = json!({
                    "index": 0,
                    "content": text,
                    "tokens": id.map_or_else(Vec::new, |i| vec![i]),
                    "stop": false,
                    "id_slot": -1,
                    "tokens_predicted": self.predicted,
                    "tokens_evaluated": self.meta.n_prompt,
                });
                if let (Some(id), Some(p)) = (id, prob) {
                    v["completion_probabilities"] =
                        json!([native_logprob(&self.meta.model, id, p)]);
                }
                self.push(v);
            }
        }
    }

    fn finish(&mut self, f: Finish) {
        match self.meta.ep {
            Endpoint::Chat | Endpoint::Completions => {
                if !f.tail.is_empty() {
                    self.text_chunk(&f.tail, None, None);
                }
                let last = match self.meta.ep {
                    Endpoint::Chat => {
                        let reason = if self.meta.tools.is_some() {
                            self.tool_finish(f.reason.openai())
                        } else {
                            f.reason.openai().to_string()
                        };
                        json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": reason})
                    }
                    _ => {
                        json!({"index": 0, "text": "", "logprobs": null, "finish_reason": f.reason.openai()})
                    }
                };
                let mut c = self.chunk(last);
                if let Some(e) = &self.meta.echo {
                    c["gauge"] = e.clone();
                }
                self.push(c);
                if self.meta.include_usage {
                    let mut u = self.chunk(Value::Null);
                    u["choices"] = json!([]);
                    u["usage"] = usage(&f);
                    self.push(u);
                }
                self.out.push_back("[DONE]".into());
            }
            Endpoint::Native => {
                let mut v = native_final(&self.meta, f.tail.clone(), &f);
                if let Some(e) = &self.meta.echo {
                    v["gauge"] = e.clone();
                }
                self.push(v);
            }
        }
        self.done = true;
    }

    /// The error event, then the stream's usual end: `[DONE]`, or for `/completion` a last
    /// chunk with `"stop": true` (clients wait for it; `stop_type: "none"` as in llama-server).
    fn fail(&mut self, e: ApiError) {
        self.push(e.body());
        if self.meta.ep == Endpoint::Native {
            let last = json!({
                "index": 0,
                "id_slot": -1,
                "content": "",
                "tokens": [],
                "stop": true,
                "stop_type": "none",
                "stopping_word": "",
                "model": self.meta.model_id,
                "tokens_predicted": self.predicted,
                "tokens_evaluated": self.meta.n_prompt,
                "error": e.body()["error"],
            });
            self.push(last);
        } else {
            self.out.push_back("[DONE]".into());
        }
        self.done = true;
    }
}

fn stream_response(meta: Meta, rx: UnboundedReceiver<Event>, guard: InFlight) -> Response {
    let mut state = StreamState {
        meta,
        rx,
        out: VecDeque::new(),
        done: false,
        predicted: 0,
        offset: 0,
        held: String::new(),
        _guard: guard,
    };
    state.start();
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(data) = s.out.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), s));
            }
            if s.done {
                return None;
            }
            match s.rx.recv().await {
                Some(Event::Token { id, text, prob, .. }) => {
                    s.text_chunk(&text, Some(id), prob.as_ref())
                }
                Some(Event::Done(f)) => s.finish(f),
                Some(Event::Failed(e)) => s.fail(e),
                None => s.fail(ApiError::internal(
                    "the engine stopped before the request finished",
                )),
            }
        }
    });
    Sse::new(stream).into_response()
}
