//! The probe's terminal table, `REPORT.md` with tables shaped like the note's Tables 1, 2 and 4
//! (the note's numbers beside gauge's), and its plots.
//!
//! The note's numbers (docs/PROTOCOL.md §1.1, §1.2, §1.5, §1.9) are constants here, labelled with their
//! design, so a reader sees at once whether a row is comparable: the note's A1 is 200 prefixes ×
//! 200 tokens with c = ±5 on HF fp32/bf16 models; gauge's default model is a different checkpoint,
//! so its rows sit beside the note's, never in place of them.

use crate::error::LabError;
use crate::ops::Op;
use crate::plot::{bar_chart_svg, line_chart_svg, write_svg_png, Bar, LineChart, Series};
use crate::probe::{Analysis, ConditionSummary, ProbeConfig, ProbeSummary};
use crate::report::{opt, short, stack_note, work_line, work_saving};
use std::fmt::Write as _;
use std::path::Path;

/// The note's Table 1: (model, positive fraction, median top-1 logit, own-median flip @ θ=1.3).
pub const NOTE_ZERO_POINT: [(&str, f64, f64, f64); 5] = [
    ("gpt2", 0.16787, -161.39096, 0.7053),
    ("gpt2-large", 0.52267, 13.33730, 0.956925),
    ("starcoder2-7b", 0.77630, 18.75, 0.96175),
    ("pythia-2.8b", 0.88256, 19.70938, 0.95845),
    ("Qwen2.5-Coder-7B", 0.94625, 24.75, 0.96975),
];

/// The note's Table 2 at θ = 1.3 (ctrl flip, CI, median first divergence, prefixes diverging);
/// the gate, subtractive and normalized columns are 0.000 for every model.
pub const NOTE_FLIP: [(&str, f64, [f64; 2], f64, u32); 5] = [
    ("gpt2-large", 0.963875, [0.9598, 0.9677], 4.0, 200),
    ("pythia-2.8b", 0.938425, [0.9310, 0.9458], 8.0, 200),
    ("gpt2", 0.58175, [0.5391, 0.6235], 62.0, 180),
    ("Qwen2.5-7B", 0.921825, [0.9108, 0.9325], 10.0, 200),
    ("Qwen2.5-7B-Instruct", 0.921725, [0.9119, 0.9312], 9.0, 200),
];

/// The note's loop check (docs/PROTOCOL.md §1.9; 16 prompts × 128 tokens, no gauge): θ, gpt2 raw, gpt2 normalized,
/// pythia raw, pythia normalized.
pub const NOTE_LOOP: [(f32, f64, f64, f64, f64); 6] = [
    (1.0, 0.826, 0.826, 0.799, 0.799),
    (1.05, 0.112, 0.774, 0.637, 0.772),
    (1.1, 0.051, 0.773, 0.383, 0.760),
    (1.2, 0.028, 0.761, 0.209, 0.703),
    (1.3, 0.022, 0.728, 0.106, 0.686),
    (1.5, 0.014, 0.630, 0.033, 0.601),
];

fn cond(s: &ProbeSummary, op: Op, theta: f32) -> Option<&ConditionSummary> {
    let t = crate::stats::f32_to_decimal_f64(theta);
    s.conditions.iter().find(|c| c.op == op && c.theta == t)
}

