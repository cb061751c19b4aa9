//! top-k's fast path: the `k` largest entries of "row + overlay" in llama.cpp's order, without
//! filling or sorting the array, or a refusal when the order would depend on tie-breaking it does
//! not replay.

use super::mask::Isa;
use super::{any_bad, spans, Scan, SPAN};
use crate::overlay::{Overlay, CHUNK};
use crate::simd::multiversion;

/// top-k's second pass tests an unedited span this many entries at a time.
const GROUP: usize = 4 * CHUNK;

/// The allowed set's bits for the 64 ids from `start` (a multiple of `CHUNK`); ids past the set
/// are removed.
#[inline(always)]
fn keep_bits64(words: &[u32], start: usize) -> u64 {
    let w = start / 32;
    let word = |i: usize| u128::from(words.get(w + i).copied().unwrap_or(0));
    ((word(0) | word(1) << 32 | word(2) << 64) >> (start % 32)) as u64
}

/// [`passes`]' per-span scratch, reused so a step allocates nothing: each span's maximum, their
/// order keys for the selection, one bit per span that holds an edit, one per span whose
/// maximum may be an edited entry's raw value, and the edited entries' values.
#[derive(Default)]
struct SpanScratch {
    maxima: Vec<f32>,
    keys: Vec<u32>,
    holds_edits: Vec<u64>,
    dirty: Vec<u64>,
    edited: Vec<(f32, u32)>,
    bounds: Vec<f32>,
}

thread_local! {
    static SPANS: std::cell::RefCell<SpanScratch> = std::cell::RefCell::new(SpanScratch::default());
}

/// The `k` largest entries of "row + overlay" (values below `mask_below` read as -inf), sorted
/// descending, as `(logit, id)`, provided the answer does not depend on tie-breaking.
///
/// `k` is already `min(k, n)`. Unique means: the first k values are distinct and strictly above
/// the (k+1)-th. Then llama.cpp's heap partial sort (k <= 128) and bucket sort (k > 128) both
/// produce exactly this order.
///
/// A lazy top-n-sigma mask as the last transform (see `overlay`) is handled without its exact
/// cut whenever possible: entries below the band are masked, the rest read unmasked, and the
/// answer stands if the k-th value is at or above the band (every kept entry survives the mask for
/// sure, and whatever the mask does inside the band happens below the k-th). Otherwise the exact
/// cut is computed and the scan repeated with it.
pub fn top_k_unique(
    row: &[f32],
    ov: &Overlay,
    k: usize,
    mask_below: Option<f32>,
    buf: &mut Vec<(f32, u32)>,
) -> Scan {
    let floor = mask_below.unwrap_or(f32::NEG_INFINITY);
    let Some((lo, hi)) = ov.last_lazy_band() else {
        return scan_top_k(row, ov, k, floor, ov.n_transforms(), true, buf);
    };
    let upto = ov.n_transforms() - 1;
    match scan_top_k(row, ov, k, floor.max(lo), upto, false, buf) {
        Scan::Done if buf.len() == k && buf[k - 1].0 >= hi => return Scan::Done,
        Scan::Invalid => return Scan::Invalid,
        _ => {}
    }
    let cut = ov.lazy_cut(row);
    scan_top_k(row, ov, k, floor.max(cut), upto, true, buf)
}

