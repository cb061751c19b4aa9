//! From raw lines to the summary: the predictors' confusions, the slices, the delimiter-flip
//! rates and the confidence contrast per op, pooled over θ ≠ 1 and per θ. A pure function of the
//! lines (walked in the note's order), so a resumed run summarises exactly like an uninterrupted one.

use super::config::{DelimConfig, DelimLine};
use super::predict::{note_prediction, predicts_flip, slice, Slice};
use crate::ops::Op;
use crate::stats::{bootstrap_diff_ci, f32_to_decimal_f64, mean};
use serde::{Deserialize, Serialize};

/// A confusion matrix of a flip predictor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Confusion {
    pub tp: u64,
    pub fp: u64,
    pub tn: u64,
    pub fn_: u64,
}

impl Confusion {
    /// Count one position.
    pub fn add(&mut self, predicted: bool, actual: bool) {
        match (predicted, actual) {
            (true, true) => self.tp += 1,
            (true, false) => self.fp += 1,
            (false, false) => self.tn += 1,
            (false, true) => self.fn_ += 1,
        }
    }

    /// The scores (rates are `None` without positives / negatives).
    pub fn score(&self) -> PredictorScore {
        let ratio = |a: u64, b: u64| (a + b > 0).then(|| a as f64 / (a + b) as f64);
        let tpr = ratio(self.tp, self.fn_);
        let tnr = ratio(self.tn, self.fp);
        PredictorScore {
            n: self.tp + self.fp + self.tn + self.fn_,
            tp: self.tp,
            fp: self.fp,
            tn: self.tn,
            fn_: self.fn_,
            tpr,
            tnr,
            balanced_accuracy: match (tpr, tnr) {
                (Some(a), Some(b)) => Some((a + b) / 2.0),
                (Some(a), None) | (None, Some(a)) => Some(a),
                (None, None) => None,
            },
        }
    }
}

/// A predictor's confusion and rates. With only one class present, the balanced accuracy is that
/// class's rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PredictorScore {
    pub n: u64,
    pub tp: u64,
    pub fp: u64,
    pub tn: u64,
    #[serde(rename = "fn")]
    pub fn_: u64,
    pub tpr: Option<f64>,
    pub tnr: Option<f64>,
    pub balanced_accuracy: Option<f64>,
}

/// Positions and flips of one slice of the derivation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SliceCount {
    pub positions: u64,
    pub flips: u64,
}

/// Per-θ numbers of one op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThetaDelim {
    pub theta: f64,
    pub positions: u64,
    pub flips: u64,
    pub flip_fraction: f64,
    pub delimiter_flip_rate: f64,
    pub clean_positions: u64,
    pub note_balanced_accuracy: Option<f64>,
    pub gauge_balanced_accuracy: Option<f64>,
}

/// Everything measured for one operator, pooled over θ ≠ 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpDelim {
    pub op: Op,
    /// θ = 1: flips (must be 0) and positions.
    pub gate_flips: u64,
    pub gate_positions: u64,
    pub positions: u64,
    pub flips: u64,
    /// Σ flips / Σ positions.
    pub flip_fraction: f64,
    /// The note's clean positions: top-1 seen, z_top > 0, runner-up unseen.
    pub clean: SliceCount,
    /// The note's `g < z_top(1 − 1/θ)` on clean positions (raw logits, whatever the op).
    pub note_predictor: PredictorScore,
    /// Share of clean flips that emit the pre-penalty runner-up.
    pub clean_flips_on_runner_up: Option<f64>,
    /// Share of all flips that emit the runner-up.
    pub flips_on_runner_up: Option<f64>,
    /// gauge's two-sided predictor (the op's own margin, best unseen competitor) on every position.
    pub gauge_predictor: PredictorScore,
    /// The same on the two-sided slice only (top-1 and runner-up seen).
    pub gauge_predictor_two_sided: PredictorScore,
    pub top_unseen: SliceCount,
    pub one_sided_nonpositive: SliceCount,
    pub two_sided: SliceCount,
    /// Mean over records of #(flip ∧ delimiter top-1) / #positions (the note's Table 4 row 2).
    pub delimiter_flip_rate: f64,
    /// The same with the brackets-only tag.
    pub bracket_flip_rate: f64,
    /// Share of flips whose top-1 was a delimiter.
    pub delimiter_share_of_flips: Option<f64>,
    /// Mean z_top of flipped / kept positions among seen top-1s with z_top > 0, and the 95% CI of
    /// the difference.
    pub z_top_flipped: Option<f64>,
    pub z_top_kept: Option<f64>,
    pub z_top_diff_ci95: Option<[f64; 2]>,
    pub per_theta: Vec<ThetaDelim>,
}