/// The terminal table of `gauge probe`.
pub fn render_table(s: &ProbeSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gauge probe — {}{}", s.model, stack_note(s.sampler));
    let _ = writeln!(
        o,
        "{:<12} {:>5}  {:>7}  {:<17} {:>9}  {:>9}  {:>8}",
        "op", "θ", "flip", "95% CI", "positions", "1st div.", "rep_rate"
    );
    for c in &s.conditions {
        let _ = writeln!(
            o,
            "{:<12} {:>5}  {:>7.4}  [{:.4}, {:.4}]  {:>9}  {:>9}  {:>8.4}",
            s.sampler.op_label(c.op),
            c.theta,
            c.flip_rate,
            c.ci95[0],
            c.ci95[1],
            c.positions,
            opt(c.median_first_divergence, 1),
            c.rep_rate
        );
    }
    let ops: Vec<Op> = s.conditions.iter().map(|c| c.op).collect();
    if let Some(note) = s.sampler.footnote(&ops) {
        let _ = writeln!(o, "{note}");
    }
    let gate: Vec<&ConditionSummary> = s.conditions.iter().filter(|c| c.theta == 1.0).collect();
    let pass = !gate.is_empty() && gate.iter().all(|c| c.flip_rate == 0.0);
    let _ = writeln!(
        o,
        "validity gate (θ = 1 flips 0 for every op): {}",
        if pass { "PASS" } else { "FAIL" }
    );
    match &s.zero_point {
        Some(z) => {
            let _ = writeln!(
                o,
                "zero point: seen-logit > 0 fraction {:.4}, median top-1 logit {:.3}, own-median flip {:.4}",
                z.positive_fraction, z.median_top1_logit, z.own_median_flip_rate
            );
        }
        None => {
            let _ = writeln!(o, "zero point: {NO_ZERO_POINT}");
        }
    }
    let _ = writeln!(o, "{}", work_line(s.forward_tokens, s.naive_forward_tokens));
    o
}

/// Why a run has no zero-point statistics.
const NO_ZERO_POINT: &str = "not measured (the engine gives no raw logits: a server over HTTP returns tokens, not logit rows)";

/// Does this run repeat the note's A1 design (so its numbers sit in the same table by design)?
fn matches_note_design(cfg: &ProbeConfig) -> bool {
    cfg.prefixes == 200
        && cfg.tokens == 200
        && cfg.shift == 5.0
        && cfg.window.is_none()
        && cfg.seen_prompt
        && cfg.alpha == 1.0
}

