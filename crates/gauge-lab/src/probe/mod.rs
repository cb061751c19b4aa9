//! `gauge probe` — A1, the gauge probe (docs/PROTOCOL.md §4).
//!
//! Greedy decoding from each prefix, the same model twice at the same θ: once with `+c` added to
//! every logit and once with `−c`, before the penalty. The flip rate is the fraction of positions
//! where the two runs chose different tokens (every position counts, also after the first
//! divergence). At θ = 1 every op must flip exactly 0 (the validity gate), otherwise the run fails
//! loudly. The same decode also yields the zero-point statistics (the note's Table 1) and the
//! repetition rate per (op, θ) (the loop check).
//!
//! # How the work is shared
//! For one prefix, all (op, θ, ±c) runs start as ONE sequence with one prefill. At each step every
//! run applies its own operator to the shared row; runs are grouped by the token they chose and a
//! group that splits forks its KV cache. All groups of a chunk of prefixes decode in one batch. At
//! θ = 1, and for the invariant operators at any θ, the ±c runs never split, so they cost one
//! decode. `summary.json` reports the forward tokens actually evaluated next to a naive count.
//!
//! The own-median zero-point flip needs the median top-1 logit of the whole c = 0 decode, so it is
//! a second phase that starts after the first has finished.
//!
//! # Outputs and resumption
//! `results/<run-id>/` (the id is the model label plus a hash of the configuration) holds
//! `config.json`, `raw.jsonl` (one line per decoded run), `summary.json`, `REPORT.md` and plots.
//! Chunks of `batch_prefixes` prefixes are the unit of work: a chunk's lines are appended durably
//! once it is complete, and the same command started again skips complete chunks.

mod analysis;
mod config;
mod cross;
pub mod external;
mod raw;
mod report;

pub use analysis::{analyze, Analysis, ConditionDetail, ZeroPointDetail};
pub use config::{ProbeConfig, Role, PROBE_FORMAT};
pub use cross::OtherStack;
pub use raw::{RawLine, RawZeroPoint};
pub use report::{
    probe_report, render_table, write_probe_plots, NOTE_FLIP, NOTE_LOOP, NOTE_ZERO_POINT,
};

use crate::error::LabError;
use crate::ops::{Op, SeenSet};
use crate::prefixes::a1_prefixes;
use crate::run::codec::{tokenize_prompts, PromptStyle};
use crate::run::decode::{decode_chunk, DecodeOptions, Observer, PrefixJob};
use crate::run::resume::{write_atomic, write_json, ChunkRunner};
use crate::run::Grid;
use crate::run::{Codec, RunControl, RunSpec};
use crate::stack::Stack;
use gauge_engine::LogitSource;
use gauge_sampling::TokenId;
use indicatif::ProgressBar;
use raw::RunDir;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One (op, θ) condition: the `--json` shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionSummary {
    pub op: Op,
    /// θ as typed (the f32 the run used, printed as its shortest decimal: 1.3, not 1.2999999523).
    pub theta: f64,
    /// Pooled Σ flips / Σ positions over prefixes.
    pub flip_rate: f64,
    /// 95% percentile-bootstrap interval of the mean per-prefix flip rate.
    pub ci95: [f64; 2],
    /// Positions compared (prefixes × tokens).
    pub positions: u64,
    /// Median first-divergence position among prefixes whose ±c runs diverge (`null` if none).
    pub median_first_divergence: Option<f64>,
    /// Mean over the condition's runs of the fraction of generated tokens already seen.
    pub rep_rate: f64,
}

/// The note's Table 1 for this model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZeroPointSummary {
    /// Pooled fraction of seen-token logits that are positive (c = 0, θ = 1 decode).
    pub positive_fraction: f64,
    /// Median over all steps of the top-1 logit.
    pub median_top1_logit: f64,
    /// Flip rate of c = 0 vs c = −median top-1 at the zero-point θ (ctrl).
    pub own_median_flip_rate: f64,
}

/// Result of a probe run: exactly what `gauge probe --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSummary {
    pub model: String,
    /// The stack that decided (absent = gauge).
    #[serde(default, skip_serializing_if = "Stack::is_gauge")]
    pub sampler: Stack,
    pub conditions: Vec<ConditionSummary>,
    /// The zero-point statistics; absent when the run could not measure them (`zero_point:
    /// false` in the configuration: an engine without raw logits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_point: Option<ZeroPointSummary>,
    /// Tokens the model evaluated (prefill + decode) with sharing.
    pub forward_tokens: u64,
    /// Tokens an unshared run (every run its own prefill and decode) would evaluate.
    pub naive_forward_tokens: u64,
}

