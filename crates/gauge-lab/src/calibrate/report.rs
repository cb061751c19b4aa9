//! The calibration's terminal table, `REPORT.md` (beside the note's Table 5) and its plot.

use super::analysis::{AnchorResult, CalibSummary, CurvePoint};
use super::bisect::{MatchResult, Verdict};
use super::closed_form::{Requirement, StaticRequirement};
use super::config::CalibConfig;
use super::prompts::note_data;
use crate::plot::{line_chart_svg, LineChart, Series};
use crate::report::{opt, work_and_plots, work_line};
use std::fmt::Write as _;

/// `2.863`, `TRIVIAL (1)`, `✗ UNREACHABLE` for one match.
fn cell(m: &MatchResult) -> String {
    match m.verdict {
        Verdict::Matched => format!(
            "{}{:.3}",
            if m.converged { "" } else { "~" },
            m.value.unwrap_or(f64::NAN)
        ),
        Verdict::Trivial => format!("TRIVIAL ({})", m.value.unwrap_or(f64::NAN)),
        Verdict::Unreachable => "✗ UNREACHABLE".to_string(),
    }
}

fn static_req(r: &StaticRequirement) -> String {
    if r.infinite {
        "∞".into()
    } else {
        opt(r.value, 2)
    }
}

fn presence_cell(a: &AnchorResult, alpha_max: f64) -> String {
    match &a.presence {
        None => "—".into(),
        Some(p) => match p.verdict {
            Verdict::Unreachable => format!("✗ (> {alpha_max})"),
            _ => cell(p),
        },
    }
}

/// The terminal table of `gauge calibrate`.
pub fn render_calibrate_table(s: &CalibSummary) -> String {
    let mut o = String::new();
    let base = s.raw_grid.iter().find(|p| p.value == 1.0);
    let _ = writeln!(
        o,
        "calibrate {}: {} prompts × {} tokens; raw θ = 1 rep_rate {}",
        s.model,
        s.prompts,
        s.tokens,
        opt(base.map(|b| b.metrics.rep_rate), 4)
    );
    let _ = writeln!(
        o,
        "{:>7} {:>9} {:>15} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "θ",
        "raw rep",
        "θ′ (rep_rate)",
        "achieved",
        "shortfall",
        "θ′ static",
        "presence α",
        "α static"
    );
    for a in &s.anchors {
        let m = &a.matches[0];
        let _ = writeln!(
            o,
            "{:>7} {:>9.4} {:>15} {:>9.4} {:>9} {:>10} {:>10} {:>10}",
            a.theta,
            a.raw.rep_rate,
            cell(m),
            m.achieved,
            opt(m.shortfall, 4),
            static_req(&a.closed_form.theta_required),
            presence_cell(a, s.alpha_max),
            static_req(&a.closed_form.presence_required),
        );
    }
    for a in &s.anchors {
        for m in &a.matches[1..] {
            let _ = writeln!(
                o,
                "  θ = {} on {}: {} (target {:.4}, achieved {:.4})",
                a.theta,
                m.metric,
                cell(m),
                m.target,
                m.achieved
            );
        }
    }
    for a in &s.anchors {
        let _ = writeln!(o, "  θ = {}: {}", a.theta, a.advice);
    }
    let _ = writeln!(
        o,
        "control (raw θ = 1 ≡ normalized θ′ = 1 on every prompt): {}",
        if s.controls.noop_ctrl1_eq_normalized1 {
            "PASS"
        } else {
            "FAIL"
        }
    );
    let _ = writeln!(
        o,
        "{} sweeps; {}",
        s.sweeps,
        work_line(s.forward_tokens, s.naive_forward_tokens)
    );
    o
}

fn curve_table(o: &mut String, head: &str, points: &[CurvePoint]) {
    let _ = writeln!(o, "| {head} | rep_rate | distinct-2 | longest run |");
    let _ = writeln!(o, "|--:|--:|--:|--:|");
    let mut pts: Vec<&CurvePoint> = points.iter().collect();
    pts.sort_by(|a, b| a.value.total_cmp(&b.value));
    for p in pts {
        let _ = writeln!(
            o,
            "| {} | {:.4} | {:.4} | {:.3} |",
            p.value, p.metrics.rep_rate, p.metrics.distinct2, p.metrics.longest_run
        );
    }
}

