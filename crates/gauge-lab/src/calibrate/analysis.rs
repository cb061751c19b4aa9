//! From raw lines to the cache of evaluations, the search state and the summary. Everything is a
//! pure function of the lines (sorted by dial, value and prompt), so a resumed run summarises
//! exactly like an uninterrupted one.

use super::bisect::{find_match, MatchResult, Search, Step, Verdict};
use super::closed_form::{LoopToken, Population, Requirement, StaticRequirement};
use super::config::{value_key, CalibConfig, CalibLine, Dial};
use super::metrics::{Metric, Metrics};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The complete evaluations of a run: (dial, value key) → the lines of every prompt.
#[derive(Debug, Default)]
pub struct Cache<'a> {
    evals: BTreeMap<(Dial, usize), Vec<&'a CalibLine>>,
}

impl<'a> Cache<'a> {
    /// Index the lines of complete units (the run log keeps only those).
    pub fn new(lines: &'a [CalibLine]) -> Self {
        let mut evals: BTreeMap<(Dial, usize), Vec<&CalibLine>> = BTreeMap::new();
        for l in lines {
            evals
                .entry((l.dial, value_key(l.value)))
                .or_default()
                .push(l);
        }
        for v in evals.values_mut() {
            v.sort_by_key(|l| l.prompt_idx);
        }
        Cache { evals }
    }

    /// The lines of one evaluation, by prompt.
    pub fn lines(&self, dial: Dial, value: f64) -> Option<&[&'a CalibLine]> {
        self.evals.get(&(dial, value_key(value))).map(Vec::as_slice)
    }

    /// The metrics averaged over prompts. Presence α = 0 is the unpenalized run (ctrl θ = 1): the
    /// same operator, decoded once.
    pub fn metrics(&self, dial: Dial, value: f64) -> Option<Metrics> {
        if dial == Dial::Presence && value == 0.0 {
            return self.metrics(Dial::Ctrl, 1.0);
        }
        let lines = self.lines(dial, value)?;
        let per: Vec<Metrics> = lines
            .iter()
            .map(|l| Metrics::of(&l.prompt, &l.tokens))
            .collect();
        Metrics::mean(&per)
    }

    /// Every evaluation of one dial, by value.
    pub fn curve(&self, dial: Dial) -> Vec<(f64, Metrics)> {
        self.evals
            .iter()
            .filter(|((d, _), _)| *d == dial)
            .filter_map(|(_, ls)| {
                let v = ls.first()?.value;
                Some((v, self.metrics(dial, v)?))
            })
            .collect()
    }
}

/// The searches of a configuration.
pub(crate) fn theta_search(cfg: &CalibConfig) -> Search {
    Search {
        lo: 1.0,
        hi: cfg.theta_max,
        max_iters: cfg.max_iters,
    }
}

pub(crate) fn presence_search(cfg: &CalibConfig) -> Search {
    Search {
        lo: 0.0,
        hi: cfg.alpha_max,
        max_iters: cfg.max_iters,
    }
}

/// Where every search stands: its result, or what it needs next.
pub(crate) struct SearchState {
    /// `[anchor][metric]` of the normalized θ′ search.
    pub theta: Vec<Vec<Step>>,
    /// `[anchor]`: the presence search, for anchors UNREACHABLE on rep_rate.
    pub presence: Vec<Option<Step>>,
}

impl SearchState {
    /// Replay every search over `cache`; `None` while the raw grid is incomplete.
    pub fn replay(cfg: &CalibConfig, cache: &Cache<'_>) -> Option<SearchState> {
        let anchors = cfg.anchor_values();
        let targets: Vec<Metrics> = anchors
            .iter()
            .map(|&a| cache.metrics(Dial::Ctrl, a))
            .collect::<Option<_>>()?;
        cache.metrics(Dial::Ctrl, 1.0)?;
        let norm = |v| cache.metrics(Dial::Normalized, v);
        let pres = |v| cache.metrics(Dial::Presence, v);
        let mut theta = Vec::new();
        let mut presence = Vec::new();
        for t in &targets {
            let steps: Vec<Step> = cfg
                .metrics
                .iter()
                .map(|&m| {
                    find_match(m, t.get(m), theta_search(cfg), |v| {
                        norm(v).map(|x| x.get(m))
                    })
                })
                .collect();
            let unreachable = cfg.metrics.iter().zip(&steps).any(|(&m, s)| {
                m == Metric::RepRate
                    && matches!(s, Step::Done(r) if r.verdict == Verdict::Unreachable)
            });
            presence.push((cfg.presence && unreachable).then(|| {
                find_match(Metric::RepRate, t.rep_rate, presence_search(cfg), |v| {
                    pres(v).map(|x| x.rep_rate)
                })
            }));
            theta.push(steps);
        }
        Some(SearchState { theta, presence })
    }
}

