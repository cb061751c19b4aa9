//! Responses: what a response needs besides the events, tokens and their logprobs in each API's
//! shape, and the one JSON object of a request that does not stream.

use std::sync::Arc;

use gauge_engine::Model;
use gauge_sampling::TokenId;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::{Event, Finish, TokenProb};
use crate::error::ApiError;
use crate::request::Endpoint;
use crate::tools::ToolMode;

/// What a response needs besides the events.
pub(super) struct Meta {
    pub(super) ep: Endpoint,
    pub(super) id: String,
    pub(super) created: u64,
    pub(super) model: Arc<Model>,
    pub(super) model_id: String,
    pub(super) logprobs: bool,
    pub(super) include_usage: bool,
    pub(super) return_tokens: bool,
    /// `"gauge": {...}` when the request asked for `echo_chain` or sent unknown fields.
    pub(super) echo: Option<Value>,
    /// llama-server's `generation_settings`.
    pub(super) settings: Value,
    pub(super) prompt_text: String,
    pub(super) n_prompt: usize,
    /// The output is a tool call (chat with tools): the response carries `tool_calls`.
    pub(super) tools: Option<ToolMode>,
}

impl Meta {
    /// The id of the response's `i`-th tool call.
    pub(super) fn call_id(&self, i: usize) -> String {
        let tail: String = self
            .id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        format!("call_{tail}_{i}")
    }
}

// ---------------------------------------------------------------------------------------------
// Token rendering

/// JSON has no infinity: a banned alternative shows as OpenAI's floor, -9999.
pub(super) fn lp(x: f32) -> f64 {
    if x.is_finite() {
        x as f64
    } else {
        -9999.0
    }
}

/// A token's text (control tokens shown) and bytes.
pub(super) fn token_text(model: &Model, id: TokenId) -> (String, Vec<u8>) {
    let bytes = model.token_bytes_checked(id, true).unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// OpenAI chat `logprobs.content[i]`.
pub(super) fn chat_logprob(model: &Model, id: TokenId, p: &TokenProb) -> Value {
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
pub(super) fn native_logprob(model: &Model, id: TokenId, p: &TokenProb) -> Value {
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
pub(super) struct LegacyLogprobs {
    tokens: Vec<Value>,
    token_logprobs: Vec<Value>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<Value>,
}

impl LegacyLogprobs {
    pub(super) fn push(&mut self, model: &Model, id: TokenId, p: &TokenProb, offset: &mut usize) {
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

    pub(super) fn value(self) -> Value {
        json!({
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        })
    }
}

pub(super) fn usage(f: &Finish) -> Value {
    json!({
        "prompt_tokens": f.prompt_tokens,
        "completion_tokens": f.completion_tokens,
        "total_tokens": f.prompt_tokens + f.completion_tokens,
    })
}

pub(super) fn timings(f: &Finish) -> Value {
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

pub(super) async fn collect(
    meta: Meta,
    mut rx: UnboundedReceiver<Event>,
) -> Result<Value, ApiError> {
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

pub(super) fn full_response(
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

pub(super) fn fingerprint() -> String {
    format!("gauge-{}", env!("CARGO_PKG_VERSION"))
}

/// llama-server's final `/completion` object (`content` is the whole text, or the tail when
/// streaming).
pub(super) fn native_final(meta: &Meta, content: String, f: &Finish) -> Value {
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