fn requirement_row(o: &mut String, name: &str, r: &Requirement) {
    let _ = writeln!(
        o,
        "| {name} | {} | {} | {} | {} | {} |",
        r.n,
        opt(r.median, 2),
        opt(r.p10, 2),
        opt(r.p90, 2),
        opt(r.frac_above_ceiling, 3)
    );
}

/// `REPORT.md` of a calibration run.
pub fn calibrate_report(cfg: &CalibConfig, s: &CalibSummary, plots: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# gauge calibrate — normalized θ′ matching raw θ on `{}`\n",
        s.model
    );
    let _ = writeln!(
        o,
        "FIXCAL (docs/PROTOCOL.md §6): the note's {} fixed prompts × {} greedy tokens, no EOS stop, \
         seen set = prompt + all generated. Per anchor, θ′ ∈ [1, {}] is bisected (≤ {} midpoints) \
         on each metric: TRIVIAL if θ′ = 1 already suppresses as much (within tolerance), \
         UNREACHABLE if θ′ = {} still falls short by more than the tolerance (achieved value and \
         shortfall reported, never extrapolated), else MATCHED at the first midpoint within \
         tolerance (`~`: budget exhausted, upper bracket). Tolerances: rep_rate 0.01, distinct-2 \
         0.01, longest run 0.25.\n",
        s.prompts, s.tokens, cfg.theta_max, cfg.max_iters, cfg.theta_max
    );
    let _ =
        writeln!(
        o,
        "**Control** (raw θ = 1 and normalized θ′ = 1 decode the same tokens on every prompt): \
         **{}**{}\n",
        if s.controls.noop_ctrl1_eq_normalized1 { "PASS" } else { "FAIL" },
        if s.controls.differing_prompts.is_empty() {
            String::new()
        } else {
            format!(" (differ on prompts {:?})", s.controls.differing_prompts)
        }
    );

    let _ = writeln!(o, "## The map\n");
    let _ = writeln!(
        o,
        "| raw θ | raw rep_rate | θ′ on rep_rate | achieved | shortfall | distinct-2 raw / at θ′ | longest run raw / at θ′ | what to use |"
    );
    let _ = writeln!(o, "|--:|--:|--:|--:|--:|--:|--:|---|");
    for a in &s.anchors {
        let m = &a.matches[0];
        let at = a.at_matched;
        let _ = writeln!(
            o,
            "| {} | {:.4} | {} | {:.4} | {} | {:.4} / {} | {:.3} / {} | {} |",
            a.theta,
            a.raw.rep_rate,
            cell(m),
            m.achieved,
            opt(m.shortfall, 4),
            a.raw.distinct2,
            opt(at.map(|x| x.distinct2), 4),
            a.raw.longest_run,
            opt(at.map(|x| x.longest_run), 3),
            a.advice
        );
    }
    if s.anchors.iter().any(|a| a.matches.len() > 1) {
        let _ = writeln!(o, "\nOther matching metrics (independent searches):\n");
        let _ = writeln!(o, "| raw θ | metric | target | θ′ | achieved | shortfall |");
        let _ = writeln!(o, "|--:|---|--:|--:|--:|--:|");
        for a in &s.anchors {
            for m in &a.matches[1..] {
                let _ = writeln!(
                    o,
                    "| {} | {} | {:.4} | {} | {:.4} | {} |",
                    a.theta,
                    m.metric,
                    m.target,
                    cell(m),
                    m.achieved,
                    opt(m.shortfall, 4)
                );
            }
        }
    }

    let _ = writeln!(
        o,
        "\n## When θ′ is unreachable: the subtractive penalties\n"
    );
    let _ = writeln!(
        o,
        "A presence penalty subtracts α from every seen logit: shift-invariant like normalized, and \
         its strength is in logit units, so it can reach what θ′ ≤ {} cannot. For every anchor \
         UNREACHABLE on rep_rate, α ∈ [0, {}] is bisected with the same rule on rep_rate (α = 0 is \
         the θ = 1 run). The values are measured with the note's seen set (prompt + every \
         generated token, no window); llama.cpp's `penalty_last_n = 64` default window penalizes \
         less. `frequency_penalty` scales with the count and was not measured.\n",
        cfg.theta_max, cfg.alpha_max
    );
    let _ = writeln!(
        o,
        "| raw θ | presence α | achieved rep_rate | target | static α (closed form) |"
    );
    let _ = writeln!(o, "|--:|--:|--:|--:|--:|");
    for a in &s.anchors {
        let (cellv, ach) = match &a.presence {
            Some(p) => (presence_cell(a, s.alpha_max), format!("{:.4}", p.achieved)),
            None => ("— (θ′ reachable or search off)".into(), "—".into()),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {:.4} | {} |",
            a.theta,
            cellv,
            ach,
            a.raw.rep_rate,
            static_req(&a.closed_form.presence_required)
        );
    }

    let _ = writeln!(o, "\n## Closed form on the loop tokens of the θ = 1 run\n");
    let l = &s.loops;
    let _ = writeln!(
        o,
        "{} of {} generated tokens are loop tokens (greedy token already seen; loop fraction \
         {:.4}); mean p_top on them {}. θ′_required = ln p_runner / ln p_top (∞ if p_top ≥ 1 − 1e-6 \
         or p_runner ≤ 1e-12); the exact variant uses the best unseen token; α_required = \
         ln p_top − ln p_unseen. An anchor's static requirement is the q = 1 − target/loop \
         fraction quantile (it ignores cascades, so it overstates what the search needs).\n",
        l.n_loop_tokens,
        l.n_gen_tokens,
        l.loop_frac,
        opt(l.p_top_loop_mean, 3)
    );
    let _ = writeln!(
        o,
        "| requirement | n | median | p10 | p90 | share above the ceiling |"
    );
    let _ = writeln!(o, "|---|--:|--:|--:|--:|--:|");
    requirement_row(&mut o, "θ′ vs best other token", &l.theta_required);
    requirement_row(&mut o, "θ′ vs best unseen token", &l.theta_required_unseen);
    requirement_row(
        &mut o,
        "presence α vs best unseen token",
        &l.presence_required,
    );
    let _ = writeln!(
        o,
        "\n| raw θ | q | static θ′ | static θ′ (unseen) | static α |"
    );
    let _ = writeln!(o, "|--:|--:|--:|--:|--:|");
    for a in &s.anchors {
        let c = &a.closed_form;
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            a.theta,
            opt(c.theta_required.q, 3),
            static_req(&c.theta_required),
            static_req(&c.theta_required_unseen),
            static_req(&c.presence_required)
        );
    }

    note_table5(&mut o, s);

    let _ = writeln!(o, "\n## Every evaluation\n");
    let _ = writeln!(o, "Raw (ctrl) grid:\n");
    curve_table(&mut o, "θ", &s.raw_grid);
    let _ = writeln!(o, "\nNormalized θ′ (the bisection cache):\n");
    curve_table(&mut o, "θ′", &s.normalized_curve);
    if !s.presence_curve.is_empty() {
        let _ = writeln!(o, "\nPresence α:\n");
        curve_table(&mut o, "α", &s.presence_curve);
    }
    work_and_plots(&mut o, s.forward_tokens, s.naive_forward_tokens, plots);
    let _ = writeln!(o, "{} sweeps of {} prompts decoded.", s.sweeps, s.prompts);
    o
}

