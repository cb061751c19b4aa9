//! `dist`: draw one candidate from the softmax, llama.cpp's default terminal sampler
//! (`llama_sampler_init_dist(seed)`).
//!
//! Exactness matters here more than anywhere, because this is where a seed turns into a token:
//! * weights are the **unnormalised** f32 `expf(l - max)` (max = `data[0]` when sorted), summed in
//!   **f64** in array order;
//! * one `uniform_real_distribution<double>` draw (two mt19937 outputs, libstdc++'s layout);
//! * the first index, **in array order**, whose running f64 sum reaches `sum * rnd` is selected, so
//!   the same distribution in a different order gives a different token (docs/SPEC.md §6.2–6.3);
//! * a single candidate **still consumes a draw** (llama.cpp keeps the RNG aligned with backend
//!   sampling), an empty array consumes none and selects nothing;
//! * `p` becomes `p / sum` (f64 division, stored f32).
//!
//! `reset` reseeds from the configured seed (`0xFFFFFFFF` = a fresh random seed each time).
//!
//! On the chain's row fast path (dist as the first dense stage: a temperature-only chain) the stage
//! reads "row + overlay" directly: the same `expf` weights and f64 sums in the same order, but no
//! filled array and no normalisation pass over it. The array left behind holds only the selected
//! candidate, with its `p`, as greedy's does.

use crate::candidates::{Candidates, TokenData, TokenId};
use crate::kernels::reduce::{current_max, exp_weights};
use crate::ops::max_logit;
use crate::overlay::Overlay;
use crate::rng::{resolve_seed, Mt19937};
use crate::sampler::{FromRow, Sampler, Shift};

/// Seeded categorical draw from the softmax of the current candidates.
#[derive(Clone, Debug)]
pub struct Dist {
    seed: u32,
    seed_cur: u32,
    rng: Mt19937,
    /// The weights of the row fast path, reused across steps.
    weights: Vec<f32>,
}

impl Dist {
    /// A dist stage seeded as llama.cpp seeds it (`seed` 0xFFFFFFFF picks a random seed).
    pub fn new(seed: u32) -> Self {
        let seed_cur = resolve_seed(seed);
        Self {
            seed,
            seed_cur,
            rng: Mt19937::new(seed_cur),
            weights: Vec::new(),
        }
    }

    /// The seed actually in use (llama.cpp `llama_sampler_get_seed`).
    pub fn current_seed(&self) -> u32 {
        self.seed_cur
    }
}

/// Build the stage (dist has no placeholder form).
pub fn build(seed: u32) -> Box<dyn Sampler> {
    Box::new(Dist::new(seed))
}

impl Sampler for Dist {
    fn name(&self) -> &str {
        "dist"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.is_empty() {
            cur.selected = None;
            return;
        }
        cur.selected = Some(0);
        if cur.len() == 1 {
            let _ = self.rng.uniform_f64();
            cur.as_mut_slice()[0].p = 1.0;
            return;
        }
        let sorted = cur.sorted;
        let s = cur.as_mut_slice();
        let max_l = if sorted { s[0].logit } else { max_logit(s) };
        let mut sum_cum = 0.0f64;
        for t in s.iter_mut() {
            let p = (t.logit - max_l).exp();
            t.p = p;
            sum_cum += p as f64;
        }
        let rnd = self.rng.uniform_f64();
        let sum_tgt = sum_cum * rnd;
        let mut sum_run = 0.0f64;
        let mut found = None;
        for (i, t) in s.iter_mut().enumerate() {
            if found.is_none() {
                sum_run += t.p as f64;
                if sum_run >= sum_tgt {
                    found = Some(i);
                }
            }
            t.p = (t.p as f64 / sum_cum) as f32;
        }
        cur.selected = Some(found.unwrap_or(cur.len() - 1));
    }
    /// The same draw from "row + overlay" (see the module docs).
    fn apply_from_row(&mut self, row: &[f32], ov: &Overlay, cur: &mut Candidates) -> FromRow {
        if row.len() < 2 {
            return FromRow::Declined;
        }
        let max = match current_max(row, ov) {
            None => return FromRow::Invalid,
            // all -inf: the slow path reproduces whatever llama.cpp's NaN weights do
            Some(m) if m == f32::NEG_INFINITY => return FromRow::Declined,
            Some(m) => m,
        };
        let sum_cum = exp_weights(row, ov, max, &mut self.weights);
        let rnd = self.rng.uniform_f64();
        let sum_tgt = sum_cum * rnd;
        let mut sum_run = 0.0f64;
        let mut found = self.weights.len() - 1;
        for (i, &p) in self.weights.iter().enumerate() {
            sum_run += p as f64;
            if sum_run >= sum_tgt {
                found = i;
                break;
            }
        }
        let p = (self.weights[found] as f64 / sum_cum) as f32;
        cur.set_data(
            [TokenData {
                id: found as TokenId,
                logit: ov.get(row, found),
                p,
            }],
            false,
        );
        cur.selected = Some(0);
        FromRow::Done
    }
    fn reset(&mut self) {
        self.seed_cur = resolve_seed(self.seed);
        self.rng = Mt19937::new(self.seed_cur);
    }
    /// Invariant as a distribution: softmax ignores a common shift (up to f32 rounding of the
    /// shifted logits). The seeded pick also depends on array order, which is shift-independent
    /// except for the order of exactly tied logits after a bucket sort.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_selects_nothing_and_draws_nothing() {
        let mut d = Dist::new(7);
        let mut c = Candidates::new();
        d.apply(&mut c);
        assert_eq!(c.selected, None);
        let mut fresh = Mt19937::new(7);
        assert_eq!(
            d.rng.next_u32(),
            fresh.next_u32(),
            "no draw on an empty array"
        );
    }

    #[test]
    fn size_one_consumes_two_outputs_and_sets_p_one() {
        let mut d = Dist::new(7);
        let mut c = Candidates::from_logits(&[-3.0]);
        d.apply(&mut c);
        assert_eq!(c.selected, Some(0));
        assert_eq!(c.as_slice()[0].p, 1.0);
        let mut fresh = Mt19937::new(7);
        fresh.next_u32();
        fresh.next_u32();
        assert_eq!(d.rng.next_u32(), fresh.next_u32());
    }

    #[test]
    fn probabilities_are_normalised() {
        let mut c = Candidates::from_logits(&[0.0, 1.0, 2.0, f32::NEG_INFINITY]);
        build(1).apply(&mut c);
        let sum: f32 = c.as_slice().iter().map(|t| t.p).sum();
        assert!((sum - 1.0).abs() < 1e-6);
        assert_eq!(c.as_slice()[3].p, 0.0);
        assert_ne!(c.selected, Some(3), "a -inf candidate has weight 0");
    }

    #[test]
    fn reset_replays_the_same_draws() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let mut d = Dist::new(123);
        let picks = |d: &mut Dist| {
            (0..5)
                .map(|_| {
                    let mut c = Candidates::from_logits(&logits);
                    d.apply(&mut c);
                    c.selected
                })
                .collect::<Vec<_>>()
        };
        let a = picks(&mut d);
        d.reset();
        assert_eq!(picks(&mut d), a);
    }
}
