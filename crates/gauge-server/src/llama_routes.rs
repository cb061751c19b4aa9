//! llama-server's utility routes: `POST /tokenize`, `POST /detokenize`, `POST /apply-template`
//! and `GET /props`, in llama-server's shapes (its README, "API Endpoints").
//!
//! Token text is rendered with special tokens shown (`<|im_end|>` as its text), as llama-server's
//! `common_token_to_piece` does; a piece that is not valid UTF-8 on its own (half a character)
//! is sent as its bytes.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gauge_engine::Model;
use gauge_sampling::params::SamplingParams;
use gauge_sampling::TokenId;
use serde_json::{json, Map, Value};

use crate::api::{read_json, AppState};
use crate::error::ApiError;

fn object(v: &Value) -> Result<&Map<String, Value>, ApiError> {
    v.as_object()
        .ok_or_else(|| ApiError::invalid(None, "the request body must be a JSON object"))
}

fn flag(o: &Map<String, Value>, name: &str, default: bool) -> Result<bool, ApiError> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::field(name, v, "true or false")),
    }
}

/// A token's text with special tokens shown: a string, or its bytes if not valid UTF-8.
fn piece(model: &Model, id: TokenId) -> Value {
    let bytes = model.token_bytes_checked(id, true).unwrap_or_default();
    match String::from_utf8(bytes) {
        Ok(s) => json!(s),
        Err(e) => json!(e.into_bytes()),
    }
}

/// Run blocking model work (tokenizing a large text) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("worker failed: {e}")))?
}

fn respond(r: Result<Value, ApiError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `{content, add_special = false, parse_special = true, with_pieces = false}` -> `{tokens}`.
pub(crate) async fn tokenize(State(st): State<Arc<AppState>>, body: Body) -> Response {
    respond(tokenize_inner(st, body).await)
}

async fn tokenize_inner(st: Arc<AppState>, body: Body) -> Result<Value, ApiError> {
    let v = read_json(&st, body).await?;
    blocking(move || {
        let o = object(&v)?;
        let content = match o.get("content") {
            Some(Value::String(s)) => s,
            None | Some(Value::Null) => {
                return Err(ApiError::invalid(Some("content"), "`content` is required"))
            }
            Some(other) => return Err(ApiError::field("content", other, "a string")),
        };
        let add_special = flag(o, "add_special", false)?;
        let parse_special = flag(o, "parse_special", true)?;
        let with_pieces = flag(o, "with_pieces", false)?;
        let toks = st
            .model
            .tokenize(content, add_special, parse_special)
            .map_err(|e| {
                let mut e = ApiError::from(e);
                e.param = Some("content".into());
                e
            })?;
        let tokens: Vec<Value> = if with_pieces {
            toks.iter()
                .map(|&t| json!({"id": t, "piece": piece(&st.model, t)}))
                .collect()
        } else {
            toks.iter().map(|&t| json!(t)).collect()
        };
        Ok(json!({ "tokens": tokens }))
    })
    .await
}

/// `{tokens: [ids]}` -> `{content}` (special tokens shown, as llama-server does).
pub(crate) async fn detokenize(State(st): State<Arc<AppState>>, body: Body) -> Response {
    respond(detokenize_inner(st, body).await)
}

async fn detokenize_inner(st: Arc<AppState>, body: Body) -> Result<Value, ApiError> {
    let v = read_json(&st, body).await?;
    let o = object(&v)?;
    let n_vocab = st.model.n_vocab();
    let allowed = format!("token ids in 0..{n_vocab}");
    let ids = match o.get("tokens") {
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(Some("tokens"), "`tokens` is required"))
        }
        Some(other) => return Err(ApiError::field("tokens", other, "an array of token ids")),
    };
    let mut bytes = Vec::new();
    for (i, t) in ids.iter().enumerate() {
        let id = t
            .as_i64()
            .filter(|&x| x >= 0 && (x as usize) < n_vocab)
            .ok_or_else(|| ApiError::field(&format!("tokens[{i}]"), t, &allowed))?;
        st.model
            .token_piece_into(id as TokenId, true, &mut bytes)
            .map_err(ApiError::from)?;
    }
    Ok(json!({ "content": String::from_utf8_lossy(&bytes) }))
}

/// `{messages}` -> `{prompt}`: the chat template applied, nothing generated.
pub(crate) async fn apply_template(State(st): State<Arc<AppState>>, body: Body) -> Response {
    respond(apply_template_inner(st, body).await)
}

async fn apply_template_inner(st: Arc<AppState>, body: Body) -> Result<Value, ApiError> {
    let v = read_json(&st, body).await?;
    blocking(move || {
        let o = object(&v)?;
        // With `tools`, the prompt chat would use: the tools' system message included.
        let plan = crate::tools::plan(o)?;
        let tool_text = plan.as_ref().map(|p| p.system_text.as_str());
        let prompt = crate::request::chat_prompt(o, &st.model, &st.cfg, tool_text)?;
        Ok(json!({ "prompt": prompt }))
    })
    .await
}

/// The server's properties: default generation settings, slots, model, chat template.
pub(crate) async fn props(State(st): State<Arc<AppState>>) -> Json<Value> {
    // What a request without sampling fields runs with: the model's GGUF defaults under the
    // server's flags (checked when the server started, so the fallback is never taken).
    let (defaults, uses) = st
        .cfg
        .default_params(&st.model)
        .unwrap_or_else(|_| (SamplingParams::default(), Vec::new()));
    let mut params = defaults.to_value();
    let model_defaults = st.model.sampling_defaults();
    if let Value::Object(m) = &mut params {
        m.insert("n_predict".into(), json!(st.cfg.max_tokens));
        m.insert("max_tokens".into(), json!(st.cfg.max_tokens));
        m.insert("stop".into(), json!([]));
        m.insert("stream".into(), json!(false));
    }
    let (bos, eos) = st.model.bos_eos_text();
    Json(json!({
        "default_generation_settings": {
            "id": 0,
            "id_task": -1,
            "n_ctx": st.cfg.ctx_size,
            "speculative": false,
            "is_processing": st.stats.live.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "params": params,
            "prompt": "",
        },
        "total_slots": st.cfg.parallel,
        "model_alias": st.model_id,
        "model_path": st.model.path().display().to_string(),
        "chat_template": crate::template::shown_template(&st.cfg, &st.model),
        "jinja": st.cfg.jinja,
        "bos_token": bos,
        "eos_token": eos,
        "modalities": {"vision": false, "audio": false},
        "build_info": format!("gauge-{}", env!("CARGO_PKG_VERSION")),
        "gpu_backend": gauge_engine::GPU_BACKEND,
        "is_sleeping": false,
        // gauge's addition: where each of the model's own defaults came from and whether it
        // applies (a gauge serve flag overrides it), with the repeat-penalty note.
        "gauge": {
            "model_sampling_defaults": uses,
            "notes": model_defaults.penalty_note(&st.cfg.model).into_iter().collect::<Vec<_>>(),
            "warnings": model_defaults.warnings,
            // The CPU features llama.cpp was built for: its kernels, and so near-ties, follow them.
            "llama_cpp_cpu": gauge_engine::llama_cpp_cpu_features(),
        },
    }))
}
