//! `gauge calibrate` as a user runs it: a small real calibration on the default model (pulled
//! before the tests, by `.ci/run` in CI), its resumption, and bad input.

mod common;
use common::*;
use serde_json::Value;

fn small(out: &str) -> Vec<String> {
    [
        "calibrate",
        "--theta",
        "1.05,1.3",
        "--prompts",
        "2",
        "--tokens",
        "24",
        "--out",
        out,
        "--json",
        // tests run in parallel: one llama.cpp thread each keeps clear of ggml's spin cliff
        "--threads",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn a_small_real_calibration_classifies_every_anchor_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let args = small(out);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = gauge(&argv);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["controls"]["noop_ctrl1_eq_normalized1"], true, "{v}");
    assert_eq!(v["raw_grid"].as_array().unwrap().len(), 3);
    let anchors = v["anchors"].as_array().unwrap();
    assert_eq!(anchors.len(), 2);
    for a in anchors {
        let m = &a["matches"][0];
        let target = m["target"].as_f64().unwrap();
        let achieved = m["achieved"].as_f64().unwrap();
        assert_eq!(target, a["raw"]["rep_rate"].as_f64().unwrap());
        match m["verdict"].as_str().unwrap() {
            "MATCHED" => {
                let t = m["value"].as_f64().unwrap();
                assert!((1.0..=10.0).contains(&t), "{a}");
                if m["converged"] == true {
                    assert!((achieved - target).abs() <= 0.01, "{a}");
                }
            }
            "TRIVIAL" => assert_eq!(m["value"], 1.0),
            "UNREACHABLE" => {
                assert!(m["value"].is_null());
                assert!(achieved > target + 0.01, "{a}");
                assert!((m["shortfall"].as_f64().unwrap() - (achieved - target)).abs() < 1e-12);
                assert!(a["presence"]["verdict"].is_string(), "{a}");
                assert!(a["advice"].as_str().unwrap().contains("subtractive"), "{a}");
            }
            other => panic!("verdict {other}"),
        }
    }
    // Every normalized evaluation the search made is reported; θ′ = 1 and the ceiling always.
    let curve: Vec<f64> = v["normalized_curve"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_f64().unwrap())
        .collect();
    assert!(curve.contains(&1.0) && curve.contains(&10.0), "{curve:?}");
    let run_dir = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for f in [
        "config.json",
        "raw.jsonl",
        "summary.json",
        "REPORT.md",
        "calibrate_rep_rate_vs_dial.svg",
        "calibrate_rep_rate_vs_dial.png",
    ] {
        assert!(run_dir.join(f).is_file(), "{f} missing");
    }
    // The same command again decodes nothing new and prints the same summary.
    let before = std::fs::read_to_string(run_dir.join("raw.jsonl")).unwrap();
    let again = gauge(&argv);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(stdout(&again), stdout(&o));
    assert_eq!(
        std::fs::read_to_string(run_dir.join("raw.jsonl")).unwrap(),
        before
    );
}

#[test]
fn bad_calibrate_input_names_the_flag_and_the_allowed_range() {
    let cases: [(&[&str], &str); 5] = [
        (&["--theta", "1.0,1.1"], "theta"),
        (&["--theta", "0.9"], "theta"),
        (&["--prompts", "17"], "prompts"),
        (&["--metrics", "distinct2"], "metrics"),
        (&["--metrics", "rep_rate,bogus"], "--metrics"),
    ];
    for (flags, field) in cases {
        let mut argv = vec!["calibrate"];
        argv.extend_from_slice(flags);
        let o = gauge(&argv);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(field) && err.contains("allowed"),
            "{flags:?}: {err}"
        );
    }
}
