//! `gauge explain` reproduces the worked examples of the samplers lesson.
//!
//! Every expected number is read from `tests/data/lesson_samplers.json`, transcribed from the
//! lesson with its section; the test runs the real binary (`gauge explain ... --json --top 0`) and
//! compares at the precision the lesson printed. Statistical claims (mirostat's long-run surprise,
//! XTC's share of top tokens) run through `gauge_sampling::explain`, the library `gauge explain`
//! prints from.

mod common;

use common::{gauge, stderr, stdout};
use gauge_sampling::explain::explain_step;
use gauge_sampling::params::SamplingParams;
use gauge_sampling::Chain;
use serde_json::Value;

fn data() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/lesson_samplers.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("read lesson data")).unwrap()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// `gauge explain --logits ROW --vocab NAMES [--history H] FLAGS --json --top 0`, parsed.
fn explain(logits: &[f64], vocab: &[String], history: &[String], flags: &[String]) -> Value {
    let row: Vec<String> = logits.iter().map(|x| format!("{x}")).collect();
    let mut args: Vec<String> = vec![
        "explain".into(),
        "--logits".into(),
        row.join(","),
        "--vocab".into(),
        vocab.join(","),
        "--json".into(),
        "--top".into(),
        "0".into(),
    ];
    if !history.is_empty() {
        args.push("--history".into());
        args.push(history.join(","));
    }
    args.extend(flags.iter().cloned());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = gauge(&a);
    assert!(out.status.success(), "gauge {args:?}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn stage<'a>(out: &'a Value, name: &str) -> &'a Value {
    out["steps"][0]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no stage {name} in {}", out["chain"]))
}

fn cand<'a>(st: &'a Value, token: &str) -> &'a Value {
    st["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["token"] == token)
        .unwrap_or_else(|| panic!("no candidate {token} in stage {}", st["name"]))
}

/// `|got − want| <= half a unit of the last printed digit` (plus f32 slack).
fn close(got: f64, want: f64, decimals: i32, what: &str) {
    let tol = 0.5 * 10f64.powi(-decimals) + 1e-6;
    assert!(
        (got - want).abs() <= tol,
        "{what}: gauge {got:.6}, lesson {want} (±{tol})"
    );
}

fn flags_of(v: &Value) -> Vec<String> {
    strs(v)
}

fn final_p(out: &Value, token: &str) -> f64 {
    cand(stage(out, "dist"), token)["p"].as_f64().unwrap()
}

