//! Measurement library behind `gauge bench sampling` and `gauge bench decode`: gauge's chain and
//! llama.cpp's own chain ([`ReferenceChain`]) timed side by side in the same process, on the same
//! rows, in the same run.
//!
//! # Sampling ([`run_sampling_bench`])
//!
//! The unit of work is one token: from a logit row to the accepted token. For llama.cpp that is
//! what `llama_sampler_sample` does after it reads the logits (fill a `llama_token_data` array for
//! the whole vocabulary, `llama_sampler_apply`, take the selected entry, accept it); for gauge it
//! is [`Chain::sample`], which includes gauge's own row check (llama.cpp makes none; the rows are
//! checked once for it with [`ValidRow`], outside the timing).
//!
//! - **Rows.** [`RowSet::synthetic`]: 8 rows of N(0, 3²) logits from
//!   [`gauge_sampling::synth::normal_rows`] (splitmix64 seed 42), cycled; [`RowSet::from_model`]:
//!   rows captured from a real model (greedy continuation of fixed prompts), at its own width.
//! - **Chains.** [`gauge_sampling::synth::bench_scenarios`] (`greedy…` is `logits -> greedy` on both
//!   sides; llama.cpp runs the ctrl penalty on its side of the normalized chains, having no other),
//!   and the `one-read` row: one read of the row ([`gauge_sampling::simd::one_read`]), the floor
//!   a chain that reads the whole row is measured against. Both chains accept the same 64-token history ([`gauge_sampling::synth::bench_history`])
//!   before anything is timed, so penalties and DRY have work to do.
//! - **DRY breakers.** llama.cpp takes breakers only as strings expanded against a vocabulary, so
//!   the reference uses the given model's vocabulary with llama.cpp's default breakers
//!   (`"\n" ":" "\"" "*"`), whatever the row width. gauge gets the same breakers as token ids
//!   (expanded by gauge's own `expand_string_breakers` on that vocabulary, entries with an id
//!   `>= n_vocab` dropped: no history token can match them), so both sides do the same work and
//!   can be compared token for token. The scenario's own id breakers are replaced on both sides.
//! - **Interleaving.** Timed blocks of `block` tokens alternate between the two chains (the order
//!   flips every block), so load from other processes falls on both alike; the result is the median
//!   over blocks of µs per token, and `ratio = llama_cpp_us / gauge_us`. The fastest block of
//!   each side is kept too: on a busy machine the medians of memory-heavy chains move with the
//!   other processes' cache pressure, the minima much less.
//! - **Agreement.** Separately from the timing, fresh chains run `agree_steps` steps on the same
//!   rows; at each step both choose without accepting, the choices are compared, and both then
//!   accept gauge's token so their histories stay equal and one difference does not cascade.
//!
//! # Decode ([`run_decode_bench`])
//!
//! Tokens per second of a real model for several parallel sequences (one [`LlamaSource`], one
//! batch per step), sampling each sequence with gauge's chain or with llama.cpp's chain, same
//! prompts and seeds. Runs alternate between the two samplers. A run prefills (not timed), then
//! times `tokens` steps of "sample every sequence, push, decode once"; the time spent in the
//! sampler is measured inside the run, so the report gives both the tokens/s of each side and
//! the share of the decode loop taken by each sampler.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use gauge_sampling::params::{SamplingParams, DEFAULT_DRY_BREAKERS};
use gauge_sampling::samplers::dry::expand_string_breakers;
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::synth::{bench_chain, bench_history, bench_scenarios, normal_rows};
use gauge_sampling::{Chain, TokenId};
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::llama_source::LlamaSource;
/// The median of repeated timings (shared with gauge-lab: [`crate::measure`]).
pub use crate::measure::median;
use crate::model::{Model, ModelOptions};
use crate::reference::{ReferenceChain, ValidRow};
use crate::source::LogitSource;

/// The chain name of the row that times one read of the row ([`gauge_sampling::simd::one_read`]).
pub const ONE_READ: &str = "one-read";

/// Label of the synthetic rows.
pub const SYNTHETIC_LABEL: &str = "normal(0,3)";