/// The note's Table 5 (θ′ per anchor and model) with this run as the first column.
fn note_table5(o: &mut String, s: &CalibSummary) {
    let d = note_data();
    let _ = writeln!(o, "\n## Beside the note's Table 5\n");
    let _ = writeln!(
        o,
        "θ′ matching raw greedy rep_rate; ✗ = UNREACHABLE; * = the repository's extra models; \
         ~ = not converged. The note: 16 prompts × 256 tokens, HF transformers, fp32 logits. \
         Source: `data/fixcal.json` (provenance in `data/PROVENANCE.md`).\n"
    );
    let mut anchors: Vec<f64> = d.table5.anchors.clone();
    for a in &s.anchors {
        if !anchors.iter().any(|&x| (x - a.theta).abs() < 1e-9) {
            anchors.push(a.theta);
        }
    }
    anchors.sort_by(f64::total_cmp);
    let _ = write!(o, "| anchor θ | **{}** (this run)", s.model);
    for m in &d.table5.models {
        let _ = write!(o, " | {}{}", m.model, if m.extra { "*" } else { "" });
    }
    let _ = writeln!(o, " |");
    let _ = writeln!(o, "|--:|--:{}|", "|--:".repeat(d.table5.models.len()));
    for &a in &anchors {
        let ours = s
            .anchors
            .iter()
            .find(|x| (x.theta - a).abs() < 1e-9)
            .map_or("—".to_string(), |x| match x.matches[0].verdict {
                Verdict::Unreachable => "✗".into(),
                _ => cell(&x.matches[0]),
            });
        let _ = write!(o, "| {a} | **{ours}**");
        for m in &d.table5.models {
            let c = match d.theta_prime(m, a) {
                None => "—".to_string(),
                Some(None) => "✗".to_string(),
                Some(Some(v)) => {
                    let nc = m.not_converged.iter().any(|&x| (x - a).abs() < 1e-9);
                    format!("{}{v}", if nc { "~" } else { "" })
                }
            };
            let _ = write!(o, " | {c}");
        }
        let _ = writeln!(o, " |");
    }
    let _ = writeln!(
        o,
        "\nRaw rep_rate at θ = 1 and normalized rep_rate at θ′ = {}:\n",
        s.theta_max
    );
    let _ = write!(o, "| | **{}**", s.model);
    for m in &d.table5.models {
        let _ = write!(o, " | {}", m.model);
    }
    let _ = writeln!(o, " |");
    let _ = writeln!(o, "|---|--:{}|", "|--:".repeat(d.table5.models.len()));
    let base = s
        .raw_grid
        .iter()
        .find(|p| p.value == 1.0)
        .map(|p| p.metrics.rep_rate);
    let ceil = s
        .normalized_curve
        .iter()
        .find(|p| p.value == s.theta_max)
        .map(|p| p.metrics.rep_rate);
    let _ = write!(o, "| raw θ = 1 | **{}**", opt(base, 4));
    for m in &d.table5.models {
        let _ = write!(o, " | {}", opt(d.raw_rep_rate(&m.model, 1.0), 4));
    }
    let _ = writeln!(o, " |");
    let _ = write!(o, "| normalized θ′ = 10 | **{}**", opt(ceil, 4));
    for m in &d.table5.models {
        let _ = write!(o, " | {}", opt(d.ceiling_rep_rate(&m.model), 4));
    }
    let _ = writeln!(o, " |");
    let _ = write!(
        o,
        "| median θ′_required | **{}**",
        opt(s.loops.theta_required.median, 0)
    );
    for m in &d.table5.models {
        let _ = write!(
            o,
            " | {}",
            opt(d.closed_form(&m.model).map(|c| c.median), 0)
        );
    }
    let _ = writeln!(o, " |");
    let _ = write!(
        o,
        "| share θ′_required > 10 | **{}**",
        opt(s.loops.theta_required.frac_above_ceiling, 3)
    );
    for m in &d.table5.models {
        let _ = write!(
            o,
            " | {}",
            opt(d.closed_form(&m.model).map(|c| c.frac_gt_10), 3)
        );
    }
    let _ = writeln!(o, " |");
    let _ = write!(
        o,
        "| in-loop p_top mean | **{}**",
        opt(s.loops.p_top_loop_mean, 3)
    );
    for m in &d.table5.models {
        let _ = write!(
            o,
            " | {}",
            opt(d.closed_form(&m.model).map(|c| c.p_top_loop_mean), 3)
        );
    }
    let _ = writeln!(o, " |");
}

