//! `gauge calibrate` — FIXCAL (docs/PROTOCOL.md §6): which normalized θ′ suppresses repetition as
//! much as a raw `repeat_penalty` θ on this model, and when none does, what to use instead.
//!
//! Normalized acts on log-probabilities (O(1)) rather than raw logits (O(10)), so a tuned θ must
//! be re-set when switching modes, and the map is model-specific. The calibration decodes the
//! note's 16 fixed prompts greedily (256 tokens, no EOS stop, the note's seen set), first the raw
//! grid (θ = 1 and every anchor) together with normalized θ′ = 1 and θ′ = 10, then bisects θ′ per
//! anchor and metric ([`bisect`]); for anchors UNREACHABLE on rep_rate it also bisects a presence
//! penalty α (subtractive, shift-invariant) to say what to use instead. The θ = 1 run also yields
//! the closed-form requirements ([`closed_form`]).
//!
//! # Rounds, caching and resumption
//! Each round decodes every evaluation the searches need next, together: one shared decode tree
//! per prompt (the run core), so runs that agree share their sequence. A finished evaluation (one
//! dial value over all prompts) is one resumption unit of `raw.jsonl`, keyed by its 9-decimal
//! value as in the note; the dyadic midpoints coincide across anchors and metrics, so the cache
//! does much of the search. The searches keep no state: each round replays them over the cache, so
//! the same command started again continues exactly where a killed run stopped.

pub mod analysis;
pub mod bisect;
pub mod closed_form;
pub mod config;
pub mod metrics;
pub mod prompts;
pub mod report;

pub use analysis::{analyze, AnchorResult, CalibSummary};
pub use config::{CalibConfig, CalibLine, Dial, CALIB_FORMAT};
pub use metrics::{Metric, Metrics};
pub use report::render_calibrate_table;

use crate::error::LabError;
use crate::run::codec::{tokenize_prompts, PromptStyle};
use crate::run::decode::{decode_chunk, PrefixJob};
use crate::run::resume::{open_run, progress_bar, write_outputs};
use crate::run::{Codec, RunControl, RunSpec};
use crate::stack::Stack;
use analysis::{next_round, Cache};
use closed_form::LoopRecorder;
use gauge_engine::LogitSource;
use gauge_sampling::TokenId;
use std::path::{Path, PathBuf};

/// The directory a configuration writes to.
pub fn calibrate_run_dir(out_root: &Path, cfg: &CalibConfig) -> PathBuf {
    out_root.join(cfg.run_id())
}

/// Run (or resume) the calibration on `source`, tokenizing the prompts with `codec` (the model's
/// defaults, no special-token parsing), writing `out_root/<run-id>/`.
pub fn run_calibrate(
    source: &mut dyn LogitSource,
    codec: &dyn Codec,
    cfg: &CalibConfig,
    out_root: &Path,
    ctl: &RunControl,
) -> Result<CalibSummary, LabError> {
    cfg.validate()?;
    let texts = prompts::fixed_prompts()[..cfg.prompts]
        .iter()
        .enumerate()
        .map(|(i, t)| (i, t.as_str()));
    let style = PromptStyle {
        chat: false,
        parse_special: false,
    };
    let prompts = tokenize_prompts(codec, texts, style, source.n_vocab())?;
    let expected = |_unit: (u8, usize)| cfg.prompts;
    let check = |l: &CalibLine| config::check_line(cfg, l);
    let (dir, mut log) = open_run(out_root, &cfg.run_id(), cfg, &expected, &check, |l| {
        l.prompt == prompts[l.prompt_idx]
    })?;
    let opts = ctl.decode_options(cfg.tokens, None, Stack::Gauge);
    let mut chunks_run = 0usize;
    for round in 0.. {
        let need = next_round(cfg, &Cache::new(&log.lines));
        if need.is_empty() {
            break;
        }
        let label = format!("calibrate round {round}: {} ", describe(&need));
        let units = decode_round(
            source,
            cfg,
            &prompts,
            &need,
            round,
            opts,
            ctl,
            &label,
            &mut chunks_run,
        )?;
        for unit in units {
            log.append(unit)?;
        }
    }
    let summary = analyze(cfg, &log.lines)
        .ok_or_else(|| LabError::config("tokens", cfg.tokens, "a run whose searches can finish"))?;
    let plots = if ctl.plots {
        vec![(
            "calibrate_rep_rate_vs_dial",
            report::curve_chart_svg(&summary),
        )]
    } else {
        Vec::new()
    };
    write_outputs(&dir, &summary, plots, |names| {
        report::calibrate_report(cfg, &summary, names)
    })?;
    Ok(summary)
}

