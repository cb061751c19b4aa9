//! mirostat's fast path: the sorted softmax of "row + overlay" without sorting the whole row.

use super::{any_bad, for_blocks, is_bad, mask_ge, span_max, spans, Scan};
use crate::overlay::{Overlay, CHUNK};

/// One candidate of [`SortedSoftmax`]: the current logit `v`, `e = expf(v - max)` and the id.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cand {
    pub v: f32,
    pub e: f32,
    pub id: u32,
}

/// Entries within this many nats of the maximum are collected (and sorted) in the first pass.
const D_TOP: f32 = 8.0;

/// Bands at least this long are appended bucket by bucket (see `SortedSoftmax::append_scratch`).
const BUCKETED_APPEND_MIN: usize = 2048;

/// Largest logit the bucket sort files correctly (`6.4 x + 64` must fit an i32); above it the
/// sort puts the entry in the lowest bucket and `data[0]` is no longer the maximum.
const BUCKET_SAFE_MAX: f32 = 3.0e8;

/// How the kernels read a block without edits: the raw row values, mapped by the pending
/// transforms. `Ident` and `Div` are monotone maps of the raw value, so a threshold on the mapped
/// value is an exact threshold on the raw one (see [`RawMap::raw_ge`]) and the kernels never divide
/// entries they skip; anything else reads exact values block by block.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RawMap {
    Ident,
    Div(f32),
    General,
}

impl RawMap {
    fn of(ov: &Overlay) -> Self {
        if !ov.has_transforms() {
            RawMap::Ident
        } else if let Some(t) = ov.only_div() {
            RawMap::Div(t)
        } else {
            RawMap::General
        }
    }

    /// The mapped value of a raw entry (`General` never maps raw entries).
    #[inline(always)]
    fn map(self, x: f32) -> f32 {
        match self {
            RawMap::Div(t) => x / t,
            _ => x,
        }
    }

    /// The smallest raw `x` with `map(x) >= v`, exactly (`x / t` is monotone in `x` for `t > 0`):
    /// start from `v * t` and step by ulps, which takes a couple of steps since both roundings are
    /// within half an ulp. `None` if it does not settle (huge or infinite values).
    fn raw_ge(self, v: f32) -> Option<f32> {
        let RawMap::Div(t) = self else {
            return Some(v);
        };
        if v == f32::NEG_INFINITY {
            return Some(f32::NEG_INFINITY);
        }
        let mut x = v * t;
        if !x.is_finite() {
            return None;
        }
        let mut steps = 0;
        while x / t < v {
            x = x.next_up();
            steps += 1;
            if steps > 16 || !x.is_finite() {
                return None;
            }
        }
        loop {
            let p = x.next_down();
            if p / t < v {
                return Some(x);
            }
            x = p;
            steps += 1;
            if steps > 32 {
                return None;
            }
        }
    }
}

/// The constants of the vectorised count kernel for one value domain (raw row entries or exact
/// values): `y = x·a + b` approximates `log2(expf(v - max) / u)`, and lanes count when
/// `lo_ge <= x < hi`.
#[derive(Clone, Copy, Debug)]
struct Kern {
    a: f32,
    b: f32,
    lo_ge: f32,
    hi: f32,
    /// Entries with `x < skip` add nothing (a conservative block filter).
    skip: f32,
    tol_rel: f32,
}

/// The count kernel on one full block: adds `round(x)` (`x ≈ expf(v - max) / u`) for the lanes in
/// range whose rounding the error bound decides, and reports whether any lane needs the exact path.
#[inline(always)]
fn count_lanes<const DUAL: bool>(vals: &[f32], k: &Kern, lanes: &mut [[u32; CHUNK]; 2]) -> bool {
    const MAGIC: f32 = 12_582_912.0;
    const BIG: f32 = 16_384.0;
    const TOL_ABS: f32 = 1.0 / 16_777_216.0; // 2^-24
    let mut flagged = false;
    let [l1, l2] = lanes;
    if !DUAL {
        for (a, &x) in l1.iter_mut().zip(vals) {
            let inr = (x >= k.lo_ge) & (x < k.hi);
            let units = crate::ops::exp2_approx(x * k.a + k.b);
            let t = units + MAGIC;
            let n = t - MAGIC;
            let ni = t.to_bits().wrapping_sub(MAGIC.to_bits());
            let unsure = (units >= BIG) | ((units - n).abs() > 0.5 - (units * k.tol_rel + TOL_ABS));
            *a = a.wrapping_add(if inr & !unsure { ni } else { 0 });
            flagged |= inr & unsure;
        }
        return flagged;
    }
    // Two vectorisable loops: the first is the single-binade kernel that also keeps each lane's
    // count and verdict; the second rounds half the count for the next binade and takes back,
    // from the first count, lanes that binade is unsure about (they go to the exact path whole).
    let mut units = [0.0f32; CHUNK];
    let mut nis = [0u32; CHUNK];
    let mut takes = [0u32; CHUNK];
    for ((((a, u), nn), tk), &x) in l1
        .iter_mut()
        .zip(&mut units)
        .zip(&mut nis)
        .zip(&mut takes)
        .zip(vals)
    {
        let inr = (x >= k.lo_ge) & (x < k.hi);
        let un = crate::ops::exp2_approx(x * k.a + k.b);
        let t = un + MAGIC;
        let n = t - MAGIC;
        let ni = t.to_bits().wrapping_sub(MAGIC.to_bits());
        let unsure = (un >= BIG) | ((un - n).abs() > 0.5 - (un * k.tol_rel + TOL_ABS));
        let take = inr & !unsure;
        *a = a.wrapping_add(if take { ni } else { 0 });
        *u = un;
        *nn = ni;
        *tk = take as u32;
        flagged |= inr & unsure;
    }
    for ((((a, b), &un), &ni), &tk) in l1
        .iter_mut()
        .zip(l2.iter_mut())
        .zip(&units)
        .zip(&nis)
        .zip(&takes)
    {
        // the next binade's unit is twice as large: half the count, rounded on its own
        let u2 = un * 0.5;
        let t2 = u2 + MAGIC;
        let n2 = t2 - MAGIC;
        let ni2 = t2.to_bits().wrapping_sub(MAGIC.to_bits());
        let unsure2 = (u2 - n2).abs() > 0.5 - (u2 * k.tol_rel + TOL_ABS);
        let take = tk != 0;
        *b = b.wrapping_add(if take & !unsure2 { ni2 } else { 0 });
        *a = a.wrapping_sub(if take & unsure2 { ni } else { 0 });
        flagged |= take & unsure2;
    }
    flagged
}