/// `top_k_unique` over the values with the first `upto` transforms applied and entries below
/// `floor` read as -inf. With `replay`, a tie for `k <= 128` is settled by [`heap_replay`] instead
/// of declining.
fn scan_top_k(
    row: &[f32],
    ov: &Overlay,
    k: usize,
    floor: f32,
    upto: usize,
    replay: bool,
    buf: &mut Vec<(f32, u32)>,
) -> Scan {
    let n = row.len();
    buf.clear();
    if k == 0 || n == 0 {
        return Scan::Ambiguous;
    }
    // the span scratch stays borrowed for the replay, which reads the span maxima
    SPANS.with(|sp| {
        let scratch = &mut *sp.borrow_mut();
        let pass = top_k_pass(row, ov, k, floor, upto, scratch, buf);
        let SpanScratch {
            maxima,
            holds_edits,
            edited,
            bounds,
            ..
        } = scratch;
        let kept = ov.keep_mask().is_some();
        let mut ambiguous = |buf: &mut Vec<(f32, u32)>| {
            if replay && k <= crate::ops::HEAP_PARTIAL_SORT_MAX {
                #[cfg(test)]
                super::testing::note_heap_replay();
                // With no pending mask, the first pass's span maxima bound each span's current
                // values (with the edited values in it): the replay skips spans by them instead
                // of reading the row again. Built here, only for a replay.
                let known = (upto == 0 || ov.monotone_upto(upto)).then(|| Known {
                    bounds: if edited.is_empty() {
                        maxima
                    } else {
                        span_bounds(bounds, maxima, edited, span_len(n, k))
                    },
                    len: span_len(n, k),
                    held: holds_edits,
                });
                heap_replay(row, ov, k.min(n), floor, upto, known, buf)
            } else {
                Scan::Ambiguous
            }
        };
        match pass {
            Scan::Done => {}
            Scan::Ambiguous => return ambiguous(buf),
            Scan::Invalid => return Scan::Invalid,
        }
        // Masked entries (-inf) only enter when fewer than k values survive the mask: they tie.
        if buf.len() < k && n > buf.len() {
            return ambiguous(buf);
        }
        // a removed id (read as -inf) may be among the k only if the k-th value is -inf
        if kept && buf.iter().any(|e| e.0 == f32::NEG_INFINITY) {
            return Scan::Ambiguous;
        }
        sort_by_value_desc(buf);
        let k = k.min(buf.len());
        for w in buf[..k].windows(2) {
            if w[0].0 <= w[1].0 {
                return ambiguous(buf);
            }
        }
        if buf.len() > k && buf[k - 1].0 <= buf[k].0 {
            return ambiguous(buf);
        }
        // The bucket sort files values beyond the i32 range of 6.4x+64 (and -inf) in bucket 0.
        if k > 128 && buf[..k].iter().any(|e| e.0.abs() >= 3.0e8) {
            return ambiguous(buf);
        }
        buf.truncate(k);
        Scan::Done
    })
}

/// `f32::total_cmp`'s order as an unsigned key: the magnitude bits of negatives flipped (the
/// signed key `total_cmp` compares), then the sign bit.
#[inline(always)]
fn order_key(v: f32) -> u32 {
    let b = v.to_bits() as i32;
    ((b ^ (((b >> 31) as u32) >> 1) as i32) as u32) ^ 0x8000_0000
}

/// The value of an [`order_key`].
#[inline(always)]
fn from_order_key(k: u32) -> f32 {
    let b = (k ^ 0x8000_0000) as i32;
    f32::from_bits((b ^ (((b >> 31) as u32) >> 1) as i32) as u32)
}

/// `buf` by value descending (`total_cmp`), then id ascending, as one `u64` key per entry: a
/// primitive sort instead of a comparator's (the default chain 5 % faster at 49,152).
fn sort_by_value_desc(buf: &mut [(f32, u32)]) {
    KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        keys.clear();
        keys.extend(
            buf.iter()
                .map(|&(v, id)| u64::from(!order_key(v)) << 32 | u64::from(id)),
        );
        keys.sort_unstable();
        for (e, &k) in buf.iter_mut().zip(keys.iter()) {
            *e = (from_order_key(!(k >> 32) as u32), k as u32);
        }
    });
}

