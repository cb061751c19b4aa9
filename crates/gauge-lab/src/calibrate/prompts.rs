//! The note's 16 fixed prompts and its Table 5, embedded from `data/fixcal.json` (copied with its
//! provenance; docs/PROTOCOL.md §1.7, §3.2).

use serde::Deserialize;
use std::sync::OnceLock;

const DATA: &str = include_str!("../../../../data/fixcal.json");

/// One model's row of the note's Table 5: θ′ per anchor, `None` = UNREACHABLE.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct NoteModel {
    pub model: String,
    /// One of the repository's three extra models (not in the note's printed table).
    pub extra: bool,
    pub theta_prime: Vec<Option<f64>>,
    /// Anchors whose bisection did not converge.
    #[serde(default)]
    pub not_converged: Vec<f64>,
}

/// The note's Table 5.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct NoteTable5 {
    pub anchors: Vec<f64>,
    pub models: Vec<NoteModel>,
}

/// The closed-form check of one note model.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct NoteClosedForm {
    pub median: f64,
    pub p90: Option<f64>,
    pub frac_gt_10: f64,
    pub p_top_loop_mean: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct RawRepRate {
    thetas: Vec<f64>,
    models: std::collections::BTreeMap<String, Vec<f64>>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct Ceiling {
    models: std::collections::BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct ClosedForms {
    models: std::collections::BTreeMap<String, NoteClosedForm>,
}

/// Everything the calibration embeds from the note.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct NoteData {
    pub provenance: String,
    pub prompts: Vec<String>,
    pub table5: NoteTable5,
    raw_rep_rate: RawRepRate,
    ceiling_rep_rate: Ceiling,
    closed_form: ClosedForms,
}

impl NoteData {
    /// The note's raw rep_rate of `model` at θ (`None` off its grid).
    pub fn raw_rep_rate(&self, model: &str, theta: f64) -> Option<f64> {
        let i = self
            .raw_rep_rate
            .thetas
            .iter()
            .position(|&t| (t - theta).abs() < 1e-9)?;
        self.raw_rep_rate.models.get(model)?.get(i).copied()
    }

    /// The note's normalized rep_rate at the θ′ = 10 ceiling.
    pub fn ceiling_rep_rate(&self, model: &str) -> Option<f64> {
        self.ceiling_rep_rate.models.get(model).copied()
    }

    /// The note's closed-form statistics of `model`.
    pub fn closed_form(&self, model: &str) -> Option<&NoteClosedForm> {
        self.closed_form.models.get(model)
    }

    /// The note's θ′ for `model` at `anchor`: `Some(None)` = UNREACHABLE, `None` = not in the table.
    pub fn theta_prime(&self, model: &NoteModel, anchor: f64) -> Option<Option<f64>> {
        let i = self
            .table5
            .anchors
            .iter()
            .position(|&a| (a - anchor).abs() < 1e-9)?;
        model.theta_prime.get(i).copied()
    }
}

/// The embedded note data (parsed once).
pub fn note_data() -> &'static NoteData {
    static D: OnceLock<NoteData> = OnceLock::new();
    D.get_or_init(|| serde_json::from_str(DATA).expect("data/fixcal.json is valid (tested)"))
}

/// The 16 fixed prompts of the note's A1 design, in order.
pub fn fixed_prompts() -> &'static [String] {
    &note_data().prompts
}
