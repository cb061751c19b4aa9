//! The engine thread: one llama.cpp context, every live request decoded in one batch per step.
//!
//! llama.cpp's context is not `Send` (nor is [`LlamaSource`]), so one OS thread creates and owns
//! it and runs the decode loop; HTTP handlers talk to it through channels:
//!
//! - **In**: a `std::sync::mpsc` channel of `Msg`. A request arrives as a `Job` with its
//!   prompt tokens and its own gauge [`Chain`], both prepared (tokenized, validated, built) by the
//!   handler on the async side, so bad requests never reach this thread.
//! - **Out**: one unbounded tokio channel of `Event`s per request. Sending never blocks, so a
//!   slow client cannot stall the batch; its unread events are bounded by its own `max_tokens`
//!   (one event per generated token plus one), which the handler capped. A closed channel means
//!   the client went away (dropped stream or connection): the sequence is freed at the next step,
//!   releasing its KV cache and its slot.
//!
//! One loop iteration (a *step*): take new messages (blocking only when idle), drop waiting jobs
//! whose client left, admit waiting jobs into free sequences (accepting their prompt into their
//! chain, as llama-server does), queue at most `prefill_chunk` prompt tokens across the sequences
//! still prefilling (oldest first) next to the one pending token of every decoding sequence, run
//! one [`LogitSource::step`], then sample every sequence whose prompt is done with its own chain,
//! send its token and queue it. A long prompt is thus cut into chunks and the other sequences keep
//! getting a token per step while it prefills.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use gauge_engine::{LlamaSource, LogitSource, Model, SeqId, Utf8Stream};
use gauge_sampling::{Chain, TokenId};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::ApiError;
use crate::logprobs::{top_logprobs, LogprobScratch};
use crate::stop::StopMatcher;

/// One generation request, ready to run.
#[derive(Debug)]
pub(crate) struct Job {
    /// Prompt tokens (non-empty, shorter than the context).
    pub prompt: Vec<TokenId>,
    /// The request's chain; the prompt is accepted into it when the job is admitted.
    pub chain: Chain,
    /// Most tokens to generate (already capped by the server's limit).
    pub max_tokens: usize,
    /// Report log-probabilities of the chosen tokens.
    pub logprobs: bool,
    /// Alternatives per token when `logprobs`.
    pub n_probs: usize,
    pub stop: Vec<String>,
    /// Do not stop at end-of-generation tokens (the chain bans them).
    pub ignore_eos: bool,
    /// `POST /explain`: record every stage of every step (module `explain`).
    pub explain: Option<Box<crate::explain::ExplainJob>>,
    /// The constraint's dead-end flag: an end forced by a dead end is an error, not a stop.
    pub dead_end: Option<gauge_grammar::DeadEnd>,
    pub events: UnboundedSender<Event>,
}

/// Messages to the engine thread.
#[derive(Debug)]
pub(crate) enum Msg {
    Job(Box<Job>),
    /// Shutdown deadline: end every request now (each gets [`ApiError::shutting_down`]).
    CutAll,
    /// Cut everything and leave the loop (the server is gone).
    Exit,
}

/// Log-probabilities of one generated token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TokenProb {
    pub logprob: f32,
    /// The most likely tokens and their log-probs, most likely first.
    pub top: Vec<(TokenId, f32)>,
}

/// Why a generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FinishReason {
    /// An end-of-generation token (not part of the output).
    Eog,
    /// `max_tokens` reached.
    Length,
    /// The sequence filled its context window.
    ContextFull,
    /// A stop string matched (not part of the output).
    Stop(String),
}

impl FinishReason {
    /// OpenAI's `finish_reason`.
    pub fn openai(&self) -> &'static str {
        match self {
            FinishReason::Eog | FinishReason::Stop(_) => "stop",
            FinishReason::Length | FinishReason::ContextFull => "length",
        }
    }

    /// llama-server's `stop_type`.
    pub fn stop_type(&self) -> &'static str {
        match self {
            FinishReason::Eog => "eos",
            FinishReason::Stop(_) => "word",
            FinishReason::Length | FinishReason::ContextFull => "limit",
        }
    }
}

