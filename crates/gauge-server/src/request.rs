//! Turning a request body into a [`Job`]: prompt tokens, the request's own chain, limits.
//!
//! The three generation endpoints share one path. Sampling fields of every name and form (OpenAI,
//! llama-server, aliases, `samplers`, `logit_bias` forms, `preset`, gauge's
//! `repeat_penalty_mode`) are parsed and range-checked by
//! [`SamplingParams`](gauge_sampling::SamplingParams) and built into a gauge [`Chain`] here, on a
//! blocking worker, so the engine thread only ever sees requests that are known to run. Server
//! limits (context, `max_tokens`, alternatives per token, stop strings) are checked here too, each
//! error naming the field the client used.
//!
//! Two choices worth knowing:
//! - **A random seed is drawn here, once**, when the request leaves `seed` at -1 (llama.cpp's
//!   default): every stage of the chain then uses it, and the response can report it
//!   (`"gauge": {"seed"}` with `echo_chain`), so any run can be replayed. llama.cpp draws one per
//!   stage; both are random, but only one is reproducible.
//! - **Features gauge does not serve are refused, not ignored**: `n` > 1, `best_of`, `echo`,
//!   `suffix`, `tool_choice: "auto"` and tools outside chat come back as 400 naming the field,
//!   because silently dropping a feature the client relies on is worse than an error.
//! - **Constraints** (`response_format` `json_object` / `json_schema`, llama-server's `json_schema`
//!   and `grammar`, vLLM's `guided_*`) are compiled here by `gauge-grammar` against the model's
//!   grammar vocabulary (built on the first constrained request, then shared) and put in front of
//!   the chain; a schema the engine cannot compile is a 400 naming the field path. Chat's
//!   `tools` with a named or `"required"` `tool_choice` become a JSON-schema constraint too
//!   ([`crate::tools`]).

use gauge_engine::Model;
use gauge_grammar::{
    constrain, ConstraintRequest, GrammarError, GrammarStage, GrammarVocab, LENIENT_FIELD,
};
use gauge_sampling::fields;
use gauge_sampling::params::SamplingParams;
use gauge_sampling::{rng, Chain, TokenId};
use serde_json::{Map, Value};

use crate::config::{ServerConfig, MAX_STOP, MAX_STOP_BYTES};
use crate::error::ApiError;

/// Which request format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `POST /v1/chat/completions`
    Chat,
    /// `POST /v1/completions`
    Completions,
    /// llama-server's `POST /completion`
    Native,
}

