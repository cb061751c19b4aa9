//! Server settings and their limits.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use gauge_engine::{DefaultUse, Model};
use gauge_sampling::fields;
use gauge_sampling::params::SamplingParams;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Everything `gauge serve` can be told. Every limit is enforced with a 4xx in OpenAI's error
/// shape, never by dropping the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Registry name (pulled on first use) or path to a GGUF file.
    pub model: String,
    /// The model id shown by `/v1/models` and echoed in responses; default: `model`.
    pub model_alias: Option<String>,
    /// Address to bind; loopback by default.
    pub host: IpAddr,
    /// Port; 0 = any free port (tests).
    pub port: u16,
    /// When set, every endpoint but `/health` needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Context window per sequence (prompt + generated tokens).
    pub ctx_size: u32,
    /// Sequences decoded together in one batch (llama.cpp `n_seq_max`).
    pub parallel: u32,
    /// Requests allowed to wait for a free sequence; beyond `parallel + max_queue` in flight
    /// a request gets 429.
    pub max_queue: usize,
    /// Most tokens one request may generate; also the default when a request sets none.
    pub max_tokens: usize,
    /// Largest accepted request body, in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// llama.cpp threads for the one context (0 = auto: all cores but one).
    pub threads: u32,
    /// Prompt tokens evaluated per decode step across all sequences being prefilled, so one
    /// long prompt does not stall the others' next tokens for its whole prefill.
    pub prefill_chunk: usize,
    /// After SIGINT/SIGTERM, how long in-flight requests may run before they are cut.
    pub shutdown_grace: Duration,
    /// A request's head (request line and headers) must arrive within this time of the server
    /// starting to wait for it; slower clients are disconnected.
    pub header_timeout: Duration,
    /// A request's body must arrive within this time of its head (408 beyond).
    pub body_timeout: Duration,
    /// A connection with no request in progress that sends nothing for this long is closed.
    pub keep_alive_timeout: Duration,
    /// Most connections open at once (lowered to fit the process's file-descriptor limit). At
    /// the limit the longest-idle connection is closed to make room; if none is idle, 503.
    pub max_connections: usize,
    /// Browser origins allowed to call the server (CORS); `["*"]` = any; empty = no CORS headers.
    pub cors_origins: Vec<String>,
    /// Render chat prompts with the Jinja chat template (llama-server `--jinja`).
    pub jinja: bool,
    /// Chat template: with `jinja`, a Jinja template text replacing the model's; without, one of
    /// llama.cpp's built-in template names (`chatml`, `llama3`, ...).
    pub chat_template: Option<String>,
    /// Layers offloaded to the GPU (needs a GPU build; a CPU build refuses more than 0).
    pub n_gpu_layers: u32,
    /// Refuse request fields gauge does not know (by default they are accepted and reported).
    pub strict: bool,
    /// Sampling fields every request starts from (`gauge serve`'s sampling flags, as
    /// llama-server's `--temp`, `--top-k`, ... set its default generation settings): a request's
    /// own fields override them, and they override the model's GGUF defaults.
    pub sampling: Map<String, Value>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            model: gauge_engine::DEFAULT_MODEL.to_string(),
            model_alias: None,
            host: IpAddr::from([127, 0, 0, 1]),
            port: 8080,
            api_key: None,
            ctx_size: 2048,
            parallel: 4,
            max_queue: 64,
            max_tokens: 1024,
            max_body_bytes: 1 << 20,
            threads: 0,
            prefill_chunk: 256,
            shutdown_grace: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(5),
            max_connections: 4096,
            cors_origins: Vec::new(),
            jinja: false,
            chat_template: None,
            n_gpu_layers: 0,
            strict: false,
            sampling: Map::new(),
        }
    }
}

/// Most alternatives per token (`n_probs`, `top_logprobs`).
pub const MAX_N_PROBS: usize = 100;
/// Most stop strings per request.
pub const MAX_STOP: usize = 16;
/// Longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;

