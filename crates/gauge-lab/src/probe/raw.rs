//! `results/<run-id>/`: the configuration, the raw lines, and resumption.
//!
//! `raw.jsonl` holds one line per decoded run (one sequence of one prefix). Lines are appended a
//! whole chunk at a time with one write followed by `fsync`, and a chunk only counts once all its
//! lines are present. On start, a torn last line and the lines of an incomplete chunk are dropped
//! (the file is rewritten atomically), and complete chunks are skipped: nothing is lost or counted
//! twice, and since the summary is always computed from the file's lines, a resumed run's summary
//! equals an uninterrupted one's.

use crate::error::LabError;
use crate::ops::Op;
use crate::probe::config::{ProbeConfig, Role};
use crate::probe::decode::ZpFacts;
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
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

impl From<ZpFacts> for RawZeroPoint {
    fn from(z: ZpFacts) -> Self {
        RawZeroPoint {
            top1: z.top1,
            seen_positive: z.seen_positive,
            seen_total: z.seen_total,
        }
    }
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
    /// The natural (own-median) phase is resumed separately from the flip phase.
    pub fn is_natural(&self) -> bool {
        self.role == Role::ZpNatural
    }
}

/// An open run directory.
pub(crate) struct RunDir {
    pub dir: PathBuf,
    raw_path: PathBuf,
    pub lines: Vec<RawLine>,
}

/// Expected number of lines of a chunk, by phase.
fn expected(cfg: &ProbeConfig, natural: bool, chunk: usize) -> usize {
    let n = cfg.chunk(chunk).len();
    if natural {
        n
    } else {
        n * cfg.flip_plan().len()
    }
}

/// Write `bytes` to `path` atomically (temp file + rename).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), LabError> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp).map_err(LabError::io(&tmp))?;
        f.write_all(bytes).map_err(LabError::io(&tmp))?;
        f.sync_all().map_err(LabError::io(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(LabError::io(path))
}

impl RunDir {
    /// Open (or create) `root/<run-id>` for `cfg`, keeping only complete chunks of any earlier
    /// attempt.
    pub fn open(root: &Path, cfg: &ProbeConfig) -> Result<RunDir, LabError> {
        let dir = root.join(cfg.run_id());
        fs::create_dir_all(&dir).map_err(LabError::io(&dir))?;
        let cfg_path = dir.join("config.json");
        let cfg_text = serde_json::to_string_pretty(cfg).map_err(|e| LabError::Parse {
            path: cfg_path.clone(),
            line: 0,
            message: e.to_string(),
        })? + "\n";
        match fs::read_to_string(&cfg_path) {
            Ok(old) => {
                let same = serde_json::from_str::<ProbeConfig>(&old)
                    .map(|o| &o == cfg)
                    .unwrap_or(false);
                if !same {
                    return Err(LabError::ConfigMismatch { path: cfg_path });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                write_atomic(&cfg_path, cfg_text.as_bytes())?
            }
            Err(e) => {
                return Err(LabError::Io {
                    path: cfg_path,
                    source: e,
                })
            }
        }

        let raw_path = dir.join("raw.jsonl");
        let text = match fs::read(&raw_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(LabError::Io {
                    path: raw_path,
                    source: e,
                })
            }
        };
        // Only newline-terminated lines are complete; a torn tail is dropped.
        let complete_len = text.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let mut parsed = Vec::new();
        for (i, line) in text[..complete_len].split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let l: RawLine = serde_json::from_slice(line).map_err(|e| LabError::Parse {
                path: raw_path.clone(),
                line: i + 1,
                message: e.to_string(),
            })?;
            check_line(cfg, &l).map_err(|message| LabError::Parse {
                path: raw_path.clone(),
                line: i + 1,
                message,
            })?;
            parsed.push(l);
        }
        // Keep complete chunks only, first occurrence of each (prefix, run).
        let mut by_chunk: BTreeMap<(bool, usize), Vec<RawLine>> = BTreeMap::new();
        let mut keys = BTreeSet::new();
        for l in parsed.iter() {
            if keys.insert((l.is_natural(), l.prefix, l.run)) {
                by_chunk
                    .entry((l.is_natural(), l.chunk))
                    .or_default()
                    .push(l.clone());
            }
        }
        let mut lines = Vec::new();
        for ((natural, chunk), ls) in by_chunk {
            if ls.len() == expected(cfg, natural, chunk) {
                lines.extend(ls);
            }
        }
        if lines.len() != parsed.len() || complete_len != text.len() {
            let mut buf = Vec::new();
            for l in &lines {
                push_line(&mut buf, l)?;
            }
            write_atomic(&raw_path, &buf)?;
        }
        Ok(RunDir {
            dir,
            raw_path,
            lines,
        })
    }

    /// Chunks of a phase already complete.
    pub fn done_chunks(&self, natural: bool) -> BTreeSet<usize> {
        self.lines
            .iter()
            .filter(|l| l.is_natural() == natural)
            .map(|l| l.chunk)
            .collect()
    }

    /// Append one complete chunk durably.
    pub fn append(&mut self, chunk_lines: Vec<RawLine>) -> Result<(), LabError> {
        let mut buf = Vec::new();
        for l in &chunk_lines {
            push_line(&mut buf, l)?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.raw_path)
            .map_err(LabError::io(&self.raw_path))?;
        f.write_all(&buf).map_err(LabError::io(&self.raw_path))?;
        f.sync_data().map_err(LabError::io(&self.raw_path))?;
        self.lines.extend(chunk_lines);
        Ok(())
    }
}

fn push_line(buf: &mut Vec<u8>, l: &RawLine) -> Result<(), LabError> {
    serde_json::to_writer(&mut *buf, l).map_err(|e| LabError::Parse {
        path: "raw.jsonl".into(),
        line: 0,
        message: e.to_string(),
    })?;
    buf.push(b'\n');
    Ok(())
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
