//! The cache: where an entry's file lives, the `.verified` marker that binds a checked hash to
//! the file's identity, the lock that keeps pulls one at a time, and the clean-up of what a killed
//! pull left behind.

use super::{io_err, Registry, RegistryEntry, RegistryError};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
pub(super) struct FileIdentity {
    size: u64,
    /// Modification time in nanoseconds since the epoch (negative before it).
    mtime_ns: i128,
    /// Inode number (0 where the platform has none).
    inode: u64,
}

impl FileIdentity {
    pub(super) fn of(meta: &fs::Metadata) -> Self {
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

    pub(super) fn of_path(path: &Path) -> Option<Self> {
        fs::metadata(path).ok().map(|m| Self::of(&m))
    }

    /// The marker text: the hash, then the identity, one `key value` per line.
    pub(super) fn marker_text(&self, sha256: &str) -> String {
        format!(
            "sha256 {sha256}\nsize {}\nmtime_ns {}\ninode {}\n",
            self.size, self.mtime_ns, self.inode
        )
    }
}

/// Serialises pulls inside one process (the lock file covers other processes).
pub(super) static PULL_LOCK: Mutex<()> = Mutex::new(());

impl Registry {
    pub(super) fn marker_of(&self, entry: &RegistryEntry) -> PathBuf {
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
    pub(super) fn marker_ok(&self, entry: &RegistryEntry, id: &FileIdentity) -> bool {
        fs::read_to_string(self.marker_of(entry))
            .map(|s| s == id.marker_text(&entry.sha256))
            .unwrap_or(false)
    }

    /// Record that the file with identity `id` hashed to the entry's sha256. Best effort: in a
    /// cache the user cannot write the marker is skipped and the file is hashed on every use.
    pub(super) fn write_marker(&self, entry: &RegistryEntry, id: &FileIdentity) {
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

    pub(super) fn lock_cache(&self) -> Result<File, RegistryError> {
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
}

/// Remove what a killed pull left in `dir` (`.download-*` directories, `.*.tmp` files). Called
/// with the cache lock held, so no live pull owns them.
pub(super) fn remove_stale_temporaries(dir: &Path) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
