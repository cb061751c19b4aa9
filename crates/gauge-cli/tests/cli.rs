//! The `gauge` binary as a user runs it: outputs checked against llama.cpp's reference data, errors
//! checked for exit code 2 and a message that names the problem.

mod common;
use common::*;
use serde_json::Value;

fn data(name: &str) -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn chain_print(label_start: &str) -> (String, String) {
    let d = data("chain_prints.json");
    let e = d["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["label"].as_str().unwrap().starts_with(label_start))
        .unwrap();
    (
        e["log_line"].as_str().unwrap().to_string(),
        e["params_print"].as_str().unwrap().to_string(),
    )
}

#[test]
fn chain_with_defaults_prints_llama_cpps_lines() {
    let (log_line, params) =
        chain_print("ggml-vocab-llama-spm.gguf (n_vocab 32000, suppress_tokens 0): defaults");
    let o = gauge(&["chain", "--seed", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("sampler params: \n{params}\n")),
        "{out}"
    );
    assert!(out.lines().any(|l| l == log_line), "{out}");
    assert!(out.contains("chain: shift-invariant"), "{out}");
}

#[test]
fn chain_reports_the_ctrl_penalty_as_not_shift_invariant() {
    let o = gauge(&["chain", "--repeat-penalty", "1.3", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["shift_invariant"], false);
    let pen = v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "penalties")
        .unwrap();
    assert_eq!(pen["shift_invariant"], false);
    let o = gauge(&[
        "chain",
        "--repeat-penalty",
        "1.3",
        "--repeat-penalty-mode",
        "normalized",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["shift_invariant"], true);
}

#[test]
fn chain_sampler_seq_matches_llama_cpp_for_known_letters() {
    // llama.cpp dropped the unknown letters of 'kx?tZp'; gauge refuses them, and with the known
    // letters alone prints what llama.cpp printed.
    let (log_line, _) =
        chain_print("ggml-vocab-llama-spm.gguf (n_vocab 32000, suppress_tokens 0): --sampler-seq");
    let o = gauge(&["chain", "--sampler-seq", "kx?tZp"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains('?'), "{}", stderr(&o));
    let o = gauge(&["chain", "--sampler-seq", "kxtp"]);
    assert!(stdout(&o).lines().any(|l| l == log_line), "{}", stdout(&o));
}

#[test]
fn bad_flags_exit_2_and_name_the_problem() {
    for (args, needle) in [
        (vec!["chain", "--samplers", "top_k;bogus"], "bogus"),
        (vec!["chain", "--top-p", "1.5"], "top_p"),
        (vec!["chain", "--repeat-penalty", "-1"], "repeat_penalty"),
        (vec!["chain", "--logit-bias", "99999+1"], "99999"),
        (vec!["chain", "--logit-bias", "abc+1"], "abc"),
        (
            vec!["chain", "--repeat-penalty-mode", "sideways"],
            "sideways",
        ),
        (vec!["chain", "--preset", "nope"], "nope"),
    ] {
        let o = gauge(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn replay_reproduces_llama_cpps_seeded_draws() {
    // test_dist_singleton_rng: after one call, dist(4242) draws these ids from 256 equal logits.
    let rec = data("test-sampling-vectors.json")["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["test"] == "test_dist_singleton_rng")
        .unwrap()
        .clone();
    let want: Vec<i64> = rec["then"]["control_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let trace = serde_json::json!({
        "n_vocab": 256,
        "params": {"seed": 4242, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "temperature": 1.0},
        "history": [],
        "logits": vec![vec![0.0f32; 256]; 1 + want.len()],
    });
    let path = dir.path().join("trace.json");
    std::fs::write(&path, trace.to_string()).unwrap();
    let o = gauge(&["replay", "--trace", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let got: Vec<i64> = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect();
    assert_eq!(&got[1..], &want[..]);
    // a malformed trace is an error, not a panic
    std::fs::write(&path, "{\"n_vocab\": 4, \"logits\": [[1, 2]").unwrap();
    let o = gauge(&["replay", "--trace", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn generate_names_paris_on_the_default_model() {
    let o = gauge(&[
        "generate",
        "--prompt",
        "The capital of France is",
        "-n",
        "8",
        "--temp",
        "0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("Paris"), "stdout: {}", stdout(&o));
    assert!(
        stderr(&o).contains("sampler chain: logits ->"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn tiny_probe_passes_the_gate_and_prints_the_summary_shape() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let o = gauge(&[
        "probe",
        "--prefixes",
        "2",
        "--tokens",
        "12",
        "--out",
        out,
        "--json",
        // tests run in parallel: one llama.cpp thread each keeps clear of ggml's spin cliff
        "--threads",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let conds = v["conditions"].as_array().unwrap();
    assert_eq!(conds.len(), 6);
    for c in conds {
        if c["theta"] == 1.0 || c["op"] != "ctrl" {
            assert_eq!(c["flip_rate"], 0.0, "{c}");
        }
        assert_eq!(c["positions"], 24);
    }
    assert!(v["forward_tokens"].as_u64().unwrap() < v["naive_forward_tokens"].as_u64().unwrap());
    assert!(v["zero_point"]["positive_fraction"].as_f64().is_some());
    // the same command again resumes: nothing is recomputed and the summary is the same
    let again = gauge(&[
        "probe",
        "--prefixes",
        "2",
        "--tokens",
        "12",
        "--out",
        out,
        "--json",
        // tests run in parallel: one llama.cpp thread each keeps clear of ggml's spin cliff
        "--threads",
        "1",
    ]);
    assert_eq!(stdout(&again), stdout(&o));
    // The run record and the report name the llama.cpp build that computed the logits (issue
    // 23 §5): its CPU features as llama.cpp reports them, at least ggml's x86_64 / aarch64 floor.
    let run = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("config.json")).unwrap()).unwrap();
    let cpu = cfg["llama_cpp_cpu"]
        .as_str()
        .unwrap_or_else(|| panic!("{cfg}"));
    assert!(cpu.split(' ').any(|f| f == "SSE3" || f == "NEON"), "{cpu}");
    let report = std::fs::read_to_string(run.join("REPORT.md")).unwrap();
    assert!(
        report.contains(&format!("CPU features `{cpu}`")),
        "{report}"
    );
}

#[test]
fn models_path_of_an_unknown_name_lists_the_known_ones() {
    let o = gauge(&["models", "path", "no-such-model"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("smollm2-135m-instruct"),
        "{}",
        stderr(&o)
    );
}

/// `--grammar FILE` is read as llama.cpp reads a grammar: GBNF, or Lark after `%llguidance`;
/// a `.lark` file without the marker (or a `.gbnf` with it) is refused, not guessed; a bad GBNF
/// names the file, line and problem.
#[test]
fn chain_grammar_file_is_gbnf_or_marked_lark() {
    let dir = std::env::temp_dir().join(format!("gauge-cli-grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let gbnf = write("yes.gbnf", "root ::= \"yes\" | \"no\"\n");
    let lark = write("yes.lark", "%llguidance {}\nstart: \"yes\" | \"no\"\n");
    for f in [&gbnf, &lark] {
        let o = gauge(&["chain", "--grammar", f]);
        assert!(o.status.success(), "{f}: {}", stderr(&o));
        assert!(stdout(&o).contains("grammar"), "{}", stdout(&o));
    }
    let unmarked = write("plain.lark", "start: \"yes\"\n");
    let o = gauge(&["chain", "--grammar", &unmarked]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("%llguidance"), "{}", stderr(&o));
    let marked = write("marked.gbnf", "%llguidance {}\nstart: \"yes\"\n");
    let o = gauge(&["chain", "--grammar", &marked]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let bad = write("bad.gbnf", "root ::= \"a\"\nitem = \"b\"\n");
    let o = gauge(&["chain", "--grammar", &bad]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("bad.gbnf") && err.contains("GBNF line 2"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The default build has no candle: `--engine candle` says how to get it (`--sampler` is the old
/// name of `--engine` and still parses).
#[cfg(not(feature = "candle"))]
#[test]
fn engine_candle_without_the_feature_says_how_to_build_it() {
    for flag in ["--engine", "--sampler"] {
        let o = gauge(&["probe", flag, "candle", "--prefixes", "1", "--tokens", "1"]);
        assert!(!o.status.success(), "{flag}");
        let err = stderr(&o);
        assert!(err.contains("--features candle"), "{flag}: {err}");
    }
}
