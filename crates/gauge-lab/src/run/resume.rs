//! Result directories shared by the experiments: `config.json` plus an append-only `raw.jsonl`
//! that survives being killed at any point.
//!
//! Lines are appended a whole *unit* (a chunk of prefixes or schemas decoded together) at a time
//! with one write followed by `fsync`, and a unit only counts once all its lines are present. On
//! start, a torn last line and the lines of an incomplete unit are dropped (the file is rewritten
//! atomically) and complete units are skipped: nothing is lost or counted twice, and since every
//! summary is computed from the file's lines, a resumed run summarises exactly like an
//! uninterrupted one.

use crate::error::LabError;
use crate::run::RunControl;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A raw line that belongs to a resumption unit.
pub trait ChunkLine: Serialize + DeserializeOwned + Clone {
    /// (phase, chunk): the unit this line is part of.
    fn unit(&self) -> (u8, usize);
    /// Identity of the line within the run (a duplicate keeps the first occurrence).
    fn key(&self) -> (u8, usize, usize);
}

/// Refuse to resume lines decoded from other prompt tokens: tokenization (BOS, chat template) is
/// not part of the configuration, so the run id cannot tell such runs apart.
pub fn ensure_same_prompts<L>(
    lines: &[L],
    raw: &Path,
    same: impl Fn(&L) -> bool,
) -> Result<(), LabError> {
    if lines.iter().all(same) {
        Ok(())
    } else {
        Err(LabError::ConfigMismatch {
            path: raw.to_path_buf(),
        })
    }
}

/// The directory name of a run: `<kind>-<model label>-<48-bit hash>`, the hash over the kind,
/// the result format and the configuration's JSON. The same command always finds (and resumes) the
/// same directory; any change of configuration or format starts a new one.
pub fn run_id<C: Serialize>(kind: &str, format: u32, model: &str, config: &C) -> String {
    let json = serde_json::to_string(config).unwrap_or_default();
    let h = fnv1a64(format!("gauge-{kind}/{format}/{json}").as_bytes());
    let label: String = model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    format!("{kind}-{label}-{:012x}", h & 0xffff_ffff_ffff)
}