/// Whether the count kernel's lane would need the exact path (same arithmetic as `count_lanes`).
#[inline(always)]
fn lane_unsure<const DUAL: bool>(x: f32, k: &Kern) -> bool {
    const MAGIC: f32 = 12_582_912.0;
    const BIG: f32 = 16_384.0;
    const TOL_ABS: f32 = 1.0 / 16_777_216.0;
    let units = crate::ops::exp2_approx(x * k.a + k.b);
    let n = (units + MAGIC) - MAGIC;
    let mut unsure = (units >= BIG) | ((units - n).abs() > 0.5 - (units * k.tol_rel + TOL_ABS));
    if DUAL {
        let u2 = units * 0.5;
        let n2 = (u2 + MAGIC) - MAGIC;
        unsure |= (u2 - n2).abs() > 0.5 - (u2 * k.tol_rel + TOL_ABS);
    }
    unsure
}

/// `softmax_impl(cur, do_sort = true)` over the whole "row + overlay" (llama.cpp's full sort, then
/// `p = expf(l - max) / sum` with an f32 sum in sorted order), computed without sorting the row.
///
/// # Why this is exact
///
/// Only three things of the full sort are observable by mirostat: the f32 sum `S`, the values at
/// the top of the sorted order, and the order of the first few entries. The sum in descending order
/// is a sequence of f32 additions `s += e_i` with `s` growing. While `s` stays in one binade
/// `[2^m, 2^(m+1))`, every float there is a multiple of `u = 2^(m-23)`, so `fl(s + e) = s +
/// u·round(e / u)`: the increment does not depend on `s`, except when `e / u` is exactly a half,
/// where ties-to-even looks at the running total. So:
///
/// 1. the head (the largest entries, sorted) is summed exactly in order until `s >= 2^m`;
/// 2. every other entry adds `round(e / u)` units of `u`, in any order: an integer count, with no
///    sort. Most entries add nothing or a few units; a vectorised kernel classifies them with
///    [`exp2_approx`](crate::ops::exp2_approx) and an error bound (below) far smaller than the
///    distance to the next rounding boundary; entries too close to a boundary (or too large for
///    the bound to decide) get glibc's `expf`, exactly as the slow path computes it;
/// 3. the result is accepted only if the count stays below `2^(m+1)` (no binade change in the
///    tail); otherwise the head is extended and `m + 1` tried. When the head alone is already
///    close to `2^(m+1)`, the same pass also counts for `m + 1` (halved units, rounded on their
///    own), so the retry needs no second pass;
/// 4. an entry whose `e / u` is exactly a half adds `q` or `q + 1` units depending on the parity of
///    everything before it. Such entries are rare and leave a few candidate sums
///    ([`SortedSoftmax::n_sum_candidates`]); the caller checks whether its answer depends on which
///    one, and only then [`SortedSoftmax::resolve_sum`] replays them in sorted order.
///
/// The kernel's bound: `x = expf(d)/u` is `2^Y` with `Y = d·log2 e + 23 - m`; the kernel evaluates
/// `y = fl(fl(raw·a) + b)` with `a = log2 e / t`, `b = 23 - m - max·log2 e` (each rounded once), so
/// `|y - Y| <= 2^-24 (2.0001·log2e·|v| + |b| + |y|)` plus the roundings of `v` and `d` in the exact
/// path (`(|v| + |d|)·2^-24` relative), glibc's `expf` (at most one ulp, `2^-23`) and the polynomial
/// ([`EXP2_APPROX_REL_ERR`](crate::ops::EXP2_APPROX_REL_ERR)). A lane is trusted only when its
/// distance to the nearest half-integer exceeds `x·tol_rel` with `tol_rel` 5% above that sum.
///
/// The order of the top entries is the bucket sort's when values are distinct; otherwise
/// [`SortedSoftmax::fix_order`] replays llama.cpp's per-bucket introsort on the affected buckets.
/// Whatever cannot be decided here (a tie in the lowest bucket, logits beyond the bucket sort's
/// range, more than a few tied increments) is `Ambiguous` and the caller sorts for real.
///
/// Cost: two vectorised passes over the row, `expf` for the entries within `D_TOP` (8) nats of the
/// max (and a few near rounding boundaries), and a sort of those entries, against a full
/// 128-bucket sort of the vocabulary.
#[derive(Clone, Debug, Default)]
pub struct SortedSoftmax {
    /// Every entry with `v >= thr`, sorted by value, descending (a prefix of the sorted row).
    sorted: Vec<Cand>,
    /// Scratch for tie replays and extensions.
    scratch: Vec<Cand>,
    /// Entries whose increment is an exact half: `(v, e / u)`.
    ties: Vec<(f32, f64)>,
    thr: f32,
    max: f32,
    /// The sum is `(sum_units + j)·u` for one `j` in `0..=n_ties` (exactly one, found by
    /// `resolve_sum`); `n_ties == 0` once it is known.
    sum_units: u64,
    n_ties: u64,
    u: f64,
    /// What `resolve_sum` needs: the head length, the binade and the head's units.
    tie_state: (usize, i32, u64),
    /// A count of the next binade from a dual pass: `(binade, count, thr at count time)`, with its
    /// half-unit entries in `ties_next`.
    next: Option<(i32, u64, f32)>,
    ties_next: Vec<(f32, f64)>,
    n: usize,
}

