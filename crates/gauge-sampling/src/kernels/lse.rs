//! The normalized penalty's one read of the row: its max and its log-sum-exp together, as
//! dispatched kernels ([`crate::simd`]). This is the whole extra cost of the fix, so its
//! arithmetic is chosen for speed under one constraint: the same bits on every level.
//!
//! # The arithmetic, which defines the bits
//!
//! * The row is read in blocks of 64 (`get(t)` each). A block whose largest value exceeds the
//!   running max `m` first rescales the sums by `exp(m_old - m)` in f64 (a handful of times on a
//!   row in no particular order), so each block's terms are taken against the max of everything
//!   read so far, and the sums end against the row's max.
//! * Each term is `exp_nonpos(get(t) - m)` in f32: a Cody–Waite reduction and a degree-7
//!   polynomial, every `a * b + c` a fused multiply-add (`f32::mul_add`). An FMA is one IEEE
//!   operation, so every level computes the same bits: AVX2 and AVX-512 (and aarch64) in hardware,
//!   the x86_64 baseline in software (libm's `fmaf`, correct but ~20× slower: ~3.5 ms at 151,936
//!   entries against ~0.03 ms; only CPUs from before 2013 and emulators without AVX2 run it).
//! * Terms go into 16 f64 lanes (term `j` of a block into lane `j % 16`). A block whose largest
//!   term is below `e^-2.75` (about 1/16 of the largest of the row so far, which is 1) adds its
//!   terms four at a time, `(t[j] + t[j+16]) + (t[j+32] + t[j+48])` in f32, then once in f64; any
//!   other block adds its terms one by one in f64, in that order. The f32 sums round by at most
//!   2^-24 of terms that are each at most 1/16 of the largest, so the sum is as accurate as adding
//!   every term in f64 (on 64 real rows of the default model, the log-softmax of every entry
//!   rounds as the exact sum's does in all but 6 of 3.1M entries; the two-pass f64 sum it replaced
//!   missed 7), at half the cost of converting every term. The last `len % 64` entries are a block
//!   of their own, their terms one by one into lane `i % 16`.
//! * The 16 lanes are added in order, and the log is f64's `ln`.
//!
//! The max is the largest value as a fold over the row finds it (NaN never wins, `-inf` for an
//! empty row; a zero max takes the sign of the first zero, which the fold settles).

use crate::candidates::TokenData;
use crate::simd::multiversion;

multiversion! {
    /// The largest `v + shift` and `ln Σ exp((v + shift) - max)` over `values`, in one read (the
    /// instrument passes its shift). `shift = 0` reads the values as they are, so a zero max
    /// keeps its sign; any shift gives the same log-sum-exp as adding it to the row first.
    pub(crate) fn row_max_lse(values: &[f32], shift: f32) -> (f32, f64) {
        if shift == 0.0 {
            let (max, lse) = lse_body(values, |&z| z);
            return (settle_zero(max, values, |&z| z), lse);
        }
        let (max, lse) = lse_body(values, |&z| z + shift);
        (settle_zero(max, values, |&z| z + shift), lse)
    }
}

multiversion! {
    /// [`row_max_lse`] over a candidate array's logits, bit for bit the same as over a slice of
    /// them.
    pub(crate) fn data_max_lse(data: &[TokenData]) -> (f32, f64) {
        let (max, lse) = lse_body(data, |t| t.logit);
        (settle_zero(max, data, |t| t.logit), lse)
    }
}

/// The sign of a zero maximum as `apply_normalized`'s fold gives it (the first zero met), which
/// the lane-wise maximum does not settle. The log-sum-exp does not depend on it.
fn settle_zero<T>(max: f32, items: &[T], get: impl Fn(&T) -> f32) -> f32 {
    if max != 0.0 {
        return max;
    }
    items.iter().fold(f32::NEG_INFINITY, |m, t| {
        let z = get(t);
        if z > m {
            z
        } else {
            m
        }
    })
}

/// Blocks whose largest `get(t) - max` is at most this many nats below 0 add their terms in f32
/// groups of four (see the module docs): `e^-2.75 ≈ 0.064`.
const GROUPED_BELOW: f32 = -2.75;