impl ServerConfig {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// The model id clients see.
    pub fn model_id(&self) -> String {
        if let Some(a) = &self.model_alias {
            return a.clone();
        }
        // A path shows as its file stem, a registry name as itself.
        let p = std::path::Path::new(&self.model);
        if p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            if let Some(stem) = p.file_stem() {
                return stem.to_string_lossy().into_owned();
            }
        }
        self.model.clone()
    }

    /// A request's sampling fields over the server's (`sampling`) over the model's GGUF defaults
    /// (`general.sampling.*`), each applied only where no layer above set that field, as
    /// llama-server applies them; and what became of each model default.
    pub fn sampling_request(
        &self,
        model: &Model,
        request: &Map<String, Value>,
    ) -> (Map<String, Value>, Vec<DefaultUse>) {
        let user = fields::overlay(&self.sampling, request);
        let set_by = if request.is_empty() {
            "a gauge serve flag"
        } else {
            "the request or a gauge serve flag"
        };
        model.sampling_defaults().apply(&user, set_by)
    }

    /// The settings a request without sampling fields runs with (`/props`), checked against
    /// the model: the model's defaults were checked when it loaded, the server's flags were not.
    pub fn default_params(
        &self,
        model: &Model,
    ) -> Result<(SamplingParams, Vec<DefaultUse>), String> {
        let (obj, uses) = self.sampling_request(model, &Map::new());
        let params = SamplingParams::from_value(&Value::Object(obj))
            .and_then(|p| p.validate(model.n_vocab()).map(|()| p))
            .map_err(|e| {
                format!(
                    "the default sampling settings (gauge serve's sampling flags over the \
                     model's GGUF defaults): {e}"
                )
            })?;
        Ok((params, uses))
    }

    /// Most requests in flight (decoding plus waiting).
    pub fn max_in_flight(&self) -> usize {
        self.parallel as usize + self.max_queue
    }

    /// Ranges that would otherwise fail later or inside llama.cpp.
    pub fn validate(&self) -> Result<(), ApiError> {
        let bad = |f: &str, v: String, allowed: &str| Err(ApiError::field(f, v, allowed));
        if !(1..=256).contains(&self.parallel) {
            return bad("parallel", self.parallel.to_string(), "1..=256");
        }
        if !(16..=1 << 20).contains(&self.ctx_size) {
            return bad("ctx_size", self.ctx_size.to_string(), "16..=1048576");
        }
        if self.max_tokens == 0 {
            return bad("max_tokens", "0".into(), ">= 1");
        }
        if self.max_body_bytes < 1024 {
            return bad("max_body_bytes", self.max_body_bytes.to_string(), ">= 1024");
        }
        if self.prefill_chunk == 0 {
            return bad("prefill_chunk", "0".into(), ">= 1");
        }
        if let Some(key) = &self.api_key {
            // A header carries visible ASCII only, and HTTP strips surrounding whitespace: any
            // other key could never be sent, and an empty one would mean no key at all.
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
                return bad(
                    "api_key",
                    format!("{key:?}"),
                    "a non-empty key of visible ASCII characters (no spaces)",
                );
            }
        }
        for (name, d) in [
            ("header_timeout", self.header_timeout),
            ("body_timeout", self.body_timeout),
            ("keep_alive_timeout", self.keep_alive_timeout),
        ] {
            if d.is_zero() || d > Duration::from_secs(86_400) {
                return bad(name, format!("{d:?}"), "1 ms ..= 1 day");
            }
        }
        if self.max_connections == 0 {
            return bad("max_connections", "0".into(), ">= 1");
        }
        for o in &self.cors_origins {
            if !crate::cors::valid_origin(o) {
                return bad(
                    "cors",
                    format!("{o:?}"),
                    "\"*\" or origins like https://example.com or http://localhost:3000 (scheme, host, optional port; no path)",
                );
            }
        }
        for name in [
            "n_predict",
            "max_tokens",
            "max_completion_tokens",
            "max_new_tokens",
        ] {
            // -1 (what a preset carries) is a request's "no limit of its own": neutral.
            if self
                .sampling
                .get(name)
                .is_some_and(|v| !v.is_null() && v.as_i64() != Some(-1))
            {
                return bad(
                    name,
                    self.sampling[name].to_string(),
                    "not among the default sampling fields: the server's default and limit is \
                     --n-predict / max_tokens",
                );
            }
        }
        if self.chat_template.as_deref() == Some("") {
            return bad(
                "chat_template",
                "\"\"".into(),
                "a template name or Jinja text",
            );
        }
        Ok(())
    }
}
