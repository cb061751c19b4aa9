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

pub mod classify;
pub mod facts;
pub mod humaneval;
pub mod predict;

use crate::error::LabError;
use crate::ops::{Op, SeenSet};
use crate::plot::{line_chart_svg, LineChart, Series};
use crate::run::codec::{tokenize_prompts, PromptStyle};
use crate::run::decode::{decode_chunk, Observer, PrefixJob};
use crate::run::resume::{open_run, progress_bar, write_outputs, ChunkLine, ChunkRunner};
use crate::run::spec::{
    check_alpha, check_count, check_in_plan, check_model, check_ops, check_thetas, Chunking, Grid,
    ThetaFloor, MAX_TOKENS,
};
use crate::run::{op_theta_plan, Codec, RunControl, RunSpec};
use crate::stack::Stack;
use crate::stats::{bootstrap_diff_ci, f32_to_decimal_f64, mean};
use classify::{classify_bytes, Tags};
use facts::{row_facts, Positions, RowFacts};
use gauge_engine::LogitSource;
use gauge_sampling::TokenId;
use humaneval::Task;
use predict::{note_prediction, predicts_flip, slice, Slice};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Bumped when a change makes old results incomparable (part of the run id).
pub const DELIM_FORMAT: u32 = 1;

/// Every knob of `gauge delim`. `Default` is the quick grid; [`DelimConfig::full_grid`] the note's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelimConfig {
    /// Model label for reports and the run id.
    pub model: String,
    /// The first N HumanEval problems.
    pub prompts: usize,
    /// Greedy tokens per decode (the note: 256).
    pub tokens: usize,
    /// θ grid: must contain 1.0 (the gate); every θ ≥ 1 (the predictors are for penalties).
    pub thetas: Vec<f32>,
    /// Operators (the note: ctrl = "raw", and normalized = "fix" for StarCoder2).
    pub ops: Vec<Op>,
    /// α when `subtractive` is among the ops.
    pub alpha: f32,
    /// `None`: prompt + all generated tokens are seen (the note); `Some(n)`: llama.cpp window.
    pub window: Option<usize>,
    /// Resamples of the confidence-contrast bootstrap (the note: 10⁴).
    pub bootstrap_resamples: usize,
    /// Its seed (`random.Random(0)`).
    pub bootstrap_seed: u64,
    /// Prompts decoded together (the resumption unit).
    pub batch_prompts: usize,
}

impl Default for DelimConfig {
    fn default() -> Self {
        DelimConfig {
            model: "smollm2-135m-instruct".into(),
            prompts: 40,
            tokens: 256,
            thetas: vec![1.0, 1.1, 1.3, 1.5],
            ops: vec![Op::Ctrl, Op::Normalized],
            alpha: 1.0,
            window: None,
            bootstrap_resamples: 10_000,
            bootstrap_seed: 0,
            batch_prompts: 4,
        }
    }
}