/// The row widths of `gauge bench sampling` by default (Llama-2, Qwen2, Gemma-3 vocabularies).
pub const DEFAULT_N_VOCABS: [usize; 3] = [32_000, 151_936, 262_144];

/// Prompts whose continuations give the captured model rows and the decode benchmark's sequences.
pub const BENCH_PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three laws of thermodynamics state that",
];

/// Logit rows of one width, cycled by the benchmark.
#[derive(Clone, Debug)]
pub struct RowSet {
    /// Where the rows come from (`normal(0,3)` or the model's name).
    pub label: String,
    pub rows: Vec<Vec<f32>>,
    /// Untimed steps every chain runs on these rows before it is compared or timed (both sides
    /// accept gauge's token), so feedback state (mirostat's `mu`) starts where a long generation
    /// has taken it. 0 for the rows of a fresh generation.
    pub warmup: usize,
}

impl RowSet {
    /// 8 rows of N(0, 3²) logits, splitmix64 seed 42 (the criterion benches' rows).
    pub fn synthetic(n_vocab: usize) -> Self {
        Self {
            label: SYNTHETIC_LABEL.to_string(),
            rows: normal_rows(n_vocab, 8, 3.0, 42),
            warmup: 0,
        }
    }

    /// `n_rows` rows of `model` at its own width: the prompts of [`BENCH_PROMPTS`] in turn, each
    /// continued greedily (first maximal logit) for `per_prompt` rows.
    pub fn from_model(
        model: &Arc<Model>,
        label: &str,
        n_rows: usize,
        per_prompt: usize,
    ) -> Result<Self> {
        Self::from_model_at(model, label, n_rows, per_prompt, 0)
    }

    /// Like [`RowSet::from_model`], but each prompt is first continued greedily for `skip`
    /// tokens: rows from deeper into a generation, where a model is usually more confident.
    pub fn from_model_at(
        model: &Arc<Model>,
        label: &str,
        n_rows: usize,
        per_prompt: usize,
        skip: usize,
    ) -> Result<Self> {
        if n_rows == 0 || per_prompt == 0 {
            return Err(EngineError::option(
                "n_rows, per_prompt",
                format!("{n_rows}, {per_prompt}"),
                ">= 1",
            ));
        }
        let opts = ModelOptions {
            n_seq_max: 1,
            n_ctx: 512,
            ..model.options().clone()
        };
        let mut src = LlamaSource::with_options(Arc::clone(model), &opts)?;
        let mut rows = Vec::with_capacity(n_rows);
        'prompts: for prompt in BENCH_PROMPTS.iter().cycle() {
            let toks = model.tokenize_prompt(prompt)?;
            let seq = src.new_sequence()?;
            src.push(seq, &toks)?;
            src.step()?;
            for i in 0..skip + per_prompt {
                let row = src.logits(seq)?;
                if i >= skip {
                    rows.push(row.to_vec());
                    if rows.len() == n_rows {
                        break 'prompts;
                    }
                }
                let next = first_argmax(row);
                src.push(seq, &[next])?;
                src.step()?;
            }
            src.free(seq)?;
        }
        Ok(Self {
            label: label.to_string(),
            rows,
            warmup: 0,
        })
    }

    /// The same rows with `warmup` untimed steps before comparing and timing.
    pub fn with_warmup(mut self, warmup: usize) -> Self {
        self.warmup = warmup;
        self
    }

    /// The width of the rows (0 for an empty set).
    pub fn n_vocab(&self) -> usize {
        self.rows.first().map_or(0, Vec::len)
    }
}

fn first_argmax(row: &[f32]) -> TokenId {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as TokenId
}

