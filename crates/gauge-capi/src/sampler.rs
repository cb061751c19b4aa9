//! [`GaugeSampler`]: gauge stages behind llama.cpp's sampler contract.
//!
//! A llama.cpp sampler edits a caller-owned candidate array in place. gauge's stages work on a
//! [`Candidates`] buffer, so `apply` copies the live entries in, runs the stages, and writes the
//! result back: the entries (stages only reorder, shrink or drop from the front, never grow),
//! `size`, `sorted`, and `selected` when a terminal stage chose one. The copy costs one pass over
//! the array, which the stages make anyway.
//!
//! # The normalized penalty needs the full row
//!
//! `repeat_penalty_mode: "normalized"` takes the log-softmax over the whole vocabulary. When the
//! array handed to the sampler does not hold all `n_vocab` candidates (an earlier stage of the
//! caller's chain cut it), the log-softmax over what is left would be another operator: every
//! seen token would be penalised less, by `(θ-1)·ln P(kept)`. gauge does not compute it. It skips
//! the normalized penalties stage for that call (the candidates pass through it unchanged, the
//! frequency and presence parts included), records the reason, readable with
//! [`GaugeSampler::error`] (C: `gauge_sampler_error`), and prints it to stderr the first time.
//! Stages after it still run, so a chain still selects a token. Put the stage first (llama.cpp's
//! own default order does) to avoid this. Inside a JSON chain whose own `samplers` order puts a
//! cutting stage before `penalties`, the penalty works on what that stage kept, as it does
//! everywhere in gauge: that order is the caller's explicit request.
//!
//! # Bad rows
//!
//! gauge's stages assume a row without NaN or `+inf` and with at least one finite logit (its own
//! chain checks this before sampling). Such an array is left untouched, with the reason recorded
//! as above; a chain then selects nothing (`selected` stays as it was), which
//! `llama_sampler_sample` reports by its own assertion.

use std::ffi::{CStr, CString};

use gauge_sampling::params::SamplingParams;
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::{Candidates, Chain, Result, Sampler, SamplingError, TokenData, TokenId};

use crate::llama_abi::{llama_token_data, llama_token_data_array};

/// gauge stages that run as one llama.cpp sampler.
#[derive(Clone, Debug)]
pub struct GaugeSampler {
    name: CString,
    n_vocab: usize,
    stages: Vec<Box<dyn Sampler>>,
    /// Index of the normalized penalties stage, which needs every candidate (see the module docs).
    full_row_stage: Option<usize>,
    /// Whether this sampler ends in a terminal stage that sets `selected`.
    terminal: bool,
    error: Option<CString>,
    cur: Candidates,
}

/// The penalty modes the C constructor accepts, by name.
pub fn parse_mode(mode: &str) -> Result<PenaltyMode> {
    match mode {
        "ctrl" => Ok(PenaltyMode::Ctrl),
        "normalized" => Ok(PenaltyMode::Normalized),
        other => Err(SamplingError::param(
            "mode",
            format!("{other:?}"),
            "\"ctrl\" or \"normalized\"",
        )),
    }
}

impl GaugeSampler {
    /// The penalties stage alone: llama.cpp's `llama_sampler_init_penalties` with gauge's `mode`
    /// and `penalty_last_n = -1` meaning the whole history. Prompt tokens count when accepted, as
    /// in llama.cpp. Parameters that make the stage a no-op give the `?gauge-penalties`
    /// placeholder, as llama.cpp's `?penalties`.
    pub fn penalties(
        n_vocab: i32,
        penalty_last_n: i32,
        penalty_repeat: f32,
        penalty_freq: f32,
        penalty_present: f32,
        mode: PenaltyMode,
    ) -> Result<Self> {
        let n_vocab = checked_n_vocab(n_vocab)?;
        let params = SamplingParams {
            repeat_last_n: penalty_last_n,
            repeat_penalty: penalty_repeat,
            frequency_penalty: penalty_freq,
            presence_penalty: penalty_present,
            repeat_penalty_mode: mode,
            samplers: vec![gauge_sampling::SamplerType::Penalties],
            ..SamplingParams::default()
        };
        params.validate(n_vocab)?;
        let chain = Chain::from_params(&params, n_vocab, None)?;
        // `from_params` ends every chain in `dist`; the penalties stage is the first.
        let stage = chain.stages()[0].clone();
        let active = !stage.name().starts_with('?');
        let name = match (active, mode) {
            (false, _) => "?gauge-penalties",
            (true, PenaltyMode::Ctrl) => "gauge-penalties",
            (true, PenaltyMode::Normalized) => "gauge-penalties-normalized",
        };
        Ok(Self::new(name, n_vocab, vec![stage], &params, false))
    }

    /// gauge's whole chain from request fields (the JSON the CLI and server accept), terminal
    /// included. String-valued fields that need a tokenizer (string logit-bias keys, DRY string
    /// breakers when DRY is on) are refused with a message naming the field.
    pub fn from_json(params_json: &str, n_vocab: i32) -> Result<Self> {
        let params = SamplingParams::from_json(params_json)?;
        Self::from_params(&params, n_vocab)
    }

    /// gauge's whole chain from parsed request fields.
    pub fn from_params(params: &SamplingParams, n_vocab: i32) -> Result<Self> {
        let n_vocab = checked_n_vocab(n_vocab)?;
        let chain = Chain::from_params(params, n_vocab, None)?;
        Ok(Self::new(
            "gauge-chain",
            n_vocab,
            chain.stages().to_vec(),
            params,
            true,
        ))
    }

