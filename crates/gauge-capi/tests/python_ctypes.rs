//! The ctypes route of docs/c-api.md (tests/python/ctypes_chain.py): libgauge.so in a Python
//! process next to a libllama opened the way llama-cpp-python opens it, samplers added to a
//! llama.cpp chain through pointers. llama-cpp-python itself is not installed (it compiles its own
//! llama.cpp on install); the libllama here is the workspace's, linked as a shared library.

mod common;

use std::process::Command;

use common::{crate_dir, libgauge, require, shared_libllama, GaugeLib};

#[test]
fn ctypes_recipe_runs_gauge_samplers_in_a_llama_chain() {
    if !require("python3") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let libllama = shared_libllama(dir.path());
    let out = Command::new("python3")
        .arg(crate_dir().join("tests/python/ctypes_chain.py"))
        .arg(&libllama)
        .arg(libgauge(GaugeLib::Shared))
        .output()
        .expect("running python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(", 0 failed"),
        "{:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}
