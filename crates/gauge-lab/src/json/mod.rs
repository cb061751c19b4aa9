//! `gauge json` — A2, JSON-schema validity under repetition penalties (docs/PROTOCOL.md §5.2).
//!
//! For each of the note's 200 JSONSchemaBench schemas the model is asked for "ONLY a single JSON
//! object that conforms to this JSON Schema", decoded greedily with each (op, θ) — by default the
//! note's grid, raw (`ctrl`) vs fix (`normalized`) at θ ∈ {1, 1.1, 1.3}, no gauge shift — until an
//! end-of-generation token, until the generated text contains `"\n\n"` or "```" (the llama.cpp
//! driver's rule: generated text only), or 512 tokens. The first brace-balanced object is parsed
//! and validated against the schema with its own draft; the valid rate per (op, θ) is the result,
//! also conditioned on the schemas valid at raw θ = 1.
//!
//! Decoding shares work like the probe: the runs of one schema start as one sequence (one prefill
//! of the ~500-token prompt), fork when their decisions differ, and leave the tree when they stop.
//! Results are resumable per chunk of schemas (see [`crate::run::resume`]).

pub mod external;
pub mod schema;
pub mod shape;

use crate::error::LabError;
use crate::ops::Op;
use crate::plot::{line_chart_svg, LineChart, Series};
use crate::run::codec::{tokenize_prompts, PromptStyle};
use crate::run::decode::{decode_chunk, Observer, PrefixJob};
use crate::run::resume::{open_run, progress_bar, write_outputs, ChunkLine, ChunkRunner};
use crate::run::spec::{
    check_alpha, check_count, check_in_plan, check_model, check_ops, check_thetas, Chunking, Grid,
    ThetaFloor, MAX_TOKENS,
};
use crate::run::{op_theta_plan, Codec, RunControl, RunSpec};
use crate::stack::{check_engine, EngineInfo, Stack};
use crate::stats::f32_to_decimal_f64;
use gauge_engine::LogitSource;
use gauge_grammar::{ConstraintRequest, ConstraintSpec, GrammarState, GrammarVocab};
use gauge_sampling::TokenId;
use schema::{a2_schemas, first_json, json_prompt, Extracted, SchemaCheck};
use serde::{Deserialize, Serialize};
use shape::{Shape, ShapeRates};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Bumped when a change makes old A2 results incomparable (part of the run id).
pub const JSON_FORMAT: u32 = 1;

/// Stop strings of the note's JSON task (kept in the output).
pub const STOP_STRINGS: [&str; 2] = ["\n\n", "```"];

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

/// One decoded output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonLine {
    pub chunk: usize,
    /// Manifest index of the schema.
    pub schema: usize,
    /// JSONSchemaBench id.
    pub id: String,
    /// Index in the plan.
    pub run: usize,
    pub op: Op,
    pub theta: f32,
    pub prompt_tokens: usize,
    pub tokens: Vec<TokenId>,
    /// `eog`, `stop_string` or `max_tokens`.
    pub stop: String,
    /// The generated text.
    pub output: String,
    /// The first brace-balanced substring, if any.
    pub extracted: Option<String>,
    /// Parseable and schema-valid.
    pub valid: bool,
    /// `valid`, `no_json`, `parse_error`, `schema_invalid` or `validator_error: …`.
    pub reason: String,
    pub forward_tokens: u64,
    pub naive_forward_tokens: u64,
    /// Constrained runs: the grammar engine could not compile the schema, so the output was
    /// decoded without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar_error: Option<String>,
}

impl ChunkLine for JsonLine {
    fn unit(&self) -> (u8, usize) {
        (0, self.chunk)
    }
    fn key(&self) -> (u8, usize, usize) {
        (0, self.schema, self.run)
    }
}

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
    /// Content measures over the outputs that parse (see [`shape`]).
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

