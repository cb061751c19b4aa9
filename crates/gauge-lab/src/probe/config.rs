//! The probe's configuration (every flag of `gauge probe`) and the plan of runs it implies.

use crate::error::LabError;
use crate::ops::Op;
use crate::run::spec::{
    check_alpha, check_count, check_model, check_ops, check_thetas, Chunking, Grid, ThetaFloor,
    MAX_TOKENS,
};
use crate::run::RunSpec;
use crate::stack::{check_engine, EngineInfo, Stack};
use serde::{Deserialize, Serialize};

/// Bumped whenever a change would make old raw results incomparable: part of the run id, so an old
/// run directory is never resumed by new code.
pub const PROBE_FORMAT: u32 = 1;

/// Every knob of the gauge probe. `Default` is the quick grid `gauge probe` runs with no flags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    /// Model label for reports and the run id; should identify the weights (name or file stem).
    pub model: String,
    /// The first N of the 200 prefixes.
    pub prefixes: usize,
    /// Greedy tokens per run (the note: 200).
    pub tokens: usize,
    /// θ grid; must contain 1.0, the validity gate.
    pub thetas: Vec<f32>,
    /// Operators to measure.
    pub ops: Vec<Op>,
    /// Gauge shift magnitude c: runs use +c and −c.
    pub shift: f32,
    /// α of the subtractive operator.
    pub alpha: f32,
    /// `None`: the note's seen set (prompt + all generated, no window). `Some(n)`: llama.cpp-style
    /// window over the last n tokens of the history.
    pub window: Option<usize>,
    /// The prompt is part of the seen set (the protocol). `false`: generated tokens only, the
    /// scope of candle's example (`--engine candle --seen engine`). Left out of the JSON when
    /// true (run ids as before).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub seen_prompt: bool,
    /// θ of the own-median zero-point flip (the note: 1.3).
    pub zero_point_theta: f32,
    /// Bootstrap resamples for the CI (the note: 10⁴).
    pub bootstrap_resamples: usize,
    /// Seed of the bootstrap (`random.Random(seed)`, the note: 0).
    pub bootstrap_seed: u64,
    /// Prefixes decoded together in one batch. Part of the experiment definition because batch
    /// composition can change a real model's numerics; resumption restarts at this granularity.
    pub batch_prefixes: usize,
    /// Who decides: gauge's operators (default; left out of the JSON so gauge runs keep their
    /// run ids) or llama.cpp's own chain (`--sampler llama-cpp`: ctrl and subtractive; normalized
    /// stays on gauge's operator).
    #[serde(default, skip_serializing_if = "Stack::is_gauge")]
    pub sampler: Stack,
    /// Device, dtype and versions of a Python engine's run (absent for gauge and llama-cpp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineInfo>,
    /// Measure the zero-point statistics (the c = 0 runs and the own-median phase). `false` only
    /// for an engine without raw logits (a server over HTTP, `--engine openai`): the plan leaves
    /// those runs out and the report says why. Left out of the JSON when true (run ids as before).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub zero_point: bool,
    /// The CPU features of the llama.cpp build that computed the logits (gauge and llama-cpp
    /// stacks: `gauge_engine::llama_cpp_cpu_features`). ggml's kernels follow the build (an AVX2
    /// and an AVX-512 Q4_1 dot product sum in another order), so another build starts another
    /// run instead of resuming this one. Absent where the logits are another engine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llama_cpp_cpu: Option<String>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            model: "SmolLM2-135M-Instruct.Q4_1".into(),
            prefixes: 20,
            tokens: 64,
            thetas: vec![1.0, 1.3],
            ops: Op::ALL.to_vec(),
            shift: 5.0,
            alpha: 1.0,
            window: None,
            seen_prompt: true,
            zero_point_theta: 1.3,
            bootstrap_resamples: 10_000,
            bootstrap_seed: 0,
            batch_prefixes: 10,
            sampler: Stack::Gauge,
            engine: None,
            zero_point: true,
            llama_cpp_cpu: None,
        }
    }
}

impl ProbeConfig {
    /// The note's full A1 grid: 200 prefixes × 200 tokens, θ ∈ {1, 1.1, 1.3, 1.5}, three ops.
    pub fn full_grid(model: &str) -> Self {
        ProbeConfig {
            model: model.into(),
            prefixes: 200,
            tokens: 200,
            thetas: vec![1.0, 1.1, 1.3, 1.5],
            ..ProbeConfig::default()
        }
    }

