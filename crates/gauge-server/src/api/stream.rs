//! The server-sent event stream: chunks in each API's shape as the engine's events come, tool
//! calls held until they are complete, `[DONE]` (or llama-server's final chunk) at the end, and
//! a failure after the start sent as an `error` event.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use gauge_sampling::TokenId;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::response::{
    chat_logprob, fingerprint, native_final, native_logprob, usage, LegacyLogprobs, Meta,
};
use super::InFlight;
use crate::engine::{Event, Finish, TokenProb};
use crate::error::ApiError;
use crate::request::Endpoint;
use crate::tools::ToolMode;

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

pub(super) fn stream_response(
    meta: Meta,
    rx: UnboundedReceiver<Event>,
    guard: InFlight,
) -> Response {
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