/// Options of [`run_sampling_bench`].
#[derive(Clone, Debug)]
pub struct SamplingBenchOptions {
    /// Row sets to run every chain on (each of one width).
    pub row_sets: Vec<RowSet>,
    /// Scenario names from [`gauge_sampling::synth::bench_scenarios`]; empty = all.
    pub chains: Vec<String>,
    /// Timed tokens per chain and side (rounded up to whole blocks).
    pub iters: usize,
    /// Tokens per timed block.
    pub block: usize,
    /// Untimed steps comparing the two chains' choices.
    pub agree_steps: usize,
    /// The vocabulary that expands DRY's string breakers (needed by the DRY scenarios).
    pub dry_vocab: Option<Arc<Model>>,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

impl Default for SamplingBenchOptions {
    fn default() -> Self {
        Self {
            row_sets: Vec::new(),
            chains: Vec::new(),
            iters: 128,
            block: 8,
            agree_steps: 64,
            dry_vocab: None,
            progress: false,
        }
    }
}

/// One line of the sampling benchmark. The first five fields are the documented JSON shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub chain: String,
    pub n_vocab: usize,
    /// Median µs per token, gauge's chain.
    pub gauge_us: f64,
    /// Median µs per token, llama.cpp's chain.
    pub llama_cpp_us: f64,
    /// `llama_cpp_us / gauge_us`: how many times faster gauge is.
    pub ratio: f64,
    /// Where the rows come from.
    pub rows: String,
    /// Steps where both chains chose the same token, of `tokens_compared`.
    pub tokens_agree: usize,
    pub tokens_compared: usize,
    /// Timed blocks per side (the medians are over these).
    pub blocks: usize,
    /// The fastest block of each side, µs per token: less sensitive to other processes than the
    /// median on a busy machine (what the code costs when it has the core to itself).
    pub gauge_min_us: f64,
    pub llama_cpp_min_us: f64,
    /// The instruction set gauge's kernels ran on ([`gauge_sampling::simd::detected`]).
    #[serde(default)]
    pub simd: String,
}

impl Row {
    /// A row with its ratio computed.
    pub fn new(chain: &str, n_vocab: usize, rows: &str, gauge_us: f64, llama_cpp_us: f64) -> Self {
        Self {
            chain: chain.to_string(),
            n_vocab,
            gauge_us,
            llama_cpp_us,
            ratio: llama_cpp_us / gauge_us,
            rows: rows.to_string(),
            tokens_agree: 0,
            tokens_compared: 0,
            blocks: 0,
            gauge_min_us: gauge_us,
            llama_cpp_min_us: llama_cpp_us,
            simd: gauge_sampling::simd::detected().name().to_string(),
        }
    }
}

/// A benchmark chain: its request, and whether it is `logits -> greedy` (with the request's
/// penalties, if any) rather than the request's own chain.
struct Scenario {
    name: String,
    json: serde_json::Value,
    params: SamplingParams,
    greedy: bool,
}

fn scenarios(filter: &[String]) -> Result<Vec<Scenario>> {
    let all = bench_scenarios();
    let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
    if let Some(bad) = filter
        .iter()
        .find(|f| !names.contains(&f.as_str()) && f.as_str() != ONE_READ)
    {
        return Err(EngineError::Option {
            field: "chains",
            value: bad.clone(),
            allowed: "greedy, greedy+ctrl, greedy+normalized, default, default+penalties+dry, all-enabled, default+ctrl, default+normalized, mirostat-v2, one-read",
        });
    }
    let mut out = Vec::new();
    for (name, json) in all {
        if !filter.is_empty() && !filter.iter().any(|f| f == name) {
            continue;
        }
        out.push(Scenario {
            name: name.to_string(),
            params: SamplingParams::from_value(&json)?,
            greedy: name.starts_with("greedy"),
            json,
        });
    }
    Ok(out)
}

fn dry_on(p: &SamplingParams) -> bool {
    p.mirostat == 0
        && p.samplers
            .contains(&gauge_sampling::order::SamplerType::Dry)
        && p.dry_multiplier != 0.0
        && p.dry_base >= 1.0
        && p.dry_penalty_last_n != 0
}

/// Both chains of a scenario at one width, with the history accepted.
struct Pair {
    gauge: Chain,
    reference: ReferenceChain,
}

/// Builds the pairs; holds the DRY breakers expanded once per vocabulary.
struct PairMaker {
    dry_vocab: Option<Arc<Model>>,
    /// llama.cpp's default breakers as token ids of `dry_vocab` (computed on first use).
    breakers: Option<Vec<Vec<TokenId>>>,
}

