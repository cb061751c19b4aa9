//! A2's configuration (every flag of `gauge json`) and its run id.

use super::schema::a2_schemas;
use crate::error::LabError;
use crate::ops::Op;
use crate::run::spec::{
    check_alpha, check_count, check_model, check_ops, check_thetas, Chunking, Grid, ThetaFloor,
    MAX_TOKENS,
};
use crate::run::{op_theta_plan, RunSpec};
use crate::stack::{check_engine, EngineInfo, Stack};
use serde::{Deserialize, Serialize};

/// Bumped when a change makes old A2 results incomparable (part of the run id).
pub const JSON_FORMAT: u32 = 1;

/// Every knob of `gauge json`; `Default` is the note's grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonConfig {
    /// Model label for reports and the run id.
    pub model: String,
    /// The first N of the 200 schemas.
    pub schemas: usize,
    /// θ grid.
    pub thetas: Vec<f32>,
    /// Operators (the note: ctrl = "raw", normalized = "fix").
    pub ops: Vec<Op>,
    /// α when `subtractive` is among the ops.
    pub alpha: f32,
    /// Most generated tokens per output.
    pub max_tokens: usize,
    /// The prompt went through the model's chat template (set by the caller, who applies it);
    /// part of the run id, left out when false so plain-prompt runs keep theirs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chat_template: bool,
    /// `None`: prompt + all generated tokens are seen (the note's HF harness); `Some(n)`:
    /// llama.cpp-style window.
    pub window: Option<usize>,
    /// Schemas decoded together (the resumption unit).
    pub batch_schemas: usize,
    /// Who decides: gauge's operators (default, left out of the JSON so run ids stay) or
    /// llama.cpp's `penalties → greedy` chain (the note's A2 llama.cpp driver; normalized stays on
    /// gauge's operator).
    #[serde(default, skip_serializing_if = "Stack::is_gauge")]
    pub sampler: Stack,
    /// Decode under the schema as a grammar (issue 14): every run's row is masked to the tokens
    /// the schema allows before its operator, runs stop at end-of-generation only (the grammar
    /// decides the end; no stop strings) and the whole output is parsed. Left out of the JSON
    /// when false, so unconstrained run ids stay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub constrained: bool,
    /// Device, dtype and versions of an hf / vllm run (absent for gauge and llama-cpp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineInfo>,
}

impl Default for JsonConfig {
    fn default() -> Self {
        JsonConfig {
            model: "SmolLM2-135M-Instruct.Q4_1".into(),
            schemas: 200,
            thetas: vec![1.0, 1.1, 1.3],
            ops: vec![Op::Ctrl, Op::Normalized],
            alpha: 1.0,
            max_tokens: 512,
            chat_template: false,
            window: None,
            batch_schemas: 4,
            sampler: Stack::Gauge,
            constrained: false,
            engine: None,
        }
    }
}

impl JsonConfig {
    /// Check every field.
    pub fn validate(&self) -> Result<(), LabError> {
        check_model(&self.model)?;
        check_count("schemas", self.schemas, a2_schemas().len())?;
        check_thetas(&self.thetas, ThetaFloor::Positive, false)?;
        check_ops(&self.ops)?;
        check_alpha(self.alpha)?;
        check_count("max_tokens", self.max_tokens, MAX_TOKENS)?;
        check_count("batch_schemas", self.batch_schemas, usize::MAX)?;
        if self.constrained && !self.sampler.is_gauge() {
            return Err(LabError::Config {
                field: "constrained".into(),
                value: "true".into(),
                allowed: format!(
                    "false with the {} stack (the grammar runs in gauge's decode only)",
                    self.sampler
                ),
            });
        }
        check_engine(self.sampler, self.engine.as_ref(), self.window)?;
        Ok(())
    }

    /// Deterministic run id (model label + hash of the configuration).
    pub fn run_id(&self) -> String {
        crate::run::resume::run_id("json", JSON_FORMAT, &self.model, self)
    }

    /// The runs decoded for every schema.
    pub fn plan(&self) -> Vec<RunSpec> {
        op_theta_plan(&self.ops, &self.thetas, self.alpha)
    }
}

impl Grid for JsonConfig {
    fn chunking(&self) -> Chunking {
        Chunking {
            prompts: self.schemas,
            batch: self.batch_schemas,
            runs_per_prompt: self.plan().len(),
        }
    }
    fn set_batch(&mut self, batch: usize) {
        self.batch_schemas = batch;
    }
}
