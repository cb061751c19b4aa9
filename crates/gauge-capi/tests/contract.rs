//! tests/c/contract.c, linked against libgauge and the workspace's libllama, run under valgrind:
//! the candidate-array contract, the normalized penalty on a truncated array, bad input, and
//! name/accept/apply/reset/clone/free with no leak and no invalid access.

mod common;

use std::process::Command;

use common::{build_c, require, GaugeLib};

fn run_under_valgrind(kind: GaugeLib) {
    if !require("valgrind") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = dir.path().join("contract");
    build_c("contract.c", &exe, kind);
    let out = Command::new("valgrind")
        .args([
            "--error-exitcode=97",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect",
            "--errors-for-leak-kinds=definite,indirect",
        ])
        .arg(&exe)
        .output()
        .expect("running valgrind");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "contract ({kind:?} libgauge) failed with {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    eprintln!("{kind:?}: {}", stdout.trim());
    assert!(
        stdout.contains(", 0 failed") && stderr.contains("ERROR SUMMARY: 0 errors"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

#[test]
fn contract_static_libgauge_under_valgrind() {
    run_under_valgrind(GaugeLib::Static);
}

#[test]
fn contract_shared_libgauge_under_valgrind() {
    run_under_valgrind(GaugeLib::Shared);
}
