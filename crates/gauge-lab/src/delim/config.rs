//! The analysis's configuration (every flag of `gauge delim`), its run id, and its raw line.

use super::facts::Positions;
use super::humaneval;
use crate::error::LabError;
use crate::ops::Op;
use crate::run::resume::ChunkLine;
use crate::run::spec::{
    check_alpha, check_count, check_model, check_ops, check_thetas, Chunking, Grid, ThetaFloor,
    MAX_TOKENS,
};
use crate::run::{op_theta_plan, RunSpec};
use serde::{Deserialize, Serialize};

/// Bumped when a change makes old results incomparable (part of the run id).
pub const DELIM_FORMAT: u32 = 1;

/// Every knob of `gauge delim`. `Default` is the quick grid; [`DelimConfig::full_grid`] the note's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelimConfig {
    /// Model label for reports and the run id.
    pub model: String,
    /// The first N HumanEval problems.
    pub prompts: usize,
    /// Greedy tokens per decode (the note: 256).
    pub tokens: usize,
    /// θ grid: must contain 1.0 (the gate); every θ ≥ 1 (the predictors are for penalties).
    pub thetas: Vec<f32>,
    /// Operators (the note: ctrl = "raw", and normalized = "fix" for StarCoder2).
    pub ops: Vec<Op>,
    /// α when `subtractive` is among the ops.
    pub alpha: f32,
    /// `None`: prompt + all generated tokens are seen (the note); `Some(n)`: llama.cpp window.
    pub window: Option<usize>,
    /// Resamples of the confidence-contrast bootstrap (the note: 10⁴).
    pub bootstrap_resamples: usize,
    /// Its seed (`random.Random(0)`).
    pub bootstrap_seed: u64,
    /// Prompts decoded together (the resumption unit).
    pub batch_prompts: usize,
}

impl Default for DelimConfig {
    fn default() -> Self {
        DelimConfig {
            model: "smollm2-135m-instruct".into(),
            prompts: 40,
            tokens: 256,
            thetas: vec![1.0, 1.1, 1.3, 1.5],
            ops: vec![Op::Ctrl, Op::Normalized],
            alpha: 1.0,
            window: None,
            bootstrap_resamples: 10_000,
            bootstrap_seed: 0,
            batch_prompts: 4,
        }
    }
}

impl DelimConfig {
    /// The note's grid: 164 prompts × 256 tokens × θ ∈ {1, 1.1, 1.2, 1.3, 1.4, 1.5}.
    pub fn full_grid(model: &str) -> Self {
        DelimConfig {
            model: model.into(),
            prompts: humaneval::HUMANEVAL_PROBLEMS,
            thetas: vec![1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
            ..DelimConfig::default()
        }
    }

    /// Check every field.
    pub fn validate(&self) -> Result<(), LabError> {
        check_model(&self.model)?;
        check_count("prompts", self.prompts, usize::MAX)?;
        check_count("tokens", self.tokens, MAX_TOKENS)?;
        check_thetas(&self.thetas, ThetaFloor::One, true)?;
        if self.thetas.len() < 2 {
            return Err(LabError::config(
                "theta",
                format!("{:?}", self.thetas),
                "1.0 (the gate: no flips with the penalty off) and at least one θ > 1",
            ));
        }
        check_ops(&self.ops)?;
        check_alpha(self.alpha)?;
        check_count("bootstrap_resamples", self.bootstrap_resamples, usize::MAX)?;
        check_count("batch_prompts", self.batch_prompts, usize::MAX)?;
        Ok(())
    }

    /// Deterministic run id (model label + hash of the configuration).
    pub fn run_id(&self) -> String {
        crate::run::resume::run_id("delim", DELIM_FORMAT, &self.model, self)
    }

    /// The decodes of every prompt, op-major.
    pub fn plan(&self) -> Vec<RunSpec> {
        op_theta_plan(&self.ops, &self.thetas, self.alpha)
    }

    /// The θ values pooled by the analysis (every θ ≠ 1), in grid order.
    pub fn pooled_thetas(&self) -> Vec<f32> {
        self.thetas.iter().copied().filter(|&t| t != 1.0).collect()
    }
}

impl Grid for DelimConfig {
    fn chunking(&self) -> Chunking {
        Chunking {
            prompts: self.prompts,
            batch: self.batch_prompts,
            runs_per_prompt: self.plan().len(),
        }
    }
    fn set_batch(&mut self, batch: usize) {
        self.batch_prompts = batch;
    }
}

/// One decode: the raw record of (prompt, op, θ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelimLine {
    pub chunk: usize,
    /// Problem index (the note's `prompt_idx`).
    pub prompt: usize,
    pub task_id: String,
    /// Index in the plan.
    pub run: usize,
    pub op: Op,
    pub theta: f32,
    pub prompt_tokens: usize,
    /// Per-position pre-penalty facts and the emitted tokens.
    pub positions: Positions,
    /// The top-1 is a delimiter (the note's set, with `'` and whitespace-only tokens).
    pub structural: Vec<bool>,
    /// The brackets-only re-slice of the same tag.
    pub bracket: Vec<bool>,
    /// Observed: emitted ≠ top-1 (derived from `positions`, kept for readers of the raw file).
    pub flip: Vec<bool>,
    /// The note's prediction `g < z_top(1 − 1/θ)` where its assumptions hold (clean positions),
    /// `null` elsewhere.
    pub note_predicted: Vec<Option<bool>>,
    /// gauge's two-sided prediction for this op (every position).
    pub gauge_predicted: Vec<bool>,
    /// The generated text (control tokens as nothing).
    pub gen_text: String,
    pub forward_tokens: u64,
    pub naive_forward_tokens: u64,
}

impl ChunkLine for DelimLine {
    fn unit(&self) -> (u8, usize) {
        (0, self.chunk)
    }
    fn key(&self) -> (u8, usize, usize) {
        (0, self.prompt, self.run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_full_grids_are_valid() {
        DelimConfig::default().validate().unwrap();
        let f = DelimConfig::full_grid("m");
        f.validate().unwrap();
        assert_eq!((f.prompts, f.tokens, f.thetas.len()), (164, 256, 6));
        assert_eq!(f.pooled_thetas(), vec![1.1, 1.2, 1.3, 1.4, 1.5]);
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |c: DelimConfig, field: &str| match c.validate() {
            Err(LabError::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        };
        let d = DelimConfig::default;
        bad(
            DelimConfig {
                thetas: vec![1.3],
                ..d()
            },
            "theta",
        );
        bad(
            DelimConfig {
                thetas: vec![1.0],
                ..d()
            },
            "theta",
        );
        bad(
            DelimConfig {
                thetas: vec![1.0, 0.9],
                ..d()
            },
            "theta",
        );
        bad(
            DelimConfig {
                thetas: vec![1.0, 1.3, 1.3],
                ..d()
            },
            "theta",
        );
        bad(DelimConfig { prompts: 0, ..d() }, "prompts");
        bad(DelimConfig { tokens: 0, ..d() }, "tokens");
        bad(DelimConfig { ops: vec![], ..d() }, "ops");
        bad(
            DelimConfig {
                batch_prompts: 0,
                ..d()
            },
            "batch_prompts",
        );
    }
}