impl DelimConfig {
    /// The note's grid: 164 prompts × 256 tokens × θ ∈ {1, 1.1, 1.2, 1.3, 1.4, 1.5}.
    pub fn full_grid(model: &str) -> Self {
        DelimConfig {
            model: model.into(),
            prompts: humaneval::HUMANEVAL_PROBLEMS,
            thetas: vec![1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
            ..DelimConfig::default()
        }
    }

    /// Check every field.
    pub fn validate(&self) -> Result<(), LabError> {
        check_model(&self.model)?;
        check_count("prompts", self.prompts, usize::MAX)?;
        check_count("tokens", self.tokens, MAX_TOKENS)?;
        check_thetas(&self.thetas, ThetaFloor::One, true)?;
        if self.thetas.len() < 2 {
            return Err(LabError::config(
                "theta",
                format!("{:?}", self.thetas),
                "1.0 (the gate: no flips with the penalty off) and at least one θ > 1",
            ));
        }
        check_ops(&self.ops)?;
        check_alpha(self.alpha)?;
        check_count("bootstrap_resamples", self.bootstrap_resamples, usize::MAX)?;
        check_count("batch_prompts", self.batch_prompts, usize::MAX)?;
        Ok(())
    }

    /// Deterministic run id (model label + hash of the configuration).
    pub fn run_id(&self) -> String {
        crate::run::resume::run_id("delim", DELIM_FORMAT, &self.model, self)
    }

    /// The decodes of every prompt, op-major.
    pub fn plan(&self) -> Vec<RunSpec> {
        op_theta_plan(&self.ops, &self.thetas, self.alpha)
    }

    /// The θ values pooled by the analysis (every θ ≠ 1), in grid order.
    pub fn pooled_thetas(&self) -> Vec<f32> {
        self.thetas.iter().copied().filter(|&t| t != 1.0).collect()
    }
}

impl Grid for DelimConfig {
    fn chunking(&self) -> Chunking {
        Chunking {
            prompts: self.prompts,
            batch: self.batch_prompts,
            runs_per_prompt: self.plan().len(),
        }
    }
    fn set_batch(&mut self, batch: usize) {
        self.batch_prompts = batch;
    }
}

/// One decode: the raw record of (prompt, op, θ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelimLine {
    pub chunk: usize,
    /// Problem index (the note's `prompt_idx`).
    pub prompt: usize,
    pub task_id: String,
    /// Index in the plan.
    pub run: usize,
    pub op: Op,
    pub theta: f32,
    pub prompt_tokens: usize,
    /// Per-position pre-penalty facts and the emitted tokens.
    pub positions: Positions,
    /// The top-1 is a delimiter (the note's set, with `'` and whitespace-only tokens).
    pub structural: Vec<bool>,
    /// The brackets-only re-slice of the same tag.
    pub bracket: Vec<bool>,
    /// Observed: emitted ≠ top-1 (derived from `positions`, kept for readers of the raw file).
    pub flip: Vec<bool>,
    /// The note's prediction `g < z_top(1 − 1/θ)` where its assumptions hold (clean positions),
    /// `null` elsewhere.
    pub note_predicted: Vec<Option<bool>>,
    /// gauge's two-sided prediction for this op (every position).
    pub gauge_predicted: Vec<bool>,
    /// The generated text (control tokens as nothing).
    pub gen_text: String,
    pub forward_tokens: u64,
    pub naive_forward_tokens: u64,
}

impl ChunkLine for DelimLine {
    fn unit(&self) -> (u8, usize) {
        (0, self.chunk)
    }
    fn key(&self) -> (u8, usize, usize) {
        (0, self.prompt, self.run)
    }
}

/// A confusion matrix of a flip predictor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Confusion {
    pub tp: u64,
    pub fp: u64,
    pub tn: u64,
    pub fn_: u64,
}

impl Confusion {
    /// Count one position.
    pub fn add(&mut self, predicted: bool, actual: bool) {
        match (predicted, actual) {
            (true, true) => self.tp += 1,
            (true, false) => self.fp += 1,
            (false, false) => self.tn += 1,
            (false, true) => self.fn_ += 1,
        }
    }

    /// The scores (rates are `None` without positives / negatives).
    pub fn score(&self) -> PredictorScore {
        let ratio = |a: u64, b: u64| (a + b > 0).then(|| a as f64 / (a + b) as f64);
        let tpr = ratio(self.tp, self.fn_);
        let tnr = ratio(self.tn, self.fp);
        PredictorScore {
            n: self.tp + self.fp + self.tn + self.fn_,
            tp: self.tp,
            fp: self.fp,
            tn: self.tn,
            fn_: self.fn_,
            tpr,
            tnr,
            balanced_accuracy: match (tpr, tnr) {
                (Some(a), Some(b)) => Some((a + b) / 2.0),
                (Some(a), None) | (None, Some(a)) => Some(a),
                (None, None) => None,
            },
        }
    }
}

