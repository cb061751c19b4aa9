//! # gauge-server
//!
//! `gauge serve`: an HTTP server that speaks OpenAI's API and llama-server's native API and samples
//! every request with its own gauge [`Chain`](gauge_sampling::Chain), so existing clients pick
//! samplers per request, including gauge's shift-invariant `repeat_penalty_mode: "normalized"`.
//!
//! ## Endpoints
//!
//! | route | shape |
//! |---|---|
//! | `POST /v1/chat/completions` | OpenAI chat; `stream: true` = SSE ending in `data: [DONE]` |
//! | `POST /v1/completions` | OpenAI legacy completions (same streaming) |
//! | `POST /completion` | llama-server's native completion (`content`, `completion_probabilities`, ...) |
//! | `GET /v1/models` | the one model served |
//! | `GET /health` | `{"status": "ok", "live", "waiting", ...}`; never needs the API key |
//! | `POST /tokenize`, `POST /detokenize` | llama-server's tokenizer routes |
//! | `POST /apply-template` | `{messages}` -> `{prompt}` through the chat template (module `template`) |
//! | `GET /props` | llama-server's server properties |
//! | `GET /metrics` | Prometheus text: llama-server's `llamacpp:*` and gauge's `gauge:*` |
//! | `POST /explain` | a generation with every sampler stage recorded per step (module `explain`) |
//! | `GET /` | the playground page (assets under `/playground/`, embedded; no key needed) |
//!
//! Every sampling field of [`SamplingParams`](gauge_sampling::SamplingParams) is read per request
//! (OpenAI names, llama-server names and aliases, `samplers`, `logit_bias` in every form,
//! `preset`, `repeat_penalty_mode`), plus `stop`, `max_tokens`/`n_predict`, `seed`,
//! `logprobs`/`top_logprobs`/`n_probs`, and `echo_chain: true`, which adds
//! `"gauge": {"chain", "seed", "params"}` to the response so a client sees what ran.
//!
//! A request starts from the model's own sampling defaults (its GGUF's `general.sampling.*`,
//! read as llama.cpp reads them: module `gauge_engine::sampling_defaults`), under `gauge serve`'s
//! sampling flags ([`ServerConfig::sampling`]), under the request's fields: each default applies
//! only where no layer above set that field, as in llama-server. `/props` shows the result in
//! `default_generation_settings.params` and each model default's source under
//! `gauge.model_sampling_defaults`.
//!
//! ## Design
//!
//! - **One engine thread** ([`engine`]) owns the model's llama.cpp context (not `Send`) and decodes
//!   all live requests together, one token each per batched step, each sampled by its own chain.
//! - **The async side never waits on the engine**: requests are parsed, range-checked, tokenized
//!   and their chains built on blocking workers (module `request`); results come back through one
//!   unbounded channel per request, whose size is bounded by the request's `max_tokens`, so a slow
//!   client holds only its own tokens and never stalls the batch. A client that goes away closes
//!   its channel, and the engine frees its sequence at the next step.
//! - **Limits are 4xx in OpenAI's error shape** ([`error`]): context, `max_tokens`, concurrent
//!   requests (`parallel` decoding + `max_queue` waiting, then 429), body size (413), API key (401).
//! - **Hostile clients are bounded** ([`conn`]): header, body and keep-alive idle timeouts, and a
//!   connection limit below the file-descriptor limit that evicts the longest-idle connection.
//! - **Strict API key** (module `auth`) and opt-in **CORS** ([`cors`]).
//! - **Graceful shutdown**: on the signal, new requests get 503 (the listener stays open); in-flight
//!   requests run to their end for `shutdown_grace`, then the engine cuts the rest (an error event
//!   for streams, a 503 otherwise); the listener closes once no request is left.
//!
//! ```no_run
//! # async fn demo() -> Result<(), gauge_server::ServerError> {
//! let cfg = gauge_server::ServerConfig { port: 0, ..Default::default() };
//! let server = gauge_server::Server::bind(cfg).await?;
//! println!("listening on http://{}", server.local_addr());
//! server.run(gauge_server::shutdown_signal()).await
//! # }
//! ```

mod api;
mod auth;
pub mod config;
pub mod conn;
pub mod cors;
pub mod engine;
pub mod error;
mod explain;
mod llama_routes;
pub mod logprobs;
mod metrics;
mod playground;
mod request;
pub mod stop;
mod template;
mod tools;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use gauge_engine::{EngineError, LlamaSource, Model, ModelOptions};

pub use config::ServerConfig;
pub use error::ApiError;

use crate::api::AppState;
use crate::engine::{Engine, EngineStats, Msg};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A setting out of range.
    #[error("invalid server setting: {0}")]
    Config(String),
    /// Loading the model or creating its context failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Binding or serving failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// A bound server with its model loaded and its engine thread running.
pub struct Server {
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    engine: std::thread::JoinHandle<()>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.listener.local_addr().ok())
            .field("model", &self.state.model_id)
            .finish()
    }
}