thread_local! {
    /// [`sort_by_value_desc`]'s keys, reused.
    static KEYS: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

multiversion! {
/// [`scan_top_k`]'s two passes over the row, dispatched to the CPU's best instruction set
/// ([`crate::simd`]); written without closures, which would be compiled once for every level.
/// Pass 1 takes every span's maximum (and validates), pass 2 collects every entry at or above a
/// bar that starts at the k-th largest span maximum and rises as `buf` fills. `Ambiguous` when
/// too many entries tie at the bar.
fn top_k_pass<I>(
    row: &[f32],
    ov: &Overlay,
    k: usize,
    floor: f32,
    upto: usize,
    scratch: &mut SpanScratch,
    buf: &mut Vec<(f32, u32)>,
) -> Scan {
    // one copy per case, so the common one (no allowed set) carries no test of it per span
    if ov.keep_mask().is_some() {
        passes::<true, I>(row, ov, k, floor, upto, scratch, buf)
    } else {
        passes::<false, I>(row, ov, k, floor, upto, scratch, buf)
    }
}
}

/// The first pass's span length: [`SPAN`], or shorter so that a narrow row still has at least
/// `k` spans, whose maxima give the entry bar.
fn span_len(n: usize, k: usize) -> usize {
    if n >= k * SPAN {
        SPAN
    } else {
        (n / k / CHUNK * CHUNK).max(CHUNK)
    }
}

/// [`top_k_pass`]'s body, with (`KEPT`) or without an allowed set.
///
/// The row is read in whole spans, edits or not, and the edited entries join from the overlay's
/// list: a span that holds an edit may owe its maximum to an edited entry's raw value, so it
/// takes no part in the bar and its edited ids are skipped. (Cutting the spans at every edited
/// block and reading those through the overlay cost about half a read of the row per token, 64
/// edits at 49,152.)
#[inline(always)]
fn passes<const KEPT: bool, I: Isa>(
    row: &[f32],
    ov: &Overlay,
    k: usize,
    floor: f32,
    upto: usize,
    scratch: &mut SpanScratch,
    buf: &mut Vec<(f32, u32)>,
) -> Scan {
    let n = row.len();
    // raw entries are the values without transforms (an allowed set aside, applied below)
    let plain = upto == 0;
    // Monotone pending transforms (temperature, the normalized penalty's log-softmax): spans are
    // read raw and only their maxima and the entries that pass a raw bar are mapped. Otherwise
    // (a mask) every block goes through the overlay's transforms.
    let raw = plain || ov.monotone_upto(upto);
    // A grammar's allowed set: removed ids read as -inf, from the raw entries and the set's bits.
    let keep = if KEPT { ov.keep_mask() } else { None };
    let span_len = span_len(n, k);
    let SpanScratch {
        maxima,
        keys,
        holds_edits,
        dirty,
        edited,
        bounds: _,
    } = scratch;
    let mut vbuf = [0.0f32; CHUNK];
    let mut bad = false;
    maxima.clear();
    for (s, span) in row.chunks(span_len).enumerate() {
        let start = s * span_len;
        let m = if raw {
            let m = match keep {
                None => I::span_max(span, &mut bad),
                Some(words) => I::span_max_kept(span, start, words, &mut bad),
            };
            if plain {
                m
            } else {
                ov.map_upto(m, upto, row)
            }
        } else {
            let mut m = f32::NEG_INFINITY;
            for (i, block) in span.chunks(CHUNK).enumerate() {
                bad |= any_bad(block);
                for &v in ov.block_upto(row, start + i * CHUNK, block, false, upto, &mut vbuf) {
                    m = if v > m { v } else { m };
                }
            }
            m
        };
        maxima.push(if m < floor { f32::NEG_INFINITY } else { m });
    }
    if bad {
        return Scan::Invalid;
    }
    // One walk over the edits: the spans that hold one, their values, and the spans whose
    // maximum may be an edited entry's unedited value ("dirty"; under a penalty, the spans of the
    // row's best tokens). Every other span's maximum belongs to an unedited entry.
    holds_edits.clear();
    holds_edits.resize(maxima.len().div_ceil(64), 0);
    dirty.clear();
    dirty.resize(maxima.len().div_ceil(64), 0);
    edited.clear();
    for (id, v) in ov.edited_values(row, upto) {
        let s = id / span_len;
        holds_edits[s / 64] |= 1 << (s % 64);
        if ov.unedited_value(row, id, upto) >= maxima[s] {
            dirty[s / 64] |= 1 << (s % 64);
        }
        edited.push((if v < floor { f32::NEG_INFINITY } else { v }, id as u32));
    }
    let held = |s: usize| holds_edits[s / 64] >> (s % 64) & 1 != 0;
    // The entry bar starts at the k-th largest of the other spans' maxima and the edited values:
    // k distinct entries, so the k-th largest entry is at least that. Spans below it are never
    // read.
    let mut t = floor;
    keys.clear();
    keys.extend(
        maxima
            .iter()
            .enumerate()
            .filter(|&(s, _)| dirty[s / 64] >> (s % 64) & 1 == 0)
            .map(|(_, &m)| !order_key(m)),
    );
    keys.extend(edited.iter().map(|&(v, _)| !order_key(v)));
    if keys.len() >= k {
        // as descending keys (a primitive select, faster than a comparator's)
        keys.select_nth_unstable(k - 1);
        t = t.max(from_order_key(!keys[k - 1]));
    }
    let cap = (4 * k).max(64) + GROUP;
    // the bar on raw entries (`t` itself when nothing is pending)
    let mut raw_t = if plain { t } else { ov.raw_bar(t, upto, row) };
    for (s, &m) in maxima.iter().enumerate() {
        if m < t {
            continue;
        }
        #[cfg(test)]
        super::testing::note_span_read();
        let start = s * span_len;
        let span = &row[start..(start + span_len).min(n)];
        let skip_edited = held(s);
        // raw spans in groups of 64 (one mask each: most groups hold no hit), the others block
        // by block through the overlay
        let step = if raw { GROUP } else { CHUNK };
        for (i, block) in span.chunks(step).enumerate() {
            let start = start + i * step;
            if raw {
                let mut hits = I::mask_ge64(block, raw_t);
                if let Some(words) = keep {
                    hits &= keep_bits64(words, start);
                }
                while hits != 0 {
                    let j = hits.trailing_zeros() as usize;
                    hits &= hits - 1;
                    if skip_edited && ov.is_edited(start + j) {
                        continue;
                    }
                    let v = if plain {
                        block[j]
                    } else {
                        ov.map_upto(block[j], upto, row)
                    };
                    let v = if v < floor { f32::NEG_INFINITY } else { v };
                    if v >= t {
                        buf.push((v, (start + j) as u32));
                    }
                }
            } else {
                let vals = ov.block_upto(row, start, block, false, upto, &mut vbuf);
                for (j, &v) in vals.iter().enumerate() {
                    let v = if v < floor { f32::NEG_INFINITY } else { v };
                    if v >= t && !(skip_edited && ov.is_edited(start + j)) {
                        buf.push((v, (start + j) as u32));
                    }
                }
            }
            if buf.len() >= cap {
                // keep everything >= the k-th largest (ties included) and raise the bar
                buf.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
                let kth = buf[k - 1].0;
                buf.retain(|e| e.0 >= kth);
                t = kth;
                raw_t = if plain { t } else { ov.raw_bar(t, upto, row) };
                if buf.len() >= cap {
                    return Scan::Ambiguous; // too many ties at the bar (replayed below)
                }
            }
        }
    }
    buf.extend(edited.iter().filter(|e| e.0 >= t));
    Scan::Done
}

/// What the first pass left for [`heap_replay`]: a bound on each span's current values, the
/// span length and the spans that hold an edit.
#[derive(Clone, Copy)]
struct Known<'a> {
    bounds: &'a [f32],
    len: usize,
    held: &'a [u64],
}