impl PairMaker {
    fn make(&mut self, sc: &Scenario, n_vocab: usize) -> Result<Pair> {
        let p = &sc.params;
        let (gauge, reference) = match sc.greedy {
            true => {
                let gauge = bench_chain(&sc.name, &sc.json, n_vocab)?;
                // llama.cpp's side runs ctrl, its only operator
                let reference = if sc.json.get("repeat_penalty").is_some() {
                    ReferenceChain::shifted_penalties_greedy(
                        n_vocab,
                        0.0,
                        p.repeat_last_n,
                        p.repeat_penalty,
                        p.frequency_penalty,
                        p.presence_penalty,
                    )?
                } else {
                    ReferenceChain::greedy(n_vocab)?
                };
                (gauge, reference)
            }
            false => {
                let mut gp = p.clone();
                let mut rp = p.clone();
                if dry_on(p) {
                    if let Some(model) = &self.dry_vocab {
                        let all = self.breakers.get_or_insert_with(|| {
                            let strs: Vec<String> =
                                DEFAULT_DRY_BREAKERS.iter().map(|s| s.to_string()).collect();
                            expand_string_breakers(&**model, &strs)
                        });
                        gp.dry_sequence_breakers = None;
                        gp.dry_sequence_breaker_ids = Some(
                            all.iter()
                                .filter(|b| b.iter().all(|&t| t >= 0 && (t as usize) < n_vocab))
                                .cloned()
                                .collect(),
                        );
                    }
                    // llama.cpp's defaults; without a vocabulary this is NeedsVocab below.
                    rp.dry_sequence_breakers = None;
                    rp.dry_sequence_breaker_ids = None;
                }
                // llama.cpp has only the ctrl operator: its side of `default+normalized` is ctrl.
                rp.repeat_penalty_mode = PenaltyMode::Ctrl;
                let reference =
                    ReferenceChain::for_n_vocab(&rp, n_vocab, self.dry_vocab.as_deref())?;
                (Chain::from_params(&gp, n_vocab, None)?, reference)
            }
        };
        // Same stages in the same order, or the comparison would time different work.
        if gauge.describe() != reference.describe() {
            return Err(EngineError::NotInLlamaCpp(format!(
                "chain {}: gauge builds `{}` but llama.cpp `{}`",
                sc.name,
                gauge.describe(),
                reference.describe()
            )));
        }
        let mut pair = Pair { gauge, reference };
        let history = bench_history(n_vocab);
        for &t in &history {
            pair.gauge.accept_prompt(t);
        }
        pair.reference.accept_prompt(&history);
        Ok(pair)
    }
}

