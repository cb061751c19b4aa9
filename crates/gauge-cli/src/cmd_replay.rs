//! `gauge replay`: run a logit trace through a chain offline and print the chosen tokens.
//!
//! The trace's `params` are read like `gauge chain --params`: a field gauge does not know
//! (`temprature`) is named on stderr and ignored, and `--strict` refuses it (exit 2), so a typo
//! never runs the trace at the default setting without a word.

use anyhow::{bail, Result};
use clap::Args;
use gauge_sampling::fields;
use gauge_sampling::trace::Trace;
use serde_json::Value;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Trace file: `{"n_vocab": N, "params": {...}, "history": [...], "logits": "rows.npy" | [[...]]}`.
    #[arg(long)]
    pub trace: PathBuf,
    /// Refuse fields of the trace's `params` that gauge does not know (by default they are listed
    /// on stderr and ignored), as `gauge chain --params ... --strict` does.
    #[arg(long)]
    pub strict: bool,
}

/// The unknown fields of a trace's `params` object (none when it has no object there).
fn unknown_params(trace_text: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(trace_text).unwrap_or(Value::Null);
    match v.get("params") {
        Some(Value::Object(p)) => fields::unknown_fields(p, &[]),
        _ => Vec::new(),
    }
}

pub fn run(args: &ReplayArgs) -> Result<()> {
    // `load` checks that the trace (and its rows) are regular files and parses them; the text is
    // then read again for the field names the parsed params no longer carry.
    let (trace, rows) = Trace::load(&args.trace)?;
    let text = std::fs::read_to_string(&args.trace)?;
    let unknown = unknown_params(&text);
    if !unknown.is_empty() {
        let list = unknown.join("`, `");
        if args.strict {
            bail!(
                "--trace: unknown field(s) `{list}` in `params` (--strict refuses fields gauge \
                 does not know)"
            );
        }
        eprintln!(
            "gauge: --trace: ignoring unknown field(s) `{list}` in `params` (--strict refuses them)"
        );
    }
    let tokens = trace.replay_rows(&rows)?;
    println!("{}", serde_json::json!({ "tokens": tokens }));
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn unknown_params_are_found_in_the_trace() {
        let t = r#"{"n_vocab": 2, "params": {"temprature": 0, "top_k": 1}, "logits": [[0, 1]]}"#;
        assert_eq!(super::unknown_params(t), ["temprature"]);
        assert!(super::unknown_params(r#"{"n_vocab": 2}"#).is_empty());
    }
}