/// The directory a configuration writes to.
pub fn run_dir(out_root: &Path, cfg: &ProbeConfig) -> PathBuf {
    out_root.join(cfg.run_id())
}

/// The run's seen set in words (reports).
pub fn describe_seen(cfg: &ProbeConfig) -> String {
    match (cfg.window, cfg.seen_prompt) {
        (None, true) => "prompt + all generated (no window)".to_string(),
        (Some(n), true) => format!("last {n} tokens (llama.cpp window)"),
        (None, false) => "all generated tokens, prompt excluded".to_string(),
        (Some(n), false) => format!("last {n} generated tokens, prompt excluded"),
    }
}

/// Run (or resume) the probe. See [`run_probe_with`].
pub fn run_probe(
    source: &mut dyn LogitSource,
    codec: &dyn Codec,
    cfg: &ProbeConfig,
    out_root: &Path,
    progress: bool,
) -> Result<ProbeSummary, LabError> {
    run_probe_with(
        source,
        codec,
        cfg,
        out_root,
        &RunControl {
            progress,
            ..RunControl::default()
        },
    )
}

/// Run (or resume) the probe on `source`, tokenizing the prefixes with `codec` (the model's
/// defaults, no special-token parsing, as the note did), writing `out_root/<run-id>/`. Returns the
/// summary, or [`LabError::GateFailed`] (after writing every output) if an operator flips at θ = 1.
pub fn run_probe_with(
    source: &mut dyn LogitSource,
    codec: &dyn Codec,
    cfg: &ProbeConfig,
    out_root: &Path,
    ctl: &RunControl,
) -> Result<ProbeSummary, LabError> {
    cfg.validate()?;
    cfg.sampler.check_rust_decodable()?;
    let texts = a1_prefixes()[..cfg.prefixes]
        .iter()
        .map(|p| (p.index, p.prefix_text.as_str()));
    let style = PromptStyle {
        chat: false,
        parse_special: false,
    };
    let prompts = tokenize_prompts(codec, texts, style, source.n_vocab())?;
    let mut dir = RunDir::open(out_root, cfg)?;
    crate::run::resume::ensure_same_prompts(dir.lines(), &dir.dir.join("raw.jsonl"), |l| {
        l.prompt == prompts[l.prefix]
    })?;
    let opts = DecodeOptions {
        seen_prompt: cfg.seen_prompt,
        ..ctl.decode_options(cfg.tokens, cfg.window, cfg.sampler)
    };
    let mut runner = ChunkRunner::new(ctl);

    // Phase 1: every flip condition plus the zero-point runs, shared per prefix.
    let plan = cfg.flip_plan();
    let bar = phase_bar(
        ctl.progress,
        cfg,
        &format!("A1 {} ", cfg.grid_label()),
        &dir,
        false,
    );
    runner.run_phase(dir.log_mut(), 0, cfg.n_chunks(), |k| {
        let specs: Vec<Vec<RunSpec<Role>>> = cfg.chunk(k).map(|_| plan.clone()).collect();
        run_chunk(source, cfg, &prompts, k, &specs, opts, &bar)
    })?;
    bar.finish_and_clear();

    // Phase 2: the own-median gauge, c = −median top-1 of the c = 0, θ = 1 decode.
    let c_nat = natural_shift(cfg, dir.lines())?;
    let nat_spec = [cfg.natural_spec(c_nat)];
    let bar = phase_bar(ctl.progress, cfg, "A1 own-median gauge ", &dir, true);
    runner.run_phase(dir.log_mut(), 1, cfg.n_chunks(), |k| {
        let specs: Vec<Vec<RunSpec<Role>>> = cfg.chunk(k).map(|_| nat_spec.to_vec()).collect();
        run_chunk(source, cfg, &prompts, k, &specs, opts, &bar)
    })?;
    bar.finish_and_clear();

    finish(out_root, &dir, cfg, ctl.plots)
}

/// The own-median gauge: c = −(median top-1 logit of the c = 0, θ = 1 decode), once phase 1 is
/// complete.
fn natural_shift(cfg: &ProbeConfig, lines: &[RawLine]) -> Result<f32, LabError> {
    let med = analysis::median_top1(lines)
        .ok_or_else(|| LabError::config("tokens", cfg.tokens, "a decode with at least one step"))?;
    let c_nat = -(med as f32);
    if !c_nat.is_finite() {
        return Err(
            gauge_engine::SourceError::Backend(format!("median top-1 logit is {med}")).into(),
        );
    }
    Ok(c_nat)
}