/// What [`SortedSoftmax::sum_in_binade`] found.
enum Binade {
    /// The sum is known up to the ties (stored in `self`).
    Sum,
    /// The sum reaches `2^(m+1)`: try the next binade.
    Higher,
    Fail,
}

impl SortedSoftmax {
    /// The sorted prefix (values exact; the order among equal values is llama.cpp's only after
    /// `fix_order`). `p_i = e_i / sum()`.
    pub fn sorted(&self) -> &[Cand] {
        &self.sorted
    }

    /// The f32 sum of `expf(v - max)` over the whole row in sorted order, exactly as
    /// `softmax_impl` accumulates it, once known (see [`SortedSoftmax::n_sum_candidates`]).
    pub fn sum(&self) -> Option<f32> {
        (self.n_ties == 0).then_some((self.sum_units as f64 * self.u) as f32)
    }

    /// How many values the sum may still take: an entry whose increment is exactly half a unit
    /// rounds the running total to even, so it adds one unit more or less depending on everything
    /// before it. Rather than replaying those few entries in order (a pass over the row each),
    /// callers may try every candidate ([`SortedSoftmax::sum_candidate`]) and ask for the exact
    /// sum only if the answers differ.
    pub fn n_sum_candidates(&self) -> usize {
        self.n_ties as usize + 1
    }

    /// The `j`-th possible value of the sum, `j < n_sum_candidates()`, ascending.
    pub fn sum_candidate(&self, j: usize) -> f32 {
        ((self.sum_units + j as u64) as f64 * self.u) as f32
    }

    /// Settle the sum exactly (replays the half-unit entries in sorted order); `false` if that
    /// cannot be done here (the caller then sorts for real).
    pub fn resolve_sum(&mut self, row: &[f32], ov: &Overlay) -> bool {
        if self.n_ties == 0 {
            return true;
        }
        let (h, m, head_units) = self.tie_state;
        let mut ties = std::mem::take(&mut self.ties);
        let floor: u64 = ties.iter().map(|t| t.1.floor() as u64).sum();
        let res = self.replay_ties(row, ov, h, m, head_units, &mut ties);
        self.ties = ties;
        match res {
            // replay_ties returns the ties' own increments; sum_units holds their floors
            Some(t) if self.sum_units - floor + t < 1 << 24 => {
                self.sum_units = self.sum_units - floor + t;
                self.n_ties = 0;
                true
            }
            _ => false,
        }
    }

    /// Every entry with `v >= thr()` is in the sorted prefix, every other entry is below it.
    pub fn thr(&self) -> f32 {
        self.thr
    }

    /// The maximum (`data[0].logit` after the sort).
    pub fn max(&self) -> f32 {
        self.max
    }

    /// Compute max, the exact sum and the sorted head. `Done` when exact; `Ambiguous` when this
    /// method cannot be sure (the caller then sorts for real); `Invalid` for NaN/+inf in the row.
    pub fn run(&mut self, row: &[f32], ov: &Overlay) -> Scan {
        self.sorted.clear();
        self.n = row.len();
        // A whole-vocabulary sort of at most 128 entries is llama.cpp's heap sort, not the bucket
        // sort this replays; such rows are cheap to fill anyway.
        if row.len() <= crate::ops::HEAP_PARTIAL_SORT_MAX {
            return if row.iter().any(|&x| is_bad(x)) {
                Scan::Invalid
            } else {
                Scan::Ambiguous
            };
        }
        match self.collect_top(row, ov) {
            Scan::Done => {}
            other => return other,
        }
        let max = self.max;
        for c in self.sorted.iter_mut() {
            c.e = (c.v - max).exp();
        }
        self.sorted.sort_unstable_by(|a, b| b.v.total_cmp(&a.v));
        // the head's own binade is a lower bound (the max contributes expf(0) = 1, so m >= 0)
        let mut s_top = 0.0f32;
        for c in &self.sorted {
            s_top += c.e;
        }
        let mut m = (s_top.to_bits() >> 23) as i32 - 127;
        // A top close to the next power of two is likely pushed over it by the tail: count both
        // binades in the one pass then, instead of a second pass after the first fails.
        let dual = s_top >= 0.875 * (2.0f32).powi(m + 1);
        self.next = None;
        for _ in 0..4 {
            match self.sum_in_binade(row, ov, m, dual) {
                Binade::Sum => return Scan::Done,
                Binade::Higher => m += 1,
                Binade::Fail => return Scan::Ambiguous,
            }
        }
        Scan::Ambiguous
    }

