//! A2 runs decoded outside this crate: the Python package's HF transformers and vLLM engines
//! (`python -m gauge_sampling json --engine hf|vllm`). Python is only the logit source, the
//! stack's own sampler and its tokenizer; the plan, the run directory (resumption), the lines
//! (stop reason, extraction, schema verdict), the summary, the report and the plot are the ones
//! `gauge json` uses ([`super::JsonLine::of_run`], [`super::finish_json`]).
//!
//! The caller opens the run with its prompt tokens, decodes each pending chunk with the plan,
//! hands back per output the tokens, the generated text and whether it ended with an
//! end-of-generation token ([`DecodedOutput`]), and finishes.

use super::schema::{a2_schemas, SchemaCheck};
use super::{finish_json, Decoded, DecodedAt, JsonConfig, JsonLine, JsonSummary, STOP_STRINGS};
use crate::error::LabError;
use crate::run::resume::{open_run, ChunkLog};
use crate::run::spec::{check_in_plan, order_chunk_runs};
use crate::run::{Grid, RunSpec};
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What the caller decoded for one run of one schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodedOutput {
    /// Schema index (0-based, manifest order).
    pub schema: usize,
    /// Index of the run in the plan.
    pub run: usize,
    /// Generated token ids, the end-of-generation token included when there is one.
    pub tokens: Vec<TokenId>,
    /// The generated text, decoded by the stack's tokenizer (control tokens as nothing).
    pub output: String,
    /// The last token is one of the stack's end-of-generation tokens.
    pub eog: bool,
    /// Tokens the model evaluated for this run (shared work charged once).
    pub forward_tokens: u64,
}

/// An open A2 run decoded by an external engine.
pub struct ExternalJson {
    cfg: JsonConfig,
    prompts: Vec<Vec<TokenId>>,
    dir: PathBuf,
    log: ChunkLog<JsonLine>,
}

impl std::fmt::Debug for ExternalJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalJson")
            .field("dir", &self.dir)
            .finish()
    }
}

impl ExternalJson {
    /// Open (or resume) `out_root/<run-id>/` for `cfg` with the prompt tokens of the first
    /// `cfg.schemas` schemas, built and tokenized by the engine's tokenizer.
    pub fn open(
        out_root: &Path,
        cfg: JsonConfig,
        prompts: Vec<Vec<TokenId>>,
        n_vocab: usize,
    ) -> Result<Self, LabError> {
        cfg.validate()?;
        crate::run::spec::check_external_inputs(
            cfg.sampler,
            "gauge json",
            &prompts,
            cfg.schemas,
            "schema",
            n_vocab,
        )?;
        let plan = cfg.plan();
        let chunking = cfg.chunking();
        let expected = |(_, chunk): (u8, usize)| chunking.chunk(chunk).len() * plan.len();
        let check = |l: &JsonLine| {
            check_in_plan(&plan, &chunking, (l.schema, l.chunk, l.run), l.op, l.theta)
        };
        let (dir, log) = open_run(out_root, &cfg.run_id(), &cfg, &expected, &check, |l| {
            l.prompt_tokens == prompts[l.schema].len()
        })?;
        Ok(ExternalJson {
            cfg,
            prompts,
            dir,
            log,
        })
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration.
    pub fn config(&self) -> &JsonConfig {
        &self.cfg
    }

    /// Chunks not yet complete.
    pub fn pending_chunks(&self) -> Vec<usize> {
        let done = self.log.done_units(0);
        (0..self.cfg.n_chunks())
            .filter(|k| !done.contains(k))
            .collect()
    }

    /// The runs decoded for every schema.
    pub fn plan(&self) -> Vec<RunSpec> {
        self.cfg.plan()
    }

    /// Append chunk `k` durably: one [`DecodedOutput`] per (schema of the chunk, run of the
    /// plan), in any order. Each is checked against `gauge json`'s stop rule: an output that
    /// neither ended with end-of-generation nor contains a stop string has exactly
    /// `max_tokens` tokens.
    pub fn append_chunk(&mut self, k: usize, runs: Vec<DecodedOutput>) -> Result<(), LabError> {
        let plan = self.plan();
        let written = self.log.done_units(0).contains(&k);
        let (range, runs) =
            order_chunk_runs(&self.cfg, k, written, plan.len(), "schema", runs, |r| {
                (r.schema, r.run)
            })?;
        let schemas = a2_schemas();
        let mut lines = Vec::with_capacity(runs.len());
        let mut runs = runs.into_iter();
        for s in range {
            let entry = &schemas[s];
            let check = SchemaCheck::new(entry);
            for ((run, spec), r) in plan.iter().enumerate().zip(runs.by_ref()) {
                self.check_stop(&r)?;
                lines.push(JsonLine::of_run(
                    DecodedAt {
                        chunk: k,
                        entry,
                        run,
                        prompt_tokens: self.prompts[s].len(),
                    },
                    spec,
                    Decoded {
                        tokens: r.tokens,
                        output: r.output,
                        eog: r.eog,
                        forward_tokens: r.forward_tokens,
                    },
                    &check,
                    false,
                    None,
                ));
            }
        }
        self.log.append(lines)
    }

    fn check_stop(&self, r: &DecodedOutput) -> Result<(), LabError> {
        let n = r.tokens.len();
        let max = self.cfg.max_tokens;
        let stopped = r.eog || STOP_STRINGS.iter().any(|s| r.output.contains(s));
        if n == 0 || n > max || (!stopped && n != max) {
            return Err(LabError::config(
                "tokens",
                format!("{n} for schema {} run {}", r.schema, r.run),
                &format!(
                    "1..={max}, and exactly {max} unless the output ended with end-of-generation or contains a stop string"
                ),
            ));
        }
        Ok(())
    }

    /// Summarise the complete run and write `summary.json`, `REPORT.md` and the plot, as
    /// `gauge json` does.
    pub fn finish(&self, plots: bool) -> Result<JsonSummary, LabError> {
        let pending = self.pending_chunks();
        if !pending.is_empty() {
            return Err(LabError::config(
                "chunks",
                format!("{pending:?} pending"),
                "every chunk decoded before finishing",
            ));
        }
        finish_json(&self.dir, &self.cfg, &self.log.lines, plots)
    }
}
