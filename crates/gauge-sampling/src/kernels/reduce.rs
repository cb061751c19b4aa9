//! One-pass reductions over "row + overlay": greedy's first maximum, dist's maximum and weights.

use super::mask::Isa;
use super::{any_bad, span_first_max, span_max, spans, spans_of, FIRST_MAX_BLOCK};
use crate::overlay::{Overlay, CHUNK};
use crate::simd::multiversion;

multiversion! {
/// llama.cpp greedy over the identity layout: index of the first maximum (strict `>`), starting
/// from index 0. `None` if the row holds NaN or +inf (pending transforms may create `+inf`, e.g. a
/// huge logit divided by a small temperature; that is a valid value, not an error). Dispatched
/// ([`crate::simd`]).
pub fn first_max<I>(row: &[f32], ov: &Overlay) -> Option<usize> {
    let mut best_i = 0usize;
    let mut best = ov.get(row, 0);
    let mut bad = false;
    let plain = !ov.has_transforms();
    // Under monotone maps alone (a temperature, the normalized penalty's log-softmax) a clean
    // block's largest value is the map of its largest raw entry, and its first occurrence is the
    // first entry that maps to it (maps round: distinct raw entries may meet).
    let upto = ov.n_transforms();
    let mono = !plain && ov.keep_mask().is_none() && ov.monotone_upto(upto);
    if (plain || mono) && ov.has_edits() {
        // the scratch is taken out of its cell: the kernels must not run inside a closure, which
        // would not inherit this level's target features
        let mut scratch = BLOCKS.with(|b| std::mem::take(&mut *b.borrow_mut()));
        let found = first_max_edited::<I>(row, ov, upto, plain, &mut scratch, &mut bad);
        BLOCKS.with(|b| *b.borrow_mut() = scratch);
        if let Some(at) = found {
            #[cfg(test)]
            super::testing::note_edited_first_max();
            return (!bad).then_some(at);
        }
        if bad {
            return None;
        }
    }
    let mut buf = [0.0f32; CHUNK];
    // Without transforms each clean stretch is one read, whole (plus a search of the one block
    // that holds its max, if that beats the best so far); under monotone maps the same in blocks;
    // otherwise blocks go through the overlay, so the span length does not matter.
    for (start, span, edited) in spans_of(row, ov, usize::MAX) {
        if plain && !edited {
            // a later span only wins with a strictly larger value, at its first occurrence
            if let Some((sm, at)) = span_first_max::<I>(span, &mut bad, best) {
                best = sm;
                best_i = start + at;
            }
            continue;
        }
        if mono && !edited {
            for (b, block) in span.chunks(FIRST_MAX_BLOCK).enumerate() {
                #[cfg(test)]
                super::testing::note_raw_under_maps();
                let v = ov.map_upto(I::span_max(block, &mut bad), upto, row);
                if v > best {
                    // every raw entry that maps to `v` is at or above its raw bar: the first
                    // of those that does, 64 entries per test
                    let r = ov.raw_bar(v, upto, row);
                    let mut j = 0;
                    'search: for (g, group) in block.chunks(64).enumerate() {
                        let mut hits = I::mask_ge64(group, r);
                        while hits != 0 {
                            let i = hits.trailing_zeros() as usize;
                            hits &= hits - 1;
                            if ov.map_upto(group[i], upto, row) == v {
                                j = g * 64 + i;
                                break 'search;
                            }
                        }
                    }
                    best = v;
                    best_i = start + b * FIRST_MAX_BLOCK + j;
                }
            }
            continue;
        }
        for (i, block) in span.chunks(CHUNK).enumerate() {
            let start = start + i * CHUNK;
            bad |= any_bad(block);
            let vals = ov.current_block(row, start, block, edited, &mut buf);
            for (j, &v) in vals.iter().enumerate() {
                if v > best {
                    best = v;
                    best_i = start + j;
                }
            }
        }
    }
    (!bad).then_some(best_i)
}
}

/// [`first_max_edited`]'s block maxima, their marks and the edits in marked blocks, reused so
/// a step allocates nothing.
#[derive(Default)]
struct BlockScratch {
    maxima: Vec<f32>,
    dirty: Vec<bool>,
    dirty_ids: Vec<u32>,
}

