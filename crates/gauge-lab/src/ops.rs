//! The note's penalty operators applied directly to full logit rows, and greedy decisions on them.
//!
//! Order of operations for one run at one step (docs/PROTOCOL.md §2): gauge shift `y = z + c` on every
//! entry (fp32), then for `normalized` a log-softmax over the whole row, then the penalty on the
//! seen set, then greedy = the FIRST index of the maximum.
//!
//! The operators themselves are gauge-sampling's (`samplers::penalties`: [`penalize_seen`], the
//! log-sum-exp and the log-probability), the code users run; this module only maps the note's
//! three operators onto them and decides greedily on full rows:
//! * `ctrl`: `y <= 0 ? y·θ : y/θ` (llama.cpp's boundary; HF's `< 0` gives the same numbers since 0 is
//!   a fixed point).
//! * `normalized`: `ℓ = log_softmax(y)`, then `ℓ·θ` (every `ℓ <= 0`).
//! * `subtractive`: `y − α` (a presence penalty with a fixed α).
//!
//! θ = 1 switches every penalty off (the validity gate). For `subtractive` θ only acts as that
//! switch: its strength is α, as in the note, which ran it as a single control.
//!
//! Two implementations with bit-identical results:
//! * [`apply_row`] + [`argmax_first`] materialise the penalised row: the readable reference, used
//!   by the unshared naive probe and by tests.
//! * [`ShiftEval`] + [`ShiftEval::pick`]: what the probe uses. The penalty only touches seen tokens,
//!   so the unseen part of a shifted row is summarised once per (sequence, c) — best unseen index,
//!   and for `normalized` the log-sum-exp — and each run then only walks its seen set: O(V) per
//!   distinct shift instead of O(V) per run. Exactness (including first-index ties created by fp
//!   rounding of the shift or of the normalisation) is what the validity gate measures, so the
//!   fast path must not round differently from the reference; tests compare the two on adversarial
//!   rows.

use gauge_sampling::samplers::penalties::{
    log_softmax_inplace, max_log_sum_exp, penalize_seen, shifted_log_prob, PenaltyMode,
};
use gauge_sampling::TokenId;
use serde::{Deserialize, Serialize};

/// A penalty operator of the note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Sign-branched multiplicative penalty on raw logits (CTRL / HF / llama.cpp `repeat_penalty`).
    Ctrl,
    /// Log-softmax first, then the multiplicative penalty: shift-invariant by construction.
    Normalized,
    /// Subtract α from every seen logit (presence penalty): shift-invariant.
    Subtractive,
    /// Test only: a deliberately gauge-dependent op (adds `c`-dependent noise even at θ = 1) so the
    /// validity gate can be seen to fail.
    #[cfg(test)]
    #[serde(rename = "test_noise")]
    TestNoise,
}