/// A new maximum `top` rescales what was summed against the old one (one f64 rounding per lane;
/// on an unsorted row it happens a handful of times).
#[inline(always)]
fn raise_max(acc: &mut [f64], max: &mut f32, top: f32) {
    if top > *max {
        let scale = (f64::from(*max) - f64::from(top)).exp();
        acc.iter_mut().for_each(|a| *a *= scale);
        *max = top;
    }
}

/// The max and log-sum-exp of the module docs, inlined into each level's kernel. The log-sum-exp
/// means nothing when the max is not finite (the callers check).
#[inline(always)]
fn lse_body<T>(items: &[T], get: impl Fn(&T) -> f32) -> (f32, f64) {
    const BLOCK: usize = 64;
    const LANES: usize = 16;
    let mut acc = [0.0f64; LANES];
    let mut max = f32::NEG_INFINITY;
    let blocks = items.chunks_exact(BLOCK);
    let rest = blocks.remainder();
    for block in blocks {
        // the block as four groups of 16 lanes (one array per group, not one of 64: indexing a
        // 64-array at `j + 16`, `j + 32`.. made the compiler spill it to the stack and reload it
        // across store boundaries, at half the speed)
        let mut t = [[0.0f32; LANES]; BLOCK / LANES];
        for (g, src) in t.iter_mut().zip(block.chunks_exact(LANES)) {
            for (v, x) in g.iter_mut().zip(src) {
                *v = get(x);
            }
        }
        let mut lanes = [f32::NEG_INFINITY; LANES];
        for g in &t {
            for (m, &v) in lanes.iter_mut().zip(g) {
                *m = if v > *m { v } else { *m };
            }
        }
        // The horizontal maximum only when the block raises the max (rare after the first few).
        if lanes.iter().fold(false, |r, &m| r | (m > max)) {
            let top = lanes
                .iter()
                .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
            raise_max(&mut acc, &mut max, top);
        }
        // Subtracting `max` is monotone, so each lane's largest difference is `lane - max`.
        let grouped = lanes
            .iter()
            .fold(true, |g, &m| g & (m - max <= GROUPED_BELOW));
        for g in t.iter_mut() {
            for v in g.iter_mut() {
                *v = exp_nonpos(*v - max);
            }
        }
        let [t0, t1, t2, t3] = &t;
        if grouped {
            for (j, a) in acc.iter_mut().enumerate() {
                *a += f64::from((t0[j] + t1[j]) + (t2[j] + t3[j]));
            }
        } else {
            for g in &t {
                for (a, &e) in acc.iter_mut().zip(g) {
                    *a += f64::from(e);
                }
            }
        }
    }
    let top = rest.iter().fold(f32::NEG_INFINITY, |m, x| {
        let v = get(x);
        if v > m {
            v
        } else {
            m
        }
    });
    raise_max(&mut acc, &mut max, top);
    for (i, x) in rest.iter().enumerate() {
        acc[i % LANES] += f64::from(exp_nonpos(get(x) - max));
    }
    (max, acc.iter().sum::<f64>().ln())
}