impl Server {
    /// Load the model (pulling a registry name on first use), start the engine thread and bind the
    /// listener. Must run inside a tokio runtime.
    pub async fn bind(cfg: ServerConfig) -> Result<Server, ServerError> {
        cfg.validate()
            .map_err(|e| ServerError::Config(e.message.clone()))?;
        let opts = ModelOptions {
            n_ctx: cfg.ctx_size,
            n_threads: cfg.threads,
            n_seq_max: cfg.parallel,
            n_gpu_layers: cfg.n_gpu_layers,
            ..ModelOptions::default()
        };
        let name = cfg.model.clone();
        let model = tokio::task::spawn_blocking(move || Model::open(&name, opts))
            .await
            .map_err(|e| ServerError::Config(format!("loading the model: {e}")))??;
        template::check(&cfg, &model).map_err(ServerError::Config)?;
        // The model's GGUF sampling defaults under the server's flags: checked once here, so a
        // bad flag is a startup error, not every request's.
        let (_, uses) = cfg.default_params(&model).map_err(ServerError::Config)?;
        for line in model.sampling_defaults().describe(&uses, &cfg.model) {
            eprintln!("gauge serve: {line}");
        }
        let model = Arc::new(model);

        // The context is created on the engine thread, which owns it for its whole life.
        let stats = Arc::new(EngineStats::default());
        let (tx, rx) = std::sync::mpsc::channel::<Msg>();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (m2, s2, chunk) = (Arc::clone(&model), Arc::clone(&stats), cfg.prefill_chunk);
        let engine = std::thread::Builder::new()
            .name("gauge-engine".into())
            .spawn(move || match LlamaSource::new(Arc::clone(&m2)) {
                Ok(src) => {
                    let _ = ready_tx.send(Ok(()));
                    Engine::new(m2, src, chunk, s2).run(rx);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| ServerError::Io {
                context: "starting the engine thread".into(),
                source: e,
            })?;
        ready_rx
            .await
            .map_err(|_| ServerError::Config("the engine thread died while starting".into()))??;

        let addr = cfg.addr();
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ServerError::Io {
                context: format!("binding {addr}"),
                source: e,
            })?;
        let limits = conn::Limits {
            header_timeout: cfg.header_timeout,
            keep_alive_timeout: cfg.keep_alive_timeout,
            max_connections: conn::effective_max_connections(cfg.max_connections),
        };
        let state = Arc::new(AppState {
            model_id: cfg.model_id(),
            cfg,
            conns: Arc::new(conn::Tracker::new()),
            limits,
            model,
            engine: tx,
            stats,
            in_flight: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            started: api::unix_now(),
            grammars: Default::default(),
        });
        Ok(Server {
            listener,
            state,
            engine,
        })
    }

    /// The bound address (the real port when the config asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| self.state.cfg.addr())
    }

    /// The connection limit in effect (the configured one, lowered to fit the process's
    /// file-descriptor limit).
    pub fn max_connections(&self) -> usize {
        self.state.limits.max_connections
    }

    /// Serve until `shutdown` resolves, then shut down gracefully (see the crate docs): new
    /// requests get 503 while in-flight ones run for `shutdown_grace`, then the engine cuts them;
    /// the listener closes once no request is in progress.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let Server {
            listener,
            state,
            engine,
        } = self;
        let grace = state.cfg.shutdown_grace;
        let (drain_tx, drain_rx) = tokio::sync::watch::channel(false);
        let st = Arc::clone(&state);
        let stop = async move {
            shutdown.await;
            st.draining
                .store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = drain_tx.send(true);
            // In-flight requests get `grace` to finish; then the engine cuts them.
            let engine = st.engine.clone();
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                let _ = engine.send(Msg::CutAll);
            });
            // A client that stops reading could hold its response open forever; stop waiting
            // for it a little after the engine cut everything.
            let _ =
                tokio::time::timeout(grace + Duration::from_secs(5), st.conns.wait_idle()).await;
            drop(drain_tx);
        };
        let app = api::router(Arc::clone(&state));
        conn::accept_loop(
            &listener,
            app,
            Arc::clone(&state.conns),
            state.limits,
            drain_rx,
            stop,
        )
        .await;
        drop(listener);
        let _ = state.engine.send(Msg::Exit);
        drop(state);
        let _ = tokio::task::spawn_blocking(move || engine.join()).await;
        Ok(())
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Build a runtime, bind, call `on_ready` with the address, and serve until SIGINT/SIGTERM (what
/// `gauge serve` runs).
pub fn serve_blocking(
    cfg: ServerConfig,
    on_ready: impl FnOnce(SocketAddr, usize),
) -> Result<(), ServerError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ServerError::Io {
            context: "starting the runtime".into(),
            source: e,
        })?;
    rt.block_on(async move {
        let server = Server::bind(cfg).await?;
        on_ready(server.local_addr(), server.max_connections());
        server.run(shutdown_signal()).await
    })
}

/// A server running on its own thread and runtime, for tests, benchmarks and embedding.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), ServerError>>>,
}

impl RunningServer {
    /// Bind and serve `cfg` on a new thread; returns once the server accepts connections.
    pub fn start(cfg: ServerConfig) -> Result<RunningServer, ServerError> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gauge-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| ServerError::Io {
                        context: "starting the runtime".into(),
                        source: e,
                    })?;
                rt.block_on(async move {
                    let server = match Server::bind(cfg).await {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = addr_tx.send(Err(e.to_string()));
                            return Ok(());
                        }
                    };
                    let _ = addr_tx.send(Ok(server.local_addr()));
                    server
                        .run(async move {
                            let _ = stop_rx.await;
                        })
                        .await
                })
            })
            .map_err(|e| ServerError::Io {
                context: "starting the server thread".into(),
                source: e,
            })?;
        match addr_rx.recv() {
            Ok(Ok(addr)) => Ok(RunningServer {
                addr,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(msg)) => {
                let _ = thread.join();
                Err(ServerError::Config(msg))
            }
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(ServerError::Config(
                    "the server thread died while starting".into(),
                )),
            },
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Send the shutdown signal and wait for the server to finish.
    pub fn shutdown(mut self) -> Result<(), ServerError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ServerError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(ServerError::Config("the server thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}