/// The end of a generation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Finish {
    pub reason: FinishReason,
    /// Text released at the end (held back for a possible stop string, or an incomplete
    /// character), to append after the last token's text.
    pub tail: String,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Admission to the first row (prefill, including waits for other sequences' steps).
    pub prompt_ms: f64,
    /// First row to the end.
    pub decode_ms: f64,
}

/// What the engine tells a request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Event {
    /// A generated token and the text it released (may be empty: held back or incomplete).
    Token {
        id: TokenId,
        text: String,
        prob: Option<TokenProb>,
        /// The step explained (`POST /explain` only), as JSON.
        explain: Option<Box<serde_json::Value>>,
    },
    Done(Finish),
    Failed(ApiError),
}

/// Counters shared with `/health`.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Sequences in the batch now.
    pub live: AtomicUsize,
    /// Jobs waiting for a sequence.
    pub waiting: AtomicUsize,
    /// Requests finished (any way).
    pub finished: AtomicU64,
    /// Tokens generated in total.
    pub tokens: AtomicU64,
    /// Decode steps run (`llama_decode` batches, prefill chunks included).
    pub steps: AtomicU64,
    /// Sequences in the batch summed over steps (`/metrics`: busy slots per decode).
    pub seq_steps: AtomicU64,
    /// Time inside [`LogitSource::step`], in microseconds.
    pub decode_us: AtomicU64,
    /// Time sampling and sending tokens (chains, logprobs, text), in microseconds.
    pub sample_us: AtomicU64,
    /// `/metrics`' totals, recorded here when a sequence ends however it ends (finished, failed,
    /// cut at shutdown or left by its client), so they count what `/health` counts.
    pub metrics: crate::metrics::Metrics,
}

struct Live {
    job: Box<Job>,
    seq: SeqId,
    /// Prompt tokens queued so far.
    fed: usize,
    generated: usize,
    utf8: Utf8Stream,
    stop: StopMatcher,
    admitted: Instant,
    first_row: Option<Instant>,
}

pub(crate) struct Engine {
    model: Arc<Model>,
    src: LlamaSource,
    prefill_chunk: usize,
    stats: Arc<EngineStats>,
    waiting: VecDeque<Box<Job>>,
    live: Vec<Live>,
    cutting: bool,
    exit: bool,
    scratch: LogprobScratch,
    piece_bytes: Vec<u8>,
    piece: String,
}

impl Engine {
    pub fn new(
        model: Arc<Model>,
        src: LlamaSource,
        prefill_chunk: usize,
        stats: Arc<EngineStats>,
    ) -> Self {
        Engine {
            model,
            src,
            prefill_chunk: prefill_chunk.max(1),
            stats,
            waiting: VecDeque::new(),
            live: Vec::new(),
            cutting: false,
            exit: false,
            scratch: LogprobScratch::default(),
            piece_bytes: Vec::with_capacity(64),
            piece: String::with_capacity(64),
        }
    }