/// Result of `gauge delim` (what `--json` prints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelimSummary {
    pub model: String,
    pub prompts: usize,
    pub tokens: usize,
    /// The pooled θ values.
    pub pooled_thetas: Vec<f64>,
    pub ops: Vec<OpDelim>,
    pub forward_tokens: u64,
    pub naive_forward_tokens: u64,
}

impl DelimSummary {
    /// The gate failure, if any op flipped at θ = 1.
    pub fn gate_failure(&self) -> Option<String> {
        let bad: Vec<String> = self
            .ops
            .iter()
            .filter(|o| o.gate_flips != 0)
            .map(|o| {
                format!(
                    "{} flipped {} of {} positions",
                    o.op, o.gate_flips, o.gate_positions
                )
            })
            .collect();
        (!bad.is_empty()).then(|| bad.join("; "))
    }

    /// The entry of one op.
    pub fn op(&self, op: Op) -> Option<&OpDelim> {
        self.ops.iter().find(|o| o.op == op)
    }
}

/// Accumulators of one op (pooled) or one (op, θ).
#[derive(Default)]
struct Acc {
    positions: u64,
    flips: u64,
    clean: SliceCount,
    top_unseen: SliceCount,
    nonpos: SliceCount,
    two_sided: SliceCount,
    note: Confusion,
    gauge: Confusion,
    gauge_two: Confusion,
    clean_runner: u64,
    flips_runner: u64,
    flips_delim: u64,
    record_delim_rates: Vec<f64>,
    record_bracket_rates: Vec<f64>,
    z_flipped: Vec<f64>,
    z_kept: Vec<f64>,
}

impl Acc {
    fn add_line(&mut self, l: &DelimLine, alpha: f32) {
        let p = &l.positions;
        let n = p.len();
        let (mut d, mut b) = (0u64, 0u64);
        for k in 0..n {
            let f = p.facts(k);
            let e = p.emitted[k];
            let flip = e != f.top1;
            self.positions += 1;
            let s = slice(&f);
            let count = match s {
                Slice::TopUnseen => &mut self.top_unseen,
                Slice::Clean => &mut self.clean,
                Slice::OneSidedNonPositive => &mut self.nonpos,
                Slice::TwoSided => &mut self.two_sided,
            };
            count.positions += 1;
            let pred = predicts_flip(l.op, l.theta, alpha, &f);
            self.gauge.add(pred, flip);
            if s == Slice::TwoSided {
                self.gauge_two.add(pred, flip);
            }
            if s == Slice::Clean {
                self.note.add(note_prediction(&f, l.theta), flip);
            }
            if f.top1_seen && f.z_top > 0.0 {
                let z = f64::from(f.z_top);
                if flip {
                    self.z_flipped.push(z);
                } else {
                    self.z_kept.push(z);
                }
            }
            if flip {
                self.flips += 1;
                count.flips += 1;
                let on_runner = e == f.runner;
                self.flips_runner += u64::from(on_runner);
                if s == Slice::Clean {
                    self.clean_runner += u64::from(on_runner);
                }
                if l.structural[k] {
                    d += 1;
                }
                if l.bracket[k] {
                    b += 1;
                }
            }
        }
        self.flips_delim += d;
        if n > 0 {
            self.record_delim_rates.push(d as f64 / n as f64);
            self.record_bracket_rates.push(b as f64 / n as f64);
        }
    }
}

