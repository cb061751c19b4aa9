//! Helpers shared by several samplers, with llama.cpp's exact arithmetic and ordering
//! (`softmax_impl`, `partial_sort_inplace`, `top_k_impl`, `temp_impl`; docs/SPEC.md §0).
//!
//! Design choices:
//! * Sorting goes through the libstdc++ ports in [`crate::sort`], because the array order after a
//!   sort is observable downstream (dist picks by array order).
//! * Sums are f32 accumulators in array order and temperature is a division, as in llama.cpp: a
//!   "better" summation would change the last ulp and, through dist, the sampled token.
//! * The bucket sort needs an output buffer. Rather than change these signatures (other samplers
//!   call them), a thread-local [`BucketSorter`] is reused, so a step allocates only the first time
//!   a thread sees a vocabulary that large.
//! * llama.cpp asserts on an empty array in `softmax_impl`; here an empty array is left untouched,
//!   so no user input can make the library panic.
//! * [`top_n_sigma_cut`] is the one implementation of that stage's threshold, shared by the filled
//!   array and the row fast path's lazy mask, so both compute it from the same code.
//! * [`exp2_approx`] is not a llama.cpp function: the row fast paths use it to classify entries
//!   under a proven error bound, never as a value (see `scan`).

use std::cell::RefCell;

use crate::candidates::{Candidates, TokenData};
use crate::sort::{partial_sort_by, BucketSorter};

/// Comparator of llama.cpp: descending by logit.
#[inline]
pub(crate) fn logit_greater(a: &TokenData, b: &TokenData) -> bool {
    a.logit > b.logit
}

/// llama.cpp switches from the heap partial sort to the bucket sort above this many elements.
pub(crate) const HEAP_PARTIAL_SORT_MAX: usize = 128;

thread_local! {
    static SCRATCH: RefCell<BucketSorter> = RefCell::new(BucketSorter::new());
}

/// llama.cpp `llama_token_data_array_partial_sort_inplace`: sort the top `npartial` entries
/// descending, truncate to them, set `sorted`.
///
/// `npartial <= 128` is `std::partial_sort` over the whole array; larger is the 128-bucket sort into
/// a scratch buffer with the first `npartial` copied back. `npartial` is clamped to the size.
pub fn partial_sort_inplace(cur: &mut Candidates, npartial: usize) {
    let npartial = npartial.min(cur.len());
    if npartial <= HEAP_PARTIAL_SORT_MAX {
        partial_sort_by(cur.as_mut_slice(), npartial, logit_greater);
    } else {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let out = s.sort(cur.as_slice(), npartial);
            cur.as_mut_slice()[..npartial].copy_from_slice(&out[..npartial]);
        });
    }
    cur.truncate(npartial);
    cur.sorted = true;
}

/// The largest logit, with `std::max`'s rule (`a < b ? b : a`, so the first of equal maxima and
/// no NaN promotion), starting from `s[0]`.
#[inline]
pub(crate) fn max_logit(s: &[TokenData]) -> f32 {
    let mut m = s[0].logit;
    for t in &s[1..] {
        if m < t.logit {
            m = t.logit;
        }
    }
    m
}

/// llama.cpp `softmax_impl`: optional full sort, then `p = expf(l - max) / sum` with an f32 sum in
/// array order. `max` is `data[0]` when the array is sorted (even if `do_sort` is false).
pub fn softmax_impl(cur: &mut Candidates, do_sort: bool) {
    if cur.is_empty() {
        return;
    }
    if do_sort && !cur.sorted {
        let n = cur.len();
        partial_sort_inplace(cur, n);
    }
    let sorted = cur.sorted;
    let s = cur.as_mut_slice();
    let max_l = if sorted { s[0].logit } else { max_logit(s) };
    let mut cum = 0.0f32;
    for t in s.iter_mut() {
        let p = (t.logit - max_l).exp();
        t.p = p;
        cum += p;
    }
    for t in s.iter_mut() {
        t.p /= cum;
    }
}

/// llama.cpp `top_k_impl`: `k <= 0` does nothing; an unsorted array gets a partial sort of its top
/// `min(k, size)`; a sorted one is only truncated. Probabilities are not touched.
pub fn top_k_impl(cur: &mut Candidates, k: i32) {
    if k <= 0 {
        return;
    }
    let k = (k as usize).min(cur.len());
    if !cur.sorted {
        partial_sort_inplace(cur, k);
    }
    cur.truncate(k);
}

