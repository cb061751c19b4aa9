//! Per-position facts of the HumanEval instrumentation (docs/PROTOCOL.md §5.1), read off the fp32
//! pre-penalty row before the step's token joins the seen set.
//!
//! One O(V) pass per (sequence, step) serves every run sharing the sequence: the facts depend on
//! the row and the seen set only, and runs share a sequence exactly when their histories agree.
//! The pass finds
//! * `top1`: the first index of the maximum — the same tie rule as the emitted greedy choice, so
//!   ties cannot fake flips at θ = 1 (the note's bf16 topk-vs-argmax lesson);
//! * `runner`: the first index of the maximum over every other token (= argmax with top1 set to
//!   −inf);
//! * `unseen`: the first index of the maximum over tokens NOT in the seen set — the only token a
//!   penalty can promote (gauge's two-sided predictor, [`super::predict`]);
//! * `lse`: `ln Σ exp(z_i − z_top)`, summed by the `normalized` operator's own function
//!   (gauge-sampling's `max_log_sum_exp`), so the normalized log-probability of token i is
//!   `(z_i − z_top) − lse` up to the final f32 rounding.

use crate::ops::SeenSet;
use gauge_sampling::samplers::penalties::max_log_sum_exp;
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};

/// Facts of one row with one seen set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowFacts {
    pub top1: TokenId,
    pub z_top: f32,
    /// −1 for a one-token row.
    pub runner: TokenId,
    pub z2: f32,
    pub top1_seen: bool,
    pub top2_seen: bool,
    /// Best unseen token (−1 when every token is seen).
    pub unseen: TokenId,
    pub z_unseen: f32,
    pub lse: f32,
}

/// The facts of `row` (non-empty) against `seen`.
pub fn row_facts(row: &[f32], seen: &SeenSet) -> RowFacts {
    let mut best: (usize, f32) = (0, row.first().copied().unwrap_or(f32::NEG_INFINITY));
    let mut second: Option<(usize, f32)> = None;
    let mut unseen: Option<(usize, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if i > 0 {
            if v > best.1 {
                second = Some(best);
                best = (i, v);
            } else if second.is_none_or(|(_, s)| v > s) {
                second = Some((i, v));
            }
        }
        if !seen.contains(i as TokenId) && unseen.is_none_or(|(_, u)| v > u) {
            unseen = Some((i, v));
        }
    }
    let lse = max_log_sum_exp(row, 0.0).1 as f32;
    // Absent tokens carry the value 0 (never read: their id is −1).
    let (runner, z2) = second.map_or((-1, 0.0), |(i, v)| (i as TokenId, v));
    let (u, zu) = unseen.map_or((-1, 0.0), |(i, v)| (i as TokenId, v));
    RowFacts {
        top1: best.0 as TokenId,
        z_top: best.1,
        runner,
        z2,
        top1_seen: seen.contains(best.0 as TokenId),
        top2_seen: runner >= 0 && seen.contains(runner),
        unseen: u,
        z_unseen: zu,
        lse,
    }
}

fn finite(v: f32) -> f32 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(f32::MIN, f32::MAX)
    }
}

/// The position log of one run: one entry per generated token, stored column-wise (compact JSON,
/// cheap appends). `emitted[k]` is the token the run chose at step k.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Positions {
    pub top1: Vec<TokenId>,
    pub z_top: Vec<f32>,
    pub runner: Vec<TokenId>,
    pub z2: Vec<f32>,
    pub top1_seen: Vec<bool>,
    pub top2_seen: Vec<bool>,
    pub unseen: Vec<TokenId>,
    pub z_unseen: Vec<f32>,
    pub lse: Vec<f32>,
    pub emitted: Vec<TokenId>,
}

impl Positions {
    /// An empty log with room for `n` positions.
    pub fn with_capacity(n: usize) -> Self {
        Positions {
            top1: Vec::with_capacity(n),
            z_top: Vec::with_capacity(n),
            runner: Vec::with_capacity(n),
            z2: Vec::with_capacity(n),
            top1_seen: Vec::with_capacity(n),
            top2_seen: Vec::with_capacity(n),
            unseen: Vec::with_capacity(n),
            z_unseen: Vec::with_capacity(n),
            lse: Vec::with_capacity(n),
            emitted: Vec::with_capacity(n),
        }
    }