/// `normalized θ′ {5.5, 3.25}, presence α {5}` for a progress bar.
fn describe(need: &[(Dial, f64)]) -> String {
    let mut parts = Vec::new();
    for dial in [Dial::Ctrl, Dial::Normalized, Dial::Presence] {
        let v: Vec<String> = need
            .iter()
            .filter(|(d, _)| *d == dial)
            .map(|(_, v)| format!("{v}"))
            .collect();
        if !v.is_empty() {
            parts.push(format!("{dial} {{{}}}", v.join(",")));
        }
    }
    parts.join(", ")
}

/// Decode every evaluation of one round over all prompts; returns one complete unit (all prompts)
/// per evaluation. Prompts are cut into chunks of at most `max_sequences` live sequences.
#[allow(clippy::too_many_arguments)]
fn decode_round(
    source: &mut dyn LogitSource,
    cfg: &CalibConfig,
    prompts: &[Vec<TokenId>],
    need: &[(Dial, f64)],
    round: usize,
    opts: crate::run::decode::DecodeOptions,
    ctl: &RunControl,
    label: &str,
    chunks_run: &mut usize,
) -> Result<Vec<Vec<CalibLine>>, LabError> {
    let plan: Vec<RunSpec> = need.iter().map(|&(d, v)| d.spec(v)).collect();
    // The unpenalized run's loop tokens feed the closed form.
    let base_run = need.iter().position(|&(d, v)| d == Dial::Ctrl && v == 1.0);
    let batch = (cfg.max_sequences / plan.len()).max(1);
    let bar = progress_bar(
        ctl.progress,
        label,
        (cfg.prompts * cfg.tokens) as u64,
        0,
        "prompt-positions",
    );
    let mut units: Vec<Vec<CalibLine>> = vec![Vec::new(); need.len()];
    for start in (0..cfg.prompts).step_by(batch) {
        if ctl.abort_after_chunks.is_some_and(|n| *chunks_run >= n) {
            return Err(LabError::Aborted {
                chunks: *chunks_run,
            });
        }
        let range = start..(start + batch).min(cfg.prompts);
        let jobs = PrefixJob::same_plan(prompts, range.clone(), &plan);
        let mut obs = LoopRecorder::new(base_run.unwrap_or(usize::MAX), jobs.len(), &bar);
        let results = decode_chunk(source, &jobs, opts, &mut obs)?;
        for ((p, res), loops) in range.zip(results).zip(obs.loops) {
            let mut loops = Some(loops);
            for (run, r) in res.into_iter().enumerate() {
                let (dial, value) = need[run];
                units[run].push(CalibLine {
                    dial,
                    value,
                    prompt_idx: p,
                    round,
                    prompt: prompts[p].clone(),
                    naive_forward_tokens: (prompts[p].len() + r.tokens.len()).saturating_sub(1)
                        as u64,
                    tokens: r.tokens,
                    forward_tokens: r.forward_tokens,
                    loops: if Some(run) == base_run {
                        loops.take()
                    } else {
                        None
                    },
                });
            }
        }
        *chunks_run += 1;
    }
    bar.finish_and_clear();
    Ok(units)
}