/// rep_rate against the dial: the normalized θ′ curve, the presence α curve and each anchor's
/// raw target as a dashed line.
pub fn curve_chart_svg(s: &CalibSummary) -> String {
    let pts = |c: &[CurvePoint]| {
        let mut v: Vec<(f64, f64)> = c.iter().map(|p| (p.value, p.metrics.rep_rate)).collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let x_max = s.theta_max.max(s.alpha_max);
    let mut series = vec![Series {
        name: "normalized θ′".into(),
        points: pts(&s.normalized_curve),
        err: None,
        dashed: false,
    }];
    if !s.presence_curve.is_empty() {
        let mut p = pts(&s.presence_curve);
        if let Some(b) = s.raw_grid.iter().find(|p| p.value == 1.0) {
            p.insert(0, (0.0, b.metrics.rep_rate));
        }
        series.push(Series {
            name: "presence α".into(),
            points: p,
            err: None,
            dashed: false,
        });
    }
    for a in &s.anchors {
        series.push(Series {
            name: format!("raw θ={}", a.theta),
            points: vec![(0.0, a.raw.rep_rate), (x_max, a.raw.rep_rate)],
            err: None,
            dashed: true,
        });
    }
    line_chart_svg(&LineChart {
        title: format!("{}: rep_rate vs θ′ and α (dashed: raw targets)", s.model),
        x_label: "normalized θ′ / presence α".into(),
        y_label: "rep_rate".into(),
        y_range: (0.0, 1.0),
        series,
    })
}
