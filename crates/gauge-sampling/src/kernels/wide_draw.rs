//! mirostat-v2's step when its cut keeps (nearly) the whole vocabulary: the token that the full
//! sort, the cut, the renormalisation and `discrete_distribution` pick, found without sorting.
//!
//! # Why this is exact
//!
//! The slow path sorts every candidate, keeps the prefix `K` whose `-log2f(e / S) <= mu`
//! (`e = expf(v - max)`, `S` the f32 sum in sorted order), renormalises over `K` and lets
//! libstdc++'s `discrete_distribution` pick the first `j` whose f64 partial sum of
//! `fl(p_i / sum)` reaches a uniform `u`. Here:
//!
//! 1. **`S`** is [`SortedSoftmax`]'s exact sum.
//! 2. **The cut** is a threshold on `v` (`p` only falls along the sorted order). Entries clearly on
//!    one side (by a margin of 1e-3 nats, far beyond the `expf`/`log2f` roundings) are classified in
//!    a vectorised pass; the few near the cut get the slow path's own `expf`, division and `log2f`,
//!    in sorted order, and the first that fails ends `K`.
//! 3. **The renormalising sum** over `K` equals `S` when every dropped entry has
//!    `e < 2^-24`: the sorted-order sum is at least `expf(0) = 1` from its first term, so such an
//!    entry is below half an ulp of the running total and adding it changes nothing. So the kept
//!    `p` are the first softmax's `e / S`. (A cut that drops larger entries declines.)
//! 4. **The draw** compares `u` with partial sums that depend on the summation order only through
//!    f64 roundings: `|acc_j - A_j| <= 2.05 γ(N+1)` with `A_j` the exact `Σ_{i<=j} p_i / Σ p_i`.
//!    The partial sums are estimated with a rigorous error bound (the head's `p` exactly, the
//!    tail's from [`exp2_approx`](crate::ops::exp2_approx) with its bound, by value bins); a
//!    position `j` is taken only when `A_{j-1} + δ < u <= A_j - δ`, i.e. when every summation
//!    order gives it. Positions are ranks by value, so only a tie at the chosen position needs
//!    llama.cpp's order: the head replays it ([`SortedSoftmax::fix_order`]), the tail declines.
//! 5. Anything undecided (`u` within `δ`, ~1e-5 relative, of a boundary; a tie in the tail; a
//!    cut that drops large entries) declines *before* the generator moves, and the caller sorts.

use super::sorted_softmax::{Cand, SortedSoftmax};
use crate::overlay::{Overlay, CHUNK};
use crate::rng::Mt19937;
use crate::simd::multiversion;

/// Nats of margin around the cut in which entries are classified exactly.
const CUT_MARGIN: f64 = 1e-3;

/// Below this `d = v - max`, `expf(d)` is 0 in f32: such an entry has `p = 0` and always fails the
/// cut (`-log2f(0) = inf`).
const D_ZERO: f32 = -110.0;

/// At or above this `d` an entry surely passes once the cut lies below it (`p >= e^-80 / S` is
/// far from underflow), so a huge `mu` does not send the whole tail to the exact band.
const D_SURE: f32 = -80.0;

/// A dropped entry must have `d` below this (`expf(d) < 2^-24` with room for `expf`'s rounding)
/// for the renormalising sum to equal `S` (module docs, 3).
const D_HALF_ULP: f32 = -16.65;

/// More entries than this near the cut: decline (the exact classification would cost too much).
const BAND_CAP: usize = 4096;

/// Value bins per nat for locating a draw in the tail.
const BINS_PER_NAT: f32 = 8.0;
const N_BINS: usize = 1024;

/// Relative error of one tail estimate `exp2_approx(d·log2e)` against the slow path's
/// `fl(expf(d) / S)`, apart from the `|d|` term: the polynomial, glibc's `expf` (one ulp), the
/// division (half an ulp) and the f32 lane sums (16 terms before each f64 flush).
const REL_ERR: f64 = crate::ops::EXP2_APPROX_REL_ERR + 1.2e-7 + 6.0e-8 + 17.0 * 6.0e-8;

/// The `|d|` term: `d·log2e` is rounded twice in f32 (constant and product), each `2^-24` of it,
/// and `2^(Δy)` turns that into `ln2·Δy` relative; `ln2·log2e = 1`.
const REL_ERR_PER_NAT: f64 = 1.001 * (1.0 / 8_388_608.0);

