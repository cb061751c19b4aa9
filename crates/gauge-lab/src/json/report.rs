//! A2's terminal tables, `REPORT.md` (beside the note's Table 4 JSON rows) and its plot.

use super::analysis::{JsonCondition, JsonSummary};
use super::config::JsonConfig;
use super::line::JsonLine;
use crate::ops::Op;
use crate::plot::{LineChart, Series};
use crate::report::{opt, short, stack_note, work_and_plots, work_line};
use crate::stack::Stack;
use crate::stats::f32_to_decimal_f64;
use std::fmt::Write as _;

/// The note's JSON grid (`results/bench_a2/summary.json`): θ, raw, fix, raw conditioned, fix
/// conditioned (Qwen2.5-Coder-7B, 200 schemas).
pub const NOTE_JSON: [(f32, f64, f64, f64, f64); 3] = [
    (1.0, 0.970, 0.970, 1.000, 1.000),
    (1.1, 0.955, 0.975, 0.974, 1.000),
    (1.3, 0.225, 0.970, 0.227, 0.995),
];

pub(crate) fn validity_chart(s: &JsonSummary) -> LineChart {
    let mut ops: Vec<Op> = Vec::new();
    for c in &s.conditions {
        if !ops.contains(&c.op) {
            ops.push(c.op);
        }
    }
    let mut series: Vec<Series> = ops
        .iter()
        .map(|&op| Series {
            name: format!("{op} ({})", short(&s.model, 14)),
            points: s
                .conditions
                .iter()
                .filter(|c| c.op == op)
                .map(|c| (c.theta, c.valid_rate))
                .collect(),
            err: None,
            dashed: false,
        })
        .collect();
    series.push(Series {
        name: "raw (note, Qwen-Coder)".into(),
        points: NOTE_JSON.iter().map(|n| (f64::from(n.0), n.1)).collect(),
        err: None,
        dashed: true,
    });
    series.push(Series {
        name: "fix (note, Qwen-Coder)".into(),
        points: NOTE_JSON.iter().map(|n| (f64::from(n.0), n.2)).collect(),
        err: None,
        dashed: true,
    });
    LineChart {
        title: format!("JSON schema validity vs θ — {}", s.model),
        x_label: "θ".into(),
        y_label: "schema-valid rate".into(),
        y_range: (0.0, 1.0),
        series,
    }
}

/// What the penalty does to content: format validity, end of generation, length, placeholders,
/// early-closed strings and arrays (see [`super::shape`]).
pub fn render_content_table(s: &JsonSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<12} {:>5}  {:>7} {:>5} {:>7}  {:>7} {:>7} {:>7}  {:>7} {:>7}  {:>4}",
        "op",
        "θ",
        "valid+f",
        "eog",
        "tokens",
        "req_ph",
        "str_ph",
        "str_len",
        "arr_0",
        "arr_len",
        "gerr"
    );
    for c in &s.conditions {
        let _ = writeln!(
            o,
            "{:<12} {:>5}  {:>7.3} {:>5.2} {:>7.1}  {:>7} {:>7} {:>7}  {:>7} {:>7}  {:>4}",
            s.sampler.op_label(c.op),
            c.theta,
            c.valid_formats_rate,
            c.eog_rate,
            c.mean_tokens,
            opt(c.shape.required_placeholder_rate, 3),
            opt(c.shape.string_placeholder_rate, 3),
            opt(c.shape.mean_string_chars, 1),
            opt(c.shape.empty_array_rate, 3),
            opt(c.shape.mean_array_items, 2),
            c.grammar_errors
        );
    }
    o
}

/// The terminal table of `gauge json`.
pub fn render_json_table(s: &JsonSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "gauge json — {}{}", s.model, stack_note(s.sampler));
    let _ = writeln!(
        o,
        "{:<12} {:>5}  {:>7}  {:>9}  {:>11}  {:>7} {:>7} {:>7}",
        "op", "θ", "valid", "n_valid/n", "conditioned", "no_json", "parse", "schema"
    );
    for c in &s.conditions {
        let _ = writeln!(
            o,
            "{:<12} {:>5}  {:>7.3}  {:>9}  {:>11}  {:>7} {:>7} {:>7}",
            s.sampler.op_label(c.op),
            c.theta,
            c.valid_rate,
            format!("{}/{}", c.n_valid, c.n),
            c.valid_rate_given_theta1
                .map_or("—".into(), |r| format!("{r:.3}")),
            c.no_json,
            c.parse_error,
            c.schema_invalid
        );
    }
    o.push_str(&render_content_table(s));
    let ops: Vec<Op> = s.conditions.iter().map(|c| c.op).collect();
    if let Some(note) = s.sampler.footnote(&ops) {
        let _ = writeln!(o, "{note}");
    }
    let _ = writeln!(o, "{}", work_line(s.forward_tokens, s.naive_forward_tokens));
    o
}

