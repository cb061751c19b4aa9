//! Probe runs decoded outside the crate (the Python package's hf / vllm engines) go through the
//! same run directory, analysis and report as `gauge probe`: replaying a gauge run's decoded
//! tokens through `ExternalProbe` as an "hf" run gives the gauge run's summary, resumes by chunk,
//! refuses malformed input by field, and both REPORT.md files gain the cross-stack table.

use gauge_engine::LogitSource;
use gauge_lab::probe::external::{DecodedRun, ExternalProbe};
use gauge_lab::probe::{run_dir, RawLine, Role};
use gauge_lab::stack::Stack;
use gauge_lab::testing::{scratch_dir, test_engine, HashSource, HashSourceConfig, WordCodec};
use gauge_lab::{run_probe_with, Grid, LabError, ProbeConfig, RunControl};

fn gauge_cfg() -> ProbeConfig {
    ProbeConfig {
        model: "hash-source".into(),
        prefixes: 5,
        tokens: 16,
        batch_prefixes: 2,
        bootstrap_resamples: 200,
        ..ProbeConfig::default()
    }
}

fn hf_cfg() -> ProbeConfig {
    ProbeConfig {
        sampler: Stack::Hf,
        engine: Some(test_engine()),
        ..gauge_cfg()
    }
}

fn gauge_lines(root: &std::path::Path) -> (Vec<RawLine>, Vec<Vec<i32>>, usize) {
    let mut src = HashSource::new(HashSourceConfig::default());
    let n_vocab = src.n_vocab();
    let tok = WordCodec::new(n_vocab);
    let ctl = RunControl {
        plots: false,
        ..RunControl::default()
    };
    run_probe_with(&mut src, &tok, &gauge_cfg(), root, &ctl).unwrap();
    let text = std::fs::read_to_string(run_dir(root, &gauge_cfg()).join("raw.jsonl")).unwrap();
    let lines: Vec<RawLine> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut prompts = vec![Vec::new(); gauge_cfg().prefixes];
    for l in &lines {
        prompts[l.prefix] = l.prompt.clone();
    }
    (lines, prompts, n_vocab)
}

fn decoded(lines: &[RawLine], phase_natural: bool, k: usize) -> Vec<DecodedRun> {
    lines
        .iter()
        .filter(|l| l.is_natural() == phase_natural && l.chunk == k)
        .map(|l| DecodedRun {
            prefix: l.prefix,
            run: l.run,
            tokens: l.tokens.clone(),
            forward_tokens: l.forward_tokens,
            zero_point: l.zero_point.clone(),
        })
        .collect()
}

