//! The loop-check metrics the calibration matches on (docs/PROTOCOL.md §6, the note's `degen`), and
//! which direction of each counts as "more suppression".

use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// A repetition metric of one generated stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Share of generated tokens already in prompt ∪ earlier generated tokens (the primary metric).
    RepRate,
    /// Distinct generated bigrams / (length − 1).
    Distinct2,
    /// The longest run of one identical token (at least 1).
    LongestRun,
}

impl Metric {
    /// The three metrics, the primary first.
    pub const ALL: [Metric; 3] = [Metric::RepRate, Metric::Distinct2, Metric::LongestRun];

    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Metric::RepRate => "rep_rate",
            Metric::Distinct2 => "distinct2",
            Metric::LongestRun => "longest_run",
        }
    }

    /// Parse a command-line name (`distinct-2` and `longest-run` are accepted too).
    pub fn parse(s: &str) -> Option<Metric> {
        match s.trim().replace('-', "_").as_str() {
            "rep_rate" => Some(Metric::RepRate),
            "distinct2" | "distinct_2" => Some(Metric::Distinct2),
            "longest_run" => Some(Metric::LongestRun),
            _ => None,
        }
    }

    /// `suppression = sign · metric` grows with the penalty: lower rep_rate and longest_run are
    /// more suppression, higher distinct-2 is.
    pub fn sign(self) -> f64 {
        match self {
            Metric::RepRate | Metric::LongestRun => -1.0,
            Metric::Distinct2 => 1.0,
        }
    }

    /// The note's frozen bisection tolerance for this metric.
    pub fn tolerance(self) -> f64 {
        match self {
            Metric::RepRate | Metric::Distinct2 => 0.01,
            Metric::LongestRun => 0.25,
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The three metrics of one stream, or their mean over prompts.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Metrics {
    pub rep_rate: f64,
    pub distinct2: f64,
    pub longest_run: f64,
}

impl Metrics {
    /// The metrics of one generated stream after `prompt` (the note's `degen`: an empty stream has
    /// rep_rate 0, distinct-2 0 and longest run 1).
    pub fn of(prompt: &[TokenId], generated: &[TokenId]) -> Metrics {
        Metrics {
            rep_rate: rep_rate(prompt, generated),
            distinct2: distinct2(generated),
            longest_run: longest_run(generated) as f64,
        }
    }

    /// One metric's value.
    pub fn get(&self, m: Metric) -> f64 {
        match m {
            Metric::RepRate => self.rep_rate,
            Metric::Distinct2 => self.distinct2,
            Metric::LongestRun => self.longest_run,
        }
    }

    /// The mean over prompts, summed in order as Python's `sum` does (`None` for no prompts).
    pub fn mean<'a>(per_prompt: impl IntoIterator<Item = &'a Metrics>) -> Option<Metrics> {
        let (mut a, mut n) = (Metrics::default(), 0usize);
        for m in per_prompt {
            a.rep_rate += m.rep_rate;
            a.distinct2 += m.distinct2;
            a.longest_run += m.longest_run;
            n += 1;
        }
        (n > 0).then(|| Metrics {
            rep_rate: a.rep_rate / n as f64,
            distinct2: a.distinct2 / n as f64,
            longest_run: a.longest_run / n as f64,
        })
    }
}

/// Share of generated tokens already in prompt ∪ earlier generated tokens (0 for no tokens).
pub fn rep_rate(prompt: &[TokenId], generated: &[TokenId]) -> f64 {
    crate::stats::repeats(prompt, generated) as f64 / generated.len().max(1) as f64
}

/// Distinct generated bigrams / number of bigrams (0 with fewer than two tokens).
pub fn distinct2(generated: &[TokenId]) -> f64 {
    let bigrams: HashSet<(TokenId, TokenId)> = generated.windows(2).map(|w| (w[0], w[1])).collect();
    bigrams.len() as f64 / generated.len().saturating_sub(1).max(1) as f64
}

/// The longest run of one identical token; 1 for streams shorter than two (the note's floor).
pub fn longest_run(generated: &[TokenId]) -> usize {
    let (mut best, mut run) = (1usize, 1usize);
    for w in generated.windows(2) {
        run = if w[0] == w[1] { run + 1 } else { 1 };
        best = best.max(run);
    }
    best
}
