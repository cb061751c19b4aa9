//! # gauge-lab
//!
//! gauge's instrument: the measurements of the note "Gauge dependence and structured-output
//! corruption in sign-branched repetition penalties", run on real models through
//! [`gauge_engine::LogitSource`] (or on [`testing::HashSource`] in tests).
//!
//! * [`probe`] — A1, the gauge probe: flip rate between `+c` and `−c` shifted decodes per
//!   (operator, θ), the validity gate at θ = 1, zero-point statistics, repetition rate; shared
//!   decode trees, resumable result directories, reports and plots.
//! * [`json`] — A2: JSON-schema validity per (operator, θ) on the note's 200 JSONSchemaBench
//!   schemas, with the same shared decode tree.
//! * [`ops`] — the three operators (ctrl, normalized, subtractive) on full logit rows.
//! * [`results`] — run directories that resume after a kill; [`report`] and [`plot`] write
//!   `REPORT.md` and SVG/PNG plots with the note's numbers beside gauge's.
//! * [`stats`] — flip rate, first divergence, Python-exact bootstrap, medians, rep rate.
//!
//! Usage pattern (what `gauge probe` does):
//! 1. build a [`probe::ProbeConfig`] (its `Default` is the quick grid);
//! 2. call [`probe::run_probe`] with a source, a tokenizer callback for the prefix texts and a
//!    results root; it resumes `results/<run-id>/` if it exists;
//! 3. print [`report::render_table`] of the returned [`probe::ProbeSummary`] (or the summary as
//!    JSON for `--json`).
//!
//! `gauge json` is the same with [`json::JsonConfig`], [`json::run_json`] (which takes a
//! [`json::TextCodec`]: prompt tokenizer, token pieces, end-of-generation test) and
//! [`json::render_json_table`]. `examples/probe_llama.rs` and `examples/json_llama.rs` wire both to
//! a real model.

#![warn(missing_debug_implementations)]

pub mod delim;
pub mod error;
pub mod json;
pub mod ops;
pub mod plot;
pub mod prefixes;
pub mod probe;
pub mod report;
pub mod results;
pub mod stack;
pub mod stats;
pub mod testing;

pub use error::LabError;
pub use probe::{run_probe, run_probe_with, ProbeConfig, ProbeSummary, RunControl};
pub use report::render_table;