impl Op {
    /// The three operators of the note, in the note's order.
    pub const ALL: [Op; 3] = [Op::Ctrl, Op::Normalized, Op::Subtractive];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Op::Ctrl => "ctrl",
            Op::Normalized => "normalized",
            Op::Subtractive => "subtractive",
            #[cfg(test)]
            Op::TestNoise => "test_noise",
        }
    }

    /// Parse a command-line name.
    pub fn parse(s: &str) -> Option<Op> {
        match s.trim() {
            "ctrl" => Some(Op::Ctrl),
            "normalized" => Some(Op::Normalized),
            "subtractive" => Some(Op::Subtractive),
            _ => None,
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One run's operator: which op, at which θ, with which α.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Penalty {
    pub op: Op,
    pub theta: f32,
    pub alpha: f32,
}

impl Penalty {
    /// θ = 1 switches the penalty off (the protocol skips it entirely).
    pub fn is_off(&self) -> bool {
        self.theta == 1.0
    }

    /// The `penalties` stage this run asks every stack for (gauge's request fields): the one
    /// operator → settings map, which gauge's decode, the llama.cpp driver and the Python engines
    /// (through `gauge_sampling._native.op_stage`) all read.
    pub fn stage(&self) -> StageSettings {
        let (repeat_penalty, mode, presence_penalty) = match self.op {
            _ if self.is_off() => (1.0, PenaltyMode::Ctrl, 0.0),
            Op::Ctrl => (self.theta, PenaltyMode::Ctrl, 0.0),
            Op::Normalized => (self.theta, PenaltyMode::Normalized, 0.0),
            Op::Subtractive => (1.0, PenaltyMode::Ctrl, self.alpha),
            #[cfg(test)]
            Op::TestNoise => (1.0, PenaltyMode::Ctrl, 0.0),
        };
        StageSettings {
            repeat_penalty,
            mode,
            presence_penalty,
        }
    }

    /// The penalised value of a seen token whose (shifted, maybe normalised) value is `v`: the
    /// sampling library's `penalties` stage with this run's settings (every seen token counted
    /// once, no frequency penalty).
    #[inline]
    fn seen_value(&self, v: f32) -> f32 {
        if self.is_off() {
            return v;
        }
        let s = self.stage();
        penalize_seen(s.mode, v, s.repeat_penalty, 1, 0.0, s.presence_penalty)
    }
}

/// A `penalties` stage's settings, in gauge's request-field terms (`repeat_penalty`,
/// `repeat_penalty_mode`, `presence_penalty`; the seen set is the run's, no frequency penalty).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageSettings {
    /// θ (1 = off).
    pub repeat_penalty: f32,
    /// ctrl (on raw logits) or normalized (on log-probabilities).
    pub mode: PenaltyMode,
    /// Subtracted once from every seen token.
    pub presence_penalty: f32,
}

/// `y` shifted by `c` on the fly, without a buffer.
#[inline]
fn shifted(z: &[f32], c: f32, i: usize) -> f32 {
    z[i] + c
}

/// Reference: write the penalised row of `z` under shift `c` into `out`.
/// `seen` lists distinct token ids (the seen set).
pub fn apply_row(z: &[f32], c: f32, pen: &Penalty, seen: &[TokenId], out: &mut Vec<f32>) {
    out.clear();
    out.extend(z.iter().map(|&v| v + c));
    if pen.op == Op::Normalized {
        log_softmax_inplace(out);
    }
    #[cfg(test)]
    if pen.op == Op::TestNoise {
        for (i, v) in out.iter_mut().enumerate() {
            *v += c * 0.5 * unit_noise(i);
        }
        return;
    }
    if pen.is_off() {
        return;
    }
    for &t in seen {
        if let Some(v) = out.get_mut(t as usize) {
            *v = pen.seen_value(*v);
        }
    }
}

/// Deterministic noise in [0, 1) per index, for the test-only op.
#[cfg(test)]
fn unit_noise(i: usize) -> f32 {
    let h = crate::testing::splitmix64(i as u64 ^ 0x5eed);
    (h >> 40) as f32 / (1u64 << 24) as f32
}