    /// Append one position. Non-finite values are stored clamped to finite ones (JSON has no
    /// infinities; model rows never hold them).
    pub fn push(&mut self, f: &RowFacts, emitted: TokenId) {
        self.top1.push(f.top1);
        self.z_top.push(finite(f.z_top));
        self.runner.push(f.runner);
        self.z2.push(finite(f.z2));
        self.top1_seen.push(f.top1_seen);
        self.top2_seen.push(f.top2_seen);
        self.unseen.push(f.unseen);
        self.z_unseen.push(finite(f.z_unseen));
        self.lse.push(finite(f.lse));
        self.emitted.push(emitted);
    }

    /// Number of positions.
    pub fn len(&self) -> usize {
        self.top1.len()
    }

    /// No positions.
    pub fn is_empty(&self) -> bool {
        self.top1.is_empty()
    }

    /// Every column has the same length.
    pub fn is_consistent(&self) -> bool {
        let n = self.top1.len();
        [
            self.z_top.len(),
            self.runner.len(),
            self.z2.len(),
            self.top1_seen.len(),
            self.top2_seen.len(),
            self.unseen.len(),
            self.z_unseen.len(),
            self.lse.len(),
            self.emitted.len(),
        ]
        .iter()
        .all(|&m| m == n)
    }

    /// The facts of position `k`.
    pub fn facts(&self, k: usize) -> RowFacts {
        RowFacts {
            top1: self.top1[k],
            z_top: self.z_top[k],
            runner: self.runner[k],
            z2: self.z2[k],
            top1_seen: self.top1_seen[k],
            top2_seen: self.top2_seen[k],
            unseen: self.unseen[k],
            z_unseen: self.z_unseen[k],
            lse: self.lse[k],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(n: usize, ids: &[TokenId]) -> SeenSet {
        let mut s = SeenSet::new(n, None);
        for &t in ids {
            s.accept(t);
        }
        s
    }

    #[test]
    fn top1_and_runner_up_take_the_first_of_ties() {
        let f = row_facts(&[5.0, 3.0, 5.0, 1.0], &seen(4, &[]));
        assert_eq!((f.top1, f.z_top, f.runner, f.z2), (0, 5.0, 2, 5.0));
        let f = row_facts(&[3.0, 5.0, 3.0], &seen(3, &[]));
        assert_eq!((f.top1, f.runner, f.z2), (1, 0, 3.0));
        let f = row_facts(&[1.0, 2.0, 9.0, 4.0, 4.0], &seen(5, &[]));
        assert_eq!((f.top1, f.runner), (2, 3));
    }

    #[test]
    fn best_unseen_skips_seen_tokens_and_seen_flags_follow_the_set() {
        let f = row_facts(&[9.0, 8.0, 7.0, 7.0], &seen(4, &[0, 1]));
        assert_eq!((f.top1, f.runner), (0, 1));
        assert!(f.top1_seen && f.top2_seen);
        assert_eq!((f.unseen, f.z_unseen), (2, 7.0));
        let all = row_facts(&[1.0, 2.0], &seen(2, &[0, 1]));
        assert_eq!((all.unseen, all.z_unseen), (-1, 0.0));
        let one = row_facts(&[1.0], &seen(1, &[]));
        assert_eq!((one.runner, one.top2_seen), (-1, false));
    }

    #[test]
    fn lse_is_the_log_partition_relative_to_the_top_logit() {
        // two equal logits: ln(1 + 1) = ln 2
        let f = row_facts(&[0.5, 0.5], &seen(2, &[]));
        assert!((f.lse - std::f32::consts::LN_2).abs() < 1e-6);
    }

    #[test]
    fn positions_round_trip_through_json() {
        let mut p = Positions::with_capacity(2);
        let f = row_facts(&[1.0, 3.0, 2.0], &seen(3, &[1]));
        p.push(&f, 2);
        p.push(&f, 1);
        assert!(p.is_consistent());
        let q: Positions = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(p, q);
        assert_eq!(q.facts(1), f);
    }
}
