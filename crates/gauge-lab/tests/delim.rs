//! `gauge delim` end to end on the deterministic source: the gate, the predictors against the
//! decoder's actual choices, the delimiter rates recounted from the raw records, resumption; and
//! the real HumanEval file (pulled through the registry like a model).

use gauge_lab::delim::humaneval::{self, Task};
use gauge_lab::delim::{delim_run_dir, run_delim, DelimConfig, DelimLine, DelimSummary};
use gauge_lab::ops::Op;
use gauge_lab::run::Codec;
use gauge_lab::testing::{scratch_dir, HashSource, HashSourceConfig};
use gauge_lab::{LabError, RunControl};
use gauge_sampling::TokenId;
use std::path::Path;

/// Token texts with known tags: ids ≡ 0 (mod 5) are " (" (delimiter, bracket), ids ≡ 1 are "\n"
/// (delimiter, not bracket), id 7 is "<eos>" rendered (not a delimiter; as a piece it is empty),
/// everything else a word.
struct ToyCodec;

impl Codec for ToyCodec {
    fn tokenize(&self, text: &str, _parse_special: bool) -> Result<Vec<TokenId>, String> {
        Ok(text
            .bytes()
            .take(30)
            .map(|b| TokenId::from(b) * 3 % 500 + 2)
            .collect())
    }
    fn token_text(&self, t: TokenId) -> Vec<u8> {
        match (t, t % 5) {
            (7, _) => b"<eos>".to_vec(),
            (_, 0) => b" (".to_vec(),
            (_, 1) => b"\n".to_vec(),
            _ => format!(" w{t}").into_bytes(),
        }
    }
    fn piece(&self, t: TokenId) -> Vec<u8> {
        if t == 7 {
            Vec::new()
        } else {
            self.token_text(t)
        }
    }
    fn is_eog(&self, t: TokenId) -> bool {
        t == 7
    }
}

fn tasks() -> Vec<Task> {
    (0..6)
        .map(|i| Task {
            index: i,
            task_id: format!("HumanEval/{i}"),
            prompt: format!("def f{i}(x):\n    \"\"\"Return x plus {i}.\"\"\"\n"),
        })
        .collect()
}

fn cfg() -> DelimConfig {
    DelimConfig {
        model: "hash-source".into(),
        prompts: 6,
        tokens: 40,
        thetas: vec![1.0, 1.1, 1.3, 1.5],
        ops: vec![Op::Ctrl, Op::Normalized, Op::Subtractive],
        batch_prompts: 4,
        bootstrap_resamples: 500,
        ..DelimConfig::default()
    }
}

fn run(root: &Path, cfg: &DelimConfig, ctl: RunControl) -> Result<DelimSummary, LabError> {
    let mut src = HashSource::new(HashSourceConfig::default());
    let r = run_delim(&mut src, &ToyCodec, &tasks(), cfg, root, &ctl);
    assert_eq!(src.live(), 0, "every sequence freed");
    r
}

