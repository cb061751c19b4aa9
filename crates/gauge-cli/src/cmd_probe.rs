//! `gauge probe`: the A1 gauge probe on a real model (the project's main job).
//!
//! With no flags it runs the quick grid on the default model (pulled if missing), prints the table
//! and writes `results/<run-id>/`. Re-running the same command resumes a killed run.
//!
//! `--sampler llama-cpp` makes llama.cpp's own chain decide (the note's llama.cpp driver:
//! logit-bias c on every token → penalties → greedy); `--sampler gauge,llama-cpp` runs both stacks
//! on the same model and prints both tables and their token-for-token agreement.

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
    /// Who decides, comma-separated: gauge (gauge's operators) and/or llama-cpp (llama.cpp's own
    /// logit-bias → penalties → greedy chain for ctrl and subtractive; normalized, which llama.cpp
    /// lacks, stays on gauge's operator).
    #[arg(long, default_value = "gauge", value_delimiter = ',')]
    pub sampler: Vec<String>,
}

/// Parse `--sampler` (distinct stacks, in the given order).
pub fn parse_stacks(names: &[String]) -> Result<Vec<Stack>> {
    let mut v: Vec<Stack> = Vec::new();
    for n in names {
        let Some(s) = Stack::parse(n) else {
            bail!("--sampler: unknown stack {n:?} (allowed: gauge, llama-cpp)");
        };
        if !v.contains(&s) {
            v.push(s);
        }
    }
    if v.is_empty() {
        bail!("--sampler: give gauge and/or llama-cpp");
    }
    Ok(v)
}

/// Every stack runs the same plan (llama.cpp's logits depend on what else is in the batch, so
/// only identical plans give comparable rows); say once where llama-cpp leaves an op to gauge.
pub fn note_gauge_decided(stack: Stack, ops: &[Op]) {
    if stack.footnote(ops).is_some() {
        eprintln!("note ({stack}): normalized runs on gauge's operator (llama.cpp has none)");
    }
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
    let stacks = parse_stacks(&args.sampler)?;
    let mut cfgs = Vec::new();
    for &s in &stacks {
        note_gauge_decided(s, &cfg.ops);
        let mut c = ProbeConfig {
            sampler: s,
            ..cfg.clone()
        };
        c.validate()?;
        c.fit_batch(args.n_seq_max as usize);
        cfgs.push(c);
    }

    // Context per sequence: the longest prefix plus the generated tokens, with room to spare.
    let n_ctx = (cfg.tokens as u32 + 256).next_multiple_of(256);
    let opts = args.run.model_options(n_ctx, args.n_seq_max);
    let model = args.run.open_model(opts)?;
    let mut src = LlamaSource::new(Arc::clone(&model))?;
    let mut summaries = Vec::new();
    for cfg in &cfgs {
        let t0 = std::time::Instant::now();
        let summary = gauge_lab::run_probe(&mut src, model.as_ref(), cfg, &args.run.out, true)?;
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
