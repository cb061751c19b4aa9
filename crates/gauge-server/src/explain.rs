//! `POST /explain`: a generation where every step reports what each sampler stage did.
//!
//! The body is a `/completion` body (`prompt`, or `messages` for the chat template; every sampling
//! field; `n_predict`; `stream`) plus an optional `explain` object:
//!
//! * `top` (1..=50, default 10): candidates shown per stage;
//! * `shifts` (at most 21 finite numbers within ±1000, default −24, −20, ..., 24): for every step, the
//!   final distribution when every logit is shifted by each `c`, once with the repeat penalty in
//!   `ctrl` mode and once in `normalized` mode (the playground's slider).
//!
//! Any other key in `explain` is a 400 naming it (`explain.topp`); unknown top-level fields are
//! treated as on the generation routes: listed under `"gauge": {"unknown_fields"}` in the response
//! (the head event when streaming), refused under `--strict`.
//!
//! Each step is `gauge_sampling::explain`'s record (every stage's candidates with logit and p before
//! and after, what it removed, whether it is shift-invariant, the selection) plus `shifts`. With
//! `stream: true` the steps arrive as server-sent events as they are generated, then a last event
//! with `"done": true`; otherwise one JSON object with every step. The route sits behind the same
//! API key and CORS layers as the completion routes, and takes an in-flight place like them.
//!
//! Explaining costs a full pass per stage over the vocabulary, so `n_predict` is capped at
//! [`MAX_EXPLAIN_TOKENS`] (default 32 when the request does not say).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gauge_engine::Model;
use gauge_sampling::explain::{explain_step_top, final_under_shift, FinalView};
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::{Chain, TokenId};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::api::{read_json, AppState, InFlight};
use crate::engine::{Event, Job, Msg};
use crate::error::ApiError;
use crate::request::{prepare, Endpoint};

/// Most steps one `/explain` request may ask for.
pub const MAX_EXPLAIN_TOKENS: usize = 256;
/// Steps when the request does not say.
const DEFAULT_EXPLAIN_TOKENS: usize = 32;
const MAX_TOP: usize = 50;
const MAX_SHIFTS: usize = 21;
const MAX_ABS_SHIFT: f64 = 1000.0;
/// A model's logits typically sit O(10) above zero (SmolLM2's top logits are 15-20), so `ctrl`'s
/// sign branch only flips for shifts of that size: the default grid reaches ±24.
const DEFAULT_SHIFTS: [f32; 13] = [
    -24.0, -20.0, -16.0, -12.0, -8.0, -4.0, 0.0, 4.0, 8.0, 12.0, 16.0, 20.0, 24.0,
];

/// What the engine needs to explain a job: the view sizes and two companion chains (the request's
/// settings with the repeat penalty in `ctrl` and in `normalized` mode), kept in step with the
/// request's own chain by accepting the same tokens.
#[derive(Debug)]
pub(crate) struct ExplainJob {
    top: usize,
    shifts: Vec<f32>,
    ctrl: Chain,
    normalized: Chain,
}

impl ExplainJob {
    /// The prompt, into both companions (the engine accepts it into the request's chain).
    pub fn accept_prompt(&mut self, prompt: &[TokenId]) {
        for &t in prompt {
            self.ctrl.accept_prompt(t);
            self.normalized.accept_prompt(t);
        }
    }

    /// Sample one token with `chain`, stage by stage, accept it everywhere, and return it with
    /// the step as JSON.
    pub fn step(
        &mut self,
        chain: &mut Chain,
        row: &[f32],
        model: &Model,
    ) -> gauge_sampling::Result<(TokenId, Value)> {
        let mut step = explain_step_top(chain, row, Some(self.top))?;
        let tok = step.selected.id;
        chain.accept(tok);
        let text_of = |id: TokenId| {
            String::from_utf8_lossy(&model.token_bytes_checked(id, true).unwrap_or_default())
                .into_owned()
        };
        let mut shifts = Vec::with_capacity(self.shifts.len());
        for &c in &self.shifts {
            let ctrl = final_under_shift(&self.ctrl, row, c, self.top)?;
            let normalized = final_under_shift(&self.normalized, row, c, self.top)?;
            shifts.push(json!({
                "c": c,
                "ctrl": view(&ctrl, &text_of),
                "normalized": view(&normalized, &text_of),
            }));
        }
        // The views above ran on copies; step the companions themselves on the unshifted row so
        // their generators draw in lockstep with the request's chain, then record the token the
        // request's chain chose (the one that was generated).
        for comp in [&mut self.ctrl, &mut self.normalized] {
            comp.sample_no_accept(row)?;
            comp.accept(tok);
        }
        step.label(&text_of);
        let mut v = serde_json::to_value(&step).unwrap_or(Value::Null);
        v["shifts"] = Value::Array(shifts);
        Ok((tok, v))
    }
}

