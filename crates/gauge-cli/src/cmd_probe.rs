//! `gauge probe`: the A1 gauge probe on a real model (the project's main job).
//!
//! With no flags it runs the quick grid on the default model (pulled if missing), prints the table
//! and writes `results/<run-id>/`. Re-running the same command resumes a killed run.
//!
//! `--sampler llama-cpp` makes llama.cpp's own chain decide (the note's llama.cpp driver:
//! logit-bias c on every token → penalties → greedy); `--sampler gauge,llama-cpp` runs both stacks
//! on the same model and prints both tables and their token-for-token agreement.

use anyhow::{bail, Context, Result};
use clap::Args;
use gauge_engine::{LlamaSource, Model, ModelOptions};
use gauge_lab::ops::Op;
use gauge_lab::stack::Stack;
use gauge_lab::{render_table, Grid, ProbeConfig};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Registry name (pulled on first use) or path to a GGUF file.
    #[arg(long, short = 'm', default_value = "smollm2-135m-instruct")]
    pub model: String,
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
    /// Results root; the run goes to <out>/<run-id>/.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Print the summary JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Parallel sequences per llama.cpp context.
    #[arg(long, default_value_t = 256)]
    pub n_seq_max: u32,
    /// llama.cpp decode threads (0 = all cores, llama.cpp's own default; give fewer on a busy
    /// machine, where ggml's spinning threads slow down sharply when they outnumber free cores).
    #[arg(long, short = 't', default_value_t = 0)]
    pub threads: u32,
    /// Layers offloaded to the GPU (llama.cpp's `-ngl`; needs a GPU build).
    #[arg(long, visible_alias = "gpu-layers", default_value_t = 0)]
    pub n_gpu_layers: u32,
    /// Who decides, comma-separated: gauge (gauge's operators) and/or llama-cpp (llama.cpp's own
    /// logit-bias → penalties → greedy chain for ctrl and subtractive; normalized, which llama.cpp
    /// lacks, stays on gauge's operator).
    #[arg(long, default_value = "gauge", value_delimiter = ',')]
    pub sampler: Vec<String>,
}

/// Threads for the lab's batch jobs: `0` = every available core. The engine's own auto leaves one
/// core free for interactive use; a probe is a batch job that owns the machine, and on 2 cores the
/// second thread makes the full grid 1.8× faster (docs/results.md).
pub fn batch_threads(requested: u32) -> u32 {
    if requested > 0 {
        return requested;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
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
    let label = model_label(&args.model);
    let mut cfg = if args.full {
        ProbeConfig {
            model: label,
            ..ProbeConfig::full_grid(&args.model)
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
    let opts = ModelOptions {
        n_ctx,
        n_seq_max: args.n_seq_max,
        n_threads: crate::cmd_probe::batch_threads(args.threads),
        n_batch: 512,
        n_gpu_layers: args.n_gpu_layers,
        ..Default::default()
    };
    let model = Arc::new(
        Model::open(&args.model, opts).with_context(|| format!("loading model {}", args.model))?,
    );
    let mut src = LlamaSource::new(Arc::clone(&model))?;
    let mut summaries = Vec::new();
    for cfg in &cfgs {
        let t0 = std::time::Instant::now();
        let summary = gauge_lab::run_probe(&mut src, model.as_ref(), cfg, &args.out, true)?;
        let dir = gauge_lab::probe::run_dir(&args.out, cfg);
        if !args.json {
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
        let a = gauge_lab::probe::compare_probe_runs(&args.out, &cfgs[0], &cfgs[1])?;
        if !args.json {
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
    if args.json {
        if summaries.len() == 1 && agreement.is_none() {
            println!("{}", serde_json::to_string_pretty(&summaries[0])?);
        } else {
            let v = serde_json::json!({ "stacks": summaries, "agreement": agreement });
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
    }
    Ok(())
}

/// The label reports use for a model: the registry name, or a file's stem.
pub fn model_label(model: &str) -> String {
    let p = std::path::Path::new(model);
    if p.extension().is_some_and(|e| e == "gguf") {
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| model.to_string())
    } else {
        model.to_string()
    }
}