fn lines(root: &Path, cfg: &DelimConfig) -> Vec<DelimLine> {
    std::fs::read_to_string(delim_run_dir(root, cfg).join("raw.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn gate_holds_and_the_two_sided_predictor_matches_every_decision() {
    let cfg = cfg();
    let root = scratch_dir("delim", "predict");
    let s = run(
        &root,
        &cfg,
        RunControl {
            plots: true,
            ..RunControl::default()
        },
    )
    .unwrap();
    for o in &s.ops {
        assert_eq!(o.gate_flips, 0, "{}", o.op);
        assert_eq!(o.gate_positions, 6 * 40);
        assert_eq!(o.positions, 3 * 6 * 40);
        // gauge's derivation decides exactly what the decoder decided, for every operator
        let g = &o.gauge_predictor;
        assert_eq!((g.fp, g.fn_), (0, 0), "{}: {g:?}", o.op);
        assert_eq!(g.tp, o.flips, "{}", o.op);
    }
    let ctrl = s.op(Op::Ctrl).unwrap();
    // the hash source sits at +12: ctrl flips, on every slice the derivation allows
    assert!(ctrl.flips > 0 && ctrl.clean.flips > 0, "{ctrl:?}");
    assert!(
        ctrl.two_sided.flips > 0,
        "the toy must exercise two-sided flips"
    );
    assert_eq!(ctrl.top_unseen.flips, 0, "an unseen top-1 never flips");
    // on clean positions the note's formula is exact for ctrl and every flip is the runner-up
    let n = &ctrl.note_predictor;
    assert_eq!((n.fp, n.fn_), (0, 0), "{n:?}");
    assert_eq!(ctrl.clean_flips_on_runner_up, Some(1.0));
    // two-sided flips never emit the (penalized) runner-up, so not every flip lands on it
    assert!(ctrl.flips_on_runner_up.unwrap() < 1.0);
    let dir = delim_run_dir(&root, &cfg);
    for f in [
        "config.json",
        "summary.json",
        "REPORT.md",
        "delim_vs_theta.svg",
        "delim_vs_theta.png",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let report = std::fs::read_to_string(dir.join("REPORT.md")).unwrap();
    assert!(report.contains("PASS") && report.contains("0.99934") && report.contains("two-sided"));
}

#[test]
fn delimiter_rates_recount_from_the_raw_records() {
    let cfg = cfg();
    let root = scratch_dir("delim", "recount");
    let s = run(
        &root,
        &cfg,
        RunControl {
            plots: false,
            ..RunControl::default()
        },
    )
    .unwrap();
    let ls = lines(&root, &cfg);
    assert_eq!(ls.len(), 6 * 3 * 4);
    for op in [Op::Ctrl, Op::Normalized, Op::Subtractive] {
        // per record: flips whose pre-penalty top-1 is " (" or "\n" by the toy's table
        let (mut rates, mut brackets, mut flips_delim, mut flips) = (vec![], vec![], 0u64, 0u64);
        for l in ls.iter().filter(|l| l.op == op && l.theta != 1.0) {
            let p = &l.positions;
            let (mut d, mut b) = (0, 0);
            for k in 0..p.len() {
                let flip = p.emitted[k] != p.top1[k];
                let t = p.top1[k];
                let delim = t != 7 && (t % 5 == 0 || t % 5 == 1);
                let bracket = t != 7 && t % 5 == 0;
                assert_eq!(l.structural[k], delim);
                assert_eq!(l.bracket[k], bracket);
                assert_eq!(l.flip[k], flip);
                assert_eq!(
                    l.note_predicted[k].is_some(),
                    l.positions.top1_seen[k]
                        && !l.positions.top2_seen[k]
                        && l.positions.z_top[k] > 0.0
                );
                if flip {
                    flips += 1;
                    d += u64::from(delim);
                    b += u64::from(bracket);
                }
            }
            flips_delim += d;
            rates.push(d as f64 / p.len() as f64);
            brackets.push(b as f64 / p.len() as f64);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let o = s.op(op).unwrap();
        assert_eq!(o.flips, flips, "{op}");
        assert_eq!(o.delimiter_flip_rate, mean(&rates), "{op}");
        assert_eq!(o.bracket_flip_rate, mean(&brackets), "{op}");
        if flips > 0 {
            assert_eq!(
                o.delimiter_share_of_flips,
                Some(flips_delim as f64 / flips as f64)
            );
        }
    }
    // generated text: pieces of the emitted tokens, <eos> as nothing
    let l = &ls[0];
    let text: String = l
        .positions
        .emitted
        .iter()
        .map(|&t| String::from_utf8(ToyCodec.piece(t)).unwrap())
        .collect();
    assert_eq!(l.gen_text, text);
}

#[test]
fn delim_resume_after_abort_reproduces_the_summary_byte_for_byte() {
    let cfg = cfg();
    let whole = scratch_dir("delim", "whole");
    run(
        &whole,
        &cfg,
        RunControl {
            plots: false,
            ..RunControl::default()
        },
    )
    .unwrap();
    let want = std::fs::read(delim_run_dir(&whole, &cfg).join("summary.json")).unwrap();
    let root = scratch_dir("delim", "resumed");
    let r = run(
        &root,
        &cfg,
        RunControl {
            abort_after_chunks: Some(1),
            plots: false,
            ..RunControl::default()
        },
    );
    assert!(matches!(r, Err(LabError::Aborted { chunks: 1 })), "{r:?}");
    run(
        &root,
        &cfg,
        RunControl {
            plots: false,
            ..RunControl::default()
        },
    )
    .unwrap();
    assert_eq!(
        std::fs::read(delim_run_dir(&root, &cfg).join("summary.json")).unwrap(),
        want
    );
}

#[test]
fn prompts_beyond_the_data_or_the_context_are_config_errors() {
    let root = scratch_dir("delim", "bad");
    let too_many = DelimConfig {
        prompts: 7,
        ..cfg()
    };
    match run(&root, &too_many, RunControl::default()) {
        Err(LabError::Config { field, .. }) => assert_eq!(field, "prompts"),
        other => panic!("{other:?}"),
    }
    let too_long = DelimConfig {
        tokens: 1000,
        ..cfg()
    };
    match run(&root, &too_long, RunControl::default()) {
        Err(LabError::Config { field, allowed, .. }) => {
            assert_eq!(field, "tokens");
            assert!(allowed.contains("context"), "{allowed}");
        }
        other => panic!("{other:?}"),
    }
}

/// The published file, pulled through the registry's `humaneval` entry (size + sha256 verified):
/// 164 problems in dataset order, prompts verbatim.
#[test]
fn humaneval_file_parses_to_164_prompts_in_dataset_order() {
    let path = gauge_engine::resolve_data("humaneval").expect("pulling humaneval");
    let t = humaneval::load(&path).unwrap();
    assert_eq!(t.len(), humaneval::HUMANEVAL_PROBLEMS);
    for (i, task) in t.iter().enumerate() {
        assert_eq!(task.task_id, format!("HumanEval/{i}"));
        assert_eq!(task.index, i);
        assert!(task.prompt.contains("def "), "{}", task.task_id);
    }
    assert!(t[0]
        .prompt
        .starts_with("from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"));
}
