//! `mirostat-v2`, llama.cpp's `llama_sampler_init_mirostat_v2`: a terminal sampler that keeps the
//! tokens whose surprise `-log2 p` is at most `mu`, draws from them, and moves `mu` toward the
//! target surprise `tau`.
//!
//! Each step: sort + softmax the whole set; cut at the first token (in descending order) with
//! `-log2f(p) > mu`, keeping at least one; softmax again over the survivors; draw with
//! `discrete_distribution` from the stage's own generator (no draw when one candidate is left);
//! `mu -= eta * (-log2f(p_drawn) - tau)` with the renormalised p. `mu` starts at `2 * tau`.
//! Only the surviving prefix is scanned for the cut, so the cost beyond the sort is O(kept).
//!
//! # Fast path
//!
//! As the first dense stage (after `temp`, which the chain records as a pending division) the stage
//! reads the row directly: `SortedSoftmax` gives the exact f32 sum and the sorted top without
//! sorting the vocabulary, which is all the cut, the renormalisation and the draw read. The array
//! this prefix path leaves is exactly the slow path's: the kept prefix with its renormalised `p`.
//!
//! The prefix only pays while it is short. On a confident model's rows the drawn tokens' surprise
//! stays below `tau`, `mu` climbs, and after a few hundred steps the cut keeps the whole
//! vocabulary. So the stage estimates the cut from `max`, the sum and `mu`, extends the prefix to
//! it in one pass, and past `FULL_SORT_FRACTION` of the vocabulary draws without sorting
//! (`WideDraw` in `kernels::wide_draw`: the kept set by classification, the drawn token by
//! cumulative mass, settled in llama.cpp's summation order); while `mu` keeps growing it goes
//! there directly for a few steps. That path leaves only the drawn candidate in the array (as
//! `dist`'s row path does); whatever it cannot settle exactly (very rare) it declines, and the
//! chain fills and sorts once, as llama.cpp does.

use crate::candidates::{Candidates, TokenData, TokenId};
use crate::kernels::sorted_softmax::SortedSoftmax;
use crate::kernels::wide_draw::{Wide, WideDraw};
use crate::kernels::Scan;
use crate::ops::softmax_impl;
use crate::overlay::Overlay;
use crate::rng::{resolve_seed, Mt19937};
use crate::sampler::{FromRow, Sampler, Shift};

/// Past this fraction of the vocabulary kept, the sorted prefix stops and the wide path draws
/// (before it existed, the chain filled and sorted the whole row here, llama.cpp's cost). The
/// fraction was chosen against that full sort, on 49152-entry rows at temperature 0.8: on N(0, 3)
/// rows the prefix stays cheaper up to ~90% kept, on heavily tied rows (logits in quarter units)
/// only up to ~40%, and on the default model's rows 0.3-0.5 measure the same (docs/bench.md).
const FULL_SORT_FRACTION: f64 = 0.5;

/// Steps that go straight to the wide path after a too-deep cut while `mu` does not drop (a
/// retry every `WIDE_SKIPS + 1` steps bounds the cost of a wrong guess, e.g. rows whose tail is
/// banned).
const WIDE_SKIPS: u32 = 7;

/// Nats below the estimated cut that the prefix is extended to, so that f32 rounding in the
/// estimate rarely leaves the cut just outside it (the cut itself is exact either way).
const CUT_MARGIN: f32 = 0.01;

