//! End-to-end tests of `gauge probe` on the deterministic source: sharing, resumption, outputs.

use gauge_engine::LogitSource;
use gauge_lab::ops::Op;
use gauge_lab::probe::{run_dir, RawLine};
use gauge_lab::run::{Codec, Grid};
use gauge_lab::testing::{FnCodec, HashSource, HashSourceConfig, WordCodec};
use gauge_lab::{run_probe, run_probe_with, LabError, ProbeConfig, ProbeSummary, RunControl};
use std::path::{Path, PathBuf};

fn cfg() -> ProbeConfig {
    ProbeConfig {
        model: "hash-source".into(),
        prefixes: 7,
        tokens: 24,
        thetas: vec![1.0, 1.1, 1.3],
        batch_prefixes: 3,
        bootstrap_resamples: 500,
        ..ProbeConfig::default()
    }
}

fn source() -> HashSource {
    HashSource::new(HashSourceConfig::default())
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gauge-lab-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(
    root: &Path,
    cfg: &ProbeConfig,
    ctl: RunControl,
) -> (Result<ProbeSummary, LabError>, HashSource) {
    let mut src = source();
    let tok = WordCodec::new(src.n_vocab());
    let r = run_probe_with(
        &mut src,
        &tok,
        cfg,
        root,
        &RunControl {
            plots: false,
            ..ctl
        },
    );
    (r, src)
}

fn raw_lines(root: &Path, cfg: &ProbeConfig) -> Vec<RawLine> {
    let text = std::fs::read_to_string(run_dir(root, cfg).join("raw.jsonl")).unwrap();
    let mut v: Vec<RawLine> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    v.sort_by_key(|l| (l.role == gauge_lab::probe::Role::ZpNatural, l.prefix, l.run));
    v
}

#[test]
fn shared_tree_matches_an_unshared_naive_run_with_fewer_forward_tokens() {
    let cfg = cfg();
    let (a, src_a) = run(&tmp("shared"), &cfg, RunControl::default());
    let a = a.unwrap();
    let root_b = tmp("naive");
    let (b, _) = run(
        &root_b,
        &cfg,
        RunControl {
            sharing: false,
            ..RunControl::default()
        },
    );
    let b = b.unwrap();

    // The measurement is not vacuous: ctrl flips, the invariant ops do not.
    let flip = |s: &ProbeSummary, op: Op, th: f64| {
        s.conditions
            .iter()
            .find(|c| c.op == op && c.theta == th)
            .unwrap()
            .flip_rate
    };
    assert!(flip(&a, Op::Ctrl, 1.3) > 0.2, "{a:?}");
    assert_eq!(flip(&a, Op::Normalized, 1.3), 0.0);
    assert_eq!(flip(&a, Op::Subtractive, 1.3), 0.0);
    assert!(a.zero_point.as_ref().unwrap().own_median_flip_rate > 0.0);

    // Identical decisions, identical statistics; only the work differs.
    assert_eq!(
        ProbeSummary {
            forward_tokens: 0,
            ..a.clone()
        },
        ProbeSummary {
            forward_tokens: 0,
            ..b.clone()
        }
    );
    assert_eq!(a.naive_forward_tokens, b.naive_forward_tokens);
    assert_eq!(
        b.forward_tokens, b.naive_forward_tokens,
        "the unshared run is the naive run"
    );
    assert!(
        a.forward_tokens * 2 < a.naive_forward_tokens,
        "{} vs {}",
        a.forward_tokens,
        a.naive_forward_tokens
    );
    assert_eq!(
        a.forward_tokens,
        src_a.forward_tokens(),
        "per-run accounting adds up to the source's count"
    );
    assert_eq!(src_a.live(), 0, "every sequence is freed");
}

#[test]
fn raw_lines_of_shared_and_naive_runs_agree_token_for_token() {
    let cfg = ProbeConfig {
        prefixes: 4,
        tokens: 16,
        window: Some(5),
        ..cfg()
    };
    let (ra, rb) = (tmp("lines-a"), tmp("lines-b"));
    run(&ra, &cfg, RunControl::default()).0.unwrap();
    run(
        &rb,
        &cfg,
        RunControl {
            sharing: false,
            ..RunControl::default()
        },
    )
    .0
    .unwrap();
    let (la, lb) = (raw_lines(&ra, &cfg), raw_lines(&rb, &cfg));
    assert_eq!(la.len(), lb.len());
    assert_eq!(la.len(), 4 * cfg.flip_plan().len() + 4);
    for (x, y) in la.iter().zip(&lb) {
        assert_eq!(
            (x.prefix, x.run, &x.tokens, &x.zero_point, x.repeats),
            (y.prefix, y.run, &y.tokens, &y.zero_point, y.repeats)
        );
    }
}

#[test]
fn resume_after_abort_reproduces_the_uninterrupted_summary_byte_for_byte() {
    let cfg = cfg();
    let whole = tmp("whole");
    run(&whole, &cfg, RunControl::default()).0.unwrap();
    let whole_summary = std::fs::read(run_dir(&whole, &cfg).join("summary.json")).unwrap();
    let whole_raw = raw_lines(&whole, &cfg);
    let n_chunks = cfg.n_chunks();

    // Abort in the first phase, after the own-median phase started, and right before the end.
    for k in [1, n_chunks + 1, 2 * n_chunks - 1] {
        let root = tmp(&format!("abort-{k}"));
        let (r, _) = run(
            &root,
            &cfg,
            RunControl {
                abort_after_chunks: Some(k),
                ..RunControl::default()
            },
        );
        assert!(
            matches!(r, Err(LabError::Aborted { chunks }) if chunks == k),
            "{r:?}"
        );
        let raw_path = run_dir(&root, &cfg).join("raw.jsonl");
        // A kill in the middle of the next chunk's write: some of its lines and a torn one.
        let have = raw_lines(&root, &cfg);
        let next: Vec<&RawLine> = whole_raw
            .iter()
            .filter(|l| !have.contains(l))
            .take(2)
            .collect();
        let mut tail = String::new();
        for l in &next {
            tail.push_str(&serde_json::to_string(l).unwrap());
            tail.push('\n');
        }
        tail.push_str("{\"chunk\":1,\"pre");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&raw_path)
            .unwrap();
        std::io::Write::write_all(&mut f, tail.as_bytes()).unwrap();
        drop(f);

        let (r, _) = run(&root, &cfg, RunControl::default());
        r.unwrap();
        let resumed = std::fs::read(run_dir(&root, &cfg).join("summary.json")).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&resumed),
            String::from_utf8_lossy(&whole_summary),
            "abort after {k}"
        );
        assert_eq!(
            raw_lines(&root, &cfg),
            whole_raw,
            "no sequence lost or counted twice (abort after {k})"
        );
    }
}