    fn new(
        name: &str,
        n_vocab: usize,
        stages: Vec<Box<dyn Sampler>>,
        params: &SamplingParams,
        terminal: bool,
    ) -> Self {
        let normalized =
            params.repeat_penalty_mode == PenaltyMode::Normalized && params.repeat_penalty != 1.0;
        let full_row_stage = normalized
            .then(|| stages.iter().position(|s| s.name() == "penalties"))
            .flatten();
        Self {
            name: CString::new(name).expect("sampler names have no NUL"),
            n_vocab,
            stages,
            full_row_stage,
            terminal,
            error: None,
            cur: Candidates::new(),
        }
    }

    /// The name llama.cpp prints for this sampler in a chain.
    pub fn name(&self) -> &CStr {
        &self.name
    }

    /// The vocabulary size the sampler was built for.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// gauge's own print of the stages inside (`logits -> penalties -> ... `).
    pub fn describe(&self) -> String {
        Chain::from_stages(self.n_vocab, self.stages.clone()).describe()
    }

    /// The first problem met by `apply` since creation or the last [`GaugeSampler::reset`]: a
    /// normalized penalty skipped on a truncated array, or a row gauge cannot take.
    pub fn error(&self) -> Option<&CStr> {
        self.error.as_deref()
    }

    /// Record a token into every stage (llama.cpp's `accept`; prompt tokens too).
    pub fn accept(&mut self, token: TokenId) {
        for s in &mut self.stages {
            s.accept(token);
        }
    }

    /// Forget the history, reseed, and clear the recorded error.
    pub fn reset(&mut self) {
        for s in &mut self.stages {
            s.reset();
        }
        self.error = None;
    }

    /// Run the stages on `cur`, which holds the array llama.cpp handed over. Returns false (and
    /// leaves `cur` unchanged) for a row gauge cannot take.
    pub fn apply(&mut self, cur: &mut Candidates) -> bool {
        if let Err(e) = check_candidates(cur.as_slice()) {
            self.record_error(format!(
                "{}: {e}; the array was left unchanged",
                self.name_lossy()
            ));
            return false;
        }
        let skip = self.full_row_stage.filter(|_| cur.len() != self.n_vocab);
        // Recorded once: the message is only built while no problem has been recorded yet.
        if skip.is_some() && self.error.is_none() {
            self.record_error(format!(
                "{}: the normalized repeat penalty needs all {} candidates but the array has {} \
                 (a stage before it cut the vocabulary); the penalties stage was skipped. Put it \
                 first in the chain.",
                self.name_lossy(),
                self.n_vocab,
                cur.len()
            ));
        }
        for (i, stage) in self.stages.iter_mut().enumerate() {
            if skip != Some(i) {
                stage.apply(cur);
            }
        }
        true
    }

    fn name_lossy(&self) -> String {
        self.name.to_string_lossy().into_owned()
    }

    pub(crate) fn record_error(&mut self, msg: String) {
        if self.error.is_none() {
            eprintln!("gauge: {msg}");
            self.error = Some(CString::new(msg.replace('\0', " ")).expect("NULs replaced"));
        }
    }

    /// llama.cpp's `apply` on a caller-owned array (see the module docs for what is written back).
    ///
    /// # Safety
    /// `cur_p` must point to a valid `llama_token_data_array` whose `data` holds `size` entries
    /// (or is anything when `size` is 0).
    pub unsafe fn apply_raw(&mut self, cur_p: *mut llama_token_data_array) {
        let Some(arr) = cur_p.as_mut() else {
            self.record_error("llama_sampler_apply was called with a NULL array".into());
            return;
        };
        let input: &mut [llama_token_data] = if arr.size == 0 || arr.data.is_null() {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(arr.data, arr.size)
        };
        let mut cur = std::mem::take(&mut self.cur);
        cur.set_data(
            input.iter().map(|t| TokenData {
                id: t.id,
                logit: t.logit,
                p: t.p,
            }),
            arr.sorted,
        );
        if self.apply(&mut cur) {
            let out = cur.as_slice();
            debug_assert!(out.len() <= input.len(), "stages never grow the array");
            let n = out.len().min(input.len());
            for (dst, src) in input[..n].iter_mut().zip(out) {
                *dst = llama_token_data {
                    id: src.id,
                    logit: src.logit,
                    p: src.p,
                };
            }
            arr.size = n;
            arr.sorted = cur.sorted;
            if self.terminal {
                arr.selected = cur.selected.filter(|&i| i < n).map_or(-1, |i| i as i64);
            }
        }
        self.cur = cur;
    }
}

fn checked_n_vocab(n_vocab: i32) -> Result<usize> {
    if n_vocab <= 0 {
        return Err(SamplingError::param(
            "n_vocab",
            n_vocab,
            "1..=2147483647 (the model's vocabulary size)",
        ));
    }
    Ok(n_vocab as usize)
}

/// What gauge's stages assume of an array: non-empty, no NaN or `+inf`, one finite logit.
fn check_candidates(data: &[TokenData]) -> Result<()> {
    if data.is_empty() {
        return Err(SamplingError::Empty("the candidate array is empty".into()));
    }
    if let Some((index, t)) = data
        .iter()
        .enumerate()
        .find(|(_, t)| t.logit.is_nan() || t.logit == f32::INFINITY)
    {
        return Err(SamplingError::NonFiniteLogit {
            index,
            value: t.logit,
        });
    }
    if !data.iter().any(|t| t.logit > f32::NEG_INFINITY) {
        return Err(SamplingError::NoFiniteLogit);
    }
    Ok(())
}
