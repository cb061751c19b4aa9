//! An OS error is printed once (issue 21): an error type that shows its cause and also returns it
//! as `source()` printed "Read-only file system (os error 30): Read-only file system (os error
//! 30)" through anyhow's chain.

mod common;
use common::*;

#[test]
fn os_errors_are_printed_once() {
    // A cache directory that cannot be created: /proc takes no new directories.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gauge"))
        .args(["models", "pull", "smollm2-135m-instruct"])
        .env("GAUGE_HOME", "/proc/gauge-cannot-be-here")
        .output()
        .expect("run gauge");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("os error"), "{err}");
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
}
