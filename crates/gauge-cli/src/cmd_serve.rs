//! `gauge serve`: the OpenAI- and llama-server-compatible HTTP server (crate `gauge-server`).

use anyhow::Result;
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
names and aliases, samplers, logit_bias, preset, repeat_penalty_mode); see docs/server.md."#;

#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ServeArgs {
    /// Registry name (pulled on first use) or path to a GGUF file.
    #[arg(long, short = 'm', default_value = "smollm2-135m-instruct")]
    pub model: String,
    /// Model id shown by /v1/models and in responses (default: the model name).
    #[arg(long)]
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
    /// Requests decoded together in one batch (concurrent sequences).
    #[arg(long, short = 'n', visible_alias = "np", default_value_t = 4)]
    pub parallel: u32,
    /// Requests that may wait for a free sequence; beyond parallel + this, 429.
    #[arg(long, default_value_t = 64)]
    pub max_queue: usize,
    /// Most tokens one request may generate (also the default when it sets none).
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: usize,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// llama.cpp threads (0 = all cores but one).
    #[arg(long, short = 't', default_value_t = 0)]
    pub threads: u32,
    /// Prompt tokens evaluated per step while other requests decode.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Seconds in-flight requests may run after SIGINT/SIGTERM before they are cut.
    #[arg(long, default_value_t = 10)]
    pub shutdown_grace: u64,
    /// Refuse request fields gauge does not know (by default they are accepted and listed in the
    /// response under `gauge.unknown_fields`).
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: &ServeArgs) -> Result<()> {
    let cfg = ServerConfig {
        model: args.model.clone(),
        model_alias: args.alias.clone(),
        host: args.host,
        port: args.port,
        api_key: args.api_key.clone().or_else(|| {
            std::env::var("GAUGE_API_KEY")
                .ok()
                .filter(|k| !k.is_empty())
        }),
        ctx_size: args.ctx_size,
        parallel: args.parallel,
        max_queue: args.max_queue,
        max_tokens: args.max_tokens,
        max_body_bytes: args.max_body_bytes,
        threads: args.threads,
        prefill_chunk: args.prefill_chunk,
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        strict: args.strict,
    };
    let model_id = cfg.model_id();
    gauge_server::serve_blocking(cfg, |addr| {
        eprintln!("gauge serve: {model_id} on http://{addr} (Ctrl-C to stop)");
    })?;
    eprintln!("gauge serve: stopped");
    Ok(())
}