/// FNV-1a, 64 bit: stable across platforms and releases (unlike `DefaultHasher`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Write `bytes` to `path` atomically (temp file + rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), LabError> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp).map_err(LabError::io(&tmp))?;
        f.write_all(bytes).map_err(LabError::io(&tmp))?;
        f.sync_all().map_err(LabError::io(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(LabError::io(path))
}

/// Create `root/run_id` and write `config.json`, or check that an existing one is the same
/// configuration. Returns the directory.
pub fn open_run_dir<C: Serialize + DeserializeOwned + PartialEq>(
    root: &Path,
    run_id: &str,
    cfg: &C,
) -> Result<PathBuf, LabError> {
    let dir = root.join(run_id);
    fs::create_dir_all(&dir).map_err(LabError::io(&dir))?;
    let cfg_path = dir.join("config.json");
    match fs::read_to_string(&cfg_path) {
        Ok(old) => {
            let same = serde_json::from_str::<C>(&old)
                .map(|o| &o == cfg)
                .unwrap_or(false);
            if !same {
                return Err(LabError::ConfigMismatch { path: cfg_path });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = serde_json::to_string_pretty(cfg).map_err(|e| LabError::Parse {
                path: cfg_path.clone(),
                line: 0,
                message: e.to_string(),
            })?;
            write_atomic(&cfg_path, (text + "\n").as_bytes())?;
        }
        Err(e) => {
            return Err(LabError::Io {
                path: cfg_path,
                source: e,
            })
        }
    }
    Ok(dir)
}

/// The append-only line log of a run.
#[derive(Debug)]
pub struct ChunkLog<L> {
    path: PathBuf,
    /// Every line of every complete unit, in file order.
    pub lines: Vec<L>,
}

impl<L: ChunkLine> ChunkLog<L> {
    /// Open `path`, keeping complete units only. `expected(unit)` is the number of lines a complete
    /// unit has; `check` rejects lines that do not belong to this configuration.
    pub fn open(
        path: PathBuf,
        expected: &dyn Fn((u8, usize)) -> usize,
        check: &dyn Fn(&L) -> Result<(), String>,
    ) -> Result<Self, LabError> {
        let text = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(LabError::Io { path, source: e }),
        };
        // Only newline-terminated lines are complete; a torn tail is dropped.
        let complete_len = text.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let mut parsed: Vec<L> = Vec::new();
        for (i, line) in text[..complete_len].split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let l: L = serde_json::from_slice(line).map_err(|e| LabError::Parse {
                path: path.clone(),
                line: i + 1,
                message: e.to_string(),
            })?;
            check(&l).map_err(|message| LabError::Parse {
                path: path.clone(),
                line: i + 1,
                message,
            })?;
            parsed.push(l);
        }
        let mut by_unit: BTreeMap<(u8, usize), Vec<L>> = BTreeMap::new();
        let mut keys = BTreeSet::new();
        let mut kept_order = Vec::new();
        for l in &parsed {
            if keys.insert(l.key()) {
                by_unit.entry(l.unit()).or_default();
                kept_order.push(l.clone());
            }
        }
        for l in &kept_order {
            if let Some(v) = by_unit.get_mut(&l.unit()) {
                v.push(l.clone());
            }
        }
        let complete: BTreeSet<(u8, usize)> = by_unit
            .iter()
            .filter(|(u, ls)| ls.len() == expected(**u))
            .map(|(u, _)| *u)
            .collect();
        let lines: Vec<L> = kept_order
            .into_iter()
            .filter(|l| complete.contains(&l.unit()))
            .collect();
        if lines.len() != parsed.len() || complete_len != text.len() {
            let mut buf = Vec::new();
            for l in &lines {
                push_line(&mut buf, l, &path)?;
            }
            write_atomic(&path, &buf)?;
        }
        Ok(ChunkLog { path, lines })
    }

    /// Units of a phase already complete.
    pub fn done_units(&self, phase: u8) -> BTreeSet<usize> {
        self.lines
            .iter()
            .map(|l| l.unit())
            .filter(|u| u.0 == phase)
            .map(|u| u.1)
            .collect()
    }

    /// Append one complete unit durably.
    pub fn append(&mut self, unit_lines: Vec<L>) -> Result<(), LabError> {
        let mut buf = Vec::new();
        for l in &unit_lines {
            push_line(&mut buf, l, &self.path)?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(LabError::io(&self.path))?;
        f.write_all(&buf).map_err(LabError::io(&self.path))?;
        f.sync_data().map_err(LabError::io(&self.path))?;
        self.lines.extend(unit_lines);
        Ok(())
    }
}

fn push_line<L: Serialize>(buf: &mut Vec<u8>, l: &L, path: &Path) -> Result<(), LabError> {
    serde_json::to_writer(&mut *buf, l).map_err(|e| LabError::Parse {
        path: path.to_path_buf(),
        line: 0,
        message: e.to_string(),
    })?;
    buf.push(b'\n');
    Ok(())
}

/// A progress bar with ETA on stderr (hidden when `progress` is false), resumed at `done`.
pub fn progress_bar(
    progress: bool,
    label: &str,
    total: u64,
    done: u64,
    unit: &str,
) -> indicatif::ProgressBar {
    let template =
        format!("{{prefix}}[{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit}, ETA {{eta}}");
    let bar = gauge_engine::measure::progress_bar(progress, total, &template);
    if progress {
        bar.set_prefix(label.to_string());
        bar.set_position(done);
    }
    bar
}

/// Open (or create) `root/<run_id>` for `cfg` and its line log (complete chunks only, every line
/// `check`ed), refusing lines decoded from other prompt tokens (`same_prompt`).
pub(crate) fn open_run<C, L>(
    root: &Path,
    run_id: &str,
    cfg: &C,
    expected: &dyn Fn((u8, usize)) -> usize,
    check: &dyn Fn(&L) -> Result<(), String>,
    same_prompt: impl Fn(&L) -> bool,
) -> Result<(PathBuf, ChunkLog<L>), LabError>
where
    C: Serialize + DeserializeOwned + PartialEq,
    L: ChunkLine,
{
    let dir = open_run_dir(root, run_id, cfg)?;
    let raw = dir.join("raw.jsonl");
    let log = ChunkLog::open(raw.clone(), expected, check)?;
    ensure_same_prompts(&log.lines, &raw, same_prompt)?;
    Ok((dir, log))
}

/// A finished run's outputs: `summary.json`, the SVG/PNG plots `(name, svg)` and `REPORT.md`,
/// which `report` writes knowing the plot names.
pub(crate) fn write_outputs<S: Serialize>(
    dir: &Path,
    summary: &S,
    plots: Vec<(&str, String)>,
    report: impl FnOnce(&[String]) -> String,
) -> Result<(), LabError> {
    write_json(dir, "summary.json", summary)?;
    let mut names = Vec::new();
    for (name, svg) in plots {
        crate::plot::write_svg_png(dir, name, &svg)?;
        names.push(name.to_string());
    }
    write_atomic(&dir.join("REPORT.md"), report(&names).as_bytes())
}

/// Write `value` as pretty JSON (with a final newline) to `dir/name`, atomically.
pub fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), LabError> {
    let path = dir.join(name);
    let json = serde_json::to_string_pretty(value).map_err(|e| LabError::Parse {
        path: path.clone(),
        line: 0,
        message: e.to_string(),
    })? + "\n";
    write_atomic(&path, json.as_bytes())
}

/// Decodes the chunks of a run that are not done yet, counting them across phases so that
/// [`RunControl::abort_after_chunks`] stops a run at the same point whatever its phases.
#[derive(Debug)]
pub(crate) struct ChunkRunner<'a> {
    ctl: &'a RunControl,
    chunks_run: usize,
}

impl<'a> ChunkRunner<'a> {
    pub fn new(ctl: &'a RunControl) -> Self {
        ChunkRunner { ctl, chunks_run: 0 }
    }

    /// For every chunk `0..n_chunks` of `phase` not complete in `log`: `decode(k)` its lines and
    /// append them durably.
    pub fn run_phase<L: ChunkLine>(
        &mut self,
        log: &mut ChunkLog<L>,
        phase: u8,
        n_chunks: usize,
        mut decode: impl FnMut(usize) -> Result<Vec<L>, LabError>,
    ) -> Result<(), LabError> {
        let done = log.done_units(phase);
        for k in (0..n_chunks).filter(|k| !done.contains(k)) {
            if self
                .ctl
                .abort_after_chunks
                .is_some_and(|n| self.chunks_run >= n)
            {
                return Err(LabError::Aborted {
                    chunks: self.chunks_run,
                });
            }
            let lines = decode(k)?;
            log.append(lines)?;
            self.chunks_run += 1;
        }
        Ok(())
    }
}