/// Analyse a complete run directory and write `summary.json`, `REPORT.md` (with the cross-stack
/// table when other stacks ran the same grid under `out_root`) and the plots; the gate verdict
/// comes last, after every output is written.
fn finish(
    out_root: &Path,
    dir: &RunDir,
    cfg: &ProbeConfig,
    plots: bool,
) -> Result<ProbeSummary, LabError> {
    let analysis = analyze(cfg, dir.lines());
    let others = cross::other_stacks(out_root, cfg)?;
    write_outputs(&dir.dir, cfg, &analysis, plots, &others)?;
    if let Some(details) = analysis.gate_failure() {
        return Err(LabError::GateFailed { details });
    }
    Ok(analysis.summary)
}

/// Token-for-token agreement of two finished runs of the same grid on two stacks (`gauge probe
/// --sampler gauge,llama-cpp`): every run present in both (same role, op, θ, c, prefix) is
/// compared position by position.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StackAgreement {
    /// Runs compared.
    pub runs: usize,
    /// Runs whose token streams are identical.
    pub identical_runs: usize,
    /// Positions compared and positions that differ.
    pub positions: u64,
    pub differing_positions: u64,
    /// The first differing run, for a report: (prefix, op, θ, c, position).
    pub first_difference: Option<(usize, Op, f32, f32, usize)>,
}

/// Compare the raw lines of two finished probe runs under `out_root` (see [`StackAgreement`]).
pub fn compare_probe_runs(
    out_root: &Path,
    a: &ProbeConfig,
    b: &ProbeConfig,
) -> Result<StackAgreement, LabError> {
    let da = RunDir::open(out_root, a)?;
    let db = RunDir::open(out_root, b)?;
    let key = |l: &RawLine| (l.prefix, l.role, l.op, l.theta.to_bits(), l.c.to_bits());
    let index: std::collections::HashMap<_, &RawLine> =
        db.lines().iter().map(|l| (key(l), l)).collect();
    let mut sorted: Vec<&RawLine> = da.lines().iter().collect();
    sorted.sort_by_key(|l| (l.is_natural(), l.prefix, l.run));
    let mut out = StackAgreement::default();
    for l in sorted {
        let Some(o) = index.get(&key(l)) else {
            continue;
        };
        let (f, p) = crate::stats::flips(&l.tokens, &o.tokens);
        out.runs += 1;
        out.positions += p;
        out.differing_positions += f;
        if f == 0 && l.tokens.len() == o.tokens.len() {
            out.identical_runs += 1;
        } else if out.first_difference.is_none() {
            let at = crate::stats::first_divergence(&l.tokens, &o.tokens)
                .unwrap_or(l.tokens.len().min(o.tokens.len()));
            out.first_difference = Some((l.prefix, l.op, l.theta, l.c, at));
        }
    }
    Ok(out)
}

impl ProbeConfig {
    /// The grid in one line, as the progress bars label it: `ctrl,normalized × θ {1,1.3} × ±5`.
    pub fn grid_label(&self) -> String {
        let ops: Vec<&str> = self.ops.iter().map(|o| o.name()).collect();
        let th: Vec<String> = self.thetas.iter().map(|t| t.to_string()).collect();
        format!(
            "{} × θ {{{}}} × ±{}",
            ops.join(","),
            th.join(","),
            self.shift
        )
    }
}

fn phase_bar(
    progress: bool,
    cfg: &ProbeConfig,
    label: &str,
    dir: &RunDir,
    natural: bool,
) -> ProgressBar {
    let done_prefixes = dir
        .lines()
        .iter()
        .filter(|l| l.is_natural() == natural && l.run == 0)
        .count();
    crate::run::resume::progress_bar(
        progress,
        label,
        (cfg.prefixes * cfg.tokens) as u64,
        (done_prefixes * cfg.tokens) as u64,
        "prefix-positions",
    )
}

/// The probe's view of the decode: the zero-point facts of every c = 0, θ = 1 run (max raw logit
/// per step, seen-token logits above zero) and the progress bar.
struct ZeroPointObserver<'a> {
    /// `[job][run]`: `Some` for zero-point runs.
    zp: Vec<Vec<Option<RawZeroPoint>>>,
    bar: &'a ProgressBar,
}

impl Observer for ZeroPointObserver<'_> {
    fn record(&mut self, job: usize, run: usize, row: &[f32], seen: &SeenSet, _pick: TokenId) {
        if let Some(zp) = self.zp[job][run].as_mut() {
            zp.top1
                .push(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
            zp.seen_positive += seen
                .members()
                .iter()
                .filter(|&&m| row[m as usize] > 0.0)
                .count() as u64;
            zp.seen_total += seen.len() as u64;
        }
    }

    fn stepped(&mut self) {
        self.bar.inc(self.zp.len() as u64);
    }
}