/// The note's JSON grid (`results/bench_a2/summary.json`): θ, raw, fix, raw conditioned, fix
/// conditioned (Qwen2.5-Coder-7B, 200 schemas).
pub const NOTE_JSON: [(f32, f64, f64, f64, f64); 3] = [
    (1.0, 0.970, 0.970, 1.000, 1.000),
    (1.1, 0.955, 0.975, 0.974, 1.000),
    (1.3, 0.225, 0.970, 0.227, 0.995),
];

/// The directory a configuration writes to.
pub fn json_run_dir(out_root: &Path, cfg: &JsonConfig) -> PathBuf {
    out_root.join(cfg.run_id())
}

/// The A2 view of the decode: each output's text so far, to stop a run at end-of-generation or
/// at a stop string.
struct StopStrings<'a> {
    codec: &'a dyn Codec,
    /// Stop at the note's stop strings too (unconstrained runs only).
    strings: bool,
    /// `[job][run]`: the generated bytes.
    texts: Vec<Vec<Vec<u8>>>,
}

impl Observer for StopStrings<'_> {
    fn stop(&mut self, job: usize, run: usize, tokens: &[TokenId]) -> bool {
        let Some(&t) = tokens.last() else {
            return false;
        };
        if self.codec.is_eog(t) {
            return true;
        }
        let buf = &mut self.texts[job][run];
        let from = buf.len().saturating_sub(2);
        buf.extend_from_slice(&self.codec.piece(t));
        self.strings
            && STOP_STRINGS
                .iter()
                .any(|s| contains(&buf[from..], s.as_bytes()))
    }
}

/// Run (or resume) A2 on `source`, writing `out_root/<run-id>/`. Prompts are tokenized with
/// special-token parsing (the note's llama.cpp A2 driver), through the chat template when
/// `cfg.chat_template`. A constrained configuration needs [`run_json_constrained`].
pub fn run_json(
    source: &mut dyn LogitSource,
    codec: &dyn Codec,
    cfg: &JsonConfig,
    out_root: &Path,
    ctl: &RunControl,
) -> Result<JsonSummary, LabError> {
    run_json_inner(source, codec, cfg, out_root, ctl, None)
}

/// [`run_json`] with each schema compiled as a grammar for `vocab` (the model's) when
/// `cfg.constrained`.
pub fn run_json_constrained(
    source: &mut dyn LogitSource,
    codec: &dyn Codec,
    cfg: &JsonConfig,
    out_root: &Path,
    ctl: &RunControl,
    vocab: &GrammarVocab,
) -> Result<JsonSummary, LabError> {
    run_json_inner(source, codec, cfg, out_root, ctl, Some(vocab))
}

