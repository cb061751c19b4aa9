//! `gauge probe`: the A1 gauge probe on a real model (the project's main job).
//!
//! With no flags it runs the quick grid on the default model (pulled if missing), prints the table
//! and writes `results/<run-id>/`. Re-running the same command resumes a killed run.

use anyhow::{bail, Context, Result};
use clap::Args;
use gauge_engine::{LlamaSource, Model, ModelOptions};
use gauge_lab::ops::Op;
use gauge_lab::{render_table, ProbeConfig};
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
    #[arg(long, default_value = "ctrl,normalized,subtractive", value_delimiter = ',')]
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
}

pub fn run(args: &ProbeArgs) -> Result<()> {
    let mut ops = Vec::new();
    for name in &args.ops {
        match Op::parse(name.trim()) {
            Some(op) => ops.push(op),
            None => bail!("--ops: unknown operator {name:?} (allowed: ctrl, normalized, subtractive)"),
        }
    }
    let label = model_label(&args.model);
    let mut cfg = if args.full {
        ProbeConfig { model: label, ..ProbeConfig::full_grid(&args.model) }
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
    cfg.validate()?;
    cfg.fit_batch(args.n_seq_max as usize);

    // Context per sequence: the longest prefix plus the generated tokens, with room to spare.
    let n_ctx = (cfg.tokens as u32 + 256).next_multiple_of(256);
    let opts = ModelOptions { n_ctx, n_seq_max: args.n_seq_max, n_batch: 512, ..Default::default() };
    let model = Arc::new(Model::open(&args.model, opts).with_context(|| format!("loading model {}", args.model))?);
    let mut src = LlamaSource::new(Arc::clone(&model))?;
    let tok_model = Arc::clone(&model);
    // The note tokenizes prefixes with the model's defaults: no BOS, no special-token parsing.
    let mut tokenize = move |text: &str| tok_model.tokenize(text, false, false).map_err(|e| e.to_string());
    let t0 = std::time::Instant::now();
    let summary = gauge_lab::run_probe(&mut src, &mut tokenize, &cfg, &args.out, true)?;
    let dir = gauge_lab::probe::run_dir(&args.out, &cfg);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", render_table(&summary));
    }
    eprintln!("probe: {:.1} s; report, raw results and plots in {}", t0.elapsed().as_secs_f64(), dir.display());
    Ok(())
}

/// The label reports use for a model: the registry name, or a file's stem.
fn model_label(model: &str) -> String {
    let p = std::path::Path::new(model);
    if p.extension().is_some_and(|e| e == "gguf") {
        p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| model.to_string())
    } else {
        model.to_string()
    }
}