/// Decode chunk `k` with `specs[i]` for its i-th prefix and turn the results into raw lines.
fn run_chunk(
    source: &mut dyn LogitSource,
    cfg: &ProbeConfig,
    prompts: &[Vec<TokenId>],
    k: usize,
    specs: &[Vec<RunSpec<Role>>],
    opts: DecodeOptions,
    bar: &ProgressBar,
) -> Result<Vec<RawLine>, LabError> {
    let range = cfg.chunk(k);
    let jobs: Vec<PrefixJob<'_, Role>> = range
        .clone()
        .zip(specs)
        .map(|(p, s)| PrefixJob {
            prompt: &prompts[p],
            specs: s,
            grammar: None,
        })
        .collect();
    let mut obs = ZeroPointObserver {
        zp: specs
            .iter()
            .map(|s| {
                s.iter()
                    .map(|r| {
                        (r.role == Role::ZeroPoint).then(|| RawZeroPoint {
                            top1: Vec::with_capacity(cfg.tokens),
                            seen_positive: 0,
                            seen_total: 0,
                        })
                    })
                    .collect()
            })
            .collect(),
        bar,
    };
    let results = decode_chunk(source, &jobs, opts, &mut obs)?;
    let mut lines = Vec::new();
    for (((p, s), res), zps) in range.zip(specs).zip(results).zip(obs.zp) {
        let prompt = &prompts[p];
        for (run, ((spec, r), zp)) in s.iter().zip(res).zip(zps).enumerate() {
            lines.push(RawLine::of_run(
                (k, p, run),
                spec,
                prompt,
                r.tokens,
                r.forward_tokens,
                cfg.tokens,
                zp,
            ));
        }
    }
    Ok(lines)
}

/// `summary.json`, `REPORT.md` and the plots.
fn write_outputs(
    dir: &Path,
    cfg: &ProbeConfig,
    a: &Analysis,
    plots: bool,
    others: &[cross::OtherStack],
) -> Result<(), LabError> {
    write_json(dir, "summary.json", &a.summary)?;
    let plot_names = if plots {
        write_probe_plots(dir, a)?
    } else {
        Vec::new()
    };
    let mut report = probe_report(cfg, a, &plot_names);
    report.push_str(&cross::table(cfg, &a.summary, others));
    write_atomic(&dir.join("REPORT.md"), report.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{HashSource, HashSourceConfig, WordCodec};

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gauge-lab-unit-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn gate_fails_loudly_on_a_gauge_dependent_op_and_still_writes_the_report() {
        let cfg = ProbeConfig {
            model: "noisy".into(),
            prefixes: 4,
            tokens: 12,
            ops: vec![Op::Ctrl, Op::TestNoise],
            bootstrap_resamples: 100,
            ..ProbeConfig::default()
        };
        let mut src = HashSource::new(HashSourceConfig::default());
        let tok = WordCodec::new(src.n_vocab());
        let root = tmp("gate");
        let ctl = RunControl {
            plots: false,
            ..RunControl::default()
        };
        match run_probe_with(&mut src, &tok, &cfg, &root, &ctl) {
            Err(LabError::GateFailed { details }) => {
                assert!(details.contains("test_noise flipped"), "{details}");
                assert!(
                    !details.contains("ctrl"),
                    "ctrl is invariant at θ = 1: {details}"
                );
            }
            other => panic!("expected the gate to fail, got {other:?}"),
        }
        let report = std::fs::read_to_string(run_dir(&root, &cfg).join("REPORT.md")).unwrap();
        assert!(report.contains("FAIL"));
        assert!(run_dir(&root, &cfg).join("summary.json").is_file());
    }

    #[test]
    fn gate_passes_for_the_three_operators() {
        let cfg = ProbeConfig {
            model: "clean".into(),
            prefixes: 4,
            tokens: 12,
            bootstrap_resamples: 100,
            ..ProbeConfig::default()
        };
        let mut src = HashSource::new(HashSourceConfig::default());
        let tok = WordCodec::new(src.n_vocab());
        let ctl = RunControl {
            plots: false,
            ..RunControl::default()
        };
        let s = run_probe_with(&mut src, &tok, &cfg, &tmp("gate-ok"), &ctl).unwrap();
        assert!(s
            .conditions
            .iter()
            .filter(|c| c.theta == 1.0)
            .all(|c| c.flip_rate == 0.0 && c.positions == 48));
    }
}
