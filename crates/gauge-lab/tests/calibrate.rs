//! `gauge calibrate` (FIXCAL): the metric definitions on hand-checked streams, the matching rule
//! replayed against the note's own gpt2 evaluations, the closed form on rows with known
//! probabilities, bad input, and the resumable, cached search on the deterministic source.

use gauge_engine::LogitSource;
use gauge_lab::calibrate::bisect::{find_match, MatchResult, Search, Step, Verdict};
use gauge_lab::calibrate::closed_form::{loop_token, quantile, Population};
use gauge_lab::calibrate::metrics::{distinct2, longest_run, rep_rate};
use gauge_lab::calibrate::prompts::{fixed_prompts, note_data};
use gauge_lab::calibrate::{
    analyze, calibrate_run_dir, run_calibrate, CalibConfig, CalibLine, Metric, Metrics,
};
use gauge_lab::ops::SeenSet;
use gauge_lab::testing::{scratch_dir, HashSource, HashSourceConfig, WordCodec};
use gauge_lab::{LabError, RunControl};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------- definitions

#[test]
fn metrics_match_hand_checked_streams() {
    // prompt {1, 2}; generated 2 3 3 3 1 4:
    // repeats: 2 (prompt), 3 no, 3 yes, 3 yes, 1 (prompt), 4 no -> 4/6
    // bigrams: (2,3) (3,3) (3,3) (3,1) (1,4) -> 4 distinct of 5
    // longest run: 3 3 3 -> 3
    let (p, g) = (vec![1, 2], vec![2, 3, 3, 3, 1, 4]);
    assert_eq!(rep_rate(&p, &g), 4.0 / 6.0);
    assert_eq!(distinct2(&g), 0.8);
    assert_eq!(longest_run(&g), 3);
    assert_eq!(
        Metrics::of(&p, &g),
        Metrics {
            rep_rate: 4.0 / 6.0,
            distinct2: 0.8,
            longest_run: 3.0
        }
    );
    // The note's `degen` on degenerate streams: empty -> (0, 0, 1); one token -> (·, 0, 1).
    assert_eq!(
        Metrics::of(&[5], &[]),
        Metrics {
            rep_rate: 0.0,
            distinct2: 0.0,
            longest_run: 1.0
        }
    );
    assert_eq!(Metrics::of(&[5], &[5]).rep_rate, 1.0);
    assert_eq!(distinct2(&[7]), 0.0);
    assert_eq!(longest_run(&[7]), 1);
    // A loop: every bigram the same, every token a repeat after the first.
    let lp = [9, 9, 9, 9, 9];
    assert_eq!((distinct2(&lp), longest_run(&lp)), (0.25, 5));
    assert_eq!(rep_rate(&[1], &lp), 0.8);
    // Means over prompts are plain means.
    let m = Metrics::mean(&[Metrics::of(&p, &g), Metrics::of(&[1], &lp)]).unwrap();
    assert_eq!(m.longest_run, 4.0);
    assert_eq!(m.rep_rate, (4.0 / 6.0 + 0.8) / 2.0);
    assert!(Metrics::mean(&[]).is_none());
}

#[test]
fn metric_directions_and_tolerances_are_the_notes() {
    assert_eq!(Metric::RepRate.sign(), -1.0);
    assert_eq!(Metric::LongestRun.sign(), -1.0);
    assert_eq!(Metric::Distinct2.sign(), 1.0);
    assert_eq!(Metric::RepRate.tolerance(), 0.01);
    assert_eq!(Metric::Distinct2.tolerance(), 0.01);
    assert_eq!(Metric::LongestRun.tolerance(), 0.25);
    assert_eq!(Metric::parse("distinct-2"), Some(Metric::Distinct2));
    assert_eq!(Metric::parse("longest-run"), Some(Metric::LongestRun));
    assert_eq!(Metric::parse("nope"), None);
}

