//! `x >= t` over a block of 16 entries as a bit mask (bit `j` for entry `j`), the test every
//! second pass makes per block. Written portably, the compiler ORs sixteen shifted compares
//! together (a horizontal reduction per block); each level here is one vector compare and one
//! mask move, which is what makes a pass over hot spans cost about a read. A comparison is exact,
//! so every level gives the same mask.
//!
//! The kernels take the level as a type (`multiversion!`'s generic form): the body compiled for
//! AVX-512 calls [`Avx512::mask_ge`], and so on, with no dispatch per block.

/// An instruction-set level's block primitives.
pub(crate) trait Isa {
    /// Bit `j` set when `block[j] >= t` (false for NaN), for `block.len() <= 16`.
    fn mask_ge(block: &[f32], t: f32) -> u32;

    /// Bit `j` set when `group[j] >= t`, for `group.len() <= 64`: [`Isa::mask_ge`] per 16.
    #[inline(always)]
    fn mask_ge64(group: &[f32], t: f32) -> u64 {
        mask_ge64_per_16::<Self>(group, t)
    }

    /// [`super::span_max`]'s value (the sign of a zero maximum aside: a tree may pick either
    /// zero) and NaN/+inf flag, for callers that only compare the maximum.
    #[inline(always)]
    fn span_max(span: &[f32], bad: &mut bool) -> f32 {
        super::span_max(span, bad)
    }

    /// [`super::span_max_kept`]'s value (the sign of a zero maximum aside) and flag.
    #[inline(always)]
    fn span_max_kept(span: &[f32], start: usize, words: &[u32], bad: &mut bool) -> f32 {
        super::span_max_kept(span, start, words, bad)
    }

    /// top-n-sigma's lanes over `span`'s whole 8-entry groups, in order: per lane `j`,
    /// `l[0][j] += z`, `l[1][j] += z * z` (`z` = the entry, `0` for `-inf`), `l[2][j]` = the
    /// maximum, `l[3][j]` = the minimum (`>` and `<`, so NaN never enters). The same arithmetic on
    /// every level; written out per level because the compiler interleaved the sums into shuffles
    /// in some builds (half the speed).
    #[inline(always)]
    fn sigma_lanes(span: &[f32], l: &mut [[f32; 8]; 4]) {
        for g in span.chunks_exact(8) {
            for (j, &y) in g.iter().enumerate() {
                let z = if y == f32::NEG_INFINITY { 0.0 } else { y };
                l[0][j] += z;
                l[1][j] += z * z;
                l[2][j] = if y > l[2][j] { y } else { l[2][j] };
                l[3][j] = if y < l[3][j] { y } else { l[3][j] };
            }
        }
    }
}

/// The largest of a few entries (a vector loop's tail; NaN never enters) and whether any is NaN or
/// +inf, one at a time.
#[inline(always)]
fn scalar_max(xs: &[f32]) -> (f32, bool) {
    let (mut m, mut b) = (f32::NEG_INFINITY, false);
    for &x in xs {
        m = if x > m { x } else { m };
        b |= super::is_bad(x);
    }
    (m, b)
}

/// A vector loop's maximum and NaN/+inf flag joined with its scalar tail's (`tail`, from
/// [`scalar_max`] or the portable kernel), the flags into `bad`.
#[inline(always)]
fn join_tail(top: f32, flagged: bool, (m, b): (f32, bool), bad: &mut bool) -> f32 {
    *bad |= b | flagged;
    if top > m {
        top
    } else {
        m
    }
}

/// The largest of four lanes, as a tree (SSE2; the sign of a zero maximum may be either).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn hmax128(h: std::arch::x86_64::__m128) -> f32 {
    use std::arch::x86_64::{_mm_cvtss_f32, _mm_max_ps, _mm_movehl_ps, _mm_shuffle_ps};
    // SAFETY: SSE2 is part of x86_64.
    unsafe {
        let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        _mm_cvtss_f32(_mm_max_ps(h, _mm_shuffle_ps::<0b01>(h, h)))
    }
}

/// The largest of eight lanes, as a tree. Only called from bodies compiled with AVX2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn hmax256(a: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::{_mm256_castps256_ps128, _mm256_extractf128_ps, _mm_max_ps};
    // SAFETY: callers are level bodies that `multiversion!` runs only where AVX2 was found.
    unsafe {
        hmax128(_mm_max_ps(
            _mm256_castps256_ps128(a),
            _mm256_extractf128_ps::<1>(a),
        ))
    }
}