fn run_json_inner(
    source: &mut dyn LogitSource,
    codec: &dyn Codec,
    cfg: &JsonConfig,
    out_root: &Path,
    ctl: &RunControl,
    vocab: Option<&GrammarVocab>,
) -> Result<JsonSummary, LabError> {
    cfg.validate()?;
    cfg.sampler.check_rust_decodable()?;
    let vocab = match (cfg.constrained, vocab) {
        (true, None) => {
            return Err(LabError::Config {
                field: "constrained".into(),
                value: "true".into(),
                allowed: "a run given the model's grammar vocabulary (run_json_constrained)".into(),
            })
        }
        (true, Some(v)) => Some(v),
        (false, _) => None,
    };
    let schemas = &a2_schemas()[..cfg.schemas];
    let texts: Vec<String> = schemas.iter().map(json_prompt).collect();
    let style = PromptStyle {
        chat: cfg.chat_template,
        parse_special: true,
    };
    let prompts = tokenize_prompts(
        codec,
        schemas
            .iter()
            .zip(&texts)
            .map(|(e, t)| (e.index, t.as_str())),
        style,
        source.n_vocab(),
    )?;
    let plan = cfg.plan();
    let chunking = cfg.chunking();
    let expected = |(_, chunk): (u8, usize)| chunking.chunk(chunk).len() * plan.len();
    let check =
        |l: &JsonLine| check_in_plan(&plan, &chunking, (l.schema, l.chunk, l.run), l.op, l.theta);
    let (dir, mut log) = open_run(out_root, &cfg.run_id(), cfg, &expected, &check, |l| {
        l.prompt_tokens == prompts[l.schema].len()
    })?;
    let done = log.done_units(0);
    let opts = ctl.decode_options(cfg.max_tokens, cfg.window, cfg.sampler);
    let bar = progress_bar(
        ctl.progress,
        "A2 json ",
        cfg.schemas as u64,
        done.iter().map(|&k| chunking.chunk(k).len() as u64).sum(),
        "schemas",
    );
    ChunkRunner::new(ctl).run_phase(&mut log, 0, chunking.n_chunks(), |k| {
        let range = chunking.chunk(k);
        let mut jobs = PrefixJob::same_plan(&prompts, range.clone(), &plan);
        let mut grammar_errors: Vec<Option<String>> = vec![None; jobs.len()];
        if let Some(vocab) = vocab {
            for ((job, s), err) in jobs.iter_mut().zip(range.clone()).zip(&mut grammar_errors) {
                let req = ConstraintRequest {
                    spec: ConstraintSpec::JsonSchema(schemas[s].schema.clone()),
                    field: format!("schema {}", schemas[s].id),
                    // A2 scores with `format` as an annotation (its validator's default), so
                    // a format the grammar does not know is left out, as the scorer leaves it.
                    lenient: true,
                };
                match GrammarState::compile(&req, vocab) {
                    Ok(g) => job.grammar = Some(g),
                    Err(e) => *err = Some(e.to_string()),
                }
            }
        }
        let mut obs = StopStrings {
            codec,
            strings: !cfg.constrained,
            texts: vec![vec![Vec::new(); plan.len()]; jobs.len()],
        };
        let results = decode_chunk(source, &jobs, opts, &mut obs)?;
        let mut lines = Vec::new();
        for (((s, res), txt), gerr) in range
            .clone()
            .zip(results)
            .zip(obs.texts)
            .zip(grammar_errors)
        {
            let entry = &schemas[s];
            let checker = SchemaCheck::new(entry);
            for (run, ((spec, r), bytes)) in plan.iter().zip(res).zip(txt).enumerate() {
                let eog = r.tokens.last().is_some_and(|&t| codec.is_eog(t));
                lines.push(JsonLine::of_run(
                    DecodedAt {
                        chunk: k,
                        entry,
                        run,
                        prompt_tokens: prompts[s].len(),
                    },
                    spec,
                    Decoded {
                        tokens: r.tokens,
                        output: String::from_utf8_lossy(&bytes).into_owned(),
                        eog,
                        forward_tokens: r.forward_tokens,
                    },
                    &checker,
                    cfg.constrained && gerr.is_none(),
                    gerr.clone(),
                ));
            }
        }
        bar.inc(range.len() as u64);
        Ok(lines)
    })?;
    bar.finish_and_clear();
    finish_json(&dir, cfg, &log.lines, ctl.plots)
}

/// The summary, `summary.json`, the plot and `REPORT.md` of a complete run: one implementation
/// for `gauge json` and the Python engines ([`external::ExternalJson`]).
pub(crate) fn finish_json(
    dir: &Path,
    cfg: &JsonConfig,
    lines: &[JsonLine],
    plots: bool,
) -> Result<JsonSummary, LabError> {
    let summary = summarize(cfg, lines);
    let plots = if plots {
        vec![(
            "json_validity_vs_theta",
            line_chart_svg(&validity_chart(&summary)),
        )]
    } else {
        Vec::new()
    };
    write_outputs(dir, &summary, plots, |names| {
        json_report(cfg, &summary, lines, names)
    })?;
    Ok(summary)
}

/// Where one decoded output belongs.
pub(crate) struct DecodedAt<'a> {
    pub chunk: usize,
    pub entry: &'a schema::SchemaEntry,
    /// Index in the plan.
    pub run: usize,
    pub prompt_tokens: usize,
}

/// What a decode produced for one output.
pub(crate) struct Decoded {
    /// Generated tokens (an end-of-generation token included).
    pub tokens: Vec<TokenId>,
    /// The generated text (control tokens render as nothing).
    pub output: String,
    /// The last token ended generation.
    pub eog: bool,
    pub forward_tokens: u64,
}

