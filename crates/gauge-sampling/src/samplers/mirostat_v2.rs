//! `mirostat-v2`, llama.cpp's `llama_sampler_init_mirostat_v2`: a terminal sampler that keeps the
//! tokens whose surprise `-log2 p` is at most `mu`, draws from them, and moves `mu` toward the
//! target surprise `tau`.
//!
//! Each step: sort + softmax the whole set; cut at the first token (in descending order) with
//! `-log2f(p) > mu`, keeping at least one; softmax again over the survivors; draw with
//! `discrete_distribution` from the stage's own generator (no draw when one candidate is left);
//! `mu -= eta * (-log2f(p_drawn) - tau)` with the renormalised p. `mu` starts at `2 * tau`.
//! Only the surviving prefix is scanned for the cut, so the cost beyond the sort is O(kept).

use crate::candidates::Candidates;
use crate::ops::softmax_impl;
use crate::rng::{resolve_seed, Mt19937};
use crate::sampler::{Sampler, Shift};

/// The live mirostat v2 stage.
#[derive(Clone, Debug)]
pub struct MirostatV2 {
    seed: u32,
    tau: f32,
    eta: f32,
    mu: f32,
    rng: Mt19937,
}

impl MirostatV2 {
    /// The stage with `mu = 2 * tau` and its own generator seeded from `resolve_seed(seed)`.
    pub fn new(seed: u32, tau: f32, eta: f32) -> Self {
        MirostatV2 {
            seed,
            tau,
            eta,
            mu: 2.0 * tau,
            rng: Mt19937::new(resolve_seed(seed)),
        }
    }

    /// The current surprise limit `mu` (the feedback state).
    pub fn mu(&self) -> f32 {
        self.mu
    }
}

/// Build the stage as llama.cpp's init function does (mirostat-v2 has no placeholder form).
pub fn build(seed: u32, tau: f32, eta: f32) -> Box<dyn Sampler> {
    Box::new(MirostatV2::new(seed, tau, eta))
}

impl Sampler for MirostatV2 {
    fn name(&self) -> &str {
        "mirostat-v2"
    }

    fn apply(&mut self, cur: &mut Candidates) {
        // llama.cpp asserts here; an empty set has nothing to select.
        if cur.is_empty() {
            cur.selected = None;
            return;
        }
        softmax_impl(cur, true);
        let mu = self.mu;
        let keep = cur
            .as_slice()
            .iter()
            .position(|t| -t.p.log2() > mu)
            .unwrap_or(cur.len());
        cur.truncate(keep.max(1));
        softmax_impl(cur, true);
        let idx = self.rng.discrete(cur.as_slice().iter().map(|t| t.p));
        cur.selected = Some(idx);
        let observed_surprise = -cur.as_slice()[idx].p.log2();
        let e = observed_surprise - self.tau;
        self.mu -= self.eta * e;
    }

    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.rng = Mt19937::new(resolve_seed(self.seed));
    }

    /// Invariant: the cut, the draw and the update read only softmax probabilities and their order.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }

    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
