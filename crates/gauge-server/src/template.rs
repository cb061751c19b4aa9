//! Chat prompts: llama.cpp's built-in templates, or a Jinja template (`--jinja`) rendered with
//! `minijinja` the way llama-server renders it.
//!
//! - Default: the model's template through `llama_chat_apply_template` (llama.cpp recognises
//!   the template by its markers and formats with its own C++ code).
//! - `--chat-template NAME` without `--jinja`: one of llama.cpp's built-in templates by name
//!   (`chatml`, `llama3`, `gemma`, ...).
//! - `--jinja`: the model's Jinja template (or `--chat-template TEXT`) is rendered with
//!   `messages`, `add_generation_prompt = true`, `bos_token` and `eos_token`, Python's string
//!   methods (`.strip()`, `.startswith()`, ...), `raise_exception` and `strftime_now`, which is
//!   what Hugging Face templates expect. A template that raises (e.g. "roles must alternate")
//!   is a 400 naming `messages`.

use gauge_engine::Model;
use minijinja::{context, Environment, Error, ErrorKind};
use serde_json::json;

use crate::config::ServerConfig;
use crate::error::ApiError;

/// The Jinja source in use: `--chat-template` text, else the model's.
fn jinja_source(cfg: &ServerConfig, model: &Model) -> Option<String> {
    cfg.chat_template
        .clone()
        .or_else(|| model.chat_template_text())
}

/// The template text `/props` shows: `--chat-template` if given (a name or Jinja text), else the
/// model's.
pub(crate) fn shown_template(cfg: &ServerConfig, model: &Model) -> String {
    jinja_source(cfg, model).unwrap_or_default()
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", |fmt: String| strftime_now(&fmt));
    env
}

/// Render `messages` (role, content) with the Jinja template `src`.
pub(crate) fn render_jinja(
    src: &str,
    model: &Model,
    messages: &[(&str, &str)],
) -> Result<String, Error> {
    let env = environment();
    let msgs: Vec<_> = messages
        .iter()
        .map(|(r, c)| json!({"role": r, "content": c}))
        .collect();
    let (bos, eos) = model.bos_eos_text();
    env.render_str(
        src,
        context! {
            messages => msgs,
            add_generation_prompt => true,
            bos_token => bos,
            eos_token => eos,
        },
    )
}

/// The prompt for `messages`, as the server's settings say.
pub(crate) fn chat_prompt(
    cfg: &ServerConfig,
    model: &Model,
    messages: &[(&str, &str)],
) -> Result<String, ApiError> {
    let from_engine = |e: gauge_engine::EngineError| {
        let mut e = ApiError::from(e);
        e.param = Some("messages".into());
        e
    };
    if cfg.jinja {
        let src = jinja_source(cfg, model).ok_or_else(|| {
            ApiError::internal("--jinja is set but there is no chat template".to_string())
        })?;
        return render_jinja(&src, model, messages).map_err(|e| {
            ApiError::invalid(
                Some("messages"),
                format!("the chat template (Jinja) failed for these `messages`: {e:#}"),
            )
        });
    }
    match &cfg.chat_template {
        Some(name) => model
            .apply_chat_messages_named(name, messages)
            .map_err(from_engine),
        None => model.apply_chat_messages(messages).map_err(from_engine),
    }
}

/// At startup: the configured template exists and works on a two-turn conversation, so a bad
/// `--chat-template` stops the server instead of failing every chat request.
pub(crate) fn check(cfg: &ServerConfig, model: &Model) -> Result<(), String> {
    let sample = [("system", "You are terse."), ("user", "Hello")];
    if cfg.jinja {
        let src = jinja_source(cfg, model)
            .ok_or("--jinja: the model has no chat template; give one with --chat-template TEXT")?;
        return render_jinja(&src, model, &sample)
            .map(drop)
            .map_err(|e| format!("--jinja: the chat template does not render: {e:#}"));
    }
    if let Some(name) = &cfg.chat_template {
        return model
            .apply_chat_messages_named(name, &sample)
            .map(drop)
            .map_err(|e| {
                format!(
                    "--chat-template {name:?} is not one of llama.cpp's built-in templates ({e}); \
                     add --jinja to use it as a Jinja template"
                )
            });
    }
    Ok(())
}

/// Python's `strftime` on the current UTC time, for the directives chat templates use.
fn strftime_now(fmt: &str) -> Result<String, Error> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Ok(strftime(fmt, secs))
}

fn strftime(fmt: &str, unix: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = unix.div_euclid(86_400);
    let rem = unix.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem % 3600 / 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn strftime_matches_known_dates() {
        // 2024-07-26 12:34:56 UTC and the epoch.
        assert_eq!(
            strftime(
                "%d %b %Y %H:%M:%S",
                1_722_000_000 - 1_722_000_000 % 86_400 + 45_296
            ),
            "26 Jul 2024 12:34:56"
        );
        assert_eq!(strftime("%Y-%m-%d %B %%", 0), "1970-01-01 January %");
        // A leap day.
        assert_eq!(strftime("%Y-%m-%d", 951_782_400), "2000-02-29");
    }
}
