//! `gauge json`: A2, schema-valid JSON under repetition penalties, on a real model.

use crate::cmd_probe::{note_gauge_decided, parse_stacks};
use crate::run_args::RunArgs;
use anyhow::{bail, Result};
use clap::Args;
use gauge_engine::LlamaSource;
use gauge_lab::json::{
    compare_json_runs, json_run_dir, render_json_table, run_json, run_json_constrained, JsonConfig,
};
use gauge_lab::ops::Op;
use gauge_lab::stack::Stack;
use gauge_lab::Grid;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct JsonArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Use the first N of the note's 200 JSONSchemaBench schemas.
    #[arg(long, default_value_t = 200)]
    pub schemas: usize,
    /// Comma-separated θ values.
    #[arg(long, default_value = "1.0,1.1,1.3", value_delimiter = ',')]
    pub theta: Vec<f32>,
    /// Comma-separated operators: ctrl, normalized, subtractive.
    #[arg(long, default_value = "ctrl,normalized", value_delimiter = ',')]
    pub ops: Vec<String>,
    /// llama.cpp-style window (llama.cpp's default is 64); default: prompt + all generated are seen.
    #[arg(long)]
    pub window: Option<usize>,
    /// Most new tokens per output.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// Send the prompt as is instead of through the model's chat template.
    #[arg(long)]
    pub no_chat: bool,
    /// Parallel sequences per llama.cpp context.
    #[arg(long, default_value_t = 64)]
    pub n_seq_max: u32,
    /// Who decides, comma-separated: gauge and/or llama-cpp (llama.cpp's own penalties → greedy
    /// chain, the note's A2 llama.cpp driver, for ctrl and subtractive; normalized stays on gauge's
    /// operator). `--sampler` is its old name.
    #[arg(
        long = "engine",
        visible_alias = "sampler",
        default_value = "gauge",
        value_delimiter = ','
    )]
    pub engine: Vec<String>,
    /// Decode under each schema as a grammar (the server's `response_format` stage): syntax is
    /// then guaranteed, and the report shows what the penalty still breaks (format validity,
    /// placeholders, early-closed strings and arrays, length). Runs stop at end-of-generation.
    #[arg(long)]
    pub constrained: bool,
}

pub fn run(args: &JsonArgs) -> Result<()> {
    let mut ops = Vec::new();
    for name in &args.ops {
        match Op::parse(name.trim()) {
            Some(op) => ops.push(op),
            None => {
                bail!("--ops: unknown operator {name:?} (allowed: ctrl, normalized, subtractive)")
            }
        }
    }
    let base = JsonConfig {
        model: args.run.model.clone(),
        schemas: args.schemas,
        thetas: args.theta.clone(),
        ops,
        max_tokens: args.max_tokens,
        window: args.window,
        constrained: args.constrained,
        ..JsonConfig::default()
    };
    let mut cfgs = Vec::new();
    for s in parse_stacks(&args.engine)? {
        if s == Stack::Candle {
            bail!("--engine candle: `gauge probe` only (allowed here: gauge, llama-cpp)");
        }
        note_gauge_decided(s, &base.ops);
        let mut c = JsonConfig {
            sampler: s,
            ..base.clone()
        };
        c.validate()?;
        c.fit_batch(args.n_seq_max as usize);
        cfgs.push(c);
    }
    let opts = args.run.model_options(2048, args.n_seq_max);
    let model = args.run.open_model(opts)?;
    let chat = !args.no_chat && model.has_chat_template();
    for c in &mut cfgs {
        c.chat_template = chat;
    }
    let mut src = LlamaSource::new(Arc::clone(&model))?;
    let ctl = crate::run_args::interactive();
    let grammar_vocab = if args.constrained {
        Some(crate::constraint_args::model_vocab(&model)?)
    } else {
        None
    };
    let mut summaries = Vec::new();
    for cfg in &cfgs {
        let t0 = std::time::Instant::now();
        let summary = match &grammar_vocab {
            Some(v) => run_json_constrained(&mut src, model.as_ref(), cfg, &args.run.out, &ctl, v)?,
            None => run_json(&mut src, model.as_ref(), cfg, &args.run.out, &ctl)?,
        };
        if !args.run.json {
            print!("{}", render_json_table(&summary));
        }
        eprintln!(
            "json ({}): {:.1} s (chat template: {}); outputs and verdicts in {}",
            cfg.sampler,
            t0.elapsed().as_secs_f64(),
            if chat { "yes" } else { "no" },
            json_run_dir(&args.run.out, cfg).display()
        );
        summaries.push(summary);
    }
    let agreement = if cfgs.len() == 2 {
        let (n, same, verdict) = compare_json_runs(&args.run.out, &cfgs[0], &cfgs[1])?;
        if !args.run.json {
            println!("cross-stack ({} vs {}): {same}/{n} outputs token-identical, {verdict}/{n} with the same verdict", cfgs[0].sampler, cfgs[1].sampler);
        }
        Some(serde_json::json!({ "outputs": n, "identical": same, "same_verdict": verdict }))
    } else {
        None
    };
    if args.run.json {
        if summaries.len() == 1 {
            println!("{}", serde_json::to_string_pretty(&summaries[0])?);
        } else {
            let v = serde_json::json!({ "stacks": summaries, "agreement": agreement });
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
    }
    Ok(())
}
