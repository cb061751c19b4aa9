//! `gauge delim` — the HumanEval threshold/delimiter analysis (docs/PROTOCOL.md §5.1): where the
//! sign-branched penalty flips a greedy decision, whether the note's closed form predicts it, and
//! how often the flipped token was a delimiter the code needed.
//!
//! Every HumanEval prompt (verbatim, no chat template, no gauge shift) is decoded greedily for
//! exactly `tokens` tokens (no EOS stop) at each (op, θ). At every position the decoder records the
//! pre-penalty facts of the fp32 row ([`facts`]: top-1, runner-up, their logits and seen status,
//! the best unseen token, the log-partition) and the emitted token; the top-1 is tagged with the
//! note's delimiter classifier ([`classify`]). A flip is `emitted ≠ top-1`.
//!
//! Pooled over θ ≠ 1 (θ = 1 is the gate: no op may flip there):
//! * the note's predictor `g < z_top·(1 − 1/θ)` on its "clean" positions (top-1 seen, `z_top > 0`,
//!   runner-up unseen): TPR, TNR, balanced accuracy, and the share of flips landing on the
//!   runner-up;
//! * gauge's two-sided predictor ([`predict`]) on every position, and on the two-sided slice
//!   (top-1 and runner-up both seen) where the note's form does not apply;
//! * the code structural-flip rate (per record `#(flip ∧ delimiter top-1) / #positions`, averaged
//!   over records), the overall flip fraction, and the confidence contrast (mean `z_top` of flipped
//!   vs kept positions among seen, positive top-1s, with the note's two-sample bootstrap).
//!
//! The decode shares work like the probe (one prefill per prompt, forks on disagreement, one batch
//! for a chunk of prompts) and resumes per chunk ([`crate::run::resume`]).

pub mod analysis;
pub mod classify;
pub mod config;
pub mod facts;
pub mod humaneval;
pub mod predict;
pub mod report;

pub use analysis::{
    analyze, Confusion, DelimSummary, OpDelim, PredictorScore, SliceCount, ThetaDelim,
};
pub use config::{DelimConfig, DelimLine, DELIM_FORMAT};
pub use report::{render_delim_table, NOTE_HUMANEVAL};

use crate::error::LabError;
use crate::ops::SeenSet;
use crate::plot::line_chart_svg;
use crate::run::codec::{tokenize_prompts, PromptStyle};
use crate::run::decode::{decode_chunk, Observer, PrefixJob};
use crate::run::resume::{open_run, progress_bar, write_outputs, ChunkRunner};
use crate::run::spec::{check_in_plan, Grid};
use crate::run::{Codec, RunControl};
use crate::stack::Stack;
use classify::{classify_bytes, Tags};
use facts::{row_facts, Positions, RowFacts};
use gauge_engine::LogitSource;
use gauge_sampling::TokenId;
use humaneval::Task;
use predict::{note_prediction, predicts_flip, slice, Slice};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The directory a configuration writes to.
pub fn delim_run_dir(out_root: &Path, cfg: &DelimConfig) -> PathBuf {
    out_root.join(cfg.run_id())
}

