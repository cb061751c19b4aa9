//! Kernels over "row + overlay" for the first dense stage, one module per kernel: greedy's and
//! dist's reductions ([`reduce`]), top-k's selection ([`top_k`]) and mirostat's sorted softmax
//! ([`sorted_softmax`]); top-n-sigma's bound lives with its stage (`samplers::top_n_sigma`). This
//! module holds what they share: walking the row in spans and blocks, and NaN/+inf detection.
//!
//! They read the caller's logit row in spans of up to 256 entries (one vectorised reduction and
//! one branch per span) or blocks of `CHUNK`; clean stretches are read raw (a pending temperature
//! division is inverted into an exact raw threshold, so skipped entries are never divided), blocks
//! that hold an edit are read entry by entry through the overlay. top-k does not cut its spans at
//! edits at all: it reads every span raw and takes the edited values from the overlay's list. NaN/+inf
//! is detected in the same pass (one `cmpnleps` per vector), so validation costs no separate trip
//! through memory.
//!
//! Every kernel is exact or silent: whenever its shortcut cannot prove the slow path's exact
//! answer (a tie llama.cpp's sort would break in an order it does not replay, logits beyond the
//! bucket sort's range, a bound too loose to decide), it says so and the caller fills the array.
//! Where a shortcut uses approximate arithmetic (`exp2_approx`, f64 moments), that arithmetic only
//! classifies, under an error bound checked exhaustively or derived in the docs, and the values that
//! reach a probability are always computed the slow path's way.

pub(crate) mod compact;
pub(crate) mod lse;
pub(crate) mod mask;
pub(crate) mod reduce;
pub(crate) mod sorted_softmax;
pub(crate) mod top_k;
pub(crate) mod wide_draw;

use crate::overlay::{Overlay, CHUNK};

/// What a kernel found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// The result is exact.
    Done,
    /// The result would depend on tie-breaking (or on values the bucket sort mis-files).
    Ambiguous,
    /// The row holds NaN or +inf: the caller reports the precise error.
    Invalid,
}

/// NaN or `+inf`: one comparison, `!(x <= f32::MAX)`, which SSE does in one instruction
/// (`cmpnleps`; `!(x < inf)` would be simplified to "equal to inf or unordered", two).
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub(crate) fn is_bad(x: f32) -> bool {
    !(x <= f32::MAX)
}

/// Bit `j` set when `block[j] >= t`, and whether any entry is NaN or +inf (one vectorised pass).
/// Callers walk the set bits, so a block with one hit costs one visit, not sixteen branches.
#[inline]
pub(crate) fn mask_ge(block: &[f32], t: f32, bad: &mut bool) -> u32 {
    const BIT: [u32; CHUNK] = [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768,
    ];
    let (mut m, mut b) = (0u32, false);
    for (&x, &bit) in block.iter().zip(&BIT) {
        m |= if x >= t { bit } else { 0 };
        b |= is_bad(x);
    }
    *bad |= b;
    m
}

/// NaN or +inf in the block.
#[inline]
pub(crate) fn any_bad(block: &[f32]) -> bool {
    let mut b = false;
    for &x in block {
        b |= is_bad(x);
    }
    b
}

/// Walk the row block by block, calling `visit(start, values, edited)`; `values` is the row slice of
/// the block; when `edited` is true the caller must read values through the overlay.
/// `Overlay::prepare` must have been called.
#[inline]
pub(crate) fn for_blocks(row: &[f32], ov: &Overlay, mut visit: impl FnMut(usize, &[f32], bool)) {
    let mut next = ov.edited_chunks().iter().copied().peekable();
    for (ci, block) in row.chunks(CHUNK).enumerate() {
        let is_edited = next.peek() == Some(&(ci as u32));
        if is_edited {
            next.next();
        }
        visit(ci * CHUNK, block, is_edited);
    }
}

/// Clean stretches come this many entries at a time from [`spans`].
pub(crate) const SPAN: usize = 16 * CHUNK;