/// [`Isa::mask_ge64`] as [`Isa::mask_ge`] per 16 entries (a short group, or a level without its
/// own). A loop, not a closure: a closure does not inherit the level's target features, so the
/// intrinsics inside one were calls (AVX2's top-k ran at half the baseline's speed).
#[inline(always)]
fn mask_ge64_per_16<I: Isa + ?Sized>(group: &[f32], t: f32) -> u64 {
    let mut m = 0;
    for (i, b) in group.chunks(16).enumerate() {
        m |= u64::from(I::mask_ge(b, t)) << (16 * i);
    }
    m
}

/// [`Isa::sigma_lanes`] in four 8-lane registers, for the levels with AVX2 (the same operations,
/// lane for lane: `maxps`/`minps` keep the accumulator when the entry is not greater/smaller).
///
/// # Safety
/// The CPU must have AVX2 (callers are bodies compiled for a level that has it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sigma_lanes_avx2(span: &[f32], l: &mut [[f32; 8]; 4]) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_andnot_ps, _mm256_cmp_ps, _mm256_loadu_ps, _mm256_max_ps,
        _mm256_min_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_storeu_ps, _CMP_EQ_OQ,
    };
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    let (mut s1, mut s2) = (
        _mm256_loadu_ps(l[0].as_ptr()),
        _mm256_loadu_ps(l[1].as_ptr()),
    );
    let (mut mx, mut mn) = (
        _mm256_loadu_ps(l[2].as_ptr()),
        _mm256_loadu_ps(l[3].as_ptr()),
    );
    for g in span.chunks_exact(8) {
        let y = _mm256_loadu_ps(g.as_ptr());
        let z = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(y, ninf), y);
        s1 = _mm256_add_ps(s1, z);
        s2 = _mm256_add_ps(s2, _mm256_mul_ps(z, z));
        mx = _mm256_max_ps(y, mx);
        mn = _mm256_min_ps(y, mn);
    }
    _mm256_storeu_ps(l[0].as_mut_ptr(), s1);
    _mm256_storeu_ps(l[1].as_mut_ptr(), s2);
    _mm256_storeu_ps(l[2].as_mut_ptr(), mx);
    _mm256_storeu_ps(l[3].as_mut_ptr(), mn);
}

/// The baseline level: SSE2 on x86_64 (four compares and four mask moves), the loop elsewhere.
pub(crate) struct Portable;

impl Isa for Portable {
    /// On x86_64, SSE2 in four 4-lane accumulators with one tree reduction per span (the
    /// portable loop ends every span with sixteen dependent compares); the loop elsewhere.
    #[inline(always)]
    fn span_max(span: &[f32], bad: &mut bool) -> f32 {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{
                _mm_cmpnle_ps, _mm_loadu_ps, _mm_max_ps, _mm_movemask_ps, _mm_or_ps, _mm_set1_ps,
                _mm_setzero_ps,
            };
            let whole = span.len() / 16 * 16;
            let tail = scalar_max(&span[whole..]);
            // SAFETY: SSE2 is part of x86_64; each step loads entries `i..i + 16` with
            // `i + 16 <= whole <= span.len()`.
            let (top, flagged) = unsafe {
                let p = span.as_ptr();
                let big = _mm_set1_ps(f32::MAX);
                let ninf = _mm_set1_ps(f32::NEG_INFINITY);
                let (mut a0, mut a1, mut a2, mut a3) = (ninf, ninf, ninf, ninf);
                let mut flags = _mm_setzero_ps();
                let mut i = 0;
                while i < whole {
                    let x0 = _mm_loadu_ps(p.add(i));
                    let x1 = _mm_loadu_ps(p.add(i + 4));
                    let x2 = _mm_loadu_ps(p.add(i + 8));
                    let x3 = _mm_loadu_ps(p.add(i + 12));
                    // `maxps` keeps the second operand when the first is not greater (NaN too)
                    a0 = _mm_max_ps(x0, a0);
                    a1 = _mm_max_ps(x1, a1);
                    a2 = _mm_max_ps(x2, a2);
                    a3 = _mm_max_ps(x3, a3);
                    let f01 = _mm_or_ps(_mm_cmpnle_ps(x0, big), _mm_cmpnle_ps(x1, big));
                    let f23 = _mm_or_ps(_mm_cmpnle_ps(x2, big), _mm_cmpnle_ps(x3, big));
                    flags = _mm_or_ps(flags, _mm_or_ps(f01, f23));
                    i += 16;
                }
                let h = _mm_max_ps(_mm_max_ps(a0, a1), _mm_max_ps(a2, a3));
                (hmax128(h), _mm_movemask_ps(flags) != 0)
            };
            join_tail(top, flagged, tail, bad)
        }
        #[cfg(not(target_arch = "x86_64"))]
        super::span_max(span, bad)
    }

    #[inline(always)]
    fn mask_ge(block: &[f32], t: f32) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if block.len() == 16 {
            use std::arch::x86_64::{_mm_cmpge_ps, _mm_loadu_ps, _mm_movemask_ps, _mm_set1_ps};
            // SAFETY: SSE2 is part of x86_64; the four loads read the block's 16 entries.
            return unsafe {
                let tt = _mm_set1_ps(t);
                let mut m = 0u32;
                for q in 0..4 {
                    let v = _mm_loadu_ps(block.as_ptr().add(4 * q));
                    m |= (_mm_movemask_ps(_mm_cmpge_ps(v, tt)) as u32) << (4 * q);
                }
                m
            };
        }
        super::mask_ge(block, t, &mut false)
    }
}

