//! `--sampler llama-cpp`: llama.cpp's own chain (logit-bias c on every token → penalties →
//! greedy, the note's driver, docs/PROTOCOL.md §8.1 driver) against gauge's operators on the same rows. They implement the
//! same operators in the same fp32 arithmetic, so every run must agree token for token: on the
//! deterministic source (llama.cpp's samplers need no model) and on the real default model.
//! `normalized` has no llama.cpp counterpart and stays on gauge's operator in both runs, so the
//! plans — and on a real model the batches, which its logits depend on — are identical.

use gauge_engine::{LlamaSource, Model, ModelOptions, Registry, DEFAULT_MODEL};
use gauge_lab::json::{compare_json_runs, run_json, JsonConfig};
use gauge_lab::ops::Op;
use gauge_lab::probe::compare_probe_runs;
use gauge_lab::stack::Stack;
use gauge_lab::testing::{scratch_dir, BraceCodec, HashSource, HashSourceConfig, WordCodec};
use gauge_lab::{run_probe_with, ProbeConfig, ProbeSummary, RunControl};
use std::path::Path;
use std::sync::Arc;

fn quiet() -> RunControl {
    RunControl {
        plots: false,
        ..RunControl::default()
    }
}

fn hash_probe(root: &Path, cfg: &ProbeConfig) -> ProbeSummary {
    let mut src = HashSource::new(HashSourceConfig::default());
    run_probe_with(&mut src, &WordCodec::new(512), cfg, root, &quiet()).unwrap()
}

/// Both stacks of one probe grid; returns (gauge summary, llama summary, agreement).
fn both(
    root: &Path,
    base: &ProbeConfig,
    run: &mut dyn FnMut(&Path, &ProbeConfig) -> ProbeSummary,
) -> (ProbeSummary, ProbeSummary, gauge_lab::probe::StackAgreement) {
    let g = ProbeConfig {
        sampler: Stack::Gauge,
        ..base.clone()
    };
    let l = ProbeConfig {
        sampler: Stack::LlamaCpp,
        ..base.clone()
    };
    let sg = run(root, &g);
    let sl = run(root, &l);
    let a = compare_probe_runs(root, &g, &l).unwrap();
    (sg, sl, a)
}

#[test]
fn llama_cpp_chain_and_gauge_ops_agree_token_for_token_on_the_hash_source() {
    for window in [None, Some(7)] {
        let base = ProbeConfig {
            model: "hash-source".into(),
            prefixes: 6,
            tokens: 24,
            thetas: vec![1.0, 1.1, 1.3],
            window,
            batch_prefixes: 4,
            bootstrap_resamples: 200,
            ..ProbeConfig::default()
        };
        let root = scratch_dir("xstack", &format!("hash-{window:?}"));
        let (g, l, a) = both(&root, &base, &mut hash_probe);
        // 3 ops × 3 θ × ±c + zero point + zp reference + own-median run, per prefix
        assert_eq!(a.runs, 6 * (3 * 3 * 2 + 3), "{window:?}");
        assert_eq!(a.identical_runs, a.runs, "{window:?}: {a:?}");
        assert_eq!(a.differing_positions, 0);
        assert_eq!(g.conditions, l.conditions);
        assert_eq!(l.sampler, Stack::LlamaCpp);
        let table = gauge_lab::render_table(&l);
        assert!(table.contains("normalized*") && table.contains("no normalized penalty"));
        assert!(!gauge_lab::render_table(&g).contains("normalized*"));
        let ctrl13 = g
            .conditions
            .iter()
            .find(|c| c.op == Op::Ctrl && c.theta == 1.3)
            .unwrap();
        assert!(ctrl13.flip_rate > 0.0, "the grid must exercise gauge flips");
    }
}

#[test]
fn json_task_agrees_across_stacks_on_the_hash_source() {
    let base = JsonConfig {
        model: "hash-source".into(),
        schemas: 6,
        max_tokens: 40,
        batch_schemas: 3,
        ..JsonConfig::default()
    };
    let root = scratch_dir("xstack", "json");
    let mut sums = Vec::new();
    for s in [Stack::Gauge, Stack::LlamaCpp] {
        let cfg = JsonConfig {
            sampler: s,
            ..base.clone()
        };
        let mut src = HashSource::new(HashSourceConfig::default());
        sums.push(run_json(&mut src, &BraceCodec, &cfg, &root, &quiet()).unwrap());
    }
    let (n, same, verdict) = compare_json_runs(
        &root,
        &JsonConfig {
            sampler: Stack::Gauge,
            ..base.clone()
        },
        &JsonConfig {
            sampler: Stack::LlamaCpp,
            ..base
        },
    )
    .unwrap();
    // 6 schemas × (ctrl, normalized) × θ ∈ {1, 1.1, 1.3}
    assert_eq!((n, same, verdict), (36, 36, 36));
    assert_eq!(sums[0].conditions, sums[1].conditions);
}

/// The default model, a few prefixes at θ = 1.3 with c = ±5: llama.cpp's chain through the
/// bindings and gauge's ctrl (and subtractive) op emit the same tokens at every position.
#[test]
fn llama_cpp_chain_and_gauge_ctrl_agree_on_the_real_model() {
    let path = Registry::from_env()
        .expect("cache dir")
        .resolve_model(DEFAULT_MODEL)
        .unwrap_or_else(|e| panic!("pulling {DEFAULT_MODEL}: {e}"));
    let opts = ModelOptions {
        n_ctx: 256,
        // 3 prefixes × 15 runs, all possibly diverged at once
        n_seq_max: 48,
        n_batch: 512,
        ..Default::default()
    };
    let model = Arc::new(Model::load(path, opts).expect("load the default model"));
    let base = ProbeConfig {
        model: DEFAULT_MODEL.into(),
        prefixes: 3,
        tokens: 32,
        thetas: vec![1.0, 1.3],
        shift: 5.0,
        batch_prefixes: 3,
        bootstrap_resamples: 200,
        ..ProbeConfig::default()
    };
    let root = scratch_dir("xstack", "real");
    let mut run = |root: &Path, cfg: &ProbeConfig| -> ProbeSummary {
        let mut src = LlamaSource::new(Arc::clone(&model)).unwrap();
        run_probe_with(&mut src, model.as_ref(), cfg, root, &quiet()).unwrap()
    };
    let (g, l, a) = both(&root, &base, &mut run);
    assert_eq!(a.runs, 3 * (3 * 2 * 2 + 3));
    assert_eq!(
        a.identical_runs, a.runs,
        "first difference (prefix, op, θ, c, position): {:?}",
        a.first_difference
    );
    assert_eq!(g.conditions, l.conditions);
    let ctrl13 = g
        .conditions
        .iter()
        .find(|c| c.op == Op::Ctrl && c.theta == 1.3)
        .unwrap();
    assert!(
        ctrl13.flip_rate > 0.0,
        "θ = 1.3 must flip something, or the agreement proves little: {g:?}"
    );
}