/// Time gauge's chain against llama.cpp's on every row set and chain of `opts`.
pub fn run_sampling_bench(opts: &SamplingBenchOptions) -> Result<Vec<Row>> {
    if opts.iters == 0 {
        return Err(EngineError::option("iters", 0, ">= 1"));
    }
    if opts.block == 0 {
        return Err(EngineError::option("block", 0, ">= 1"));
    }
    for set in &opts.row_sets {
        let n = set.n_vocab();
        if set.rows.is_empty() || set.rows.iter().any(|r| r.len() != n) {
            return Err(EngineError::option(
                "row_sets",
                &set.label,
                "non-empty sets of rows of one width",
            ));
        }
    }
    let scenarios = scenarios(&opts.chains)?;
    let mut maker = PairMaker {
        dry_vocab: opts.dry_vocab.clone(),
        breakers: None,
    };
    let jobs = (opts.row_sets.len() * scenarios.len()) as u64;
    let bar = progress_bar(opts.progress, jobs, "chains");
    let mut out = Vec::with_capacity(jobs as usize);
    for set in &opts.row_sets {
        let n_vocab = set.n_vocab();
        let valid: Vec<ValidRow<'_>> = set
            .rows
            .iter()
            .map(|r| ValidRow::new(r))
            .collect::<Result<_>>()?;
        if opts.chains.is_empty() || opts.chains.iter().any(|c| c == ONE_READ) {
            out.push(one_read_row(set, opts));
        }
        for sc in &scenarios {
            bar.set_message(format!("{} @ {} ({})", sc.name, n_vocab, set.label));
            // Agreement on fresh chains.
            let mut pair = maker.make(sc, n_vocab)?;
            warm_up(&mut pair, set, &valid)?;
            let mut agree = 0;
            for s in 0..opts.agree_steps {
                let i = (set.warmup + s) % set.rows.len();
                let tg = pair.gauge.sample_no_accept(&set.rows[i])?;
                let tr = pair.reference.sample_valid_no_accept(valid[i])?;
                agree += usize::from(tg == tr);
                pair.gauge.accept(tg);
                pair.reference.accept(tg);
            }
            // Timing on fresh chains: one untimed block each, then alternating blocks.
            let mut pair = maker.make(sc, n_vocab)?;
            warm_up(&mut pair, set, &valid)?;
            let (mut ig, mut ir) = (set.warmup, set.warmup);
            gauge_block(&mut pair.gauge, &set.rows, &mut ig, opts.block)?;
            reference_block(&mut pair.reference, &valid, &mut ir, opts.block)?;
            let blocks = opts.iters.div_ceil(opts.block);
            let mut tg = Vec::with_capacity(blocks);
            let mut tr = Vec::with_capacity(blocks);
            for b in 0..blocks {
                if b % 2 == 0 {
                    tg.push(gauge_block(
                        &mut pair.gauge,
                        &set.rows,
                        &mut ig,
                        opts.block,
                    )?);
                    tr.push(reference_block(
                        &mut pair.reference,
                        &valid,
                        &mut ir,
                        opts.block,
                    )?);
                } else {
                    tr.push(reference_block(
                        &mut pair.reference,
                        &valid,
                        &mut ir,
                        opts.block,
                    )?);
                    tg.push(gauge_block(
                        &mut pair.gauge,
                        &set.rows,
                        &mut ig,
                        opts.block,
                    )?);
                }
            }
            let mut row = Row::new(
                &sc.name,
                n_vocab,
                &set.label,
                median(&mut tg),
                median(&mut tr),
            );
            row.tokens_agree = agree;
            row.tokens_compared = opts.agree_steps;
            row.blocks = blocks;
            row.gauge_min_us = tg.iter().copied().fold(f64::INFINITY, f64::min);
            row.llama_cpp_min_us = tr.iter().copied().fold(f64::INFINITY, f64::min);
            out.push(row);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(out)
}

/// `set.warmup` untimed steps of both chains on the rows, both accepting gauge's token (as in the
/// agreement steps), so their feedback state has moved as in a long generation.
fn warm_up(pair: &mut Pair, set: &RowSet, valid: &[ValidRow<'_>]) -> Result<()> {
    for s in 0..set.warmup {
        let i = s % set.rows.len();
        let tg = pair.gauge.sample_no_accept(&set.rows[i])?;
        pair.reference.sample_valid_no_accept(valid[i])?;
        pair.gauge.accept(tg);
        pair.reference.accept(tg);
    }
    Ok(())
}

/// The `one-read` row: µs to read one row once ([`gauge_sampling::simd::one_read`], the rows cycled
/// as the chains cycle them), in blocks as the chains are timed. llama.cpp has no such loop, so
/// both columns time the same read in alternating blocks (the ratio, ~1, shows the noise).
fn one_read_row(set: &RowSet, opts: &SamplingBenchOptions) -> Row {
    let mut i = 0usize;
    let mut block = || {
        let t0 = Instant::now();
        for _ in 0..opts.block {
            black_box(gauge_sampling::simd::one_read(black_box(
                &set.rows[i % set.rows.len()],
            )));
            i += 1;
        }
        t0.elapsed().as_secs_f64() * 1e6 / opts.block as f64
    };
    block();
    let blocks = opts.iters.div_ceil(opts.block);
    let (mut a, mut b) = (Vec::with_capacity(blocks), Vec::with_capacity(blocks));
    for _ in 0..blocks {
        a.push(block());
        b.push(block());
    }
    let mut row = Row::new(
        ONE_READ,
        set.n_vocab(),
        &set.label,
        median(&mut a),
        median(&mut b),
    );
    row.blocks = blocks;
    row.gauge_min_us = a.iter().copied().fold(f64::INFINITY, f64::min);
    row.llama_cpp_min_us = b.iter().copied().fold(f64::INFINITY, f64::min);
    row
}

/// µs per token over `n` tokens of gauge's chain.
fn gauge_block(chain: &mut Chain, rows: &[Vec<f32>], i: &mut usize, n: usize) -> Result<f64> {
    let t0 = Instant::now();
    for _ in 0..n {
        black_box(chain.sample(&rows[*i % rows.len()])?);
        *i += 1;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / n as f64)
}

/// µs per token over `n` tokens of llama.cpp's chain.
fn reference_block(
    chain: &mut ReferenceChain,
    rows: &[ValidRow<'_>],
    i: &mut usize,
    n: usize,
) -> Result<f64> {
    let t0 = Instant::now();
    for _ in 0..n {
        black_box(chain.sample_valid(rows[*i % rows.len()])?);
        *i += 1;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / n as f64)
}

fn progress_bar(on: bool, len: u64, unit: &str) -> indicatif::ProgressBar {
    let template = format!("[{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} {{msg}}");
    crate::measure::progress_bar(on, len, &template)
}

// -------------------------------------------------------------------------------------------------
// Decode

/// Options of [`run_decode_bench`].
#[derive(Clone, Debug)]
pub struct DecodeBenchOptions {
    /// Parallel sequences per run (one batch per step).
    pub widths: Vec<usize>,
    /// Decode steps per run (each step samples one token per sequence).
    pub tokens: usize,
    /// Runs per sampler and width; the two samplers alternate.
    pub rounds: usize,
    /// The chain on both sides (sequence `i` uses `seed + i`).
    pub params: SamplingParams,
    /// Decode threads (0 = the engine's auto: all cores but one).
    pub n_threads: u32,
    pub progress: bool,
}

impl Default for DecodeBenchOptions {
    fn default() -> Self {
        Self {
            widths: vec![1, 4, 16],
            tokens: 32,
            rounds: 3,
            params: SamplingParams {
                seed: 42,
                ..Default::default()
            },
            n_threads: 0,
            progress: false,
        }
    }
}

/// One width of the decode benchmark (medians over the rounds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeRow {
    /// Parallel sequences.
    pub n_seq: usize,
    /// Tokens generated per run (`n_seq * tokens`).
    pub tokens_per_run: usize,
    /// Tokens per second of the decode loop sampling with gauge's chain.
    pub gauge_tps: f64,
    /// Tokens per second of the decode loop sampling with llama.cpp's chain.
    pub llama_cpp_tps: f64,
    /// µs per token spent in gauge's chain inside the loop.
    pub gauge_sample_us: f64,
    /// µs per token spent in llama.cpp's chain inside the loop.
    pub llama_cpp_sample_us: f64,
    /// Share of gauge's decode loop spent sampling, in %: gauge's overhead on top of the model.
    pub gauge_overhead_pct: f64,
    /// Share of llama.cpp's decode loop spent sampling, in %.
    pub llama_cpp_overhead_pct: f64,
    /// `gauge_tps / llama_cpp_tps - 1`, in % (positive: the loop is faster with gauge).
    pub gauge_vs_llama_cpp_pct: f64,
    /// The CPU features llama.cpp was built for ([`crate::llama_cpp_cpu_features`]): the forward
    /// pass, and so both t/s columns, follow them.
    #[serde(default)]
    pub llama_cpp_cpu: String,
}

#[derive(Clone, Copy)]
enum Side {
    Gauge,
    Llama,
}

/// One timed run: (wall seconds of the decode steps, seconds inside the sampler).
fn decode_run(
    src: &mut LlamaSource,
    model: &Model,
    prompts: &[Vec<TokenId>],
    opts: &DecodeBenchOptions,
    side: Side,
) -> Result<(f64, f64)> {
    enum S {
        G(Box<Chain>),
        R(ReferenceChain),
    }
    let mut seqs = Vec::with_capacity(prompts.len());
    for (i, toks) in prompts.iter().enumerate() {
        let params = SamplingParams {
            seed: opts.params.seed.wrapping_add(i as u32),
            ..opts.params.clone()
        };
        let mut chain = match side {
            Side::Gauge => S::G(Box::new(Chain::from_params(
                &params,
                model.n_vocab(),
                Some(model),
            )?)),
            Side::Llama => S::R(ReferenceChain::from_params(&params, model)?),
        };
        match &mut chain {
            S::G(c) => toks.iter().for_each(|&t| c.accept_prompt(t)),
            S::R(c) => c.accept_prompt(toks),
        }
        let seq = src.new_sequence()?;
        src.push(seq, toks)?;
        seqs.push((seq, chain));
    }
    src.step()?;
    let mut in_sampler = 0.0;
    let t0 = Instant::now();
    for _ in 0..opts.tokens {
        for (seq, chain) in seqs.iter_mut() {
            let row = src.logits(*seq)?;
            let ts = Instant::now();
            let tok = match chain {
                S::G(c) => c.sample(row)?,
                S::R(c) => c.sample(row)?,
            };
            in_sampler += ts.elapsed().as_secs_f64();
            src.push(*seq, &[tok])?;
        }
        src.step()?;
    }
    let wall = t0.elapsed().as_secs_f64();
    for (seq, _) in seqs {
        src.free(seq)?;
    }
    Ok((wall, in_sampler))
}

/// Tokens/s of `model` decoding 1, 4, 16... sequences, sampled by gauge's chain vs llama.cpp's.
pub fn run_decode_bench(model: &Arc<Model>, opts: &DecodeBenchOptions) -> Result<Vec<DecodeRow>> {
    if opts.tokens == 0 {
        return Err(EngineError::option("tokens", 0, ">= 1"));
    }
    if opts.rounds == 0 {
        return Err(EngineError::option("rounds", 0, ">= 1"));
    }
    if let Some(&w) = opts.widths.iter().find(|&&w| w == 0 || w > 256) {
        return Err(EngineError::option(
            "widths",
            w,
            "1..=256 parallel sequences",
        ));
    }
    let all_prompts: Vec<Vec<TokenId>> = BENCH_PROMPTS
        .iter()
        .map(|p| model.tokenize_prompt(p))
        .collect::<Result<_>>()?;
    let longest = all_prompts.iter().map(Vec::len).max().unwrap_or(0);
    let n_ctx = u32::try_from(longest + opts.tokens + 1)
        .map_err(|_| EngineError::option("tokens", opts.tokens, "a context that fits in u32"))?;
    let bar = progress_bar(
        opts.progress,
        (opts.widths.len() * opts.rounds * 2) as u64,
        "runs",
    );
    let mut out = Vec::with_capacity(opts.widths.len());
    for &w in &opts.widths {
        let prompts: Vec<Vec<TokenId>> = all_prompts.iter().cycle().take(w).cloned().collect();
        let mopts = ModelOptions {
            n_ctx,
            n_seq_max: w as u32,
            n_threads: opts.n_threads,
            ..model.options().clone()
        };
        let mut src = LlamaSource::with_options(Arc::clone(model), &mopts)?;
        let n_tok = (w * opts.tokens) as f64;
        let (mut gt, mut lt, mut gs, mut ls, mut gp, mut lp) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for r in 0..opts.rounds {
            let order = if r % 2 == 0 {
                [Side::Gauge, Side::Llama]
            } else {
                [Side::Llama, Side::Gauge]
            };
            for side in order {
                bar.set_message(format!("{w} sequences"));
                let (wall, samp) = decode_run(&mut src, model, &prompts, opts, side)?;
                let (tps, us, pct) = (n_tok / wall, samp * 1e6 / n_tok, 100.0 * samp / wall);
                match side {
                    Side::Gauge => {
                        gt.push(tps);
                        gs.push(us);
                        gp.push(pct);
                    }
                    Side::Llama => {
                        lt.push(tps);
                        ls.push(us);
                        lp.push(pct);
                    }
                }
                bar.inc(1);
            }
        }
        let (gauge_tps, llama_cpp_tps) = (median(&mut gt), median(&mut lt));
        out.push(DecodeRow {
            n_seq: w,
            tokens_per_run: w * opts.tokens,
            gauge_tps,
            llama_cpp_tps,
            gauge_sample_us: median(&mut gs),
            llama_cpp_sample_us: median(&mut ls),
            gauge_overhead_pct: median(&mut gp),
            llama_cpp_overhead_pct: median(&mut lp),
            gauge_vs_llama_cpp_pct: 100.0 * (gauge_tps / llama_cpp_tps - 1.0),
            llama_cpp_cpu: crate::llama_cpp_cpu_features().to_string(),
        });
    }
    bar.finish_and_clear();
    Ok(out)
}