/// AVX2: two 8-lane compares and mask moves. Only used by bodies compiled with AVX2 enabled.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Isa for Avx2 {
    #[inline(always)]
    fn sigma_lanes(span: &[f32], l: &mut [[f32; 8]; 4]) {
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found it,
        // and it has AVX2.
        unsafe { sigma_lanes_avx2(span, l) }
    }

    #[inline(always)]
    fn mask_ge(block: &[f32], t: f32) -> u32 {
        use std::arch::x86_64::{
            _mm256_cmp_ps, _mm256_loadu_ps, _mm256_movemask_ps, _mm256_set1_ps, _CMP_GE_OQ,
        };
        if block.len() != 16 {
            return super::mask_ge(block, t, &mut false);
        }
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found AVX2;
        // the two loads read the block's 16 entries.
        unsafe {
            let tt = _mm256_set1_ps(t);
            let p = block.as_ptr();
            let lo = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_loadu_ps(p), tt));
            let hi = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_loadu_ps(p.add(8)), tt));
            lo as u32 | (hi as u32) << 8
        }
    }

    /// Four accumulators of `vmaxps` (an entry that is not greater, NaN included, leaves the lane
    /// as it is), the NaN/+inf test as compares ORed into a register, one tree reduction at the
    /// end. (The portable loop, compiled for AVX2, ended every span with a chain of sixteen
    /// dependent scalar compares.)
    #[inline(always)]
    fn span_max(span: &[f32], bad: &mut bool) -> f32 {
        use std::arch::x86_64::{
            _mm256_cmp_ps, _mm256_loadu_ps, _mm256_max_ps, _mm256_movemask_ps, _mm256_or_ps,
            _mm256_set1_ps, _CMP_NLE_UQ,
        };
        let whole = span.len() / 32 * 32;
        let tail = scalar_max(&span[whole..]);
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found AVX2;
        // each step loads entries `i..i + 32` with `i + 32 <= whole <= span.len()`.
        let (top, flagged) = unsafe {
            let p = span.as_ptr();
            let big = _mm256_set1_ps(f32::MAX);
            let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
            let (mut a0, mut a1, mut a2, mut a3) = (ninf, ninf, ninf, ninf);
            let mut flags = _mm256_set1_ps(0.0);
            let mut i = 0;
            while i < whole {
                let x0 = _mm256_loadu_ps(p.add(i));
                let x1 = _mm256_loadu_ps(p.add(i + 8));
                let x2 = _mm256_loadu_ps(p.add(i + 16));
                let x3 = _mm256_loadu_ps(p.add(i + 24));
                a0 = _mm256_max_ps(x0, a0);
                a1 = _mm256_max_ps(x1, a1);
                a2 = _mm256_max_ps(x2, a2);
                a3 = _mm256_max_ps(x3, a3);
                let f01 = _mm256_or_ps(
                    _mm256_cmp_ps::<_CMP_NLE_UQ>(x0, big),
                    _mm256_cmp_ps::<_CMP_NLE_UQ>(x1, big),
                );
                let f23 = _mm256_or_ps(
                    _mm256_cmp_ps::<_CMP_NLE_UQ>(x2, big),
                    _mm256_cmp_ps::<_CMP_NLE_UQ>(x3, big),
                );
                flags = _mm256_or_ps(flags, _mm256_or_ps(f01, f23));
                i += 32;
            }
            let a = _mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3));
            (hmax256(a), _mm256_movemask_ps(flags) != 0)
        };
        join_tail(top, flagged, tail, bad)
    }

    /// The allowed entries' maximum 16 at a time: the set's 16 bits spread to lane masks (`and`
    /// with one bit per lane, compare equal), removed entries blended to `-inf` before `vmaxps`
    /// in two accumulators; NaN and +inf from integer maxima of the bits, as on AVX-512. (The
    /// portable loop, bit by bit, made the keep path a third slower than the chain on AVX2.)
    #[inline(always)]
    fn span_max_kept(span: &[f32], start: usize, words: &[u32], bad: &mut bool) -> f32 {
        use std::arch::x86_64::{
            _mm256_and_si256, _mm256_blendv_ps, _mm256_castps_si256, _mm256_castsi256_ps,
            _mm256_cmpeq_epi32, _mm256_cmpgt_epi32, _mm256_loadu_ps, _mm256_max_epi32,
            _mm256_max_epu32, _mm256_max_ps, _mm256_movemask_epi8, _mm256_or_si256,
            _mm256_set1_epi32, _mm256_set1_ps, _mm256_setr_epi32, _mm256_setzero_si256,
            _mm256_slli_epi32, _mm256_xor_si256,
        };
        debug_assert!(start.is_multiple_of(16));
        let whole = span.len() / 16 * 16;
        let mut b = false;
        let m = match whole < span.len() {
            true => super::span_max_kept(&span[whole..], start + whole, words, &mut b),
            false => f32::NEG_INFINITY,
        };
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found AVX2;
        // each step loads entries `i..i + 16` with `i + 16 <= whole <= span.len()`.
        let (top, flagged) = unsafe {
            let p = span.as_ptr();
            let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
            let lo = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
            let hi = _mm256_slli_epi32::<8>(lo);
            let (mut a0, mut a1) = (ninf, ninf);
            let (mut si, mut ui) = (_mm256_set1_epi32(i32::MIN), _mm256_setzero_si256());
            let mut i = 0;
            while i < whole {
                let s = start + i;
                let w = _mm256_set1_epi32((words[s / 32] >> (s % 32)) as i32);
                let k0 = _mm256_cmpeq_epi32(_mm256_and_si256(w, lo), lo);
                let k1 = _mm256_cmpeq_epi32(_mm256_and_si256(w, hi), hi);
                let x0 = _mm256_loadu_ps(p.add(i));
                let x1 = _mm256_loadu_ps(p.add(i + 8));
                a0 = _mm256_max_ps(_mm256_blendv_ps(ninf, x0, _mm256_castsi256_ps(k0)), a0);
                a1 = _mm256_max_ps(_mm256_blendv_ps(ninf, x1, _mm256_castsi256_ps(k1)), a1);
                let (b0, b1) = (_mm256_castps_si256(x0), _mm256_castps_si256(x1));
                si = _mm256_max_epi32(si, _mm256_max_epi32(b0, b1));
                ui = _mm256_max_epu32(ui, _mm256_max_epu32(b0, b1));
                i += 16;
            }
            // signed: +inf and positive NaNs are >= 0x7f800000; unsigned (sign bit flipped to
            // compare signed): negative NaNs are > 0xff800000
            let sign = _mm256_set1_epi32(i32::MIN);
            let pos = _mm256_cmpgt_epi32(si, _mm256_set1_epi32(0x7f7f_ffff));
            let neg = _mm256_cmpgt_epi32(
                _mm256_xor_si256(ui, sign),
                _mm256_set1_epi32(0xff80_0000_u32 as i32 ^ i32::MIN),
            );
            (
                hmax256(_mm256_max_ps(a1, a0)),
                _mm256_movemask_epi8(_mm256_or_si256(pos, neg)) != 0,
            )
        };
        join_tail(top, flagged, (m, b), bad)
    }

    /// Eight compares and mask moves, with no test of the length per 16 entries.
    #[inline(always)]
    fn mask_ge64(group: &[f32], t: f32) -> u64 {
        use std::arch::x86_64::{
            _mm256_cmp_ps, _mm256_loadu_ps, _mm256_movemask_ps, _mm256_set1_ps, _CMP_GE_OQ,
        };
        if group.len() != 64 {
            return mask_ge64_per_16::<Self>(group, t);
        }
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found AVX2;
        // the eight loads read the group's 64 entries.
        unsafe {
            let (p, tt) = (group.as_ptr(), _mm256_set1_ps(t));
            let mut m = 0u64;
            for i in 0..8 {
                let c = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_loadu_ps(p.add(8 * i)), tt);
                m |= u64::from(_mm256_movemask_ps(c) as u8) << (8 * i);
            }
            m
        }
    }
}

