//! `gauge bench sampling | decode`: gauge's chain against llama.cpp's own chain, side by side in
//! the same run (the measurement itself lives in `gauge_engine::bench`).

use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use gauge_engine::bench::{
    run_decode_bench, run_sampling_bench, DecodeBenchOptions, DecodeRow, Row, RowSet,
    SamplingBenchOptions, DEFAULT_N_VOCABS, SYNTHETIC_LABEL,
};
use gauge_engine::{Model, ModelOptions};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// µs per token of gauge's chain and llama.cpp's chain on the same logit rows.
    Sampling(SamplingBenchArgs),
    /// Tokens/s of a real model decoding 1, 4, 16 sequences, sampled by gauge vs llama.cpp.
    Decode(DecodeBenchArgs),
}

#[derive(Args, Debug)]
pub struct SamplingBenchArgs {
    /// Print a JSON list of {chain, n_vocab, gauge_us, llama_cpp_us, ratio, ...}.
    #[arg(long)]
    pub json: bool,
    /// Widths of the synthetic N(0,3) rows.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_N_VOCABS)]
    pub n_vocab: Vec<usize>,
    /// Timed tokens per chain and side.
    #[arg(long, default_value_t = 128)]
    pub iters: usize,
    /// Tokens per timed block (blocks alternate between gauge and llama.cpp).
    #[arg(long, default_value_t = 8)]
    pub block: usize,
    /// Chains to run (greedy, greedy+ctrl, greedy+normalized, default, default+penalties+dry,
    /// all-enabled, default+ctrl, default+normalized, mirostat-v2, and one-read, the time to read
    /// the row once); all by default.
    #[arg(long, value_delimiter = ',')]
    pub chains: Vec<String>,
    /// Untimed steps comparing the tokens both chains choose.
    #[arg(long, default_value_t = 64)]
    pub agree_steps: usize,
    /// Model whose vocabulary expands DRY's breakers and whose rows are benchmarked too.
    #[arg(long, short = 'm', default_value = "smollm2-135m-instruct")]
    pub model: String,
    /// Skip the rows captured from the model (synthetic rows only).
    #[arg(long)]
    pub no_model_rows: bool,
}

#[derive(Args, Debug)]
pub struct DecodeBenchArgs {
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
    /// Decode steps per run (tokens per sequence).
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
    /// Parallel sequences, one run per width.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 4, 16])]
    pub widths: Vec<usize>,
    /// Runs per sampler and width (the samplers alternate).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Decode threads (0 = all cores but one).
    #[arg(long, short = 't', default_value_t = 0)]
    pub threads: u32,
    /// Layers offloaded to the GPU (llama.cpp's `-ngl`; needs a GPU build).
    #[arg(long, visible_alias = "gpu-layers", default_value_t = 0)]
    pub n_gpu_layers: u32,
    /// Registry name or GGUF path.
    #[arg(long, short = 'm', default_value = "smollm2-135m-instruct")]
    pub model: String,
}

pub fn run(args: &BenchArgs) -> Result<()> {
    match &args.cmd {
        BenchCmd::Sampling(a) => sampling(a),
        BenchCmd::Decode(a) => decode(a),
    }
}

fn open_model(name: &str, threads: u32, n_gpu_layers: u32) -> Result<Arc<Model>> {
    let opts = ModelOptions {
        n_threads: threads,
        n_gpu_layers,
        ..Default::default()
    };
    Ok(Arc::new(
        Model::open(name, opts).with_context(|| format!("loading model {name}"))?,
    ))
}

/// The deep model rows: each prompt continued greedily for this many tokens before its rows are
/// taken; a model is more confident there, which is where mirostat's `mu` keeps growing.
const DEEP_SKIP: usize = 96;

/// Untimed steps every chain runs on the deep rows first, so mirostat-v2 starts from the `mu` of a
/// long generation (on these rows it keeps the whole vocabulary after ~170 steps).
const DEEP_WARMUP: usize = 256;

fn deep_label(model: &str) -> String {
    format!("{model}@{DEEP_SKIP}")
}

fn sampling(a: &SamplingBenchArgs) -> Result<()> {
    let progress = std::io::stderr().is_terminal();
    let model = open_model(&a.model, 0, 0)?;
    let mut row_sets: Vec<RowSet> = a.n_vocab.iter().map(|&n| RowSet::synthetic(n)).collect();
    if !a.no_model_rows {
        row_sets.push(RowSet::from_model(&model, &a.model, 8, 2)?);
        // deeper into a generation, with the chains' feedback state moved as far (see DEEP_SKIP)
        row_sets.push(
            RowSet::from_model_at(&model, &deep_label(&a.model), 8, 2, DEEP_SKIP)?
                .with_warmup(DEEP_WARMUP),
        );
    }
    let opts = SamplingBenchOptions {
        row_sets,
        chains: a.chains.clone(),
        iters: a.iters,
        block: a.block,
        agree_steps: a.agree_steps,
        dry_vocab: Some(Arc::clone(&model)),
        progress,
    };
    let rows = run_sampling_bench(&opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_sampling(&rows, &a.model, &opts);
    }
    Ok(())
}