/// `REPORT.md` of a probe run.
pub fn probe_report(cfg: &ProbeConfig, a: &Analysis, plots: &[String]) -> String {
    let s = &a.summary;
    let mut o = String::new();
    let design = format!(
        "{} prefixes × {} greedy tokens, c = ±{}, seen set {}",
        cfg.prefixes,
        cfg.tokens,
        cfg.shift,
        crate::probe::describe_seen(cfg)
    );
    let same = matches_note_design(cfg);
    let _ = writeln!(
        o,
        "# A1 gauge probe — {}{}\n",
        s.model,
        stack_note(s.sampler)
    );
    if s.sampler.is_python() {
        let _ = writeln!(
            o,
            "Logits and decisions by {} ({}): `shift` adds c to every logit, then ctrl is the stack's own penalty ({}), normalized gauge's processor for the stack, subtractive a presence penalty α, then greedy. Decoded by `python -m gauge_sampling probe --engine {}`.\n",
            s.sampler.title(),
            cfg.engine.as_ref().map_or("?".into(), |e| {
                let v: Vec<String> = e.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
                format!("{}; {}", e.describe(), v.join(", "))
            }),
            s.sampler.ctrl_operator(),
            s.sampler
        );
    } else if !s.sampler.is_gauge() {
        let _ = writeln!(
            o,
            "Decisions by llama.cpp's own chain through the bindings (the note's driver, docs/PROTOCOL.md §8.1 driver): `logit-bias` adding c to every token → `penalties` (ctrl: repeat θ; subtractive: presence α) → `greedy`, prompt accepted into the window first. llama.cpp has no normalized penalty: normalized runs stay on gauge's operator, so the plan (and every batch) is the gauge run's.\n"
        );
    }
    if let Some(cpu) = &cfg.llama_cpp_cpu {
        let _ = writeln!(
            o,
            "Logits by llama.cpp built for the CPU features `{cpu}` (its own report; another build can move near-ties).\n"
        );
    }
    let _ = writeln!(
        o,
        "Run `{}`: {design}; θ ∈ {{{}}}; ops {}; subtractive α = {}; zero-point θ = {}.",
        cfg.run_id(),
        cfg.thetas
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        cfg.ops
            .iter()
            .map(|o| o.name())
            .collect::<Vec<_>>()
            .join(", "),
        cfg.alpha,
        cfg.zero_point_theta
    );
    let _ = writeln!(
        o,
        "The note's A1 design is 200 prefixes × 200 tokens, c = ±5, no window: this run {}.\n",
        if same {
            "repeats it (different model)"
        } else {
            "differs from it, so compare shapes, not digits"
        }
    );
    let saved = work_saving(s.forward_tokens, s.naive_forward_tokens);
    let _ = writeln!(
        o,
        "Work: {} forward tokens evaluated, vs {} for a naive run (every run its own prefill and decode): {:.2}× less.\n",
        s.forward_tokens, s.naive_forward_tokens, saved
    );
    let gate_line: Vec<String> = a
        .gate
        .iter()
        .map(|(op, f, p)| format!("{op} {f}/{p}"))
        .collect();
    let _ = writeln!(
        o,
        "**Validity gate (θ = 1: every op flips exactly 0): {}** ({}).\n",
        if a.gate_passed() {
            "PASS"
        } else {
            "FAIL — the numbers below measure numerical noise"
        },
        gate_line.join(", ")
    );

    // Table 1
    let zt = cfg.zero_point_theta;
    let _ = writeln!(
        o,
        "## Table 1 — where the checkpoint sits on the sign boundary (c = 0, θ = 1)\n"
    );
    if let Some(z) = &s.zero_point {
        let _ = writeln!(
            o,
            "| Model | frac seen-logit > 0 | median top-1 logit | flip @ own-median gauge (θ={zt}) |"
        );
        let _ = writeln!(o, "|---|---|---|---|");
        let _ = writeln!(
            o,
            "| **{} (gauge)** | {:.4} | {:.3} | {:.4} |",
            s.model, z.positive_fraction, z.median_top1_logit, z.own_median_flip_rate
        );
        for (m, f, med, flip) in NOTE_ZERO_POINT {
            let _ = writeln!(o, "| {m} (note) | {f:.4} | {med:.3} | {flip:.4} |");
        }
        let zd = &a.zero_point;
        let _ = writeln!(
            o,
            "\nMean top-1 logit {:.3} over {} steps; own-median shift c = {}; own-median flips {}/{}; \
             synthetic flip (c = +{} vs c = 0, ctrl θ = {zt}): {} (note: 0.418–0.912 across its five models).\n",
            zd.mean_top1_logit,
            zd.steps,
            zd.c_natural.map_or("—".into(), |c| format!("{c:.4}")),
            zd.own_median_flips,
            zd.own_median_positions,
            cfg.shift,
            opt(zd.synth_flip_rate, 4)
        );
    } else {
        let _ = writeln!(
            o,
            "Zero-point statistics {NO_ZERO_POINT}; the c = 0 runs and the own-median run were left out of the plan. The flip rates below need only tokens.\n"
        );
    }

    // Table 2
    let t13 = if cfg.thetas.contains(&1.3) {
        1.3
    } else {
        cfg.thetas.iter().copied().fold(1.0, f32::max)
    };
    let f = |op: Op, th: f32| cond(s, op, th).map(|c| c.flip_rate);
    let _ = writeln!(
        o,
        "## Table 2 — gauge flip rate, c = +{0} vs c = −{0}\n",
        cfg.shift
    );
    let _ = writeln!(o, "| Model | CTRL θ=1 (gate) | CTRL θ={t13} [95% CI] | subtractive α={} | normalized θ={t13} | median first divergence (CTRL θ={t13}) |", cfg.alpha);
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    let ctrl13 = cond(s, Op::Ctrl, t13);
    let sub = cond(s, Op::Subtractive, t13);
    let _ = writeln!(
        o,
        "| **{} (gauge)** | {} | {} | {} | {} | {} |",
        s.model,
        opt(f(Op::Ctrl, 1.0), 4),
        ctrl13.map_or("—".into(), |c| format!(
            "{:.4} [{:.4}, {:.4}]",
            c.flip_rate, c.ci95[0], c.ci95[1]
        )),
        opt(sub.map(|c| c.flip_rate), 4),
        opt(f(Op::Normalized, t13), 4),
        opt(ctrl13.and_then(|c| c.median_first_divergence), 1)
    );
    for (m, fl, ci, fd, ndiv) in NOTE_FLIP {
        let _ = writeln!(o, "| {m} (note, θ=1.3) | 0.000 | {fl:.4} [{:.4}, {:.4}] | 0.000 | 0.000 | {fd} ({ndiv}/200 diverging) |", ci[0], ci[1]);
    }

    // Full grid
    let _ = writeln!(o, "\n### Every condition\n");
    let _ = writeln!(o, "| op | θ | flip rate | 95% CI | flips / positions | prefixes diverging | median first div. [IQR] | flip after divergence | rep_rate (+c / −c) |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
    for (c, d) in s.conditions.iter().zip(&a.conditions) {
        let _ = writeln!(
            o,
            "| {} | {} | {:.4} | [{:.4}, {:.4}] | {}/{} | {}/{} | {} {} | {} | {:.4} ({:.4} / {:.4}) |",
            c.op,
            c.theta,
            c.flip_rate,
            c.ci95[0],
            c.ci95[1],
            d.flips,
            d.positions,
            d.prefixes_diverging,
            d.prefixes,
            opt(c.median_first_divergence, 1),
            d.first_divergence_iqr.map_or(String::new(), |q| format!("[{:.1}, {:.1}]", q[0], q[1])),
            opt(d.after_divergence_flip_rate, 4),
            c.rep_rate,
            d.rep_rate_plus,
            d.rep_rate_minus
        );
    }

    // Table 4
    let _ = writeln!(o, "\n## Table 4 — normalize-before-penalize at equal θ\n");
    let _ = writeln!(o, "| Metric | raw logits (CTRL) | normalized |");
    let _ = writeln!(o, "|---|---|---|");
    let _ = writeln!(
        o,
        "| Gauge flip @θ={t13}, {} (gauge) | {} | {} |",
        s.model,
        opt(f(Op::Ctrl, t13), 4),
        opt(f(Op::Normalized, t13), 4)
    );
    let _ = writeln!(o, "| Gauge flip @θ=1.3, gpt2-large / pythia-2.8b / gpt2 (note) | 0.96 / 0.94 / 0.58 | 0.00 / 0.00 / 0.00 |");

    // Loop check
    let _ = writeln!(o, "\n## Repetition rate vs θ (loop check)\n");
    let _ = writeln!(o, "rep_rate = fraction of generated tokens already in prompt ∪ earlier generated tokens, mean over runs (both gauges). The note's columns are its loop check (16 prompts × 128 tokens, no gauge), shown where θ matches.\n");
    let mut head = String::from("| θ |");
    let mut rule = String::from("|---|");
    for op in &cfg.ops {
        let _ = write!(head, " {op} (gauge) |");
        rule.push_str("---|");
    }
    head.push_str(" gpt2 raw (note) | gpt2 normalized (note) | pythia raw (note) | pythia normalized (note) |");
    rule.push_str("---|---|---|---|");
    let _ = writeln!(o, "{head}\n{rule}");
    let mut thetas = cfg.thetas.clone();
    thetas.sort_by(|a, b| a.total_cmp(b));
    for th in thetas {
        let mut row = format!("| {th} |");
        for &op in &cfg.ops {
            let _ = write!(row, " {} |", opt(cond(s, op, th).map(|c| c.rep_rate), 4));
        }
        match NOTE_LOOP.iter().find(|n| n.0 == th) {
            Some(n) => {
                let _ = write!(row, " {:.3} | {:.3} | {:.3} | {:.3} |", n.1, n.2, n.3, n.4);
            }
            None => row.push_str(" — | — | — | — |"),
        }
        let _ = writeln!(o, "{row}");
    }

    if !plots.is_empty() {
        let _ = writeln!(o, "\n## Plots\n");
        for p in plots {
            let _ = writeln!(o, "![{p}]({p}.svg) ([PNG]({p}.png))\n");
        }
    }

    let _ = writeln!(
        o,
        "\n## Definitions\n\n\
         * Operators act on the fp32 row after the gauge shift: ctrl `z <= 0 ? z·θ : z/θ`; normalized \
         log-softmax over the full row first; subtractive `z − α`. θ = 1 switches every penalty off. \
         Greedy = first index of the maximum.\n\
         * Flip rate: Σ position-wise mismatches / Σ positions between the +c and −c runs, every \
         position counted (also after the first divergence). CI: percentile bootstrap of the mean \
         per-prefix rate, {} resamples, Python `random.Random({})`.\n\
         * Zero point: on the c = 0, θ = 1 decode, Σ#{{i ∈ S : z_i > 0}} / Σ|S| before each step's \
         token joins S; median of the per-step max logit; own-median flip = c = 0 vs c = −median at \
         ctrl θ = {zt}.",
        cfg.bootstrap_resamples, cfg.bootstrap_seed
    );
    o
}

/// Write the probe's plots; returns their base names.
pub fn write_probe_plots(dir: &Path, a: &Analysis) -> Result<Vec<String>, LabError> {
    let s = &a.summary;
    let mut ops: Vec<Op> = Vec::new();
    for c in &s.conditions {
        if !ops.contains(&c.op) {
            ops.push(c.op);
        }
    }
    let series = |val: &dyn Fn(&ConditionSummary) -> f64, err: bool| -> Vec<Series> {
        ops.iter()
            .map(|&op| {
                let cs: Vec<&ConditionSummary> =
                    s.conditions.iter().filter(|c| c.op == op).collect();
                Series {
                    name: op.name().to_string(),
                    points: cs.iter().map(|c| (c.theta, val(c))).collect(),
                    err: err.then(|| cs.iter().map(|c| (c.ci95[0], c.ci95[1])).collect()),
                    dashed: false,
                }
            })
            .collect()
    };
    let flip = LineChart {
        title: format!("Gauge flip rate vs θ — {}", s.model),
        x_label: "θ".into(),
        y_label: "flip rate (+c vs −c)".into(),
        y_range: (0.0, 1.0),
        series: series(&|c| c.flip_rate, true),
    };
    write_svg_png(dir, "flip_rate_vs_theta", &line_chart_svg(&flip))?;
    let rep = LineChart {
        title: format!("Repetition rate vs θ — {}", s.model),
        x_label: "θ".into(),
        y_label: "rep_rate".into(),
        y_range: (0.0, 1.0),
        series: series(&|c| c.rep_rate, false),
    };
    write_svg_png(dir, "rep_rate_vs_theta", &line_chart_svg(&rep))?;
    let mut bars: Vec<Bar> = NOTE_ZERO_POINT
        .iter()
        .map(|(m, f, _, _)| Bar {
            label: m.to_string(),
            value: *f,
            highlight: false,
        })
        .collect();
    if let Some(z) = &s.zero_point {
        bars.push(Bar {
            label: short(&s.model, 18),
            value: z.positive_fraction,
            highlight: true,
        });
    }
    write_svg_png(
        dir,
        "positive_fraction",
        &bar_chart_svg(
            "Fraction of seen-token logits > 0 (c = 0, θ = 1)",
            "fraction positive",
            &bars,
            (0.0, 1.0),
        ),
    )?;
    Ok(vec![
        "flip_rate_vs_theta".into(),
        "rep_rate_vs_theta".into(),
        "positive_fraction".into(),
    ])
}