#[test]
fn an_external_run_of_the_same_tokens_summarises_as_the_gauge_run_and_resumes() {
    let root = scratch_dir("ext", "same");
    let (lines, prompts, n_vocab) = gauge_lines(&root);
    let cfg = hf_cfg();
    let mut ext = ExternalProbe::open(&root, cfg.clone(), prompts.clone(), n_vocab).unwrap();
    assert_eq!(
        ext.pending_chunks(0).unwrap(),
        (0..cfg.n_chunks()).collect::<Vec<_>>()
    );
    assert!(ext.plan(1).is_err(), "phase 1 needs phase 0's median first");
    ext.append_chunk(0, 0, decoded(&lines, false, 0)).unwrap();
    drop(ext);
    // Resumed: chunk 0 is done, the rest pending.
    let mut ext = ExternalProbe::open(&root, cfg.clone(), prompts.clone(), n_vocab).unwrap();
    assert_eq!(ext.pending_chunks(0).unwrap(), vec![1, 2]);
    for k in 1..cfg.n_chunks() {
        ext.append_chunk(0, k, decoded(&lines, false, k)).unwrap();
    }
    let nat = ext.plan(1).unwrap();
    let gauge_nat = lines.iter().find(|l| l.is_natural()).unwrap();
    assert_eq!((nat[0].role, nat[0].c), (Role::ZpNatural, gauge_nat.c));
    assert!(ext.finish(false).is_err(), "phase 1 pending");
    for k in 0..cfg.n_chunks() {
        ext.append_chunk(1, k, decoded(&lines, true, k)).unwrap();
    }
    let s = ext.finish(false).unwrap();
    let g: gauge_lab::ProbeSummary = serde_json::from_str(
        &std::fs::read_to_string(run_dir(&root, &gauge_cfg()).join("summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(s.sampler, Stack::Hf);
    assert_eq!(s.conditions, g.conditions);
    assert_eq!(s.zero_point, g.zero_point);
    assert_eq!(s.forward_tokens, g.forward_tokens);
    // The hf report lists the gauge run (all runs identical), and config.json records the engine.
    let dir = ext.dir().to_path_buf();
    let report = std::fs::read_to_string(dir.join("REPORT.md")).unwrap();
    assert!(report.contains("## Cross-stack"), "{report}");
    let runs = lines.len();
    assert!(
        report.contains(&format!("| gauge | {runs}/{runs} | 0/")),
        "{report}"
    );
    assert!(report.contains("hf (cpu, float32) (this run)"), "{report}");
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    assert!(config.contains("\"sampler\": \"hf\"") && config.contains("\"torch\": \"test\""));
    // Re-running gauge now finds the hf run: its report gains the table too.
    let mut src = HashSource::new(HashSourceConfig::default());
    let tok = WordCodec::new(n_vocab);
    let ctl = RunControl {
        plots: false,
        ..RunControl::default()
    };
    run_probe_with(&mut src, &tok, &gauge_cfg(), &root, &ctl).unwrap();
    let g_report = std::fs::read_to_string(run_dir(&root, &gauge_cfg()).join("REPORT.md")).unwrap();
    assert!(g_report.contains(&format!("| hf (cpu, float32) | {runs}/{runs} | 0/")));
}

#[test]
fn malformed_external_input_is_refused_by_field() {
    let root = scratch_dir("ext", "bad");
    let (lines, prompts, n_vocab) = gauge_lines(&root);
    let field = |r: Result<(), LabError>| match r {
        Err(LabError::Config { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let open_err =
        |c: ProbeConfig, p: Vec<Vec<i32>>| match ExternalProbe::open(&root, c, p, n_vocab) {
            Err(LabError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
    assert_eq!(open_err(gauge_cfg(), prompts.clone()), "sampler");
    assert_eq!(
        open_err(
            ProbeConfig {
                engine: None,
                ..hf_cfg()
            },
            prompts.clone()
        ),
        "engine"
    );
    assert_eq!(
        open_err(
            ProbeConfig {
                window: Some(64),
                ..hf_cfg()
            },
            prompts.clone()
        ),
        "window"
    );
    assert_eq!(open_err(hf_cfg(), prompts[..2].to_vec()), "prompts");
    let mut ext = ExternalProbe::open(&root, hf_cfg(), prompts, n_vocab).unwrap();
    let good = decoded(&lines, false, 0);
    assert_eq!(field(ext.append_chunk(0, 0, good[1..].to_vec())), "runs");
    let mut twice = good.clone();
    twice.push(good[0].clone());
    assert_eq!(field(ext.append_chunk(0, 0, twice)), "runs");
    let mut short = good.clone();
    short[0].tokens.pop();
    assert_eq!(field(ext.append_chunk(0, 0, short)), "tokens");
    let mut no_zp = good.clone();
    for r in no_zp.iter_mut() {
        r.zero_point = None;
    }
    assert_eq!(field(ext.append_chunk(0, 0, no_zp)), "zero_point");
    assert_eq!(field(ext.append_chunk(0, 9, good.clone())), "chunk");
    ext.append_chunk(0, 0, good.clone()).unwrap();
    assert_eq!(field(ext.append_chunk(0, 0, good)), "chunk");
}