    /// Pass 1: max, validation, and every entry within `D_TOP` of the running max. Raw blocks are
    /// tested against the raw threshold, so a pending division costs nothing for skipped blocks.
    fn collect_top(&mut self, row: &[f32], ov: &Overlay) -> Scan {
        let map = RawMap::of(ov);
        // pass A: the exact max and validation (lane-wise maxima vectorise; `map` is monotone, so
        // the max of raw entries maps to the max of their values)
        let mut bad = false;
        let mut lanes = [f32::NEG_INFINITY; CHUNK];
        let mut m = f32::NEG_INFINITY;
        let mut vbuf = [0.0f32; CHUNK];
        for_blocks(row, ov, |start, block, edited| {
            if map != RawMap::General && !edited && block.len() == CHUNK {
                let mut b = false;
                for (l, &x) in lanes.iter_mut().zip(block) {
                    *l = if x > *l { x } else { *l };
                    b |= is_bad(x);
                }
                bad |= b;
            } else {
                bad |= any_bad(block);
                for &v in ov.current_block(row, start, block, edited, &mut vbuf) {
                    if v > m {
                        m = v;
                    }
                }
            }
        });
        if bad {
            return Scan::Invalid;
        }
        for &x in &lanes {
            let v = map.map(x);
            if v > m {
                m = v;
            }
        }
        if !(m > f32::NEG_INFINITY && m < BUCKET_SAFE_MAX) {
            return Scan::Ambiguous;
        }
        // pass B: every entry within D_TOP of the max; raw blocks are tested against the raw
        // threshold, so a pending division costs nothing for skipped entries
        let thr = m - D_TOP;
        let Some(raw_thr) = map.raw_ge(thr) else {
            return Scan::Ambiguous;
        };
        let top = &mut self.sorted;
        let mut ignore = false;
        for_blocks(row, ov, |start, block, edited| {
            let raw = map != RawMap::General && !edited;
            let (vals, mut hits) = if raw {
                (block, mask_ge(block, raw_thr, &mut ignore))
            } else {
                let vals = ov.current_block(row, start, block, edited, &mut vbuf);
                (vals, mask_ge(vals, thr, &mut ignore))
            };
            while hits != 0 {
                let j = hits.trailing_zeros() as usize;
                hits &= hits - 1;
                let v = if raw { map.map(vals[j]) } else { vals[j] };
                top.push(Cand {
                    v,
                    e: 0.0,
                    id: (start + j) as u32,
                });
            }
        });
        self.thr = thr;
        self.max = m;
        Scan::Done
    }

    /// The exact sorted-order f32 sum if it lands in binade `m` (see the type docs).
    fn sum_in_binade(&mut self, row: &[f32], ov: &Overlay, m: i32, dual: bool) -> Binade {
        if !(0..=100).contains(&m) {
            return Binade::Fail;
        }
        let lo = (2.0f64).powi(m) as f32;
        let u = (2.0f64).powi(m - 23);
        // head: the exact sequential sum until it reaches 2^m
        let mut s = 0.0f32;
        let mut h = 0;
        while s < lo {
            while h == self.sorted.len() {
                if !self.extend(row, ov, 0) {
                    return Binade::Fail;
                }
            }
            s += self.sorted[h].e;
            h += 1;
        }
        if s >= 2.0 * lo {
            return Binade::Higher;
        }
        let inv_u = 1.0 / u;
        let head_units = (s as f64 * inv_u) as u64; // exact: s is a multiple of u below 2^24 u
        let mut ties = std::mem::take(&mut self.ties);
        ties.clear();
        let mut units = head_units;
        for c in &self.sorted[h..] {
            let r = c.e as f64 * inv_u; // exact: u is a power of two
            let n = r.round_ties_even();
            if (r - n).abs() == 0.5 {
                ties.push((c.v, r));
            } else {
                units += n as u64;
            }
        }
        let counted = match self.next.take() {
            Some((mm, c2, thr_then)) if mm == m => {
                // the dual pass counted every entry below thr_then; those the head extension has
                // moved into the sorted prefix since are counted there now
                let mut c = Some(c2);
                for e in self.sorted.iter().filter(|e| e.v < thr_then) {
                    let r = e.e as f64 * inv_u;
                    let n = r.round_ties_even();
                    if (r - n).abs() != 0.5 {
                        c = c.and_then(|c| c.checked_sub(n as u64));
                    }
                }
                let thr = self.thr;
                ties.extend(self.ties_next.iter().filter(|t| t.0 < thr));
                c
            }
            _ if dual => {
                let mut ties_next = std::mem::take(&mut self.ties_next);
                ties_next.clear();
                let res = self.count_region_impl::<true>(
                    row,
                    ov,
                    f32::NEG_INFINITY,
                    m,
                    Some(&mut ties),
                    Some(&mut ties_next),
                );
                self.ties_next = ties_next;
                res.map(|(c, c2)| {
                    self.next = Some((m + 1, c2, self.thr));
                    c
                })
            }
            _ => self.count_region(row, ov, f32::NEG_INFINITY, m, Some(&mut ties)),
        };
        let n_ties = ties.len() as u64;
        let floors: u64 = ties.iter().map(|t| t.1.floor() as u64).sum();
        self.ties = ties;
        let Some(c) = counted else {
            return Binade::Fail;
        };
        let base = units + c + floors;
        self.sum_units = base;
        self.n_ties = n_ties;
        self.u = u;
        self.tie_state = (h, m, head_units);
        if base >= 1 << 24 {
            return Binade::Higher;
        }
        if base + n_ties >= 1 << 24 || n_ties > 16 {
            // the ties decide whether the binade holds: settle them now
            if !self.resolve_sum(row, ov) {
                return Binade::Fail;
            }
            if self.sum_units >= 1 << 24 {
                return Binade::Higher;
            }
        }
        Binade::Sum
    }

    /// `Σ round(e / u)` over the entries below `thr` with `v > lo` (`u = 2^(m-23)`), exact; entries
    /// whose `e / u` is exactly a half go to `ties` (or are skipped when `ties` is `None`). `None`
    /// when the error bound is too loose to decide anything (logits of huge magnitude).
    fn count_region(
        &self,
        row: &[f32],
        ov: &Overlay,
        lo: f32,
        m: i32,
        ties: Option<&mut Vec<(f32, f64)>>,
    ) -> Option<u64> {
        self.count_region_impl::<false>(row, ov, lo, m, ties, None)
            .map(|c| c.0)
    }