/// The drawn candidate as the slow path leaves it selected: id, logit and renormalised `p`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Drawn {
    pub id: u32,
    pub v: f32,
    pub p: f32,
}

/// What [`WideDraw::draw`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Wide {
    /// The step, exactly; the generator has moved as the slow path's.
    Drawn(Drawn),
    /// The cut is shallow enough that the sorted prefix covers it: not this path's case.
    Shallow,
    /// Undecided here (module docs, 5); the generator has not moved.
    Declined,
}

/// Scratch of the wide path, reused across steps.
#[derive(Clone, Debug, Default)]
pub(crate) struct WideDraw {
    band: Vec<Cand>,
    window: Vec<Cand>,
    bins: Vec<[f64; 2]>,
}

/// Sums of pass A over the kept tail (entries below the prefix threshold that surely pass).
#[derive(Clone, Copy, Debug, Default)]
struct TailSums {
    /// `Σ ẽ`, the estimates of `expf(d)`.
    mass: f64,
    /// `Σ ẽ·|d|`, for the error bound.
    mass_d: f64,
    n_keep: u64,
    /// The largest `d` among entries that surely fail (`-inf` if none).
    drop_max_d: f32,
    /// Whether the band (exact classification) overflowed `BAND_CAP`.
    overflow: bool,
}

/// `d·log2e` as the tail estimates compute it (rounded constant and product: `REL_ERR_PER_NAT`).
const LOG2E_F32: f32 = std::f32::consts::LOG2_E;

multiversion! {
/// Pass A: over every entry below `thr` (the sorted prefix holds the rest), with `d = v - max`:
/// sums of the estimates for `d >= keep_ge`, the largest `d < drop_lt`, and the entries in
/// between pushed to `band` (exact values, `e` not yet computed). Values are read through the
/// overlay exactly as the slow path computes them.
fn tail_pass(
    row: &[f32],
    ov: &Overlay,
    max: f32,
    thr: f32,
    keep_ge: f32,
    drop_lt: f32,
    band: &mut Vec<Cand>,
) -> TailSums {
    let mut out = TailSums { drop_max_d: f32::NEG_INFINITY, ..TailSums::default() };
    let mut lm = [0.0f32; CHUNK];
    let mut ld = [0.0f32; CHUNK];
    let mut lc = [0u32; CHUNK];
    let mut lx = [f32::NEG_INFINITY; CHUNK];
    let mut vbuf = [0.0f32; CHUNK];
    let edits = ov.edited_chunks();
    let mut next_edit = 0usize;
    let mut since_flush = 0u32;
    for (ci, block) in row.chunks(CHUNK).enumerate() {
        let edited = edits.get(next_edit) == Some(&(ci as u32));
        next_edit += edited as usize;
        let start = ci * CHUNK;
        let vals = ov.current_block(row, start, block, edited, &mut vbuf);
        // a fixed-width copy, so the lane loop vectorises; the padding (+inf) is never in the tail
        let mut lane_vals = [f32::INFINITY; CHUNK];
        lane_vals[..vals.len()].copy_from_slice(vals);
        let mut any_band = false;
        for (j, &v) in lane_vals.iter().enumerate() {
            let d = v - max;
            let tail = v < thr;
            let keep = tail & (d >= keep_ge);
            let in_band = tail & (d >= drop_lt) & (d < keep_ge);
            let drop = tail & (d < drop_lt);
            let e = crate::ops::exp2_approx(d * LOG2E_F32);
            lm[j] += if keep { e } else { 0.0 };
            ld[j] += if keep { e * -d } else { 0.0 };
            lc[j] += keep as u32;
            lx[j] = if drop & (d > lx[j]) { d } else { lx[j] };
            any_band |= in_band;
        }
        if any_band {
            for (j, &v) in vals.iter().enumerate() {
                let d = v - max;
                if v < thr && d >= drop_lt && d < keep_ge {
                    if band.len() >= BAND_CAP {
                        out.overflow = true;
                    } else {
                        band.push(Cand { v, e: 0.0, id: (start + j) as u32 });
                    }
                }
            }
        }
        since_flush += 1;
        if since_flush == 16 {
            for j in 0..CHUNK {
                out.mass += lm[j] as f64;
                out.mass_d += ld[j] as f64;
            }
            lm = [0.0; CHUNK];
            ld = [0.0; CHUNK];
            since_flush = 0;
        }
    }
    for j in 0..CHUNK {
        out.mass += lm[j] as f64;
        out.mass_d += ld[j] as f64;
        out.n_keep += lc[j] as u64;
        out.drop_max_d = out.drop_max_d.max(lx[j]);
    }
    out
}
}