/// Greedy: the first index of the maximum (torch `argmax` / llama.cpp greedy tie rule).
/// `None` for an empty row.
pub fn argmax_first(y: &[f32]) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in y.iter().enumerate() {
        // NaN never wins, except as the first entry (a plain first-max scan).
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

/// The seen set S of one sequence: prompt + generated tokens, membership only, optionally limited to
/// the last `window` tokens of the history (llama.cpp's ring buffer).
///
/// A bitset answers "is token i seen" in the O(V) scan; a member list lets penalties walk S in
/// O(|S|).
#[derive(Debug, Clone)]
pub struct SeenSet {
    n_vocab: usize,
    bits: Vec<u64>,
    members: Vec<TokenId>,
    window: Option<Window>,
}

#[derive(Debug, Clone)]
struct Window {
    cap: usize,
    ring: std::collections::VecDeque<TokenId>,
    /// token -> (count in window, index in `members`)
    counts: std::collections::HashMap<TokenId, (u32, usize)>,
}

impl SeenSet {
    /// An empty set for a vocabulary of `n_vocab` ids; `window = None` is the note's "no window".
    pub fn new(n_vocab: usize, window: Option<usize>) -> Self {
        SeenSet {
            n_vocab,
            bits: vec![0; n_vocab.div_ceil(64)],
            members: Vec::new(),
            window: window.map(|cap| Window {
                cap,
                ring: std::collections::VecDeque::with_capacity(cap.min(1 << 16)),
                counts: std::collections::HashMap::new(),
            }),
        }
    }

    /// Is `t` in the set?
    #[inline]
    pub fn contains(&self, t: TokenId) -> bool {
        let i = t as usize;
        self.bits
            .get(i / 64)
            .is_some_and(|w| (w >> (i % 64)) & 1 == 1)
    }

    /// The distinct members, in no particular order.
    pub fn members(&self) -> &[TokenId] {
        &self.members
    }

    /// Number of distinct members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when nothing is seen.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn set_bit(&mut self, t: TokenId, on: bool) {
        let i = t as usize;
        if let Some(w) = self.bits.get_mut(i / 64) {
            if on {
                *w |= 1 << (i % 64);
            } else {
                *w &= !(1 << (i % 64));
            }
        }
    }

    /// Append a token to the history (ids outside the vocabulary are ignored).
    pub fn accept(&mut self, t: TokenId) {
        if t < 0 || t as usize >= self.n_vocab {
            return;
        }
        match self.window.as_mut() {
            None => {
                if !self.contains(t) {
                    self.set_bit(t, true);
                    self.members.push(t);
                }
            }
            Some(w) => {
                if w.cap == 0 {
                    return;
                }
                let mut removed = None;
                if w.ring.len() == w.cap {
                    if let Some(old) = w.ring.pop_front() {
                        if let Some(e) = w.counts.get_mut(&old) {
                            e.0 -= 1;
                            if e.0 == 0 {
                                removed = Some((old, e.1));
                                w.counts.remove(&old);
                            }
                        }
                    }
                }
                if let Some((old, pos)) = removed {
                    self.members.swap_remove(pos);
                    if let Some(&moved) = self.members.get(pos) {
                        if let Some(e) = w.counts.get_mut(&moved) {
                            e.1 = pos;
                        }
                    }
                    let i = old as usize;
                    self.bits[i / 64] &= !(1 << (i % 64));
                }
                w.ring.push_back(t);
                let n = self.members.len();
                let e = w.counts.entry(t).or_insert((0, n));
                e.0 += 1;
                if e.0 == 1 {
                    self.members.push(t);
                    self.set_bit(t, true);
                }
            }
        }
    }

    /// Bit word `k` of the membership bitset.
    #[inline]
    fn word(&self, k: usize) -> u64 {
        self.bits.get(k).copied().unwrap_or(0)
    }
}

/// The unseen part of one row under one shift `c`, summarised so every run sharing the row and the
/// shift decides in O(|S|).
#[derive(Debug, Clone, Copy)]
pub struct ShiftEval {
    /// The shift.
    pub c: f32,
    /// max over the whole shifted row.
    pub max_all: f32,
    /// First index of the max of `y` over unseen tokens (and its value).
    unseen_best: Option<(usize, f32)>,
    /// For `normalized`: log-sum-exp `L` and the first unseen index of the max of `ℓ`.
    norm: Option<(f64, Option<(usize, f32)>)>,
}

impl ShiftEval {
    /// Summarise `z + c` against `seen`; `with_norm` also computes the log-softmax pieces.
    pub fn new(z: &[f32], c: f32, seen: &SeenSet, with_norm: bool) -> Self {
        let mut max_all = f32::NEG_INFINITY;
        let mut have_max = false;
        let mut best: Option<(usize, f32)> = None;
        for (k, chunk) in z.chunks(64).enumerate() {
            let word = seen.word(k);
            let base = k * 64;
            for (j, &zv) in chunk.iter().enumerate() {
                let y = zv + c;
                if !have_max || y > max_all {
                    max_all = y;
                    have_max = true;
                }
                if (word >> j) & 1 == 0 && best.is_none_or(|(_, b)| y > b) {
                    best = Some((base + j, y));
                }
            }
        }
        // A row without a finite max has no log-probabilities: the reference leaves it raw.
        let norm = if with_norm && max_all.is_finite() {
            let (_, l) = max_log_sum_exp(z, c);
            let g = |y: f32| shifted_log_prob(y, max_all, l);
            // ℓ is monotone in y, so the unseen max of ℓ is at the unseen max of y, except that
            // rounding may merge an earlier, slightly smaller y into the same ℓ: the first such
            // index wins, as in the reference scan.
            let nb = best.map(|(ib, yb)| {
                let gb = g(yb);
                let mut win = ib;
                for i in 0..ib {
                    if !seen.contains(i as TokenId) && g(shifted(z, c, i)) == gb {
                        win = i;
                        break;
                    }
                }
                (win, gb)
            });
            Some((l, nb))
        } else {
            None
        };
        ShiftEval {
            c,
            max_all,
            unseen_best: best,
            norm,
        }
    }

