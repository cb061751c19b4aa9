//! The analysis's terminal table, `REPORT.md` (beside the note's §1.6 numbers) and its plot.

use super::analysis::{DelimSummary, OpDelim, PredictorScore, SliceCount};
use super::config::DelimConfig;
use crate::plot::{LineChart, Series};
use crate::report::{opt, work_and_plots, work_line};
use std::fmt::Write as _;

/// The note's numbers (docs/PROTOCOL.md §1.6): (metric, StarCoder2-7B raw, StarCoder2-7B fix, Qwen2.5-Coder-7B raw).
pub const NOTE_HUMANEVAL: [(&str, f64, f64, f64); 7] = [
    ("clean positions", 48_919.0, 77_754.0, 47_903.0),
    ("clean flips", 27_720.0, 1_583.0, 31_149.0),
    (
        "balanced accuracy (note's predictor)",
        0.99934,
        0.81343,
        0.99964,
    ),
    ("clean flips on the runner-up", 1.0, 1.0, 1.0),
    ("delimiter-flip rate", 0.13897, 0.00168, 0.17000),
    ("overall flip fraction", 0.31891, 0.01123, 0.43131),
    (
        "mean z_top flipped − kept",
        17.10 - 22.02,
        14.83 - 23.10,
        23.77 - 29.16,
    ),
];

fn thetas_text(v: &[f64]) -> String {
    v.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The metric rows shared by the terminal table and the report: (label, value per op).
fn metric_rows(s: &DelimSummary) -> Vec<(&'static str, Vec<String>)> {
    let col = |f: &dyn Fn(&OpDelim) -> String| s.ops.iter().map(f).collect::<Vec<_>>();
    let score = |p: &PredictorScore| {
        format!(
            "{} (TPR {}, TNR {})",
            opt(p.balanced_accuracy, 5),
            opt(p.tpr, 5),
            opt(p.tnr, 5)
        )
    };
    vec![
        (
            "θ = 1 gate flips",
            col(&|o| format!("{}/{}", o.gate_flips, o.gate_positions)),
        ),
        (
            "overall flip fraction",
            col(&|o| format!("{:.5} ({}/{})", o.flip_fraction, o.flips, o.positions)),
        ),
        (
            "delimiter-flip rate (per record)",
            col(&|o| format!("{:.5}", o.delimiter_flip_rate)),
        ),
        (
            "brackets-only flip rate",
            col(&|o| format!("{:.5}", o.bracket_flip_rate)),
        ),
        (
            "flips on a delimiter top-1",
            col(&|o| opt(o.delimiter_share_of_flips, 4)),
        ),
        (
            "clean positions / flips",
            col(&|o| format!("{} / {}", o.clean.positions, o.clean.flips)),
        ),
        (
            "note's predictor, balanced acc. (clean)",
            col(&|o| score(&o.note_predictor)),
        ),
        (
            "clean flips on the runner-up",
            col(&|o| opt(o.clean_flips_on_runner_up, 4)),
        ),
        (
            "all flips on the runner-up",
            col(&|o| opt(o.flips_on_runner_up, 4)),
        ),
        (
            "gauge two-sided predictor (all)",
            col(&|o| score(&o.gauge_predictor)),
        ),
        (
            "gauge predictor, two-sided slice",
            col(&|o| score(&o.gauge_predictor_two_sided)),
        ),
        (
            "two-sided positions / flips",
            col(&|o| format!("{} / {}", o.two_sided.positions, o.two_sided.flips)),
        ),
        (
            "mean z_top flipped vs kept",
            col(&|o| format!("{} vs {}", opt(o.z_top_flipped, 2), opt(o.z_top_kept, 2))),
        ),
        (
            "  difference, 95% CI",
            col(&|o| {
                o.z_top_diff_ci95
                    .map_or("—".into(), |c| format!("[{:.2}, {:.2}]", c[0], c[1]))
            }),
        ),
    ]
}

/// The terminal table of `gauge delim`.
pub fn render_delim_table(s: &DelimSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "gauge delim — {}: {} HumanEval prompts × {} tokens, pooled θ ∈ {{{}}}",
        s.model,
        s.prompts,
        s.tokens,
        thetas_text(&s.pooled_thetas)
    );
    let _ = write!(o, "{:<42}", "metric");
    for op in &s.ops {
        let _ = write!(o, "  {:<40}", op.op.name());
    }
    o.push('\n');
    for (label, vals) in metric_rows(s) {
        let _ = write!(o, "{label:<42}");
        for v in vals {
            let _ = write!(o, "  {v:<40}");
        }
        o.push('\n');
    }
    let pass = s.gate_failure().is_none();
    let _ = writeln!(
        o,
        "validity gate (θ = 1 flips 0 for every op): {}",
        if pass { "PASS" } else { "FAIL" }
    );
    let _ = writeln!(o, "{}", work_line(s.forward_tokens, s.naive_forward_tokens));
    o
}

pub(crate) fn delim_chart(s: &DelimSummary) -> LineChart {
    let mut series = Vec::new();
    for o in &s.ops {
        series.push(Series {
            name: format!("{} flip fraction", o.op),
            points: o
                .per_theta
                .iter()
                .map(|t| (t.theta, t.flip_fraction))
                .collect(),
            err: None,
            dashed: false,
        });
        series.push(Series {
            name: format!("{} delimiter-flip rate", o.op),
            points: o
                .per_theta
                .iter()
                .map(|t| (t.theta, t.delimiter_flip_rate))
                .collect(),
            err: None,
            dashed: true,
        });
    }
    LineChart {
        title: format!("HumanEval flips vs θ — {}", s.model),
        x_label: "θ".into(),
        y_label: "rate".into(),
        y_range: (0.0, 1.0),
        series,
    }
}

