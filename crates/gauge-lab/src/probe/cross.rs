//! The cross-stack table of `REPORT.md`: finished runs of the same model and grid on other
//! stacks (gauge, llama-cpp, hf, vllm) under the same results root, compared token for token with
//! this run. A run is "the same grid" when its configuration differs only in `sampler` and
//! `engine` ([`ProbeConfig::same_grid`]); the model label must match too, so a GGUF run and a
//! run of the same weights under another label are not paired.

use super::{compare_probe_runs, ProbeSummary, StackAgreement};
use crate::error::LabError;
use crate::ops::Op;
use crate::probe::config::ProbeConfig;
use std::fmt::Write as _;
use std::path::Path;

/// Another stack's finished run of this grid.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherStack {
    pub config: ProbeConfig,
    pub summary: ProbeSummary,
    /// Token-for-token agreement with this run.
    pub agreement: StackAgreement,
}

/// Every finished (has `summary.json`) probe run under `out_root` with the same grid as `cfg` on
/// another stack or engine, in run-id order.
pub(crate) fn other_stacks(
    out_root: &Path,
    cfg: &ProbeConfig,
) -> Result<Vec<OtherStack>, LabError> {
    let own = cfg.run_id();
    let Ok(entries) = std::fs::read_dir(out_root) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("probe-") && *n != own)
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let dir = out_root.join(&name);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let (Some(c), Some(s)) = (read("config.json"), read("summary.json")) else {
            continue;
        };
        let (Ok(config), Ok(summary)) = (
            serde_json::from_str::<ProbeConfig>(&c),
            serde_json::from_str::<ProbeSummary>(&s),
        ) else {
            continue;
        };
        if !cfg.same_grid(&config) || config.run_id() != name {
            continue;
        }
        let agreement = compare_probe_runs(out_root, cfg, &config)?;
        out.push(OtherStack {
            config,
            summary,
            agreement,
        });
    }
    Ok(out)
}

fn stack_label(c: &ProbeConfig) -> String {
    match &c.engine {
        Some(e) => format!("{} ({})", c.sampler, e.describe()),
        None => c.sampler.to_string(),
    }
}

fn flip(s: &ProbeSummary, op: Op, theta: f32) -> String {
    let t = crate::stats::f32_to_decimal_f64(theta);
    s.conditions
        .iter()
        .find(|c| c.op == op && c.theta == t)
        .map_or_else(|| "—".into(), |c| format!("{:.4}", c.flip_rate))
}

/// The `REPORT.md` section (empty when no other stack ran this grid).
pub(crate) fn table(cfg: &ProbeConfig, own: &ProbeSummary, others: &[OtherStack]) -> String {
    if others.is_empty() {
        return String::new();
    }
    let mut conds: Vec<(Op, f32)> = Vec::new();
    for &op in &cfg.ops {
        for &t in &cfg.thetas {
            conds.push((op, t));
        }
    }
    let mut o = String::new();
    let _ = writeln!(o, "\n## Cross-stack: this grid on other stacks\n");
    let _ = writeln!(
        o,
        "Finished runs of the same model label and grid under this results root; \"identical\" \
         and \"differ\" compare each run (prefix, op, θ, c) with this run's, token for token.\n"
    );
    let mut head = "| stack | runs token-identical | positions that differ |".to_string();
    let mut rule = "|---|---:|---:|".to_string();
    for (op, t) in &conds {
        let _ = write!(head, " {op} θ={t} |");
        rule.push_str("---:|");
    }
    let _ = writeln!(o, "{head}\n{rule}");
    let mut row = format!("| {} (this run) | — | — |", stack_label(cfg));
    for &(op, t) in &conds {
        let _ = write!(row, " {} |", flip(own, op, t));
    }
    let _ = writeln!(o, "{row}");
    for x in others {
        let a = &x.agreement;
        let mut row = format!(
            "| {} | {}/{} | {}/{} |",
            stack_label(&x.config),
            a.identical_runs,
            a.runs,
            a.differing_positions,
            a.positions
        );
        for &(op, t) in &conds {
            let _ = write!(row, " {} |", flip(&x.summary, op, t));
        }
        let _ = writeln!(o, "{row}");
    }
    let _ = writeln!(
        o,
        "\nThe op θ columns are flip rates (+c vs −c) of each stack's own run."
    );
    o
}
