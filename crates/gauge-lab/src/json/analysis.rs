//! From raw lines to the summary: valid rates per (op, θ), conditioned on the θ = 1 baseline,
//! with the content measures; and the agreement of two runs. Pure functions of the lines, so a
//! resumed run summarises exactly like an uninterrupted one.

use super::config::JsonConfig;
use super::json_run_dir;
use super::line::JsonLine;
use super::schema::{self, a2_schemas, SchemaCheck};
use super::shape::{Shape, ShapeRates};
use crate::error::LabError;
use crate::ops::Op;
use crate::stack::Stack;
use crate::stats::f32_to_decimal_f64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;

/// One (op, θ) condition of A2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonCondition {
    pub op: Op,
    pub theta: f64,
    /// The penalty window in tokens (`null` = the note's seen set: prompt + all generated).
    pub window: Option<usize>,
    /// Outputs scored.
    pub n: usize,
    pub n_valid: usize,
    pub valid_rate: f64,
    /// Among schemas valid at ctrl θ = 1 (the note's "conditioned" rate); `null` without that
    /// baseline.
    #[serde(alias = "conditioned_valid_rate")]
    pub valid_rate_given_theta1: Option<f64>,
    /// Failures with no balanced object / an unparseable one / a schema violation.
    pub no_json: usize,
    pub parse_error: usize,
    pub schema_invalid: usize,
    /// Valid with `format` checked too (dates, e-mails, URIs, ...).
    #[serde(default)]
    pub valid_formats_rate: f64,
    /// Outputs that ended with an end-of-generation token (the rest hit the token limit or a
    /// stop string).
    #[serde(default)]
    pub eog_rate: f64,
    /// Mean generated tokens per output.
    #[serde(default)]
    pub mean_tokens: f64,
    /// Outputs decoded without the grammar because it could not be compiled.
    #[serde(default)]
    pub grammar_errors: usize,
    /// Content measures over the outputs that parse (see [`super::shape`]).
    #[serde(default)]
    pub shape: ShapeRates,
}

/// Result of `gauge json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSummary {
    pub model: String,
    /// The stack that decided (absent = gauge).
    #[serde(default, skip_serializing_if = "Stack::is_gauge")]
    pub sampler: Stack,
    pub conditions: Vec<JsonCondition>,
    /// Schemas in the ctrl θ = 1 baseline that were valid.
    pub baseline_valid: Option<usize>,
    pub forward_tokens: u64,
    pub naive_forward_tokens: u64,
}

/// Token-for-token agreement of two finished A2 runs (e.g. the gauge and llama-cpp stacks) on the
/// outputs both decoded (same schema, op, θ): (outputs compared, outputs identical, same verdict).
pub fn compare_json_runs(
    out_root: &Path,
    a: &JsonConfig,
    b: &JsonConfig,
) -> Result<(usize, usize, usize), LabError> {
    let read = |cfg: &JsonConfig| -> Result<Vec<JsonLine>, LabError> {
        let path = json_run_dir(out_root, cfg).join("raw.jsonl");
        let text = std::fs::read_to_string(&path).map_err(LabError::io(&path))?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| LabError::Parse {
                    path: path.clone(),
                    line: i + 1,
                    message: e.to_string(),
                })
            })
            .collect()
    };
    let la = read(a)?;
    let lb = read(b)?;
    let index: std::collections::HashMap<(usize, Op, u32), &JsonLine> = lb
        .iter()
        .map(|l| ((l.schema, l.op, l.theta.to_bits()), l))
        .collect();
    let (mut n, mut same, mut verdict) = (0, 0, 0);
    for l in &la {
        if let Some(o) = index.get(&(l.schema, l.op, l.theta.to_bits())) {
            n += 1;
            same += usize::from(l.tokens == o.tokens);
            verdict += usize::from(l.valid == o.valid);
        }
    }
    Ok((n, same, verdict))
}

/// Format validity and content shape of the lines of one condition.
fn content_measures(
    ls: &[&JsonLine],
    checks: &mut std::collections::HashMap<usize, SchemaCheck>,
) -> (usize, ShapeRates) {
    let schemas = a2_schemas();
    let mut valid_formats = 0;
    let mut total = Shape::default();
    for l in ls {
        let Some(entry) = schemas.get(l.schema) else {
            continue;
        };
        let Some(v) = l
            .extracted
            .as_deref()
            .and_then(|t| schema::parse_json(t).ok())
        else {
            continue;
        };
        total.add(&Shape::of(&v, &entry.schema));
        let check = checks
            .entry(l.schema)
            .or_insert_with(|| SchemaCheck::with_formats(entry));
        if l.valid && check.check(&v) == Ok(true) {
            valid_formats += 1;
        }
    }
    (valid_formats, ShapeRates::from(&total))
}

/// Summarise the lines of a run (a pure function of the lines, so resumption cannot change it).
pub fn summarize(cfg: &JsonConfig, lines: &[JsonLine]) -> JsonSummary {
    let baseline: Option<BTreeSet<usize>> =
        (cfg.ops.contains(&Op::Ctrl) && cfg.thetas.contains(&1.0)).then(|| {
            lines
                .iter()
                .filter(|l| l.op == Op::Ctrl && l.theta == 1.0 && l.valid)
                .map(|l| l.schema)
                .collect()
        });
    let mut conditions = Vec::new();
    let mut checks = std::collections::HashMap::new();
    for &op in &cfg.ops {
        for &theta in &cfg.thetas {
            let ls: Vec<&JsonLine> = lines
                .iter()
                .filter(|l| l.op == op && l.theta == theta)
                .collect();
            let n = ls.len();
            let n_valid = ls.iter().filter(|l| l.valid).count();
            let count = |r: &str| ls.iter().filter(|l| l.reason == r).count();
            let (valid_formats, shape) = content_measures(&ls, &mut checks);
            let rate = |k: usize| if n > 0 { k as f64 / n as f64 } else { 0.0 };
            let valid_rate_given_theta1 = baseline.as_ref().filter(|b| !b.is_empty()).map(|b| {
                ls.iter()
                    .filter(|l| l.valid && b.contains(&l.schema))
                    .count() as f64
                    / b.len() as f64
            });
            conditions.push(JsonCondition {
                op,
                theta: f32_to_decimal_f64(theta),
                window: cfg.window,
                n,
                n_valid,
                valid_rate: if n > 0 {
                    n_valid as f64 / n as f64
                } else {
                    0.0
                },
                valid_rate_given_theta1,
                no_json: count("no_json"),
                parse_error: count("parse_error"),
                schema_invalid: count("schema_invalid"),
                valid_formats_rate: rate(valid_formats),
                eog_rate: rate(ls.iter().filter(|l| l.stop == "eog").count()),
                mean_tokens: if n > 0 {
                    ls.iter().map(|l| l.tokens.len()).sum::<usize>() as f64 / n as f64
                } else {
                    0.0
                },
                grammar_errors: ls.iter().filter(|l| l.grammar_error.is_some()).count(),
                shape,
            });
        }
    }
    JsonSummary {
        model: cfg.model.clone(),
        sampler: cfg.sampler,
        conditions,
        baseline_valid: baseline.map(|b| b.len()),
        forward_tokens: lines.iter().map(|l| l.forward_tokens).sum(),
        naive_forward_tokens: lines.iter().map(|l| l.naive_forward_tokens).sum(),
    }
}
