//! `xtc`: "exclude top choices", llama.cpp's `llama_sampler_init_xtc`.
//!
//! With probability `probability` per step, every token whose softmax probability is at least
//! `threshold` is removed except the least probable of them, so the model still has a plausible
//! continuation but not the most predictable one.
//!
//! Design notes (all are llama.cpp behaviours that change which token is drawn later):
//! * XTC owns its generator, an `Mt19937` seeded like dist's but separate from it. The coin is one
//!   `uniform_real_distribution<float>` draw (one 32-bit output). No draw is made when the stage is
//!   disabled or the set has fewer than 2 candidates, so those steps leave the stream untouched.
//! * When the coin passes, the whole current set is sorted and softmaxed, even if nothing ends up
//!   removed: later stages see a sorted array with fresh (not renormalised after removal) `p`.
//! * Removal drops entries from the front (llama.cpp advances its `data` pointer), via
//!   `Candidates::advance`; no copy.

use crate::candidates::Candidates;
use crate::ops::softmax_impl;
use crate::rng::{resolve_seed, Mt19937};
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// The live XTC stage (`build` returns `?xtc` instead when it is disabled).
#[derive(Clone, Debug)]
pub struct Xtc {
    probability: f32,
    threshold: f32,
    min_keep: usize,
    seed: u32,
    rng: Mt19937,
}

impl Xtc {
    /// The stage with its generator seeded from `resolve_seed(seed)`. Unlike [`build`] this never
    /// returns a placeholder; `apply` still does nothing for disabling parameters, as llama.cpp's does.
    pub fn new(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Self {
        Xtc {
            probability,
            threshold,
            min_keep,
            seed,
            rng: Mt19937::new(resolve_seed(seed)),
        }
    }
}

/// Build the stage as llama.cpp's init function does (a `?xtc` placeholder when disabled).
pub fn build(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Box<dyn Sampler> {
    if probability <= 0.0 || threshold > 0.5 {
        return Placeholder::boxed("?xtc");
    }
    Box::new(Xtc::new(probability, threshold, min_keep, seed))
}

impl Sampler for Xtc {
    fn name(&self) -> &str {
        "xtc"
    }

    fn apply(&mut self, cur: &mut Candidates) {
        // Checked before the coin: these cases must not consume a draw.
        if self.probability <= 0.0 || self.threshold > 0.5 || cur.len() < 2 {
            return;
        }
        let chance = self.rng.uniform_f32();
        if chance > self.probability {
            return;
        }
        softmax_impl(cur, true);
        // Last index of the leading run of tokens with p >= threshold; 0 if even the top is below.
        let mut pos_last = 0usize;
        for (i, t) in cur.as_slice().iter().enumerate() {
            if t.p >= self.threshold {
                pos_last = i;
            } else {
                break;
            }
        }
        if cur.len() - pos_last >= self.min_keep && pos_last > 0 {
            cur.advance(pos_last);
        }
    }

    fn reset(&mut self) {
        self.rng = Mt19937::new(resolve_seed(self.seed));
    }

    /// Invariant: it reads only softmax probabilities and logit order, both unchanged by a constant
    /// added to every logit.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}
