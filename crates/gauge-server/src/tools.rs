//! OpenAI `tools` / `tool_choice` on `/v1/chat/completions`, the way vLLM serves them without a
//! tool parser: a tool call is a JSON-schema constrained decode.
//!
//! - `tool_choice: {"type": "function", "function": {"name": N}}`: the output is constrained to
//!   N's `parameters` schema and becomes `message.tool_calls[0].function.arguments`.
//! - `"required"`: the output is constrained to vLLM's array `[{"name": ..., "parameters":
//!   {...}}, ...]` (at least one call; exactly one when `parallel_tool_calls` is false), each
//!   item one of the tools with its own parameters schema; each item becomes a tool call.
//! - `"none"`: the tools are ignored (no description, no constraint), as if not sent.
//! - `"auto"` (OpenAI's default when tools are sent): the model decides between text and a call,
//!   which needs the model's own tool-call format and a parser for it. gauge renders chat with
//!   `(role, content)` templates only, so it refuses `auto` by name instead of guessing.
//!
//! The model learns the tools from a short system message gauge writes (merged into the first
//! system message if there is one): the function(s), their descriptions and parameter schemas,
//! and what to reply. History with tool calls is rendered as text turns ([`History`]), since
//! the templates take `(role, content)` pairs only.

use gauge_grammar::{ConstraintRequest, ConstraintSpec, GrammarError};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// How a request with tools is answered.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ToolMode {
    /// One call of this function; the output is its arguments.
    Named(String),
    /// The output is an array of `{"name", "parameters"}` calls.
    Required,
}

/// What the request's tools change: the constraint, the system text, the response shape.
#[derive(Clone, Debug)]
pub(crate) struct ToolPlan {
    pub mode: ToolMode,
    pub constraint: ConstraintRequest,
    /// Tool-level constraints to compile one by one when the combined one fails, so the error
    /// names the tool (`tools[i].function.parameters`).
    pub per_tool: Vec<ConstraintRequest>,
    pub system_text: String,
}

struct Tool {
    name: String,
    description: String,
    parameters: Value,
}

fn get<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

fn is_tool_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `tools`: `[{"type": "function", "function": {"name", "description"?, "parameters"?}}]`.
fn parse_tools(v: &Value) -> Result<Vec<Tool>, ApiError> {
    let arr = v.as_array().ok_or_else(|| {
        ApiError::field(
            "tools",
            v,
            "an array of {\"type\": \"function\", \"function\": {...}}",
        )
    })?;
    let mut tools: Vec<Tool> = Vec::with_capacity(arr.len());
    for (i, t) in arr.iter().enumerate() {
        let ty = t.get("type").and_then(Value::as_str);
        if ty != Some("function") {
            return Err(ApiError::field(
                &format!("tools[{i}].type"),
                t.get("type").unwrap_or(&Value::Null),
                "\"function\" (the only tool type gauge serves)",
            ));
        }
        let f = t
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                ApiError::field(
                    &format!("tools[{i}].function"),
                    t.get("function").unwrap_or(&Value::Null),
                    "an object with a `name`",
                )
            })?;
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| is_tool_name(n))
            .ok_or_else(|| {
                ApiError::field(
                    &format!("tools[{i}].function.name"),
                    f.get("name").unwrap_or(&Value::Null),
                    "1 to 64 characters of a-z, A-Z, 0-9, `_` and `-`",
                )
            })?;
        if let Some(j) = tools.iter().position(|x| x.name == name) {
            return Err(ApiError::invalid(
                Some(&format!("tools[{i}].function.name")),
                format!("`tools[{i}].function.name` = {name:?} is already the name of tools[{j}]"),
            ));
        }
        let description = match get(f, "description") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(ApiError::field(
                    &format!("tools[{i}].function.description"),
                    v,
                    "a string",
                ))
            }
        };
        // vLLM: absent parameters are an empty object schema.
        let parameters = match get(f, "parameters") {
            None => json!({"type": "object", "properties": {}}),
            Some(p @ (Value::Object(_) | Value::Bool(_))) => p.clone(),
            Some(p) => {
                return Err(ApiError::field(
                    &format!("tools[{i}].function.parameters"),
                    p,
                    "a JSON Schema object",
                ))
            }
        };
        tools.push(Tool {
            name: name.to_string(),
            description,
            parameters,
        });
    }
    Ok(tools)
}