impl JsonLine {
    /// The scored line of one output: the stop reason by `gauge json`'s rule (end-of-generation,
    /// else a stop string in the generated text, else the token limit) and the verdict; `whole`
    /// parses the whole output (a constrained run whose grammar compiled).
    pub(crate) fn of_run(
        at: DecodedAt<'_>,
        spec: &RunSpec,
        d: Decoded,
        checker: &SchemaCheck,
        whole: bool,
        grammar_error: Option<String>,
    ) -> JsonLine {
        let stop = if d.eog {
            "eog"
        } else if STOP_STRINGS.iter().any(|s| d.output.contains(s)) {
            "stop_string"
        } else {
            "max_tokens"
        };
        let (valid, reason, extracted) = if whole {
            score_whole(&d.output, checker)
        } else {
            score(&d.output, checker)
        };
        JsonLine {
            chunk: at.chunk,
            schema: at.entry.index,
            id: at.entry.id.clone(),
            run: at.run,
            op: spec.op,
            theta: spec.theta,
            prompt_tokens: at.prompt_tokens,
            naive_forward_tokens: (at.prompt_tokens + d.tokens.len()).saturating_sub(1) as u64,
            tokens: d.tokens,
            stop: stop.into(),
            output: d.output,
            extracted,
            valid,
            reason,
            forward_tokens: d.forward_tokens,
            grammar_error,
        }
    }
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

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// (valid, reason, extracted substring) of one output.
pub fn score(output: &str, checker: &SchemaCheck) -> (bool, String, Option<String>) {
    match first_json(output) {
        Extracted::NoJson => (false, "no_json".into(), None),
        Extracted::Unparsed(s) => (false, "parse_error".into(), Some(s)),
        Extracted::Parsed(s, v) => match checker.check(&v) {
            Ok(true) => (true, "valid".into(), Some(s)),
            Ok(false) => (false, "schema_invalid".into(), Some(s)),
            Err(e) => (false, format!("validator_error: {e}"), Some(s)),
        },
    }
}

/// (valid, reason, parsed text) of a constrained output: the whole output is the JSON value.
pub fn score_whole(output: &str, checker: &SchemaCheck) -> (bool, String, Option<String>) {
    let t = output.trim();
    if t.is_empty() {
        return (false, "no_json".into(), None);
    }
    match schema::parse_json(t) {
        Err(_) => (false, "parse_error".into(), Some(t.to_string())),
        Ok(v) => match checker.check(&v) {
            Ok(true) => (true, "valid".into(), Some(t.to_string())),
            Ok(false) => (false, "schema_invalid".into(), Some(t.to_string())),
            Err(e) => (false, format!("validator_error: {e}"), Some(t.to_string())),
        },
    }
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

fn validity_chart(s: &JsonSummary) -> LineChart {
    let mut ops: Vec<Op> = Vec::new();
    for c in &s.conditions {
        if !ops.contains(&c.op) {
            ops.push(c.op);
        }
    }
    let mut series: Vec<Series> = ops
        .iter()
        .map(|&op| Series {
            name: format!("{op} ({})", short(&s.model)),
            points: s
                .conditions
                .iter()
                .filter(|c| c.op == op)
                .map(|c| (c.theta, c.valid_rate))
                .collect(),
            err: None,
            dashed: false,
        })
        .collect();
    series.push(Series {
        name: "raw (note, Qwen-Coder)".into(),
        points: NOTE_JSON.iter().map(|n| (f64::from(n.0), n.1)).collect(),
        err: None,
        dashed: true,
    });
    series.push(Series {
        name: "fix (note, Qwen-Coder)".into(),
        points: NOTE_JSON.iter().map(|n| (f64::from(n.0), n.2)).collect(),
        err: None,
        dashed: true,
    });
    LineChart {
        title: format!("JSON schema validity vs θ — {}", s.model),
        x_label: "θ".into(),
        y_label: "schema-valid rate".into(),
        y_range: (0.0, 1.0),
        series,
    }
}

fn short(s: &str) -> String {
    if s.chars().count() <= 14 {
        s.to_string()
    } else {
        s.chars().take(13).collect::<String>() + "…"
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".into(), |x| format!("{x:.digits$}"))
}

/// What the penalty does to content: format validity, end of generation, length, placeholders,
/// early-closed strings and arrays (see [`shape`]).
pub fn render_content_table(s: &JsonSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<12} {:>5}  {:>7} {:>5} {:>7}  {:>7} {:>7} {:>7}  {:>7} {:>7}  {:>4}",
        "op",
        "θ",
        "valid+f",
        "eog",
        "tokens",
        "req_ph",
        "str_ph",
        "str_len",
        "arr_0",
        "arr_len",
        "gerr"
    );
    for c in &s.conditions {
        let _ = writeln!(
            o,
            "{:<12} {:>5}  {:>7.3} {:>5.2} {:>7.1}  {:>7} {:>7} {:>7}  {:>7} {:>7}  {:>4}",
            s.sampler.op_label(c.op),
            c.theta,
            c.valid_formats_rate,
            c.eog_rate,
            c.mean_tokens,
            opt(c.shape.required_placeholder_rate, 3),
            opt(c.shape.string_placeholder_rate, 3),
            opt(c.shape.mean_string_chars, 1),
            opt(c.shape.empty_array_rate, 3),
            opt(c.shape.mean_array_items, 2),
            c.grammar_errors
        );
    }
    o
}

/// The terminal table of `gauge json`.
pub fn render_json_table(s: &JsonSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "gauge json — {}{}",
        s.model,
        crate::report::stack_note(s.sampler)
    );
    let _ = writeln!(
        o,
        "{:<12} {:>5}  {:>7}  {:>9}  {:>11}  {:>7} {:>7} {:>7}",
        "op", "θ", "valid", "n_valid/n", "conditioned", "no_json", "parse", "schema"
    );
    for c in &s.conditions {
        let _ = writeln!(
            o,
            "{:<12} {:>5}  {:>7.3}  {:>9}  {:>11}  {:>7} {:>7} {:>7}",
            s.sampler.op_label(c.op),
            c.theta,
            c.valid_rate,
            format!("{}/{}", c.n_valid, c.n),
            c.valid_rate_given_theta1
                .map_or("—".into(), |r| format!("{r:.3}")),
            c.no_json,
            c.parse_error,
            c.schema_invalid
        );
    }
    o.push_str(&render_content_table(s));
    let ops: Vec<Op> = s.conditions.iter().map(|c| c.op).collect();
    if let Some(note) = s.sampler.footnote(&ops) {
        let _ = writeln!(o, "{note}");
    }
    let _ = writeln!(
        o,
        "{}",
        crate::report::work_line(s.forward_tokens, s.naive_forward_tokens)
    );
    o
}

