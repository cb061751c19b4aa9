//! `gauge chain`: print the sampler chain llama.cpp would build for these settings, its params block,
//! and whether each stage is shift-invariant.

use crate::constraint_args::{self, ConstraintArgs};
use crate::sampling_args::{self, ModelParams, SamplingArgs};
use anyhow::{Context, Result};
use clap::Args;
use gauge_engine::{Model, ModelOptions};
use gauge_sampling::params::{SamplingParams, DEFAULT_DRY_BREAKERS};
use gauge_sampling::{Chain, SamplingError};
use serde_json::{Map, Value};

#[derive(Args, Debug)]
pub struct ChainArgs {
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Vocabulary size to build the chain for (mirostat v1 and logit-bias ranges depend on it).
    /// With `--model`, the model's.
    #[arg(long, default_value_t = 32000, conflicts_with = "model")]
    pub n_vocab: usize,
    /// A model (registry name or GGUF path) whose vocabulary resolves strings: DRY's sequence
    /// breakers, logit-bias and exemption text, `ignore_eos`.
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Print the result as JSON instead of llama.cpp's log lines.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub constraint: ConstraintArgs,
}

/// The chain for `params`; without a vocabulary, llama.cpp's default DRY breakers (strings) cannot
/// be resolved to tokens, so the chain is built without them and a note says so: the stage list,
/// the params block and the shift report do not depend on the breakers.
/// With `--model`, the params are the flags over the model's GGUF sampling defaults.
struct Built {
    chain: Chain,
    params: SamplingParams,
    notes: Vec<String>,
    /// `--model` only: what became of each of the model's defaults, and its lines to print.
    defaults: Option<ModelParams>,
}

fn build(args: &ChainArgs, layer: &Map<String, Value>) -> Result<Built> {
    let constraint = args.constraint.request()?;
    if let Some(name) = &args.model {
        let model = Model::open(name, ModelOptions::default())
            .with_context(|| format!("loading model {name}"))?;
        let with_model = sampling_args::params_for_model(layer, &model, name)?;
        let params = with_model.params.clone();
        params.validate(model.n_vocab())?;
        let chain = Chain::from_params(&params, model.n_vocab(), Some(&model))?;
        let chain = constraint_args::apply(
            chain,
            constraint.as_ref(),
            || constraint_args::model_vocab(&model),
            &params,
        )?;
        return Ok(Built {
            chain,
            params,
            notes: Vec::new(),
            defaults: Some(with_model),
        });
    }
    let params = sampling_args::params_of(layer)?;
    let (chain, mut notes) = build_without_model(args, &params)?;
    if constraint.is_some() {
        notes.push(
            "grammar: compiled against a byte-level stand-in vocabulary (pass --model to \
             compile it for a model's tokens)"
                .into(),
        );
    }
    let chain = constraint_args::apply(
        chain,
        constraint.as_ref(),
        || constraint_args::byte_vocab(args.n_vocab),
        &params,
    )?;
    Ok(Built {
        chain,
        params,
        notes,
        defaults: None,
    })
}

fn build_without_model(args: &ChainArgs, params: &SamplingParams) -> Result<(Chain, Vec<String>)> {
    params.validate(args.n_vocab)?;
    match Chain::from_params(params, args.n_vocab, None) {
        Err(SamplingError::NeedsVocab { field, .. })
            if field == "dry_sequence_breakers"
                && params.dry_sequence_breakers.is_none()
                && params.dry_sequence_breaker_ids.is_none() =>
        {
            let unresolved = SamplingParams {
                dry_sequence_breaker_ids: Some(Vec::new()),
                ..params.clone()
            };
            let chain = Chain::from_params(&unresolved, args.n_vocab, None)?;
            let note = format!(
                "dry: llama.cpp's default sequence breakers {DEFAULT_DRY_BREAKERS:?} are shown \
                 unresolved (they are strings and need a vocabulary: pass --model to resolve them)"
            );
            Ok((chain, vec![note]))
        }
        Err(e @ SamplingError::NeedsVocab { .. }) => Err(anyhow::Error::new(e)
            .context("pass --model M to resolve strings against its vocabulary")),
        other => Ok((other?, Vec::new())),
    }
}

pub fn run(args: &ChainArgs) -> Result<()> {
    let layer = args.sampling.layer()?;
    let Built {
        chain,
        params,
        notes,
        defaults,
    } = build(args, &layer)?;
    let report = chain.shift_report();
    if args.json {
        let stages: Vec<_> = report
            .iter()
            .map(|(name, s)| serde_json::json!({"name": name, "shift_invariant": s.is_invariant(), "shift": s}))
            .collect();
        let out = serde_json::json!({
            "chain": chain.describe(),
            "params": params.print_params(),
            "shift_invariant": report.iter().all(|(_, s)| s.is_invariant()),
            "stages": stages,
            "notes": notes,
        });
        let mut out = out;
        if let Some(d) = &defaults {
            out["model_defaults"] = d.json();
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("sampler seed: {}", params.resolved_seed());
    println!("sampler params: \n{}", params.print_params());
    println!("sampler chain: {}", chain.describe());
    for line in defaults.iter().flat_map(|d| &d.lines) {
        println!("{line}");
    }
    for note in &notes {
        println!("note: {note}");
    }
    println!();
    for (name, s) in &report {
        match s {
            gauge_sampling::Shift::Invariant => println!("  {name:<14} shift-invariant"),
            gauge_sampling::Shift::Variant(why) => {
                println!("  {name:<14} NOT shift-invariant: {why}")
            }
        }
    }
    let all = report.iter().all(|(_, s)| s.is_invariant());
    println!(
        "chain: {}",
        if all {
            "shift-invariant (adding a constant to every logit cannot change its output)"
        } else {
            "NOT shift-invariant: its output depends on where the model's logits sit relative to 0"
        }
    );
    Ok(())
}