    /// The greedy token of run `pen` on row `z` with this shift and seen set, identical to
    /// `argmax_first(apply_row(..))`.
    ///
    /// Panics never; returns `None` only for an empty row. `pen.op == Normalized` requires the
    /// eval to be built `with_norm` (otherwise falls back to the raw values, which the probe never
    /// asks for).
    pub fn pick(&self, z: &[f32], pen: &Penalty, seen: &SeenSet) -> Option<usize> {
        let (start, norm_l) = match (pen.op, self.norm) {
            (Op::Normalized, Some((l, nb))) => (nb, Some(l)),
            _ => (self.unseen_best, None),
        };
        let mut best = start;
        for &t in seen.members() {
            let i = t as usize;
            let Some(&zv) = z.get(i) else { continue };
            let mut v = zv + self.c;
            if let Some(l) = norm_l {
                v = shifted_log_prob(v, self.max_all, l);
            }
            let v = pen.seen_value(v);
            best = match best {
                None => Some((i, v)),
                Some((bi, bv)) => {
                    if v > bv || (v == bv && i < bi) {
                        Some((i, v))
                    } else {
                        Some((bi, bv))
                    }
                }
            };
        }
        best.map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::splitmix64;

    fn seen_of(n: usize, ids: &[TokenId], window: Option<usize>) -> SeenSet {
        let mut s = SeenSet::new(n, window);
        for &t in ids {
            s.accept(t);
        }
        s
    }

    fn reference_pick(z: &[f32], c: f32, pen: &Penalty, seen: &SeenSet) -> usize {
        let mut out = Vec::new();
        apply_row(z, c, pen, seen.members(), &mut out);
        argmax_first(&out).unwrap()
    }

    #[test]
    fn argmax_takes_first_of_ties() {
        assert_eq!(argmax_first(&[1.0, 3.0, 3.0, 2.0]), Some(1));
        assert_eq!(
            argmax_first(&[f32::NEG_INFINITY, f32::NEG_INFINITY]),
            Some(0)
        );
        assert_eq!(argmax_first(&[]), None);
    }

    #[test]
    fn ctrl_penalty_is_gauge_dependent_and_normalized_is_not() {
        // token 0 seen with logit 2, token 1 unseen with logit 1.7, θ = 1.3.
        let z = [2.0f32, 1.7, -10.0];
        let seen = seen_of(3, &[0], None);
        let ctrl = Penalty {
            op: Op::Ctrl,
            theta: 1.3,
            alpha: 1.0,
        };
        // c = +5: 7/1.3 = 5.38 < 6.7 → token 1. c = -5: -3·1.3 = -3.9 < -3.3 → token 1 as well…
        // and with a gauge where the seen logit is positive and only slightly ahead it flips:
        assert_eq!(reference_pick(&z, 5.0, &ctrl, &seen), 1);
        assert_eq!(reference_pick(&z, -1.9, &ctrl, &seen), 0); // 0.1/1.3 = 0.077 > -0.2
        let norm = Penalty {
            op: Op::Normalized,
            ..ctrl
        };
        assert_eq!(
            reference_pick(&z, 5.0, &norm, &seen),
            reference_pick(&z, -1.9, &norm, &seen)
        );
        let sub = Penalty {
            op: Op::Subtractive,
            ..ctrl
        };
        assert_eq!(reference_pick(&z, 5.0, &sub, &seen), 1); // 2 − 1 < 1.7
    }

    #[test]
    fn theta_one_switches_every_penalty_off() {
        let z = [2.0f32, 1.9];
        let seen = seen_of(2, &[0], None);
        for op in Op::ALL {
            let p = Penalty {
                op,
                theta: 1.0,
                alpha: 1.0,
            };
            assert_eq!(reference_pick(&z, 5.0, &p, &seen), 0, "{op}");
        }
    }

    #[test]
    fn log_softmax_rows_are_nonpositive() {
        let z: Vec<f32> = (0..1000)
            .map(|i| (splitmix64(i) % 4000) as f32 / 100.0 - 20.0)
            .collect();
        let mut out = Vec::new();
        apply_row(
            &z,
            3.0,
            &Penalty {
                op: Op::Normalized,
                theta: 1.0,
                alpha: 0.0,
            },
            &[],
            &mut out,
        );
        assert!(out.iter().all(|&v| v <= 0.0));
        let s: f64 = out.iter().map(|&v| f64::from(v).exp()).sum();
        assert!((s - 1.0).abs() < 1e-4, "{s}");
    }

    /// Rows with many exact and near ties (values on a coarse grid, large magnitudes) so that the
    /// fp32 shift and normalisation merge neighbours: the fast path must still agree with the
    /// reference everywhere.
    #[test]
    fn fast_pick_matches_reference_on_tie_heavy_rows() {
        let n = 300;
        let mut checked = 0;
        for trial in 0..400u64 {
            let h = splitmix64(trial);
            let grid = [1.0f32, 0.25, 1.0 / 1024.0, 3e-6][(h % 4) as usize];
            let base = [0.0f32, 20.0, -150.0, 1000.0][((h >> 8) % 4) as usize];
            let z: Vec<f32> = (0..n)
                .map(|i| {
                    let r = splitmix64(h ^ (i as u64).wrapping_mul(0x9e37));
                    base + ((r % 12) as f32) * grid
                })
                .collect();
            let k = (h >> 16) as usize % 60;
            let ids: Vec<TokenId> = (0..k)
                .map(|j| (splitmix64(h ^ (1000 + j as u64)) % n as u64) as TokenId)
                .collect();
            let window = if trial % 3 == 0 { Some(7) } else { None };
            let seen = seen_of(n, &ids, window);
            for &c in &[5.0f32, -5.0, 0.0, 0.3, -161.39] {
                for op in Op::ALL {
                    for &theta in &[1.0f32, 1.1, 1.3] {
                        let pen = Penalty {
                            op,
                            theta,
                            alpha: 1.0,
                        };
                        let ev = ShiftEval::new(&z, c, &seen, op == Op::Normalized);
                        assert_eq!(
                            ev.pick(&z, &pen, &seen).unwrap(),
                            reference_pick(&z, c, &pen, &seen),
                            "trial {trial} c {c} {op} θ {theta}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 400 * 5 * 9);
    }

    #[test]
    fn everything_seen_still_picks() {
        let z = [1.0f32, 3.0, 2.0];
        let seen = seen_of(3, &[0, 1, 2], None);
        let pen = Penalty {
            op: Op::Ctrl,
            theta: 2.0,
            alpha: 1.0,
        };
        let ev = ShiftEval::new(&z, 0.0, &seen, false);
        assert_eq!(ev.pick(&z, &pen, &seen), Some(1));
    }

    #[test]
    fn window_keeps_only_the_last_n_tokens() {
        let s = seen_of(10, &[1, 2, 3, 1, 4], Some(3));
        let mut m = s.members().to_vec();
        m.sort();
        assert_eq!(m, vec![1, 3, 4]);
        assert!(!s.contains(2));
        let s0 = seen_of(10, &[1, 2], Some(0));
        assert!(s0.is_empty());
        let all = seen_of(10, &[1, 2, 3, 1, 4, 11, -1], None);
        assert_eq!(all.len(), 4);
    }
}
