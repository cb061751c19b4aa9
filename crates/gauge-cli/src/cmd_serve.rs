//! `gauge serve`: the OpenAI- and llama-server-compatible HTTP server (crate `gauge-server`).

use crate::sampling_args::SamplingArgs;
use anyhow::{bail, Result};
use clap::Args;
use gauge_server::ServerConfig;
use std::net::IpAddr;
use std::time::Duration;

const EXAMPLES: &str = r#"Examples:
  gauge serve                                   # smollm2-135m-instruct on http://127.0.0.1:8080

  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' -d '{
    "messages": [{"role": "user", "content": "Name three colours."}],
    "max_tokens": 32, "repeat_penalty": 1.3, "repeat_penalty_mode": "normalized",
    "echo_chain": true }'

  python3 - <<'EOF'
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="unused")
  r = client.chat.completions.create(
      model="smollm2-135m-instruct", max_tokens=32,
      messages=[{"role": "user", "content": "Name three colours."}],
      extra_body={"repeat_penalty": 1.3, "repeat_penalty_mode": "normalized", "top_k": 20})
  print(r.choices[0].message.content)
  EOF

Every sampling field of a llama-server request works per request (OpenAI names, llama-server
names and aliases, samplers, logit_bias, preset, repeat_penalty_mode); see docs/server.md.
A request's fields override the sampling flags given here, which override the model's own
defaults (its GGUF's general.sampling.*, as llama-server applies them; shown by GET /props)."#;

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ServeArgs {
    /// Registry name (pulled on first use) or path to a GGUF file.
    #[arg(long, short = 'm', default_value = "smollm2-135m-instruct")]
    pub model: String,
    /// Model id shown by /v1/models and in responses (default: the model name).
    #[arg(long, short = 'a')]
    pub alias: Option<String>,
    /// Address to bind (loopback by default; use 0.0.0.0 to listen on every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health (default: the
    /// GAUGE_API_KEY environment variable, which keeps the key out of the process list).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Context window per sequence (prompt + generated tokens).
    #[arg(long, short = 'c', default_value_t = 2048)]
    pub ctx_size: u32,
    /// Requests decoded together in one batch (concurrent sequences; llama.cpp's `-np`).
    #[arg(long, visible_alias = "np", default_value_t = 4)]
    pub parallel: u32,
    /// Requests that may wait for a free sequence; beyond parallel + this, 429.
    #[arg(long, default_value_t = 64)]
    pub max_queue: usize,
    /// Most tokens one request may generate, also the default when it sets none (llama.cpp's
    /// `-n`; -1 = until the context is full).
    #[arg(
        long = "n-predict",
        short = 'n',
        visible_alias = "max-tokens",
        allow_negative_numbers = true,
        default_value_t = 1024
    )]
    pub n_predict: i64,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// llama.cpp threads (0 = all cores but one).
    #[arg(long, short = 't', default_value_t = 0)]
    pub threads: u32,
    /// Layers offloaded to the GPU (llama.cpp's `-ngl`; needs a GPU build: cargo feature `cuda`,
    /// `vulkan` or `metal`).
    #[arg(long, visible_alias = "gpu-layers", default_value_t = 0)]
    pub n_gpu_layers: u32,
    /// Prompt tokens evaluated per step while other requests decode.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Seconds in-flight requests may run after SIGINT/SIGTERM before they are cut (new requests
    /// get 503 meanwhile).
    #[arg(long, default_value_t = 10)]
    pub shutdown_grace: u64,
    /// Seconds a client may take to send a request's head (request line and headers).
    #[arg(long, default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds a client may take to send a request's body (408 beyond).
    #[arg(long, default_value_t = 30.0)]
    pub body_timeout: f64,
    /// Seconds a connection may sit idle, with no request in progress, before it is closed.
    #[arg(long, default_value_t = 5.0)]
    pub keep_alive_timeout: f64,
    /// Most open connections (lowered to fit `ulimit -n`); at the limit the longest-idle one
    /// is closed to make room.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Browser origins allowed to call the server (CORS), comma-separated, or `*` for any.
    #[arg(long, value_delimiter = ',', value_name = "ORIGINS")]
    pub cors: Vec<String>,
    /// Render chat prompts with the Jinja chat template, as llama-server's `--jinja` does.
    #[arg(long)]
    pub jinja: bool,
    /// With --jinja: a Jinja chat template replacing the model's; without: one of llama.cpp's
    /// built-in template names (chatml, llama3, gemma, ...).
    #[arg(long, value_name = "NAME|JINJA")]
    pub chat_template: Option<String>,
    /// The sampling settings every request starts from (llama-server's `--temp`, `--top-k`, ...;
    /// a request's own fields override them; they override the model's GGUF defaults,
    /// `general.sampling.*`, which apply to every field neither sets). `--strict` also refuses
    /// request fields gauge does not know.
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// `--api-key`, else `GAUGE_API_KEY`; a set but empty variable is an error, not "no key": it is
/// almost always a secret that failed to load, and serving without a key would hide that.
fn api_key(flag: Option<&str>) -> Result<Option<String>> {
    if let Some(k) = flag {
        return Ok(Some(k.to_string()));
    }
    match std::env::var("GAUGE_API_KEY") {
        Ok(k) if k.is_empty() => bail!(
            "GAUGE_API_KEY is set but empty: set it to the key, or unset it to serve without one"
        ),
        Ok(k) => Ok(Some(k)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            bail!("GAUGE_API_KEY is not valid UTF-8 (a key is visible ASCII)")
        }
    }
}

fn seconds(flag: &str, s: f64) -> Result<Duration> {
    if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
        bail!("invalid value for --{flag}: {s} (allowed: seconds in (0, 86400])");
    }
    Ok(Duration::from_secs_f64(s))
}

pub fn run(args: &ServeArgs) -> Result<()> {
    let max_tokens = match args.n_predict {
        -1 => args.ctx_size as usize,
        n if n >= 1 => n as usize,
        n => bail!(
            "invalid value for --n-predict/-n: {n} (allowed: >= 1, or -1 for the whole context; \
             the number of parallel sequences is -np/--parallel)"
        ),
    };
    let cfg = ServerConfig {
        model: args.model.clone(),
        model_alias: args.alias.clone(),
        host: args.host,
        port: args.port,
        api_key: api_key(args.api_key.as_deref())?,
        ctx_size: args.ctx_size,
        parallel: args.parallel,
        max_queue: args.max_queue,
        max_tokens,
        max_body_bytes: args.max_body_bytes,
        threads: args.threads,
        prefill_chunk: args.prefill_chunk,
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        header_timeout: seconds("header-timeout", args.header_timeout)?,
        body_timeout: seconds("body-timeout", args.body_timeout)?,
        keep_alive_timeout: seconds("keep-alive-timeout", args.keep_alive_timeout)?,
        max_connections: args.max_connections,
        cors_origins: args.cors.clone(),
        jinja: args.jinja,
        chat_template: args.chat_template.clone(),
        n_gpu_layers: args.n_gpu_layers,
        strict: args.sampling.strict,
        sampling: args.sampling.layer()?,
    };
    let model_id = cfg.model_id();
    gauge_server::serve_blocking(cfg, |addr, max_conn| {
        eprintln!(
            "gauge serve: {model_id} on http://{addr} (at most {max_conn} connections; Ctrl-C to stop)"
        );
    })?;
    eprintln!("gauge serve: stopped");
    Ok(())
}
