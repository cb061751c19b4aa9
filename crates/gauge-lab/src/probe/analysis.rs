//! From raw lines to the summary (the `--json` shape) and the details the report shows.
//! Everything here is a pure function of the lines, sorted by (prefix, run), so an interrupted and
//! resumed run summarises exactly like an uninterrupted one.

use crate::ops::Op;
use crate::probe::config::{ProbeConfig, Role};
use crate::probe::raw::RawLine;
use crate::probe::{ConditionSummary, ProbeSummary, ZeroPointSummary};
use crate::stats::{bootstrap_ci, f32_to_decimal_f64, first_divergence, flips, median};
use std::collections::BTreeMap;

/// Per-condition facts beyond the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionDetail {
    pub op: Op,
    pub theta: f32,
    pub flips: u64,
    pub positions: u64,
    pub prefixes: usize,
    pub prefixes_diverging: usize,
    /// numpy-style (linear) quartiles of the first-divergence positions.
    pub first_divergence_iqr: Option<[f64; 2]>,
    /// Mean over diverging prefixes of the flip rate from the first divergence on.
    pub after_divergence_flip_rate: Option<f64>,
    pub rep_rate_plus: f64,
    pub rep_rate_minus: f64,
}

/// Zero-point facts beyond the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct ZeroPointDetail {
    pub mean_top1_logit: f64,
    pub steps: usize,
    /// The own-median shift actually used (−median top-1, in f32).
    pub c_natural: Option<f32>,
    /// c = +shift vs c = 0 at the zero-point θ (ctrl), when both were decoded.
    pub synth_flip_rate: Option<f64>,
    pub own_median_flips: u64,
    pub own_median_positions: u64,
}

/// Summary + details + the gate verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    pub summary: ProbeSummary,
    pub conditions: Vec<ConditionDetail>,
    pub zero_point: ZeroPointDetail,
    /// Per op: (flips, positions) at θ = 1.
    pub gate: Vec<(Op, u64, u64)>,
}

impl Analysis {
    /// Every op flipped exactly 0 times at θ = 1.
    pub fn gate_passed(&self) -> bool {
        self.gate.iter().all(|&(_, f, _)| f == 0)
    }

    /// Human-readable gate failure, if any.
    pub fn gate_failure(&self) -> Option<String> {
        let bad: Vec<String> = self
            .gate
            .iter()
            .filter(|g| g.1 != 0)
            .map(|(op, f, p)| format!("{op} flipped {f} of {p} positions"))
            .collect();
        (!bad.is_empty()).then(|| bad.join("; "))
    }
}

/// numpy `percentile` with linear interpolation on sorted data.
fn percentile_linear(sorted: &[f64], q: f64) -> f64 {
    let pos = (sorted.len() - 1) as f64 * q;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// The median top-1 logit of the c = 0, θ = 1 decode (Python `statistics.median` over all steps).
pub fn median_top1(lines: &[RawLine]) -> Option<f64> {
    let v: Vec<f64> = lines
        .iter()
        .filter(|l| l.role == Role::ZeroPoint)
        .filter_map(|l| l.zero_point.as_ref())
        .flat_map(|z| z.top1.iter().map(|&x| f64::from(x)))
        .collect();
    median(&v)
}

/// prefix -> the (+c, −c) lines of one condition.
type PairsByPrefix<'a> = BTreeMap<usize, [Option<&'a RawLine>; 2]>;