/// llama.cpp `temp_impl`: `t <= 0` keeps the first maximum (strict `>`) and masks the rest to -inf
/// without reordering; otherwise divides (not multiplies by 1/t, which rounds differently).
///
/// Where the division would overflow f32 ([`temp_overflows`]: a tiny `t`, or logits near f32's
/// range), llama.cpp's logits become `±inf` and its softmax NaN, so it draws an arbitrary token.
/// gauge divides `z - max(z)` instead: softmax ignores the shift, so this is the same
/// distribution, computed without overflow. As `t → 0` it tends to the argmax (exact ties share
/// the mass), the limit of the `t <= 0` rule. Rows that do not overflow are untouched (bit-exact).
pub fn temp_impl(cur: &mut Candidates, t: f32) {
    if cur.is_empty() {
        return;
    }
    let s = cur.as_mut_slice();
    if t <= 0.0 {
        let mut max_i = 0;
        let mut max_l = s[0].logit;
        for (i, c) in s.iter().enumerate().skip(1) {
            if c.logit > max_l {
                max_l = c.logit;
                max_i = i;
            }
        }
        for (i, c) in s.iter_mut().enumerate() {
            if i != max_i {
                c.logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    // Only t < 1 can overflow; the magnitude pass is skipped otherwise.
    if t < 1.0 {
        let (max, max_abs) = s
            .iter()
            .filter(|c| c.logit.is_finite())
            .fold((f32::NEG_INFINITY, 0.0f32), |(m, a), c| {
                (m.max(c.logit), a.max(c.logit.abs()))
            });
        if temp_overflows(max_abs, t) {
            for c in s.iter_mut() {
                c.logit = (c.logit - max) / t;
            }
            return;
        }
    }
    for c in s.iter_mut() {
        c.logit /= t;
    }
}

/// Whether dividing logits of magnitude up to `max_abs` by `t > 0` overflows f32. Only `t < 1`
/// can; `max_abs / t` is rounded monotonically, so checking the largest magnitude is enough.
#[inline]
pub(crate) fn temp_overflows(max_abs: f32, t: f32) -> bool {
    t < 1.0 && (max_abs / t).is_infinite()
}

/// llama.cpp's top-n-sigma threshold over the values `vals()` yields (in array order; called twice,
/// once per pass): entries `< cut` are masked. Over the values that are not `-inf`: `max` (starting
/// from the first value), an f32 `sum` and `count`, `mean = sum / count`, then `acc += pow(v -
/// mean, 2)` with the double square rounded to f32 by each `+=`, and the population std
/// `sqrtf(acc / count)`; `cut = max - n * std`. `None` for fewer than two values (the stage does
/// nothing). The one implementation behind both the filled-array stage and the row fast path.
/// Always inlined: its loops over the lazy mask's stage values (`StageValues::iter`) ran 1.8× as
/// long when the compiler, after an unrelated change elsewhere in the crate, chose a call.
#[inline(always)]
pub(crate) fn top_n_sigma_cut<I: Iterator<Item = f32>>(
    mut vals: impl FnMut() -> I,
    n: f32,
) -> Option<f32> {
    let mut it = vals();
    let first = it.next()?;
    it.next()?;
    let mut max = first;
    let mut sum = 0.0f32;
    let mut count = 0usize;
    for v in vals() {
        if v != f32::NEG_INFINITY {
            if max < v {
                max = v;
            }
            sum += v;
            count += 1;
        }
    }
    let mean = if count > 0 { sum / count as f32 } else { 0.0 };
    let mut acc = 0.0f32;
    for v in vals() {
        if v != f32::NEG_INFINITY {
            let d = (v - mean) as f64;
            acc = (acc as f64 + d * d) as f32;
        }
    }
    let std = if count > 0 {
        (acc / count as f32).sqrt()
    } else {
        0.0
    };
    Some(max - n * std)
}

/// `2^y` in plain f32 arithmetic, vectorisable (no libm call, no branch), for `y <= 127`; inputs
/// below -126 are read as -126.
///
/// Not llama.cpp's `expf`: it only *classifies* entries whose exact `expf` provably does not matter
/// or rounds the same way (see `kernels::sorted_softmax`), never produces a value that reaches a
/// probability. Method: `y = k + f` with `k = round(y)` (magic-number rounding, exact) and
/// `|f| <= 1/2` (exact subtraction), `2^f` by the degree-5 Taylor polynomial of `e^(f ln 2)`, times
/// `2^k` built from the exponent bits (exact). So the relative error is the polynomial's alone, for
/// every input: [`EXP2_APPROX_REL_ERR`] bounds it, checked over every f32 in [-1/2, 1/2] by
/// `exp2_approx_error_bound_holds_for_every_f32` (`--ignored`; a dense sample runs by default).
#[inline(always)]
pub(crate) fn exp2_approx(y: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    const C1: f32 = std::f32::consts::LN_2;
    const C2: f32 = 0.240_226_5; // ln2^2 / 2
    const C3: f32 = 0.055_504_11; // ln2^3 / 6
    const C4: f32 = 0.009_618_129; // ln2^4 / 24
    const C5: f32 = 0.001_333_355_8; // ln2^5 / 120
    let y = if y < -126.0 { -126.0 } else { y };
    let t = y + MAGIC;
    let k = t - MAGIC;
    let f = y - k;
    let ki = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let p = 1.0 + f * (C1 + f * (C2 + f * (C3 + f * (C4 + f * C5))));
    p * f32::from_bits(((ki + 127) as u32) << 23)
}

/// A bound on `|exp2_approx(y) / 2^y - 1|`: the exhaustive check measured 3.33e-6 (the degree-6
/// term, `(ln2 / 2)^6 / 720 = 2.4e-6`, plus the f32 roundings of the Horner steps).
pub(crate) const EXP2_APPROX_REL_ERR: f64 = 4.0e-6;

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(logits: &[f32]) -> Candidates {
        Candidates::from_logits(logits)
    }

    fn exp2_rel_err(f: f32) -> f64 {
        (exp2_approx(f) as f64 / (f as f64).exp2() - 1.0).abs()
    }

    #[test]
    fn exp2_approx_error_bound_holds_on_a_dense_sample() {
        let mut worst = 0.0f64;
        let mut f = -0.5f32;
        while f <= 0.5 {
            worst = worst.max(exp2_rel_err(f));
            f = f32::from_bits(if f < 0.0 {
                f.to_bits() - 997
            } else {
                f.to_bits() + 997
            })
            .max(f.next_up());
        }
        assert!(
            worst < EXP2_APPROX_REL_ERR,
            "worst relative error {worst:e}"
        );
        // the scaling is exact, so whole numbers are exact and the bound holds far out
        assert_eq!(exp2_approx(0.0), 1.0);
        assert_eq!(exp2_approx(-20.0), 2.0f32.powi(-20));
        assert_eq!(exp2_approx(-1000.0), 2.0f32.powi(-126));
        for y in [-125.3f32, -40.7, -3.25, 0.4, 7.5, 22.9] {
            assert!(
                (exp2_approx(y) as f64 / (y as f64).exp2() - 1.0).abs() < EXP2_APPROX_REL_ERR,
                "{y}"
            );
        }
    }

    /// Every f32 in [-1/2, 1/2] (about 2.1e9 values, half a minute in release mode): the
    /// polynomial's error is the whole error of `exp2_approx`, so this proves the bound.
    #[test]
    #[ignore]
    fn exp2_approx_error_bound_holds_for_every_f32() {
        let mut worst = 0.0f64;
        for bits in 0..=0.5f32.to_bits() {
            worst = worst.max(exp2_rel_err(f32::from_bits(bits)));
            worst = worst.max(exp2_rel_err(-f32::from_bits(bits)));
        }
        eprintln!("exp2_approx: worst relative error {worst:e} over [-1/2, 1/2]");
        assert!(
            worst < EXP2_APPROX_REL_ERR,
            "worst relative error {worst:e}"
        );
    }

    #[test]
    fn temp_zero_keeps_the_first_of_tied_maxima() {
        let mut c = cands(&[1.0, 3.0, 2.0, 3.0]);
        temp_impl(&mut c, 0.0);
        let l: Vec<f32> = c.as_slice().iter().map(|t| t.logit).collect();
        assert_eq!(
            l,
            [f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY, f32::NEG_INFINITY]
        );
        assert_eq!(c.ids(), [0, 1, 2, 3], "temp 0 does not reorder");
    }

    #[test]
    fn temp_divides() {
        let mut c = cands(&[1.0]);
        temp_impl(&mut c, 3.0);
        assert_eq!(c.as_slice()[0].logit, 1.0f32 / 3.0);
    }

    #[test]
    fn softmax_on_empty_is_a_no_op() {
        let mut c = Candidates::new();
        softmax_impl(&mut c, true);
        assert!(c.is_empty());
    }

    #[test]
    fn top_k_on_sorted_only_truncates() {
        // deliberately "sorted" but not in order: top-k must trust the flag, as llama.cpp does
        let data = [1.0f32, 5.0, 3.0]
            .iter()
            .enumerate()
            .map(|(i, &l)| TokenData {
                id: i as i32,
                logit: l,
                p: 0.0,
            });
        let mut c = Candidates::from_data(data.collect(), true);
        top_k_impl(&mut c, 2);
        assert_eq!(c.ids(), [0, 1]);
    }

    #[test]
    fn partial_sort_inplace_large_uses_buckets_and_keeps_k() {
        let logits: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
            .collect();
        let mut c = cands(&logits);
        partial_sort_inplace(&mut c, 300);
        assert_eq!(c.len(), 300);
        assert!(c.sorted);
        assert!(c.as_slice().windows(2).all(|w| w[0].logit >= w[1].logit));
        assert_eq!(c.as_slice()[0].logit, 4.99);
    }
}
