//! `gauge chain`: print the sampler chain llama.cpp would build for these settings, its params block,
//! and whether each stage is shift-invariant.

use crate::sampling_args::SamplingArgs;
use anyhow::Result;
use clap::Args;
use gauge_sampling::Chain;

#[derive(Args, Debug)]
pub struct ChainArgs {
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Vocabulary size to build the chain for (mirostat v1 and logit-bias ranges depend on it).
    #[arg(long, default_value_t = 32000)]
    pub n_vocab: usize,
    /// Print the result as JSON instead of llama.cpp's log lines.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ChainArgs) -> Result<()> {
    let params = args.sampling.to_params()?;
    params.validate(args.n_vocab)?;
    let chain = Chain::from_params(&params, args.n_vocab, None)?;
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
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("sampler seed: {}", params.resolved_seed());
    println!("sampler params: \n{}", params.print_params());
    println!("sampler chain: {}", chain.describe());
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
