//! Hashing: a cached file checked against its entry's size and sha256 (once per file identity,
//! or again on `gauge models verify`), a corrupt one removed, and the GGUF magic check.

use super::cache::FileIdentity;
use super::pull::Progress;
use super::{io_err, Registry, RegistryEntry, RegistryError, GGUF_MAGIC};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

impl Registry {
    /// A cached file with the right size whose hash is known good: its marker matches the file's
    /// current identity, or it is hashed now. A file whose hash turns out wrong is removed, so the
    /// next call pulls it again.
    pub(super) fn cached_verified(
        &self,
        entry: &RegistryEntry,
    ) -> Result<Option<PathBuf>, RegistryError> {
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

pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn sha256_of_known_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("abc");
        fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p, None).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