/// Each span's bound on its current values: its maximum (raw entries mapped and floored, edited
/// ones at their raw value), or an edited value in it (floored) if larger.
fn span_bounds<'a>(
    bounds: &'a mut Vec<f32>,
    maxima: &[f32],
    edited: &[(f32, u32)],
    len: usize,
) -> &'a [f32] {
    bounds.clear();
    bounds.extend_from_slice(maxima);
    for &(v, id) in edited {
        let s = id as usize / len;
        bounds[s] = if v > bounds[s] { v } else { bounds[s] };
    }
    bounds
}

multiversion! {
/// llama.cpp's `std::partial_sort` of the top `k` (`k <= 128`) over the identity-layout array of
/// current values (entries below `floor` read as -inf), replayed on the row without filling it:
/// libstdc++'s heap-select makes a heap of the array's first `k` entries, then lets in, in array
/// order, every entry that compares greater than the heap's top, and finally sorts the heap. An
/// entry that does not beat the top changes nothing, so only spans whose maximum beats the current
/// top are read. Exact for ties and for -inf entries (every step is the ported libstdc++
/// operation), so it settles what the unique-values scan cannot.
///
/// With an allowed set the array holds the allowed entries only, in id order: the heap starts
/// from the first `k` allowed ids, and a removed id reads as -inf, which never beats the top
/// (`>`), so it never enters, as if it were not there. `Ambiguous` when fewer than `k` are allowed.
fn heap_replay<I>(
    row: &[f32],
    ov: &Overlay,
    k: usize,
    floor: f32,
    upto: usize,
    known: Option<Known<'_>>,
    buf: &mut Vec<(f32, u32)>,
) -> Scan {
    use crate::sort::{adjust_heap, make_heap, sort_heap};
    let mut less = |a: &(f32, u32), b: &(f32, u32)| a.0 > b.0;
    let masked = |v: f32| if v < floor { f32::NEG_INFINITY } else { v };
    // without transforms an unedited entry's value is its raw entry (-inf for a removed id);
    // under monotone ones it is the raw entry mapped
    let raw = upto == 0;
    let mono = ov.monotone_upto(upto);
    let map = |m: f32| if raw { m } else { ov.map_upto(m, upto, row) };
    let mut vbuf = [0.0f32; CHUNK];
    buf.clear();
    // the array's first k entries, and the first id after them
    let after = match ov.keep_mask() {
        None => {
            buf.extend((0..k).map(|i| (masked(ov.value_at(row, i, upto)), i as u32)));
            k
        }
        Some(words) => {
            let n = row.len();
            let allowed = words.iter().enumerate().flat_map(|(w, &word)| {
                let mut bits = word;
                std::iter::from_fn(move || {
                    (bits != 0).then(|| {
                        let j = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        w * 32 + j
                    })
                })
            });
            buf.extend(
                allowed
                    .take_while(|&i| i < n)
                    .take(k)
                    .map(|i| (masked(ov.value_at(row, i, upto)), i as u32)),
            );
            if buf.len() < k {
                return Scan::Ambiguous;
            }
            buf[k - 1].1 as usize + 1
        }
    };
    make_heap(buf, k, &mut less);
    let mut ignore = false;
    // the first pass's spans with their bounds, or the row walked span by span (edits apart)
    let from_pass = known.map(|kn| {
        (row.chunks(kn.len).enumerate()).map(move |(s, span)| {
            let held = kn.held[s / 64] >> (s % 64) & 1 != 0;
            (s * kn.len, span, held, Some(kn.bounds[s]))
        })
    });
    let walked = known
        .is_none()
        .then(|| spans(row, ov).map(|(start, span, edited)| (start, span, edited, None)));
    let all = from_pass.into_iter().flatten();
    for (start, span, edited, max) in all.chain(walked.into_iter().flatten()) {
        let end = start + span.len();
        if end <= after {
            continue;
        }
        // an unedited span's values are its raw entries under the pending maps, so under
        // monotone maps (the log-softmax, a temperature) the map of its raw maximum bounds them
        if (raw || mono) && !edited {
            let m = match (max, ov.keep_mask()) {
                // the first pass's maximum: mapped and floored already
                (Some(m), _) => {
                    #[cfg(test)]
                    super::testing::note_known_span();
                    m
                }
                (None, None) => masked(map(I::span_max(span, &mut ignore))),
                // the kept entries' maximum: removed ids never enter, whatever their raw value
                (None, Some(words)) => {
                    masked(map(I::span_max_kept(span, start, words, &mut ignore)))
                }
            };
            if m <= buf[0].0 {
                continue;
            }
            // Only an entry whose value beats the top enters, and the top only rises, so the raw
            // bar of the top as the span starts passes every entry that can: the rest are never
            // mapped. The hits come in id order, as the scan would meet them.
            let r = if raw {
                buf[0].0
            } else {
                ov.raw_bar(buf[0].0, upto, row)
            };
            for (i, block) in span.chunks(CHUNK).enumerate() {
                let bstart = start + i * CHUNK;
                let mut hits = I::mask_ge(block, r);
                if let Some(words) = ov.keep_mask() {
                    hits &= (words[bstart / 32] >> (bstart % 32)) & 0xFFFF;
                }
                while hits != 0 {
                    let j = hits.trailing_zeros() as usize;
                    hits &= hits - 1;
                    let x = if raw {
                        block[j]
                    } else {
                        ov.map_upto(block[j], upto, row)
                    };
                    let (v, id) = (masked(x), bstart + j);
                    if id >= after && v > buf[0].0 {
                        adjust_heap(buf, 0, k, (v, id as u32), &mut less);
                    }
                }
            }
            continue;
        }
        if let Some(m) = max {
            // a first-pass span that holds an edit: skipped by its bound, else read through the
            // overlay
            #[cfg(test)]
            super::testing::note_known_span();
            if m > buf[0].0 {
                replay_held_span(row, ov, start, span, upto, (after, floor), &mut buf[..k]);
            }
            continue;
        }
        for (i, block) in span.chunks(CHUNK).enumerate() {
            let bstart = start + i * CHUNK;
            let vals = ov.block_upto(row, bstart, block, edited, upto, &mut vbuf);
            for (j, &x) in vals.iter().enumerate() {
                let id = bstart + j;
                let v = masked(x);
                if id >= after && v > buf[0].0 {
                    adjust_heap(buf, 0, k, (v, id as u32), &mut less);
                }
            }
        }
    }
    sort_heap(buf, k, &mut less);
    Scan::Done
}
}

