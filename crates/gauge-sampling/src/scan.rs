//! Kernels over "row + overlay" for the first dense stage: greedy, top-k, dist, the sorted
//! softmax of mirostat, and top-n-sigma's bound.
//!
//! They read the caller's logit row in spans of up to 256 entries (one vectorised reduction and
//! one branch per span) or blocks of `CHUNK`; clean stretches are read raw (a pending temperature
//! division is inverted into an exact raw threshold, so skipped entries are never divided), blocks
//! that hold an edit are read entry by entry through the overlay. NaN/+inf is detected in the same
//! pass (one `cmpnleps` per vector), so validation costs no separate trip through memory.
//!
//! Every kernel is exact or silent: whenever its shortcut cannot prove the slow path's exact
//! answer (a tie llama.cpp's sort would break in an order it does not replay, logits beyond the
//! bucket sort's range, a bound too loose to decide), it says so and the caller fills the array.
//! Where a shortcut uses approximate arithmetic (`exp2_approx`, f64 moments), that arithmetic only
//! classifies, under an error bound checked exhaustively or derived in the docs, and the values that
//! reach a probability are always computed the slow path's way.

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
fn is_bad(x: f32) -> bool {
    !(x <= f32::MAX)
}

/// Bit `j` set when `block[j] >= t`, and whether any entry is NaN or +inf (one vectorised pass).
/// Callers walk the set bits, so a block with one hit costs one visit, not sixteen branches.
#[inline]
fn mask_ge(block: &[f32], t: f32, bad: &mut bool) -> u32 {
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
fn any_bad(block: &[f32]) -> bool {
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
fn for_blocks(row: &[f32], ov: &Overlay, mut visit: impl FnMut(usize, &[f32], bool)) {
    let mut next = ov.edited_chunks().iter().copied().peekable();
    for (ci, block) in row.chunks(CHUNK).enumerate() {
        let is_edited = next.peek() == Some(&(ci as u32));
        if is_edited {
            next.next();
        }
        visit(ci * CHUNK, block, is_edited);
    }
}

/// One span of `top_k_unique`'s first pass: `(max, start, len, edited)`.
type SpanInfo = (f32, u32, u32, bool);

thread_local! {
    /// Per-span maxima of `top_k_unique`, and a scratch copy of the maxima for the selection.
    /// Reused, so a step allocates nothing.
    static SPANS: std::cell::RefCell<(Vec<SpanInfo>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Clean stretches are visited this many entries at a time by [`for_spans`].
const SPAN: usize = 16 * CHUNK;

/// Like [`for_blocks`], but stretches without edits come as spans of up to [`SPAN`] entries (one
/// reduction and one branch per span instead of per block); edited blocks come one by one.
#[inline]
fn for_spans(row: &[f32], ov: &Overlay, mut visit: impl FnMut(usize, &[f32], bool)) {
    let edits = ov.edited_chunks();
    let n = row.len();
    let (mut k, mut start) = (0, 0);
    while start < n {
        let next = edits.get(k).map_or(n, |&c| (c as usize * CHUNK).min(n));
        if next == start {
            let end = (start + CHUNK).min(n);
            visit(start, &row[start..end], true);
            start = end;
            k += 1;
        } else {
            let end = (start + SPAN).min(next);
            visit(start, &row[start..end], false);
            start = end;
        }
    }
}

/// The spans of [`for_spans`] as an iterator, for kernels that keep accumulators in registers
/// across spans (a closure's captured state lives in memory between calls).
#[inline]
fn spans<'a>(
    row: &'a [f32],
    ov: &'a Overlay,
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
            (start + SPAN).min(next)
        };
        start = end;
        Some((s0, &row[s0..end], edited))
    })
}