pub(crate) fn delim_report(cfg: &DelimConfig, s: &DelimSummary, plots: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# HumanEval delimiter flips — {}\n", s.model);
    let _ = writeln!(
        o,
        "Run `{}`: the first {} HumanEval prompts verbatim (no chat template, no gauge shift), greedy, exactly {} tokens (no EOS stop), θ ∈ {{{}}}, ops {}; seen set {}. Pooled statistics cover θ ∈ {{{}}}. The note (docs/PROTOCOL.md §1.6): 164 prompts × 256 tokens × θ ∈ {{1.0..1.5}} on StarCoder2-7B and Qwen2.5-Coder-7B — different models and grid: compare shapes, not digits.\n",
        cfg.run_id(),
        cfg.prompts,
        cfg.tokens,
        cfg.thetas.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
        cfg.ops.iter().map(|o| o.name()).collect::<Vec<_>>().join(", "),
        match cfg.window {
            None => "prompt + all generated".to_string(),
            Some(n) => format!("last {n} tokens"),
        },
        thetas_text(&s.pooled_thetas)
    );
    let _ = writeln!(
        o,
        "**Validity gate (θ = 1: no op flips): {}**\n",
        match s.gate_failure() {
            None => "PASS".to_string(),
            Some(d) => format!("FAIL — {d}"),
        }
    );
    let _ = writeln!(o, "## gauge's numbers\n");
    let _ = write!(o, "| metric |");
    for op in &s.ops {
        let _ = write!(o, " {} |", op.op);
    }
    let _ = write!(o, "\n|---|");
    for _ in &s.ops {
        o.push_str("---|");
    }
    o.push('\n');
    for (label, vals) in metric_rows(s) {
        let _ = writeln!(o, "| {} | {} |", label.trim(), vals.join(" | "));
    }
    let _ = writeln!(o, "\n## Beside the note (§1.6)\n");
    let _ = write!(o, "| metric |");
    for op in &s.ops {
        let _ = write!(o, " {} (gauge) |", op.op);
    }
    let _ = writeln!(
        o,
        " StarCoder2-7B raw | StarCoder2-7B fix | Qwen2.5-Coder-7B raw |"
    );
    let _ = write!(o, "|---|");
    for _ in 0..s.ops.len() + 3 {
        o.push_str("---|");
    }
    o.push('\n');
    for (i, (label, a, b, c)) in NOTE_HUMANEVAL.iter().enumerate() {
        let _ = write!(o, "| {label} |");
        for op in &s.ops {
            let v = match i {
                0 => op.clean.positions.to_string(),
                1 => op.clean.flips.to_string(),
                2 => opt(op.note_predictor.balanced_accuracy, 5),
                3 => opt(op.clean_flips_on_runner_up, 4),
                4 => format!("{:.5}", op.delimiter_flip_rate),
                5 => format!("{:.5}", op.flip_fraction),
                _ => match (op.z_top_flipped, op.z_top_kept) {
                    (Some(x), Some(y)) => format!("{:.2}", x - y),
                    _ => "—".into(),
                },
            };
            let _ = write!(o, " {v} |");
        }
        let f = |x: &f64| match i {
            0 | 1 => format!("{x:.0}"),
            6 => format!("{x:.2}"),
            _ => format!("{x:.5}"),
        };
        let _ = writeln!(o, " {} | {} | {} |", f(a), f(b), f(c));
    }
    let _ = writeln!(o, "\n## Per θ\n");
    let _ = writeln!(o, "| op | θ | positions | flip fraction | delimiter-flip rate | clean positions | note BA (clean) | gauge BA (all) |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    for op in &s.ops {
        for t in &op.per_theta {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.5} | {:.5} | {} | {} | {} |",
                op.op,
                t.theta,
                t.positions,
                t.flip_fraction,
                t.delimiter_flip_rate,
                t.clean_positions,
                opt(t.note_balanced_accuracy, 5),
                opt(t.gauge_balanced_accuracy, 5)
            );
        }
    }
    let _ = writeln!(
        o,
        "\n## Slices of gauge's derivation (pooled positions / flips)\n"
    );
    let _ = writeln!(
        o,
        "| op | top-1 unseen | clean (z_top > 0) | one-sided, z_top ≤ 0 | two-sided |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|");
    for op in &s.ops {
        let c = |x: &SliceCount| format!("{} / {}", x.positions, x.flips);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            op.op,
            c(&op.top_unseen),
            c(&op.clean),
            c(&op.one_sided_nonpositive),
            c(&op.two_sided)
        );
    }
    work_and_plots(&mut o, s.forward_tokens, s.naive_forward_tokens, plots);
    let _ = writeln!(
        o,
        "Definitions. Flip: emitted ≠ pre-penalty top-1 (first argmax of the fp32 row). Clean: top-1 seen, z_top > 0, runner-up unseen; the note's predictor is `g < z_top·(1 − 1/θ)` on raw logits for every op. gauge's two-sided predictor: flip ⟺ `z_top − z_u < m`, u the best unseen token, m = z_top − f(z_top) for the op's own f (ctrl: `z(1 − 1/θ)` above 0, `(θ − 1)|z|` at or below; normalized: `(θ − 1)·(−ln p_top)`; subtractive: α). Delimiter: the pre-penalty top-1 decodes (stripped) to nothing or only `{{}}[]()\"',:;=`; brackets-only drops whitespace-only tokens and `'`. Delimiter-flip rate: per record #(flip ∧ delimiter) / #positions, averaged over records. Confidence contrast: seen top-1s with z_top > 0, two-sample bootstrap ({} resamples, seed {}).",
        cfg.bootstrap_resamples, cfg.bootstrap_seed
    );
    o
}
