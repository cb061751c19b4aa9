//! `adaptive-p`, llama.cpp's `llama_sampler_init_adaptive_p`: a terminal sampler that aims the
//! probability of the drawn tokens at `target` over time.
//!
//! It keeps an exponential moving average of the *original* probability of the tokens it picked
//! (`weighted_sum / total_weight`, decay clamped to [0, 0.99]). Each step it computes the adapted
//! target `clamp(2*target - ema, 0, 1)`, reshapes every finite logit to
//! `5 - 10 d²/(1 + d)` with `d = |p - adapted| / 0.3` (so tokens near the adapted target peak), then
//! softmaxes and draws with `discrete_distribution` from its own generator. A negative `target`
//! turns the reshaping off: it just draws from the softmax.
//!
//! Design notes:
//! * The softmaxes do not sort, and the reshaping does not clear `sorted`. When the incoming array
//!   was sorted, the second softmax still takes `data[0]` as the max although the reshaped
//!   logits are no longer in order. The normalised p are the same either way, up to f32 rounding;
//!   llama.cpp does exactly this, so gauge does too.
//! * The EMA moves in `accept`, and only when the accepted token is the one `apply` just selected
//!   (a grammar or the caller may pick another). The original probabilities live in a buffer that
//!   is reused between steps.

use crate::candidates::{Candidates, TokenId};
use crate::ops::softmax_impl;
use crate::rng::{resolve_seed, Mt19937};
use crate::sampler::{Sampler, Shift};

const PEAK_LOGIT_VALUE: f32 = 5.0;
const SHARPNESS: f32 = 10.0;
/// llama.cpp multiplies by the f32 reciprocal of the width (0.3) rather than dividing by it.
const INV_WIDTH: f32 = 1.0 / 0.3;

/// The live adaptive-p stage.
#[derive(Clone, Debug)]
pub struct AdaptiveP {
    target: f32,
    decay: f32,
    seed: u32,
    rng: Mt19937,
    weighted_sum: f32,
    total_weight: f32,
    /// Softmax of the incoming set, before reshaping, for the EMA update in `accept`.
    original_probs: Vec<f32>,
    /// `(token id, index into original_probs)` of the token `apply` selected.
    pending: Option<(TokenId, usize)>,
}

impl AdaptiveP {
    /// The stage with `decay` clamped to [0, 0.99], the EMA primed at `target`, and its own
    /// generator seeded from `resolve_seed(seed)`.
    pub fn new(target: f32, decay: f32, seed: u32) -> Self {
        let decay = decay.clamp(0.0, 0.99);
        AdaptiveP {
            target,
            decay,
            seed,
            rng: Mt19937::new(resolve_seed(seed)),
            weighted_sum: target / (1.0 - decay),
            total_weight: 1.0 / (1.0 - decay),
            original_probs: Vec::new(),
            pending: None,
        }
    }

    /// The decay actually used (after the clamp).
    pub fn decay(&self) -> f32 {
        self.decay
    }

    /// The EMA of the selected tokens' original probabilities, `weighted_sum / total_weight`.
    pub fn ema(&self) -> f32 {
        self.weighted_sum / self.total_weight
    }

    /// The target this step aims at: `clamp(2*clamp(target, 0, 1) - ema, 0, 1)`.
    pub fn adapted_target(&self) -> f32 {
        let target = self.target.clamp(0.0, 1.0);
        let raw = if self.total_weight == 0.0 {
            target
        } else {
            2.0 * target - self.weighted_sum / self.total_weight
        };
        raw.clamp(0.0, 1.0)
    }
}

/// Build the stage as llama.cpp's init function does (adaptive-p has no placeholder form).
pub fn build(target: f32, decay: f32, seed: u32) -> Box<dyn Sampler> {
    Box::new(AdaptiveP::new(target, decay, seed))
}

impl Sampler for AdaptiveP {
    fn name(&self) -> &str {
        "adaptive-p"
    }

    fn apply(&mut self, cur: &mut Candidates) {
        // llama.cpp asserts here; an empty set has nothing to select.
        if cur.is_empty() {
            cur.selected = None;
            return;
        }
        softmax_impl(cur, false);
        if self.target < 0.0 {
            cur.selected = Some(self.rng.discrete(cur.as_slice().iter().map(|t| t.p)));
            return;
        }
        self.original_probs.clear();
        self.original_probs
            .extend(cur.as_slice().iter().map(|t| t.p));
        let adapted = self.adapted_target();
        for t in cur.as_mut_slice() {
            // Masked tokens stay masked.
            if t.logit == f32::NEG_INFINITY {
                continue;
            }
            let dist = ((t.p - adapted) * INV_WIDTH).abs();
            t.logit = PEAK_LOGIT_VALUE - SHARPNESS * dist * dist / (1.0 + dist);
        }
        softmax_impl(cur, false);
        let idx = self.rng.discrete(cur.as_slice().iter().map(|t| t.p));
        cur.selected = Some(idx);
        self.pending = Some((cur.as_slice()[idx].id, idx));
    }

    fn accept(&mut self, token: TokenId) {
        if let Some((id, idx)) = self.pending.take() {
            if id == token {
                self.weighted_sum = self.original_probs[idx] + self.decay * self.weighted_sum;
                self.total_weight = 1.0 + self.decay * self.total_weight;
            }
        }
    }

    fn reset(&mut self) {
        self.weighted_sum = self.target / (1.0 - self.decay);
        self.total_weight = 1.0 / (1.0 - self.decay);
        self.pending = None;
        self.rng = Mt19937::new(resolve_seed(self.seed));
    }

    /// Invariant: the reshaping and the draw depend only on softmax probabilities (and on which
    /// logits are -inf, which a finite shift does not change).
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}