fn describe(t: &Tool) -> String {
    let mut s = format!("- `{}`", t.name);
    if !t.description.is_empty() {
        s.push_str(": ");
        s.push_str(&t.description);
    }
    s.push_str(&format!("\n  Parameters (JSON Schema): {}", t.parameters));
    s
}

const AUTO_REFUSED: &str = "gauge cannot let the model choose between text and a tool call (that \
    needs the model's own tool-call format and a parser for it); send `tool_choice` \"required\" \
    or {\"type\": \"function\", \"function\": {\"name\": ...}}, or \"none\"";

/// The request's tool plan (chat only). `None` when there are no tools or `tool_choice` is
/// "none".
pub(crate) fn plan(o: &Map<String, Value>) -> Result<Option<ToolPlan>, ApiError> {
    let tools = match get(o, "tools") {
        None => Vec::new(),
        Some(v) => parse_tools(v)?,
    };
    let choice = get(o, "tool_choice");
    if tools.is_empty() {
        return match choice {
            None => Ok(None),
            Some(Value::String(s)) if s == "none" => Ok(None),
            Some(v) => Err(ApiError::field(
                "tool_choice",
                v,
                "no `tool_choice` (or \"none\") without `tools`: send the tools it chooses from",
            )),
        };
    }
    let parallel = match get(o, "parallel_tool_calls") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(ApiError::field("parallel_tool_calls", v, "true or false")),
    };
    let allowed =
        "\"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
    match choice {
        None => Err(ApiError::invalid(
            Some("tool_choice"),
            format!("`tool_choice` defaults to \"auto\" when `tools` are sent, and {AUTO_REFUSED}"),
        )
        .with_code("unsupported_value")),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(None),
            "auto" => Err(ApiError::invalid(
                Some("tool_choice"),
                format!("`tool_choice` = \"auto\": {AUTO_REFUSED}"),
            )
            .with_code("unsupported_value")),
            "required" => required(&tools, parallel).map(Some),
            _ => Err(ApiError::field("tool_choice", s, allowed)),
        },
        Some(Value::Object(c)) => {
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| c.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| ApiError::field("tool_choice", Value::Object(c.clone()), allowed))?;
            let Some(i) = tools.iter().position(|t| t.name == name) else {
                let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                return Err(ApiError::field(
                    "tool_choice.function.name",
                    name,
                    &format!("the name of one of `tools`: {names:?}"),
                ));
            };
            Ok(Some(named(&tools[i], i)))
        }
        Some(v) => Err(ApiError::field("tool_choice", v, allowed)),
    }
}

fn tool_constraint(t: &Tool, i: usize) -> ConstraintRequest {
    ConstraintRequest {
        spec: ConstraintSpec::JsonSchema(t.parameters.clone()),
        field: format!("tools[{i}].function.parameters"),
        lenient: false,
    }
}

fn named(t: &Tool, i: usize) -> ToolPlan {
    let system_text = format!(
        "You are calling the function `{}`. Reply with only its arguments: one JSON object \
         that matches its parameters schema.\n\n{}",
        t.name,
        describe(t)
    );
    ToolPlan {
        mode: ToolMode::Named(t.name.clone()),
        constraint: tool_constraint(t, i),
        per_tool: Vec::new(),
        system_text,
    }
}

