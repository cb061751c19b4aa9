//! The probe's raw lines (one per decoded run) and its run directory; the append/resume
//! machinery is [`crate::run::resume`].

use crate::error::LabError;
use crate::ops::Op;
use crate::probe::config::{ProbeConfig, Role};
use crate::run::resume::{open_run_dir, ChunkLine, ChunkLog};
use crate::run::{Grid, RunSpec};
use crate::stats::repeats;
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Zero-point facts of a line (the c = 0, θ = 1 run only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawZeroPoint {
    /// Max raw logit at every step.
    pub top1: Vec<f32>,
    /// Σ #{i ∈ S : z_i > 0} over steps.
    pub seen_positive: u64,
    /// Σ |S| over steps.
    pub seen_total: u64,
}

/// One decoded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLine {
    /// Resumption unit within the line's phase.
    pub chunk: usize,
    /// Prefix index in the manifest.
    pub prefix: usize,
    /// Index of the run in the phase's plan.
    pub run: usize,
    pub role: Role,
    pub op: Op,
    pub theta: f32,
    pub c: f32,
    /// Prompt token ids as tokenized for this model.
    pub prompt: Vec<TokenId>,
    /// Generated token ids.
    pub tokens: Vec<TokenId>,
    /// Generated tokens already in prompt ∪ earlier generated tokens.
    pub repeats: u64,
    /// Tokens evaluated on sequences this run owned (shared work is charged once).
    pub forward_tokens: u64,
    /// What an unshared decode of this run alone would evaluate.
    pub naive_forward_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_point: Option<RawZeroPoint>,
}

impl RawLine {
    /// The line of run `run` of `spec` on prefix `prefix` (chunk `chunk`), whoever decoded it:
    /// llama.cpp through [`super::run_probe_with`] or a Python stack through `ExternalProbe`.
    pub(crate) fn of_run(
        (chunk, prefix, run): (usize, usize, usize),
        spec: &RunSpec<Role>,
        prompt: &[TokenId],
        tokens: Vec<TokenId>,
        forward_tokens: u64,
        max_tokens: usize,
        zero_point: Option<RawZeroPoint>,
    ) -> RawLine {
        RawLine {
            chunk,
            prefix,
            run,
            role: spec.role,
            op: spec.op,
            theta: spec.theta,
            c: spec.c,
            prompt: prompt.to_vec(),
            repeats: repeats(prompt, &tokens),
            tokens,
            forward_tokens,
            naive_forward_tokens: (prompt.len() + max_tokens - 1) as u64,
            zero_point,
        }
    }

    /// The natural (own-median) phase is resumed separately from the flip phase.
    pub fn is_natural(&self) -> bool {
        self.role == Role::ZpNatural
    }
}

impl ChunkLine for RawLine {
    fn unit(&self) -> (u8, usize) {
        (u8::from(self.is_natural()), self.chunk)
    }
    fn key(&self) -> (u8, usize, usize) {
        (u8::from(self.is_natural()), self.prefix, self.run)
    }
}

/// An open run directory.
pub(crate) struct RunDir {
    pub dir: PathBuf,
    log: ChunkLog<RawLine>,
}

impl RunDir {
    /// Open (or create) `root/<run-id>` for `cfg`, keeping only complete chunks of any earlier
    /// attempt.
    pub fn open(root: &Path, cfg: &ProbeConfig) -> Result<RunDir, LabError> {
        let dir = open_run_dir(root, &cfg.run_id(), cfg)?;
        let plan_len = cfg.flip_plan().len();
        let expected = |(phase, chunk): (u8, usize)| {
            let n = cfg.chunk(chunk).len();
            if phase == 1 {
                n
            } else {
                n * plan_len
            }
        };
        let log = ChunkLog::open(dir.join("raw.jsonl"), &expected, &|l| check_line(cfg, l))?;
        Ok(RunDir { dir, log })
    }

    /// Every line of every complete chunk.
    pub fn lines(&self) -> &[RawLine] {
        &self.log.lines
    }

    /// The log, for the chunk loop.
    pub fn log_mut(&mut self) -> &mut ChunkLog<RawLine> {
        &mut self.log
    }
}

/// A line must belong to this configuration's plan.
fn check_line(cfg: &ProbeConfig, l: &RawLine) -> Result<(), String> {
    if l.prefix >= cfg.prefixes || !cfg.chunk(l.chunk).contains(&l.prefix) {
        return Err(format!(
            "prefix {} / chunk {} outside the plan",
            l.prefix, l.chunk
        ));
    }
    if l.tokens.len() != cfg.tokens {
        return Err(format!(
            "{} tokens, expected {}",
            l.tokens.len(),
            cfg.tokens
        ));
    }
    if l.is_natural() {
        if l.run != 0 {
            return Err(format!("natural run index {}", l.run));
        }
    } else {
        let plan = cfg.flip_plan();
        let spec = plan
            .get(l.run)
            .ok_or_else(|| format!("run {} outside the plan", l.run))?;
        if spec.role != l.role || spec.op != l.op || spec.theta != l.theta || spec.c != l.c {
            return Err(format!("run {} does not match the plan", l.run));
        }
    }
    Ok(())
}