    /// Check every field; errors name the field and the allowed range.
    pub fn validate(&self) -> Result<(), LabError> {
        check_model(&self.model)?;
        check_count(
            "prefixes",
            self.prefixes,
            crate::prefixes::a1_prefixes().len(),
        )?;
        check_count("tokens", self.tokens, MAX_TOKENS)?;
        check_thetas(&self.thetas, ThetaFloor::Positive, true)?;
        check_ops(&self.ops)?;
        if !(self.shift.is_finite() && self.shift > 0.0) {
            return Err(LabError::config(
                "shift",
                self.shift,
                "a finite value > 0 (runs use +c and −c)",
            ));
        }
        check_alpha(self.alpha)?;
        if !(self.zero_point_theta.is_finite() && self.zero_point_theta > 0.0) {
            return Err(LabError::config(
                "zero_point_theta",
                self.zero_point_theta,
                "finite values > 0",
            ));
        }
        check_count("bootstrap_resamples", self.bootstrap_resamples, usize::MAX)?;
        check_count("batch_prefixes", self.batch_prefixes, usize::MAX)?;
        check_engine(self.sampler, self.engine.as_ref(), self.window)?;
        if !self.seen_prompt && self.sampler.is_python() {
            return Err(LabError::config(
                "seen_prompt",
                false,
                "true for the Python engines (their seen set is `--seen`, recorded in `engine.options`)",
            ));
        }
        if !self.zero_point && !self.sampler.is_python() {
            return Err(LabError::config(
                "zero_point",
                false,
                "true for the gauge and llama-cpp stacks (they see raw logits)",
            ));
        }
        Ok(())
    }

    /// Deterministic run id: model label + hash of the whole configuration, so the same command
    /// finds (and resumes) the same directory.
    pub fn run_id(&self) -> String {
        crate::run::resume::run_id("probe", PROBE_FORMAT, &self.model, self)
    }

    /// The runs decoded for every prefix in the first (shared-tree) phase, in a fixed order.
    pub fn flip_plan(&self) -> Vec<RunSpec<Role>> {
        let mut v = Vec::new();
        for &op in &self.ops {
            for &theta in &self.thetas {
                for c in [self.shift, -self.shift] {
                    v.push(RunSpec {
                        role: Role::Flip,
                        op,
                        theta,
                        c,
                        alpha: self.alpha,
                    });
                }
            }
        }
        if !self.zero_point {
            return v;
        }
        v.push(RunSpec {
            role: Role::ZeroPoint,
            op: Op::Ctrl,
            theta: 1.0,
            c: 0.0,
            alpha: self.alpha,
        });
        v.push(RunSpec {
            role: Role::ZpRef,
            op: Op::Ctrl,
            theta: self.zero_point_theta,
            c: 0.0,
            alpha: self.alpha,
        });
        v
    }

    /// The same grid on another stack: equal up to `sampler`, `engine` and `zero_point` (the
    /// flip runs, which the cross-stack table compares, are the same).
    pub fn same_grid(&self, other: &ProbeConfig) -> bool {
        let strip = |c: &ProbeConfig| ProbeConfig {
            sampler: Stack::Gauge,
            engine: None,
            zero_point: true,
            llama_cpp_cpu: None,
            ..c.clone()
        };
        strip(self) == strip(other)
    }

    /// The run of the second phase (own-median gauge), once the median top-1 logit is known.
    pub fn natural_spec(&self, c_nat: f32) -> RunSpec<Role> {
        RunSpec {
            role: Role::ZpNatural,
            op: Op::Ctrl,
            theta: self.zero_point_theta,
            c: c_nat,
            alpha: self.alpha,
        }
    }
}

impl Grid for ProbeConfig {
    fn chunking(&self) -> Chunking {
        Chunking {
            prompts: self.prefixes,
            batch: self.batch_prefixes,
            runs_per_prompt: self.flip_plan().len(),
        }
    }
    fn set_batch(&mut self, batch: usize) {
        self.batch_prefixes = batch;
    }
}