/// The note's gpt2 evaluations (results/fix_calibration/summary.json) as a cache.
fn gpt2_replay() -> Value {
    let p =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fixcal_gpt2_replay.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn metric_index(m: Metric) -> usize {
    match m {
        Metric::RepRate => 0,
        Metric::LongestRun => 1,
        Metric::Distinct2 => 2,
    }
}

#[test]
fn matching_replays_the_notes_gpt2_bisection_exactly() {
    let d = gpt2_replay();
    let table = |name: &str| -> BTreeMap<String, Vec<f64>> {
        d[name]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let f: f64 = k.parse().unwrap();
                (
                    format!("{f:.9}"),
                    v.as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap())
                        .collect(),
                )
            })
            .collect()
    };
    let raw = table("raw_grid");
    let cache = table("fix_cache");
    let search = Search {
        lo: 1.0,
        hi: d["theta_max"].as_f64().unwrap(),
        max_iters: d["iters"].as_u64().unwrap() as usize,
    };
    let mut checked = 0;
    for m in Metric::ALL {
        for want in d["migration"][m.name()].as_array().unwrap() {
            let anchor = want["theta_raw"].as_f64().unwrap();
            let target = raw[&format!("{anchor:.9}")][metric_index(m)];
            let step = find_match(m, target, search, |v| {
                cache.get(&format!("{v:.9}")).map(|x| x[metric_index(m)])
            });
            let Step::Done(got) = step else {
                panic!("{m} at {anchor}: the note's cache should finish the search, got {step:?}")
            };
            let verdict = match want["verdict"].as_str().unwrap() {
                "MATCHED" => Verdict::Matched,
                "TRIVIAL" => Verdict::Trivial,
                _ => Verdict::Unreachable,
            };
            let ctx = format!("{m} at θ = {anchor}");
            assert_eq!(got.verdict, verdict, "{ctx}");
            assert_eq!(got.value, want["theta_fix"].as_f64(), "{ctx}");
            assert_eq!(got.achieved, want["achieved"].as_f64().unwrap(), "{ctx}");
            assert_eq!(got.converged, want["converged"].as_bool().unwrap(), "{ctx}");
            assert_eq!(got.iters, want["iters"].as_u64().unwrap() as usize, "{ctx}");
            if let Some(s) = want["shortfall"].as_f64() {
                assert!((got.shortfall.unwrap() - s).abs() < 1e-15, "{ctx}");
            } else {
                assert_eq!(got.shortfall, None, "{ctx}");
            }
            if let Some(b) = want["bracket"].as_array() {
                let b: Vec<f64> = b.iter().map(|x| x.as_f64().unwrap()).collect();
                assert_eq!(got.bracket, Some([b[0], b[1]]), "{ctx}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 21);
}

/// Replay a search to the end against `f`, returning the result and the values it asked for.
fn drive(
    m: Metric,
    target: f64,
    search: Search,
    f: impl Fn(f64) -> f64,
) -> (MatchResult, Vec<f64>) {
    let mut cache: BTreeMap<u64, f64> = BTreeMap::new();
    let mut asked = Vec::new();
    loop {
        match find_match(m, target, search, |v| cache.get(&v.to_bits()).copied()) {
            Step::Done(r) => return (r, asked),
            Step::Need(v) => {
                assert!(!cache.contains_key(&v.to_bits()), "asked twice for {v}");
                asked.push(v);
                cache.insert(v.to_bits(), f(v));
            }
        }
    }
}

#[test]
fn bisection_terminates_within_its_budget_and_reports_the_upper_bracket() {
    let s = Search {
        lo: 1.0,
        hi: 10.0,
        max_iters: 12,
    };
    // A step function no midpoint can hit within tolerance: 0.9 below θ′ = π, 0.1 above; target
    // 0.5. The search must stop after 12 midpoints at the upper bracket, not converged.
    let (r, asked) = drive(Metric::RepRate, 0.5, s, |v| {
        if v < std::f64::consts::PI {
            0.9
        } else {
            0.1
        }
    });
    assert_eq!(asked.len(), 2 + 12);
    assert_eq!(
        (r.verdict, r.converged, r.iters),
        (Verdict::Matched, false, 12)
    );
    let [lo, hi] = r.bracket.unwrap();
    assert!(lo < std::f64::consts::PI && std::f64::consts::PI <= hi && hi - lo == 9.0 / 4096.0);
    assert_eq!((r.value, r.achieved), (Some(hi), 0.1));
    // Every midpoint is dyadic in [1, 10] (exact in f32, shared across anchors).
    assert!(asked.iter().all(|&v| (v as f32) as f64 == v));
    // A linear metric converges: rep_rate = 1 − 0.05·(θ′ − 1), target 0.7 -> θ′ = 7 ± 0.2.
    let (r, asked) = drive(Metric::RepRate, 0.7, s, |v| 1.0 - 0.05 * (v - 1.0));
    assert_eq!((r.verdict, r.converged), (Verdict::Matched, true));
    assert!((r.value.unwrap() - 7.0).abs() <= 0.2 + 1e-12, "{r:?}");
    assert!((r.achieved - 0.7).abs() <= 0.01);
    assert_eq!(asked.len(), 2 + r.iters);
    // TRIVIAL needs one evaluation; it is one-sided (θ′ = 1 suppressing MORE is trivial too).
    let (r, asked) = drive(Metric::RepRate, 0.7, s, |_| 0.5);
    assert_eq!(
        (r.verdict, r.value, asked.len()),
        (Verdict::Trivial, Some(1.0), 1)
    );
    // UNREACHABLE: achieved at the ceiling and the shortfall, no θ′.
    let (r, asked) = drive(
        Metric::RepRate,
        0.2,
        s,
        |v| if v == 1.0 { 0.9 } else { 0.35 },
    );
    assert_eq!(
        (r.verdict, r.value, asked),
        (Verdict::Unreachable, None, vec![1.0, 10.0])
    );
    assert_eq!(r.achieved, 0.35);
    assert!((r.shortfall.unwrap() - 0.15).abs() < 1e-12);
    // Within tolerance of the ceiling is still reachable (bisected, not UNREACHABLE).
    let (r, _) = drive(
        Metric::RepRate,
        0.345,
        s,
        |v| if v == 1.0 { 0.9 } else { 0.35 },
    );
    assert_eq!(r.verdict, Verdict::Matched);
    // distinct-2 suppresses upwards.
    let (r, _) = drive(Metric::Distinct2, 0.9, s, |v| 0.1 * v);
    assert_eq!(r.verdict, Verdict::Matched);
    assert!((r.achieved - 0.9).abs() <= 0.01);
}

// ---------------------------------------------------------------- closed form

#[test]
fn closed_form_reads_known_probabilities() {
    // p = (0.5, 0.25, 0.125, 0.125): ln p_runner / ln p_top = ln 0.25 / ln 0.5 = 2.
    let row: Vec<f32> = [0.5f64, 0.25, 0.125, 0.125]
        .iter()
        .map(|p| p.ln() as f32 + 3.0)
        .collect();
    let mut seen = SeenSet::new(4, None);
    seen.accept(0);
    let t = loop_token(7, &row, &seen, 0);
    assert_eq!((t.pos, t.token), (7, 0));
    assert!((t.theta_required().unwrap() - 2.0).abs() < 1e-5);
    assert!((t.theta_required_unseen().unwrap() - 2.0).abs() < 1e-5);
    assert!((t.presence_required().unwrap() - std::f64::consts::LN_2).abs() < 1e-5);
    // With the runner-up seen too, the exact variant competes with p = 0.125: ln 0.125/ln 0.5 = 3,
    // and α must cover the gap to it, ln 4.
    seen.accept(1);
    let t = loop_token(0, &row, &seen, 0);
    assert!((t.theta_required().unwrap() - 2.0).abs() < 1e-5);
    assert!((t.theta_required_unseen().unwrap() - 3.0).abs() < 1e-5);
    assert!((t.presence_required().unwrap() - 4f64.ln()).abs() < 1e-5);
    // Saturated top (p_top ≥ 1 − 1e-6) and underflowing competitor (p ≤ 1e-12) are infinite.
    let t = loop_token(0, &[0.0, -20.0, -20.0], &SeenSet::new(3, None), 0);
    assert_eq!(t.theta_required(), None);
    let t = loop_token(0, &[0.0, 0.0, -40.0], &seen_of(3, &[0, 1]), 0);
    assert_eq!(t.theta_required(), Some(1.0));
    assert_eq!(t.theta_required_unseen(), None);
}

fn seen_of(n: usize, ids: &[i32]) -> SeenSet {
    let mut s = SeenSet::new(n, None);
    for &t in ids {
        s.accept(t);
    }
    s
}

#[test]
fn quantiles_follow_the_notes_rule_with_infinite_mass() {
    let fin = [1.0, 2.0, 3.0];
    // n = 4 with one infinity: index ⌈q·n⌉ − 1.
    assert_eq!(quantile(&fin, 1, 0.0), Some(1.0));
    assert_eq!(quantile(&fin, 1, 0.5), Some(2.0));
    assert_eq!(quantile(&fin, 1, 0.75), Some(3.0));
    assert_eq!(quantile(&fin, 1, 0.76), None);
    assert_eq!(quantile(&[], 0, 0.5), None);
    let pop = Population {
        finite: fin.to_vec(),
        n_inf: 1,
    };
    // loop_frac 0.8, target 0.2: 75% of loop tokens must flip -> the 0.75 quantile.
    let r = pop.for_target(0.8, 0.2, 1.0);
    assert_eq!((r.q, r.value, r.infinite), (Some(0.75), Some(3.0), false));
    // target above the loop fraction: no flips needed, the dial's floor.
    assert_eq!(pop.for_target(0.8, 0.9, 1.0).value, Some(1.0));
    assert!(pop.for_target(0.8, 0.1, 1.0).infinite);
    let d = pop.describe(2.5);
    assert_eq!(
        (d.n, d.n_infinite, d.median, d.frac_above_ceiling),
        (4, 1, Some(2.0), Some(0.5))
    );
}

// ---------------------------------------------------------------- data and input

#[test]
fn note_data_is_the_protocols_transcription() {
    let p = fixed_prompts();
    assert_eq!(p.len(), 16);
    assert_eq!(p[0], "The history of the Roman Empire began");
    assert_eq!(p[15], "Dear diary, today was");
    let d = note_data();
    let gpt2 = &d.table5.models[0];
    assert_eq!(d.theta_prime(gpt2, 1.02), Some(Some(2.863)));
    assert_eq!(d.theta_prime(gpt2, 1.1), Some(None));
    let qwen = d
        .table5
        .models
        .iter()
        .find(|m| m.model == "Qwen2.5-7B")
        .unwrap();
    assert_eq!(d.theta_prime(qwen, 1.1), Some(Some(5.5)));
    assert_eq!(d.raw_rep_rate("pythia-2.8b", 1.1), Some(0.5095));
    assert_eq!(d.ceiling_rep_rate("gpt2"), Some(0.1521));
    assert_eq!(d.closed_form("gpt2").unwrap().median, 1100.0);
    // The note's replay data agrees with the transcribed table (2.86328125 -> 2.863).
    let r = gpt2_replay();
    assert_eq!(
        r["migration"]["rep_rate"][0]["theta_fix"].as_f64(),
        Some(2.86328125)
    );
}

#[test]
fn bad_input_names_the_field_value_and_range() {
    let field = |c: CalibConfig| match c.validate() {
        Err(LabError::Config {
            field,
            value,
            allowed,
        }) => {
            assert!(!allowed.is_empty());
            (field, value)
        }
        other => panic!("{other:?}"),
    };
    let d = CalibConfig::default;
    d().validate().unwrap();
    assert_eq!(
        field(CalibConfig {
            anchors: vec![1.0, 1.1],
            ..d()
        }),
        ("theta".into(), "1".into())
    );
    assert_eq!(
        field(CalibConfig {
            anchors: vec![0.9],
            ..d()
        })
        .0,
        "theta"
    );
    assert_eq!(
        field(CalibConfig {
            anchors: vec![],
            ..d()
        })
        .0,
        "theta"
    );
    assert_eq!(
        field(CalibConfig {
            anchors: vec![1.1, 1.1],
            ..d()
        })
        .0,
        "theta"
    );
    assert_eq!(
        field(CalibConfig {
            anchors: vec![f32::NAN],
            ..d()
        })
        .0,
        "theta"
    );
    assert_eq!(
        field(CalibConfig { prompts: 17, ..d() }),
        ("prompts".into(), "17".into())
    );
    assert_eq!(field(CalibConfig { prompts: 0, ..d() }).0, "prompts");
    assert_eq!(field(CalibConfig { tokens: 0, ..d() }).0, "tokens");
    assert_eq!(
        field(CalibConfig {
            metrics: vec![Metric::Distinct2],
            ..d()
        })
        .0,
        "metrics"
    );
    assert_eq!(
        field(CalibConfig {
            metrics: vec![Metric::RepRate, Metric::RepRate],
            ..d()
        })
        .0,
        "metrics"
    );
    assert_eq!(
        field(CalibConfig {
            theta_max: 1.0,
            ..d()
        })
        .0,
        "theta_max"
    );
    assert_eq!(
        field(CalibConfig {
            theta_max: f64::INFINITY,
            ..d()
        })
        .0,
        "theta_max"
    );
    assert_eq!(
        field(CalibConfig {
            alpha_max: 0.0,
            ..d()
        })
        .0,
        "alpha_max"
    );
    assert_eq!(
        field(CalibConfig {
            max_iters: 0,
            ..d()
        })
        .0,
        "max_iters"
    );
    assert_eq!(
        field(CalibConfig {
            max_sequences: 0,
            ..d()
        })
        .0,
        "max_sequences"
    );
    assert_eq!(
        field(CalibConfig {
            model: "".into(),
            ..d()
        })
        .0,
        "model"
    );
}

// ---------------------------------------------------------------- the run

fn small() -> CalibConfig {
    CalibConfig {
        model: "hash-source".into(),
        anchors: vec![1.05, 1.3],
        prompts: 5,
        tokens: 40,
        metrics: Metric::ALL.to_vec(),
        // every round in one chunk: a round is the resumption unit
        max_sequences: 64,
        ..CalibConfig::default()
    }
}

fn quiet() -> RunControl {
    RunControl {
        plots: false,
        ..RunControl::default()
    }
}

fn read_lines(dir: &std::path::Path) -> Vec<CalibLine> {
    std::fs::read_to_string(dir.join("raw.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_run_caches_every_evaluation_once_and_finishes_every_search() {
    // Rounds cut into several chunks of prompts.
    let cfg = CalibConfig {
        max_sequences: 12,
        ..small()
    };
    let root = scratch_dir("calib", "full");
    let mut src = HashSource::new(HashSourceConfig::default());
    let codec = WordCodec::new(src.n_vocab());
    let s = run_calibrate(&mut src, &codec, &cfg, &root, &quiet()).unwrap();
    let dir = calibrate_run_dir(&root, &cfg);
    let lines = read_lines(&dir);
    // One line per (dial, value, prompt), never twice; every evaluation covers every prompt.
    let keys: BTreeSet<(u8, u64, usize)> = lines
        .iter()
        .map(|l| (l.dial as u8, (l.value * 1e9).round() as u64, l.prompt_idx))
        .collect();
    assert_eq!(keys.len(), lines.len());
    assert_eq!(lines.len(), s.sweeps * cfg.prompts);
    assert_eq!(s.raw_grid.len(), 3);
    assert!(s.controls.noop_ctrl1_eq_normalized1, "{:?}", s.controls);
    // The summary is a pure function of the lines.
    assert_eq!(analyze(&cfg, &lines).as_ref(), Some(&s));
    for a in &s.anchors {
        assert_eq!(a.matches.len(), 3);
        let m = &a.matches[0];
        assert_eq!(m.metric, Metric::RepRate);
        match m.verdict {
            Verdict::Matched if m.converged => assert!((m.achieved - m.target).abs() <= 0.01),
            Verdict::Unreachable => {
                assert!(m.achieved > m.target + 0.01);
                assert!(
                    a.presence.is_some(),
                    "presence is searched for UNREACHABLE anchors"
                );
                assert!(a.advice.contains("presence_penalty"), "{}", a.advice);
            }
            _ => {}
        }
    }
    // The θ = 1 run's loop tokens are the repeats it made: loop_frac = its rep_rate.
    let base = s.raw_grid.iter().find(|p| p.value == 1.0).unwrap();
    assert_eq!(s.loops.n_gen_tokens, cfg.prompts * cfg.tokens);
    assert!((s.loops.loop_frac - base.metrics.rep_rate).abs() < 1e-12);
    // Running it again decodes nothing and reproduces the summary.
    let mut again = HashSource::new(HashSourceConfig::default());
    let s2 = run_calibrate(&mut again, &codec, &cfg, &root, &quiet()).unwrap();
    assert_eq!(again.steps(), 0);
    assert_eq!(s2, s);
    let report = std::fs::read_to_string(dir.join("REPORT.md")).unwrap();
    assert!(report.contains("Beside the note's Table 5") && report.contains("| 1.1 | **"));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(json["anchors"][0]["matches"][0]["metric"], "rep_rate");
}

#[test]
fn an_interrupted_run_resumes_to_the_same_summary() {
    let cfg = small();
    let codec = WordCodec::new(512);
    let whole = {
        let mut src = HashSource::new(HashSourceConfig::default());
        run_calibrate(
            &mut src,
            &codec,
            &cfg,
            &scratch_dir("calib", "whole"),
            &quiet(),
        )
        .unwrap()
    };
    let root = scratch_dir("calib", "resume");
    let mut stops = 0;
    let resumed = loop {
        let mut src = HashSource::new(HashSourceConfig::default());
        let ctl = RunControl {
            abort_after_chunks: Some(1),
            ..quiet()
        };
        match run_calibrate(&mut src, &codec, &cfg, &root, &ctl) {
            Err(LabError::Aborted { .. }) => stops += 1,
            Ok(s) => break s,
            Err(e) => panic!("{e}"),
        }
        assert!(stops < 200, "no progress");
    };
    // One round per call: the raw grid, then one midpoint per search and round.
    assert!(stops > 3, "the search should span several rounds ({stops})");
    assert_eq!(resumed, whole);
    // A torn last line (killed mid-write) is dropped and redone.
    let dir = calibrate_run_dir(&root, &cfg);
    let raw = dir.join("raw.jsonl");
    let text = std::fs::read_to_string(&raw).unwrap();
    std::fs::write(&raw, &text[..text.len() - 30]).unwrap();
    let mut src = HashSource::new(HashSourceConfig::default());
    assert_eq!(
        run_calibrate(&mut src, &codec, &cfg, &root, &quiet()).unwrap(),
        whole
    );
    assert!(src.steps() > 0);
}

#[test]
fn results_from_another_configuration_or_tokenizer_are_refused() {
    let cfg = small();
    let root = scratch_dir("calib", "mismatch");
    let mut src = HashSource::new(HashSourceConfig::default());
    run_calibrate(&mut src, &WordCodec::new(512), &cfg, &root, &quiet()).unwrap();
    // Same config, other prompt tokens: the cache must not be reused.
    let other = gauge_lab::testing::FnCodec(|t: &str| Ok(vec![(t.len() % 500) as i32, 3]));
    match run_calibrate(&mut src, &other, &cfg, &root, &quiet()) {
        Err(LabError::ConfigMismatch { .. }) => {}
        r => panic!("{r:?}"),
    }
}