fn view(f: &FinalView, text_of: &dyn Fn(TokenId) -> String) -> Value {
    let top: Vec<Value> = f
        .top
        .iter()
        .map(|&(id, p)| json!({"id": id, "token": text_of(id), "p": p}))
        .collect();
    json!({"selected": f.selected, "selected_token": text_of(f.selected), "top": top})
}

/// The `explain` field: `(top, shifts)`.
fn parse_spec(body: &Value) -> Result<(usize, Vec<f32>), ApiError> {
    let default_shifts: Vec<f32> = DEFAULT_SHIFTS.to_vec();
    let Some(spec) = body.get("explain").filter(|v| !v.is_null()) else {
        return Ok((10, default_shifts));
    };
    if spec == &Value::Bool(true) {
        return Ok((10, default_shifts));
    }
    let Some(o) = spec.as_object() else {
        return Err(ApiError::field(
            "explain",
            spec,
            "an object {\"top\", \"shifts\"} or true",
        ));
    };
    // The route's own object: a misspelt key (`topp`) would be dropped in silence, so every key
    // must be one of these.
    if let Some(k) = o.keys().find(|k| !["top", "shifts"].contains(&k.as_str())) {
        return Err(ApiError::invalid(
            Some(&format!("explain.{k}")),
            format!("unknown field `explain.{k}` (allowed: `top` 1..={MAX_TOP}, `shifts`)"),
        )
        .with_code("unknown_field"));
    }
    let top = match o.get("top").filter(|v| !v.is_null()) {
        None => 10,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_TOP as u64).contains(&n) => n as usize,
            _ => return Err(ApiError::field("explain.top", v, &format!("1..={MAX_TOP}"))),
        },
    };
    let shifts = match o.get("shifts").filter(|v| !v.is_null()) {
        None => default_shifts,
        Some(v) => {
            let allowed =
                format!("an array of at most {MAX_SHIFTS} numbers within ±{MAX_ABS_SHIFT}");
            let arr = v
                .as_array()
                .filter(|a| a.len() <= MAX_SHIFTS)
                .ok_or_else(|| ApiError::field("explain.shifts", v, &allowed))?;
            arr.iter()
                .map(|x| match x.as_f64() {
                    Some(c) if c.abs() <= MAX_ABS_SHIFT => Ok(c as f32),
                    _ => Err(ApiError::field("explain.shifts", x, &allowed)),
                })
                .collect::<Result<Vec<f32>, ApiError>>()?
        }
    };
    Ok((top, shifts))
}