pub(crate) fn json_report(
    cfg: &JsonConfig,
    s: &JsonSummary,
    lines: &[JsonLine],
    plots: &[String],
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# A2 JSON-schema validity — {}{}\n",
        s.model,
        stack_note(s.sampler)
    );
    match s.sampler {
        Stack::Gauge => {}
        Stack::LlamaCpp => {
            let _ = writeln!(
                o,
                "Decisions by llama.cpp's own `penalties → greedy` chain through the bindings (the note's A2 llama.cpp driver), prompt accepted into the window first; normalized runs stay on gauge's operator (llama.cpp has none).\n"
            );
        }
        other => {
            let _ = writeln!(
                o,
                "Logits and decisions by {} ({}): ctrl is the stack's own penalty ({}), normalized gauge's processor for the stack, subtractive a presence penalty on the prompt and output; end-of-generation tokens and the chat template are the stack's tokenizer's. Decoded by `python -m gauge_sampling json --engine {}`.\n",
                other.title(),
                cfg.engine.as_ref().map_or("?".into(), |e| {
                    let v: Vec<String> = e.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
                    format!("{}; {}", e.describe(), v.join(", "))
                }),
                other.ctrl_operator(),
                s.sampler
            );
        }
    }
    let _ = writeln!(
        o,
        "Run `{}`{}: {} JSONSchemaBench schemas{}, greedy, ≤ {} tokens, {}; seen set {}; no gauge shift. The note: Qwen2.5-Coder-7B, 200 schemas, HF `generate` (batches of 8, left padding). Different model: compare shapes, not digits.\n",
        cfg.run_id(),
        if cfg.constrained {
            " (CONSTRAINED: the schema as a grammar masks every row before the operator; the whole output is parsed)"
        } else {
            ""
        },
        cfg.schemas,
        if cfg.chat_template {
            " (prompt in the model's chat template)"
        } else {
            " (plain prompt, as the note)"
        },
        cfg.max_tokens,
        if cfg.constrained {
            "stop at end-of-generation only (the grammar decides the end)"
        } else {
            "stop at end-of-generation or when the output contains \"\\n\\n\" or \"```\""
        },
        match cfg.window {
            None => "prompt + all generated".to_string(),
            Some(n) => format!("last {n} tokens"),
        }
    );
    o.push_str("```\n");
    o.push_str(&render_json_table(s));
    o.push_str("```\n\n");
    let _ = writeln!(
        o,
        "## Table 4 (JSON rows) — normalize-before-penalize at equal θ\n"
    );
    let _ = writeln!(o, "| θ | raw/ctrl valid (gauge) | normalized valid (gauge) | raw (note) | fix (note) | raw conditioned (gauge) | normalized conditioned (gauge) | raw conditioned (note) | fix conditioned (note) |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
    let mut thetas = cfg.thetas.clone();
    thetas.sort_by(|a, b| a.total_cmp(b));
    for th in thetas {
        let t = f32_to_decimal_f64(th);
        let get = |op: Op| s.conditions.iter().find(|c| c.op == op && c.theta == t);
        let f = |c: Option<&JsonCondition>| {
            c.map_or("—".into(), |c| {
                format!("{:.3} ({}/{})", c.valid_rate, c.n_valid, c.n)
            })
        };
        let g = |c: Option<&JsonCondition>| {
            c.and_then(|c| c.valid_rate_given_theta1)
                .map_or("—".into(), |r| format!("{r:.3}"))
        };
        let note = NOTE_JSON.iter().find(|n| n.0 == th);
        let nf = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.3}"));
        let _ = writeln!(
            o,
            "| {th} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f(get(Op::Ctrl)),
            f(get(Op::Normalized)),
            nf(note.map(|n| n.1)),
            nf(note.map(|n| n.2)),
            g(get(Op::Ctrl)),
            g(get(Op::Normalized)),
            nf(note.map(|n| n.3)),
            nf(note.map(|n| n.4))
        );
    }
    // Determinism check: raw θ=1 and fix θ=1 should decide identically.
    if cfg.ops.contains(&Op::Ctrl) && cfg.ops.contains(&Op::Normalized) && cfg.thetas.contains(&1.0)
    {
        let pick = |op: Op| -> Vec<&JsonLine> {
            let mut v: Vec<&JsonLine> = lines
                .iter()
                .filter(|l| l.op == op && l.theta == 1.0)
                .collect();
            v.sort_by_key(|l| l.schema);
            v
        };
        let (a, b) = (pick(Op::Ctrl), pick(Op::Normalized));
        let same = a
            .iter()
            .zip(&b)
            .filter(|(x, y)| x.tokens == y.tokens)
            .count();
        let _ = writeln!(
            o,
            "\nDeterminism check (the note: raw θ=1 and fix θ=1 give identical valid sets): {same}/{} outputs token-identical.",
            a.len()
        );
    }
    work_and_plots(&mut o, s.forward_tokens, s.naive_forward_tokens, plots);
    let _ = writeln!(
        o,
        "Definitions: valid = the first brace-balanced `{{…}}` of the output (naive brace count) parses as JSON and has no schema error under the schema's own draft, with `format` as annotation only. Conditioned = among the schemas valid at ctrl θ = 1."
    );
    o
}