/// Run (or resume) the analysis on `source` over the first `cfg.prompts` of `tasks`, writing
/// `out_root/<run-id>/`. Returns [`LabError::GateFailed`] (after writing every output) if an op
/// flipped at θ = 1.
pub fn run_delim(
    source: &mut dyn LogitSource,
    codec: &dyn Codec,
    tasks: &[Task],
    cfg: &DelimConfig,
    out_root: &Path,
    ctl: &RunControl,
) -> Result<DelimSummary, LabError> {
    cfg.validate()?;
    if cfg.prompts > tasks.len() {
        return Err(LabError::config(
            "prompts",
            cfg.prompts,
            &format!("1..={} (problems in the data file)", tasks.len()),
        ));
    }
    let tasks = &tasks[..cfg.prompts];
    let n_ctx = source.n_ctx();
    // The note tokenized with each HF tokenizer's defaults: BOS iff the model asks, no
    // special-token parsing.
    let style = PromptStyle {
        chat: false,
        parse_special: false,
    };
    let texts = tasks.iter().map(|t| (t.index, t.prompt.as_str()));
    let prompts = tokenize_prompts(codec, texts, style, source.n_vocab())?;
    for (t, ids) in tasks.iter().zip(&prompts) {
        if ids.len() + cfg.tokens > n_ctx {
            return Err(LabError::config(
                "tokens",
                cfg.tokens,
                &format!(
                    "prompt {} ({}) has {} tokens: prompt + tokens must fit the context of {n_ctx}",
                    t.index,
                    t.task_id,
                    ids.len()
                ),
            ));
        }
    }
    let plan = cfg.plan();
    let chunking = cfg.chunking();
    let expected = |(_, chunk): (u8, usize)| chunking.chunk(chunk).len() * plan.len();
    let check = |l: &DelimLine| -> Result<(), String> {
        check_in_plan(&plan, &chunking, (l.prompt, l.chunk, l.run), l.op, l.theta)?;
        let n = l.positions.len();
        if n != cfg.tokens
            || !l.positions.is_consistent()
            || l.structural.len() != n
            || l.bracket.len() != n
            || l.flip.len() != n
            || l.note_predicted.len() != n
            || l.gauge_predicted.len() != n
        {
            return Err(format!(
                "line for prompt {} run {}: {} positions, expected {}",
                l.prompt, l.run, n, cfg.tokens
            ));
        }
        Ok(())
    };
    let (dir, mut log) = open_run(out_root, &cfg.run_id(), cfg, &expected, &check, |l| {
        l.prompt_tokens == prompts[l.prompt].len()
    })?;
    let done = log.done_units(0);
    let opts = ctl.decode_options(cfg.tokens, cfg.window, Stack::Gauge);
    let bar = progress_bar(
        ctl.progress,
        "HumanEval delim ",
        (cfg.prompts * cfg.tokens) as u64,
        done.iter()
            .map(|&k| (chunking.chunk(k).len() * cfg.tokens) as u64)
            .sum(),
        "prompt-positions",
    );
    let mut tags: HashMap<TokenId, Tags> = HashMap::new();
    ChunkRunner::new(ctl).run_phase(&mut log, 0, chunking.n_chunks(), |k| {
        let range = chunking.chunk(k);
        let jobs = PrefixJob::same_plan(&prompts, range.clone(), &plan);
        let mut obs = PositionLog {
            facts: None,
            positions: vec![vec![Positions::with_capacity(cfg.tokens); plan.len()]; jobs.len()],
            bar: &bar,
        };
        let results = decode_chunk(source, &jobs, opts, &mut obs)?;
        let mut lines = Vec::new();
        for ((p, res), positions) in range.zip(results).zip(obs.positions) {
            for (run, ((spec, r), positions)) in plan.iter().zip(res).zip(positions).enumerate() {
                let t: Vec<Tags> = positions
                    .top1
                    .iter()
                    .map(|&id| {
                        *tags
                            .entry(id)
                            .or_insert_with(|| classify_bytes(&codec.token_text(id)))
                    })
                    .collect();
                let mut text = Vec::new();
                for &e in &positions.emitted {
                    text.extend_from_slice(&codec.piece(e));
                }
                let n = positions.len();
                let facts: Vec<_> = (0..n).map(|k| positions.facts(k)).collect();
                lines.push(DelimLine {
                    chunk: k,
                    prompt: p,
                    task_id: tasks[p].task_id.clone(),
                    run,
                    op: spec.op,
                    theta: spec.theta,
                    prompt_tokens: prompts[p].len(),
                    structural: t.iter().map(|t| t.structural).collect(),
                    bracket: t.iter().map(|t| t.bracket).collect(),
                    flip: (0..n)
                        .map(|k| positions.emitted[k] != facts[k].top1)
                        .collect(),
                    note_predicted: facts
                        .iter()
                        .map(|f| (slice(f) == Slice::Clean).then(|| note_prediction(f, spec.theta)))
                        .collect(),
                    gauge_predicted: facts
                        .iter()
                        .map(|f| predicts_flip(spec.op, spec.theta, spec.alpha, f))
                        .collect(),
                    gen_text: String::from_utf8_lossy(&text).into_owned(),
                    positions,
                    forward_tokens: r.forward_tokens,
                    naive_forward_tokens: (prompts[p].len() + cfg.tokens - 1) as u64,
                });
            }
        }
        Ok(lines)
    })?;
    bar.finish_and_clear();
    let summary = analyze(cfg, &log.lines);
    let plots = if ctl.plots {
        vec![(
            "delim_vs_theta",
            line_chart_svg(&report::delim_chart(&summary)),
        )]
    } else {
        Vec::new()
    };
    write_outputs(&dir, &summary, plots, |names| {
        report::delim_report(cfg, &summary, names)
    })?;
    if let Some(details) = summary.gate_failure() {
        return Err(LabError::GateFailed { details });
    }
    Ok(summary)
}

/// delim's view of the decode: every position's pre-penalty facts (one O(V) pass per group row,
/// shared by the group's runs) with the token each run emitted.
struct PositionLog<'a> {
    facts: Option<RowFacts>,
    /// `[job][run]`.
    positions: Vec<Vec<Positions>>,
    bar: &'a indicatif::ProgressBar,
}

impl Observer for PositionLog<'_> {
    fn new_row(&mut self) {
        self.facts = None;
    }

    fn record(&mut self, job: usize, run: usize, row: &[f32], seen: &SeenSet, pick: TokenId) {
        let f = *self.facts.get_or_insert_with(|| row_facts(row, seen));
        self.positions[job][run].push(&f, pick);
    }

    fn stepped(&mut self) {
        self.bar.inc(self.positions.len() as u64);
    }
}
