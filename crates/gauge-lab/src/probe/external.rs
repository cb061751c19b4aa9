//! Probe runs decoded outside this crate: the Python package's HF transformers and vLLM engines
//! (`python -m gauge_sampling probe --engine hf|vllm`). Python is only the logit source and the
//! stack's own sampler; the plan, the run directory (resumption), the lines, the analysis, the
//! report and the plots are the ones `gauge probe` uses.
//!
//! The caller opens the run with its prompt tokens, decodes each pending chunk of each phase with
//! the plan, hands the tokens back per run ([`DecodedRun`]), and finishes: exactly the steps of
//! [`super::run_probe_with`], with the decode done elsewhere.

use super::raw::{RawLine, RawZeroPoint, RunDir};
use super::{finish, natural_shift, ProbeConfig, ProbeSummary, Role};
use crate::error::LabError;
use crate::run::spec::order_chunk_runs;
use crate::run::{Grid, RunSpec};
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What the caller decoded for one run of one prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodedRun {
    /// Prefix index (0-based, manifest order).
    pub prefix: usize,
    /// Index of the run in its phase's plan.
    pub run: usize,
    /// Generated token ids.
    pub tokens: Vec<TokenId>,
    /// Tokens the model evaluated for this run (shared work charged once, to the group's first
    /// run, as the Rust decode does).
    pub forward_tokens: u64,
    /// The zero-point facts: required for the `zero_point` run, absent for every other run.
    #[serde(default)]
    pub zero_point: Option<RawZeroPoint>,
}

/// An open probe run decoded by an external engine.
pub struct ExternalProbe {
    out_root: PathBuf,
    cfg: ProbeConfig,
    prompts: Vec<Vec<TokenId>>,
    dir: RunDir,
}

impl std::fmt::Debug for ExternalProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalProbe")
            .field("dir", &self.dir.dir)
            .finish()
    }
}

impl ExternalProbe {
    /// Open (or resume) `out_root/<run-id>/` for `cfg` with the prompt tokens of the first
    /// `cfg.prefixes` prefixes, tokenized by the engine's tokenizer.
    pub fn open(
        out_root: &Path,
        cfg: ProbeConfig,
        prompts: Vec<Vec<TokenId>>,
        n_vocab: usize,
    ) -> Result<Self, LabError> {
        cfg.validate()?;
        crate::run::spec::check_external_inputs(
            cfg.sampler,
            "gauge probe",
            &prompts,
            cfg.prefixes,
            "prefix",
            n_vocab,
        )?;
        let dir = RunDir::open(out_root, &cfg)?;
        crate::run::resume::ensure_same_prompts(dir.lines(), &dir.dir.join("raw.jsonl"), |l| {
            l.prompt == prompts[l.prefix]
        })?;
        Ok(ExternalProbe {
            out_root: out_root.to_path_buf(),
            cfg,
            prompts,
            dir,
        })
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir.dir
    }

    /// The configuration.
    pub fn config(&self) -> &ProbeConfig {
        &self.cfg
    }

    /// Chunks of `phase` (0: flip + zero-point runs, 1: the own-median run) not yet complete.
    pub fn pending_chunks(&self, phase: u8) -> Result<Vec<usize>, LabError> {
        check_phase(phase)?;
        if phase == 1 && !self.cfg.zero_point {
            return Ok(Vec::new()); // no own-median run without the zero-point statistics
        }
        let done = self.dir_done(phase);
        Ok((0..self.cfg.n_chunks())
            .filter(|k| !done.contains(k))
            .collect())
    }

    fn dir_done(&self, phase: u8) -> std::collections::BTreeSet<usize> {
        self.dir
            .lines()
            .iter()
            .filter(|l| u8::from(l.is_natural()) == phase)
            .map(|l| l.chunk)
            .collect()
    }

    /// The runs of `phase` for every prefix. Phase 1's run needs the median top-1 logit of the
    /// complete phase 0.
    pub fn plan(&self, phase: u8) -> Result<Vec<RunSpec<Role>>, LabError> {
        check_phase(phase)?;
        if phase == 0 {
            return Ok(self.cfg.flip_plan());
        }
        if !self.cfg.zero_point {
            return Err(LabError::config(
                "phase",
                1,
                "0 only (zero_point is false: no own-median run)",
            ));
        }
        let pending = self.pending_chunks(0)?;
        if !pending.is_empty() {
            return Err(LabError::config(
                "phase",
                1,
                &format!("phase 0 complete first (chunks {pending:?} pending)"),
            ));
        }
        Ok(vec![self
            .cfg
            .natural_spec(natural_shift(&self.cfg, self.dir.lines())?)])
    }

    /// Append chunk `k` of `phase` durably: one [`DecodedRun`] per (prefix of the chunk, run of
    /// the plan), in any order.
    pub fn append_chunk(
        &mut self,
        phase: u8,
        k: usize,
        runs: Vec<DecodedRun>,
    ) -> Result<(), LabError> {
        let plan = self.plan(phase)?;
        let written = self.dir_done(phase).contains(&k);
        let (range, runs) =
            order_chunk_runs(&self.cfg, k, written, plan.len(), "prefix", runs, |r| {
                (r.prefix, r.run)
            })?;
        let mut lines = Vec::with_capacity(runs.len());
        for (i, r) in runs.into_iter().enumerate() {
            let (p, run) = (range.start + i / plan.len(), i % plan.len());
            let spec = &plan[run];
            if r.tokens.len() != self.cfg.tokens {
                return Err(LabError::config(
                    "tokens",
                    format!("{} for prefix {p} run {run}", r.tokens.len()),
                    &format!("{} per run", self.cfg.tokens),
                ));
            }
            let zp = spec.role == Role::ZeroPoint;
            if zp != r.zero_point.is_some() {
                return Err(LabError::config(
                    "zero_point",
                    format!("prefix {p} run {run}"),
                    "present for the zero-point run (c = 0, θ = 1) only",
                ));
            }
            lines.push(RawLine::of_run(
                (k, p, run),
                spec,
                &self.prompts[p],
                r.tokens,
                r.forward_tokens,
                self.cfg.tokens,
                r.zero_point,
            ));
        }
        self.dir.log_mut().append(lines)
    }

    /// Analyse the complete run and write `summary.json`, `REPORT.md` and the plots, as
    /// `gauge probe` does; [`LabError::GateFailed`] after writing them if an op flipped at θ = 1.
    pub fn finish(&self, plots: bool) -> Result<ProbeSummary, LabError> {
        for phase in [0, 1] {
            let pending = self.pending_chunks(phase)?;
            if !pending.is_empty() {
                return Err(LabError::config(
                    "phase",
                    phase,
                    &format!("every chunk decoded before finishing ({pending:?} pending)"),
                ));
            }
        }
        finish(&self.out_root, &self.dir, &self.cfg, plots)
    }
}

fn check_phase(phase: u8) -> Result<(), LabError> {
    if phase > 1 {
        return Err(LabError::config(
            "phase",
            phase,
            "0 (flip runs) or 1 (own-median run)",
        ));
    }
    Ok(())
}
