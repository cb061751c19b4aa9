//! Build C programs against `include/gauge.h`, libgauge and the libllama the workspace already
//! builds (llama-cpp-sys-2's CMake output under `target/<profile>/build/llama-cpp-sys-2-*/out`).
//!
//! llama-cpp-sys-2 builds llama.cpp as static archives unless its `dynamic-link` feature is on;
//! both layouts are handled: archives are linked as one group (with the C++ runtime), a shared
//! libllama by `-l` with an rpath.

#![allow(dead_code)]

#[path = "../../../test-support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: the test binary lives in its `deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// How this libllama was built.
#[derive(Debug)]
pub struct Llama {
    pub include: Vec<PathBuf>,
    pub lib_dir: PathBuf,
    pub shared: bool,
}

/// The newest llama-cpp-sys-2 build output that holds a libllama.
pub fn llama() -> Llama {
    let build = profile_dir().join("build");
    let mut found: Vec<(std::time::SystemTime, PathBuf, bool)> = Vec::new();
    for entry in std::fs::read_dir(&build).expect("target/<profile>/build") {
        let dir = entry.expect("dir entry").path();
        let is_sys = dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("llama-cpp-sys-2-"));
        if !is_sys {
            continue;
        }
        for lib in ["lib", "lib64"] {
            let lib_dir = dir.join("out").join(lib);
            for (name, shared) in [("libllama.a", false), ("libllama.so", true)] {
                if let Ok(meta) = std::fs::metadata(lib_dir.join(name)) {
                    found.push((meta.modified().expect("mtime"), lib_dir.clone(), shared));
                }
            }
        }
    }
    found.sort();
    let (_, lib_dir, shared) = found.pop().unwrap_or_else(|| {
        panic!(
            "no libllama under {}/llama-cpp-sys-2-*/out/lib: build the workspace first \
             (cargo build --release)",
            build.display()
        )
    });
    let out = lib_dir.parent().expect("out dir").to_path_buf();
    let mut include = vec![];
    if out.join("include/llama.h").exists() {
        include.push(out.join("include"));
    } else {
        panic!("no llama.h under {}", out.display());
    }
    Llama {
        include,
        lib_dir,
        shared,
    }
}

/// Which libgauge to link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaugeLib {
    Shared,
    Static,
}

/// The libgauge cargo built for this test run (the crate's own cdylib / staticlib).
pub fn libgauge(kind: GaugeLib) -> PathBuf {
    let name = match kind {
        GaugeLib::Shared => "libgauge.so",
        GaugeLib::Static => "libgauge.a",
    };
    // `cargo test` rebuilds the library in deps/; target/<profile>/ holds the copy of the last
    // `cargo build`, which may be older. Take the newest.
    let dir = profile_dir();
    [dir.join("deps").join(name), dir.join(name)]
        .into_iter()
        .filter_map(|p| {
            let t = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((t, p))
        })
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "{name} not found in {} (cargo builds it with the tests)",
                dir.display()
            )
        })
}

/// `crates/gauge-capi`.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compile and link `tests/c/<source>` into `out`; panics with the compiler's output on failure.
pub fn build_c(source: &str, out: &Path, kind: GaugeLib) {
    build_c_file(&crate_dir().join("tests/c").join(source), out, kind)
}

/// Compile and link the C file `source` into `out` (the link line of docs/c-api.md).
pub fn build_c_file(source: &Path, out: &Path, kind: GaugeLib) {
    let llama = llama();
    let gauge = libgauge(kind);
    let mut cmd = Command::new(c_compiler());
    cmd.args(["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(crate_dir().join("include"));
    for inc in &llama.include {
        cmd.arg("-I").arg(inc);
    }
    cmd.arg(source).arg("-o").arg(out);
    // libgauge first: its reference to llama_sampler_init is resolved by libllama after it.
    match kind {
        GaugeLib::Shared => {
            let dir = gauge.parent().expect("lib dir");
            cmd.arg("-L").arg(dir).arg("-lgauge");
            // DT_RPATH, not DT_RUNPATH: `cargo test` puts target/<profile> on LD_LIBRARY_PATH,
            // which outranks a RUNPATH, and the libgauge.so there may be an older build.
            cmd.arg(format!("-Wl,--disable-new-dtags,-rpath,{}", dir.display()));
        }
        GaugeLib::Static => {
            cmd.arg(&gauge);
        }
    }
    if llama.shared {
        cmd.arg("-L").arg(&llama.lib_dir);
        cmd.args(["-lllama", "-lggml", "-lggml-base"]);
        cmd.arg(format!("-Wl,-rpath,{}", llama.lib_dir.display()));
    } else {
        let mut archives: Vec<PathBuf> = std::fs::read_dir(&llama.lib_dir)
            .expect("lib dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "a"))
            .collect();
        archives.sort();
        cmd.arg("-Wl,--start-group");
        cmd.args(&archives);
        cmd.arg("-Wl,--end-group");
    }
    // The C++ runtime (libllama is C++), OpenMP (ggml's thread pool: the workspace builds
    // llama.cpp with GGML_OPENMP), and what a Rust staticlib needs.
    cmd.args([
        "-lstdc++",
        "-fopenmp",
        "-lm",
        "-lpthread",
        "-ldl",
        "-lgcc_s",
    ]);
    let res = cmd.output().expect("running the C compiler (cc)");
    assert!(
        res.status.success(),
        "compiling {} failed:\n{:?}\n{}",
        source.display(),
        cmd,
        String::from_utf8_lossy(&res.stderr)
    );
}

/// A shared libllama: the workspace's own when llama-cpp-sys-2 built one, else one linked into
/// `dir` from its static archives (whole, so every llama_* symbol is exported).
pub fn shared_libllama(dir: &Path) -> PathBuf {
    let llama = llama();
    if llama.shared {
        return llama.lib_dir.join("libllama.so");
    }
    let out = dir.join("libllama.so");
    let mut archives: Vec<PathBuf> = std::fs::read_dir(&llama.lib_dir)
        .expect("lib dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            // libllama and ggml only: the `common` helper library needs more than the C++ runtime.
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name == "libllama.a" || (name.starts_with("libggml") && name.ends_with(".a"))
        })
        .collect();
    archives.sort();
    let res = Command::new(c_compiler())
        .arg("-shared")
        .arg("-o")
        .arg(&out)
        .arg("-Wl,--whole-archive")
        .args(&archives)
        .arg("-Wl,--no-whole-archive")
        .args(["-lstdc++", "-fopenmp", "-lm", "-lpthread"])
        .output()
        .expect("running the C compiler");
    assert!(
        res.status.success(),
        "linking a shared libllama failed:\n{}",
        String::from_utf8_lossy(&res.stderr)
    );
    out
}

/// `$CC`, else the first of cc, gcc, clang on PATH.
pub fn c_compiler() -> String {
    if let Ok(cc) = std::env::var("CC") {
        return cc;
    }
    ["cc", "gcc", "clang"]
        .into_iter()
        .find(|c| have(c))
        .unwrap_or("cc")
        .to_string()
}

/// Whether a tool is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Skip (return false) locally when `tool` is missing; under CI (`CI` set) fail instead
/// (`test-support/skip.rs`).
pub fn require(tool: &str) -> bool {
    if have(tool) {
        return true;
    }
    skip::skip_unless_ci(&format!("{tool} is not installed"));
    false
}