thread_local! {
    static BLOCKS: std::cell::RefCell<BlockScratch> = std::cell::RefCell::new(BlockScratch::default());
}

/// [`first_max`] over a row with edits, raw (`plain`) or under monotone maps, no allowed set:
/// the row read whole in blocks of [`FIRST_MAX_BLOCK`], as if it had no edits, and the edits
/// taken from the overlay's list. (Cutting the row at every edited block cost a search per
/// stretch and the overlay per edited entry: greedy under a repeat penalty took 2.4× its time
/// without one.)
///
/// A block's raw maximum is its unedited entries' maximum unless an edited entry's raw value
/// reaches it. Those blocks ("dirty": under a penalty, the blocks of the row's best tokens, which
/// are the ones repeated) are read again without their edited entries ([`unedited_max`]). The
/// answer is the first occurrence of the largest of the blocks' unedited maxima and the edited
/// values. `None` (the caller's general path decides) when that largest value is `-inf` or an
/// edited value is NaN, where the first occurrence is not found this way.
#[inline(always)]
fn first_max_edited<I: Isa>(
    row: &[f32],
    ov: &Overlay,
    upto: usize,
    plain: bool,
    scratch: &mut BlockScratch,
    bad: &mut bool,
) -> Option<usize> {
    const B: usize = FIRST_MAX_BLOCK;
    let BlockScratch {
        maxima,
        dirty,
        dirty_ids,
    } = scratch;
    maxima.clear();
    for block in row.chunks(B) {
        maxima.push(I::span_max(block, bad));
    }
    if *bad {
        return None;
    }
    dirty.clear();
    dirty.resize(maxima.len(), false);
    // the largest edited value, first id of equals
    let (mut ve, mut ie) = (f32::NEG_INFINITY, usize::MAX);
    for (id, v) in ov.edited_values(row, upto) {
        if v.is_nan() {
            return None;
        }
        if v > ve || (v == ve && id < ie) {
            (ve, ie) = (v, id);
        }
        dirty[id / B] |= row[id] >= maxima[id / B];
    }
    dirty_ids.clear();
    dirty_ids.extend(
        ov.edited_ids()
            .filter(|&id| dirty[id / B])
            .map(|id| id as u32),
    );
    dirty_ids.sort_unstable();
    for ids in dirty_ids.chunk_by(|a, b| a / B as u32 == b / B as u32) {
        let b = ids[0] as usize / B;
        let block = &row[b * B..(b * B + B).min(row.len())];
        maxima[b] = unedited_max::<I>(block, b * B, ids);
    }
    // the first block with the largest unedited value
    let (vb, bb) = maxima.iter().enumerate().skip(1).fold(
        (map_raw(ov, maxima[0], upto, plain, row), 0),
        |(vb, bb), (b, &m)| {
            let v = map_raw(ov, m, upto, plain, row);
            if v > vb {
                (v, b)
            } else {
                (vb, bb)
            }
        },
    );
    if ve > vb {
        return Some(ie);
    }
    if vb == f32::NEG_INFINITY {
        return None;
    }
    // the first unedited entry of block `bb` whose value is `vb`
    let start = bb * B;
    let block = &row[start..(start + B).min(row.len())];
    let r = if plain { vb } else { ov.raw_bar(vb, upto, row) };
    for (g, group) in block.chunks(64).enumerate() {
        let mut hits = I::mask_ge64(group, r);
        while hits != 0 {
            let i = g * 64 + hits.trailing_zeros() as usize;
            hits &= hits - 1;
            if map_raw(ov, block[i], upto, plain, row) == vb && !ov.is_edited(start + i) {
                return Some(if ve == vb {
                    ie.min(start + i)
                } else {
                    start + i
                });
            }
        }
    }
    None
}

/// A raw entry's value under the first `upto` transforms (itself when `plain`).
#[inline(always)]
fn map_raw(ov: &Overlay, x: f32, upto: usize, plain: bool, row: &[f32]) -> f32 {
    if plain {
        x
    } else {
        ov.map_upto(x, upto, row)
    }
}