/// The row as spans `(start, values, edited)`: stretches without edits up to [`SPAN`] entries at
/// a time (one reduction and one branch per span instead of per block), edited blocks one by one
/// (read those through the overlay). An iterator, not a visitor, so kernels keep accumulators in
/// registers across spans (a closure's captured state lives in memory between calls).
#[inline]
pub(crate) fn spans<'a>(
    row: &'a [f32],
    ov: &'a Overlay,
) -> impl Iterator<Item = (usize, &'a [f32], bool)> + 'a {
    spans_of(row, ov, SPAN)
}

/// [`spans`] with clean stretches of up to `max_span` entries (`usize::MAX`: each whole stretch
/// between edits, for a kernel whose per-span work does not grow with the span).
#[inline]
pub(crate) fn spans_of<'a>(
    row: &'a [f32],
    ov: &'a Overlay,
    max_span: usize,
) -> impl Iterator<Item = (usize, &'a [f32], bool)> + 'a {
    let edits = ov.edited_chunks();
    let n = row.len();
    let (mut k, mut start) = (0usize, 0usize);
    std::iter::from_fn(move || {
        if start >= n {
            return None;
        }
        let next = edits.get(k).map_or(n, |&c| (c as usize * CHUNK).min(n));
        let (s0, edited) = (start, next == start);
        let end = if edited {
            k += 1;
            (start + CHUNK).min(n)
        } else {
            start.saturating_add(max_span).min(next)
        };
        start = end;
        Some((s0, &row[s0..end], edited))
    })
}

/// [`span_first_max`] reads the span in blocks of this many entries (4 KiB: the winning block is
/// still in L1 when it is searched for the position).
pub(crate) const FIRST_MAX_BLOCK: usize = 1024;

/// The largest entry of a span and the index of its first occurrence (strict `>` in id order, as
/// llama.cpp's greedy scans; NaN never wins), if it beats `beat` (strictly), and whether the span
/// holds NaN or +inf. One read: each block's maximum by [`span_max`] (the lane-wise loop that
/// runs at the speed of memory), the first block with the largest one kept (strict `>`), then
/// that block alone searched for the first entry equal to it (`==`, so of equal values, −0 and +0
/// included, the first wins, as in the strict scan), and only when it beats `beat`: a greedy scan
/// over many short stretches (a row cut by edits) searches only the few that raise its best.
///
/// The level's kernels do both reads (`I`): its span maximum (whose sign of a zero maximum may
/// differ, which neither the strict `>` nor the search's compare sees) and its 64-entry mask for
/// the search (`x >= max` holds exactly for the entries equal to the max; the scalar search ran
/// an entry at a time).
#[inline(always)]
pub(crate) fn span_first_max<I: mask::Isa>(
    span: &[f32],
    bad: &mut bool,
    beat: f32,
) -> Option<(f32, usize)> {
    let mut best = beat;
    let mut at = None;
    for (b, block) in span.chunks(FIRST_MAX_BLOCK).enumerate() {
        let m = I::span_max(block, bad);
        if m > best {
            best = m;
            at = Some(b * FIRST_MAX_BLOCK);
        }
    }
    let start = at?;
    let block = &span[start..(start + FIRST_MAX_BLOCK).min(span.len())];
    // the block's maximum is one of its entries (NaN never enters it), so the search finds it
    let mut j = 0;
    for (g, group) in block.chunks(64).enumerate() {
        let hits = I::mask_ge64(group, best);
        if hits != 0 {
            j = g * 64 + hits.trailing_zeros() as usize;
            break;
        }
    }
    Some((block[j], start + j))
}

/// The largest entry of a span (NaN never wins; `-inf` for an empty span), and whether it holds
/// NaN or +inf: lane-wise maxima, so it vectorises without reassociating anything.
#[inline(always)]
pub(crate) fn span_max(span: &[f32], bad: &mut bool) -> f32 {
    let mut acc = [f32::NEG_INFINITY; CHUNK];
    // lane-wise flags, reduced once per span (a bool per block costs a horizontal reduction)
    let mut bl = [0u32; CHUNK];
    let mut it = span.chunks_exact(CHUNK);
    for c in &mut it {
        for ((a, f), &x) in acc.iter_mut().zip(bl.iter_mut()).zip(c) {
            *a = if x > *a { x } else { *a };
            *f |= is_bad(x) as u32;
        }
    }
    let mut m = f32::NEG_INFINITY;
    let mut b = false;
    for &x in it.remainder() {
        m = if x > m { x } else { m };
        b |= is_bad(x);
    }
    for &a in &acc {
        m = if a > m { a } else { m };
    }
    *bad |= b | (bl.iter().fold(0, |x, &y| x | y) != 0);
    m
}

/// [`span_max`] over the entries an allowed set keeps (removed ids read as `-inf`; `words`: bit
/// `i % 32` of word `i / 32` set when id `i` is kept; `start`, the span's first id, a multiple of
/// `CHUNK`), and whether the span holds NaN or +inf, removed ids included (as the fill path's
/// check of the whole row).
#[inline(always)]
pub(crate) fn span_max_kept(span: &[f32], start: usize, words: &[u32], bad: &mut bool) -> f32 {
    let mut acc = [f32::NEG_INFINITY; CHUNK];
    let mut bl = [0u32; CHUNK];
    let mut it = span.chunks_exact(CHUNK);
    for (i, c) in (&mut it).enumerate() {
        let s = start + i * CHUNK;
        let bits = words[s / 32] >> (s % 32);
        for (j, ((a, f), &x)) in acc.iter_mut().zip(bl.iter_mut()).zip(c).enumerate() {
            let v = if bits >> j & 1 != 0 {
                x
            } else {
                f32::NEG_INFINITY
            };
            *a = if v > *a { v } else { *a };
            *f |= is_bad(x) as u32;
        }
    }
    let mut m = f32::NEG_INFINITY;
    let mut b = false;
    let s = start + span.len() - it.remainder().len();
    for (j, &x) in it.remainder().iter().enumerate() {
        let kept = words[(s + j) / 32] >> ((s + j) % 32) & 1 != 0;
        let v = if kept { x } else { f32::NEG_INFINITY };
        m = if v > m { v } else { m };
        b |= is_bad(x);
    }
    for &a in &acc {
        m = if a > m { a } else { m };
    }
    *bad |= b | (bl.iter().fold(0, |x, &y| x | y) != 0);
    m
}

#[cfg(test)]
pub(crate) mod testing {
    //! Rows with edits for the kernels' tests, and a count of raw reads under pending maps.
    use crate::overlay::Overlay;
    use crate::synth::SplitMix64;
    use std::cell::Cell;

    thread_local! {
        static RAW_UNDER_MAPS: Cell<u64> = const { Cell::new(0) };
        static HEAP_REPLAYS: Cell<u64> = const { Cell::new(0) };
        static KNOWN_SPANS: Cell<u64> = const { Cell::new(0) };
        static EDITED_FIRST_MAX: Cell<u64> = const { Cell::new(0) };
        static SPANS_READ: Cell<u64> = const { Cell::new(0) };
    }

    /// Spans top-k's second pass read (their maximum reached the bar), on this thread so far.
    pub(crate) fn spans_read() -> u64 {
        SPANS_READ.with(Cell::get)
    }

    pub(crate) fn note_span_read() {
        SPANS_READ.with(|c| c.set(c.get() + 1));
    }

    /// Greedy scans answered by the edited-row path (whole blocks plus the overlay's list), on
    /// this thread so far.
    pub(crate) fn edited_first_max() -> u64 {
        EDITED_FIRST_MAX.with(Cell::get)
    }

    pub(crate) fn note_edited_first_max() {
        EDITED_FIRST_MAX.with(|c| c.set(c.get() + 1));
    }

    /// Spans the heap replay judged by the first pass's maximum instead of reading them, on this
    /// thread so far.
    pub(crate) fn known_spans() -> u64 {
        KNOWN_SPANS.with(Cell::get)
    }

    pub(crate) fn note_known_span() {
        KNOWN_SPANS.with(|c| c.set(c.get() + 1));
    }

    /// Blocks a kernel read raw although transforms were pending (its fast path under monotone
    /// maps), on this thread so far.
    pub(crate) fn raw_under_maps() -> u64 {
        RAW_UNDER_MAPS.with(Cell::get)
    }

    pub(crate) fn note_raw_under_maps() {
        RAW_UNDER_MAPS.with(|c| c.set(c.get() + 1));
    }

    /// top-k scans settled by the heap replay (its slow path), on this thread so far.
    pub(crate) fn heap_replays() -> u64 {
        HEAP_REPLAYS.with(Cell::get)
    }

    pub(crate) fn note_heap_replay() {
        HEAP_REPLAYS.with(|c| c.set(c.get() + 1));
    }

    /// A row of `n` normal logits (on a half-unit grid with `ties`) with `n_edits` random edits:
    /// `(row, overlay, the current values)`.
    pub(crate) fn row_with_edits(
        n: usize,
        seed: u64,
        n_edits: usize,
        ties: bool,
    ) -> (Vec<f32>, Overlay, Vec<f32>) {
        let mut g = SplitMix64(seed);
        let row: Vec<f32> = (0..n)
            .map(|_| {
                let x = g.next_normal() * 3.0;
                if ties {
                    (x * 2.0).round() as f32 / 2.0
                } else {
                    x as f32
                }
            })
            .collect();
        let mut ov = Overlay::default();
        ov.reset(n);
        let mut full = row.clone();
        for _ in 0..n_edits {
            let id = (g.next_u64() % n as u64) as usize;
            let v = ov.get(&row, id) + (g.next_normal() * 4.0) as f32;
            ov.set(id, v);
            full[id] = v;
        }
        ov.prepare();
        (row, ov, full)
    }
}

#[cfg(test)]
mod tests {
    use super::reduce::first_max;
    use super::top_k::top_k_unique;
    use super::*;

    #[test]
    fn kernels_flag_nan_and_plus_inf_anywhere() {
        for bad in [f32::NAN, f32::INFINITY] {
            for pos in [0usize, 5, 16, 17, 99] {
                let mut row: Vec<f32> = (0..100).map(|i| i as f32 * 0.01).collect();
                row[pos] = bad;
                let mut ov = Overlay::default();
                ov.reset(row.len());
                ov.set(17, 0.5);
                ov.prepare();
                let mut buf = Vec::new();
                assert_eq!(first_max(&row, &ov), None, "{bad} at {pos}");
                assert_eq!(
                    top_k_unique(&row, &ov, 3, None, &mut buf),
                    Scan::Invalid,
                    "{bad} at {pos}"
                );
            }
        }
    }
}
