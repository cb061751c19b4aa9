//! The routes: every endpoint and its handler, the drain during shutdown, health and models.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Uri;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{generate, AppState};
use crate::error::ApiError;
use crate::request::Endpoint;

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