/// The largest entry of `block` (starting at id `start`) other than the ids `ids` (sorted, all in
/// the block): the stretches between them read as they are, each 64-entry group that holds one
/// from a copy where they read `-inf`.
#[inline(always)]
fn unedited_max<I: Isa>(block: &[f32], start: usize, ids: &[u32]) -> f32 {
    let mut unused = false;
    let mut m = f32::NEG_INFINITY;
    let mut from = 0;
    let mut copy = [0.0f32; 64];
    for group in ids.chunk_by(|a, b| a / 64 == b / 64) {
        let g0 = (group[0] as usize - start) / 64 * 64;
        let g1 = (g0 + 64).min(block.len());
        let clean = I::span_max(&block[from..g0], &mut unused);
        let copy = &mut copy[..g1 - g0];
        copy.copy_from_slice(&block[g0..g1]);
        for &id in group {
            copy[id as usize - start - g0] = f32::NEG_INFINITY;
        }
        let patched = I::span_max(copy, &mut unused);
        m = max3(m, clean, patched);
        from = g1;
    }
    let rest = I::span_max(&block[from..], &mut unused);
    if rest > m {
        rest
    } else {
        m
    }
}

/// The largest of three values (NaN never wins).
#[inline(always)]
fn max3(a: f32, b: f32, c: f32) -> f32 {
    let m = if b > a { b } else { a };
    if c > m {
        c
    } else {
        m
    }
}

multiversion! {
/// The largest current value of "row + overlay" (llama.cpp's `max_logit` over the identity layout:
/// NaN never wins, `-inf` when every value is), or `None` if the row holds NaN or +inf.
/// Dispatched ([`crate::simd`]).
pub fn current_max(row: &[f32], ov: &Overlay) -> Option<f32> {
    let map = match (ov.has_transforms(), ov.only_div()) {
        (false, _) => Some(1.0f32),
        (true, Some(t)) => Some(t),
        (true, None) => None,
    };
    let mut bad = false;
    let mut m = f32::NEG_INFINITY;
    let mut vbuf = [0.0f32; CHUNK];
    for (start, span, edited) in spans(row, ov) {
        if let (Some(t), false) = (map, edited) {
            // the division is monotone: the max of the raw span maps to the max of its values
            let x = span_max(span, &mut bad);
            let v = if t == 1.0 { x } else { x / t };
            m = if v > m { v } else { m };
            continue;
        }
        for (i, block) in span.chunks(CHUNK).enumerate() {
            bad |= any_bad(block);
            for &v in ov.current_block(row, start + i * CHUNK, block, edited, &mut vbuf) {
                m = if v > m { v } else { m };
            }
        }
    }
    (!bad).then_some(m)
}
}

/// The current values of "row + overlay" in id order, into `out` (what a filled array would hold;
/// `ov` must be prepared). A stage that sums the whole row reads them here instead of filling.
pub fn current_values(row: &[f32], ov: &Overlay, out: &mut Vec<f32>) {
    out.clear();
    out.reserve(row.len());
    let mut vbuf = [0.0f32; CHUNK];
    for (start, span, edited) in spans(row, ov) {
        if !edited && !ov.has_transforms() {
            out.extend_from_slice(span);
            continue;
        }
        for (i, block) in span.chunks(CHUNK).enumerate() {
            out.extend_from_slice(ov.current_block(
                row,
                start + i * CHUNK,
                block,
                edited,
                &mut vbuf,
            ));
        }
    }
}