    /// `count_region` for binade `m`, and with `DUAL` for `m + 1` too (its ties in `ties2`), in
    /// the same pass: the exponential is the expensive part and both counts share it.
    fn count_region_impl<const DUAL: bool>(
        &self,
        row: &[f32],
        ov: &Overlay,
        lo: f32,
        m: i32,
        mut ties: Option<&mut Vec<(f32, f64)>>,
        mut ties2: Option<&mut Vec<(f32, f64)>>,
    ) -> Option<(u64, u64)> {
        const LOG2E: f64 = std::f64::consts::LOG2_E;
        let (max, hi) = (self.max, self.thr);
        let u = (2.0f64).powi(m - 23);
        let inv_u = 1.0 / u;
        // entries with d < l_min have expf(d) < u / 2 and add nothing
        let l_min = ((u / 2.0).ln() - 1e-3) as f32;
        if hi - max < l_min {
            return Some((0, 0));
        }
        // the error budget of the kernel (type docs), with |v| <= |max| + 20 for every lane that
        // can round to a non-zero count
        let (maxa, b) = (max.abs() as f64, (23 - m) as f64 - max as f64 * LOG2E);
        let v_bound = maxa + 20.0;
        let e_y = (2.0001 * LOG2E * v_bound + b.abs() + 24.0) * (2.0f64).powi(-24);
        let tol_rel = 1.05
            * (crate::ops::EXP2_APPROX_REL_ERR
                + std::f64::consts::LN_2 * e_y * 1.01
                + (v_bound + 20.0) * (2.0f64).powi(-24)
                + (2.0f64).powi(-23));
        if tol_rel > 1e-3 {
            return None;
        }
        let skip_v = (max as f64 + l_min as f64 - 0.01 - maxa * (2.0f64).powi(-20)) as f32;
        let lo_ge = if lo == f32::NEG_INFINITY {
            f32::MIN
        } else {
            lo.next_up()
        };
        let val = Kern {
            a: LOG2E as f32,
            b: b as f32,
            lo_ge,
            hi,
            skip: skip_v,
            tol_rel: tol_rel as f32,
        };
        let mut map = RawMap::of(ov);
        let raw = match map {
            RawMap::Div(t) => match (map.raw_ge(lo_ge), map.raw_ge(hi), map.raw_ge(skip_v)) {
                (Some(l), Some(h), Some(sk)) => Kern {
                    a: (LOG2E / t as f64) as f32,
                    lo_ge: l,
                    hi: h,
                    skip: sk,
                    ..val
                },
                _ => {
                    map = RawMap::General;
                    val
                }
            },
            _ => val,
        };
        let mut vbuf = [0.0f32; CHUNK];
        let mut lanes = [[0u32; CHUNK]; 2];
        let (mut total, mut total2) = (0u64, 0u64);
        let mut blocks = 0u32;
        let flush = |lanes: &mut [[u32; CHUNK]; 2], total: &mut u64, total2: &mut u64| {
            *total += lanes[0].iter().map(|&l| l as u64).sum::<u64>();
            *total2 += lanes[1].iter().map(|&l| l as u64).sum::<u64>();
            *lanes = [[0; CHUNK]; 2];
        };
        for_blocks(row, ov, |start, block, edited| {
            let (vals, k, exact) = if map != RawMap::General && !edited {
                (block, &raw, false)
            } else {
                (
                    ov.current_block(row, start, block, edited, &mut vbuf),
                    &val,
                    true,
                )
            };
            let mut any = false;
            for &x in vals {
                any |= x >= k.skip;
            }
            if !any {
                return;
            }
            let short = vals.len() < CHUNK;
            if !short && !count_lanes::<DUAL>(vals, k, &mut lanes) {
                blocks += 1;
                if blocks == 1 << 14 {
                    flush(&mut lanes, &mut total, &mut total2);
                    blocks = 0;
                }
                return;
            }
            blocks += !short as u32;
            // the exact path for the lanes the kernel left out (all of a short last block)
            for &x in vals {
                if !((x >= k.lo_ge) & (x < k.hi)) || (!short && !lane_unsure::<DUAL>(x, k)) {
                    continue;
                }
                let v = if exact { x } else { map.map(x) };
                let r = (v - max).exp() as f64 * inv_u;
                let n = r.round_ties_even();
                if (r - n).abs() == 0.5 {
                    if let Some(t) = ties.as_deref_mut() {
                        t.push((v, r));
                    }
                } else {
                    total += n as u64;
                }
                if DUAL {
                    let r2 = r * 0.5;
                    let n2 = r2.round_ties_even();
                    if (r2 - n2).abs() == 0.5 {
                        if let Some(t) = ties2.as_deref_mut() {
                            t.push((v, r2));
                        }
                    } else {
                        total2 += n2 as u64;
                    }
                }
            }
            if blocks == 1 << 14 {
                flush(&mut lanes, &mut total, &mut total2);
                blocks = 0;
            }
        });
        flush(&mut lanes, &mut total, &mut total2);
        Some((total, total2))
    }

    /// The increments of the tail entries whose `e / u` is exactly a half. Such an entry adds the
    /// `q` or `q + 1` units (`r = q + 1/2`) that makes the running total even, so it needs the
    /// total of everything before it in sorted order: the head, every other tail entry with a
    /// larger value, and the ties above it (replayed in order, equal values one after another).
    /// `None` (decline) for more than a few distinct tied values.
    fn replay_ties(
        &self,
        row: &[f32],
        ov: &Overlay,
        h: usize,
        m: i32,
        head_units: u64,
        ties: &mut [(f32, f64)],
    ) -> Option<u64> {
        let inv_u = (2.0f64).powi(23 - m);
        ties.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        let mut distinct = 0;
        let mut tie_units = 0u64; // increments of the ties replayed so far (all larger values)
        let mut i = 0;
        while i < ties.len() {
            distinct += 1;
            if distinct > 8 {
                return None;
            }
            let v = ties[i].0;
            let mut above = 0u64;
            for c in &self.sorted[h..] {
                if c.v > v {
                    let r = c.e as f64 * inv_u;
                    let n = r.round_ties_even();
                    if (r - n).abs() != 0.5 {
                        above += n as u64;
                    }
                }
            }
            if v < self.thr {
                // a tie is usually among the largest tail entries: sum the few above it exactly
                above += match self.exact_units_above(row, ov, v, m) {
                    Some(units) => units,
                    None => self.count_region(row, ov, v, m, None)?,
                };
            }
            let mut total = head_units + above + tie_units;
            while i < ties.len() && ties[i].0 == v {
                let q = ties[i].1.floor() as u64;
                let before = total;
                total += q;
                if total % 2 == 1 {
                    total += 1;
                }
                tie_units += total - before;
                i += 1;
            }
        }
        Some(tie_units)
    }