/// `POST /explain`.
pub(crate) async fn explain(State(st): State<Arc<AppState>>, body: Body) -> Response {
    match explain_inner(st, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn explain_inner(st: Arc<AppState>, body: Body) -> Result<Response, ApiError> {
    if st.draining.load(Ordering::Relaxed) {
        return Err(ApiError::shutting_down());
    }
    let mut value = read_json(&st, body).await?;
    let (top, shifts) = parse_spec(&value)?;
    // `explain` is this route's own field: not a sampling field for `prepare`.
    if let Some(o) = value.as_object_mut() {
        o.remove("explain");
    }
    let ep = if value.get("messages").is_some() {
        Endpoint::Chat
    } else {
        Endpoint::Native
    };
    // The length under any of its names (the table's), capped; absent or negative: the route's
    // default. A value that is not a number is left for `prepare` to refuse by the name sent.
    let length_names = || {
        gauge_sampling::fields::field("n_predict")
            .into_iter()
            .flat_map(|f| f.names())
    };
    let asked = length_names().find_map(|f| {
        value
            .get(f)
            .filter(|v| !v.is_null())
            .map(|v| (f, v.as_f64(), v.clone()))
    });
    match asked {
        Some((f, Some(n), v)) if n > MAX_EXPLAIN_TOKENS as f64 => {
            return Err(ApiError::field(
                f,
                v,
                &format!("0..={MAX_EXPLAIN_TOKENS} for /explain (every step is recorded)"),
            ))
        }
        Some((_, Some(n), _)) if n >= 0.0 => {}
        Some((_, None, _)) => {}
        _ => {
            if let Some(o) = value.as_object_mut() {
                for f in length_names() {
                    o.remove(f);
                }
                o.insert("n_predict".into(), json!(DEFAULT_EXPLAIN_TOKENS));
            }
        }
    }
    let guard = InFlight::acquire(&st)?;
    let st2 = Arc::clone(&st);
    let (prep, ctrl, normalized) = tokio::task::spawn_blocking(move || {
        // The companions below are rebuilt from the sampling fields alone, so a grammar would
        // constrain the request's chain but not them: refused rather than half applied.
        if let Some(c) = value.as_object().and_then(|o| {
            gauge_grammar::ConstraintRequest::from_request(o)
                .ok()
                .flatten()
        }) {
            return Err(ApiError::invalid(
                Some(&c.field),
                format!(
                    "`{}`: /explain does not apply grammar constraints; ask /completion or \
                     /v1/chat/completions for constrained output",
                    c.field
                ),
            ));
        }
        // A tool call is a constraint too (crate::tools): refused the same way.
        let tool_call = ep == Endpoint::Chat
            && value
                .as_object()
                .and_then(|o| crate::tools::plan(o).ok().flatten())
                .is_some();
        if tool_call {
            return Err(ApiError::invalid(
                Some("tool_choice"),
                "`tool_choice`: /explain does not apply the tool-call constraint; ask \
                 /v1/chat/completions for tool calls",
            ));
        }
        let prep = prepare(ep, &value, &st2.model, &st2.cfg, &st2.grammars)?;
        let companion = |mode: PenaltyMode| {
            let mut p = prep.params.clone();
            p.repeat_penalty_mode = mode;
            Chain::from_params(&p, st2.model.n_vocab(), Some(&*st2.model))
        };
        let ctrl = companion(PenaltyMode::Ctrl)?;
        let normalized = companion(PenaltyMode::Normalized)?;
        Ok::<_, ApiError>((prep, ctrl, normalized))
    })
    .await
    .map_err(|e| ApiError::internal(format!("preparing the request: {e}")))??;

    let mut head = json!({
        "chain": prep.chain.describe(),
        "shift_invariant": gauge_sampling::gauge::is_shift_invariant(&prep.chain),
        "params": prep.params.to_value(),
        "prompt_tokens": prep.prompt.len(),
    });
    if !prep.unknown_fields.is_empty() {
        // As on the generation routes: accepted, but logged and listed (refused under --strict,
        // by `prepare`).
        eprintln!(
            "gauge serve: /explain: unknown request fields ignored: {}",
            prep.unknown_fields.join(", ")
        );
        head["gauge"] = json!({ "unknown_fields": prep.unknown_fields });
    }
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt: prep.prompt,
        chain: prep.chain,
        max_tokens: prep.max_tokens,
        logprobs: false,
        n_probs: 0,
        stop: prep.stop,
        ignore_eos: prep.ignore_eos,
        dead_end: prep.dead_end,
        explain: Some(Box::new(ExplainJob {
            top,
            shifts,
            ctrl,
            normalized,
        })),
        events: tx,
    };
    st.engine
        .send(Msg::Job(Box::new(job)))
        .map_err(|_| ApiError::shutting_down())?;
    if prep.stream {
        return Ok(stream(head, rx, guard));
    }
    let mut steps = Vec::new();
    let mut text = String::new();
    let mut rx = rx;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token {
                id,
                text: t,
                explain,
                ..
            } => {
                text.push_str(&t);
                steps.push(step_json(id, &t, explain));
            }
            Event::Done(f) => {
                text.push_str(&f.tail);
                let mut v = head;
                v["steps"] = Value::Array(steps);
                v["text"] = json!(text);
                v["stop_type"] = json!(f.reason.stop_type());
                drop(guard);
                return Ok(Json(v).into_response());
            }
            Event::Failed(e) => return Err(e),
        }
    }
    Err(ApiError::internal(
        "the engine stopped before the request finished",
    ))
}

fn step_json(id: TokenId, text: &str, explain: Option<Box<Value>>) -> Value {
    let mut v = explain.map_or(Value::Null, |b| *b);
    if !v.is_object() {
        v = json!({});
    }
    v["id"] = json!(id);
    v["text"] = json!(text);
    v
}

struct StreamState {
    rx: UnboundedReceiver<Event>,
    out: VecDeque<String>,
    head: Option<Value>,
    index: usize,
    done: bool,
    _guard: InFlight,
}

/// Server-sent events: `{"head": {...}}` first, one `{"index", "step"}` per token, then `{"done": true, ...}`.
fn stream(head: Value, rx: UnboundedReceiver<Event>, guard: InFlight) -> Response {
    let state = StreamState {
        rx,
        out: VecDeque::new(),
        head: Some(head),
        index: 0,
        done: false,
        _guard: guard,
    };
    let s = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(h) = s.head.take() {
                s.out.push_back(json!({ "head": h }).to_string());
            }
            if let Some(data) = s.out.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), s));
            }
            if s.done {
                return None;
            }
            let ev = s.rx.recv().await;
            s.out.push_back(match ev {
                Some(Event::Token {
                    id, text, explain, ..
                }) => {
                    s.index += 1;
                    json!({"index": s.index - 1, "step": step_json(id, &text, explain)}).to_string()
                }
                Some(Event::Done(f)) => {
                    s.done = true;
                    json!({"done": true, "tail": f.tail, "stop_type": f.reason.stop_type(),
                           "tokens_predicted": f.completion_tokens})
                    .to_string()
                }
                Some(Event::Failed(e)) => {
                    s.done = true;
                    json!({"error": {"message": e.message, "code": e.code}}).to_string()
                }
                None => {
                    s.done = true;
                    json!({"error": {"message": "the engine stopped before the request finished"}})
                        .to_string()
                }
            });
        }
    });
    Sse::new(s).into_response()
}
