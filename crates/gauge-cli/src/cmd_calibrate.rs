//! `gauge calibrate`: which normalized θ′ suppresses loops as much as a raw `repeat_penalty` θ on
//! this model (the note's FIXCAL), and what to use when none does.

use anyhow::{bail, Context, Result};
use clap::Args;
use gauge_engine::{LlamaSource, Model, ModelOptions};
use gauge_lab::calibrate::{
    calibrate_run_dir, render_calibrate_table, run_calibrate, CalibConfig, Metric,
};
use gauge_lab::RunControl;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Registry name (pulled on first use) or path to a GGUF file.
    #[arg(long, short = 'm', default_value = "smollm2-135m-instruct")]
    pub model: String,
    /// Comma-separated raw `repeat_penalty` anchors θ (each > 1) to find a normalized θ′ for.
    #[arg(long, default_value = "1.05,1.1,1.3", value_delimiter = ',')]
    pub theta: Vec<f32>,
    /// Use the first N of the note's 16 fixed prompts.
    #[arg(long, default_value_t = 16)]
    pub prompts: usize,
    /// Greedy tokens per prompt (no EOS stop).
    #[arg(long, default_value_t = 256)]
    pub tokens: usize,
    /// Comma-separated metrics matched independently: rep_rate (required, primary), distinct2,
    /// longest_run. Every evaluation reports all three.
    #[arg(long, default_value = "rep_rate", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Ceiling of the θ′ search (the note: 10).
    #[arg(long, default_value_t = 10.0)]
    pub theta_max: f64,
    /// Do not search a presence penalty for anchors whose θ′ is UNREACHABLE (the report then
    /// gives the closed-form estimate only).
    #[arg(long)]
    pub no_presence: bool,
    /// Ceiling of the presence α search, in logit units.
    #[arg(long, default_value_t = 10.0)]
    pub alpha_max: f64,
    /// Results root; the run goes to <out>/<run-id>/.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Print the summary JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Most sequences decoded at once (part of the run's definition: batch composition can
    /// change a model's numerics).
    #[arg(long, default_value_t = 64)]
    pub n_seq_max: u32,
    /// llama.cpp decode threads (0 = all cores).
    #[arg(long, short = 't', default_value_t = 0)]
    pub threads: u32,
    /// Layers offloaded to the GPU (llama.cpp's `-ngl`; needs a GPU build).
    #[arg(long, visible_alias = "gpu-layers", default_value_t = 0)]
    pub n_gpu_layers: u32,
}

pub fn run(args: &CalibrateArgs) -> Result<()> {
    let mut metrics = Vec::new();
    for name in &args.metrics {
        match Metric::parse(name) {
            Some(m) => metrics.push(m),
            None => bail!(
                "--metrics: unknown metric {name:?} (allowed: rep_rate, distinct2, longest_run)"
            ),
        }
    }
    let cfg = CalibConfig {
        model: crate::cmd_probe::model_label(&args.model),
        anchors: args.theta.clone(),
        prompts: args.prompts,
        tokens: args.tokens,
        metrics,
        theta_max: args.theta_max,
        presence: !args.no_presence,
        alpha_max: args.alpha_max,
        max_sequences: args.n_seq_max as usize,
        ..CalibConfig::default()
    };
    cfg.validate()?;
    // Context per sequence: the longest prompt plus the generated tokens, with room to spare.
    let opts = ModelOptions {
        n_ctx: (args.tokens as u32 + 256).next_multiple_of(256),
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
    let ctl = RunControl {
        progress: true,
        ..RunControl::default()
    };
    let t0 = std::time::Instant::now();
    let summary = run_calibrate(&mut src, model.as_ref(), &cfg, &args.out, &ctl)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", render_calibrate_table(&summary));
    }
    eprintln!(
        "calibrate: {:.1} s; report, raw results and plot in {}",
        t0.elapsed().as_secs_f64(),
        calibrate_run_dir(&args.out, &cfg).display()
    );
    Ok(())
}