/// vLLM's schema for `"required"`: an array of `{"name": <one tool>, "parameters": <its
/// schema>}`, at least one item, at most one without parallel calls. Each tool's `$defs` move to
/// the top, as vLLM moves them, so `#/$defs/...` references still resolve; two tools defining
/// the same name differently are refused.
fn required(tools: &[Tool], parallel: bool) -> Result<ToolPlan, ApiError> {
    let mut defs = Map::new();
    let mut items: Vec<Value> = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let mut params = t.parameters.clone();
        if let Some(d) = params.as_object_mut().and_then(|o| o.remove("$defs")) {
            let field = format!("tools[{i}].function.parameters.$defs");
            let d = d
                .as_object()
                .ok_or_else(|| ApiError::field(&field, &d, "an object of schemas"))?;
            for (k, v) in d {
                if defs.get(k).is_some_and(|old| old != v) {
                    return Err(ApiError::invalid(
                        Some(&field),
                        format!(
                            "`{field}.{k}` differs from another tool's `$defs.{k}`; rename one"
                        ),
                    ));
                }
                defs.insert(k.clone(), v.clone());
            }
        }
        items.push(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [t.name]},
                "parameters": params,
            },
            "required": ["name", "parameters"],
            "additionalProperties": false,
        }));
    }
    let mut schema = json!({"type": "array", "minItems": 1, "items": {"anyOf": items}});
    if !parallel {
        schema["maxItems"] = json!(1);
    }
    if !defs.is_empty() {
        schema["$defs"] = Value::Object(defs);
    }
    let list: Vec<String> = tools.iter().map(describe).collect();
    let shape = if parallel {
        "a JSON array of one or more calls"
    } else {
        "a JSON array with exactly one call"
    };
    let system_text = format!(
        "You can call these functions. Reply with only {shape}, each call \
         {{\"name\": <function name>, \"parameters\": <its arguments>}}.\n\n{}",
        list.join("\n")
    );
    Ok(ToolPlan {
        mode: ToolMode::Required,
        constraint: ConstraintRequest {
            spec: ConstraintSpec::JsonSchema(schema),
            field: "tools".into(),
            lenient: false,
        },
        per_tool: tools
            .iter()
            .enumerate()
            .map(|(i, t)| tool_constraint(t, i))
            .collect(),
        system_text,
    })
}

/// Tool-call history as text turns, since the templates render `(role, content)` only:
/// an assistant's `tool_calls` become its text, the calls as the JSON array gauge asks for
/// (`[{"name": ..., "parameters": {...}}]`, after any content); a `role: "tool"` result becomes
/// a user turn `Result of <name>: <content>` (the name found from `tool_call_id` among earlier
/// calls). Returns the template role and text for message `i`.
#[derive(Default)]
pub(crate) struct History {
    /// Call ids seen so far and their function names.
    names: Vec<(String, String)>,
}

impl History {
    pub(crate) fn turn(
        &mut self,
        m: &Value,
        i: usize,
        role: &str,
        content: String,
    ) -> Result<(String, String), ApiError> {
        if m.get("function_call").is_some_and(|v| !v.is_null()) {
            return Err(ApiError::unsupported(
                &format!("messages[{i}].function_call"),
                format!(
                    "`messages[{i}].function_call` (the legacy form) is not supported: send \
                     `tool_calls`"
                ),
            ));
        }
        match role {
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str);
                let name = id.and_then(|id| {
                    self.names
                        .iter()
                        .rev()
                        .find(|(c, _)| c == id)
                        .map(|(_, n)| n.clone())
                });
                let text = match name {
                    Some(n) => format!("Result of `{n}`: {content}"),
                    None => format!("Function result: {content}"),
                };
                Ok(("user".into(), text))
            }
            "assistant" => {
                let calls = match m.get("tool_calls") {
                    None | Some(Value::Null) => return Ok((role.into(), content)),
                    Some(Value::Array(a)) => a,
                    Some(v) => {
                        return Err(ApiError::field(
                            &format!("messages[{i}].tool_calls"),
                            v,
                            "an array of {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                        ))
                    }
                };
                let mut shown: Vec<String> = Vec::with_capacity(calls.len());
                for (j, c) in calls.iter().enumerate() {
                    let field = format!("messages[{i}].tool_calls[{j}].function");
                    let f = c.get("function").and_then(Value::as_object);
                    let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
                    let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str);
                    let (Some(name), Some(args)) = (name, args) else {
                        return Err(ApiError::field(
                            &field,
                            c.get("function").unwrap_or(&Value::Null),
                            "{\"name\": <string>, \"arguments\": <JSON text>}",
                        ));
                    };
                    // Arguments are JSON text: shown compact, as written when a number is
                    // beyond f64's range (still JSON), or as a string when they are not JSON.
                    let params = match serde_json::from_str::<Value>(args) {
                        Ok(v) => v.to_string(),
                        Err(_) => match serde_json::from_str::<&RawValue>(args) {
                            Ok(raw) => raw.get().trim().to_string(),
                            Err(_) => Value::String(args.into()).to_string(),
                        },
                    };
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        self.names.push((id.to_string(), name.to_string()));
                    }
                    let name = Value::String(name.into());
                    shown.push(format!("{{\"name\":{name},\"parameters\":{params}}}"));
                }
                let calls_text = format!("[{}]", shown.join(","));
                let text = if content.is_empty() {
                    calls_text
                } else {
                    format!("{content}\n{calls_text}")
                };
                Ok((role.into(), text))
            }
            _ => Ok((role.into(), content)),
        }
    }
}