#[test]
fn rerunning_a_finished_run_recomputes_nothing() {
    let cfg = cfg();
    let root = tmp("rerun");
    let first = run(&root, &cfg, RunControl::default()).0.unwrap();
    let (again, src) = run(&root, &cfg, RunControl::default());
    assert_eq!(again.unwrap(), first);
    assert_eq!(src.forward_tokens(), 0);
}

#[test]
fn a_different_config_in_the_same_directory_is_refused() {
    let cfg = cfg();
    let root = tmp("mismatch");
    run(&root, &cfg, RunControl::default()).0.unwrap();
    let cfg_path = run_dir(&root, &cfg).join("config.json");
    let text = std::fs::read_to_string(&cfg_path)
        .unwrap()
        .replace("\"tokens\": 24", "\"tokens\": 25");
    std::fs::write(&cfg_path, text).unwrap();
    assert!(matches!(
        run(&root, &cfg, RunControl::default()).0,
        Err(LabError::ConfigMismatch { .. })
    ));
}

#[test]
fn summary_json_has_exactly_the_cli_shape() {
    let cfg = ProbeConfig {
        prefixes: 2,
        tokens: 8,
        ..cfg()
    };
    let s = run(&tmp("shape"), &cfg, RunControl::default()).0.unwrap();
    let v = serde_json::to_value(&s).unwrap();
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&v),
        [
            "conditions",
            "forward_tokens",
            "model",
            "naive_forward_tokens",
            "zero_point"
        ]
    );
    assert_eq!(
        keys(&v["conditions"][0]),
        [
            "ci95",
            "flip_rate",
            "median_first_divergence",
            "op",
            "positions",
            "rep_rate",
            "theta"
        ]
    );
    assert_eq!(
        keys(&v["zero_point"]),
        [
            "median_top1_logit",
            "own_median_flip_rate",
            "positive_fraction"
        ]
    );
    assert_eq!(v["conditions"][0]["op"], "ctrl");
    assert_eq!(
        v["conditions"][2]["theta"].to_string(),
        "1.3",
        "θ is printed as typed, not as f32 noise"
    );
    assert_eq!(v["conditions"][0]["positions"], 16);
    let back: ProbeSummary = serde_json::from_value(v).unwrap();
    assert_eq!(back, s);
}

