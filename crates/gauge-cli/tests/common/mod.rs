//! Running the `gauge` binary as a user does, for every CLI test binary.
#![allow(dead_code)] // each test binary uses its own subset

use std::process::{Command, Output};

/// `gauge ARGS`, waited for.
pub fn gauge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gauge"))
        .args(args)
        .output()
        .expect("run gauge")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
