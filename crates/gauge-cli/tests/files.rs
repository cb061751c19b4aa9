//! Issue 9, files and the model cache, through the `gauge` binary as a user runs it:
//! `replay` refuses devices and FIFOs promptly, and `models list / verify`, `generate` see a
//! corrupted cached model; a read-only cache with an intact model is usable.
//!
//! The cache tests copy the real default model (pulled before the tests, by `.ci/run` in CI) into
//! a private `GAUGE_HOME`; nothing is downloaded.

#![cfg(unix)]

#[path = "../../test-support/skip.rs"]
mod skip;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "smollm2-135m-instruct";
const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn gauge_cmd(home: Option<&Path>) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gauge"));
    if let Some(h) = home {
        c.env("GAUGE_HOME", h);
    }
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run `cmd`, killing it if it has not finished after `limit`: a hang is a failure with a message,
/// not a stuck test run. (A guard against blocking, not a timing measurement.)
fn run_guarded(mut cmd: Command, limit: Duration, what: &str) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `gauge replay --trace TRACE` with its address space capped at 4 GiB, so that reading a device
/// without bound ends in a failed allocation instead of exhausting the machine.
fn replay_capped(trace: &Path) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\" replay --trace \"$1\"")
        .arg(env!("CARGO_BIN_EXE_gauge"))
        .arg(trace);
    run_guarded(c, Duration::from_secs(120), "gauge replay")
}

fn write_trace(dir: &Path, logits: &str) -> PathBuf {
    let p = dir.join("trace.json");
    fs::write(
        &p,
        serde_json::json!({"n_vocab": 4, "logits": logits}).to_string(),
    )
    .unwrap();
    p
}

fn assert_refused(o: &Output, says: &str) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(says), "{err}");
}

#[test]
fn replay_refuses_dev_zero_instead_of_reading_it_without_bound() {
    let dir = tempfile::tempdir().unwrap();
    let o = replay_capped(&write_trace(dir.path(), "/dev/zero"));
    assert_refused(&o, "/dev/zero: not a regular file (a character device)");
}

#[test]
fn replay_refuses_a_fifo_instead_of_hanging_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rows.npy");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo")
        .success());
    let o = replay_capped(&write_trace(dir.path(), "rows.npy"));
    assert_refused(&o, "not a regular file (a FIFO)");
}

// -------------------------------------------------------------------------------------------------
// The model cache

/// The real cached default model (pulled first if absent, through the ambient cache).
fn real_model() -> PathBuf {
    let o = gauge_cmd(None)
        .args(["models", "path", MODEL])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    PathBuf::from(text(&o.stdout).trim())
}

/// A private cache holding a copy of the default model (no marker). Returns (home, model path).
fn private_cache(root: &Path) -> (PathBuf, PathBuf) {
    let home = root.join("home");
    let dir = home.join(MODEL);
    fs::create_dir_all(&dir).unwrap();
    let dest = dir.join(MODEL_FILE);
    fs::copy(real_model(), &dest).unwrap();
    (home, dest)
}

fn gauge_in(home: &Path, args: &[&str]) -> Output {
    gauge_cmd(Some(home)).args(args).output().unwrap()
}

/// The `models list` line of the default model.
fn list_line(home: &Path) -> String {
    let o = gauge_in(home, &["models", "list"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .find(|l| l.starts_with(MODEL))
        .unwrap()
        .to_string()
}

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
    block.iter_mut().for_each(|b| *b = !*b);
    f.seek(SeekFrom::Start(mid)).unwrap();
    f.write_all(&block).unwrap();
}

fn generate_args() -> Vec<&'static str> {
    vec![
        "generate",
        "-m",
        MODEL,
        "-p",
        "The capital of France is",
        "-n",
        "4",
        "--temp",
        "0",
        "-c",
        "128",
    ]
}

