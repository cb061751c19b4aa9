//! The constraint as a chain stage: it removes every token the grammar forbids, first.

use gauge_sampling::candidates::{Candidates, TokenData};
use gauge_sampling::chain::row_flags;
use gauge_sampling::sampler::FromRow;
use gauge_sampling::{Chain, Overlay, Sampler, SamplingParams, Shift, TokenId};

use crate::error::GrammarError;
use crate::spec::ConstraintRequest;
use crate::state::GrammarState;
use crate::vocab::GrammarVocab;

/// The allowed set goes into the overlay (instead of a filled array) only when it holds at
/// least this many tokens: the fill path reads the whole row too (its check for NaN and +inf), so
/// the overlay's masked read costs a fraction of a read more, and filling and heap-sorting a few
/// hundred allowed entries costs about that.
const KEEP_IN_OVERLAY_MIN: usize = 256;

/// The stage's name in the chain print.
pub const STAGE_NAME: &str = "grammar";

/// A [`Sampler`] that keeps only the tokens the grammar allows next (see the crate docs for why
/// it goes first). Generated tokens advance the grammar; prompt tokens do not.
#[derive(Clone, Debug)]
pub struct GrammarStage {
    state: GrammarState,
    scratch: Vec<TokenData>,
    /// Record large allowed sets in the overlay ([`GrammarStage::with_mask_in_overlay`]).
    mask_in_overlay: bool,
}

impl GrammarStage {
    /// Compile `req` for `vocab` for a request with `params`. `ignore_eos` is refused: the
    /// grammar ends the output with an end-of-generation token, which `ignore_eos` bans.
    pub fn compile(
        req: &ConstraintRequest,
        vocab: &GrammarVocab,
        params: &SamplingParams,
    ) -> Result<Self, GrammarError> {
        if params.ignore_eos {
            return Err(GrammarError::Incompatible {
                field: "ignore_eos".into(),
                value: "true".into(),
                why: "the grammar ends the output with an end-of-generation token, which \
                      `ignore_eos` bans; limit the length with the grammar or `max_tokens`"
                    .into(),
            });
        }
        Ok(Self::new(GrammarState::compile(req, vocab)?))
    }

    /// A stage over an already compiled state.
    pub fn new(state: GrammarState) -> Self {
        Self {
            state,
            scratch: Vec::new(),
            mask_in_overlay: true,
        }
    }

    /// Record an allowed set of 256 tokens or more in the overlay (`Overlay::keep_only`) instead
    /// of filling the array of allowed entries, so top-k reads "row + edits + allowed set" (on by
    /// default; `false` fills, as before). Exact either way (tests/row_path.rs); on the default
    /// chain it is about twice as fast at 49,152 and 151,936 (docs/bench.md, "Issue 23 §4").
    pub fn with_mask_in_overlay(mut self, on: bool) -> Self {
        self.mask_in_overlay = on;
        self
    }

    /// The grammar state (for inspection: `error`, `is_stopped`).
    pub fn state(&self) -> &GrammarState {
        &self.state
    }

    /// The output's dead-end flag, shared with the copy that goes into a chain.
    pub fn dead_end(&self) -> crate::DeadEnd {
        self.state.dead_end()
    }
}

/// `chain` with `stage` in front of every other stage.
pub fn constrain(chain: Chain, stage: GrammarStage) -> Chain {
    let mut stages: Vec<Box<dyn Sampler>> = Vec::with_capacity(chain.stages().len() + 1);
    stages.push(Box::new(stage));
    stages.extend(chain.stages().iter().cloned());
    Chain::from_stages(chain.n_vocab(), stages)
}

impl Sampler for GrammarStage {
    fn name(&self) -> &str {
        STAGE_NAME
    }

    fn apply(&mut self, cur: &mut Candidates) {
        let mask = self.state.allowed();
        self.scratch.clear();
        self.scratch.extend(
            cur.as_slice()
                .iter()
                .filter(|t| t.id >= 0 && mask.is_allowed(t.id as u32))
                .copied(),
        );
        let sorted = cur.sorted;
        cur.set_data(self.scratch.drain(..), sorted);
    }

    /// With [`GrammarStage::with_mask_in_overlay`], first in the chain (as `constrain` puts it):
    /// the allowed set recorded in the overlay, so
    /// the later sparse stages (logit bias, penalties, DRY) edit the row as usual and the first
    /// dense stage reads "row + edits + allowed set" directly (`Overlay::keep_only`); the chain
    /// fills the array of allowed entries only for a dense stage that cannot read the set.
    ///
    /// Only for a large allowed set (inside a free string: most of the vocabulary): a small one
    /// is cheaper to fill (`apply_from_row`), and top-k's kernel would decline on fewer than k.
    fn apply_sparse(&mut self, _row: &[f32], ov: &mut Overlay) -> bool {
        if !self.mask_in_overlay {
            return false;
        }
        ov.keep_only_at_least(self.state.allowed().as_slice(), KEEP_IN_OVERLAY_MIN)
    }

    /// The allowed tokens straight from the row (in id order, as a filled array filtered by
    /// `apply` would hold them): the vocabulary-sized fill is never made.
    fn apply_from_row(&mut self, row: &[f32], ov: &Overlay, cur: &mut Candidates) -> FromRow {
        // The chain's own check (NaN, +inf, nothing finite): it then reports the entry.
        let (bad, any_finite) = row_flags(row);
        if bad || !any_finite {
            return FromRow::Invalid;
        }
        let n = row.len();
        let mask = self.state.allowed();
        if ov.is_pristine() {
            // First in the chain (as `constrain` puts it): the current values are the row's.
            cur.fill_where(row, mask.as_slice());
            return FromRow::Done;
        }
        self.scratch.clear();
        for (w, &word) in mask.as_slice().iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let id = w * 32 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if id < n {
                    self.scratch.push(TokenData {
                        id: id as TokenId,
                        logit: ov.get(row, id),
                        p: 0.0,
                    });
                }
            }
        }
        cur.set_data(self.scratch.drain(..), false);
        FromRow::Done
    }

    fn accept(&mut self, token: TokenId) {
        // A refused token is kept as the state's error; the chain never selects one.
        let _ = self.state.consume(token as u32);
    }

    /// The prompt is not part of the constrained output.
    fn accept_prompt(&mut self, _token: TokenId) {}

    fn reset(&mut self) {
        self.state.reset();
    }

    /// The allowed set depends on the text so far, never on logit values.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}
