//! # gauge-lab
//!
//! gauge's instrument: the measurements of the note "Gauge dependence and structured-output
//! corruption in sign-branched repetition penalties", run on real models through
//! [`gauge_engine::LogitSource`] (or on a deterministic hash source in tests).
//!
//! An experiment is its own definitions plus the [`run`] core:
//! * [`run`] — the core: runs and plans, the one tokenizer trait ([`Codec`], implemented for the
//!   engine's model), the shared decode tree and its [`run::Observer`], resumable run
//!   directories. A new engine plugs in as a [`gauge_engine::LogitSource`].
//! * [`probe`] — A1, the gauge probe: flip rate between `+c` and `−c` shifted decodes per
//!   (operator, θ), the validity gate at θ = 1, zero-point statistics, repetition rate; reports
//!   and plots.
//! * [`json`] — A2: JSON-schema validity per (operator, θ) on the note's 200 JSONSchemaBench
//!   schemas.
//! * [`delim`] — the HumanEval threshold/delimiter analysis.
//! * [`calibrate`] — FIXCAL: the normalized θ′ that matches a raw θ on this model.
//! * [`ops`] — the note's three operators (ctrl, normalized, subtractive) on full logit rows,
//!   computed by gauge-sampling's `penalties` functions.
//! * Each experiment's `report` module writes its tables, `REPORT.md` and SVG/PNG plots ([`plot`])
//!   with the note's numbers beside gauge's; [`report`] holds what they share; [`stats`] — flip
//!   rate, first divergence, Python-exact bootstrap, medians, rep rate.
//!
//! Usage pattern (what `gauge probe` does):
//! 1. build a [`probe::ProbeConfig`] (its `Default` is the quick grid);
//! 2. call [`probe::run_probe`] with a source, a [`Codec`] and a results root; it resumes
//!    `results/<run-id>/` if it exists;
//! 3. print [`probe::render_table`] of the returned [`probe::ProbeSummary`] (or the summary as
//!    JSON for `--json`).
//!
//! `gauge json` and `gauge delim` are the same with [`json::run_json`] and [`delim::run_delim`].
//! `examples/probe_llama.rs` and `examples/json_llama.rs` wire them to a real model.

#![warn(missing_debug_implementations)]

pub mod calibrate;
pub mod delim;
pub mod error;
pub mod json;
pub mod ops;
pub mod plot;
pub mod prefixes;
pub mod probe;
pub mod report;
pub mod run;
pub mod stack;
pub mod stats;
/// Test helpers (a deterministic logit source, a word codec): for this crate's tests only, behind
/// the `testing` feature.
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use error::LabError;
pub use probe::render_table;
pub use probe::{run_probe, run_probe_with, ProbeConfig, ProbeSummary};
pub use run::{Codec, Grid, RunControl};