/// Summarise the lines of a finished run.
pub fn analyze(cfg: &ProbeConfig, lines: &[RawLine]) -> Analysis {
    let mut sorted: Vec<&RawLine> = lines.iter().collect();
    sorted.sort_by_key(|l| (l.is_natural(), l.prefix, l.run));

    // (op, θ bits) -> prefix -> (plus, minus)
    let mut pairs: BTreeMap<(usize, u32), PairsByPrefix<'_>> = BTreeMap::new();
    for l in sorted.iter().filter(|l| l.role == Role::Flip) {
        let oi = cfg
            .ops
            .iter()
            .position(|&o| o == l.op)
            .unwrap_or(usize::MAX);
        let e = pairs
            .entry((oi, l.theta.to_bits()))
            .or_default()
            .entry(l.prefix)
            .or_default();
        e[usize::from(l.c < 0.0)] = Some(l);
    }

    let mut summaries = Vec::new();
    let mut details = Vec::new();
    let mut gate = Vec::new();
    for &op in &cfg.ops {
        for &theta in &cfg.thetas {
            let oi = cfg.ops.iter().position(|&o| o == op).unwrap_or(usize::MAX);
            let empty = BTreeMap::new();
            let per_prefix = pairs.get(&(oi, theta.to_bits())).unwrap_or(&empty);
            let (mut tf, mut tp) = (0u64, 0u64);
            let mut rates = Vec::new();
            let mut fds = Vec::new();
            let mut after = Vec::new();
            let (mut rep_p, mut rep_m, mut n_runs) = (0.0f64, 0.0f64, 0usize);
            for pair in per_prefix.values() {
                let (Some(a), Some(b)) = (pair[0], pair[1]) else {
                    continue;
                };
                let (f, p) = flips(&a.tokens, &b.tokens);
                tf += f;
                tp += p;
                rates.push(if p > 0 { f as f64 / p as f64 } else { 0.0 });
                if let Some(fd) = first_divergence(&a.tokens, &b.tokens) {
                    fds.push(fd as f64);
                    let k = a.tokens.len().min(b.tokens.len());
                    let (fa, _) = flips(&a.tokens[fd..k], &b.tokens[fd..k]);
                    after.push(fa as f64 / (k - fd) as f64);
                }
                rep_p += a.repeats as f64 / a.tokens.len().max(1) as f64;
                rep_m += b.repeats as f64 / b.tokens.len().max(1) as f64;
                n_runs += 1;
            }
            let flip_rate = if tp > 0 { tf as f64 / tp as f64 } else { 0.0 };
            let mut fds_sorted = fds.clone();
            fds_sorted.sort_by(|a, b| a.total_cmp(b));
            let nr = n_runs.max(1) as f64;
            summaries.push(ConditionSummary {
                op,
                theta: f32_to_decimal_f64(theta),
                flip_rate,
                ci95: bootstrap_ci(&rates, cfg.bootstrap_resamples, cfg.bootstrap_seed),
                positions: tp,
                median_first_divergence: median(&fds),
                rep_rate: (rep_p + rep_m) / (2.0 * nr),
            });
            details.push(ConditionDetail {
                op,
                theta,
                flips: tf,
                positions: tp,
                prefixes: n_runs,
                prefixes_diverging: fds.len(),
                first_divergence_iqr: (!fds_sorted.is_empty()).then(|| {
                    [
                        percentile_linear(&fds_sorted, 0.25),
                        percentile_linear(&fds_sorted, 0.75),
                    ]
                }),
                after_divergence_flip_rate: (!after.is_empty())
                    .then(|| after.iter().sum::<f64>() / after.len() as f64),
                rep_rate_plus: rep_p / nr,
                rep_rate_minus: rep_m / nr,
            });
            if theta == 1.0 {
                gate.push((op, tf, tp));
            }
        }
    }

    // Zero point.
    let (mut pos, mut tot, mut top_sum, mut steps) = (0u64, 0u64, 0.0f64, 0usize);
    for z in sorted
        .iter()
        .filter(|l| l.role == Role::ZeroPoint)
        .filter_map(|l| l.zero_point.as_ref())
    {
        pos += z.seen_positive;
        tot += z.seen_total;
        top_sum += z.top1.iter().map(|&x| f64::from(x)).sum::<f64>();
        steps += z.top1.len();
    }
    let med = median_top1(lines);
    let by_prefix = |role: Role, c: Option<f32>, theta: f32| -> BTreeMap<usize, &RawLine> {
        sorted
            .iter()
            .filter(|l| {
                l.role == role
                    && l.theta == theta
                    && c.is_none_or(|c| l.c == c)
                    && (role != Role::Flip || l.op == Op::Ctrl)
            })
            .map(|l| (l.prefix, *l))
            .collect()
    };
    let refs = by_prefix(Role::ZpRef, None, cfg.zero_point_theta);
    let nats = by_prefix(Role::ZpNatural, None, cfg.zero_point_theta);
    let synth = by_prefix(Role::Flip, Some(cfg.shift), cfg.zero_point_theta);
    let pooled = |other: &BTreeMap<usize, &RawLine>| -> Option<(u64, u64)> {
        if other.is_empty() {
            return None;
        }
        let (mut f, mut p) = (0, 0);
        for (k, r) in &refs {
            if let Some(o) = other.get(k) {
                let (a, b) = flips(&r.tokens, &o.tokens);
                f += a;
                p += b;
            }
        }
        Some((f, p))
    };
    let (own_f, own_p) = pooled(&nats).unwrap_or((0, 0));
    let synth_rate = pooled(&synth).map(|(f, p)| if p > 0 { f as f64 / p as f64 } else { 0.0 });
    let zero_point = ZeroPointSummary {
        positive_fraction: if tot > 0 {
            pos as f64 / tot as f64
        } else {
            0.0
        },
        median_top1_logit: med.unwrap_or(0.0),
        own_median_flip_rate: if own_p > 0 {
            own_f as f64 / own_p as f64
        } else {
            0.0
        },
    };
    let zp_detail = ZeroPointDetail {
        mean_top1_logit: if steps > 0 {
            top_sum / steps as f64
        } else {
            0.0
        },
        steps,
        c_natural: nats.values().next().map(|l| l.c),
        synth_flip_rate: synth_rate,
        own_median_flips: own_f,
        own_median_positions: own_p,
    };

    let summary = ProbeSummary {
        model: cfg.model.clone(),
        sampler: cfg.sampler,
        conditions: summaries,
        zero_point: cfg.zero_point.then_some(zero_point),
        forward_tokens: lines.iter().map(|l| l.forward_tokens).sum(),
        naive_forward_tokens: lines.iter().map(|l| l.naive_forward_tokens).sum(),
    };
    Analysis {
        summary,
        conditions: details,
        zero_point: zp_detail,
        gate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_linear(&v, 0.25), 1.75);
        assert_eq!(percentile_linear(&v, 0.75), 3.25);
        assert_eq!(percentile_linear(&[5.0], 0.25), 5.0);
    }
}
