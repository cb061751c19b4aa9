//! A2 runs decoded outside the crate (the Python package's hf / vllm engines) go through the same
//! lines, summary and report as `gauge json`: replaying a gauge run's outputs through
//! `ExternalJson` as an "hf" run gives the gauge run's lines and summary, resumes by chunk, and
//! refuses malformed input and flags the stack cannot honour by field.

use gauge_lab::json::external::{DecodedOutput, ExternalJson};
use gauge_lab::json::{json_run_dir, run_json, JsonConfig, JsonLine};
use gauge_lab::stack::Stack;
use gauge_lab::testing::{scratch_dir, test_engine, BraceCodec, HashSource, HashSourceConfig};
use gauge_lab::{LabError, RunControl};
use std::path::Path;

fn gauge_cfg() -> JsonConfig {
    JsonConfig {
        model: "hash-source".into(),
        schemas: 6,
        max_tokens: 40,
        batch_schemas: 3,
        ..JsonConfig::default()
    }
}

fn hf_cfg() -> JsonConfig {
    JsonConfig {
        sampler: Stack::Hf,
        engine: Some(test_engine()),
        ..gauge_cfg()
    }
}

fn read_lines(dir: &Path) -> Vec<JsonLine> {
    std::fs::read_to_string(dir.join("raw.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The gauge run's lines and prompt lengths (the replay needs prompts of the same lengths).
fn gauge_run(root: &Path) -> (Vec<JsonLine>, Vec<Vec<i32>>) {
    let mut src = HashSource::new(HashSourceConfig::default());
    let ctl = RunControl {
        plots: false,
        ..RunControl::default()
    };
    run_json(&mut src, &BraceCodec, &gauge_cfg(), root, &ctl).unwrap();
    let lines = read_lines(&json_run_dir(root, &gauge_cfg()));
    let mut prompts = vec![Vec::new(); gauge_cfg().schemas];
    for l in &lines {
        prompts[l.schema] = vec![5; l.prompt_tokens];
    }
    (lines, prompts)
}

fn decoded(lines: &[JsonLine], k: usize) -> Vec<DecodedOutput> {
    lines
        .iter()
        .filter(|l| l.chunk == k)
        .map(|l| DecodedOutput {
            schema: l.schema,
            run: l.run,
            tokens: l.tokens.clone(),
            output: l.output.clone(),
            eog: l.stop == "eog",
            forward_tokens: l.forward_tokens,
        })
        .collect()
}

const N_VOCAB: usize = 1024;

#[test]
fn replaying_a_gauge_run_as_hf_gives_its_lines_and_summary_and_resumes() {
    let root = scratch_dir("extjson", "replay");
    let (lines, prompts) = gauge_run(&root);
    let stops: std::collections::BTreeSet<&str> = lines.iter().map(|l| l.stop.as_str()).collect();
    assert!(
        stops.len() >= 2,
        "the grid must exercise several stop reasons: {stops:?}"
    );
    let gauge_summary: gauge_lab::json::JsonSummary = serde_json::from_str(
        &std::fs::read_to_string(json_run_dir(&root, &gauge_cfg()).join("summary.json")).unwrap(),
    )
    .unwrap();

    let mut ext = ExternalJson::open(&root, hf_cfg(), prompts.clone(), N_VOCAB).unwrap();
    assert_eq!(ext.pending_chunks(), vec![0, 1]);
    ext.append_chunk(0, decoded(&lines, 0)).unwrap();
    drop(ext);
    // Reopened: chunk 0 is kept, chunk 1 pending.
    let mut ext = ExternalJson::open(&root, hf_cfg(), prompts, N_VOCAB).unwrap();
    assert_eq!(ext.pending_chunks(), vec![1]);
    assert!(
        ext.finish(false).is_err(),
        "finish refuses a run with chunks pending"
    );
    ext.append_chunk(1, decoded(&lines, 1)).unwrap();
    let s = ext.finish(true).unwrap();
    assert_eq!(s.sampler, Stack::Hf);
    assert_eq!(s.conditions, gauge_summary.conditions);
    assert_eq!(s.baseline_valid, gauge_summary.baseline_valid);
    assert_eq!(s.forward_tokens, gauge_summary.forward_tokens);
    let dir = ext.dir().to_path_buf();
    assert_eq!(
        read_lines(&dir),
        lines,
        "the same lines: stop reason, extraction, verdict"
    );
    let report = std::fs::read_to_string(dir.join("REPORT.md")).unwrap();
    assert!(report.contains("(sampler: hf)") && report.contains("cpu, float32"));
    assert!(dir.join("json_validity_vs_theta.svg").exists());
    let cfg: JsonConfig =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg.engine, hf_cfg().engine);
}

fn field_of(e: LabError) -> String {
    match e {
        LabError::Config { field, .. } => field,
        other => panic!("expected a configuration error, got {other}"),
    }
}

#[test]
fn malformed_outputs_and_unhonourable_flags_are_refused_by_field() {
    let root = scratch_dir("extjson", "refuse");
    let (lines, prompts) = gauge_run(&root);
    let open = |cfg: JsonConfig| ExternalJson::open(&root, cfg, prompts.clone(), N_VOCAB);
    for (cfg, field) in [
        (gauge_cfg(), "sampler"),
        (
            JsonConfig {
                window: Some(64),
                ..hf_cfg()
            },
            "window",
        ),
        (
            JsonConfig {
                constrained: true,
                ..hf_cfg()
            },
            "constrained",
        ),
        (
            JsonConfig {
                engine: None,
                ..hf_cfg()
            },
            "engine",
        ),
    ] {
        assert_eq!(field_of(open(cfg).unwrap_err()), field);
    }
    let mut ext = open(hf_cfg()).unwrap();
    // An output cut short without a reason (neither end-of-generation nor a stop string).
    let mut runs = decoded(&lines, 0);
    let i = runs
        .iter()
        .position(|r| r.tokens.len() == gauge_cfg().max_tokens)
        .expect("an output that ran to max_tokens");
    runs[i].tokens.pop();
    assert_eq!(field_of(ext.append_chunk(0, runs).unwrap_err()), "tokens");
    let mut runs = decoded(&lines, 0);
    runs.pop();
    assert_eq!(field_of(ext.append_chunk(0, runs).unwrap_err()), "runs");
    let mut runs = decoded(&lines, 0);
    runs.push(runs[0].clone());
    assert_eq!(field_of(ext.append_chunk(0, runs).unwrap_err()), "runs");
    assert_eq!(field_of(ext.append_chunk(7, vec![]).unwrap_err()), "chunk");
    assert_eq!(ext.pending_chunks(), vec![0, 1], "nothing was written");
}
