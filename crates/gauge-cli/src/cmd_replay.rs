//! `gauge replay`: run a logit trace through a chain offline and print the chosen tokens.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Trace file: `{"n_vocab": N, "params": {...}, "history": [...], "logits": "rows.npy" | [[...]]}`.
    #[arg(long)]
    pub trace: PathBuf,
}

pub fn run(args: &ReplayArgs) -> Result<()> {
    let tokens = gauge_sampling::trace::replay(&args.trace)?;
    println!("{}", serde_json::json!({ "tokens": tokens }));
    Ok(())
}