/// A request ready for the engine, plus what the response needs to know.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub prompt: Vec<TokenId>,
    pub chain: Chain,
    pub max_tokens: usize,
    pub logprobs: bool,
    pub n_probs: usize,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`: a last chunk with `usage`.
    pub include_usage: bool,
    /// Echo the chain (`"gauge": {...}`) in the response.
    pub echo_chain: bool,
    /// llama-server `return_tokens`: token ids in `/completion` responses.
    pub return_tokens: bool,
    /// The effective parameters (seed resolved), for `generation_settings` and the echo.
    pub params: SamplingParams,
    /// The prompt text after the chat template (for `/completion`'s `prompt`).
    pub prompt_text: String,
    /// Request fields gauge does not know: accepted (as llama-server does), reported back.
    pub unknown_fields: Vec<String>,
    /// Schema keywords a `lenient_schema` request let the grammar drop (name, path, why).
    pub schema_dropped: Vec<String>,
    /// The constraint's dead-end flag, when there is a constraint.
    pub dead_end: Option<gauge_grammar::DeadEnd>,
    /// The output is a tool call (chat `tools` with a named or "required" `tool_choice`).
    pub tools: Option<crate::tools::ToolMode>,
}

/// The server's own request fields (the sampling ones are in [`gauge_sampling::fields`]).
pub(crate) const SERVER_FIELDS: &[&str] = &[
    "messages",
    "prompt",
    "stream",
    "stream_options",
    "stop",
    "n",
    "n_cmpl",
    "best_of",
    "echo",
    "suffix",
    "tools",
    "functions",
    "tool_choice",
    "parallel_tool_calls",
    "grammar",
    "json_schema",
    "response_format",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    LENIENT_FIELD,
    "post_sampling_probs",
    "echo_chain",
    "return_tokens",
    "n_keep",
    "t_max_predict_ms",
    "t_max_prompt_ms",
];

fn obj(body: &Value) -> Result<&Map<String, Value>, ApiError> {
    body.as_object()
        .ok_or_else(|| ApiError::invalid(None, "the request body must be a JSON object"))
}

/// A present, non-null field.
fn get<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

fn get_bool(o: &Map<String, Value>, name: &str) -> Result<Option<bool>, ApiError> {
    match get(o, name) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::field(name, v, "true or false")),
    }
}

/// Refuse what gauge does not serve (see the module docs).
fn refuse_unsupported(ep: Endpoint, o: &Map<String, Value>) -> Result<(), ApiError> {
    for name in ["n", "n_cmpl", "best_of"] {
        if let Some(v) = get(o, name) {
            if v.as_i64() != Some(1) {
                return Err(ApiError::unsupported(
                    name,
                    format!("`{name}` = {v}: gauge serves one choice per request (allowed: 1)"),
                ));
            }
        }
    }
    if get_bool(o, "echo")? == Some(true) {
        return Err(ApiError::unsupported(
            "echo",
            "`echo` is not supported (the prompt is not repeated in the completion)",
        ));
    }
    if get(o, "suffix").is_some_and(|v| v.as_str() != Some("")) {
        return Err(ApiError::unsupported(
            "suffix",
            "`suffix` (infill) is not supported",
        ));
    }
    for name in ["tools", "functions"] {
        if name == "tools" && ep == Endpoint::Chat {
            continue;
        }
        if get(o, name).is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty())) {
            let why = if name == "tools" {
                "is served on /v1/chat/completions only"
            } else {
                "(the legacy form) is not supported: send `tools` and `tool_choice`"
            };
            return Err(ApiError::unsupported(
                name,
                format!("`{name}` (tool calling) {why}"),
            ));
        }
    }
    for name in ["t_max_predict_ms", "t_max_prompt_ms"] {
        if get(o, name).is_some_and(|v| v.as_f64().is_none_or(|x| x > 0.0)) {
            return Err(ApiError::unsupported(
                name,
                format!(
                    "`{name}` (a time limit) is not supported: limit generation with `max_tokens`"
                ),
            ));
        }
    }
    if get_bool(o, "post_sampling_probs")? == Some(true) {
        return Err(ApiError::unsupported(
            "post_sampling_probs",
            "`post_sampling_probs` is not supported: probabilities are the model's (softmax of the raw logits)",
        ));
    }
    Ok(())
}

/// A body with both `prompt` and `messages` is refused: whichever one the route reads, the other
/// would be dropped in silence. The error's `param` is the one this route does not read.
fn refuse_prompt_and_messages(ep: Endpoint, o: &Map<String, Value>) -> Result<(), ApiError> {
    if get(o, "prompt").is_none() || get(o, "messages").is_none() {
        return Ok(());
    }
    let (extra, used) = match ep {
        Endpoint::Chat => ("prompt", "messages"),
        _ => ("messages", "prompt"),
    };
    Err(ApiError::invalid(
        Some(extra),
        format!(
            "`prompt` and `messages` are both set, and this route would read only `{used}`: \
             send `messages` (chat template) or `prompt` (plain text or token ids), not both"
        ),
    )
    .with_code("conflicting_fields"))
}

/// `stop`: a string or an array of non-empty strings (llama-server: an array).
fn parse_stop(o: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let allowed =
        "a non-empty string or an array of at most 16 non-empty strings of at most 256 bytes";
    let stops: Vec<String> = match get(o, "stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::field("stop", x, allowed))
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(ApiError::field("stop", v, allowed)),
    };
    if stops.len() > MAX_STOP {
        return Err(ApiError::field(
            "stop",
            format!("{} strings", stops.len()),
            allowed,
        ));
    }
    if let Some(s) = stops
        .iter()
        .find(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
    {
        return Err(ApiError::field("stop", format!("{s:?}"), allowed));
    }
    Ok(stops)
}

/// The text of a chat message's `content`: a string, or an array of `{"type": "text"}` parts.
fn message_content(v: Option<&Value>, i: usize) -> Result<String, ApiError> {
    let field = format!("messages[{i}].content");
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => out.push_str(t),
                    _ => {
                        return Err(ApiError::unsupported(
                            &field,
                            format!("`{field}`: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported"),
                        ))
                    }
                }
            }
            Ok(out)
        }
        Some(v) => Err(ApiError::field(
            &field,
            v,
            "a string or an array of text parts",
        )),
    }
}

/// `messages` through the chat template (assistant turn opened; see [`crate::template`]).
pub(crate) fn chat_prompt(
    o: &Map<String, Value>,
    model: &Model,
    cfg: &ServerConfig,
    tool_text: Option<&str>,
) -> Result<String, ApiError> {
    let msgs = match get(o, "messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(v) => {
            return Err(ApiError::field(
                "messages",
                v,
                "a non-empty array of {role, content} objects",
            ))
        }
        None => {
            return Err(ApiError::invalid(
                Some("messages"),
                "`messages` is required",
            ))
        }
    };
    let roles = "\"system\", \"developer\", \"user\", \"assistant\" or \"tool\"";
    let mut pairs: Vec<(String, String)> = Vec::with_capacity(msgs.len());
    let mut history = crate::tools::History::default();
    for (i, m) in msgs.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| {
            ApiError::field(
                &format!("messages[{i}].role"),
                m.get("role").unwrap_or(&Value::Null),
                roles,
            )
        })?;
        let role = match role {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            "tool" => "tool",
            other => {
                return Err(ApiError::field(
                    &format!("messages[{i}].role"),
                    format!("{other:?}"),
                    roles,
                ))
            }
        };
        let content = message_content(m.get("content"), i)?;
        pairs.push(history.turn(m, i, role, content)?);
    }
    // The tools, described in the first system message (see crate::tools).
    if let Some(t) = tool_text {
        match pairs.first_mut() {
            Some((r, c)) if r == "system" => {
                if !c.is_empty() {
                    c.push_str("\n\n");
                }
                c.push_str(t);
            }
            _ => pairs.insert(0, ("system".into(), t.to_string())),
        }
    }
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(r, c)| (r.as_str(), c.as_str()))
        .collect();
    crate::template::chat_prompt(cfg, model, &refs)
}

/// `prompt` of the completion endpoints: a string, or token ids; OpenAI's one-element arrays of
/// either are accepted too.
fn plain_prompt(o: &Map<String, Value>, model: &Model) -> Result<(String, Vec<TokenId>), ApiError> {
    let allowed = "a string, an array of token ids, or a one-element array of either";
    let bad = |v: &Value| ApiError::field("prompt", v, allowed);
    let mut v = get(o, "prompt")
        .ok_or_else(|| ApiError::invalid(Some("prompt"), "`prompt` is required"))?;
    if let Value::Array(a) = v {
        if a.len() == 1 && (a[0].is_string() || a[0].is_array()) {
            v = &a[0];
        }
    }
    match v {
        Value::String(s) => {
            let toks = model.tokenize_prompt(s).map_err(|e| {
                let mut e = ApiError::from(e);
                e.param = Some("prompt".into());
                e
            })?;
            Ok((s.clone(), toks))
        }
        Value::Array(a) => {
            let n_vocab = model.n_vocab();
            let toks = a
                .iter()
                .map(|t| {
                    t.as_i64()
                        .filter(|&i| i >= 0 && (i as usize) < n_vocab)
                        .map(|i| i as TokenId)
                        .ok_or_else(|| {
                            ApiError::field(
                                "prompt",
                                t,
                                &format!("token ids in 0..{n_vocab} ({allowed})"),
                            )
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let text = model.detokenize(&toks).unwrap_or_default();
            Ok((text, toks))
        }
        other => Err(bad(other)),
    }
}

/// The first present name of an aliased field (for error messages).
fn used_name<'a>(o: &Map<String, Value>, names: &[&'a str]) -> &'a str {
    names
        .iter()
        .copied()
        .find(|n| get(o, n).is_some())
        .unwrap_or(names[0])
}

/// The model's grammar vocabulary, built on first use (a pass over the vocabulary) and shared by
/// every constrained request after it.
#[derive(Debug, Default)]
pub(crate) struct GrammarCache(std::sync::OnceLock<Result<GrammarVocab, GrammarError>>);

impl GrammarCache {
    fn get(&self, model: &Model) -> Result<&GrammarVocab, ApiError> {
        self.0
            .get_or_init(|| {
                GrammarVocab::from_token_bytes(&model.grammar_token_bytes(), &model.grammar_eos())
            })
            .as_ref()
            .map_err(|e| ApiError::internal(e.to_string()))
    }
}

impl From<GrammarError> for ApiError {
    fn from(e: GrammarError) -> Self {
        let field = e.field().map(str::to_string);
        let code = match e {
            GrammarError::Compile { .. } | GrammarError::Unenforced { .. } => "invalid_schema",
            GrammarError::TooLarge { .. } => "constraint_too_large",
            _ => "invalid_value",
        };
        ApiError::invalid(field.as_deref(), e.to_string()).with_code(code)
    }
}

/// Parse, check and build everything a request needs. Blocking (tokenizer, chain build, grammar
/// compilation).
pub(crate) fn prepare(
    ep: Endpoint,
    body: &Value,
    model: &Model,
    cfg: &ServerConfig,
    grammars: &GrammarCache,
) -> Result<Prepared, ApiError> {
    let o = obj(body)?;
    refuse_unsupported(ep, o)?;
    refuse_prompt_and_messages(ep, o)?;
    let mut constraint = ConstraintRequest::from_request(o)?;
    let mut tool_plan = if ep == Endpoint::Chat {
        crate::tools::plan(o)?
    } else {
        None
    };
    // `lenient_schema` (its type checked by `from_request`) holds for tool schemas too.
    let lenient = matches!(o.get(LENIENT_FIELD), Some(Value::Bool(true)));
    if let Some(p) = &mut tool_plan {
        if let Some(c) = &constraint {
            return Err(crate::tools::conflict(c).into());
        }
        p.constraint.lenient = lenient;
        for t in &mut p.per_tool {
            t.lenient = lenient;
        }
        constraint = Some(p.constraint.clone());
    }
    // The sampling fields without the constraint ones (vLLM's `guided_*` are refused there),
    // over gauge serve's sampling flags and the model's GGUF defaults (`config`).
    let (sampling_body, _) = cfg.sampling_request(model, &ConstraintRequest::strip(o));
    let sampling_body = Value::Object(sampling_body);
    let body = &sampling_body;
    let unknown_fields = fields::unknown_fields(o, SERVER_FIELDS);
    if cfg.strict && !unknown_fields.is_empty() {
        let names: Vec<String> = unknown_fields.iter().map(|f| format!("`{f}`")).collect();
        return Err(ApiError::unsupported(
            &unknown_fields[0],
            format!(
                "unknown field{} {} (the server runs with --strict; see docs/server.md for the \
                 accepted fields)",
                if names.len() > 1 { "s" } else { "" },
                names.join(", ")
            ),
        )
        .with_code("unknown_field"));
    }
    crate::logprobs::check_counts(o)?;
    let mut params = SamplingParams::from_value(body)?;
    params
        .validate(model.n_vocab())
        .map_err(|e| fields::name_as_sent(e, body))?;

    // Server limits, each naming the field the client used.
    let max_tokens = if params.n_predict < 0 {
        cfg.max_tokens
    } else {
        let n = params.n_predict as usize;
        if n > cfg.max_tokens {
            let f = used_name(o, &["n_predict", "max_tokens", "max_completion_tokens"]);
            return Err(ApiError::field(
                f,
                n,
                &format!(
                    "0..={} (the server's --max-tokens), or -1 for that limit",
                    cfg.max_tokens
                ),
            )
            .with_code("max_tokens_exceeded"));
        }
        n
    };
    let n_probs = params.n_probs as usize;
    let logprobs = n_probs > 0
        || matches!(
            get(o, "logprobs"),
            Some(Value::Bool(true)) | Some(Value::Number(_))
        );
    let stop = parse_stop(o)?;
    let stream = get_bool(o, "stream")?.unwrap_or(false);
    let include_usage = match get(o, "stream_options") {
        None => false,
        Some(Value::Object(so)) => get_bool(so, "include_usage")
            .map_err(|_| {
                ApiError::field(
                    "stream_options.include_usage",
                    so.get("include_usage").unwrap_or(&Value::Null),
                    "true or false",
                )
            })?
            .unwrap_or(false),
        Some(v) => return Err(ApiError::field("stream_options", v, "an object")),
    };
    let echo_chain = get_bool(o, "echo_chain")?.unwrap_or(false);
    let return_tokens = get_bool(o, "return_tokens")?.unwrap_or(false);

    let (prompt_text, prompt, prompt_field) = match ep {
        Endpoint::Chat => {
            let text = chat_prompt(
                o,
                model,
                cfg,
                tool_plan.as_ref().map(|p| p.system_text.as_str()),
            )?;
            let toks = model.tokenize_prompt(&text).map_err(|e| {
                let mut e = ApiError::from(e);
                e.param = Some("messages".into());
                e
            })?;
            (text, toks, "messages")
        }
        Endpoint::Completions | Endpoint::Native => {
            let (t, toks) = plain_prompt(o, model)?;
            (t, toks, "prompt")
        }
    };
    if prompt.is_empty() {
        return Err(ApiError::invalid(
            Some(prompt_field),
            format!("`{prompt_field}` is empty: it has no tokens"),
        ));
    }
    let n_ctx = cfg.ctx_size as usize;
    if prompt.len() >= n_ctx {
        return Err(ApiError::invalid(
            Some(prompt_field),
            format!(
                "the prompt is {} tokens but the context holds {n_ctx} (the server's --ctx-size), \
                 which must leave room for at least one generated token",
                prompt.len()
            ),
        )
        .with_code("context_length_exceeded"));
    }

    if params.seed == rng::DEFAULT_SEED {
        params.seed = rng::resolve_seed(params.seed);
    }
    let mut chain = Chain::from_params(&params, model.n_vocab(), Some(model))?;
    let mut schema_dropped = Vec::new();
    let mut dead_end = None;
    if let Some(c) = &constraint {
        let vocab = grammars.get(model)?;
        // "required": each tool's parameters compile alone first, so a tool whose schema
        // cannot be satisfied is refused by name. Inside the combined `anyOf` it would compile
        // and leave the output at a dead end.
        if let Some(p) = &tool_plan {
            for t in &p.per_tool {
                GrammarStage::compile(t, vocab, &params)?;
            }
        }
        let stage = GrammarStage::compile(c, vocab, &params)?;
        schema_dropped = stage
            .state()
            .dropped()
            .iter()
            .map(|u| u.to_string())
            .collect();
        dead_end = Some(stage.dead_end());
        chain = constrain(chain, stage);
    }
    Ok(Prepared {
        prompt,
        chain,
        max_tokens,
        logprobs,
        n_probs,
        stop,
        ignore_eos: params.ignore_eos,
        stream,
        include_usage,
        echo_chain,
        return_tokens,
        params,
        prompt_text,
        unknown_fields,
        schema_dropped,
        dead_end,
        tools: tool_plan.map(|p| p.mode),
    })
}