/// The evaluations the next round must decode: the raw grid and both θ′ ends while the grid is
/// incomplete, then whatever each search needs next. Empty when every search is done.
pub(crate) fn next_round(cfg: &CalibConfig, cache: &Cache<'_>) -> Vec<(Dial, f64)> {
    // Keyed like the cache, so a value two searches need is decoded once.
    let mut need: BTreeMap<(Dial, usize), f64> = BTreeMap::new();
    let mut add = |d: Dial, v: f64| {
        if cache.metrics(d, v).is_none() {
            need.insert((d, value_key(v)), v);
        }
    };
    match SearchState::replay(cfg, cache) {
        None => {
            add(Dial::Ctrl, 1.0);
            for a in cfg.anchor_values() {
                add(Dial::Ctrl, a);
            }
            add(Dial::Normalized, 1.0);
            add(Dial::Normalized, cfg.theta_max);
        }
        Some(state) => {
            for s in state.theta.iter().flatten() {
                if let Step::Need(v) = s {
                    add(Dial::Normalized, *v);
                }
            }
            for s in state.presence.iter().flatten() {
                if let Step::Need(v) = s {
                    add(Dial::Presence, *v);
                }
            }
        }
    }
    need.into_iter().map(|((d, _), v)| (d, v)).collect()
}

/// One evaluated dial value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub value: f64,
    #[serde(flatten)]
    pub metrics: Metrics,
}

/// The closed-form requirement of one anchor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnchorClosedForm {
    /// Normalized θ′ against the best non-argmax token (the note's).
    pub theta_required: StaticRequirement,
    /// Normalized θ′ against the best unseen token (the note's exact variant).
    pub theta_required_unseen: StaticRequirement,
    /// Presence α against the best unseen token.
    pub presence_required: StaticRequirement,
}

/// Everything found for one anchor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnchorResult {
    /// The raw θ.
    pub theta: f64,
    /// The raw metrics at θ (the targets).
    pub raw: Metrics,
    /// The raw anchor suppresses more than θ = 1 on rep_rate.
    pub raw_suppresses: bool,
    /// One normalized θ′ search per configured metric (rep_rate first).
    pub matches: Vec<MatchResult>,
    /// All three metrics at the θ′ matched on rep_rate (`null` when UNREACHABLE).
    pub at_matched: Option<Metrics>,
    pub closed_form: AnchorClosedForm,
    /// The presence α search (anchors UNREACHABLE on rep_rate, with `presence` on).
    pub presence: Option<MatchResult>,
    /// What to set instead of θ, in words.
    pub advice: String,
}

/// The loop tokens of the unpenalized run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopStats {
    pub n_gen_tokens: usize,
    pub n_loop_tokens: usize,
    /// = rep_rate of the θ = 1 run, pooled over prompts.
    pub loop_frac: f64,
    /// Mean p of the greedy token on loop tokens.
    pub p_top_loop_mean: Option<f64>,
    pub theta_required: Requirement,
    pub theta_required_unseen: Requirement,
    pub presence_required: Requirement,
}

/// The no-op control: raw θ = 1 and normalized θ′ = 1 decode the same tokens on every prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Controls {
    pub noop_ctrl1_eq_normalized1: bool,
    /// Prompts where they differ.
    pub differing_prompts: Vec<usize>,
}

/// Result of `gauge calibrate`: exactly what `--json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibSummary {
    pub model: String,
    pub prompts: usize,
    pub tokens: usize,
    pub theta_max: f64,
    pub alpha_max: f64,
    pub controls: Controls,
    /// Raw (ctrl) metrics at θ = 1 and at each anchor.
    pub raw_grid: Vec<CurvePoint>,
    pub anchors: Vec<AnchorResult>,
    /// Every normalized θ′ evaluated (the bisection cache).
    pub normalized_curve: Vec<CurvePoint>,
    /// Every presence α evaluated.
    pub presence_curve: Vec<CurvePoint>,
    pub loops: LoopStats,
    /// Full 16-prompt sweeps decoded.
    pub sweeps: usize,
    pub forward_tokens: u64,
    pub naive_forward_tokens: u64,
}

fn points(curve: Vec<(f64, Metrics)>) -> Vec<CurvePoint> {
    curve
        .into_iter()
        .map(|(value, metrics)| CurvePoint { value, metrics })
        .collect()
}