multiversion! {
/// dist's weights over "row + overlay": `w[i] = expf(v_i - max)` (f32) for every id in order, into
/// `w`, and their f64 sum in the same order, exactly as `dist` computes them on the filled array.
/// Dispatched ([`crate::simd`]); `expf` is libm's on every level.
pub fn exp_weights(row: &[f32], ov: &Overlay, max: f32, w: &mut Vec<f32>) -> f64 {
    w.clear();
    w.reserve(row.len());
    let div = ov.only_div();
    let plain = !ov.has_transforms();
    let mut sum = 0.0f64;
    let mut vbuf = [0.0f32; CHUNK];
    for (start, span, edited) in spans(row, ov) {
        if !edited && (plain || div.is_some()) {
            let t = div.unwrap_or(1.0);
            for &x in span {
                let v = if plain { x } else { x / t };
                let p = (v - max).exp();
                w.push(p);
                sum += p as f64;
            }
            continue;
        }
        for (i, block) in span.chunks(CHUNK).enumerate() {
            for &v in ov.current_block(row, start + i * CHUNK, block, edited, &mut vbuf) {
                let p = (v - max).exp();
                w.push(p);
                sum += p as f64;
            }
        }
    }
    sum
}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::row_with_edits;

    fn naive_first_max(v: &[f32]) -> usize {
        let mut b = 0;
        for i in 1..v.len() {
            if v[i] > v[b] {
                b = i;
            }
        }
        b
    }

    /// Rows whose first maximum is hard to find in one read: many ties (on every lane, across
    /// blocks and in the tail), signed zeros, `-inf` runs, lengths around the block size and
    /// stretches far longer than a span.
    fn hard_rows() -> Vec<Vec<f32>> {
        let mut g = crate::synth::SplitMix64(7);
        let mut rows = Vec::new();
        for n in [
            1usize, 2, 15, 16, 17, 31, 32, 33, 255, 256, 257, 1000, 4099, 49_152,
        ] {
            // few distinct values: the maximum occurs many times, first in any lane
            rows.push(
                (0..n)
                    .map(|_| (g.next_u64() % 4) as f32)
                    .collect::<Vec<_>>(),
            );
            // only zeros of both signs
            rows.push(
                (0..n)
                    .map(|_| {
                        if g.next_u64().is_multiple_of(2) {
                            0.0
                        } else {
                            -0.0
                        }
                    })
                    .collect(),
            );
            // -inf everywhere, then with one finite value late, then in the tail only
            rows.push(vec![f32::NEG_INFINITY; n]);
            let mut r = vec![f32::NEG_INFINITY; n];
            r[n - 1] = -1e30;
            rows.push(r);
            // a rising row: every block beats the one before
            rows.push((0..n).map(|i| i as f32 * 0.5).collect());
        }
        // the maximum on either side of a 1024-entry block boundary, in the partial last block,
        // and equal maxima in two blocks (the earlier block must win)
        for n in [1023usize, 1024, 1025, 2048, 2049, 3000] {
            for at in [0usize, 1022, 1023, 1024, 1025, 2047, 2048, n - 1] {
                if at < n {
                    let mut r = vec![-1.0f32; n];
                    r[at] = 2.0;
                    if at + 1100 < n {
                        r[at + 1100] = 2.0;
                    }
                    rows.push(r);
                }
            }
        }
        rows
    }

    #[test]
    fn first_max_is_the_strict_scan_on_every_level_for_hard_rows() {
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for row in hard_rows() {
                let mut ov = Overlay::default();
                ov.reset(row.len());
                ov.prepare();
                let before = crate::simd::testing::runs()[level as usize];
                assert_eq!(
                    first_max(&row, &ov),
                    Some(naive_first_max(&row)),
                    "{} n={} {:?}",
                    level.name(),
                    row.len(),
                    &row[..row.len().min(40)]
                );
                assert_eq!(crate::simd::testing::runs()[level as usize], before + 1);
            }
            // NaN or +inf anywhere (a lane, the tail): no index
            for (n, at) in [(40usize, 3usize), (40, 37), (300, 290), (17, 16)] {
                for bad in [f32::NAN, f32::INFINITY] {
                    let mut row = vec![1.0f32; n];
                    row[at] = bad;
                    let mut ov = Overlay::default();
                    ov.reset(n);
                    ov.prepare();
                    assert_eq!(first_max(&row, &ov), None, "{} {bad} at {at}", level.name());
                }
            }
        }
        crate::simd::testing::force(None);
    }

    /// Under pending monotone maps the answer is the strict scan of the mapped values, where
    /// rounding makes distinct raw entries equal: a large log-sum-exp maps a rising row to a
    /// staircase, so the first entry of the top step, not the raw maximum, wins (across blocks
    /// too), and the hard rows' ties, zeros and `-inf` runs keep their order.
    #[test]
    fn first_max_under_monotone_maps_is_the_strict_scan_of_the_mapped_values() {
        use crate::overlay::Transform;
        let mut rows = hard_rows();
        for n in [700usize, 1024, 2500, 49_152] {
            rows.push((0..n).map(|i| i as f32 * 1e-3).collect());
        }
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for (r, row) in rows.iter().enumerate() {
                let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let maps: [&[Transform]; 3] = [
                    &[Transform::Div(0.7)],
                    &[Transform::LogProb { max, lse: 3.0e4 }],
                    &[Transform::LogProb { max, lse: 2.0 }, Transform::Div(1.3)],
                ];
                for (m, &xf) in maps.iter().enumerate() {
                    let mut ov = Overlay::default();
                    ov.reset(row.len());
                    for &t in xf {
                        assert!(ov.push_transform(t));
                    }
                    ov.prepare();
                    let mapped: Vec<f32> = (0..row.len()).map(|i| ov.get(row, i)).collect();
                    let raw_reads = crate::kernels::testing::raw_under_maps();
                    assert_eq!(
                        first_max(row, &ov),
                        Some(naive_first_max(&mapped)),
                        "{} row {r} (n={}) map {m}",
                        level.name(),
                        row.len()
                    );
                    // read raw, in blocks, not entry by entry through the overlay
                    assert!(crate::kernels::testing::raw_under_maps() > raw_reads);
                }
            }
        }
        crate::simd::testing::force(None);
    }

    /// The edited-row path on every level: edits on a block's raw maximum (the block read again
    /// without it), edited values tying unedited entries before and after them and each other,
    /// across block boundaries, raw and under monotone maps that round neighbours together.
    #[test]
    fn first_max_with_edits_is_the_strict_scan_on_every_level() {
        use crate::overlay::Transform;
        let mut g = crate::synth::SplitMix64(11);
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for case in 0..400u64 {
                let n = [5usize, 700, 1024, 1025, 3000, 49_152][case as usize % 6];
                // few distinct values, so edits and entries tie often
                let row: Vec<f32> = (0..n).map(|_| (g.next_u64() % 9) as f32 - 4.0).collect();
                let mut ov = Overlay::default();
                ov.reset(n);
                let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                match case % 3 {
                    1 => assert!(ov.push_transform(Transform::Div(0.7))),
                    2 => assert!(ov.push_transform(Transform::LogProb { max, lse: 3.0e7 })),
                    _ => {}
                }
                for e in 0..(1 + case % 12) {
                    let id = if e % 2 == 0 {
                        // the first raw maximum of a random block: that block turns dirty
                        let b =
                            (g.next_u64() as usize % n.div_ceil(FIRST_MAX_BLOCK)) * FIRST_MAX_BLOCK;
                        let block = &row[b..(b + FIRST_MAX_BLOCK).min(n)];
                        b + naive_first_max(block)
                    } else {
                        g.next_u64() as usize % n
                    };
                    let v = match g.next_u64() % 4 {
                        // an entry's value elsewhere: ties
                        0 | 1 => ov.get(&row, g.next_u64() as usize % n),
                        2 => ov.get(&row, id) - 1.0,
                        _ => ov.get(&row, id) + 0.5,
                    };
                    ov.set(id, v);
                }
                ov.prepare();
                let full: Vec<f32> = (0..n).map(|i| ov.get(&row, i)).collect();
                let before = crate::kernels::testing::edited_first_max();
                assert_eq!(
                    first_max(&row, &ov),
                    Some(naive_first_max(&full)),
                    "{} case {case} n={n}",
                    level.name()
                );
                assert_eq!(
                    crate::kernels::testing::edited_first_max(),
                    before + 1,
                    "{} case {case}: the edited-row path answered",
                    level.name()
                );
            }
        }
        crate::simd::testing::force(None);
    }

    #[test]
    fn first_max_matches_naive_with_edits_and_ties() {
        for seed in 0..200 {
            // every tenth row far longer than a span: whole clean stretches between edits
            let n = if seed % 10 == 0 {
                3000 + seed as usize * 13
            } else {
                1 + (seed as usize * 37) % 700
            };
            let (row, ov, full) = row_with_edits(n, seed, (seed % 9) as usize, seed % 2 == 0);
            assert_eq!(
                first_max(&row, &ov),
                Some(naive_first_max(&full)),
                "seed {seed}"
            );
        }
    }
}