/// The live mirostat v2 stage.
#[derive(Clone, Debug)]
pub struct MirostatV2 {
    seed: u32,
    tau: f32,
    eta: f32,
    mu: f32,
    rng: Mt19937,
    /// Scratch of the row fast path, reused across steps.
    soft: SortedSoftmax,
    /// Scratch of the wide path (a cut deeper than the prefix should hold).
    wide: WideDraw,
    /// `mu` when the fast path last found the cut too deep (`+inf`: it did not). While `mu` has
    /// not dropped below it the cut is almost surely as deep again (`mu` only grows on the
    /// confident rows that cause this), so up to `WIDE_SKIPS` steps go straight to the wide path
    /// without paying for the prefix's pass first.
    wide_mu: f32,
    wide_skips: u32,
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
            soft: SortedSoftmax::default(),
            wide: WideDraw::default(),
            wide_mu: f32::INFINITY,
            wide_skips: 0,
        }
    }

    /// The current surprise limit `mu` (the feedback state).
    pub fn mu(&self) -> f32 {
        self.mu
    }

    /// How many entries the cut keeps (at least one) for a given sum; `None` if the sorted prefix
    /// cannot be extended far enough.
    fn cut_for(&mut self, row: &[f32], ov: &Overlay, sum: f32) -> Option<usize> {
        let mut i = 0;
        loop {
            if !self.soft.ensure_len(row, ov, i + 1) {
                return (self.soft.sorted().len() == row.len()).then_some(i.max(1));
            }
            let p = self.soft.sorted()[i].e / sum;
            if -p.log2() > self.mu {
                return Some(i.max(1));
            }
            i += 1;
        }
    }

    /// Draw from the renormalised kept set and move `mu` (the slow and prefix paths end here).
    fn draw(&mut self, cur: &mut Candidates) {
        let idx = self.rng.discrete(cur.as_slice().iter().map(|t| t.p));
        cur.selected = Some(idx);
        self.update_mu(cur.as_slice()[idx].p);
    }

    /// `mu -= eta * (-log2f(p) - tau)` for the drawn token's renormalised `p`.
    fn update_mu(&mut self, p: f32) {
        let observed_surprise = -p.log2();
        let e = observed_surprise - self.tau;
        self.mu -= self.eta * e;
    }

    /// The fast path once the sorted prefix reaches the cut: settle the cut exactly, fix the
    /// order of the kept prefix and leave it, renormalised, as the slow path does.
    fn apply_prefix(&mut self, row: &[f32], ov: &Overlay, cur: &mut Candidates) -> FromRow {
        // the cut: first entry (descending) with -log2(p) > mu, p = e / sum as softmax_impl stores
        // it; while a few half-unit entries leave the sum's last bits open, every candidate sum
        // must give the same cut
        let Some(mut keep) = self.cut_for(row, ov, self.soft.sum_candidate(0)) else {
            return FromRow::Declined;
        };
        for j in 1..self.soft.n_sum_candidates() {
            if self.cut_for(row, ov, self.soft.sum_candidate(j)) != Some(keep) {
                let exact = match self
                    .soft
                    .resolve_sum(row, ov)
                    .then(|| self.soft.sum())
                    .flatten()
                {
                    Some(s) => s,
                    None => return FromRow::Declined,
                };
                match self.cut_for(row, ov, exact) {
                    Some(k) => keep = k,
                    None => return FromRow::Declined,
                }
                break;
            }
        }
        if !self.soft.fix_order(row, ov, keep) {
            return FromRow::Declined;
        }
        self.soft.write_softmax_of_prefix(keep, cur);
        self.draw(cur);
        FromRow::Done
    }

    /// The fast path when the cut keeps more than the prefix should hold ([`WideDraw`]): only
    /// the drawn candidate is left in `cur` (with its renormalised `p`), as `dist`'s row path
    /// leaves it.
    fn apply_wide(&mut self, row: &[f32], ov: &Overlay, cur: &mut Candidates) -> Wide {
        if !self.soft.resolve_sum(row, ov) {
            return Wide::Declined;
        }
        let res = self
            .wide
            .draw(row, ov, &mut self.soft, self.mu, &mut self.rng);
        if let Wide::Drawn(d) = res {
            cur.set_data(
                [TokenData {
                    id: d.id as TokenId,
                    logit: d.v,
                    p: d.p,
                }],
                true,
            );
            cur.selected = Some(0);
            self.update_mu(d.p);
            #[cfg(feature = "testing")]
            crate::chain::testing::count(|c| c.wide_draws += 1);
        }
        res
    }
}

impl From<Wide> for FromRow {
    fn from(w: Wide) -> FromRow {
        match w {
            Wide::Drawn(_) => FromRow::Done,
            Wide::Shallow | Wide::Declined => FromRow::Declined,
        }
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
        self.draw(cur);
    }

    /// The same step from "row + overlay" without sorting the vocabulary (see the module docs).
    fn apply_from_row(&mut self, row: &[f32], ov: &Overlay, cur: &mut Candidates) -> FromRow {
        match self.soft.run(row, ov) {
            Scan::Done => {}
            Scan::Ambiguous => return FromRow::Declined,
            Scan::Invalid => return FromRow::Invalid,
        }
        // While mu has not dropped since the prefix was last too deep, go straight to the wide
        // path (retrying the prefix every `WIDE_SKIPS + 1` steps).
        if self.mu >= self.wide_mu && self.wide_skips < WIDE_SKIPS {
            self.wide_skips += 1;
            match self.apply_wide(row, ov, cur) {
                Wide::Shallow => {}
                done_or_declined => return done_or_declined.into(),
            }
        }
        // Where the cut will fall: p >= 2^-mu means v >= max + ln(sum) - mu·ln 2. Extend to just
        // below that in one pass; if that keeps too much of the vocabulary, the wide path draws.
        let n = row.len();
        let lo = self.soft.max() + self.soft.sum_candidate(0).ln()
            - self.mu * std::f32::consts::LN_2
            - CUT_MARGIN;
        let cap = (n as f64 * FULL_SORT_FRACTION) as usize;
        if !self.soft.extend_to(row, ov, lo, cap) {
            self.wide_mu = self.mu;
            self.wide_skips = 0;
            return match self.apply_wide(row, ov, cur) {
                Wide::Shallow => FromRow::Declined,
                other => other.into(),
            };
        }
        self.wide_mu = f32::INFINITY;
        self.apply_prefix(row, ov, cur)
    }

    fn explain_state(&self) -> Vec<(&'static str, f32)> {
        vec![("mu", self.mu)]
    }

    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.wide_mu = f32::INFINITY;
        self.wide_skips = 0;
        self.rng = Mt19937::new(resolve_seed(self.seed));
    }

    /// Invariant: the cut, the draw and the update read only softmax probabilities and their order.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}