#[test]
fn zero_point_tracks_the_sources_offset() {
    for (offset, frac) in [(-60.0f32, 0.0), (60.0, 1.0)] {
        let cfg = ProbeConfig {
            prefixes: 3,
            tokens: 10,
            model: format!("offset{offset}"),
            ..cfg()
        };
        let mut src = HashSource::new(HashSourceConfig {
            offset,
            ..Default::default()
        });
        let tok = WordCodec::new(512);
        let s = run_probe(&mut src, &tok, &cfg, &tmp(&format!("zp{offset}")), false).unwrap();
        assert_eq!(s.zero_point.as_ref().unwrap().positive_fraction, frac);
        // top-1 = offset + noise (< spread) + peak + one echo boost per recent occurrence
        let m = s.zero_point.as_ref().unwrap().median_top1_logit;
        assert!(
            m > f64::from(offset) && m < f64::from(offset) + 6.0 + 5.0 + 6.0 * 4.5,
            "{m}"
        );
    }
}

#[test]
fn outputs_include_report_and_plots() {
    let cfg = ProbeConfig {
        prefixes: 3,
        tokens: 12,
        ..cfg()
    };
    let root = tmp("outputs");
    let mut src = source();
    let tok = WordCodec::new(512);
    let s = run_probe(&mut src, &tok, &cfg, &root, false).unwrap();
    let dir = run_dir(&root, &cfg);
    for f in ["config.json", "raw.jsonl", "summary.json", "REPORT.md"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    for p in [
        "flip_rate_vs_theta",
        "rep_rate_vs_theta",
        "positive_fraction",
    ] {
        let svg = std::fs::read_to_string(dir.join(format!("{p}.svg"))).unwrap();
        assert!(svg.starts_with("<svg"));
        assert_eq!(
            &std::fs::read(dir.join(format!("{p}.png"))).unwrap()[1..4],
            b"PNG"
        );
    }
    let report = std::fs::read_to_string(dir.join("REPORT.md")).unwrap();
    assert!(report.contains("## Table 1"));
    assert!(report.contains("| gpt2-large (note) | 0.5227 | 13.337 | 0.9569 |"));
    assert!(report.contains("## Table 2"));
    assert!(report.contains("## Table 4"));
    assert!(report.contains("Validity gate (θ = 1: every op flips exactly 0): PASS"));
    let table = gauge_lab::render_table(&s);
    assert!(table.contains("validity gate (θ = 1 flips 0 for every op): PASS"));
    assert_eq!(table.lines().filter(|l| l.starts_with("ctrl ")).count(), 3);
}

#[test]
fn tokenizer_failures_and_bad_configs_are_typed_errors() {
    let mut src = source();
    let bad_tok = FnCodec(|_: &str| -> Result<Vec<i32>, String> { Err("boom".into()) });
    let r = run_probe(&mut src, &bad_tok, &cfg(), &tmp("badtok"), false);
    assert!(matches!(r, Err(LabError::Tokenize { prefix: 0, .. })));
    let empty_tok = FnCodec(|_: &str| -> Result<Vec<i32>, String> { Ok(vec![]) });
    assert!(matches!(
        run_probe(&mut src, &empty_tok, &cfg(), &tmp("emptytok"), false),
        Err(LabError::Tokenize { .. })
    ));
    let oob_tok = FnCodec(|_: &str| -> Result<Vec<i32>, String> { Ok(vec![100_000]) });
    assert!(matches!(
        run_probe(&mut src, &oob_tok, &cfg(), &tmp("oobtok"), false),
        Err(LabError::Tokenize { .. })
    ));
    let tok = WordCodec::new(512);
    let bad = ProbeConfig {
        thetas: vec![1.3],
        ..cfg()
    };
    assert!(matches!(
        run_probe(&mut src, &tok, &bad, &tmp("badcfg"), false),
        Err(LabError::Config { .. })
    ));
}

#[test]
fn source_limits_surface_as_errors_and_free_everything() {
    let mut src = HashSource::new(HashSourceConfig {
        max_sequences: 4,
        ..Default::default()
    });
    let tok = WordCodec::new(512);
    let r = run_probe(&mut src, &tok, &cfg(), &tmp("limits"), false);
    assert!(matches!(r, Err(LabError::Source(_))), "{r:?}");
    assert_eq!(src.live(), 0);
}

#[test]
fn results_from_other_prompt_tokens_are_not_resumed() {
    let cfg = cfg();
    let root = tmp("other-prompts");
    run(&root, &cfg, RunControl::default()).0.unwrap();
    // the same configuration, prefixes tokenized with a leading BOS-like token
    let mut src = source();
    let words = WordCodec::new(src.n_vocab());
    let with_bos = FnCodec(move |t: &str| {
        let mut v = words.tokenize(t, false)?;
        v.insert(0, 1);
        Ok(v)
    });
    let r = run_probe_with(&mut src, &with_bos, &cfg, &root, &RunControl::default());
    assert!(matches!(r, Err(LabError::ConfigMismatch { .. })), "{r:?}");
}
