//! The entries of a row that an allowed set keeps, in id order: what the normalized penalty sums
//! when a grammar's set is in the overlay (the fill path's array holds exactly these). A copy, so
//! every level gives the same result; with AVX-512 each 16 entries are one register compress,
//! with AVX2 each 8 one permute from a table (the bit-by-bit loop took a fifth of a grammar step
//! with the normalized penalty at 151,936).

use crate::simd::Level;

/// The entries of `values` (one per id) whose bit is set in `bits` (bit `i % 32` of word
/// `i / 32`), in order, into `out`.
pub(crate) fn compact_kept(values: &[f32], bits: &[u32], out: &mut Vec<f32>) {
    out.clear();
    #[cfg(target_arch = "x86_64")]
    if crate::simd::level() == Level::Avx512 {
        crate::simd::count(Level::Avx512);
        // SAFETY: `level()` returns AVX-512 only where `supported()` found it on this CPU.
        unsafe { compact_avx512(values, bits, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::simd::level() == Level::Avx2 {
        crate::simd::count(Level::Avx2);
        // SAFETY: `level()` returns AVX2 only where `supported()` found it (with POPCNT).
        unsafe { compact_avx2(values, bits, out) };
        return;
    }
    crate::simd::count(Level::Baseline);
    compact_from(values, bits, 0, out);
}

/// [`compact_kept`] from entry `from` (a multiple of 32) on, a word at a time; a run of whole
/// words moves as one copy.
fn compact_from(values: &[f32], bits: &[u32], from: usize, out: &mut Vec<f32>) {
    let n = values.len();
    let mut k = from / 32;
    while k < bits.len() && k * 32 < n {
        let base = k * 32;
        if bits[k] == u32::MAX {
            let run = bits[k..].iter().take_while(|&&w| w == u32::MAX).count();
            out.extend_from_slice(&values[base..((k + run) * 32).min(n)]);
            k += run;
            continue;
        }
        let mut rest = bits[k];
        while rest != 0 {
            let i = base + rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if i < n {
                out.push(values[i]);
            }
        }
        k += 1;
    }
}

/// [`compact_kept`] with `vcompressps`: each 16 entries compressed in a register and stored whole
/// (a store of the compressed lanes to memory is microcoded and slow on some CPUs), the write
/// position advanced by the mask's popcount. The entries past the last whole pair of 16 go
/// through [`compact_from`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn compact_avx512(values: &[f32], bits: &[u32], out: &mut Vec<f32>) {
    use std::arch::x86_64::{_mm512_loadu_ps, _mm512_maskz_compress_ps, _mm512_storeu_ps};
    // whole words of 32 entries that have their bits
    let words = (values.len() / 32).min(bits.len());
    out.reserve(words * 32 + 16);
    let dst = out.as_mut_ptr();
    let src = values.as_ptr();
    let mut w = 0usize;
    for (k, &word) in bits[..words].iter().enumerate() {
        for half in 0..2 {
            let m = (word >> (16 * half)) as u16;
            let at = k * 32 + 16 * half;
            // SAFETY: `at + 16 <= words * 32 <= values.len()`; `w <= at`, so the 16 lanes stored
            // at `w` end within the `words * 32 + 16` reserved. The first `w` stored entries are
            // the kept ones, in order.
            unsafe {
                let v = _mm512_maskz_compress_ps(m, _mm512_loadu_ps(src.add(at)));
                _mm512_storeu_ps(dst.add(w), v);
            }
            w += m.count_ones() as usize;
        }
    }
    // SAFETY: the first `w` entries were written above and `w <= capacity`.
    unsafe { out.set_len(w) };
    compact_from(values, bits, words * 32, out);
}

/// For each 8-bit mask, the lanes it keeps in order (the rest 0): `vpermps`' index vector.
#[cfg(target_arch = "x86_64")]
const KEEP8: [[u8; 8]; 256] = {
    let mut t = [[0u8; 8]; 256];
    let mut m = 0;
    while m < 256 {
        let (mut lane, mut w) = (0, 0);
        while lane < 8 {
            if m >> lane & 1 == 1 {
                t[m][w] = lane as u8;
                w += 1;
            }
            lane += 1;
        }
        m += 1;
    }
    t
};

/// [`compact_kept`] with AVX2: each 8 entries permuted so the kept ones lead (the index vector
/// from [`KEEP8`]) and stored whole, the write position advanced by the mask's popcount; the
/// entries past the last whole word go through [`compact_from`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn compact_avx2(values: &[f32], bits: &[u32], out: &mut Vec<f32>) {
    use std::arch::x86_64::{
        _mm256_cvtepu8_epi32, _mm256_loadu_ps, _mm256_permutevar8x32_ps, _mm256_storeu_ps,
        _mm_loadl_epi64,
    };
    let words = (values.len() / 32).min(bits.len());
    out.reserve(words * 32 + 8);
    let dst = out.as_mut_ptr();
    let src = values.as_ptr();
    let mut w = 0usize;
    for (k, &word) in bits[..words].iter().enumerate() {
        // (a loop, not a closure: a closure would not inherit AVX2)
        for q in 0..4 {
            let m = (word >> (8 * q)) as u8;
            let at = k * 32 + 8 * q;
            // SAFETY: `at + 8 <= words * 32 <= values.len()`; `w <= at`, so the 8 lanes stored
            // at `w` end within the `words * 32 + 8` reserved; the table row is 8 bytes.
            unsafe {
                let idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(KEEP8[m as usize].as_ptr().cast()));
                let v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(src.add(at)), idx);
                _mm256_storeu_ps(dst.add(w), v);
            }
            w += m.count_ones() as usize;
        }
    }
    // SAFETY: the first `w` entries were written above and `w <= capacity`.
    unsafe { out.set_len(w) };
    compact_from(values, bits, words * 32, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain filter, on every level this machine runs: every word shape (empty, whole,
    /// one bit, random), runs of whole words, masks shorter than the row and rows of every tail
    /// length; and the forced level is the one that ran.
    #[test]
    fn compact_kept_is_the_filter_of_the_kept_entries_on_every_level() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut out = Vec::new();
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for n in [
                0usize, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099,
            ] {
                for shape in 0..6 {
                    let words = match shape {
                        5 => n / 32, // a set shorter than the row: ids past it are removed
                        _ => n.div_ceil(32),
                    };
                    let bits: Vec<u32> = (0..words)
                        .map(|k| match (shape + k) % 6 {
                            0 => 0,
                            1 | 2 => u32::MAX,
                            3 => 1 << (next() % 32),
                            _ => next() as u32,
                        })
                        .collect();
                    let values: Vec<f32> = (0..n).map(|i| i as f32 - 0.5).collect();
                    let want: Vec<f32> = values
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| {
                            bits.get(i / 32).is_some_and(|w| (w >> (i % 32)) & 1 == 1)
                        })
                        .map(|(_, &v)| v)
                        .collect();
                    let before = crate::simd::testing::runs()[level as usize];
                    compact_kept(&values, &bits, &mut out);
                    assert_eq!(out, want, "{} n={n} shape={shape}", level.name());
                    let ran = crate::simd::testing::runs()[level as usize] - before;
                    assert_eq!(ran, 1, "{} did not run", level.name());
                }
            }
        }
        crate::simd::testing::force(None);
    }
}
