//! The calibration's configuration (every flag of `gauge calibrate`), its dials, and its raw lines.

use super::closed_form::LoopToken;
use super::metrics::Metric;
use crate::error::LabError;
use crate::ops::Op;
use crate::run::resume::ChunkLine;
use crate::run::spec::{check_count, check_model, check_thetas, ThetaFloor, MAX_TOKENS};
use crate::run::RunSpec;
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};

/// Bumped when a change makes old raw results incomparable (part of the run id).
pub const CALIB_FORMAT: u32 = 1;

/// Every knob of `gauge calibrate`; `Default` is the run on the default model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibConfig {
    /// Model label for reports and the run id.
    pub model: String,
    /// The raw (ctrl) anchors θ to find a normalized θ′ for; each > 1 (θ = 1 is the baseline,
    /// always decoded).
    pub anchors: Vec<f32>,
    /// The first N of the note's 16 fixed prompts.
    pub prompts: usize,
    /// Greedy tokens per prompt (the note: 256, no EOS stop).
    pub tokens: usize,
    /// Metrics matched independently; rep_rate (primary) must be among them. Every evaluation
    /// reports all three.
    pub metrics: Vec<Metric>,
    /// The θ′ search ceiling (the note: 10).
    pub theta_max: f64,
    /// Most bisection midpoints per (anchor, metric) (the note: 12).
    pub max_iters: usize,
    /// For anchors whose θ′ is UNREACHABLE on rep_rate, also search the presence penalty α
    /// (subtractive, shift-invariant) that matches them, on [0, `alpha_max`].
    pub presence: bool,
    /// Ceiling of the presence search, in logit units.
    pub alpha_max: f64,
    /// Most sequences decoded at once. Batch composition can change a real model's numerics, so
    /// it is part of the experiment's definition.
    pub max_sequences: usize,
}

impl Default for CalibConfig {
    fn default() -> Self {
        CalibConfig {
            model: "SmolLM2-135M-Instruct.Q4_1".into(),
            anchors: vec![1.05, 1.1, 1.3],
            prompts: 16,
            tokens: 256,
            metrics: vec![Metric::RepRate],
            theta_max: 10.0,
            max_iters: 12,
            presence: true,
            alpha_max: 10.0,
            max_sequences: 64,
        }
    }
}

impl CalibConfig {
    /// Check every field; errors name the field, the value and the allowed range.
    pub fn validate(&self) -> Result<(), LabError> {
        check_model(&self.model)?;
        check_thetas(&self.anchors, ThetaFloor::One, false)?;
        if let Some(&t) = self.anchors.iter().find(|&&t| t == 1.0) {
            return Err(LabError::config(
                "theta",
                t,
                "anchors > 1 (θ = 1 is the unpenalized baseline, always decoded)",
            ));
        }
        check_count(
            "prompts",
            self.prompts,
            super::prompts::fixed_prompts().len(),
        )?;
        check_count("tokens", self.tokens, MAX_TOKENS)?;
        if self.metrics.is_empty() || !self.metrics.contains(&Metric::RepRate) {
            let list: Vec<&str> = self.metrics.iter().map(|m| m.name()).collect();
            return Err(LabError::config(
                "metrics",
                format!("[{}]", list.join(",")),
                "rep_rate (the primary metric) plus any of distinct2, longest_run",
            ));
        }
        for (i, m) in self.metrics.iter().enumerate() {
            if self.metrics[..i].contains(m) {
                return Err(LabError::config("metrics", m, "distinct metrics"));
            }
        }
        if !(self.theta_max.is_finite() && self.theta_max > 1.0 && self.theta_max <= 1000.0) {
            return Err(LabError::config(
                "theta_max",
                self.theta_max,
                "a finite value in (1, 1000]",
            ));
        }
        check_count("max_iters", self.max_iters, 40)?;
        if !(self.alpha_max.is_finite() && self.alpha_max > 0.0 && self.alpha_max <= 1000.0) {
            return Err(LabError::config(
                "alpha_max",
                self.alpha_max,
                "a finite value in (0, 1000]",
            ));
        }
        check_count("max_sequences", self.max_sequences, 4096)?;
        Ok(())
    }