/// A tool plan's constraint conflicts with a constraint field in the same request.
pub(crate) fn conflict(other: &ConstraintRequest) -> GrammarError {
    GrammarError::Conflict {
        first: "tool_choice".into(),
        second: other.field.clone(),
    }
}

/// The assistant message and finish reason for a tool-call output. `finish` is the engine's
/// OpenAI finish reason: "tool_calls" replaces it only when every call's arguments are complete
/// JSON, so a call cut by the length limit (or a `stop` string) keeps "length" (or "stop").
pub(crate) fn message(
    mode: &ToolMode,
    text: &str,
    call_id: &dyn Fn(usize) -> String,
    finish: &str,
) -> (Value, String) {
    let reason = |ok: bool| {
        if finish == "length" || !ok {
            finish.to_string()
        } else {
            "tool_calls".to_string()
        }
    };
    match calls(mode, text) {
        Some(calls) => {
            let complete = calls
                .iter()
                .all(|(_, a)| serde_json::from_str::<&RawValue>(a).is_ok());
            let tool_calls: Vec<Value> = calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": call_id(i), "type": "function",
                           "function": {"name": name, "arguments": args}})
                })
                .collect();
            (
                json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
                reason(complete),
            )
        }
        // A "required" array cut before it closed cannot be split into calls: the text as it is.
        None => (json!({"role": "assistant", "content": text}), reason(false)),
    }
}

/// The calls in an output: (name, arguments JSON text). A named call is the text itself (cut or
/// not, as OpenAI returns a cut call); a "required" array must parse.
pub(crate) fn calls(mode: &ToolMode, text: &str) -> Option<Vec<(String, String)>> {
    match mode {
        ToolMode::Named(name) => Some(vec![(name.clone(), text.trim().to_string())]),
        ToolMode::Required => {
            // Parsed for syntax only (`RawValue`), so the arguments are the model's text: a
            // number beyond f64's range is JSON too, and no digit is rewritten.
            #[derive(serde::Deserialize)]
            struct Call<'a> {
                name: String,
                #[serde(borrow)]
                parameters: &'a RawValue,
            }
            let calls: Vec<Call<'_>> = serde_json::from_str(text).ok()?;
            Some(
                calls
                    .into_iter()
                    .map(|c| (c.name, c.parameters.get().to_string()))
                    .collect(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A number past f64's range is valid JSON (a grammar allows it): the call is complete and
    /// its digits reach the client unchanged, both ways.
    #[test]
    fn arguments_keep_numbers_beyond_f64() {
        let big = format!("1{}", "0".repeat(400));
        let text = format!("[{{\"name\": \"f\", \"parameters\": {{\"n\": {big}}}}}]");
        let (msg, finish) = message(&ToolMode::Required, &text, &|i| format!("c{i}"), "stop");
        assert_eq!(finish, "tool_calls", "{msg}");
        let args = msg["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        assert_eq!(args, format!("{{\"n\": {big}}}"));
        let (_, named) = message(
            &ToolMode::Named("f".into()),
            args,
            &|i| format!("c{i}"),
            "stop",
        );
        assert_eq!(named, "tool_calls");

        let turn = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "f", "arguments": args}}]});
        let (_, shown) = History::default()
            .turn(&turn, 0, "assistant", String::new())
            .unwrap();
        assert_eq!(shown, format!("[{{\"name\":\"f\",\"parameters\":{args}}}]"));
        // Arguments that are not JSON are shown as the string they are.
        let turn = json!({"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]});
        let (_, shown) = History::default()
            .turn(&turn, 0, "assistant", String::new())
            .unwrap();
        assert_eq!(shown, "[{\"name\":\"f\",\"parameters\":\"{oops\"}]");
    }
}