#[test]
fn corrupted_cached_model_is_not_listed_as_verified_and_generate_refuses_it() {
    let root = tempfile::tempdir().unwrap();
    let (home, model) = private_cache(root.path());
    assert!(list_line(&home).contains("cached, unverified"));
    let o = gauge_in(&home, &["models", "path", MODEL]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(list_line(&home).contains("cached, verified"));

    flip_middle_4k(&model);
    let line = list_line(&home);
    assert!(line.contains("cached, unverified"), "{line}");
    let o = gauge_in(&home, &generate_args());
    let err = text(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(2),
        "generate ran on a corrupt model: {err}"
    );
    assert!(
        err.contains("sha256 mismatch")
            && err.contains(&format!("run `gauge models pull {MODEL}`")),
        "{err}"
    );
    assert!(!model.exists(), "the corrupt copy is removed");
    assert!(list_line(&home).contains("not pulled"));
}

#[test]
fn models_verify_rehashes_what_the_marker_cannot_see() {
    let root = tempfile::tempdir().unwrap();
    let (home, model) = private_cache(root.path());
    let o = gauge_in(&home, &["models", "verify", MODEL]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{MODEL}: verified")));

    // Same size, same inode, modification time put back: the marker still matches.
    let mtime = fs::metadata(&model).unwrap().modified().unwrap();
    flip_middle_4k(&model);
    fs::File::options()
        .write(true)
        .open(&model)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert!(list_line(&home).contains("cached, verified"));

    // Every cached entry, no name: the corrupt one fails and the exit code says so.
    let o = gauge_in(&home, &["models", "verify"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!("{MODEL}: FAILED: sha256 mismatch")),
        "{out}"
    );
    assert!(out.contains("humaneval: not pulled"), "{out}");
    assert!(!model.exists());

    // A name that is not cached is an error that says how to pull it.
    let o = gauge_in(&home, &["models", "verify", MODEL]);
    assert_refused(&o, &format!("run `gauge models pull {MODEL}`"));
}

/// Make everything under `dir` read-only for everyone, or writable again for its owner.
fn set_read_only(dir: &Path, ro: bool) {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path| {
        let mode = fs::metadata(p).unwrap().permissions().mode();
        let mode = if ro { mode & !0o222 } else { mode | 0o200 };
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    };
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            set_read_only(&p, ro);
        } else {
            set(&p);
        }
    }
    set(dir);
}

/// Runs `gauge` with `GAUGE_HOME` = the path, and these arguments.
type GaugeRunner = Box<dyn Fn(&Path, &[&str]) -> Output>;

/// How to run `gauge` as someone who cannot write a read-only directory: ourselves, or, when we are
/// root (whom permissions do not stop), a copy of the binary run as `nobody` through `setpriv`.
/// `None` if neither is possible.
fn unprivileged_gauge(root: &Path) -> Option<GaugeRunner> {
    let probe = root.join("probe");
    fs::create_dir(&probe).unwrap();
    set_read_only(&probe, true);
    let privileged = fs::write(probe.join("x"), b"x").is_ok();
    set_read_only(&probe, false);
    if !privileged {
        return Some(Box::new(gauge_in));
    }
    let ok = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        return None;
    }
    // `nobody` must reach the binary and the cache: the temporary tree is opened to everyone, and
    // the binary is copied there if `nobody` cannot run it where it was built.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |bin: &Path| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin);
        c
    };
    let mut bin = PathBuf::from(env!("CARGO_BIN_EXE_gauge"));
    if !as_nobody(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let copy = root.join("gauge");
        fs::copy(&bin, &copy).unwrap();
        fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
        bin = copy;
    }
    Some(Box::new(move |home: &Path, args: &[&str]| {
        as_nobody(&bin)
            .args(args)
            .env("GAUGE_HOME", home)
            .env("HOME", "/nonexistent")
            .output()
            .unwrap()
    }))
}

#[test]
fn read_only_cache_with_an_intact_model_is_usable() {
    let root = tempfile::tempdir().unwrap();
    let (home, model) = private_cache(root.path());
    let Some(run) = unprivileged_gauge(root.path()) else {
        skip::skip_unless_ci(
            "running as root without setpriv: permissions cannot be enforced, so a read-only \
             cache cannot be tested",
        );
        return;
    };
    let dir = model.parent().unwrap().to_path_buf();
    let marker = dir.join(format!("{MODEL_FILE}.verified"));

    // A cache verified while writable, then made read-only: used as is.
    assert!(gauge_in(&home, &["models", "path", MODEL]).status.success());
    assert!(marker.exists());
    set_read_only(&home, true);
    let o = run(&home, &["models", "list"]);
    assert!(
        text(&o.stdout).contains("cached, verified"),
        "{}",
        text(&o.stdout)
    );
    let o = run(&home, &generate_args());
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stdout).trim().is_empty());

    // Without a marker (none could be written): hashed, found intact, used; the note says the
    // check could not be recorded, which also proves the cache really was unwritable.
    set_read_only(&dir, false);
    fs::remove_file(&marker).unwrap();
    set_read_only(&dir, true);
    let o = run(&home, &["models", "path", MODEL]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(text(&o.stdout).trim(), model.to_str().unwrap());
    assert!(err.contains("cannot record the check"), "{err}");
    assert!(!marker.exists());
    let o = run(&home, &generate_args());
    assert!(o.status.success(), "{}", text(&o.stderr));

    set_read_only(&home, false);
}