    /// Deterministic run id (model label + hash of the configuration).
    pub fn run_id(&self) -> String {
        crate::run::resume::run_id("calibrate", CALIB_FORMAT, &self.model, self)
    }

    /// The anchors as the decimals they were typed as (1.05, not 1.0499999523).
    pub fn anchor_values(&self) -> Vec<f64> {
        self.anchors
            .iter()
            .map(|&t| crate::stats::f32_to_decimal_f64(t))
            .collect()
    }
}

/// What a sweep turns: the raw penalty's θ, the normalized penalty's θ′ or the presence α.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dial {
    /// `repeat_penalty` θ on raw logits (the anchors and the θ = 1 baseline).
    Ctrl,
    /// `repeat_penalty_mode: normalized` θ′.
    Normalized,
    /// Presence penalty α (every seen logit − α).
    Presence,
}

/// The note's subtractive operator uses θ only as an on/off switch (θ = 1 is off); any other
/// value turns it on and α sets the strength.
const SUBTRACTIVE_ON: f32 = 2.0;

impl Dial {
    /// Phase byte of the resumption unit.
    pub fn code(self) -> u8 {
        match self {
            Dial::Ctrl => 0,
            Dial::Normalized => 1,
            Dial::Presence => 2,
        }
    }

    /// The run decoding this dial at `value` (dial values are exact in f32: anchors were typed
    /// as f32, midpoints are dyadic).
    pub fn spec(self, value: f64) -> RunSpec {
        let (op, theta, alpha) = match self {
            Dial::Ctrl => (Op::Ctrl, value as f32, 0.0),
            Dial::Normalized => (Op::Normalized, value as f32, 0.0),
            Dial::Presence => (Op::Subtractive, SUBTRACTIVE_ON, value as f32),
        };
        RunSpec {
            role: (),
            op,
            theta,
            c: 0.0,
            alpha,
        }
    }
}

impl std::fmt::Display for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dial::Ctrl => "ctrl θ",
            Dial::Normalized => "normalized θ′",
            Dial::Presence => "presence α",
        })
    }
}

/// The cache key of a dial value: the note's 9-decimal key, as an integer.
pub fn value_key(value: f64) -> usize {
    (value * 1e9).round() as usize
}

/// One prompt decoded at one dial value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibLine {
    pub dial: Dial,
    pub value: f64,
    /// Index among the 16 fixed prompts.
    pub prompt_idx: usize,
    /// Which search round decoded it (0: the raw grid and the θ′ ends).
    pub round: usize,
    /// Prompt token ids as tokenized for this model.
    pub prompt: Vec<TokenId>,
    /// Generated token ids.
    pub tokens: Vec<TokenId>,
    /// Tokens evaluated on sequences this run owned (shared work is charged once).
    pub forward_tokens: u64,
    /// What an unshared decode of this run alone would evaluate.
    pub naive_forward_tokens: u64,
    /// The unpenalized run (ctrl θ = 1) only: its loop tokens, for the closed form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loops: Option<Vec<LoopToken>>,
}

impl ChunkLine for CalibLine {
    fn unit(&self) -> (u8, usize) {
        (self.dial.code(), value_key(self.value))
    }
    fn key(&self) -> (u8, usize, usize) {
        (self.dial.code(), value_key(self.value), self.prompt_idx)
    }
}

/// A line must fit this configuration.
pub(crate) fn check_line(cfg: &CalibConfig, l: &CalibLine) -> Result<(), String> {
    if l.prompt_idx >= cfg.prompts {
        return Err(format!(
            "prompt {} outside 0..{}",
            l.prompt_idx, cfg.prompts
        ));
    }
    if l.tokens.len() != cfg.tokens {
        return Err(format!(
            "{} tokens, expected {}",
            l.tokens.len(),
            cfg.tokens
        ));
    }
    let (lo, hi) = match l.dial {
        Dial::Ctrl => (1.0, f64::from(f32::MAX)),
        Dial::Normalized => (1.0, cfg.theta_max),
        Dial::Presence => (0.0, cfg.alpha_max),
    };
    if !(l.value >= lo && l.value <= hi) {
        return Err(format!("{} = {} outside [{lo}, {hi}]", l.dial, l.value));
    }
    Ok(())
}
