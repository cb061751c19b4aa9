//! tests/c/contract.c, linked against libgauge and the workspace's libllama, run under valgrind:
//! the candidate-array contract, the normalized penalty on a truncated array, bad input, and
//! name/accept/apply/reset/clone/free with no leak and no invalid access.

mod common;

use std::process::Command;

use common::{build_c, build_c_file, crate_dir, require, GaugeLib};

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

/// The C example of docs/c-api.md compiles and links as shown there.
#[test]
fn docs_c_example_compiles_and_links() {
    let doc =
        std::fs::read_to_string(crate_dir().join("../../docs/c-api.md")).expect("docs/c-api.md");
    let section = doc
        .split("## A C example")
        .nth(1)
        .expect("the C example section");
    let code = section
        .split("```c\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a ```c block");
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("example.c");
    std::fs::write(&src, format!("{code}\nint main(void) {{ return 0; }}\n")).expect("write");
    build_c_file(&src, &dir.path().join("example"), GaugeLib::Shared);
}