/// AVX-512: one compare into a mask register. Only used by bodies compiled with AVX-512 enabled.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Isa for Avx512 {
    #[inline(always)]
    fn sigma_lanes(span: &[f32], l: &mut [[f32; 8]; 4]) {
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found it,
        // and it has AVX2.
        unsafe { sigma_lanes_avx2(span, l) }
    }

    #[inline(always)]
    fn mask_ge(block: &[f32], t: f32) -> u32 {
        use std::arch::x86_64::{_mm512_cmp_ps_mask, _mm512_loadu_ps, _mm512_set1_ps, _CMP_GE_OQ};
        if block.len() != 16 {
            return super::mask_ge(block, t, &mut false);
        }
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found
        // AVX-512; the load reads the block's 16 entries.
        unsafe {
            _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_loadu_ps(block.as_ptr()), _mm512_set1_ps(t))
                as u32
        }
    }

    /// Four compares into mask registers, unpacked into one 64-bit mask (the default's
    /// per-16 loop, with its length test and shifts per block, read a hot span at a third of
    /// the speed of the span maximum).
    #[inline(always)]
    fn mask_ge64(group: &[f32], t: f32) -> u64 {
        use std::arch::x86_64::{
            _mm512_cmp_ps_mask, _mm512_kunpackd, _mm512_kunpackw, _mm512_loadu_ps, _mm512_set1_ps,
            _CMP_GE_OQ,
        };
        if group.len() != 64 {
            return mask_ge64_per_16::<Self>(group, t);
        }
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found
        // AVX-512; the four loads read the group's 64 entries.
        unsafe {
            let (p, tt) = (group.as_ptr(), _mm512_set1_ps(t));
            // (no closure for the four: it would not inherit AVX-512, see the default)
            let m0 = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_loadu_ps(p), tt);
            let m1 = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_loadu_ps(p.add(16)), tt);
            let m2 = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_loadu_ps(p.add(32)), tt);
            let m3 = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_loadu_ps(p.add(48)), tt);
            let lo = _mm512_kunpackw(u32::from(m1), u32::from(m0));
            let hi = _mm512_kunpackw(u32::from(m3), u32::from(m2));
            _mm512_kunpackd(u64::from(hi), u64::from(lo))
        }
    }

    /// Four accumulators of `vmaxps` (an entry that is not greater, NaN included, leaves the lane
    /// as it is, as the portable loop's `if x > a`), 64 entries per step; NaN and +inf from
    /// integer maxima of the bits (as signed integers +inf and the positive NaNs are the largest
    /// patterns, as unsigned the negative NaNs), settled by one compare per span; one tree
    /// reduction at the end. (Two accumulators with the test as compares into mask registers,
    /// four per 64 entries ORed there, ran at 0.86 of a plain read's speed: the mask registers'
    /// ports were the limit.)
    #[inline(always)]
    fn span_max(span: &[f32], bad: &mut bool) -> f32 {
        use std::arch::x86_64::{
            _mm512_castps_si512, _mm512_cmpge_epi32_mask, _mm512_cmpgt_epu32_mask, _mm512_loadu_ps,
            _mm512_max_epi32, _mm512_max_epu32, _mm512_max_ps, _mm512_reduce_max_ps,
            _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_si512,
        };
        let whole = span.len() / 64 * 64;
        let tail = scalar_max(&span[whole..]);
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found
        // AVX-512; each step loads entries `i..i + 64` with `i + 64 <= whole <= span.len()`.
        let (top, flagged) = unsafe {
            let p = span.as_ptr();
            let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
            let (mut a0, mut a1, mut a2, mut a3) = (ninf, ninf, ninf, ninf);
            let (mut si, mut ui) = (_mm512_set1_epi32(i32::MIN), _mm512_setzero_si512());
            let mut i = 0;
            while i < whole {
                let x0 = _mm512_loadu_ps(p.add(i));
                let x1 = _mm512_loadu_ps(p.add(i + 16));
                let x2 = _mm512_loadu_ps(p.add(i + 32));
                let x3 = _mm512_loadu_ps(p.add(i + 48));
                a0 = _mm512_max_ps(x0, a0);
                a1 = _mm512_max_ps(x1, a1);
                a2 = _mm512_max_ps(x2, a2);
                a3 = _mm512_max_ps(x3, a3);
                let (b0, b1) = (_mm512_castps_si512(x0), _mm512_castps_si512(x1));
                let (b2, b3) = (_mm512_castps_si512(x2), _mm512_castps_si512(x3));
                let s01 = _mm512_max_epi32(b0, b1);
                let u01 = _mm512_max_epu32(b0, b1);
                si = _mm512_max_epi32(si, _mm512_max_epi32(s01, _mm512_max_epi32(b2, b3)));
                ui = _mm512_max_epu32(ui, _mm512_max_epu32(u01, _mm512_max_epu32(b2, b3)));
                i += 64;
            }
            let flagged = _mm512_cmpge_epi32_mask(si, _mm512_set1_epi32(0x7f80_0000))
                | _mm512_cmpgt_epu32_mask(ui, _mm512_set1_epi32(0xff80_0000_u32 as i32))
                != 0;
            let a = _mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3));
            (_mm512_reduce_max_ps(a), flagged)
        };
        join_tail(top, flagged, tail, bad)
    }

    /// [`Avx512::span_max`] with the allowed set's bits as the write masks of its `vmaxps` (a
    /// removed entry leaves the lane as it is, as the portable loop's `-inf`): 32 entries and
    /// one word of the set per step, in two accumulators (one accumulator is a chain of
    /// dependent `vmaxps`, half the speed).
    #[inline(always)]
    fn span_max_kept(span: &[f32], start: usize, words: &[u32], bad: &mut bool) -> f32 {
        use std::arch::x86_64::{
            _mm512_castps_si512, _mm512_cmpge_epi32_mask, _mm512_cmpgt_epu32_mask, _mm512_loadu_ps,
            _mm512_mask_max_ps, _mm512_max_epi32, _mm512_max_epu32, _mm512_max_ps,
            _mm512_reduce_max_ps, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_si512,
        };
        // a block of 16 that starts a word's upper half, and what is left after whole pairs,
        // as the portable loop reads them
        let head = if start.is_multiple_of(32) {
            0
        } else {
            span.len().min(16)
        };
        let pairs = (span.len() - head) / 32;
        let (body, tail) = span[head..].split_at(pairs * 32);
        let mut b = false;
        let body_start = start + head;
        // (skipped when empty: the portable loop's setup costs more than a pair of blocks)
        let m0 = match head {
            0 => f32::NEG_INFINITY,
            _ => super::span_max_kept(&span[..head], start, words, &mut b),
        };
        let m1 = match tail.len() {
            0 => f32::NEG_INFINITY,
            _ => super::span_max_kept(tail, body_start + body.len(), words, &mut b),
        };
        let ws = &words[body_start / 32..body_start / 32 + pairs];
        // SAFETY: `multiversion!` calls this level's body only where `simd::level()` found
        // AVX-512; each step loads the 32 entries of one `chunks_exact(32)` item.
        let (top, flagged) = unsafe {
            let mut a0 = _mm512_set1_ps(f32::NEG_INFINITY);
            let mut a1 = a0;
            // NaN and +inf by the bits, in integer maxima (no mask registers): as signed
            // integers `+inf` and positive NaNs are the largest, as unsigned the negative NaNs
            let (mut si, mut ui) = (_mm512_set1_epi32(i32::MIN), _mm512_setzero_si512());
            for (pair, &w) in body.chunks_exact(32).zip(ws) {
                let x0 = _mm512_loadu_ps(pair.as_ptr());
                let x1 = _mm512_loadu_ps(pair.as_ptr().add(16));
                a0 = _mm512_mask_max_ps(a0, w as u16, x0, a0);
                a1 = _mm512_mask_max_ps(a1, (w >> 16) as u16, x1, a1);
                let (b0, b1) = (_mm512_castps_si512(x0), _mm512_castps_si512(x1));
                si = _mm512_max_epi32(si, _mm512_max_epi32(b0, b1));
                ui = _mm512_max_epu32(ui, _mm512_max_epu32(b0, b1));
            }
            // one compare per kind for the span, not a horizontal reduction
            let flagged = _mm512_cmpge_epi32_mask(si, _mm512_set1_epi32(0x7f80_0000))
                | _mm512_cmpgt_epu32_mask(ui, _mm512_set1_epi32(0xff80_0000_u32 as i32))
                != 0;
            (_mm512_reduce_max_ps(_mm512_max_ps(a1, a0)), flagged)
        };
        *bad |= b | flagged;
        [m0, m1]
            .into_iter()
            .fold(top, |m, x| if x > m { x } else { m })
    }
}

