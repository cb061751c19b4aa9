//! `gauge calibrate`: which normalized θ′ suppresses loops as much as a raw `repeat_penalty` θ on
//! this model (the note's FIXCAL), and what to use when none does.

use crate::run_args::RunArgs;
use anyhow::{bail, Result};
use clap::Args;
use gauge_engine::LlamaSource;
use gauge_lab::calibrate::{
    calibrate_run_dir, render_calibrate_table, run_calibrate, CalibConfig, Metric,
};
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub run: RunArgs,
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
    /// Most sequences decoded at once (part of the run's definition: batch composition can
    /// change a model's numerics).
    #[arg(long, default_value_t = 64)]
    pub n_seq_max: u32,
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
        model: args.run.model_label(),
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
    let opts = args.run.model_options(
        (args.tokens as u32 + 256).next_multiple_of(256),
        args.n_seq_max,
    );
    let model = args.run.open_model(opts)?;
    let mut src = LlamaSource::new(Arc::clone(&model))?;
    let ctl = crate::run_args::interactive();
    let t0 = std::time::Instant::now();
    let summary = run_calibrate(&mut src, model.as_ref(), &cfg, &args.run.out, &ctl)?;
    if args.run.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", render_calibrate_table(&summary));
    }
    eprintln!(
        "calibrate: {:.1} s; report, raw results and plot in {}",
        t0.elapsed().as_secs_f64(),
        calibrate_run_dir(&args.run.out, &cfg).display()
    );
    Ok(())
}