fn json_report(cfg: &JsonConfig, s: &JsonSummary, lines: &[JsonLine], plots: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# A2 JSON-schema validity — {}{}\n",
        s.model,
        crate::report::stack_note(s.sampler)
    );
    match s.sampler {
        Stack::Gauge => {}
        Stack::LlamaCpp => {
            let _ = writeln!(
                o,
                "Decisions by llama.cpp's own `penalties → greedy` chain through the bindings (the note's A2 llama.cpp driver), prompt accepted into the window first; normalized runs stay on gauge's operator (llama.cpp has none).\n"
            );
        }
        other => {
            let _ = writeln!(
                o,
                "Logits and decisions by {} ({}): ctrl is the stack's own penalty ({}), normalized gauge's processor for the stack, subtractive a presence penalty on the prompt and output; end-of-generation tokens and the chat template are the stack's tokenizer's. Decoded by `python -m gauge_sampling json --engine {}`.\n",
                other.title(),
                cfg.engine.as_ref().map_or("?".into(), |e| {
                    let v: Vec<String> = e.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
                    format!("{}; {}", e.describe(), v.join(", "))
                }),
                other.ctrl_operator(),
                s.sampler
            );
        }
    }
    let _ = writeln!(
        o,
        "Run `{}`{}: {} JSONSchemaBench schemas{}, greedy, ≤ {} tokens, {}; seen set {}; no gauge shift. The note: Qwen2.5-Coder-7B, 200 schemas, HF `generate` (batches of 8, left padding). Different model: compare shapes, not digits.\n",
        cfg.run_id(),
        if cfg.constrained {
            " (CONSTRAINED: the schema as a grammar masks every row before the operator; the whole output is parsed)"
        } else {
            ""
        },
        cfg.schemas,
        if cfg.chat_template {
            " (prompt in the model's chat template)"
        } else {
            " (plain prompt, as the note)"
        },
        cfg.max_tokens,
        if cfg.constrained {
            "stop at end-of-generation only (the grammar decides the end)"
        } else {
            "stop at end-of-generation or when the output contains \"\\n\\n\" or \"```\""
        },
        match cfg.window {
            None => "prompt + all generated".to_string(),
            Some(n) => format!("last {n} tokens"),
        }
    );
    o.push_str("```\n");
    o.push_str(&render_json_table(s));
    o.push_str("```\n\n");
    let _ = writeln!(
        o,
        "## Table 4 (JSON rows) — normalize-before-penalize at equal θ\n"
    );
    let _ = writeln!(o, "| θ | raw/ctrl valid (gauge) | normalized valid (gauge) | raw (note) | fix (note) | raw conditioned (gauge) | normalized conditioned (gauge) | raw conditioned (note) | fix conditioned (note) |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
    let mut thetas = cfg.thetas.clone();
    thetas.sort_by(|a, b| a.total_cmp(b));
    for th in thetas {
        let t = f32_to_decimal_f64(th);
        let get = |op: Op| s.conditions.iter().find(|c| c.op == op && c.theta == t);
        let f = |c: Option<&JsonCondition>| {
            c.map_or("—".into(), |c| {
                format!("{:.3} ({}/{})", c.valid_rate, c.n_valid, c.n)
            })
        };
        let g = |c: Option<&JsonCondition>| {
            c.and_then(|c| c.valid_rate_given_theta1)
                .map_or("—".into(), |r| format!("{r:.3}"))
        };
        let note = NOTE_JSON.iter().find(|n| n.0 == th);
        let nf = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.3}"));
        let _ = writeln!(
            o,
            "| {th} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f(get(Op::Ctrl)),
            f(get(Op::Normalized)),
            nf(note.map(|n| n.1)),
            nf(note.map(|n| n.2)),
            g(get(Op::Ctrl)),
            g(get(Op::Normalized)),
            nf(note.map(|n| n.3)),
            nf(note.map(|n| n.4))
        );
    }
    // Determinism check: raw θ=1 and fix θ=1 should decide identically.
    if cfg.ops.contains(&Op::Ctrl) && cfg.ops.contains(&Op::Normalized) && cfg.thetas.contains(&1.0)
    {
        let pick = |op: Op| -> Vec<&JsonLine> {
            let mut v: Vec<&JsonLine> = lines
                .iter()
                .filter(|l| l.op == op && l.theta == 1.0)
                .collect();
            v.sort_by_key(|l| l.schema);
            v
        };
        let (a, b) = (pick(Op::Ctrl), pick(Op::Normalized));
        let same = a
            .iter()
            .zip(&b)
            .filter(|(x, y)| x.tokens == y.tokens)
            .count();
        let _ = writeln!(
            o,
            "\nDeterminism check (the note: raw θ=1 and fix θ=1 give identical valid sets): {same}/{} outputs token-identical.",
            a.len()
        );
    }
    crate::report::work_and_plots(&mut o, s.forward_tokens, s.naive_forward_tokens, plots);
    let _ = writeln!(
        o,
        "Definitions: valid = the first brace-balanced `{{…}}` of the output (naive brace count) parses as JSON and has no schema error under the schema's own draft, with `format` as annotation only. Conditioned = among the schemas valid at ctrl θ = 1."
    );
    o
}