    /// `Σ round(e / u)` over the entries with `lo < v < thr`, leaving out exact halves, with
    /// glibc's `expf` for each: what `count_region(lo, ..)` computes, for the common case of a
    /// narrow band right below the threshold. `None` when the band holds more than a few thousand
    /// entries (the vectorised count is then cheaper).
    fn exact_units_above(&self, row: &[f32], ov: &Overlay, lo: f32, m: i32) -> Option<u64> {
        const CAP: usize = 4096;
        let inv_u = (2.0f64).powi(23 - m);
        let (max, hi) = (self.max, self.thr);
        let lo_ge = lo.next_up();
        let mut map = RawMap::of(ov);
        let (raw_lo, raw_hi) = match (map.raw_ge(lo_ge), map.raw_ge(hi)) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                map = RawMap::General;
                (lo_ge, hi)
            }
        };
        let (mut total, mut seen) = (0u64, 0usize);
        let mut vbuf = [0.0f32; CHUNK];
        let mut ignore = false;
        for (start, span, edited) in spans(row, ov) {
            let raw = map != RawMap::General && !edited;
            if raw && span_max(span, &mut ignore) < raw_lo {
                continue;
            }
            for (i, block) in span.chunks(CHUNK).enumerate() {
                let (vals, l, h) = if raw {
                    (block, raw_lo, raw_hi)
                } else {
                    (
                        ov.current_block(row, start + i * CHUNK, block, edited, &mut vbuf),
                        lo_ge,
                        hi,
                    )
                };
                let mut hits = mask_ge(vals, l, &mut ignore);
                while hits != 0 {
                    let j = hits.trailing_zeros() as usize;
                    hits &= hits - 1;
                    if vals[j] >= h {
                        continue;
                    }
                    seen += 1;
                    if seen > CAP {
                        return None;
                    }
                    let v = if raw { map.map(vals[j]) } else { vals[j] };
                    let r = (v - max).exp() as f64 * inv_u;
                    let n = r.round_ties_even();
                    if (r - n).abs() != 0.5 {
                        total += n as u64;
                    }
                }
            }
        }
        Some(total)
    }

    /// Move the next-largest entries of the row (within 1.5 nats below `thr`, or all the rest far
    /// below the max) into the sorted prefix, at most about `want` more (plus ties), so the sorts
    /// stay small. `false` when nothing is left.
    fn extend(&mut self, row: &[f32], ov: &Overlay, want: usize) -> bool {
        if self.sorted.len() >= self.n {
            return false;
        }
        // e == 0 far below the max: collect the rest (including -inf) in one go
        let mut thr = if self.thr - self.max < -110.0 {
            f32::NEG_INFINITY
        } else {
            self.thr - 1.5
        };
        self.collect_band(row, ov, thr, usize::MAX);
        let limit = (2 * want.saturating_sub(self.sorted.len()))
            .max(self.sorted.len())
            .max(256);
        if self.scratch.len() > limit {
            // keep the `limit` largest and every entry tied with the smallest of them
            self.scratch
                .select_nth_unstable_by(limit - 1, |a, b| b.v.total_cmp(&a.v));
            let w = self.scratch[limit - 1].v;
            self.scratch.retain(|c| c.v >= w);
            thr = w;
        }
        self.append_scratch(thr);
        true
    }

    /// Extend the sorted prefix in one pass to every entry with `v >= lo`, unless that would make
    /// it longer than `cap`: then nothing changes and the answer is `false`. Callers that can
    /// estimate how deep they will read use this instead of [`SortedSoftmax::ensure_len`], whose
    /// small steps each cost a pass over the row, and learn early when a full sort is cheaper.
    pub fn extend_to(&mut self, row: &[f32], ov: &Overlay, lo: f32, cap: usize) -> bool {
        if lo.is_nan() || lo >= self.thr || self.sorted.len() >= self.n {
            return self.sorted.len() <= cap;
        }
        let budget = cap.saturating_sub(self.sorted.len());
        if !self.collect_band(row, ov, lo, budget) {
            self.scratch.clear();
            return false;
        }
        self.append_scratch(lo);
        true
    }

    /// Fill `scratch` with every entry with `lo <= v < thr` (`e` not yet computed); `false` (and
    /// an incomplete `scratch`) as soon as more than `budget` are found.
    fn collect_band(&mut self, row: &[f32], ov: &Overlay, lo: f32, budget: usize) -> bool {
        self.scratch.clear();
        let old = self.thr;
        let mut map = RawMap::of(ov);
        let (raw_lo, raw_old) = match (map.raw_ge(lo), map.raw_ge(old)) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                map = RawMap::General;
                (lo, old)
            }
        };
        let mut vbuf = [0.0f32; CHUNK];
        let out = &mut self.scratch;
        let mut over = false;
        for_blocks(row, ov, |start, block, edited| {
            if over {
                return;
            }
            let (vals, l, h, exact) = if map != RawMap::General && !edited {
                (block, raw_lo, raw_old, false)
            } else {
                (
                    ov.current_block(row, start, block, edited, &mut vbuf),
                    lo,
                    old,
                    true,
                )
            };
            let mut any = false;
            for &x in vals {
                any |= (x >= l) & (x < h);
            }
            if any {
                for (j, &x) in vals.iter().enumerate() {
                    if x >= l && x < h {
                        let v = if exact { x } else { map.map(x) };
                        out.push(Cand {
                            v,
                            e: 0.0,
                            id: (start + j) as u32,
                        });
                    }
                }
                over = out.len() > budget;
            }
        });
        !over
    }

    /// Give `scratch` its `e`, sort it and append it to the prefix, which now reaches down to `thr`.
    ///
    /// A large band (mirostat keeping most of the vocabulary) is first distributed into
    /// llama.cpp's 128 buckets and each bucket sorted on its own: 128 small sorts cost less than
    /// one big one, which is what lets this path stay cheaper than the full bucket sort even when
    /// the whole row ends up here. (`bucket_of` is monotone below `BUCKET_SAFE_MAX`, which `run`
    /// checked, so the buckets in descending order are the descending order.)
    fn append_scratch(&mut self, thr: f32) {
        use crate::sort::{bucket_of, N_BUCKETS};
        let max = self.max;
        for c in self.scratch.iter_mut() {
            c.e = (c.v - max).exp();
        }
        let desc = |a: &Cand, b: &Cand| b.v.total_cmp(&a.v);
        if self.scratch.len() < BUCKETED_APPEND_MIN {
            self.scratch.sort_unstable_by(desc);
            self.sorted.extend_from_slice(&self.scratch);
        } else {
            let mut histo = [0usize; N_BUCKETS];
            for c in &self.scratch {
                histo[bucket_of(c.v)] += 1;
            }
            let base = self.sorted.len();
            let mut cursor = [0usize; N_BUCKETS];
            let mut off = base;
            for b in (0..N_BUCKETS).rev() {
                cursor[b] = off;
                off += histo[b];
            }
            self.sorted.resize(off, Cand::default());
            for c in &self.scratch {
                let b = bucket_of(c.v);
                self.sorted[cursor[b]] = *c;
                cursor[b] += 1;
            }
            let mut start = base;
            for b in (0..N_BUCKETS).rev() {
                self.sorted[start..start + histo[b]].sort_unstable_by(desc);
                start += histo[b];
            }
        }
        self.thr = thr;
    }

    /// `softmax_impl` over the first `k` entries of the (ordered, see `fix_order`) prefix, written
    /// to `cur` as a sorted array: truncating a sorted softmax keeps the max and every `e`, so
    /// only the f32 sum is new, accumulated in the same order as the slow path's.
    pub fn write_softmax_of_prefix(&self, k: usize, cur: &mut crate::candidates::Candidates) {
        let top = &self.sorted[..k.min(self.sorted.len())];
        let mut cum = 0.0f32;
        for c in top {
            cum += c.e;
        }
        cur.set_data(
            top.iter().map(|c| crate::candidates::TokenData {
                id: c.id as crate::candidates::TokenId,
                logit: c.v,
                p: c.e / cum,
            }),
            true,
        );
    }

    /// Make sure the sorted prefix holds at least `k` entries; `false` if that needs more than
    /// the row has.
    pub fn ensure_len(&mut self, row: &[f32], ov: &Overlay, k: usize) -> bool {
        while self.sorted.len() < k {
            if !self.extend(row, ov, k) {
                return false;
            }
        }
        true
    }

    /// Put the first `k` entries of the sorted prefix in the exact order of llama.cpp's full sort
    /// (the 128-bucket sort: buckets descending, each bucket's entries in row order sorted by
    /// libstdc++'s introsort, the lowest non-empty bucket by its heap sort). Nothing to do when the
    /// values at positions `0..=k` are distinct; otherwise every bucket holding a tie, down to the
    /// lowest tie among those positions, is replayed. `false` only if the prefix cannot be
    /// extended far enough.
    pub fn fix_order(&mut self, row: &[f32], ov: &Overlay, k: usize) -> bool {
        use crate::sort::bucket_of;
        if k == 0 {
            return true;
        }
        // position k must be known too (it decides whether the set of the first k is tied)
        if !self.ensure_len(row, ov, (k + 1).min(self.n)) {
            return false;
        }
        let end = (k + 1).min(self.sorted.len());
        // the lowest bucket holding a tie among positions 0..=k: buckets below it hold distinct
        // values there, already in llama.cpp's order
        let Some(t) = (1..end)
            .rev()
            .find(|&t| self.sorted[t].v == self.sorted[t - 1].v)
        else {
            return true;
        };
        let b = bucket_of(self.sorted[t].v);
        // the replay needs every entry of buckets >= b; entries outside the prefix are below
        // thr, so in buckets <= bucket_of(thr). One pass to just below the bucket's lower edge
        // (`6.4 v + 64 >= b`) usually suffices; the loop settles the edge exactly.
        if b > 0 {
            let edge = (b as f32 - 64.0) / 6.4 - 0.01;
            self.extend_to(row, ov, edge, self.n);
        }
        while self.sorted.len() < self.n && bucket_of(self.thr) >= b {
            if !self.extend(row, ov, 0) {
                return false;
            }
        }
        // llama.cpp's full sort heap-sorts the lowest non-empty bucket (`std::partial_sort` of
        // all of it) instead of the introsort; it is known only once the whole row is here
        let lowest = if self.sorted.len() == self.n {
            self.sorted.last().map_or(0, |c| bucket_of(c.v))
        } else {
            usize::MAX
        };
        // Buckets are contiguous ranges of the prefix (bucket_of is monotone below
        // BUCKET_SAFE_MAX). A bucket of distinct values is already in the introsort's order
        // (strictly descending); only a bucket holding a tie is replayed: its entries in row order,
        // then libstdc++'s introsort.
        let len = self.sorted.partition_point(|c| bucket_of(c.v) >= b);
        let mut i = 0;
        while i < len {
            let bk = bucket_of(self.sorted[i].v);
            let mut j = i + 1;
            let mut tie = false;
            while j < len && bucket_of(self.sorted[j].v) == bk {
                tie |= self.sorted[j].v == self.sorted[j - 1].v;
                j += 1;
            }
            if tie {
                let bucket = &mut self.sorted[i..j];
                bucket.sort_unstable_by_key(|c| c.id);
                if bk == lowest {
                    let all = bucket.len();
                    crate::sort::partial_sort_by(bucket, all, |a, b| a.v > b.v);
                } else {
                    crate::sort::sort_by(bucket, |a, b| a.v > b.v);
                }
            }
            i = j;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::SplitMix64;

    /// fill + llama.cpp's softmax_impl(sorted) on the current values of "row + overlay".
    fn slow_softmax(row: &[f32], ov: &Overlay) -> crate::candidates::Candidates {
        let mut c = crate::candidates::Candidates::new();
        ov.materialize(row, &mut c);
        crate::ops::softmax_impl(&mut c, true);
        c
    }

    fn check_sorted_softmax(
        row: &[f32],
        ov: &Overlay,
        sm: &mut SortedSoftmax,
        ks: &[usize],
    ) -> Scan {
        let r = sm.run(row, ov);
        if r != Scan::Done {
            return r;
        }
        let slow = slow_softmax(row, ov);
        let s = slow.as_slice();
        assert_eq!(sm.max(), s[0].logit);
        // the sum: p_i = e_i / sum must be bit-identical for the whole prefix
        let sum_bits: f32 = {
            let mut cum = 0.0f32;
            for t in s {
                cum += (t.logit - s[0].logit).exp();
            }
            cum
        };
        // the exact sum is one of the candidates, and resolving finds it
        let cands: Vec<u32> = (0..sm.n_sum_candidates())
            .map(|j| sm.sum_candidate(j).to_bits())
            .collect();
        assert!(
            cands.contains(&sum_bits.to_bits()),
            "sum {sum_bits} not among {cands:?}"
        );
        assert!(sm.resolve_sum(row, ov), "the ties could not be replayed");
        assert_eq!(sm.sum().map(f32::to_bits), Some(sum_bits.to_bits()), "sum");
        let sum = sum_bits;
        for &k in ks {
            let k = k.min(row.len());
            if !sm.fix_order(row, ov, k) {
                continue;
            }
            for (i, c) in sm.sorted()[..k].iter().enumerate() {
                assert_eq!(
                    (c.id as i32, c.v.to_bits()),
                    (s[i].id, s[i].logit.to_bits()),
                    "position {i} of {k}"
                );
                assert_eq!((c.e / sum).to_bits(), s[i].p.to_bits(), "p at {i}");
            }
        }
        Scan::Done
    }

    #[test]
    fn sorted_softmax_matches_the_full_sort_bit_for_bit() {
        let mut sm = SortedSoftmax::default();
        let mut done = 0;
        let total = 240;
        for seed in 0..total as u64 {
            let n = 129 + (seed as usize * 131) % 6000;
            let sigma = [0.3, 1.0, 3.0, 6.0, 15.0][seed as usize % 5];
            let ties = seed % 4 == 0;
            let mut g = SplitMix64(seed + 1000);
            let row: Vec<f32> = (0..n)
                .map(|_| {
                    let x = g.next_normal() * sigma;
                    if ties {
                        ((x * 4.0).round() / 4.0) as f32
                    } else {
                        x as f32
                    }
                })
                .collect();
            let mut ov = Overlay::default();
            ov.reset(n);
            if seed % 3 == 1 {
                ov.set((seed as usize * 7) % n, f32::NEG_INFINITY);
                ov.set((seed as usize * 13) % n, 25.0);
            }
            if seed % 5 == 2 {
                ov.push_transform(crate::overlay::Transform::Div(0.8));
            }
            ov.prepare();
            if check_sorted_softmax(&row, &ov, &mut sm, &[1, 2, 5, 40, 100]) == Scan::Done {
                done += 1;
            }
        }
        assert!(
            done > total * 3 / 4,
            "fast path taken only {done}/{total} times"
        );
    }

    #[test]
    fn sorted_softmax_near_binade_edges_and_flat_rows() {
        // sums that land on or just around powers of two, and all-equal rows (every entry tied)
        let mut sm = SortedSoftmax::default();
        for n in [129usize, 256, 1000, 4096] {
            for &(a, b) in &[
                (0.0f32, 0.0f32),
                (0.0, -std::f32::consts::LN_2),
                (0.0, -20.0),
                (1.0, 1.0 - 1e-7),
            ] {
                let row: Vec<f32> = (0..n).map(|i| if i % 2 == 0 { a } else { b }).collect();
                let mut ov = Overlay::default();
                ov.reset(n);
                ov.prepare();
                let _ = check_sorted_softmax(&row, &ov, &mut sm, &[1, 3, n]);
            }
        }
    }

    #[test]
    fn sorted_softmax_flags_bad_rows_and_declines_huge_logits() {
        let mut sm = SortedSoftmax::default();
        let mut row = vec![0.5f32; 300];
        let mut ov = Overlay::default();
        ov.reset(300);
        ov.prepare();
        row[17] = f32::NAN;
        assert_eq!(sm.run(&row, &ov), Scan::Invalid);
        row[17] = f32::INFINITY;
        assert_eq!(sm.run(&row, &ov), Scan::Invalid);
        row[17] = 1e30;
        assert_eq!(
            sm.run(&row, &ov),
            Scan::Ambiguous,
            "the bucket sort mis-files it: decline"
        );
        let row = vec![f32::NEG_INFINITY; 300];
        assert_eq!(sm.run(&row, &ov), Scan::Ambiguous);
    }
}
