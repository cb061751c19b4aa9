//! `gauge delim`: the HumanEval threshold/delimiter analysis (docs/PROTOCOL.md §5.1) on a real model.
//!
//! With no flags: the default model, the first 40 HumanEval prompts × 256 tokens, θ ∈ {1, 1.1,
//! 1.3, 1.5}, ctrl vs normalized. `--full` is the note's grid (164 prompts, θ ∈ {1..1.5} by 0.1).
//! HumanEval is the registry's `humaneval` entry (pulled on first use) unless `--data` names a
//! file. Re-running the same command resumes a killed run.

use crate::run_args::RunArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use gauge_engine::{resolve_data, LlamaSource, ModelOptions};
use gauge_lab::delim::{humaneval, render_delim_table, run_delim, DelimConfig};
use gauge_lab::ops::Op;
use gauge_lab::{Codec, Grid};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct DelimArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Use the first N HumanEval problems.
    #[arg(long, default_value_t = 40)]
    pub prompts: usize,
    /// Greedy tokens per decode (no EOS stop).
    #[arg(long, default_value_t = 256)]
    pub tokens: usize,
    /// Comma-separated θ values (must include 1.0, the gate; all >= 1).
    #[arg(long, default_value = "1.0,1.1,1.3,1.5", value_delimiter = ',')]
    pub theta: Vec<f32>,
    /// Comma-separated operators: ctrl, normalized, subtractive.
    #[arg(long, default_value = "ctrl,normalized", value_delimiter = ',')]
    pub ops: Vec<String>,
    /// α of the subtractive operator.
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f32,
    /// llama.cpp-style window over the last N tokens (default: the note's seen set, no window).
    #[arg(long)]
    pub window: Option<usize>,
    /// The note's grid: all 164 prompts × 256 tokens, θ ∈ {1, 1.1, 1.2, 1.3, 1.4, 1.5}.
    #[arg(long, conflicts_with_all = ["prompts", "tokens", "theta"])]
    pub full: bool,
    /// HumanEval JSONL(.gz) file (default: the registry's `humaneval` entry).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Parallel sequences per llama.cpp context.
    #[arg(long, default_value_t = 32)]
    pub n_seq_max: u32,
}

pub fn run(args: &DelimArgs) -> Result<()> {
    let mut ops = Vec::new();
    for name in &args.ops {
        match Op::parse(name.trim()) {
            Some(op) => ops.push(op),
            None => {
                bail!("--ops: unknown operator {name:?} (allowed: ctrl, normalized, subtractive)")
            }
        }
    }
    let label = args.run.model.clone();
    let mut cfg = if args.full {
        DelimConfig::full_grid(&label)
    } else {
        DelimConfig {
            model: label,
            prompts: args.prompts,
            tokens: args.tokens,
            thetas: args.theta.clone(),
            ..DelimConfig::default()
        }
    };
    cfg.ops = ops;
    cfg.alpha = args.alpha;
    cfg.window = args.window;
    cfg.validate()?;
    cfg.fit_batch(args.n_seq_max as usize);

    let data = match &args.data {
        Some(p) => p.clone(),
        None => {
            resolve_data("humaneval").context("pulling HumanEval (registry entry `humaneval`)")?
        }
    };
    let tasks = humaneval::load(&data)?;
    if cfg.prompts > tasks.len() {
        bail!(
            "--prompts {}: {} holds {} problems",
            cfg.prompts,
            data.display(),
            tasks.len()
        );
    }
    let model = args.run.open_model(ModelOptions {
        n_gpu_layers: args.run.n_gpu_layers,
        ..ModelOptions::default()
    })?;
    // Context per sequence: the longest prompt (tokenized as the analysis will) plus the
    // generated tokens.
    let mut longest = 0;
    for t in &tasks[..cfg.prompts] {
        longest = longest.max(
            Codec::tokenize(model.as_ref(), &t.prompt, false)
                .map_err(anyhow::Error::msg)?
                .len(),
        );
    }
    let n_ctx = u32::try_from(longest + cfg.tokens + 1)?.next_multiple_of(256);
    let opts = args.run.model_options(n_ctx, args.n_seq_max);
    let mut src = LlamaSource::with_options(Arc::clone(&model), &opts)?;
    let ctl = crate::run_args::interactive();
    let t0 = std::time::Instant::now();
    let summary = run_delim(&mut src, model.as_ref(), &tasks, &cfg, &args.run.out, &ctl)?;
    if args.run.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", render_delim_table(&summary));
    }
    eprintln!(
        "delim: {:.1} s; report and raw records in {}",
        t0.elapsed().as_secs_f64(),
        gauge_lab::delim::delim_run_dir(&args.run.out, &cfg).display()
    );
    Ok(())
}