/// A predictor's confusion and rates. With only one class present, the balanced accuracy is that
/// class's rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PredictorScore {
    pub n: u64,
    pub tp: u64,
    pub fp: u64,
    pub tn: u64,
    #[serde(rename = "fn")]
    pub fn_: u64,
    pub tpr: Option<f64>,
    pub tnr: Option<f64>,
    pub balanced_accuracy: Option<f64>,
}

/// Positions and flips of one slice of the derivation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SliceCount {
    pub positions: u64,
    pub flips: u64,
}

/// Per-θ numbers of one op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThetaDelim {
    pub theta: f64,
    pub positions: u64,
    pub flips: u64,
    pub flip_fraction: f64,
    pub delimiter_flip_rate: f64,
    pub clean_positions: u64,
    pub note_balanced_accuracy: Option<f64>,
    pub gauge_balanced_accuracy: Option<f64>,
}

/// Everything measured for one operator, pooled over θ ≠ 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpDelim {
    pub op: Op,
    /// θ = 1: flips (must be 0) and positions.
    pub gate_flips: u64,
    pub gate_positions: u64,
    pub positions: u64,
    pub flips: u64,
    /// Σ flips / Σ positions.
    pub flip_fraction: f64,
    /// The note's clean positions: top-1 seen, z_top > 0, runner-up unseen.
    pub clean: SliceCount,
    /// The note's `g < z_top(1 − 1/θ)` on clean positions (raw logits, whatever the op).
    pub note_predictor: PredictorScore,
    /// Share of clean flips that emit the pre-penalty runner-up.
    pub clean_flips_on_runner_up: Option<f64>,
    /// Share of all flips that emit the runner-up.
    pub flips_on_runner_up: Option<f64>,
    /// gauge's two-sided predictor (the op's own margin, best unseen competitor) on every position.
    pub gauge_predictor: PredictorScore,
    /// The same on the two-sided slice only (top-1 and runner-up seen).
    pub gauge_predictor_two_sided: PredictorScore,
    pub top_unseen: SliceCount,
    pub one_sided_nonpositive: SliceCount,
    pub two_sided: SliceCount,
    /// Mean over records of #(flip ∧ delimiter top-1) / #positions (the note's Table 4 row 2).
    pub delimiter_flip_rate: f64,
    /// The same with the brackets-only tag.
    pub bracket_flip_rate: f64,
    /// Share of flips whose top-1 was a delimiter.
    pub delimiter_share_of_flips: Option<f64>,
    /// Mean z_top of flipped / kept positions among seen top-1s with z_top > 0, and the 95% CI of
    /// the difference.
    pub z_top_flipped: Option<f64>,
    pub z_top_kept: Option<f64>,
    pub z_top_diff_ci95: Option<[f64; 2]>,
    pub per_theta: Vec<ThetaDelim>,
}

/// Result of `gauge delim` (what `--json` prints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelimSummary {
    pub model: String,
    pub prompts: usize,
    pub tokens: usize,
    /// The pooled θ values.
    pub pooled_thetas: Vec<f64>,
    pub ops: Vec<OpDelim>,
    pub forward_tokens: u64,
    pub naive_forward_tokens: u64,
}

impl DelimSummary {
    /// The gate failure, if any op flipped at θ = 1.
    pub fn gate_failure(&self) -> Option<String> {
        let bad: Vec<String> = self
            .ops
            .iter()
            .filter(|o| o.gate_flips != 0)
            .map(|o| {
                format!(
                    "{} flipped {} of {} positions",
                    o.op, o.gate_flips, o.gate_positions
                )
            })
            .collect();
        (!bad.is_empty()).then(|| bad.join("; "))
    }

    /// The entry of one op.
    pub fn op(&self, op: Op) -> Option<&OpDelim> {
        self.ops.iter().find(|o| o.op == op)
    }
}