/// The bin of a tail entry: monotone in `v` (descending values, ascending bins), so every entry of
/// a lower bin comes before every entry of a higher one in the sorted order.
#[inline(always)]
fn bin_of(thr_d: f32, d: f32) -> usize {
    let x = (thr_d - d) * BINS_PER_NAT;
    if x < (N_BINS - 1) as f32 {
        x as usize
    } else {
        N_BINS - 1
    }
}

/// `γ(n) = n·2^-53 / (1 - n·2^-53)`, the classic bound on `n` f64 roundings.
fn gamma(n: usize) -> f64 {
    let x = n as f64 * f64::EPSILON / 2.0;
    x / (1.0 - x)
}

impl WideDraw {
    /// The step of mirostat-v2 with surprise limit `mu` on "row + overlay", whose exact sorted
    /// softmax head `soft` has computed (with its sum settled). `rng` moves only on `Drawn`.
    pub(crate) fn draw(
        &mut self,
        row: &[f32],
        ov: &Overlay,
        soft: &mut SortedSoftmax,
        mu: f32,
        rng: &mut Mt19937,
    ) -> Wide {
        let Some(s) = soft.sum() else {
            return Wide::Declined;
        };
        let (max, thr) = (soft.max(), soft.thr());
        // the cut in d = v - max: p >= 2^-mu  <=>  d >= ln S - mu·ln 2
        let d_cut = (s as f64).ln() - mu as f64 * std::f64::consts::LN_2;
        let margin = CUT_MARGIN + 1e-4 * d_cut.abs();
        let keep_ge = ((d_cut + margin) as f32).max(D_SURE).next_up();
        let drop_lt = ((d_cut - margin) as f32).max(D_ZERO).next_down();
        if !(keep_ge.is_finite() && drop_lt.is_finite()) {
            return Wide::Declined;
        }
        // every entry of the sorted prefix must surely be kept, or the cut is the prefix's business
        if soft.sorted().len() >= row.len() || thr - max < keep_ge {
            return Wide::Shallow;
        }
        self.band.clear();
        let sums = tail_pass(row, ov, max, thr, keep_ge, drop_lt, &mut self.band);
        if sums.overflow {
            return Wide::Declined;
        }
        // the band in sorted order, exactly as the slow path classifies it
        let mut drop_max_d = sums.drop_max_d;
        self.band.sort_unstable_by(|a, b| b.v.total_cmp(&a.v));
        let mut kept_band = self.band.len();
        for (i, c) in self.band.iter_mut().enumerate() {
            c.e = (c.v - max).exp();
            let p = c.e / s;
            if -p.log2() > mu {
                kept_band = i;
                drop_max_d = drop_max_d.max(c.v - max);
                break;
            }
        }
        if drop_max_d >= D_HALF_ULP {
            return Wide::Declined;
        }
        let head = soft.sorted();
        let n_kept = head.len() + sums.n_keep as usize + kept_band;
        // the total and its error bound, in units of p = e / S
        let inv_s = 1.0 / s as f64;
        let head_sum: f64 = head.iter().map(|c| (c.e / s) as f64).sum();
        let band_sum: f64 = self.band[..kept_band]
            .iter()
            .map(|c| (c.e / s) as f64)
            .sum();
        let tail_sum = sums.mass * inv_s;
        let total = head_sum + tail_sum + band_sum;
        let err_tail = 1.01
            * inv_s
            * (REL_ERR * sums.mass
                + REL_ERR_PER_NAT * sums.mass_d
                + sums.n_keep as f64 * 2.0f64.powi(-125));
        let err_own = (n_kept as f64 + 64.0) * f64::EPSILON * total;
        let e_t = err_tail + err_own;
        let delta = 2.05 * e_t / (total - e_t) + 2.05 * gamma(n_kept + 1) + 1e-15;
        if delta.is_nan() || delta >= 1e-3 {
            return Wide::Declined;
        }
        let mut r = rng.clone();
        let u = r.uniform_f64();
        // the head: exact p in sorted order
        let mut cum = 0.0f64;
        let mut prev = f64::NEG_INFINITY;
        let mut found = None;
        for (j, c) in head.iter().enumerate() {
            cum += (c.e / s) as f64;
            let a = cum / total;
            if a - delta >= u {
                found = Some((j, prev));
                break;
            }
            prev = a;
        }
        if let Some((j, prev)) = found {
            if prev + delta >= u {
                return Wide::Declined;
            }
            let tied = (j > 0 && head[j - 1].v == head[j].v)
                || head.get(j + 1).is_some_and(|c| c.v == head[j].v);
            if tied && !soft.fix_order(row, ov, j + 1) {
                return Wide::Declined;
            }
            let c = soft.sorted()[j];
            *rng = r;
            return Wide::Drawn(Drawn {
                id: c.id,
                v: c.v,
                p: c.e / s,
            });
        }
        if prev + delta >= u {
            return Wide::Declined;
        }
        match self.draw_in_tail(row, ov, max, thr, keep_ge, s, head_sum, total, delta, u) {
            Some(d) => {
                *rng = r;
                Wide::Drawn(d)
            }
            None => Wide::Declined,
        }
    }