fn frac(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// Summarise the lines of a run (a pure function of the lines, so resumption cannot change it).
pub fn analyze(cfg: &DelimConfig, lines: &[DelimLine]) -> DelimSummary {
    let mut sorted: Vec<&DelimLine> = lines.iter().collect();
    sorted.sort_by_key(|l| (l.prompt, l.run));
    let pooled = cfg.pooled_thetas();
    let mut ops = Vec::new();
    for &op in &cfg.ops {
        let mine = || sorted.iter().filter(move |l| l.op == op);
        let mut gate = Acc::default();
        for l in mine().filter(|l| l.theta == 1.0) {
            gate.add_line(l, cfg.alpha);
        }
        // Records in (prompt, θ) order, as the note's analyzer walks them (the means are sums).
        let mut all = Acc::default();
        let mut by_theta: Vec<Acc> = pooled.iter().map(|_| Acc::default()).collect();
        for l in mine() {
            if let Some(i) = pooled.iter().position(|&t| t == l.theta) {
                all.add_line(l, cfg.alpha);
                by_theta[i].add_line(l, cfg.alpha);
            }
        }
        let mut per_theta = Vec::new();
        for (&th, a) in pooled.iter().zip(&by_theta) {
            per_theta.push(ThetaDelim {
                theta: f32_to_decimal_f64(th),
                positions: a.positions,
                flips: a.flips,
                flip_fraction: frac(a.flips, a.positions).unwrap_or(0.0),
                delimiter_flip_rate: mean(&a.record_delim_rates).unwrap_or(0.0),
                clean_positions: a.clean.positions,
                note_balanced_accuracy: a.note.score().balanced_accuracy,
                gauge_balanced_accuracy: a.gauge.score().balanced_accuracy,
            });
        }
        let zf = mean(&all.z_flipped);
        let zk = mean(&all.z_kept);
        ops.push(OpDelim {
            op,
            gate_flips: gate.flips,
            gate_positions: gate.positions,
            positions: all.positions,
            flips: all.flips,
            flip_fraction: frac(all.flips, all.positions).unwrap_or(0.0),
            clean: all.clean,
            note_predictor: all.note.score(),
            clean_flips_on_runner_up: frac(all.clean_runner, all.clean.flips),
            flips_on_runner_up: frac(all.flips_runner, all.flips),
            gauge_predictor: all.gauge.score(),
            gauge_predictor_two_sided: all.gauge_two.score(),
            top_unseen: all.top_unseen,
            one_sided_nonpositive: all.nonpos,
            two_sided: all.two_sided,
            delimiter_flip_rate: mean(&all.record_delim_rates).unwrap_or(0.0),
            bracket_flip_rate: mean(&all.record_bracket_rates).unwrap_or(0.0),
            delimiter_share_of_flips: frac(all.flips_delim, all.flips),
            z_top_flipped: zf,
            z_top_kept: zk,
            z_top_diff_ci95: bootstrap_diff_ci(
                &all.z_flipped,
                &all.z_kept,
                cfg.bootstrap_resamples,
                cfg.bootstrap_seed,
            ),
            per_theta,
        });
    }
    DelimSummary {
        model: cfg.model.clone(),
        prompts: cfg.prompts,
        tokens: cfg.tokens,
        pooled_thetas: pooled.iter().map(|&t| f32_to_decimal_f64(t)).collect(),
        ops,
        forward_tokens: lines.iter().map(|l| l.forward_tokens).sum(),
        naive_forward_tokens: lines.iter().map(|l| l.naive_forward_tokens).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confusion_scores() {
        let mut c = Confusion::default();
        for (p, a) in [
            (true, true),
            (true, true),
            (false, true),
            (false, false),
            (true, false),
        ] {
            c.add(p, a);
        }
        let s = c.score();
        assert_eq!((s.tp, s.fn_, s.tn, s.fp, s.n), (2, 1, 1, 1, 5));
        assert_eq!(s.tpr, Some(2.0 / 3.0));
        assert_eq!(s.tnr, Some(0.5));
        assert_eq!(s.balanced_accuracy, Some((2.0 / 3.0 + 0.5) / 2.0));
        let mut neg = Confusion::default();
        neg.add(false, false);
        assert_eq!(neg.score().balanced_accuracy, Some(1.0));
        assert_eq!(Confusion::default().score().balanced_accuracy, None);
    }
}