/// The note's numbers (docs/PROTOCOL.md §1.6): (metric, StarCoder2-7B raw, StarCoder2-7B fix, Qwen2.5-Coder-7B raw).
pub const NOTE_HUMANEVAL: [(&str, f64, f64, f64); 7] = [
    ("clean positions", 48_919.0, 77_754.0, 47_903.0),
    ("clean flips", 27_720.0, 1_583.0, 31_149.0),
    (
        "balanced accuracy (note's predictor)",
        0.99934,
        0.81343,
        0.99964,
    ),
    ("clean flips on the runner-up", 1.0, 1.0, 1.0),
    ("delimiter-flip rate", 0.13897, 0.00168, 0.17000),
    ("overall flip fraction", 0.31891, 0.01123, 0.43131),
    (
        "mean z_top flipped − kept",
        17.10 - 22.02,
        14.83 - 23.10,
        23.77 - 29.16,
    ),
];

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
        vec![("delim_vs_theta", line_chart_svg(&delim_chart(&summary)))]
    } else {
        Vec::new()
    };
    write_outputs(&dir, &summary, plots, |names| {
        delim_report(cfg, &summary, names)
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

/// Accumulators of one op (pooled) or one (op, θ).
#[derive(Default)]
struct Acc {
    positions: u64,
    flips: u64,
    clean: SliceCount,
    top_unseen: SliceCount,
    nonpos: SliceCount,
    two_sided: SliceCount,
    note: Confusion,
    gauge: Confusion,
    gauge_two: Confusion,
    clean_runner: u64,
    flips_runner: u64,
    flips_delim: u64,
    record_delim_rates: Vec<f64>,
    record_bracket_rates: Vec<f64>,
    z_flipped: Vec<f64>,
    z_kept: Vec<f64>,
}

impl Acc {
    fn add_line(&mut self, l: &DelimLine, alpha: f32) {
        let p = &l.positions;
        let n = p.len();
        let (mut d, mut b) = (0u64, 0u64);
        for k in 0..n {
            let f = p.facts(k);
            let e = p.emitted[k];
            let flip = e != f.top1;
            self.positions += 1;
            let s = slice(&f);
            let count = match s {
                Slice::TopUnseen => &mut self.top_unseen,
                Slice::Clean => &mut self.clean,
                Slice::OneSidedNonPositive => &mut self.nonpos,
                Slice::TwoSided => &mut self.two_sided,
            };
            count.positions += 1;
            let pred = predicts_flip(l.op, l.theta, alpha, &f);
            self.gauge.add(pred, flip);
            if s == Slice::TwoSided {
                self.gauge_two.add(pred, flip);
            }
            if s == Slice::Clean {
                self.note.add(note_prediction(&f, l.theta), flip);
            }
            if f.top1_seen && f.z_top > 0.0 {
                let z = f64::from(f.z_top);
                if flip {
                    self.z_flipped.push(z);
                } else {
                    self.z_kept.push(z);
                }
            }
            if flip {
                self.flips += 1;
                count.flips += 1;
                let on_runner = e == f.runner;
                self.flips_runner += u64::from(on_runner);
                if s == Slice::Clean {
                    self.clean_runner += u64::from(on_runner);
                }
                if l.structural[k] {
                    d += 1;
                }
                if l.bracket[k] {
                    b += 1;
                }
            }
        }
        self.flips_delim += d;
        if n > 0 {
            self.record_delim_rates.push(d as f64 / n as f64);
            self.record_bracket_rates.push(b as f64 / n as f64);
        }
    }
}

fn frac(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// Summarise the lines of a run (a pure function of the lines, so resumption cannot change it).
pub fn analyze(cfg: &DelimConfig, lines: &[DelimLine]) -> DelimSummary {
    let mut sorted: Vec<&DelimLine> = lines.iter().collect();
    sorted.sort_by_key(|l| (l.prompt, l.run));
    let pooled = cfg.pooled_thetas();
    let mut ops = Vec::new();
    for &op in &cfg.ops {
        let mine = || sorted.iter().filter(move |l| l.op == op);
        let mut gate = Acc::default();
        for l in mine().filter(|l| l.theta == 1.0) {
            gate.add_line(l, cfg.alpha);
        }
        // Records in (prompt, θ) order, as the note's analyzer walks them (the means are sums).
        let mut all = Acc::default();
        let mut by_theta: Vec<Acc> = pooled.iter().map(|_| Acc::default()).collect();
        for l in mine() {
            if let Some(i) = pooled.iter().position(|&t| t == l.theta) {
                all.add_line(l, cfg.alpha);
                by_theta[i].add_line(l, cfg.alpha);
            }
        }
        let mut per_theta = Vec::new();
        for (&th, a) in pooled.iter().zip(&by_theta) {
            per_theta.push(ThetaDelim {
                theta: f32_to_decimal_f64(th),
                positions: a.positions,
                flips: a.flips,
                flip_fraction: frac(a.flips, a.positions).unwrap_or(0.0),
                delimiter_flip_rate: mean(&a.record_delim_rates).unwrap_or(0.0),
                clean_positions: a.clean.positions,
                note_balanced_accuracy: a.note.score().balanced_accuracy,
                gauge_balanced_accuracy: a.gauge.score().balanced_accuracy,
            });
        }
        let zf = mean(&all.z_flipped);
        let zk = mean(&all.z_kept);
        ops.push(OpDelim {
            op,
            gate_flips: gate.flips,
            gate_positions: gate.positions,
            positions: all.positions,
            flips: all.flips,
            flip_fraction: frac(all.flips, all.positions).unwrap_or(0.0),
            clean: all.clean,
            note_predictor: all.note.score(),
            clean_flips_on_runner_up: frac(all.clean_runner, all.clean.flips),
            flips_on_runner_up: frac(all.flips_runner, all.flips),
            gauge_predictor: all.gauge.score(),
            gauge_predictor_two_sided: all.gauge_two.score(),
            top_unseen: all.top_unseen,
            one_sided_nonpositive: all.nonpos,
            two_sided: all.two_sided,
            delimiter_flip_rate: mean(&all.record_delim_rates).unwrap_or(0.0),
            bracket_flip_rate: mean(&all.record_bracket_rates).unwrap_or(0.0),
            delimiter_share_of_flips: frac(all.flips_delim, all.flips),
            z_top_flipped: zf,
            z_top_kept: zk,
            z_top_diff_ci95: bootstrap_diff_ci(
                &all.z_flipped,
                &all.z_kept,
                cfg.bootstrap_resamples,
                cfg.bootstrap_seed,
            ),
            per_theta,
        });
    }
    DelimSummary {
        model: cfg.model.clone(),
        prompts: cfg.prompts,
        tokens: cfg.tokens,
        pooled_thetas: pooled.iter().map(|&t| f32_to_decimal_f64(t)).collect(),
        ops,
        forward_tokens: lines.iter().map(|l| l.forward_tokens).sum(),
        naive_forward_tokens: lines.iter().map(|l| l.naive_forward_tokens).sum(),
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.prec$}"))
}

fn thetas_text(v: &[f64]) -> String {
    v.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The metric rows shared by the terminal table and the report: (label, value per op).
fn metric_rows(s: &DelimSummary) -> Vec<(&'static str, Vec<String>)> {
    let col = |f: &dyn Fn(&OpDelim) -> String| s.ops.iter().map(f).collect::<Vec<_>>();
    let score = |p: &PredictorScore| {
        format!(
            "{} (TPR {}, TNR {})",
            opt(p.balanced_accuracy, 5),
            opt(p.tpr, 5),
            opt(p.tnr, 5)
        )
    };
    vec![
        (
            "θ = 1 gate flips",
            col(&|o| format!("{}/{}", o.gate_flips, o.gate_positions)),
        ),
        (
            "overall flip fraction",
            col(&|o| format!("{:.5} ({}/{})", o.flip_fraction, o.flips, o.positions)),
        ),
        (
            "delimiter-flip rate (per record)",
            col(&|o| format!("{:.5}", o.delimiter_flip_rate)),
        ),
        (
            "brackets-only flip rate",
            col(&|o| format!("{:.5}", o.bracket_flip_rate)),
        ),
        (
            "flips on a delimiter top-1",
            col(&|o| opt(o.delimiter_share_of_flips, 4)),
        ),
        (
            "clean positions / flips",
            col(&|o| format!("{} / {}", o.clean.positions, o.clean.flips)),
        ),
        (
            "note's predictor, balanced acc. (clean)",
            col(&|o| score(&o.note_predictor)),
        ),
        (
            "clean flips on the runner-up",
            col(&|o| opt(o.clean_flips_on_runner_up, 4)),
        ),
        (
            "all flips on the runner-up",
            col(&|o| opt(o.flips_on_runner_up, 4)),
        ),
        (
            "gauge two-sided predictor (all)",
            col(&|o| score(&o.gauge_predictor)),
        ),
        (
            "gauge predictor, two-sided slice",
            col(&|o| score(&o.gauge_predictor_two_sided)),
        ),
        (
            "two-sided positions / flips",
            col(&|o| format!("{} / {}", o.two_sided.positions, o.two_sided.flips)),
        ),
        (
            "mean z_top flipped vs kept",
            col(&|o| format!("{} vs {}", opt(o.z_top_flipped, 2), opt(o.z_top_kept, 2))),
        ),
        (
            "  difference, 95% CI",
            col(&|o| {
                o.z_top_diff_ci95
                    .map_or("—".into(), |c| format!("[{:.2}, {:.2}]", c[0], c[1]))
            }),
        ),
    ]
}

/// The terminal table of `gauge delim`.
pub fn render_delim_table(s: &DelimSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "gauge delim — {}: {} HumanEval prompts × {} tokens, pooled θ ∈ {{{}}}",
        s.model,
        s.prompts,
        s.tokens,
        thetas_text(&s.pooled_thetas)
    );
    let _ = write!(o, "{:<42}", "metric");
    for op in &s.ops {
        let _ = write!(o, "  {:<40}", op.op.name());
    }
    o.push('\n');
    for (label, vals) in metric_rows(s) {
        let _ = write!(o, "{label:<42}");
        for v in vals {
            let _ = write!(o, "  {v:<40}");
        }
        o.push('\n');
    }
    let pass = s.gate_failure().is_none();
    let _ = writeln!(
        o,
        "validity gate (θ = 1 flips 0 for every op): {}",
        if pass { "PASS" } else { "FAIL" }
    );
    let _ = writeln!(
        o,
        "{}",
        crate::report::work_line(s.forward_tokens, s.naive_forward_tokens)
    );
    o
}

fn delim_chart(s: &DelimSummary) -> LineChart {
    let mut series = Vec::new();
    for o in &s.ops {
        series.push(Series {
            name: format!("{} flip fraction", o.op),
            points: o
                .per_theta
                .iter()
                .map(|t| (t.theta, t.flip_fraction))
                .collect(),
            err: None,
            dashed: false,
        });
        series.push(Series {
            name: format!("{} delimiter-flip rate", o.op),
            points: o
                .per_theta
                .iter()
                .map(|t| (t.theta, t.delimiter_flip_rate))
                .collect(),
            err: None,
            dashed: true,
        });
    }
    LineChart {
        title: format!("HumanEval flips vs θ — {}", s.model),
        x_label: "θ".into(),
        y_label: "rate".into(),
        y_range: (0.0, 1.0),
        series,
    }
}

fn delim_report(cfg: &DelimConfig, s: &DelimSummary, plots: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# HumanEval delimiter flips — {}\n", s.model);
    let _ = writeln!(
        o,
        "Run `{}`: the first {} HumanEval prompts verbatim (no chat template, no gauge shift), greedy, exactly {} tokens (no EOS stop), θ ∈ {{{}}}, ops {}; seen set {}. Pooled statistics cover θ ∈ {{{}}}. The note (docs/PROTOCOL.md §1.6): 164 prompts × 256 tokens × θ ∈ {{1.0..1.5}} on StarCoder2-7B and Qwen2.5-Coder-7B — different models and grid: compare shapes, not digits.\n",
        cfg.run_id(),
        cfg.prompts,
        cfg.tokens,
        cfg.thetas.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
        cfg.ops.iter().map(|o| o.name()).collect::<Vec<_>>().join(", "),
        match cfg.window {
            None => "prompt + all generated".to_string(),
            Some(n) => format!("last {n} tokens"),
        },
        thetas_text(&s.pooled_thetas)
    );
    let _ = writeln!(
        o,
        "**Validity gate (θ = 1: no op flips): {}**\n",
        match s.gate_failure() {
            None => "PASS".to_string(),
            Some(d) => format!("FAIL — {d}"),
        }
    );
    let _ = writeln!(o, "## gauge's numbers\n");
    let _ = write!(o, "| metric |");
    for op in &s.ops {
        let _ = write!(o, " {} |", op.op);
    }
    let _ = write!(o, "\n|---|");
    for _ in &s.ops {
        o.push_str("---|");
    }
    o.push('\n');
    for (label, vals) in metric_rows(s) {
        let _ = writeln!(o, "| {} | {} |", label.trim(), vals.join(" | "));
    }
    let _ = writeln!(o, "\n## Beside the note (§1.6)\n");
    let _ = write!(o, "| metric |");
    for op in &s.ops {
        let _ = write!(o, " {} (gauge) |", op.op);
    }
    let _ = writeln!(
        o,
        " StarCoder2-7B raw | StarCoder2-7B fix | Qwen2.5-Coder-7B raw |"
    );
    let _ = write!(o, "|---|");
    for _ in 0..s.ops.len() + 3 {
        o.push_str("---|");
    }
    o.push('\n');
    for (i, (label, a, b, c)) in NOTE_HUMANEVAL.iter().enumerate() {
        let _ = write!(o, "| {label} |");
        for op in &s.ops {
            let v = match i {
                0 => op.clean.positions.to_string(),
                1 => op.clean.flips.to_string(),
                2 => opt(op.note_predictor.balanced_accuracy, 5),
                3 => opt(op.clean_flips_on_runner_up, 4),
                4 => format!("{:.5}", op.delimiter_flip_rate),
                5 => format!("{:.5}", op.flip_fraction),
                _ => match (op.z_top_flipped, op.z_top_kept) {
                    (Some(x), Some(y)) => format!("{:.2}", x - y),
                    _ => "—".into(),
                },
            };
            let _ = write!(o, " {v} |");
        }
        let f = |x: &f64| match i {
            0 | 1 => format!("{x:.0}"),
            6 => format!("{x:.2}"),
            _ => format!("{x:.5}"),
        };
        let _ = writeln!(o, " {} | {} | {} |", f(a), f(b), f(c));
    }
    let _ = writeln!(o, "\n## Per θ\n");
    let _ = writeln!(o, "| op | θ | positions | flip fraction | delimiter-flip rate | clean positions | note BA (clean) | gauge BA (all) |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    for op in &s.ops {
        for t in &op.per_theta {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.5} | {:.5} | {} | {} | {} |",
                op.op,
                t.theta,
                t.positions,
                t.flip_fraction,
                t.delimiter_flip_rate,
                t.clean_positions,
                opt(t.note_balanced_accuracy, 5),
                opt(t.gauge_balanced_accuracy, 5)
            );
        }
    }
    let _ = writeln!(
        o,
        "\n## Slices of gauge's derivation (pooled positions / flips)\n"
    );
    let _ = writeln!(
        o,
        "| op | top-1 unseen | clean (z_top > 0) | one-sided, z_top ≤ 0 | two-sided |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|");
    for op in &s.ops {
        let c = |x: &SliceCount| format!("{} / {}", x.positions, x.flips);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            op.op,
            c(&op.top_unseen),
            c(&op.clean),
            c(&op.one_sided_nonpositive),
            c(&op.two_sided)
        );
    }
    crate::report::work_and_plots(&mut o, s.forward_tokens, s.naive_forward_tokens, plots);
    let _ = writeln!(
        o,
        "Definitions. Flip: emitted ≠ pre-penalty top-1 (first argmax of the fp32 row). Clean: top-1 seen, z_top > 0, runner-up unseen; the note's predictor is `g < z_top·(1 − 1/θ)` on raw logits for every op. gauge's two-sided predictor: flip ⟺ `z_top − z_u < m`, u the best unseen token, m = z_top − f(z_top) for the op's own f (ctrl: `z(1 − 1/θ)` above 0, `(θ − 1)|z|` at or below; normalized: `(θ − 1)·(−ln p_top)`; subtractive: α). Delimiter: the pre-penalty top-1 decodes (stripped) to nothing or only `{{}}[]()\"',:;=`; brackets-only drops whitespace-only tokens and `'`. Delimiter-flip rate: per record #(flip ∧ delimiter) / #positions, averaged over records. Confidence contrast: seen top-1s with z_top > 0, two-sample bootstrap ({} resamples, seed {}).",
        cfg.bootstrap_resamples, cfg.bootstrap_seed
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_full_grids_are_valid() {
        DelimConfig::default().validate().unwrap();
        let f = DelimConfig::full_grid("m");
        f.validate().unwrap();
        assert_eq!((f.prompts, f.tokens, f.thetas.len()), (164, 256, 6));
        assert_eq!(f.pooled_thetas(), vec![1.1, 1.2, 1.3, 1.4, 1.5]);
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |c: DelimConfig, field: &str| match c.validate() {
            Err(LabError::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        };
        let d = DelimConfig::default;
        bad(
            DelimConfig {
                thetas: vec![1.3],
                ..d()
            },
            "theta",
        );
        bad(
            DelimConfig {
                thetas: vec![1.0],
                ..d()
            },
            "theta",
        );
        bad(
            DelimConfig {
                thetas: vec![1.0, 0.9],
                ..d()
            },
            "theta",
        );
        bad(
            DelimConfig {
                thetas: vec![1.0, 1.3, 1.3],
                ..d()
            },
            "theta",
        );
        bad(DelimConfig { prompts: 0, ..d() }, "prompts");
        bad(DelimConfig { tokens: 0, ..d() }, "tokens");
        bad(DelimConfig { ops: vec![], ..d() }, "ops");
        bad(
            DelimConfig {
                batch_prompts: 0,
                ..d()
            },
            "batch_prompts",
        );
    }

    #[test]
    fn confusion_scores() {
        let mut c = Confusion::default();
        for (p, a) in [
            (true, true),
            (true, true),
            (false, true),
            (false, false),
            (true, false),
        ] {
            c.add(p, a);
        }
        let s = c.score();
        assert_eq!((s.tp, s.fn_, s.tn, s.fp, s.n), (2, 1, 1, 1, 5));
        assert_eq!(s.tpr, Some(2.0 / 3.0));
        assert_eq!(s.tnr, Some(0.5));
        assert_eq!(s.balanced_accuracy, Some((2.0 / 3.0 + 0.5) / 2.0));
        let mut neg = Confusion::default();
        neg.add(false, false);
        assert_eq!(neg.score().balanced_accuracy, Some(1.0));
        assert_eq!(Confusion::default().score().balanced_accuracy, None);
    }
}
