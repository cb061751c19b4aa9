//! "Skip locally, fail under CI", once for every Rust test that needs something a machine may lack
//! (valgrind, python3, a browser, an unprivileged user). Included by path, not a crate:
//!
//! ```ignore
//! #[path = "../../test-support/skip.rs"]
//! mod skip;
//! ```
//!
//! Under CI (`CI` set) a missing prerequisite is a failure: `.ci/run` installs everything the
//! tests need, so a skip there would hide a broken setup. Locally the test returns early and says
//! so on the terminal: the line is written to the process's stderr directly, past the test
//! harness's output capture, so a skipped test that reports `ok` is never silent.

use std::io::Write;

/// Call when `why` (a missing prerequisite, and how to install it) keeps the test from running,
/// then return from the test. Panics under CI; otherwise prints `SKIPPED <test>: <why>`.
pub fn skip_unless_ci(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("CI: {why} (.ci/run installs what the tests need)");
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    // Not `eprintln!`: libtest captures that and shows it only for failing tests.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}
