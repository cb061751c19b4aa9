//! `gauge probe`: the A1 gauge probe on a real model (the project's main job).
//!
//! With no flags it runs the quick grid on the default model (pulled if missing), prints the table
//! and writes `results/<run-id>/`. Re-running the same command resumes a killed run.
//!
//! `--engine llama-cpp` makes llama.cpp's own chain decide (the note's llama.cpp driver:
//! logit-bias c on every token → penalties → greedy); `--engine gauge,llama-cpp` runs both stacks
//! on the same model and prints both tables and their token-for-token agreement. `--engine candle`
//! (a build with the `candle` feature) computes the logits with candle-transformers on the model's
//! float32 weights and lets candle's `apply_repeat_penalty` decide ctrl (`crate::candle_engine`).
//! `--sampler` is the old name of `--engine`.

use crate::run_args::RunArgs;
use anyhow::{bail, Result};
use clap::Args;
use gauge_engine::LlamaSource;
use gauge_lab::ops::Op;
use gauge_lab::stack::Stack;
use gauge_lab::{render_table, Grid, ProbeConfig};
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Use the first N of the note's 200 WikiText-103 prefixes.
    #[arg(long, default_value_t = 20)]
    pub prefixes: usize,
    /// Greedy tokens per run.
    #[arg(long, default_value_t = 64)]
    pub tokens: usize,
    /// Comma-separated θ values (must include 1.0, the validity gate).
    #[arg(long, default_value = "1.0,1.3", value_delimiter = ',')]
    pub theta: Vec<f32>,
    /// Comma-separated operators: ctrl, normalized, subtractive.
    #[arg(
        long,
        default_value = "ctrl,normalized,subtractive",
        value_delimiter = ','
    )]
    pub ops: Vec<String>,
    /// The gauge shift c: runs add +c and −c to every logit.
    #[arg(long, default_value_t = 5.0)]
    pub shift: f32,
    /// α of the subtractive (presence) operator.
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f32,
    /// llama.cpp-style window over the last N tokens (default: the note's seen set, no window).
    #[arg(long)]
    pub window: Option<usize>,
    /// The note's full A1 grid: 200 prefixes × 200 tokens, θ ∈ {1, 1.1, 1.3, 1.5}, three ops.
    #[arg(long, conflicts_with_all = ["prefixes", "tokens", "theta"])]
    pub full: bool,
    /// Parallel sequences per llama.cpp context.
    #[arg(long, default_value_t = 256)]
    pub n_seq_max: u32,
    /// Who decides, comma-separated: gauge (gauge's operators), llama-cpp (llama.cpp's own
    /// logit-bias → penalties → greedy chain for ctrl and subtractive; normalized, which llama.cpp
    /// lacks, stays on gauge's operator), candle (candle computes the logits on the float32
    /// weights and its `apply_repeat_penalty` decides ctrl; needs a build with `--features
    /// candle`).
    #[arg(
        long = "engine",
        visible_alias = "sampler",
        default_value = "gauge",
        value_delimiter = ','
    )]
    pub engine: Vec<String>,
    /// The seen set of `--engine candle`: `protocol` (prompt + all generated, no window: the
    /// stacks compare on one operator) or `engine` (candle's example as shipped: the last 64
    /// generated tokens, prompt excluded), recorded in the run.
    #[arg(long, default_value = "protocol")]
    pub seen: String,
}

/// Parse `--engine` (distinct stacks, in the given order).
pub fn parse_stacks(names: &[String]) -> Result<Vec<Stack>> {
    let mut v: Vec<Stack> = Vec::new();
    for n in names {
        let Some(s) = Stack::parse(n) else {
            bail!("--engine: unknown engine {n:?} (allowed: gauge, llama-cpp, candle)");
        };
        if !v.contains(&s) {
            v.push(s);
        }
    }
    if v.is_empty() {
        bail!("--engine: give gauge, llama-cpp and/or candle");
    }
    Ok(v)
}

/// `--seen`: `protocol` for every engine; `engine` only where the engine's own scope differs
/// from a plain window (candle).
fn parse_seen(name: &str, stacks: &[Stack]) -> Result<bool> {
    match name.trim() {
        "protocol" => Ok(false),
        "engine" if stacks == [Stack::Candle] => Ok(true),
        "engine" => bail!(
            "--seen engine: only with --engine candle alone (gauge and llama-cpp take --window N)"
        ),
        other => bail!("--seen: unknown seen set {other:?} (allowed: protocol, engine)"),
    }
}

/// Every stack runs the same plan (llama.cpp's logits depend on what else is in the batch, so
/// only identical plans give comparable rows); say once where llama-cpp leaves an op to gauge.
pub fn note_gauge_decided(stack: Stack, ops: &[Op]) {
    if let Some(note) = stack.footnote(ops) {
        eprintln!("note ({stack}): {}", note.trim_start_matches("* "));
    }
}

/// The candle engine of a run, opened (and its logits checked) before any decode.
#[cfg(feature = "candle")]
type CandleEngine = crate::candle_engine::CandleRun;
/// Without the `candle` feature there is no candle engine: [`open_candle`] refuses.
#[cfg(not(feature = "candle"))]
enum CandleEngine {}

