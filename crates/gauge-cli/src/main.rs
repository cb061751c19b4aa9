//! `gauge`: the command-line front of the gauge crates.
//!
//! A thin binary: every subcommand parses flags with clap and calls a library function; `anyhow` is
//! used only here, at the edge. Errors print one clear line and exit with code 2.

#[cfg(feature = "candle")]
mod candle_engine;
mod cmd_bench;
mod cmd_calibrate;
mod cmd_chain;
mod cmd_delim;
mod cmd_explain;
mod cmd_generate;
mod cmd_json;
mod cmd_models;
mod cmd_probe;
mod cmd_replay;
mod cmd_serve;
mod constraint_args;
mod run_args;
mod sampling_args;

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "gauge",
    version,
    about = "llama.cpp-exact sampler chains, gauge-invariant repetition penalties, and the instrument that measures the difference"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print the sampler chain, params and per-stage shift invariance for a set of sampling flags.
    Chain(cmd_chain::ChainArgs),
    /// Show what every sampler stage did: candidates' logits and p before and after, per step.
    Explain(cmd_explain::ExplainArgs),
    /// Replay a logit trace through a chain and print the chosen tokens as JSON.
    Replay(cmd_replay::ReplayArgs),
    /// The gauge probe (A1): flip rate between logits shifted by +c and −c, per operator and θ.
    Probe(cmd_probe::ProbeArgs),
    /// A2: rate of schema-valid JSON per operator and θ on the note's 200 schemas.
    Json(cmd_json::JsonArgs),
    /// FIXCAL: the normalized θ′ that suppresses loops as much as a raw θ, per anchor (or what to use instead).
    Calibrate(cmd_calibrate::CalibrateArgs),
    /// HumanEval delimiter flips: where the penalty flips greedy code tokens and the closed-form predictor.
    Delim(cmd_delim::DelimArgs),
    /// List, pull and locate the models gauge knows by name.
    Models(cmd_models::ModelsArgs),
    /// Generate text from a GGUF model with gauge's sampler chain.
    Generate(cmd_generate::GenerateArgs),
    /// Time gauge's chain against llama.cpp's own chain (sampling µs/token, decode tokens/s).
    Bench(cmd_bench::BenchArgs),
    /// Serve the model over HTTP: OpenAI and llama-server APIs, gauge's chain per request.
    Serve(cmd_serve::ServeArgs),
}

/// llama.cpp's multi-letter single-dash flags, which clap cannot declare as short flags; they are
/// rewritten to their long names before parsing, so llama-cli/llama-server habits work.
const LLAMA_SPELLINGS: &[(&str, &str)] = &[("-np", "--parallel"), ("-ngl", "--n-gpu-layers")];

/// The arguments with llama.cpp's `-np`/`-ngl` (also `-np=4`) spelled as long flags. Everything
/// after `--` is left alone.
fn llama_spellings(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut verbatim = false;
    for a in args {
        if verbatim || a == "--" {
            verbatim = true;
            out.push(a);
            continue;
        }
        let text = a.to_string_lossy();
        let long = LLAMA_SPELLINGS.iter().find_map(|&(short, long)| {
            if text == short {
                Some(long.to_string())
            } else {
                text.strip_prefix(short)
                    .and_then(|rest| rest.strip_prefix('='))
                    .map(|v| format!("{long}={v}"))
            }
        });
        out.push(long.map_or(a, OsString::from));
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(llama_spellings(std::env::args_os()));
    let res = match &cli.cmd {
        Cmd::Chain(a) => cmd_chain::run(a),
        Cmd::Replay(a) => cmd_replay::run(a),
        Cmd::Explain(a) => cmd_explain::run(a),
        Cmd::Probe(a) => cmd_probe::run(a),
        Cmd::Json(a) => cmd_json::run(a),
        Cmd::Delim(a) => cmd_delim::run(a),
        Cmd::Calibrate(a) => cmd_calibrate::run(a),
        Cmd::Models(a) => cmd_models::run(a),
        Cmd::Generate(a) => cmd_generate::run(a),
        Cmd::Serve(a) => cmd_serve::run(a),
        Cmd::Bench(a) => cmd_bench::run(a),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
            }
            eprintln!("error: {}", error_text(&e));
            ExitCode::from(2)
        }
    }
}

/// `e` and its causes joined by ": " (anyhow's `{:#}`), skipping a cause whose text the message
/// already ends with: an error type that both shows its source and returns it from `source()`
/// would otherwise print the OS error twice ("Read-only file system (os error 30): Read-only file
/// system (os error 30)").
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::llama_spellings;

    #[test]
    fn os_errors_are_printed_once() {
        #[derive(Debug)]
        struct Shows(std::io::Error);
        impl std::fmt::Display for Shows {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "binding 127.0.0.1:1: {}", self.0)
            }
        }
        impl std::error::Error for Shows {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Shows(std::io::Error::from_raw_os_error(30)))
            .context("starting the server");
        let text = super::error_text(&e);
        assert_eq!(text.matches("(os error 30)").count(), 1, "{text}");
        assert!(text.starts_with("starting the server: binding"), "{text}");
        // Distinct causes are all kept.
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::error_text(&e), "outer: inner");
    }
    use std::ffi::OsString;

    fn run(args: &[&str]) -> Vec<String> {
        llama_spellings(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn llama_cpp_multi_letter_flags_become_long_flags() {
        assert_eq!(
            run(&["gauge", "serve", "-np", "8", "-ngl=99", "-n", "64"]),
            [
                "gauge",
                "serve",
                "--parallel",
                "8",
                "--n-gpu-layers=99",
                "-n",
                "64"
            ]
        );
        assert_eq!(
            run(&["gauge", "x", "--", "-np"]),
            ["gauge", "x", "--", "-np"]
        );
        assert_eq!(run(&["gauge", "-npx"]), ["gauge", "-npx"]);
    }
}