/// What a probe run is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// One side (±c) of a flip-rate condition.
    Flip,
    /// c = 0, θ = 1: the zero-point statistics (Table 1).
    ZeroPoint,
    /// c = 0 at the zero-point θ: reference of the own-median flip.
    ZpRef,
    /// c = −median top-1 at the zero-point θ: the own-median gauge.
    ZpNatural,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_the_quick_grid_and_valid() {
        let c = ProbeConfig::default();
        c.validate().unwrap();
        assert_eq!((c.prefixes, c.tokens), (20, 64));
        assert_eq!(c.thetas, vec![1.0, 1.3]);
        assert_eq!(c.ops, Op::ALL.to_vec());
        ProbeConfig::full_grid("m").validate().unwrap();
    }

    #[test]
    fn run_id_is_deterministic_and_config_sensitive() {
        let a = ProbeConfig::default();
        assert_eq!(a.run_id(), ProbeConfig::default().run_id());
        let b = ProbeConfig {
            tokens: 65,
            ..a.clone()
        };
        assert_ne!(a.run_id(), b.run_id());
        assert!(a.run_id().starts_with("probe-SmolLM2-135M-Instruct.Q4_1-"));
        let odd = ProbeConfig {
            model: "a/b c".into(),
            ..a
        };
        assert!(odd.run_id().starts_with("probe-a_b_c-"));
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |c: ProbeConfig, field: &str| match c.validate() {
            Err(LabError::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        };
        let d = ProbeConfig::default;
        bad(
            ProbeConfig {
                thetas: vec![1.3],
                ..d()
            },
            "theta",
        );
        bad(
            ProbeConfig {
                thetas: vec![1.0, f32::NAN],
                ..d()
            },
            "theta",
        );
        bad(
            ProbeConfig {
                thetas: vec![1.0, 1.0],
                ..d()
            },
            "theta",
        );
        bad(ProbeConfig { prefixes: 0, ..d() }, "prefixes");
        bad(
            ProbeConfig {
                prefixes: 201,
                ..d()
            },
            "prefixes",
        );
        bad(ProbeConfig { tokens: 0, ..d() }, "tokens");
        bad(ProbeConfig { shift: 0.0, ..d() }, "shift");
        bad(ProbeConfig { alpha: -1.0, ..d() }, "alpha");
        bad(ProbeConfig { ops: vec![], ..d() }, "ops");
        bad(
            ProbeConfig {
                ops: vec![Op::Ctrl, Op::Ctrl],
                ..d()
            },
            "ops",
        );
        bad(
            ProbeConfig {
                batch_prefixes: 0,
                ..d()
            },
            "batch_prefixes",
        );
        bad(
            ProbeConfig {
                model: " ".into(),
                ..d()
            },
            "model",
        );
    }

    #[test]
    fn the_gauge_stack_keeps_the_run_id_it_had_before_the_sampler_field() {
        let c = ProbeConfig::default();
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("sampler"), "{json}");
        let back: ProbeConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        let l = ProbeConfig {
            sampler: Stack::LlamaCpp,
            ops: vec![Op::Ctrl, Op::Subtractive],
            ..c.clone()
        };
        l.validate().unwrap();
        assert!(serde_json::to_string(&l)
            .unwrap()
            .contains("\"sampler\":\"llama-cpp\""));
        assert_ne!(l.run_id(), c.run_id());
    }

    #[test]
    fn fit_batch_bounds_the_live_sequences() {
        let mut c = ProbeConfig::full_grid("m");
        c.batch_prefixes = 50;
        c.fit_batch(256);
        assert_eq!(c.batch_prefixes, 256 / 26);
        assert!(c.max_sequences_per_chunk() <= 256);
        c.fit_batch(3);
        assert_eq!(c.batch_prefixes, 1);
    }

    #[test]
    fn plan_has_both_signs_per_condition_plus_zero_point_runs() {
        let c = ProbeConfig::default();
        let p = c.flip_plan();
        assert_eq!(p.len(), 3 * 2 * 2 + 2);
        assert_eq!(p[0].c, 5.0);
        assert_eq!(p[1].c, -5.0);
        assert_eq!(p[12].role, Role::ZeroPoint);
        assert_eq!((p[13].role, p[13].theta, p[13].c), (Role::ZpRef, 1.3, 0.0));
    }
}