#[test]
fn tables_repetition_presence_frequency_logit_bias() {
    let d = data();
    let row: Vec<f64> = d["row6"]["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    let vocab = strs(&d["row6"]["vocab"]);
    for case in d["tables"].as_array().unwrap() {
        let section = case["section"].as_str().unwrap();
        let out = explain(
            &row,
            &vocab,
            &strs(&case["history"]),
            &flags_of(&case["flags"]),
        );
        let st = stage(&out, case["stage"].as_str().unwrap());
        let cols = strs(&case["columns"]);
        let decimals = case["p_decimals"].as_i64().unwrap() as i32;
        for r in case["rows"].as_array().unwrap() {
            let r = r.as_array().unwrap();
            let token = r[0].as_str().unwrap();
            let c = cand(st, token);
            for (k, col) in cols.iter().enumerate().skip(1) {
                let want = f(&r[k]);
                let what = format!("{section}: {token} {col}");
                match col.as_str() {
                    "logit_after" => close(c["logit"].as_f64().unwrap(), want, 2, &what),
                    "p_before" => close(f(&c["p_before"]), want, decimals, &what),
                    "p_after" => close(f(&c["p"]), want, decimals, &what),
                    other => panic!("unknown column {other}"),
                }
            }
        }
        if let Some(removed) = case.get("removed") {
            let got: Vec<&str> = st["removed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["token"].as_str().unwrap())
                .collect();
            assert_eq!(got, strs(removed), "{section}: removed");
        }
        if let Some(nz) = case.get("not_exactly_zero") {
            for t in strs(nz) {
                let p = f(&cand(st, &t)["p"]);
                assert!(
                    p > 0.0 && p < 1e-40,
                    "{section}: {t} p = {p:e}, the lesson: tiny but not 0"
                );
            }
        }
    }
}

#[test]
fn three_penalties_on_one_history() {
    let d = data();
    let row: Vec<f64> = d["row6"]["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    let vocab = strs(&d["row6"]["vocab"]);
    let case = &d["three_penalties"];
    for s in case["settings"].as_array().unwrap() {
        let mut flags = flags_of(&s["flags"]);
        flags.extend(["--samplers".into(), "penalties".into()]);
        let out = explain(&row, &vocab, &strs(&case["history"]), &flags);
        for (tok, want) in vocab.iter().zip(s["p"].as_array().unwrap()) {
            close(
                final_p(&out, tok),
                f(want),
                3,
                &format!("Example 4 {}: p({tok})", s["name"]),
            );
        }
    }
}

#[test]
fn window_and_code_identifiers() {
    let d = data();
    let code = &d["code_row"];
    let row: Vec<f64> = code["logits"].as_array().unwrap().iter().map(f).collect();
    let vocab = strs(&code["vocab"]);
    let history = strs(&code["history"]);
    let case = &d["window"];
    for s in case["settings"].as_array().unwrap() {
        let flags: Vec<String> = vec![
            "--repeat-penalty".into(),
            s["repeat_penalty"].to_string(),
            "--repeat-last-n".into(),
            s["repeat_last_n"].to_string(),
            "--samplers".into(),
            "penalties".into(),
        ];
        let out = explain(&row, &vocab, &history, &flags);
        for (tok, want) in strs(&case["tokens"]).iter().zip(s["p"].as_array().unwrap()) {
            close(
                final_p(&out, tok),
                f(want),
                3,
                &format!("Example 5 {s}: P({tok})"),
            );
        }
    }
}

fn kept(st: &Value) -> Vec<String> {
    st["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["logit"].is_null())
        .map(|c| c["token"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn typical_keeps_the_tokens_near_the_entropy() {
    let d = data();
    let case = &d["typical"];
    let vocab = strs(&case["vocab"]);
    let row: Vec<f64> = case["probabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| f(p).ln())
        .collect();
    for lim in case["limits"].as_array().unwrap() {
        let l = lim["limit"].to_string();
        let out = explain(
            &row,
            &vocab,
            &[],
            &[
                "--typical".into(),
                l.clone(),
                "--samplers".into(),
                "typ_p".into(),
            ],
        );
        let st = stage(&out, "typical");
        close(
            f(&st["entropy_before"]),
            f(&case["entropy_nats"]),
            3,
            "Example 7 entropy",
        );
        let mut got = kept(st);
        let mut want = strs(&lim["typical_keeps"]);
        got.sort();
        want.sort();
        assert_eq!(got, want, "Example 7 typical at {l}");
        let out = explain(
            &row,
            &vocab,
            &[],
            &[
                "--top-p".into(),
                l.clone(),
                "--samplers".into(),
                "top_p".into(),
            ],
        );
        let mut got = kept(stage(&out, "top-p"));
        let mut want = strs(&lim["top_p_keeps"]);
        got.sort();
        want.sort();
        assert_eq!(got, want, "Example 7 top-p at {l}");
    }
}

/// `java.util.Random`, which the lesson's generators use (its LCG and polar Gaussian).
struct JavaRandom {
    seed: u64,
    next_gaussian: Option<f64>,
}

impl JavaRandom {
    const MASK: u64 = (1 << 48) - 1;
    fn new(seed: i64) -> Self {
        JavaRandom {
            seed: (seed as u64 ^ 0x5DEE_CE66D) & Self::MASK,
            next_gaussian: None,
        }
    }
    fn next(&mut self, bits: u32) -> i64 {
        self.seed = (self.seed.wrapping_mul(0x5DEE_CE66D).wrapping_add(0xB)) & Self::MASK;
        (self.seed >> (48 - bits)) as i64
    }
    fn next_double(&mut self) -> f64 {
        ((self.next(26) << 27) + self.next(27)) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    fn next_gaussian(&mut self) -> f64 {
        if let Some(g) = self.next_gaussian.take() {
            return g;
        }
        loop {
            let v1 = 2.0 * self.next_double() - 1.0;
            let v2 = 2.0 * self.next_double() - 1.0;
            let s = v1 * v1 + v2 * v2;
            if s < 1.0 && s != 0.0 {
                let m = (-2.0 * s.ln() / s).sqrt();
                self.next_gaussian = Some(v2 * m);
                return v1 * m;
            }
        }
    }
}

/// The lesson's `logitsFor`: 50 Zipf-like logits with a random sharpness and noise.
fn lesson_row(r: &mut JavaRandom) -> Vec<f64> {
    let sharp = 0.3 + 0.9 * r.next_double();
    (0..50)
        .map(|i| -sharp * ((i + 1) as f64).ln() + 0.3 * r.next_gaussian())
        .collect()
}

fn chain_of(json: &str, n_vocab: usize) -> Chain {
    let p = SamplingParams::from_json(json).unwrap();
    Chain::from_params(&p, n_vocab, None).unwrap()
}

#[test]
fn mirostat_cut_update_and_long_run_surprise() {
    let d = data();
    let case = &d["mirostat"];
    let eta = f(&case["eta"]);
    let steps = case["steps"].as_u64().unwrap() as usize;
    let vocab: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
    for run in case["runs"].as_array().unwrap() {
        let tau = f(&run["tau"]);
        // step 0 through the binary: the cut and the update
        let row0 = lesson_row(&mut JavaRandom::new(1));
        let flags: Vec<String> = [
            "--mirostat",
            "2",
            "--mirostat-ent",
            &tau.to_string(),
            "--mirostat-lr",
            &eta.to_string(),
            "--temp",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = explain(&row0, &vocab, &[], &flags);
        assert!(out["chain"]
            .as_str()
            .unwrap()
            .trim()
            .ends_with("-> mirostat-v2"));
        let st = stage(&out, "mirostat-v2");
        assert_eq!(
            st["n_after"], run["step0_kept"],
            "Example 8 tau {tau}: kept at step 0"
        );
        let mu0 = st["state_before"][0][1].as_f64().unwrap();
        close(mu0, f(&run["mu_start"]), 4, "Example 8: mu starts at 2 tau");
        let surprise = -f(&out["steps"][0]["selected"]["p"]).log2();
        let mu1 = st["state"][0][1].as_f64().unwrap();
        close(
            mu1,
            mu0 - eta * (surprise - tau),
            4,
            "Example 8: mu -= eta (surprise - tau)",
        );

        // the long run through the explain library
        let mut chain = chain_of(
            &format!(
                r#"{{"mirostat": 2, "mirostat_tau": {tau}, "mirostat_eta": {eta}, "temperature": 1, "seed": 2}}"#
            ),
            50,
        );
        let mut data = JavaRandom::new(1);
        let mut total = 0.0;
        for _ in 0..steps {
            let row: Vec<f32> = lesson_row(&mut data).iter().map(|&x| x as f32).collect();
            let step = explain_step(&mut chain, &row).unwrap();
            total += -step.selected.p.log2();
            chain.accept(step.selected.id);
        }
        let avg = total / steps as f64;
        let want = f(&run["average_surprise_bits"]);
        assert!(
            (avg - want).abs() <= 0.05,
            "Example 8 tau {tau}: average surprise {avg:.3} bits, lesson {want}"
        );
    }
    let mut chain = chain_of(r#"{"samplers": [], "seed": 2}"#, 50);
    let mut data = JavaRandom::new(1);
    let mut total = 0.0;
    for _ in 0..steps {
        let row: Vec<f32> = lesson_row(&mut data).iter().map(|&x| x as f32).collect();
        let step = explain_step(&mut chain, &row).unwrap();
        total += -step.selected.p.log2();
        chain.accept(step.selected.id);
    }
    let avg = total / steps as f64;
    let want = f(&case["plain_average_surprise_bits"]);
    assert!(
        (avg - want).abs() <= 0.1,
        "Example 8 plain: {avg:.3} bits, lesson {want}"
    );
}

#[test]
fn dry_penalises_the_token_that_extends_a_repeat() {
    let d = data();
    let case = &d["dry"];
    let vocab = strs(&case["vocab"]);
    let flags: Vec<String> = vec![
        "--dry-multiplier".into(),
        case["multiplier"].to_string(),
        "--dry-base".into(),
        case["base"].to_string(),
        "--dry-allowed-length".into(),
        case["allowed_length"].to_string(),
        "--samplers".into(),
        "dry".into(),
    ];
    let zeros = vec![0.0; vocab.len()];
    let out = explain(&zeros, &vocab, &strs(&case["history"]), &flags);
    let st = stage(&out, "dry");
    for pair in case["penalties"].as_array().unwrap() {
        let tok = pair[0].as_str().unwrap();
        close(
            -cand(st, tok)["logit"].as_f64().unwrap(),
            f(&pair[1]),
            3,
            &format!("Example 9: penalty of {tok}"),
        );
    }
    // a repeat of exactly L: [0..L) then the candidate L, a separator L+1, then [0..L) again
    for pair in case["by_length"].as_array().unwrap() {
        let len = pair[0].as_u64().unwrap() as usize;
        let names: Vec<String> = (0..len + 2).map(|i| format!("w{i}")).collect();
        let mut history: Vec<String> = names[..len].to_vec();
        history.push(names[len].clone());
        history.push(names[len + 1].clone());
        history.extend(names[..len].iter().cloned());
        let out = explain(&vec![0.0; len + 2], &names, &history, &flags);
        let pen = -cand(stage(&out, "dry"), &names[len])["logit"]
            .as_f64()
            .unwrap();
        close(
            pen,
            f(&pair[1]),
            2,
            &format!("Example 9: penalty at repeat length {len}"),
        );
    }
}

#[test]
fn xtc_removes_all_but_the_least_likely_top_choice() {
    let d = data();
    let case = &d["xtc"];
    let probs: Vec<f64> = case["probabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    let vocab: Vec<String> = (0..probs.len()).map(|i| format!("t{i}")).collect();
    let row: Vec<f64> = probs.iter().map(|p| p.ln()).collect();
    for (threshold, after) in [
        ("threshold", "after_llama_cpp_at_0.1"),
        ("threshold_off_the_boundary", "after"),
    ] {
        let flags: Vec<String> = [
            "--xtc-probability",
            "1",
            "--xtc-threshold",
            &case[threshold].to_string(),
            "--samplers",
            "xtc",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = explain(&row, &vocab, &[], &flags);
        let st = stage(&out, "xtc");
        for (tok, want) in vocab.iter().zip(case[after].as_array().unwrap()) {
            close(
                f(&cand(st, tok)["p"]),
                f(want),
                3,
                &format!("Example 10 ({after}): p({tok}) after XTC"),
            );
        }
    }
    // the shares: XTC off, and on in half of the steps
    for (prob, key) in [(0.0, "share_top_off"), (0.5, "share_top_on_half")] {
        let samplers = if prob > 0.0 { r#"["xtc"]"# } else { "[]" };
        let mut chain = chain_of(
            &format!(
                r#"{{"samplers": {samplers}, "xtc_probability": {prob}, "xtc_threshold": 0.1, "seed": 3}}"#
            ),
            probs.len(),
        );
        let row32: Vec<f32> = row.iter().map(|&x| x as f32).collect();
        let draws = case["draws"].as_u64().unwrap();
        let mut top = 0;
        for _ in 0..draws {
            let step = explain_step(&mut chain, &row32).unwrap();
            top += usize::from(step.selected.id == 0);
            chain.accept(step.selected.id);
        }
        let share = top as f64 / draws as f64;
        let want = f(&case[key]);
        assert!(
            (share - want).abs() <= 0.015,
            "Example 10 {key}: {share}, lesson {want}"
        );
    }
}

#[test]
fn chains_print_as_llama_cpp_prints_them() {
    let d = data();
    let row = vec![0.0; 32];
    let vocab: Vec<String> = (0..32).map(|i| format!("t{i}")).collect();
    for case in d["chains"]["cases"].as_array().unwrap() {
        let out = explain(&row, &vocab, &[], &flags_of(&case["flags"]));
        assert_eq!(
            out["chain"].as_str().unwrap().trim(),
            case["chain"].as_str().unwrap(),
            "Example 11 {}",
            case["flags"]
        );
    }
    let b = &d["chains"]["project_builder"];
    let out = explain(&row, &vocab, &[], &flags_of(&b["flags"]));
    let got = out["chain"].as_str().unwrap().trim();
    assert_eq!(
        got,
        b["llama_cpp_chain"].as_str().unwrap(),
        "Example 12 (llama.cpp's line)"
    );
    assert_ne!(got, b["lesson_describe"].as_str().unwrap());
}

#[test]
fn task_presets_on_the_code_prompt() {
    let d = data();
    let code = &d["code_row"];
    let row: Vec<f64> = code["logits"].as_array().unwrap().iter().map(f).collect();
    let vocab = strs(&code["vocab"]);
    let history = strs(&code["history"]);
    for p in d["tasks"]["presets"].as_array().unwrap() {
        let out = explain(&row, &vocab, &history, &flags_of(&p["flags"]));
        let task = p["task"].as_str().unwrap();
        close(
            final_p(&out, "count"),
            f(&p["p_count"]),
            3,
            &format!("Example 13 {task}: P(count)"),
        );
        assert_eq!(
            stage(&out, "dist")["n_after"],
            p["candidates"],
            "Example 13 {task}: candidates"
        );
    }
}

/// Not a lesson number: the gauge view. Shifting every logit moves `ctrl`'s penalties stage and
/// leaves `normalized` standing still.
#[test]
fn gauge_shift_moves_ctrl_not_normalized() {
    let d = data();
    let row: Vec<f64> = d["row6"]["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    let vocab = strs(&d["row6"]["vocab"]);
    let history = strs(&d["tables"][0]["history"]);
    for (mode, moves) in [("ctrl", true), ("normalized", false)] {
        let flags: Vec<String> = [
            "--repeat-penalty",
            "1.5",
            "--repeat-penalty-mode",
            mode,
            "--samplers",
            "penalties",
            "--gauge",
            "3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = explain(&row, &vocab, &history, &flags);
        let g = &out["steps"][0]["gauge"];
        assert_eq!(g["c"].as_f64(), Some(3.0));
        let dp = g["max_abs_dp"][0].as_f64().unwrap();
        let pen = stage(&out, "penalties");
        assert_eq!(pen["shift_invariant"], !moves, "{mode}");
        if moves {
            assert!(
                dp > 0.05,
                "ctrl should move under a shift of 3: max |dp| {dp}"
            );
        } else {
            assert!(dp < 1e-5, "normalized should stand still: max |dp| {dp}");
        }
    }
}

#[test]
fn bad_rows_are_refused_with_the_field_named() {
    for (args, needle) in [
        (vec!["explain", "--logits", "1,x,2"], "--logits: value 1"),
        (vec!["explain", "--logits", "1,nan"], "--logits: value 1"),
        (
            vec!["explain", "--logits", "1,2", "--vocab", "a"],
            "--vocab has 1 names",
        ),
        (
            vec!["explain", "--logits", "1,2", "--history", "7"],
            "--history: token id 7",
        ),
        (vec!["explain"], "--logits"),
    ] {
        let out = gauge(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}