#[cfg(feature = "candle")]
fn open_candle(
    args: &ProbeArgs,
    n_ctx: u32,
    engine_seen: bool,
    cfg: &mut ProbeConfig,
) -> Result<CandleEngine> {
    use crate::candle_engine::Seen;
    let seen = if engine_seen {
        Seen::Engine
    } else {
        Seen::Protocol
    };
    seen.apply(cfg);
    let run = crate::candle_engine::open(
        &args.run.model,
        n_ctx,
        args.n_seq_max,
        args.run.threads,
        seen,
    )?;
    cfg.engine = Some(run.engine.clone());
    Ok(run)
}

#[cfg(not(feature = "candle"))]
fn open_candle(_: &ProbeArgs, _: u32, _: bool, _: &mut ProbeConfig) -> Result<CandleEngine> {
    bail!(
        "--engine candle: this gauge was built without candle (build with `cargo build --release -p gauge-cli --features candle`)"
    )
}

#[cfg(feature = "candle")]
fn candle_probe(
    c: &mut CandleEngine,
    cfg: &ProbeConfig,
    out: &std::path::Path,
) -> Result<gauge_lab::ProbeSummary> {
    Ok(gauge_lab::run_probe(
        &mut c.source,
        c.codec.as_ref(),
        cfg,
        out,
        true,
    )?)
}

#[cfg(not(feature = "candle"))]
fn candle_probe(
    c: &mut CandleEngine,
    _: &ProbeConfig,
    _: &std::path::Path,
) -> Result<gauge_lab::ProbeSummary> {
    match *c {}
}

pub fn run(args: &ProbeArgs) -> Result<()> {
    let mut ops = Vec::new();
    for name in &args.ops {
        match Op::parse(name.trim()) {
            Some(op) => ops.push(op),
            None => {
                bail!("--ops: unknown operator {name:?} (allowed: ctrl, normalized, subtractive)")
            }
        }
    }
    let label = args.run.model_label();
    let mut cfg = if args.full {
        ProbeConfig {
            model: label,
            ..ProbeConfig::full_grid(&args.run.model)
        }
    } else {
        ProbeConfig {
            model: label,
            prefixes: args.prefixes,
            tokens: args.tokens,
            thetas: args.theta.clone(),
            ..ProbeConfig::default()
        }
    };
    cfg.ops = ops;
    cfg.shift = args.shift;
    cfg.alpha = args.alpha;
    cfg.window = args.window;
    let stacks = parse_stacks(&args.engine)?;
    let engine_seen = parse_seen(&args.seen, &stacks)?;
    // Context per sequence: the longest prefix plus the generated tokens, with room to spare.
    let n_ctx = (cfg.tokens as u32 + 256).next_multiple_of(256);
    let mut candle = None;
    let mut cfgs = Vec::new();
    for &s in &stacks {
        note_gauge_decided(s, &cfg.ops);
        let mut c = ProbeConfig {
            sampler: s,
            ..cfg.clone()
        };
        if s == Stack::Candle {
            if args.window.is_some() {
                bail!(
                    "--window: not with --engine candle (its seen set is --seen protocol|engine)"
                );
            }
            candle = Some(open_candle(args, n_ctx, engine_seen, &mut c)?);
        } else {
            c.llama_cpp_cpu = Some(gauge_engine::llama_cpp_cpu_features().to_string());
        }
        c.validate()?;
        c.fit_batch(args.n_seq_max as usize);
        cfgs.push(c);
    }

    let opts = args.run.model_options(n_ctx, args.n_seq_max);
    let model = if stacks.iter().any(|&s| s != Stack::Candle) {
        Some(args.run.open_model(opts)?)
    } else {
        None
    };
    let mut src = model
        .as_ref()
        .map(|m| LlamaSource::new(Arc::clone(m)))
        .transpose()?;
    let mut summaries = Vec::new();
    for cfg in &cfgs {
        let t0 = std::time::Instant::now();
        let summary = match (cfg.sampler, src.as_mut(), model.as_ref(), candle.as_mut()) {
            (Stack::Candle, _, _, Some(c)) => candle_probe(c, cfg, &args.run.out)?,
            (_, Some(src), Some(model), _) => {
                gauge_lab::run_probe(src, model.as_ref(), cfg, &args.run.out, true)?
            }
            _ => unreachable!("every stack's engine was opened above"),
        };
        let dir = gauge_lab::probe::run_dir(&args.run.out, cfg);
        if !args.run.json {
            print!("{}", render_table(&summary));
        }
        eprintln!(
            "probe ({}): {:.1} s; report, raw results and plots in {}",
            cfg.sampler,
            t0.elapsed().as_secs_f64(),
            dir.display()
        );
        summaries.push(summary);
    }
    let agreement = if cfgs.len() == 2 {
        let a = gauge_lab::probe::compare_probe_runs(&args.run.out, &cfgs[0], &cfgs[1])?;
        if !args.run.json {
            println!(
                "cross-stack ({} vs {}): {}/{} runs token-identical, {} of {} positions differ{}",
                cfgs[0].sampler,
                cfgs[1].sampler,
                a.identical_runs,
                a.runs,
                a.differing_positions,
                a.positions,
                a.first_difference
                    .map_or(String::new(), |(p, op, th, c, at)| format!(
                        " (first: prefix {p}, {op} θ={th} c={c}, position {at})"
                    ))
            );
        }
        Some(a)
    } else {
        None
    };
    if args.run.json {
        if summaries.len() == 1 && agreement.is_none() {
            println!("{}", serde_json::to_string_pretty(&summaries[0])?);
        } else {
            let v = serde_json::json!({ "stacks": summaries, "agreement": agreement });
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
    }
    Ok(())
}
