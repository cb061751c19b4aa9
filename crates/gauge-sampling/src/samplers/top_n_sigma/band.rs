//! top-n-sigma's bound: a rigorous interval around its exact cut from one vectorised pass, so
//! the stage can record a lazy mask instead of running llama.cpp's latency-bound sums.

use crate::kernels::{any_bad, spans};
use crate::overlay::{Overlay, CHUNK};

/// What [`sigma_band`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum SigmaBand {
    /// The exact cut lies in `[lo, hi]`.
    Band(f32, f32),
    /// Every value is -inf: the stage masks nothing.
    NoMask,
    /// The row holds NaN or +inf.
    Invalid,
}

/// Lanes of [`sigma_band`]'s accumulators: 4 accumulators x 8 lanes fit the 16 SSE registers.
const L: usize = 8;

crate::simd::multiversion! {
/// A rigorous interval around top-n-sigma's exact `cut` (`ops::top_n_sigma_cut` over the current
/// values, in id order), from one vectorised pass.
///
/// The exact cut comes from an f32 sum and an f32 sum of f64 squares, both sequential in array
/// order. This pass computes `N`, `max`, `Σy` and `Σy²` in f32 lanes per span (flushed to f64),
/// and bounds every rounding the exact computation can make:
/// * the f32 sum is within `γ_N Σ|y|` of `Σy` (`γ_k = k u / (1 - k u)`, `u = 2^-24`), so its mean is
///   within `Δ = γ_N Σ|y| / N` (plus the division's rounding) of the true mean `ȳ`;
/// * `Σ(y - m)² = T0 + N (m - ȳ)²` with `T0 = Σ(y - ȳ)²`, for any `m`; each `d = fl(y - m)` is
///   within `u` relative of `y - m`, its square exact in f64;
/// * the f32 accumulation of non-negative terms is within a factor `(1 ± ε)^N`,
///   `ε = 2^-24 + 2^-53`, of their sum;
/// * `sqrtf`, the divisions and `max - n·std` each round once (half an ulp).
///
/// The lane sums' own roundings (32 terms per lane and span) are bounded the same way, and `Σ|y|`
/// by Cauchy–Schwarz, `Σ|y| <= sqrt(N Σy²)`. All margins
/// below use `2^-22` where a single rounding needs `2^-24`. The interval is about `N·2^-24`
/// relative wide (1% at 150k entries), which is plenty to show that top-k's k-th value survives.
///
/// Dispatched ([`crate::simd`]): compiled at the baseline alone, its lane loops were vectorised
/// or not depending on where the compiler inlined it (the same source measured 63 and 127 µs per
/// token for `all-enabled` at 151,936 in two builds), and even dispatched the compiler sometimes
/// interleaved the lane sums into shuffles, so the lanes are written out per level
/// ([`crate::kernels::mask::Isa::sigma_lanes`]). The same lane arithmetic on every level.
pub(crate) fn sigma_band<I>(row: &[f32], ov: &Overlay, n_sigma: f32) -> SigmaBand {
    const U: f64 = 1.0 / 16_777_216.0; // 2^-24
    const R: f64 = 4.0 * U; // 2^-22: one rounding, generously
    let plain = !ov.has_transforms();
    let mut bad = false;
    let mut cnt = 0u64;
    let (mut f1, mut f2) = ([0.0f64; L], [0.0f64; L]);
    let mut lm = [f32::NEG_INFINITY; L];
    let mut vbuf = [0.0f32; CHUNK];
    for (start, span, edited) in spans(row, ov) {
        // the span's lane sums, the running maxima and the span's minima (sums, squares, max, min)
        let mut l = [[0.0f32; L], [0.0f32; L], lm, [f32::INFINITY; L]];
        // an unedited span's whole blocks in a loop of their own: inside the general loop below
        // the compiler kept the lane sums in memory in some builds (half the speed)
        let fast = if plain && !edited {
            span.len() / CHUNK * CHUNK
        } else {
            0
        };
        I::sigma_lanes(&span[..fast], &mut l);
        for (i, block) in span[fast..].chunks(CHUNK).enumerate() {
            let i = i + fast / CHUNK;
            let vals = if plain && !edited {
                block
            } else {
                ov.current_block(row, start + i * CHUNK, block, edited, &mut vbuf)
            };
            if !plain || edited {
                // the raw row is what must be valid (an edit may hide a NaN)
                bad |= any_bad(block);
            }
            // fixed-width lanes (a short last block is padded with -inf, which adds nothing)
            let mut pad = [f32::NEG_INFINITY; CHUNK];
            let vals: &[f32; CHUNK] = match vals.try_into() {
                Ok(v) => v,
                Err(_) => {
                    pad[..vals.len()].copy_from_slice(vals);
                    &pad
                }
            };
            I::sigma_lanes(vals, &mut l);
        }
        for j in 0..L {
            f1[j] += l[0][j] as f64;
            f2[j] += l[1][j] as f64;
        }
        lm = l[2];
        if l[3].contains(&f32::NEG_INFINITY) {
            for (i, block) in span.chunks(CHUNK).enumerate() {
                let vals = ov.current_block(row, start + i * CHUNK, block, edited, &mut vbuf);
                cnt += vals.iter().filter(|&&y| y > f32::NEG_INFINITY).count() as u64;
            }
        } else {
            cnt += span.len() as u64;
        }
    }
    let s1: f64 = f1.iter().sum();
    let s2: f64 = f2.iter().sum();
    if !(s1.is_finite() && s2.is_finite()) {
        // NaN/+inf somewhere, or squares too large for f32: tell them apart exactly
        let mut vbuf = [0.0f32; CHUNK];
        for (start, span, edited) in spans(row, ov) {
            for (i, block) in span.chunks(CHUNK).enumerate() {
                bad |= any_bad(block)
                    || any_bad(ov.current_block(row, start + i * CHUNK, block, edited, &mut vbuf));
            }
        }
    }
    if bad {
        return SigmaBand::Invalid;
    }
    if cnt == 0 {
        return SigmaBand::NoMask;
    }
    let max = lm
        .iter()
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    let unbounded = SigmaBand::Band(f32::NEG_INFINITY, f32::INFINITY);
    let n = cnt as f64;
    // (the f32 count must be exact and the error factors far from 1)
    if !s2.is_finite() || n * U > 0.05 {
        return unbounded;
    }
    // the lane sums: 32 terms per lane and span in f32, then f64 accumulation
    let lane = 34.0 * U + n * 1.2e-16;
    let e2 = lane * s2 + R * s2;
    // Σ|y| <= sqrt(N Σy²) (Cauchy-Schwarz), which spares a fifth accumulator
    let a1_hi = (n * (s2 + e2)).sqrt() * (1.0 + R);
    let e1 = lane * a1_hi;
    let gamma_n = n * U / (1.0 - n * U);
    // |fl32 mean - ȳ|
    let delta = gamma_n * a1_hi / n + (s1.abs() + e1) / n * R + 1e-300;
    let t0_lo = (s2 - e2) - (s1.abs() + e1).powi(2) / n - s2 * R;
    let t0_hi = (s2 + e2) - (s1.abs() - e1).max(0.0).powi(2) / n + s2 * R;
    let eps = U + 1.2e-16;
    let acc_lo = t0_lo.max(0.0) * (1.0 - R) * (1.0 - n * eps).max(0.0);
    let acc_hi = (t0_hi + n * delta * delta) * (1.0 + R) * (n * eps * 1.0001).exp();
    let std_lo = (acc_lo / n * (1.0 - R)).sqrt() * (1.0 - R);
    let std_hi = (acc_hi / n * (1.0 + R)).sqrt() * (1.0 + R);
    let ns = n_sigma as f64;
    let (ns_lo, ns_hi) = (ns * std_lo * (1.0 - R), ns * std_hi * (1.0 + R));
    let m = max as f64;
    let (c_lo, c_hi) = (m - ns_hi, m - ns_lo);
    let c_lo = c_lo - c_lo.abs() * R - 1e-30;
    let c_hi = c_hi + c_hi.abs() * R + 1e-30;
    if !(c_lo.is_finite() && c_hi.is_finite() && c_lo <= c_hi) {
        return unbounded;
    }
    SigmaBand::Band((c_lo as f32).next_down(), (c_hi as f32).next_up())
}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::SplitMix64;

    #[test]
    fn sigma_band_always_contains_the_exact_cut() {
        use crate::overlay::Transform;
        let mut widths = Vec::new();
        for seed in 0..300u64 {
            let n = 2 + (seed as usize * 977) % 40_000;
            let mut g = SplitMix64(seed + 77);
            let (sigma, mean) = (
                [0.01, 1.0, 3.0, 50.0, 1e4][seed as usize % 5],
                [0.0, -8.0, 3.5, 1e3][seed as usize % 4],
            );
            let mut row: Vec<f32> = (0..n)
                .map(|_| (mean + g.next_normal() * sigma) as f32)
                .collect();
            if seed % 3 == 0 {
                for i in (0..n).step_by(5) {
                    row[i] = f32::NEG_INFINITY;
                }
            }
            if seed % 7 == 0 {
                row.iter_mut().for_each(|x| *x = (*x * 4.0).round() / 4.0);
            }
            let mut ov = Overlay::default();
            ov.reset(n);
            if seed % 2 == 0 {
                ov.set((seed as usize * 31) % n, 40.0);
                ov.set((seed as usize * 17) % n, f32::NEG_INFINITY);
            }
            if seed % 5 == 3 {
                ov.push_transform(Transform::Div(0.7));
            }
            ov.prepare();
            let n_sigma = [0.5f32, 1.0, 2.0, 3.7][seed as usize % 4];
            let mut c = crate::candidates::Candidates::new();
            ov.materialize(&row, &mut c);
            let exact =
                crate::ops::top_n_sigma_cut(|| c.as_slice().iter().map(|t| t.logit), n_sigma);
            match sigma_band(&row, &ov, n_sigma) {
                SigmaBand::Band(lo, hi) => {
                    let cut = exact.expect("a band needs at least two values");
                    assert!(
                        lo <= cut && cut <= hi,
                        "seed {seed}: cut {cut} outside [{lo}, {hi}]"
                    );
                    // usefulness on logit-like rows (not the cancellation-heavy extremes): the band
                    // is a small fraction of the n·std distance from the max
                    if (1.0..=50.0).contains(&sigma) && mean.abs() <= 10.0 && c.len() > 100 {
                        let max = c
                            .as_slice()
                            .iter()
                            .fold(f32::NEG_INFINITY, |a, t| a.max(t.logit));
                        let shift = 1.0 + (mean * mean) / (sigma * sigma);
                        widths.push(((hi - lo) as f64 / (max - cut) as f64 / shift, n));
                    }
                }
                SigmaBand::NoMask => {
                    assert!(exact.is_none_or(|c| c == f32::NEG_INFINITY), "seed {seed}")
                }
                SigmaBand::Invalid => panic!("seed {seed}: finite row reported invalid"),
            }
        }
        // about N·2^-24 relative to the std, plus the cancellation in Σy² - (Σy)²/N, which grows
        // with (mean / std)² (divided out above)
        assert!(widths.len() > 50, "{}", widths.len());
        for (w, n) in widths {
            assert!(w < 2e-5 + n as f64 * 2e-7, "band {w} too wide for n = {n}");
        }
    }

    #[test]
    fn sigma_band_flags_nan_and_plus_inf_even_under_an_edit() {
        for bad in [f32::NAN, f32::INFINITY] {
            let mut row = vec![0.25f32; 1000];
            row[333] = bad;
            let mut ov = Overlay::default();
            ov.reset(row.len());
            ov.set(333, 1.0);
            ov.prepare();
            assert_eq!(sigma_band(&row, &ov, 1.0), SigmaBand::Invalid);
        }
    }
}