    /// Run until every sender is gone and no work is left.
    pub fn run(mut self, rx: Receiver<Msg>) {
        let mut open = true;
        loop {
            if self.live.is_empty() && self.waiting.is_empty() {
                if !open {
                    break;
                }
                match rx.recv() {
                    Ok(m) => self.handle(m),
                    Err(_) => break,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(m) => self.handle(m),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            if self.exit {
                break;
            }
            self.step();
            self.publish();
        }
        self.publish();
    }

    fn publish(&self) {
        self.stats.live.store(self.live.len(), Ordering::Relaxed);
        self.stats
            .waiting
            .store(self.waiting.len(), Ordering::Relaxed);
    }

    fn handle(&mut self, m: Msg) {
        let exit = matches!(m, Msg::Exit);
        match m {
            Msg::Job(job) if self.cutting => {
                let _ = job.events.send(Event::Failed(ApiError::shutting_down()));
                self.stats.finished.fetch_add(1, Ordering::Relaxed);
            }
            Msg::Job(job) => self.waiting.push_back(job),
            Msg::CutAll | Msg::Exit => {
                self.exit |= exit;
                self.cutting = true;
                for job in self.waiting.drain(..) {
                    let _ = job.events.send(Event::Failed(ApiError::shutting_down()));
                    self.stats.finished.fetch_add(1, Ordering::Relaxed);
                }
                for i in (0..self.live.len()).rev() {
                    self.end(i, Some(Err(ApiError::shutting_down())));
                }
            }
        }
    }

    /// Remove live sequence `i` (keeping the admission order of the rest), free its cache and
    /// tell its client how it ended (`None`: the client is gone, nobody to tell).
    fn end(&mut self, i: usize, outcome: Option<Result<Finish, ApiError>>) {
        let l = self.live.remove(i);
        let _ = self.src.free(l.seq);
        match &outcome {
            Some(Ok(f)) => self.stats.metrics.record(f),
            // Cut short: what it used of the prompt and generated until now.
            _ => {
                let now = Instant::now();
                let first = l.first_row.unwrap_or(now);
                self.stats.metrics.record_parts(
                    l.fed.min(l.job.prompt.len()),
                    l.generated,
                    (first - l.admitted).as_secs_f64() * 1e3,
                    (now - first).as_secs_f64() * 1e3,
                );
            }
        }
        match outcome {
            Some(Ok(f)) => drop(l.job.events.send(Event::Done(f))),
            Some(Err(e)) => drop(l.job.events.send(Event::Failed(e))),
            None => {}
        }
        self.stats.finished.fetch_add(1, Ordering::Relaxed);
    }

    fn finish(&mut self, i: usize, reason: FinishReason) {
        let l = &mut self.live[i];
        let now = Instant::now();
        let first = l.first_row.unwrap_or(now);
        // Bytes of an incomplete character, then anything held for a stop string.
        let mut rest = String::new();
        l.utf8.finish(&mut rest);
        let mut tail = String::new();
        let reason = match (reason, l.stop.push(&rest, &mut tail)) {
            (FinishReason::Stop(w), _) => FinishReason::Stop(w),
            (_, Some(k)) => FinishReason::Stop(l.stop.word(k).to_string()),
            (r, None) => {
                l.stop.finish(&mut tail);
                r
            }
        };
        let f = Finish {
            reason,
            tail,
            prompt_tokens: l.job.prompt.len(),
            completion_tokens: l.generated,
            prompt_ms: (first - l.admitted).as_secs_f64() * 1e3,
            decode_ms: (now - first).as_secs_f64() * 1e3,
        };
        self.end(i, Some(Ok(f)));
    }

    fn step(&mut self) {
        // Clients that left while waiting.
        let before = self.waiting.len();
        self.waiting.retain(|j| !j.events.is_closed());
        self.stats
            .finished
            .fetch_add((before - self.waiting.len()) as u64, Ordering::Relaxed);

        // Admit.
        while self.live.len() < self.src.n_seq_max() {
            let Some(mut job) = self.waiting.pop_front() else {
                break;
            };
            match self.src.new_sequence() {
                Ok(seq) => {
                    for &t in &job.prompt {
                        job.chain.accept_prompt(t);
                    }
                    if let Some(x) = job.explain.as_mut() {
                        x.accept_prompt(&job.prompt);
                    }
                    let stops = job.stop.clone();
                    self.live.push(Live {
                        job,
                        seq,
                        fed: 0,
                        generated: 0,
                        utf8: Utf8Stream::new(),
                        stop: StopMatcher::new(stops),
                        admitted: Instant::now(),
                        first_row: None,
                    });
                }
                Err(e) => {
                    let _ = job
                        .events
                        .send(Event::Failed(ApiError::internal(e.to_string())));
                    self.stats.finished.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }

        // Prompt chunks, oldest first; a client that left mid-prefill is dropped here.
        let mut budget = self.prefill_chunk;
        let mut i = 0;
        while i < self.live.len() {
            let l = &self.live[i];
            if l.fed < l.job.prompt.len() {
                if l.job.events.is_closed() {
                    self.end(i, None);
                    continue;
                }
                if budget > 0 {
                    let n = budget.min(l.job.prompt.len() - l.fed);
                    let chunk = &l.job.prompt[l.fed..l.fed + n];
                    if let Err(e) = self.src.push(l.seq, chunk) {
                        self.end(i, Some(Err(ApiError::invalid(None, e.to_string()))));
                        continue;
                    }
                    self.live[i].fed += n;
                    budget -= n;
                }
            }
            i += 1;
        }
        if self.live.is_empty() {
            return;
        }

        let n_in_step = self.live.len();
        let t0 = Instant::now();
        let stepped = self.src.step();
        let t1 = Instant::now();
        if let Err(e) = stepped {
            // The source rolled the step back; the sequences in it cannot continue.
            let msg = format!("decode failed: {e}");
            for i in (0..self.live.len()).rev() {
                self.end(i, Some(Err(ApiError::internal(msg.clone()))));
            }
            return;
        }

        // Sample every sequence whose prompt is done. Backwards, as `end` removes.
        for i in (0..self.live.len()).rev() {
            if self.live[i].fed < self.live[i].job.prompt.len() {
                continue;
            }
            self.sample_one(i);
        }
        let us = |d: std::time::Duration| d.as_micros() as u64;
        self.stats.steps.fetch_add(1, Ordering::Relaxed);
        self.stats
            .seq_steps
            .fetch_add(n_in_step as u64, Ordering::Relaxed);
        self.stats
            .decode_us
            .fetch_add(us(t1 - t0), Ordering::Relaxed);
        self.stats
            .sample_us
            .fetch_add(us(t1.elapsed()), Ordering::Relaxed);
    }

    fn sample_one(&mut self, i: usize) {
        let l = &mut self.live[i];
        if l.first_row.is_none() {
            l.first_row = Some(Instant::now());
        }
        if l.job.events.is_closed() {
            return self.end(i, None);
        }
        if l.generated >= l.job.max_tokens {
            return self.finish(i, FinishReason::Length);
        }
        let row = match self.src.logits(l.seq) {
            Ok(r) => r,
            Err(e) => return self.end(i, Some(Err(ApiError::internal(e.to_string())))),
        };
        let sampled = match l.job.explain.as_mut() {
            None => l.job.chain.sample(row).map(|t| (t, None)),
            Some(x) => x
                .step(&mut l.job.chain, row, &self.model)
                .map(|(t, v)| (t, Some(Box::new(v)))),
        };
        let (tok, explain) = match sampled {
            Ok(t) => t,
            Err(e) => return self.end(i, Some(Err(e.into()))),
        };
        let prob = if l.job.logprobs {
            let mut top = Vec::with_capacity(l.job.n_probs);
            top_logprobs(row, tok, l.job.n_probs, &mut self.scratch, &mut top)
                .map(|logprob| TokenProb { logprob, top })
        } else {
            None
        };
        if !l.job.ignore_eos && self.model.is_eog(tok) {
            if let Some(why) = l.job.dead_end.as_ref().and_then(|d| d.get()) {
                let e = ApiError::invalid(
                    None,
                    format!(
                        "the output cannot be completed under its constraint after {} tokens: \
                         {why}",
                        l.generated
                    ),
                )
                .with_code("grammar_dead_end");
                return self.end(i, Some(Err(e)));
            }
            return self.finish(i, FinishReason::Eog);
        }
        l.generated += 1;
        self.stats.tokens.fetch_add(1, Ordering::Relaxed);
        self.piece_bytes.clear();
        // The id came from a chain over this model's vocabulary, so it is in range.
        let _ = self
            .model
            .token_piece_into(tok, false, &mut self.piece_bytes);
        self.piece.clear();
        l.utf8.push(&self.piece_bytes, &mut self.piece);
        let mut text = String::new();
        let hit = l.stop.push(&self.piece, &mut text);
        let sent = l.job.events.send(Event::Token {
            id: tok,
            text,
            prob,
            explain,
        });
        if sent.is_err() {
            return self.end(i, None);
        }
        if let Some(k) = hit {
            let word = l.stop.word(k).to_string();
            return self.finish(i, FinishReason::Stop(word));
        }
        if l.generated >= l.job.max_tokens {
            return self.finish(i, FinishReason::Length);
        }
        let seq = l.seq;
        let full = self
            .src
            .seq_len(seq)
            .map_or(true, |n| n + 1 > self.src.n_ctx());
        if full {
            return self.finish(i, FinishReason::ContextFull);
        }
        if let Err(e) = self.src.push(seq, &[tok]) {
            self.end(i, Some(Err(ApiError::internal(e.to_string()))));
        }
    }
}