/// [`heap_replay`]'s step over a first-pass span that holds an edit, block by block through the
/// overlay: every id from `after` whose value (below `floor`: `-inf`) beats the heap's top
/// enters. Out of line, so the replay's loop over clean spans stays as tight as without edits.
#[inline(never)]
fn replay_held_span(
    row: &[f32],
    ov: &Overlay,
    start: usize,
    span: &[f32],
    upto: usize,
    (after, floor): (usize, f32),
    buf: &mut [(f32, u32)],
) {
    let mut less = |a: &(f32, u32), b: &(f32, u32)| a.0 > b.0;
    let mut vbuf = [0.0f32; CHUNK];
    let k = buf.len();
    for (i, block) in span.chunks(CHUNK).enumerate() {
        let bstart = start + i * CHUNK;
        let edited = ov.block_has_edit(bstart);
        for (j, &x) in ov
            .block_upto(row, bstart, block, edited, upto, &mut vbuf)
            .iter()
            .enumerate()
        {
            let (v, id) = (if x < floor { f32::NEG_INFINITY } else { x }, bstart + j);
            if id >= after && v > buf[0].0 {
                crate::sort::adjust_heap(buf, 0, k, (v, id as u32), &mut less);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::row_with_edits;

    /// `order_key` orders as `total_cmp` and gives back the same bits, on the values that tell
    /// orders apart: signed zeros, infinities, subnormals, NaNs of both signs.
    #[test]
    fn order_keys_order_as_total_cmp_and_round_trip() {
        let v = [
            f32::NEG_INFINITY,
            -f32::MAX,
            -1.5,
            -f32::MIN_POSITIVE,
            -1e-45,
            -0.0,
            0.0,
            1e-45,
            f32::MIN_POSITIVE,
            1.5,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        for &a in &v {
            assert_eq!(from_order_key(order_key(a)).to_bits(), a.to_bits(), "{a}");
            for &b in &v {
                assert_eq!(order_key(a).cmp(&order_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
        let mut buf = vec![
            (0.0, 7),
            (-0.0, 3),
            (2.0, 9),
            (2.0, 1),
            (f32::NEG_INFINITY, 0),
        ];
        sort_by_value_desc(&mut buf);
        let want = [
            (2.0, 1),
            (2.0, 9),
            (0.0, 7),
            (-0.0, 3),
            (f32::NEG_INFINITY, 0),
        ];
        let bits = |b: &[(f32, u32)]| b.iter().map(|e| (e.0.to_bits(), e.1)).collect::<Vec<_>>();
        assert_eq!(bits(&buf), bits(&want));
    }

    /// The 64 bits from every block start, against bit-by-bit reads, with sets of one to four
    /// words (ids past the set read as removed).
    #[test]
    fn keep_bits64_reads_the_64_ids_from_the_start() {
        let words = [0x8000_0001u32, 0xDEAD_BEEF, 0x0F0F_F0F0, 0x1234_5678];
        for len in 1..=words.len() {
            let set = &words[..len];
            for start in (0..len * 32).step_by(CHUNK) {
                let want = (0..64).fold(0u64, |m, j| {
                    let id = start + j;
                    let bit = set.get(id / 32).map_or(0, |w| w >> (id % 32) & 1);
                    m | u64::from(bit) << j
                });
                assert_eq!(keep_bits64(set, start), want, "len={len} start={start}");
            }
        }
    }

    /// llama.cpp's top-k on the filled array: `(logit, id)` of the kept entries, in order.
    fn slow_top_k(full: &[f32], k: usize, floor: f32) -> Vec<(f32, u32)> {
        let masked: Vec<f32> = full
            .iter()
            .map(|&v| if v < floor { f32::NEG_INFINITY } else { v })
            .collect();
        let mut c = crate::candidates::Candidates::from_logits(&masked);
        crate::ops::top_k_impl(&mut c, k as i32);
        c.as_slice()
            .iter()
            .map(|t| (t.logit, t.id as u32))
            .collect()
    }

    #[test]
    fn top_k_unique_is_llama_cpps_top_k_or_declines_only_for_ties_above_128() {
        let mut buf = Vec::new();
        let (mut declined, mut replayed) = (0, 0);
        for seed in 0..300 {
            let n = 1 + (seed as usize * 53) % 3000;
            let k = 1 + (seed as usize * 7) % 200;
            let k = k.min(n);
            let ties = seed % 3 == 0;
            let (row, ov, full) = row_with_edits(n, seed, (seed % 11) as usize, ties);
            let mut sorted: Vec<(f32, u32)> = full
                .iter()
                .enumerate()
                .map(|(i, &v)| (v, i as u32))
                .collect();
            sorted.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let unique = sorted[..k].windows(2).all(|w| w[0].0 > w[1].0)
                && (n == k || sorted[k - 1].0 > sorted[k].0);
            match top_k_unique(&row, &ov, k, None, &mut buf) {
                Scan::Done => {
                    assert_eq!(
                        buf,
                        slow_top_k(&full, k, f32::NEG_INFINITY),
                        "seed {seed} (k {k}, n {n})"
                    );
                    replayed += !unique as usize;
                }
                Scan::Ambiguous => {
                    assert!(
                        !unique && k > 128,
                        "seed {seed}: declined k = {k} (unique: {unique})"
                    );
                    declined += 1;
                }
                Scan::Invalid => panic!("seed {seed}: finite row reported invalid"),
            }
        }
        assert!(
            declined > 0 && replayed > 0,
            "both tie paths should run: {declined} {replayed}"
        );
    }

    /// Pending monotone transforms (a division, the log-softmax, both) are read raw through
    /// [`Overlay::raw_bar`]: the same answer as top-k on the transformed, filled array.
    #[test]
    fn top_k_under_monotone_transforms_is_top_k_of_the_transformed_values() {
        use crate::overlay::Transform;
        let mut buf = Vec::new();
        for seed in 0..120u64 {
            let n = 17 + (seed as usize * 211) % 5000;
            let k = 1 + (seed as usize * 13) % 150;
            let (row, mut ov, _) = row_with_edits(n, seed, (seed % 7) as usize, seed % 4 == 0);
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let lse = 3.0 + seed as f64 * 0.37;
            match seed % 3 {
                0 => assert!(ov.push_transform(Transform::LogProb { max, lse })),
                1 => assert!(ov.push_transform(Transform::Div(0.3 + seed as f32 * 0.01))),
                _ => {
                    assert!(ov.push_transform(Transform::LogProb { max, lse }));
                    assert!(ov.push_transform(Transform::Div(0.7)));
                }
            }
            ov.set((seed as usize * 31) % n, -1.5); // an edit after the transforms
            ov.prepare();
            let full: Vec<f32> = (0..n).map(|i| ov.get(&row, i)).collect();
            let k = k.min(n);
            match top_k_unique(&row, &ov, k, None, &mut buf) {
                Scan::Done => {
                    assert_eq!(buf, slow_top_k(&full, k, f32::NEG_INFINITY), "seed {seed}")
                }
                Scan::Ambiguous => assert!(k > 128, "seed {seed}: declined k = {k}"),
                Scan::Invalid => panic!("seed {seed}: finite row reported invalid"),
            }
        }
    }

    /// Ties: the heap replay skips spans by the first pass's maxima (raised by the edited values
    /// in them) instead of reading them again, and still gives llama.cpp's order, with no
    /// transform, under monotone ones, above a floor, over an allowed set (whose array holds only
    /// the allowed entries), and with edits that lower span maxima, raise entries above them and
    /// tie other entries.
    #[test]
    fn the_heap_replay_skips_spans_by_the_first_pass_maxima() {
        for edits in [false, true] {
            let (replays, known) = (
                crate::kernels::testing::heap_replays(),
                crate::kernels::testing::known_spans(),
            );
            heap_replay_cases(edits);
            let at = format!("edits: {edits}");
            assert!(
                crate::kernels::testing::heap_replays() > replays + 30,
                "{at}"
            );
            assert!(crate::kernels::testing::known_spans() > known, "{at}");
        }
    }

    fn heap_replay_cases(edits: bool) {
        use crate::overlay::Transform;
        let mut buf = Vec::new();
        for seed in 0..60u64 {
            let n = 300 + (seed as usize * 977) % 20_000;
            let k = (1 + (seed as usize * 13) % 128).min(n);
            let (row, mut ov, _) = row_with_edits(n, seed, 0, true);
            match seed % 4 {
                1 => assert!(ov.push_transform(Transform::Div(0.7))),
                2 => {
                    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                    assert!(ov.push_transform(Transform::LogProb { max, lse: 2.5 }));
                }
                _ => {}
            }
            let words: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| (w as u32).wrapping_mul(0x9E37_79B9) | 0x0101_0101)
                .collect();
            let kept = seed % 4 == 3 && ov.keep_only(&words);
            let mut g = crate::synth::SplitMix64(seed);
            for e in 0..if edits { 40 } else { 0 } {
                let id = if e % 2 == 0 {
                    // a span's first maximum: its span's raw maximum is now an edited entry's
                    let s = (g.next_u64() as usize % n.div_ceil(SPAN)) * SPAN;
                    let span = &row[s..(s + SPAN).min(n)];
                    let m = span.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                    s + span.iter().position(|&x| x == m).unwrap_or(0)
                } else {
                    g.next_u64() as usize % n
                };
                let v = match g.next_u64() % 3 {
                    0 => ov.get(&row, g.next_u64() as usize % n),
                    1 => ov.get(&row, id) - 2.0,
                    _ => ov.get(&row, id) + 1.5,
                };
                ov.set(id, v);
            }
            ov.prepare();
            let floor = if seed % 5 == 0 { Some(-1.0) } else { None };
            let f = floor.unwrap_or(f32::NEG_INFINITY);
            let full: Vec<f32> = (0..n)
                .map(|i| ov.get(&row, i))
                .map(|v| if v < f { f32::NEG_INFINITY } else { v })
                .collect();
            let mut c = crate::candidates::Candidates::from_logits(&full);
            if kept {
                c.fill_where(&full, &words);
            }
            crate::ops::top_k_impl(&mut c, k as i32);
            let want: Vec<(f32, u32)> = c
                .as_slice()
                .iter()
                .map(|t| (t.logit, t.id as u32))
                .collect();
            assert_eq!(
                top_k_unique(&row, &ov, k, floor, &mut buf),
                Scan::Done,
                "seed {seed} edits {edits}"
            );
            assert_eq!(buf, want, "seed {seed} edits {edits}");
        }
    }

    /// A repeat penalty's edits lower the row's top entries, which are the raw maxima of their
    /// spans: those spans stay out of the bar, so the scan settles without the heap replay, and
    /// the answer is top-k of the current values.
    #[test]
    fn edits_that_lower_span_maxima_leave_the_bar_to_the_other_spans() {
        let mut buf = Vec::new();
        for seed in 0..20u64 {
            let n = 49_152;
            let (row, mut ov, _) = row_with_edits(n, seed, 0, false);
            // the 64 largest entries, each divided as ctrl's θ = 1.3 would
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            for &id in &order[..64] {
                ov.set(id, row[id] / 1.3 - 8.0);
            }
            ov.prepare();
            let full: Vec<f32> = (0..n).map(|i| ov.get(&row, i)).collect();
            let replays = crate::kernels::testing::heap_replays();
            assert_eq!(top_k_unique(&row, &ov, 40, None, &mut buf), Scan::Done);
            assert_eq!(buf, slow_top_k(&full, 40, f32::NEG_INFINITY), "seed {seed}");
            assert_eq!(
                crate::kernels::testing::heap_replays(),
                replays,
                "seed {seed}"
            );
        }
    }

    /// Edits off the spans' maxima (a penalty on ids that are not their span's best) leave
    /// those spans' maxima in the bar: the second pass reads no more spans than without the
    /// edits, and the answer is top-k of the current values.
    #[test]
    fn edits_below_their_span_maximum_keep_the_span_in_the_bar() {
        let mut buf = Vec::new();
        for seed in 0..20u64 {
            let n = 49_152;
            let (row, clean, _) = row_with_edits(n, seed, 0, false);
            let read = |ov: &Overlay, buf: &mut Vec<(f32, u32)>| {
                let before = crate::kernels::testing::spans_read();
                assert_eq!(top_k_unique(&row, ov, 40, None, buf), Scan::Done);
                crate::kernels::testing::spans_read() - before
            };
            let unedited = read(&clean, &mut buf);
            let mut ov = Overlay::default();
            ov.reset(n);
            let mut g = crate::synth::SplitMix64(seed);
            while ov.edited_ids().count() < 64 {
                let id = (g.next_u64() % n as u64) as usize;
                let span = &row[id / SPAN * SPAN..(id / SPAN + 1) * SPAN];
                if row[id] < span.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) {
                    ov.set(id, row[id] - 1.0);
                }
            }
            ov.prepare();
            let full: Vec<f32> = (0..n).map(|i| ov.get(&row, i)).collect();
            let edited = read(&ov, &mut buf);
            assert_eq!(buf, slow_top_k(&full, 40, f32::NEG_INFINITY), "seed {seed}");
            assert!(
                edited <= unedited,
                "seed {seed}: {edited} spans read, {unedited} without edits"
            );
        }
    }

    #[test]
    fn raw_bar_is_below_every_entry_that_reaches_the_bar() {
        use crate::overlay::Transform;
        let row: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) * 0.013).collect();
        let mut ov = Overlay::default();
        ov.reset(row.len());
        assert!(ov.push_transform(Transform::LogProb {
            max: 26.6,
            lse: 7.25
        }));
        assert!(ov.push_transform(Transform::Div(0.8)));
        ov.prepare();
        for &t in &[-50.0f32, -40.0, -33.3, -30.0, -0.5, f32::NEG_INFINITY] {
            let r = ov.raw_bar(t, 2, &row);
            for &x in &row {
                if ov.map_upto(x, 2, &row) >= t {
                    assert!(x >= r, "t {t}: {x} reaches it but is below the raw bar {r}");
                }
            }
        }
    }

    #[test]
    fn masked_top_k_with_too_few_survivors_replays_the_heap_select() {
        // fewer than k entries survive the mask: the -inf entries tie, and libstdc++'s heap-select
        // decides which of them come first
        let row = vec![5.0, 1.0, 4.0, 0.5, 3.0, 0.25, 6.0, 1.5];
        let mut ov = Overlay::default();
        ov.reset(row.len());
        ov.prepare();
        let mut buf = Vec::new();
        assert_eq!(top_k_unique(&row, &ov, 2, Some(2.0), &mut buf), Scan::Done);
        assert_eq!(buf, vec![(6.0, 6), (5.0, 0)]);
        for k in 1..=row.len() {
            assert_eq!(
                top_k_unique(&row, &ov, k, Some(2.0), &mut buf),
                Scan::Done,
                "k {k}"
            );
            assert_eq!(buf, slow_top_k(&row, k, 2.0), "k {k}");
        }
    }
}
