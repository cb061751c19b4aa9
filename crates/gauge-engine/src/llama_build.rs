//! What the linked llama.cpp was compiled for: its CPU backend's instruction sets, as llama.cpp
//! itself reports them (`llama_print_system_info`). ggml's kernels, and so the logits to the last
//! bit, follow the build (an AVX2 and an AVX-512 build of the same Q4_1 matmul sum in another
//! order), so every run record and `/props` carry it.

use std::ffi::CStr;
use std::sync::OnceLock;

/// The CPU features llama.cpp was built with, e.g. `SSE3 SSSE3 AVX AVX2 F16C FMA BMI2 OPENMP
/// REPACK`: the names llama.cpp reports as `= 1`, in its order, for its CPU backend.
pub fn llama_cpp_cpu_features() -> &'static str {
    static FEATURES: OnceLock<String> = OnceLock::new();
    FEATURES.get_or_init(|| {
        // SAFETY: llama.cpp returns a NUL-terminated string it owns (a function-local static);
        // called once (under the OnceLock), copied before anything else can call it again.
        let text = unsafe { CStr::from_ptr(llama_cpp_sys_2::llama_print_system_info()) }
            .to_string_lossy()
            .into_owned();
        cpu_features(&text)
    })
}

/// The `CPU : NAME = 1 | …` section of llama.cpp's system info, as the enabled names.
fn cpu_features(system_info: &str) -> String {
    let Some(start) = system_info.find("CPU :") else {
        return String::new();
    };
    let rest = &system_info[start + "CPU :".len()..];
    // The next backend's section starts with `NAME :`; the CPU's entries are `NAME = value |`.
    let mut names = Vec::new();
    for entry in rest.split('|') {
        let Some((name, value)) = entry.split_once('=') else {
            if entry.contains(':') {
                break;
            }
            continue;
        };
        if name.contains(':') {
            break;
        }
        if value.trim() == "1" {
            names.push(name.trim());
        }
    }
    names.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_section_gives_the_enabled_names_in_order() {
        let info = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX512 = 0 | AVX2 = 1 | OPENMP = 1 | REPACK = 1 | ";
        assert_eq!(cpu_features(info), "SSE3 SSSE3 AVX AVX2 OPENMP REPACK");
        assert_eq!(cpu_features("CUDA : ARCHS = 890 | "), "");
    }

    #[test]
    fn the_linked_build_reports_its_cpu_features() {
        // Every x86_64 build has at least SSE3 (ggml's baseline); aarch64 NEON.
        let f = llama_cpp_cpu_features();
        assert!(
            f.split(' ').any(|n| n == "SSE3" || n == "NEON"),
            "llama.cpp reports {f:?}"
        );
    }
}
