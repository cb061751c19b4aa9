//! A2 (`gauge json`): the prompt text against Python, scoring, and the resumable shared decode on the
//! deterministic source.

use gauge_engine::LogitSource;
use gauge_lab::json::schema::{a2_schemas, json_prompt, SchemaCheck};
use gauge_lab::json::{json_run_dir, run_json, score, JsonConfig, JsonSummary};
use gauge_lab::run::resume::fnv1a64;
use gauge_lab::run::Codec;
use gauge_lab::testing::{scratch_dir, BraceCodec, HashSource, HashSourceConfig};
use gauge_lab::{LabError, RunControl};
use gauge_sampling::TokenId;
use std::path::Path;

#[test]
fn schema_dumps_are_byte_identical_to_python_json_dumps_indent_2() {
    let r: serde_json::Value = serde_json::from_str(include_str!("data/a2_dumps.json")).unwrap();
    let s = a2_schemas();
    assert_eq!(s[0].dumped, r["first_dump"].as_str().unwrap());
    let want: Vec<u64> = r["fnv1a64"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let got: Vec<u64> = s.iter().map(|e| fnv1a64(e.dumped.as_bytes())).collect();
    let bad: Vec<&str> = s
        .iter()
        .zip(got.iter().zip(&want))
        .filter(|(_, (g, w))| g != w)
        .map(|(e, _)| e.id.as_str())
        .collect();
    assert!(bad.is_empty(), "dumps differing from Python: {bad:?}");
    let p = json_prompt(&s[0]);
    assert!(p.starts_with("Output ONLY a single JSON object that conforms to this JSON Schema. Do not include any explanation.\nJSON Schema:\n{\n  \"title\": \"Ground\""));
    assert!(p.ends_with("}\nJSON object:\n"));
}

#[test]
fn outputs_are_scored_like_the_notes_first_json_and_schema_valid() {
    // schema 0: {"transparency": integer in [0, 100]}, additionalProperties false
    let c = SchemaCheck::new(&a2_schemas()[0]);
    let reason = |o: &str| score(o, &c).1;
    assert_eq!(
        score("Here: {\"transparency\": 30}\n\n", &c),
        (true, "valid".into(), Some("{\"transparency\": 30}".into()))
    );
    assert_eq!(reason("{\"transparency\": 300}"), "schema_invalid");
    assert_eq!(reason("{\"transparency\": 30, \"x\": 1}"), "schema_invalid");
    assert_eq!(reason("{transparency: 30}"), "parse_error");
    assert_eq!(reason("no object here"), "no_json");
    assert_eq!(reason("{\"transparency\": 30"), "no_json");
}

fn cfg() -> JsonConfig {
    JsonConfig {
        model: "hash-source".into(),
        schemas: 7,
        max_tokens: 40,
        batch_schemas: 3,
        ..JsonConfig::default()
    }
}

fn run(
    root: &Path,
    cfg: &JsonConfig,
    ctl: RunControl,
) -> (Result<JsonSummary, LabError>, HashSource) {
    let mut src = HashSource::new(HashSourceConfig::default());
    let r = run_json(&mut src, &BraceCodec, cfg, root, &ctl);
    (r, src)
}

#[test]
fn shared_json_decode_matches_the_unshared_run_with_less_work() {
    let cfg = cfg();
    let (a, src) = run(&scratch_dir("json", "shared"), &cfg, RunControl::default());
    let a = a.unwrap();
    let (b, _) = run(
        &scratch_dir("json", "naive"),
        &cfg,
        RunControl {
            sharing: false,
            ..RunControl::default()
        },
    );
    let b = b.unwrap();
    assert_eq!(
        JsonSummary {
            forward_tokens: 0,
            ..a.clone()
        },
        JsonSummary {
            forward_tokens: 0,
            ..b.clone()
        }
    );
    assert_eq!(b.forward_tokens, b.naive_forward_tokens);
    assert!(a.forward_tokens < a.naive_forward_tokens, "{a:?}");
    assert_eq!(a.forward_tokens, src.forward_tokens());
    assert_eq!(src.live(), 0);
    assert_eq!(a.conditions.len(), 6);
    assert!(a.conditions.iter().all(|c| c.n == 7));
}

#[test]
fn json_lines_record_stop_reasons_and_outputs() {
    let cfg = cfg();
    let root = scratch_dir("json", "lines");
    run(
        &root,
        &cfg,
        RunControl {
            plots: true,
            ..RunControl::default()
        },
    )
    .0
    .unwrap();
    let dir = json_run_dir(&root, &cfg);
    let lines: Vec<gauge_lab::json::JsonLine> = std::fs::read_to_string(dir.join("raw.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 7 * 6);
    for l in &lines {
        match l.stop.as_str() {
            "eog" => assert_eq!(*l.tokens.last().unwrap(), 3),
            "stop_string" => assert!(l.output.contains("\n\n")),
            "max_tokens" => assert_eq!(l.tokens.len(), 40),
            other => panic!("{other}"),
        }
        assert_eq!(l.valid, l.reason == "valid");
    }
    assert!(
        lines.iter().any(|l| l.stop != "max_tokens"),
        "the toy codec must exercise early stops"
    );
    for f in [
        "config.json",
        "summary.json",
        "REPORT.md",
        "json_validity_vs_theta.svg",
        "json_validity_vs_theta.png",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let report = std::fs::read_to_string(dir.join("REPORT.md")).unwrap();
    assert!(
        report.contains("| 1.3 |")
            && report.contains("0.225")
            && report.contains("Determinism check")
    );
}

#[test]
fn json_resume_after_abort_reproduces_the_summary_byte_for_byte() {
    let cfg = cfg();
    let whole = scratch_dir("json", "whole");
    run(&whole, &cfg, RunControl::default()).0.unwrap();
    let want = std::fs::read(json_run_dir(&whole, &cfg).join("summary.json")).unwrap();
    let root = scratch_dir("json", "resumed");
    let r = run(
        &root,
        &cfg,
        RunControl {
            abort_after_chunks: Some(1),
            ..RunControl::default()
        },
    )
    .0;
    assert!(matches!(r, Err(LabError::Aborted { chunks: 1 })), "{r:?}");
    let raw = json_run_dir(&root, &cfg).join("raw.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&raw).unwrap();
    std::io::Write::write_all(&mut f, b"{\"chunk\":1,\"sch").unwrap();
    drop(f);
    run(&root, &cfg, RunControl::default()).0.unwrap();
    assert_eq!(
        std::fs::read(json_run_dir(&root, &cfg).join("summary.json")).unwrap(),
        want
    );
    let n = std::fs::read_to_string(&raw).unwrap().lines().count();
    assert_eq!(n, 7 * 6, "no output lost or counted twice");
}

/// The BraceCodec with every prompt one token longer: what a chat template or BOS change does.
struct LongerPrompts;

impl Codec for LongerPrompts {
    fn tokenize(&self, text: &str, special: bool) -> Result<Vec<TokenId>, String> {
        let mut v = BraceCodec.tokenize(text, special)?;
        v.insert(0, 1);
        Ok(v)
    }
    fn piece(&self, t: TokenId) -> Vec<u8> {
        BraceCodec.piece(t)
    }
    fn is_eog(&self, t: TokenId) -> bool {
        BraceCodec.is_eog(t)
    }
}

#[test]
fn results_from_other_prompt_tokens_are_not_resumed() {
    let cfg = cfg();
    let root = scratch_dir("json", "other-prompts");
    run(&root, &cfg, RunControl::default()).0.unwrap();
    let mut src = HashSource::new(HashSourceConfig::default());
    let r = run_json(
        &mut src,
        &LongerPrompts,
        &cfg,
        &root,
        &RunControl::default(),
    );
    assert!(matches!(r, Err(LabError::ConfigMismatch { .. })), "{r:?}");
    // the chat-template flag is part of the run id, and absent from plain-prompt configurations
    let chat = JsonConfig {
        chat_template: true,
        ..cfg.clone()
    };
    assert_ne!(chat.run_id(), cfg.run_id());
    assert!(!serde_json::to_string(&cfg)
        .unwrap()
        .contains("chat_template"));
}

/// Regression: the summary printed `conditioned_valid_rate` and no `window`, not the fields the
/// CLI promises (`valid_rate_given_theta1`, `window` per condition).
#[test]
fn summary_json_has_exactly_the_cli_shape_with_the_window() {
    let cfg = JsonConfig {
        window: Some(64),
        ..cfg()
    };
    let s = run(&scratch_dir("json", "shape"), &cfg, RunControl::default())
        .0
        .unwrap();
    let v = serde_json::to_value(&s).unwrap();
    for key in ["model", "conditions"] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    let c = &v["conditions"][0];
    for key in [
        "op",
        "theta",
        "window",
        "n",
        "n_valid",
        "valid_rate",
        "valid_rate_given_theta1",
    ] {
        assert!(c.get(key).is_some(), "condition lacks {key}: {c}");
    }
    assert_eq!(c["window"], 64);
    assert_eq!(c["op"], "ctrl");
    // ctrl θ = 1 is its own baseline: rate 1 when it has valid outputs, null when it has none.
    let expected = if c["n_valid"] == 0 {
        serde_json::Value::Null
    } else {
        serde_json::json!(1.0)
    };
    assert_eq!(c["valid_rate_given_theta1"], expected, "{c}");
    let back: JsonSummary = serde_json::from_value(v).unwrap();
    assert_eq!(back, s);
}