#[cfg(test)]
mod tests {
    use crate::simd::multiversion;
    use crate::synth::SplitMix64;

    multiversion! {
        /// The mask at the dispatched level.
        fn dispatched<I>(block: &[f32], t: f32) -> u32 {
            I::mask_ge(block, t)
        }
    }

    multiversion! {
        /// The span maximum and flag at the dispatched level.
        fn dispatched_max<I>(span: &[f32]) -> (f32, bool) {
            let mut bad = false;
            let m = I::span_max(span, &mut bad);
            (m, bad)
        }
    }

    multiversion! {
        /// top-n-sigma's lanes at the dispatched level, from `start`.
        fn dispatched_sigma<I>(span: &[f32], start: [[f32; 8]; 4]) -> [[f32; 8]; 4] {
            let mut l = start;
            I::sigma_lanes(span, &mut l);
            l
        }
    }

    /// Every level's top-n-sigma lanes, bit for bit, against the portable loop, forced one by one:
    /// lengths with and without a partial group (ignored), `-inf` (adds nothing, shows in the
    /// minimum), NaN (poisons the sums, never enters the maximum or minimum), +inf and signed
    /// zeros, from zero accumulators and from running ones.
    #[test]
    fn every_level_gives_the_portable_sigma_lanes() {
        let mut g = SplitMix64(5);
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for len in [0usize, 7, 8, 16, 40, 256, 263] {
                for case in 0..6 {
                    let mut span: Vec<f32> =
                        (0..len).map(|_| (g.next_normal() * 3.0) as f32).collect();
                    for x in span.iter_mut().step_by(5) {
                        *x = match case {
                            0 => f32::NEG_INFINITY,
                            1 => f32::NAN,
                            2 => f32::INFINITY,
                            3 => -0.0,
                            4 => 0.0,
                            _ => *x,
                        };
                    }
                    let start = if case % 2 == 0 {
                        [
                            [0.0; 8],
                            [0.0; 8],
                            [f32::NEG_INFINITY; 8],
                            [f32::INFINITY; 8],
                        ]
                    } else {
                        [[1.5; 8], [9.0; 8], [2.0; 8], [-1.0; 8]]
                    };
                    let mut want = start;
                    <super::Portable as super::Isa>::sigma_lanes(&span, &mut want);
                    let got = dispatched_sigma(&span, start);
                    let bits = |l: [[f32; 8]; 4]| l.map(|r| r.map(f32::to_bits));
                    assert_eq!(
                        bits(got),
                        bits(want),
                        "{} len={len} case={case}",
                        level.name()
                    );
                }
            }
        }
        crate::simd::testing::force(None);
    }

    /// Every level's span maximum against the portable loop, forced one by one: every length up
    /// to 100 and a few spans, the maximum in the vector part and in the tail, NaNs of both signs
    /// (the ones next to the infinities too) and +inf in either part (flagged), `-inf` entries and
    /// an all-`-inf` span (no flag).
    #[test]
    fn every_level_gives_the_portable_span_max_and_flag() {
        let mut g = SplitMix64(1);
        let mut next = move || g.next_u64();
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for len in (0..=100usize).chain([256, 255, 287, 1024]) {
                for case in 0..11 {
                    let mut span: Vec<f32> = (0..len)
                        .map(|_| (next() % 2000) as f32 / 100.0 - 10.0)
                        .collect();
                    if len > 0 {
                        let at = (next() % len as u64) as usize;
                        span[at] = match case {
                            0 => f32::NAN,
                            1 => f32::INFINITY,
                            2 => f32::NEG_INFINITY,
                            3 => 50.0,
                            5 => -f32::NAN,
                            6 => f32::from_bits(0x7f80_0001),
                            7 => f32::from_bits(0xff80_0001),
                            _ => span[at],
                        };
                        if case == 4 {
                            span.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                        }
                    }
                    let mut bad = false;
                    let want = super::super::span_max(&span, &mut bad);
                    let (got, got_bad) = dispatched_max(&span);
                    assert_eq!(got, want, "{} len={len} case={case}", level.name());
                    assert_eq!(got_bad, bad, "{} len={len} case={case}", level.name());
                }
            }
        }
        crate::simd::testing::force(None);
    }

    multiversion! {
        /// The 64-entry mask at the dispatched level.
        fn dispatched64<I>(group: &[f32], t: f32) -> u64 {
            I::mask_ge64(group, t)
        }
    }

    /// The 64-entry mask on every level, against the scalar test of each entry: every length up
    /// to 64, hits in each of the four blocks and none past the group.
    #[test]
    fn every_level_gives_the_64_entry_mask() {
        let mut g = SplitMix64(3);
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for len in 0..=64usize {
                for _ in 0..16 {
                    // integers in [-20, 20] and, one in eight, NaN (never a hit) or ±inf
                    let special = [f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
                    let group: Vec<f32> = (0..len)
                        .map(|_| match g.next_u64() % 48 {
                            r @ 41..=44 => special[r as usize - 41],
                            r => (r % 41) as f32 - 20.0,
                        })
                        .collect();
                    for t in [-25.0f32, 0.0, 15.0, 19.0, f32::NAN] {
                        let want = group
                            .iter()
                            .enumerate()
                            .fold(0u64, |m, (j, &x)| m | u64::from(x >= t) << j);
                        let got = dispatched64(&group, t);
                        assert_eq!(got, want, "{} len={len} t={t}", level.name());
                    }
                }
            }
        }
        crate::simd::testing::force(None);
    }

    multiversion! {
        /// The allowed entries' maximum and flag at the dispatched level.
        fn dispatched_max_kept<I>(span: &[f32], start: usize, words: &[u32]) -> (f32, bool) {
            let mut bad = false;
            let m = I::span_max_kept(span, start, words, &mut bad);
            (m, bad)
        }
    }

    /// Every level's maximum over an allowed set against the portable loop: spans starting at
    /// every block of a word, every length up to 100, sets with no, some and all bits, the
    /// maximum removed or kept, NaN (either sign) and +inf flagged wherever they sit (removed
    /// ones too), `-inf` not.
    #[test]
    fn every_level_gives_the_portable_kept_max_and_flag() {
        let mut g = SplitMix64(2);
        let mut next = move || g.next_u64();
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for start in [0usize, 16, 32, 48] {
                for len in (0..=100usize).chain([256, 272]) {
                    for case in 0..10 {
                        let words: Vec<u32> = (0..(start + len).div_ceil(32) + 1)
                            .map(|_| match case {
                                0 => 0,
                                1 => u32::MAX,
                                _ => next() as u32,
                            })
                            .collect();
                        let mut span: Vec<f32> = (0..len)
                            .map(|_| (next() % 2000) as f32 / 100.0 - 10.0)
                            .collect();
                        if len > 0 {
                            let at = (next() % len as u64) as usize;
                            span[at] = match case {
                                2 => f32::NAN,
                                3 => f32::INFINITY,
                                4 => 50.0,
                                5 => -f32::NAN,
                                6 => f32::NEG_INFINITY,
                                // the NaNs next to the infinities, at the flags' boundaries
                                7 => f32::from_bits(0xff80_0001),
                                8 => f32::from_bits(0x7f80_0001),
                                _ => span[at],
                            };
                        }
                        let mut bad = false;
                        let want = super::super::span_max_kept(&span, start, &words, &mut bad);
                        let (got, got_bad) = dispatched_max_kept(&span, start, &words);
                        let at = format!("{} start={start} len={len} case={case}", level.name());
                        assert_eq!(got, want, "{at}");
                        assert_eq!(got_bad, bad, "{at}");
                    }
                }
            }
        }
        crate::simd::testing::force(None);
    }

    /// Every level against the scalar loop, forced one by one: blocks of every length up to 16,
    /// values equal to the bar, signed zeros, infinities and NaN (never set).
    #[test]
    fn every_level_gives_the_scalar_mask() {
        let special = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let mut g = SplitMix64(4);
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            let before = crate::simd::testing::runs()[level as usize];
            let mut calls = 0;
            for len in 0..=16usize {
                for trial in 0..64 {
                    let block: Vec<f32> = (0..len)
                        .map(|_| {
                            let x = special[(g.next_u64() % 7) as usize];
                            x * if trial % 2 == 0 { 1.0 } else { 0.5 }
                        })
                        .collect();
                    for t in [
                        0.0f32,
                        -0.0,
                        0.5,
                        1.0,
                        f32::INFINITY,
                        f32::NEG_INFINITY,
                        f32::NAN,
                    ] {
                        let got = dispatched(&block, t);
                        calls += 1;
                        assert_eq!(
                            got,
                            super::super::mask_ge(&block, t, &mut false),
                            "{} {block:?} >= {t}",
                            level.name()
                        );
                    }
                }
            }
            assert_eq!(crate::simd::testing::runs()[level as usize] - before, calls);
        }
        crate::simd::testing::force(None);
    }
}