/// Summarise a finished run (`None` if a search is unfinished).
pub fn analyze(cfg: &CalibConfig, lines: &[CalibLine]) -> Option<CalibSummary> {
    let cache = Cache::new(lines);
    let state = SearchState::replay(cfg, &cache)?;
    let done = |s: &Step| match s {
        Step::Done(r) => Some(r.clone()),
        Step::Need(_) => None,
    };

    // Controls.
    let base = cache.lines(Dial::Ctrl, 1.0)?;
    let norm1 = cache.lines(Dial::Normalized, 1.0)?;
    let differing: Vec<usize> = base
        .iter()
        .zip(norm1)
        .filter(|(a, b)| a.tokens != b.tokens)
        .map(|(a, _)| a.prompt_idx)
        .collect();

    // Loop tokens of the unpenalized run.
    let loops: Vec<LoopToken> = base
        .iter()
        .flat_map(|l| l.loops.iter().flatten().copied())
        .collect();
    let n_gen: usize = base.iter().map(|l| l.tokens.len()).sum();
    let loop_frac = loops.len() as f64 / n_gen.max(1) as f64;
    let pop_theta = Population::of(&loops, LoopToken::theta_required);
    let pop_unseen = Population::of(&loops, LoopToken::theta_required_unseen);
    let pop_alpha = Population::of(&loops, LoopToken::presence_required);
    let loop_stats = LoopStats {
        n_gen_tokens: n_gen,
        n_loop_tokens: loops.len(),
        loop_frac,
        p_top_loop_mean: (!loops.is_empty())
            .then(|| loops.iter().map(|l| l.ln_p_top.exp()).sum::<f64>() / loops.len() as f64),
        theta_required: pop_theta.describe(cfg.theta_max),
        theta_required_unseen: pop_unseen.describe(cfg.theta_max),
        presence_required: pop_alpha.describe(cfg.alpha_max),
    };

    let baseline = cache.metrics(Dial::Ctrl, 1.0)?;
    let mut anchors = Vec::new();
    for ((a, steps), pres) in cfg
        .anchor_values()
        .into_iter()
        .zip(&state.theta)
        .zip(&state.presence)
    {
        let raw = cache.metrics(Dial::Ctrl, a)?;
        let matches: Vec<MatchResult> = steps.iter().map(done).collect::<Option<_>>()?;
        let presence = match pres {
            Some(s) => Some(done(s)?),
            None => None,
        };
        let primary = &matches[0];
        let at_matched = primary
            .value
            .and_then(|v| cache.metrics(Dial::Normalized, v));
        let closed_form = AnchorClosedForm {
            theta_required: pop_theta.for_target(loop_frac, raw.rep_rate, 1.0),
            theta_required_unseen: pop_unseen.for_target(loop_frac, raw.rep_rate, 1.0),
            presence_required: pop_alpha.for_target(loop_frac, raw.rep_rate, 0.0),
        };
        let advice = advice(cfg, primary, presence.as_ref(), &closed_form);
        anchors.push(AnchorResult {
            theta: a,
            raw,
            raw_suppresses: raw.rep_rate < baseline.rep_rate,
            matches,
            at_matched,
            closed_form,
            presence,
            advice,
        });
    }

    let mut raw_grid = points(cache.curve(Dial::Ctrl));
    raw_grid.sort_by(|a, b| a.value.total_cmp(&b.value));
    let sweeps = cache.evals.len();
    Some(CalibSummary {
        model: cfg.model.clone(),
        prompts: cfg.prompts,
        tokens: cfg.tokens,
        theta_max: cfg.theta_max,
        alpha_max: cfg.alpha_max,
        controls: Controls {
            noop_ctrl1_eq_normalized1: differing.is_empty(),
            differing_prompts: differing,
        },
        raw_grid,
        anchors,
        normalized_curve: points(cache.curve(Dial::Normalized)),
        presence_curve: points(cache.curve(Dial::Presence)),
        loops: loop_stats,
        sweeps,
        forward_tokens: lines.iter().map(|l| l.forward_tokens).sum(),
        naive_forward_tokens: lines.iter().map(|l| l.naive_forward_tokens).sum(),
    })
}

/// What to set instead of the anchor θ, from the rep_rate match and the presence search.
fn advice(
    cfg: &CalibConfig,
    primary: &MatchResult,
    presence: Option<&MatchResult>,
    cf: &AnchorClosedForm,
) -> String {
    match primary.verdict {
        Verdict::Matched => format!(
            "repeat_penalty_mode=normalized, repeat_penalty={:.3}{}",
            primary.value.unwrap_or(f64::NAN),
            if primary.converged {
                ""
            } else {
                " (bisection budget exhausted: upper bracket)"
            }
        ),
        Verdict::Trivial => {
            "no penalty needed: normalized θ′ = 1 already repeats no more than this θ".to_string()
        }
        Verdict::Unreachable => {
            let head = format!(
                "no normalized θ′ ≤ {} reaches it (rep_rate {:.4} vs {:.4}); use a subtractive penalty",
                cfg.theta_max,
                primary.achieved,
                primary.target
            );
            match presence {
                Some(p) if p.verdict == Verdict::Matched => format!(
                    "{head}: presence_penalty={:.3} (measured: rep_rate {:.4}{})",
                    p.value.unwrap_or(f64::NAN),
                    p.achieved,
                    if p.converged {
                        ""
                    } else {
                        ", budget exhausted"
                    }
                ),
                Some(p) if p.verdict == Verdict::Trivial => {
                    format!("{head}: even presence_penalty=0 matches (non-monotone metric)")
                }
                Some(p) => format!(
                    "{head}, stronger than presence_penalty={} (rep_rate {:.4} there)",
                    cfg.alpha_max, p.achieved
                ),
                None => match cf.presence_required.value {
                    Some(a) => format!(
                        "{head}: presence_penalty≈{a:.2} (closed form, static, not measured)"
                    ),
                    None => format!("{head} (presence_penalty and frequency_penalty)"),
                },
            }
        }
    }
}