fn print_sampling(rows: &[Row], model: &str, opts: &SamplingBenchOptions) {
    println!(
        "{:<24} {:<24} {:>8} {:>11} {:>13} {:>7} {:>10} {:>7}",
        "rows", "chain", "n_vocab", "gauge µs", "llama.cpp µs", "ratio", "min ratio", "agree"
    );
    for r in rows {
        println!(
            "{:<24} {:<24} {:>8} {:>11.2} {:>13.2} {:>6.1}x {:>9.1}x {:>3}/{:<3}",
            r.rows,
            r.chain,
            r.n_vocab,
            r.gauge_us,
            r.llama_cpp_us,
            r.ratio,
            r.llama_cpp_min_us / r.gauge_min_us,
            r.tokens_agree,
            r.tokens_compared
        );
    }
    println!();
    println!(
        "median µs per token (logit row -> accepted token) over {} blocks of {} tokens, gauge and llama.cpp \
         blocks alternating; ratio = llama.cpp / gauge; min ratio = the same over each side's fastest block.",
        opts.iters.div_ceil(opts.block),
        opts.block
    );
    let model_rows = rows.iter().any(|r| r.rows != SYNTHETIC_LABEL);
    println!(
        "rows: {SYNTHETIC_LABEL} = 8 N(0,3) rows from splitmix64 seed 42{}. 64-token history accepted first.",
        if model_rows {
            format!(
                "; {model} = 8 rows captured from the model (its own vocabulary); {} = 8 rows \
                 after {DEEP_SKIP} greedy tokens of each prompt, every chain warmed up for \
                 {DEEP_WARMUP} untimed steps on them",
                deep_label(model)
            )
        } else {
            String::new()
        }
    );
    println!(
        "DRY breakers: llama.cpp's defaults expanded against {model}'s vocabulary on both sides (llama.cpp \
         takes breakers only as strings)."
    );
    println!(
        "agree: steps where both chains chose the same token (both then accept gauge's). all-enabled may \
         differ by design: typical-p after top-n-sigma sees -inf candidates, where llama.cpp's entropy is NaN."
    );
    println!(
        "greedy+ctrl / greedy+normalized, default+ctrl / default+normalized: greedy or the default chain with \
         the repeat penalty 1.3 over the last 64 tokens; llama.cpp has no normalized operator, so its side of \
         the normalized chains runs ctrl (agreement is not expected there). one-read: one read of the row (its max), both columns the same loop in \
         alternating blocks. gauge's kernels ran on {}.",
        gauge_sampling::simd::detected().name()
    );
}

fn decode(a: &DecodeBenchArgs) -> Result<()> {
    let model = open_model(&a.model, a.threads, a.n_gpu_layers)?;
    let opts = DecodeBenchOptions {
        widths: a.widths.clone(),
        tokens: a.tokens,
        rounds: a.rounds,
        n_threads: a.threads,
        progress: std::io::stderr().is_terminal(),
        ..Default::default()
    };
    let rows = run_decode_bench(&model, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_decode(&rows, &a.model, &opts);
    }
    Ok(())
}

fn print_decode(rows: &[DecodeRow], model: &str, opts: &DecodeBenchOptions) {
    println!(
        "{:>5} {:>7} {:>10} {:>14} {:>10} {:>14} {:>12} {:>16} {:>10}",
        "n_seq",
        "tokens",
        "gauge t/s",
        "llama.cpp t/s",
        "gauge µs",
        "llama.cpp µs",
        "gauge share",
        "llama.cpp share",
        "t/s diff"
    );
    for r in rows {
        println!(
            "{:>5} {:>7} {:>10.1} {:>14.1} {:>10.1} {:>14.1} {:>11.2}% {:>15.2}% {:>+9.1}%",
            r.n_seq,
            r.tokens_per_run,
            r.gauge_tps,
            r.llama_cpp_tps,
            r.gauge_sample_us,
            r.llama_cpp_sample_us,
            r.gauge_overhead_pct,
            r.llama_cpp_overhead_pct,
            r.gauge_vs_llama_cpp_pct
        );
    }
    println!();
    println!(
        "llama.cpp built for: {}",
        gauge_engine::llama_cpp_cpu_features()
    );
    println!(
        "{model}, default chain (seed 42 + sequence index), {} decode steps per run, median of {} runs per \
         sampler (alternating). µs = sampler time per token; share = % of the decode loop spent sampling \
         (gauge's overhead on top of the model); t/s diff = gauge t/s vs llama.cpp t/s.",
        opts.tokens, opts.rounds
    );
}