    /// The drawn entry when the draw lies beyond the head: the tail's estimated mass by value bins
    /// locates the bins where `u` is crossed, those are collected exactly and sorted, and the walk
    /// goes on from the estimated mass before them. `None` when undecided.
    #[allow(clippy::too_many_arguments)]
    fn draw_in_tail(
        &mut self,
        row: &[f32],
        ov: &Overlay,
        max: f32,
        thr: f32,
        keep_ge: f32,
        s: f32,
        head_sum: f64,
        total: f64,
        delta: f64,
        u: f64,
    ) -> Option<Drawn> {
        let thr_d = thr - max;
        let inv_s = 1.0 / s as f64;
        self.bins.clear();
        self.bins.resize(N_BINS, [0.0; 2]);
        let mut vbuf = [0.0f32; CHUNK];
        super::for_blocks(row, ov, |start, block, edited| {
            for &v in ov.current_block(row, start, block, edited, &mut vbuf) {
                let d = v - max;
                if v < thr && d >= keep_ge {
                    let b = &mut self.bins[bin_of(thr_d, d)];
                    b[0] += crate::ops::exp2_approx(d * LOG2E_F32) as f64;
                }
            }
        });
        // the first bin whose end may reach u, and the first whose end surely does
        let mut c = head_sum;
        let (mut lo, mut hi) = (None, None);
        let mut before_lo = head_sum;
        for (b, m) in self.bins.iter().enumerate() {
            let end = c + m[0] * inv_s;
            if lo.is_none() && end / total + delta >= u {
                lo = Some(b);
                before_lo = c;
            }
            if end / total - delta >= u {
                hi = Some(b);
                break;
            }
            c = end;
        }
        let (lo, hi) = (lo?, hi?);
        self.window.clear();
        let window = &mut self.window;
        super::for_blocks(row, ov, |start, block, edited| {
            for (j, &v) in ov
                .current_block(row, start, block, edited, &mut vbuf)
                .iter()
                .enumerate()
            {
                let d = v - max;
                if v < thr && d >= keep_ge && (lo..=hi).contains(&bin_of(thr_d, d)) {
                    window.push(Cand {
                        v,
                        e: d.exp(),
                        id: (start + j) as u32,
                    });
                }
            }
        });
        window.sort_unstable_by(|a, b| b.v.total_cmp(&a.v));
        let mut cum = before_lo;
        let mut prev = before_lo / total;
        for j in 0..window.len() {
            cum += (window[j].e / s) as f64;
            let a = cum / total;
            if a - delta >= u {
                let tied = (j > 0 && window[j - 1].v == window[j].v)
                    || window.get(j + 1).is_some_and(|c| c.v == window[j].v);
                if prev + delta >= u || tied {
                    return None;
                }
                let c = window[j];
                return Some(Drawn {
                    id: c.id,
                    v: c.v,
                    p: c.e / s,
                });
            }
            prev = a;
        }
        None
    }
}