/// `exp(x)` for `x <= 0` (including `-inf`) in f32, within about 1 ulp of the exact value.
///
/// `x = k·ln2 + r` with `|r| <= ln2/2` (Cody–Waite split of ln2), `exp(r)` by its degree-7 Taylor
/// polynomial in Horner form (truncation error `< 5e-9` relative), then scaled by `2^k` through
/// the exponent bits. Every step is an FMA. Inputs below -87 (and NaN) are clamped to -87:
/// `exp(-87) ≈ 1.6e-38` is invisible in a sum that is at least 1, and the clamp keeps `2^k` a
/// normal f32. No branches, so loops over it vectorise.
#[inline(always)]
pub(crate) fn exp_nonpos(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75; // ln2 with the low 9 mantissa bits cleared: k * LN2_HI is exact
    const LN2_LO: f32 = 1.428_606_8e-6; // ln2 - LN2_HI
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding and subtracting it rounds to integer
    const C: [f32; 8] = [
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
    // A comparison, not `f32::max`, so it compiles to one `maxps` (no NaN fix-up).
    let x = if x > -87.0 { x } else { -87.0 };
    let kr = x.mul_add(LOG2E, ROUND);
    let k = kr - ROUND;
    let r = (-k).mul_add(LN2_LO, (-k).mul_add(LN2_HI, x));
    let p = C[1..].iter().fold(C[0], |p, &c| p.mul_add(r, c));
    // k is an integer in [-126, 0] and sits in the low mantissa bits of `kr` (1.5·2^23 + k), so
    // the biased exponent `k + 127` comes from integer arithmetic on those bits (no float→int
    // conversion, which would not vectorise).
    let scale = f32::from_bits(kr.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23);
    p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_nonpos_is_within_two_ulp_of_exact() {
        // Dense sweep of [-87, 0] plus the special values.
        let mut worst = 0.0f64;
        let n = 2_000_000;
        for i in 0..=n {
            let x = -87.0f32 * i as f32 / n as f32;
            let exact = f64::from(x).exp();
            let got = f64::from(exp_nonpos(x));
            worst = worst.max(((got - exact) / exact).abs());
        }
        assert!(
            worst < 2.0 * f64::from(f32::EPSILON),
            "max relative error {worst}"
        );
        assert_eq!(exp_nonpos(0.0), 1.0);
        assert_eq!(exp_nonpos(-0.0), 1.0);
        assert!(exp_nonpos(f32::NEG_INFINITY) < 1e-37);
        assert!(exp_nonpos(-1000.0) < 1e-37);
    }

    fn xorshift(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        }
    }

    fn as_data(row: &[f32]) -> Vec<TokenData> {
        row.iter()
            .enumerate()
            .map(|(i, &z)| TokenData {
                id: i as i32,
                logit: z,
                p: 0.0,
            })
            .collect()
    }

    /// Rows of every remainder length whose max is in the first block (so every term is taken
    /// against the row's max), with one entry far above the rest (a term of 1 among small ones,
    /// the case f32 sums would round) and blocks on both sides of the grouping bound. Against the
    /// sum of the same terms in f64 the kernel may differ only by the f32 roundings of grouped
    /// blocks (at most 2^-23 of their terms); a block that holds a large term and is wrongly
    /// grouped misses this by orders of magnitude.
    #[test]
    fn lse_adds_large_terms_in_f64_and_small_ones_in_groups() {
        let mut next = xorshift(7);
        let mut grouped_blocks = 0;
        for &n in &[1usize, 5, 63, 64, 65, 130, 1000, 4096 + 17] {
            for scale in [0.5f32, 3.0, 12.0] {
                let mut row: Vec<f32> = (0..n).map(|_| (next() - 0.5) * 2.0 * scale).collect();
                row[n / 3 % 64] = scale + 20.0; // the others are within ±scale
                let max = row.iter().fold(f32::NEG_INFINITY, |m, &z| m.max(z));
                let terms: Vec<f64> = row
                    .iter()
                    .map(|&z| f64::from(exp_nonpos(z - max)))
                    .collect();
                let mut slack = 0.0;
                for (block, terms) in row.chunks_exact(64).zip(terms.chunks_exact(64)) {
                    // the module docs' bound, written out: the test must not follow the constant
                    if block.iter().all(|&z| z - max <= -2.75) {
                        grouped_blocks += 1;
                        slack += terms.iter().sum::<f64>() * 2f64.powi(-23);
                    }
                }
                let sum: f64 = terms.iter().sum();
                let (got_max, got) = row_max_lse(&row, 0.0);
                assert_eq!(got_max, max);
                assert!(
                    (got.exp() - sum).abs() <= slack + 1e-14 * sum,
                    "n {n} scale {scale}: sum {} vs {sum}, slack {slack}",
                    got.exp()
                );
                // the terms themselves are exp's to 2 ulp
                let exact: f64 = row.iter().map(|&z| f64::from(z - max).exp()).sum();
                assert!(
                    (sum - exact).abs() <= 2.4e-7 * exact,
                    "n {n}: {sum} vs {exact}"
                );
                // the candidate-array kernel reads the same values in the same order
                let (dm, dl) = data_max_lse(&as_data(&row));
                assert_eq!((dm.to_bits(), dl.to_bits()), (max.to_bits(), got.to_bits()));
            }
        }
        assert!(
            grouped_blocks > 50,
            "only {grouped_blocks} grouped blocks tested"
        );
    }

    /// Every level the machine runs gives the baseline level's bits, for the row kernel and the
    /// candidate-array kernel: lengths around the block and lane sizes, blocks on both sides of
    /// the grouping bound, a max that rises block after block and inside the tail, `-inf`
    /// entries, a shift.
    #[test]
    fn every_level_gives_the_same_bits() {
        let mut next = xorshift(5);
        let mut rows: Vec<Vec<f32>> = Vec::new();
        for &n in &[1usize, 7, 16, 63, 64, 65, 127, 200, 1000, 4096 + 37, 49_152] {
            rows.push((0..n).map(|_| (next() - 0.5) * 24.0).collect());
            rows.push((0..n).map(|i| i as f32 / 64.0 + next()).collect());
            let mut r: Vec<f32> = (0..n).map(|_| (next() - 0.5) * 6.0).collect();
            r[n / 2] = 9.0;
            r[n - 1] = f32::NEG_INFINITY;
            rows.push(r);
        }
        let levels = crate::simd::available();
        for (i, row) in rows.iter().enumerate() {
            let bits = |level| {
                crate::simd::testing::force(Some(level));
                let (m, l) = row_max_lse(row, 0.0);
                let (ms, ls) = row_max_lse(row, 1.25);
                let (dm, dl) = data_max_lse(&as_data(row));
                crate::simd::testing::force(None);
                [
                    m.to_bits() as u64,
                    l.to_bits(),
                    ms.to_bits() as u64,
                    ls.to_bits(),
                    dm.to_bits() as u64,
                    dl.to_bits(),
                ]
            };
            let want = bits(levels[0]);
            for &level in &levels[1..] {
                assert_eq!(
                    bits(level),
                    want,
                    "row {i} (n {}) on {}",
                    row.len(),
                    level.name()
                );
            }
        }
    }

    /// A row whose max rises block after block (every block rescales the sums) and one that
    /// rises inside the tail: the result is the exact log-sum-exp to the terms' own accuracy,
    /// and the max is the row's.
    #[test]
    fn a_rising_max_rescales_what_was_summed() {
        let mut next = xorshift(11);
        for &n in &[64usize * 40, 64 * 40 + 37] {
            let row: Vec<f32> = (0..n).map(|i| i as f32 / 64.0 + next()).collect();
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &z| m.max(z));
            let (got_max, got) = row_max_lse(&row, 0.0);
            assert_eq!(got_max, max);
            let exact: f64 = row.iter().map(|&z| f64::from(z - max).exp()).sum();
            assert!(
                (got.exp() - exact).abs() <= 3e-7 * exact,
                "{} vs {exact}",
                got.exp()
            );
        }
    }

    /// A shift moves the max and leaves the log-sum-exp (a shift of 0 changes no bit); a zero
    /// max takes the first zero's sign; rows without a finite max say so through the max.
    #[test]
    fn shift_zero_sign_and_rows_without_a_finite_max() {
        let row: Vec<f32> = (0..300)
            .map(|i| ((i * 37) % 101) as f32 / 7.0 - 3.0)
            .collect();
        let (m0, l0) = row_max_lse(&row, 0.0);
        let (m5, l5) = row_max_lse(&row, 5.0);
        assert_eq!(m5, m0 + 5.0);
        assert!((l5 - l0).abs() < 1e-6);
        let mut neg = vec![-0.0f32, 0.0, -1.0];
        assert!(row_max_lse(&neg, 0.0).0.is_sign_negative());
        neg.swap(0, 1);
        assert!(row_max_lse(&neg, 0.0).0.is_sign_positive());
        assert_eq!(row_max_lse(&[], 0.0).0, f32::NEG_INFINITY);
        assert_eq!(
            row_max_lse(&[f32::NEG_INFINITY; 70], 0.0).0,
            f32::NEG_INFINITY
        );
        let mut inf = vec![1.0f32; 70];
        inf[3] = f32::INFINITY;
        assert_eq!(row_max_lse(&inf, 0.0).0, f32::INFINITY);
    }
}
