//! `gauge explain --model`: every generated step of the default model, stage by stage.

mod common;

use common::{gauge, stderr, stdout};
use serde_json::Value;

const PROMPT: &str = "The cat sat on the mat. The cat sat on the";

fn run(args: &[&str]) -> Value {
    let out = gauge(args);
    assert!(out.status.success(), "gauge {args:?}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn explain_samples_what_generate_samples_and_records_every_stage() {
    let flags = [
        "--repeat-penalty",
        "1.3",
        "--seed",
        "5",
        "-n",
        "5",
        "--json",
    ];
    let mut a = vec![
        "explain",
        "--model",
        "smollm2-135m-instruct",
        "--prompt",
        PROMPT,
        "--top",
        "3",
    ];
    a.extend(flags);
    let ex = run(&a);
    let mut g = vec!["generate", "--prompt", PROMPT];
    g.extend(flags);
    let gen = run(&g);
    let ids: Vec<&Value> = ex["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["selected"]["id"])
        .collect();
    let want: Vec<&Value> = gen["tokens"].as_array().unwrap().iter().collect();
    assert_eq!(ids, want, "explain and generate chose different tokens");
    assert_eq!(ex["text"], gen["text"]);
    let names: Vec<&str> = ex["chain"]
        .as_str()
        .unwrap()
        .trim()
        .split(" -> ")
        .skip(1)
        .collect();
    for s in ex["steps"].as_array().unwrap() {
        let stages = s["stages"].as_array().unwrap();
        let got: Vec<&str> = stages
            .iter()
            .map(|st| st["name"].as_str().unwrap())
            .collect();
        assert_eq!(got, names);
        for st in stages {
            assert!(st["candidates"].as_array().unwrap().len() <= 3);
            assert!(st["n_before"].as_u64().unwrap() >= st["n_after"].as_u64().unwrap());
        }
        assert_eq!(
            stages[0]["n_before"], 49152,
            "the whole vocabulary enters the chain"
        );
    }
}

#[test]
fn gauge_shift_moves_ctrl_and_not_normalized_on_the_model() {
    let mut moved = false;
    for mode in ["ctrl", "normalized"] {
        let v = run(&[
            "explain",
            "--model",
            "smollm2-135m-instruct",
            "--prompt",
            PROMPT,
            "-n",
            "4",
            "--top",
            "2",
            "--repeat-penalty",
            "1.3",
            "--repeat-penalty-mode",
            mode,
            "--seed",
            "5",
            "--gauge",
            "8",
            "--json",
        ]);
        for s in v["steps"].as_array().unwrap() {
            let dp: Vec<f64> = s["gauge"]["max_abs_dp"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            let worst = dp.iter().cloned().fold(0.0, f64::max);
            if mode == "normalized" {
                assert!(
                    worst < 1e-4,
                    "normalized moved by {worst} under a shift of 8"
                );
                assert_eq!(s["gauge"]["same_token"], true);
            } else if dp[0] > 1e-3 {
                moved = true;
            }
        }
    }
    assert!(
        moved,
        "ctrl's penalties stage never moved under a shift of 8"
    );
}