/// The largest entry of a span (NaN never wins; `-inf` for an empty span), and whether it holds
/// NaN or +inf: lane-wise maxima, so it vectorises without reassociating anything.
#[inline(always)]
fn span_max(span: &[f32], bad: &mut bool) -> f32 {
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

/// llama.cpp greedy over the identity layout: index of the first maximum (strict `>`), starting
/// from index 0. `None` if the row holds NaN or +inf (pending transforms may create `+inf`, e.g. a
/// huge logit divided by a small temperature; that is a valid value, not an error).
pub fn first_max(row: &[f32], ov: &Overlay) -> Option<usize> {
    let mut best_i = 0usize;
    let mut best = ov.get(row, 0);
    let mut bad = false;
    let plain = !ov.has_transforms();
    let mut buf = [0.0f32; CHUNK];
    for_spans(row, ov, |start, span, edited| {
        if plain && !edited {
            // a later span only wins with a strictly larger value, at its first occurrence
            let sm = span_max(span, &mut bad);
            if sm > best {
                best = sm;
                best_i = start + span.iter().position(|&x| x == sm).unwrap_or(0);
            }
            return;
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
    });
    (!bad).then_some(best_i)
}

/// The largest current value of "row + overlay" (llama.cpp's `max_logit` over the identity layout:
/// NaN never wins, `-inf` when every value is), or `None` if the row holds NaN or +inf.
pub fn current_max(row: &[f32], ov: &Overlay) -> Option<f32> {
    let map = match (ov.has_transforms(), ov.only_div()) {
        (false, _) => Some(1.0f32),
        (true, Some(t)) => Some(t),
        (true, None) => None,
    };
    let mut bad = false;
    let mut m = f32::NEG_INFINITY;
    let mut vbuf = [0.0f32; CHUNK];
    for_spans(row, ov, |start, span, edited| {
        if let (Some(t), false) = (map, edited) {
            // the division is monotone: the max of the raw span maps to the max of its values
            let x = span_max(span, &mut bad);
            let v = if t == 1.0 { x } else { x / t };
            m = if v > m { v } else { m };
            return;
        }
        for (i, block) in span.chunks(CHUNK).enumerate() {
            bad |= any_bad(block);
            for &v in ov.current_block(row, start + i * CHUNK, block, edited, &mut vbuf) {
                m = if v > m { v } else { m };
            }
        }
    });
    (!bad).then_some(m)
}

/// dist's weights over "row + overlay": `w[i] = expf(v_i - max)` (f32) for every id in order, into
/// `w`, and their f64 sum in the same order, exactly as `dist` computes them on the filled array.
pub fn exp_weights(row: &[f32], ov: &Overlay, max: f32, w: &mut Vec<f32>) -> f64 {
    w.clear();
    w.reserve(row.len());
    let div = ov.only_div();
    let plain = !ov.has_transforms();
    let mut sum = 0.0f64;
    let mut vbuf = [0.0f32; CHUNK];
    for_spans(row, ov, |start, span, edited| {
        if !edited && (plain || div.is_some()) {
            let t = div.unwrap_or(1.0);
            for &x in span {
                let v = if plain { x } else { x / t };
                let p = (v - max).exp();
                w.push(p);
                sum += p as f64;
            }
            return;
        }
        for (i, block) in span.chunks(CHUNK).enumerate() {
            for &v in ov.current_block(row, start + i * CHUNK, block, edited, &mut vbuf) {
                let p = (v - max).exp();
                w.push(p);
                sum += p as f64;
            }
        }
    });
    sum
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
    let Some((lo, hi)) = ov.last_sigma_band() else {
        return scan_top_k(row, ov, k, floor, ov.n_transforms(), true, buf);
    };
    let upto = ov.n_transforms() - 1;
    match scan_top_k(row, ov, k, floor.max(lo), upto, false, buf) {
        Scan::Done if buf.len() == k && buf[k - 1].0 >= hi => return Scan::Done,
        Scan::Invalid => return Scan::Invalid,
        _ => {}
    }
    let cut = ov.sigma_cut(row);
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
    let masked = |v: f32| if v < floor { f32::NEG_INFINITY } else { v };
    let plain = upto == 0;
    let mut vbuf = [0.0f32; CHUNK];
    let pass = SPANS.with(|sp| {
        let (spans, maxes) = &mut *sp.borrow_mut();
        spans.clear();
        // pass 1: the maximum of every span (and validation)
        let mut bad = false;
        for_spans(row, ov, |start, span, edited| {
            let m = if plain && !edited {
                span_max(span, &mut bad)
            } else {
                let mut m = f32::NEG_INFINITY;
                for (i, block) in span.chunks(CHUNK).enumerate() {
                    bad |= any_bad(block);
                    for &v in ov.block_upto(row, start + i * CHUNK, block, edited, upto, &mut vbuf)
                    {
                        m = if v > m { v } else { m };
                    }
                }
                m
            };
            spans.push((masked(m), start as u32, span.len() as u32, edited));
        });
        if bad {
            return Scan::Invalid;
        }
        // The entry bar starts at the k-th largest span maximum: those k maxima are k distinct
        // entries, so the k-th largest entry is at least that. Spans below it are never read.
        let mut t = floor;
        if spans.len() >= 2 * k {
            maxes.clear();
            maxes.extend(spans.iter().map(|s| s.0));
            maxes.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            t = t.max(maxes[k - 1]);
        }
        // pass 2: every entry >= the bar, the bar raised as the buffer fills
        let cap = (4 * k).max(64) + CHUNK;
        for &(m, start, len, edited) in spans.iter() {
            if m < t {
                continue;
            }
            let (start, len) = (start as usize, len as usize);
            let span = &row[start..start + len];
            let clean = plain && !edited;
            for (i, block) in span.chunks(CHUNK).enumerate() {
                let start = start + i * CHUNK;
                if clean {
                    let mut hits = mask_ge(block, t, &mut false);
                    while hits != 0 {
                        let j = hits.trailing_zeros() as usize;
                        hits &= hits - 1;
                        let v = masked(block[j]);
                        if v >= t {
                            buf.push((v, (start + j) as u32));
                        }
                    }
                } else {
                    let vals = ov.block_upto(row, start, block, edited, upto, &mut vbuf);
                    for (j, &v) in vals.iter().enumerate() {
                        let v = masked(v);
                        if v >= t {
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
                    if buf.len() >= cap {
                        return Scan::Ambiguous; // too many ties at the bar (replayed below)
                    }
                }
            }
        }
        Scan::Done
    });
    let ambiguous = |buf: &mut Vec<(f32, u32)>| {
        if replay && k <= crate::ops::HEAP_PARTIAL_SORT_MAX {
            heap_replay(row, ov, k.min(n), floor, upto, buf)
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
    buf.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
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
}

/// llama.cpp's `std::partial_sort` of the top `k` (`k <= 128`) over the identity-layout array of
/// current values (entries below `floor` read as -inf), replayed on the row without filling it:
/// libstdc++'s heap-select makes a heap of entries `0..k`, then lets in, in array order, every
/// entry that compares greater than the heap's top, and finally sorts the heap. An entry that does
/// not beat the top changes nothing, so only spans whose maximum beats the current top are read.
/// Exact for ties and for -inf entries (every step is the ported libstdc++ operation), so it
/// settles what the unique-values scan cannot.
fn heap_replay(
    row: &[f32],
    ov: &Overlay,
    k: usize,
    floor: f32,
    upto: usize,
    buf: &mut Vec<(f32, u32)>,
) -> Scan {
    use crate::sort::{adjust_heap, make_heap, sort_heap};
    let mut less = |a: &(f32, u32), b: &(f32, u32)| a.0 > b.0;
    let masked = |v: f32| if v < floor { f32::NEG_INFINITY } else { v };
    let plain = upto == 0;
    let mut vbuf = [0.0f32; CHUNK];
    buf.clear();
    buf.extend((0..k).map(|i| (masked(ov.value_at(row, i, upto)), i as u32)));
    make_heap(buf, k, &mut less);
    let mut ignore = false;
    for_spans(row, ov, |start, span, edited| {
        let end = start + span.len();
        if end <= k {
            return;
        }
        let clean = plain && !edited;
        if clean && masked(span_max(span, &mut ignore)) <= buf[0].0 {
            return;
        }
        for (i, block) in span.chunks(CHUNK).enumerate() {
            let bstart = start + i * CHUNK;
            let vals = if clean {
                block
            } else {
                ov.block_upto(row, bstart, block, edited, upto, &mut vbuf)
            };
            for (j, &x) in vals.iter().enumerate() {
                let id = bstart + j;
                let v = masked(x);
                if id >= k && v > buf[0].0 {
                    adjust_heap(buf, 0, k, (v, id as u32), &mut less);
                }
            }
        }
    });
    sort_heap(buf, k, &mut less);
    Scan::Done
}

// -------------------------------------------------------------------------------------------------
// Top-n-sigma without its latency-bound sums

/// What [`sigma_band`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SigmaBand {
    /// The exact cut lies in `[lo, hi]`.
    Band(f32, f32),
    /// Every value is -inf: the stage masks nothing.
    NoMask,
    /// The row holds NaN or +inf.
    Invalid,
}

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
pub fn sigma_band(row: &[f32], ov: &Overlay, n_sigma: f32) -> SigmaBand {
    const U: f64 = 1.0 / 16_777_216.0; // 2^-24
    const R: f64 = 4.0 * U; // 2^-22: one rounding, generously
    const L: usize = 8; // lanes: 4 accumulators x 8 lanes fit the 16 SSE registers
    let plain = !ov.has_transforms();
    let mut bad = false;
    let mut cnt = 0u64;
    let (mut f1, mut f2) = ([0.0f64; L], [0.0f64; L]);
    let mut lm = [f32::NEG_INFINITY; L];
    let mut vbuf = [0.0f32; CHUNK];
    for (start, span, edited) in spans(row, ov) {
        let (mut l1, mut l2) = ([0.0f32; L], [0.0f32; L]);
        let mut ln = [f32::INFINITY; L];
        for (i, block) in span.chunks(CHUNK).enumerate() {
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
            for h in 0..2 {
                for j in 0..L {
                    let y = vals[h * L + j];
                    // NaN and +inf pass through and poison the sums (checked once at the end);
                    // -inf adds nothing and shows in the lane minimum
                    let z = if y == f32::NEG_INFINITY { 0.0 } else { y };
                    l1[j] += z;
                    l2[j] += z * z;
                    lm[j] = if y > lm[j] { y } else { lm[j] };
                    ln[j] = if y < ln[j] { y } else { ln[j] };
                }
            }
        }
        for j in 0..L {
            f1[j] += l1[j] as f64;
            f2[j] += l2[j] as f64;
        }
        if ln.contains(&f32::NEG_INFINITY) {
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

// -------------------------------------------------------------------------------------------------
// Sorted softmax without the sort

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

    fn naive_first_max(v: &[f32]) -> usize {
        let mut b = 0;
        for i in 1..v.len() {
            if v[i] > v[b] {
                b = i;
            }
        }
        b
    }

    fn row_with_edits(
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

    #[test]
    fn first_max_matches_naive_with_edits_and_ties() {
        for seed in 0..200 {
            let n = 1 + (seed as usize * 37) % 700;
            let (row, ov, full) = row_with_edits(n, seed, (seed % 9) as usize, seed % 2 == 0);
            assert_eq!(
                first_max(&row, &ov),
                Some(naive_first_max(&full)),
                "seed {seed}"
            );
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
