//! One-pass kernels over "row + overlay" for the first dense stage (greedy, top-k).
//!
//! They read the caller's logit row in blocks of `CHUNK`; a block is skipped with one vectorised
//! comparison unless it holds a value that could enter the result, and blocks that hold an edit are
//! read entry by entry through the overlay. They return `None` whenever the result would depend on
//! how llama.cpp's sort breaks ties (equal logits at or above the cut, or values the bucket sort
//! mis-files); the caller then takes the exact slow path. So these are exact or silent, never wrong.

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

/// Any entry of the block `>= t`, and whether any is NaN or +inf; one vectorised pass, so input
/// validation costs no extra trip through memory.
#[inline]
fn any_ge(block: &[f32], t: f32, bad: &mut bool) -> bool {
    let (mut any, mut b) = (false, false);
    for &x in block {
        any |= x >= t;
        b |= !(x < f32::INFINITY);
    }
    *bad |= b;
    any
}

/// Any entry of the block `> t`, and whether any is NaN or +inf.
#[inline]
fn any_gt(block: &[f32], t: f32, bad: &mut bool) -> bool {
    let (mut any, mut b) = (false, false);
    for &x in block {
        any |= x > t;
        b |= !(x < f32::INFINITY);
    }
    *bad |= b;
    any
}

/// NaN or +inf in the block.
#[inline]
fn any_bad(block: &[f32]) -> bool {
    let mut b = false;
    for &x in block {
        b |= !(x < f32::INFINITY);
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

/// llama.cpp greedy over the identity layout: index of the first maximum (strict `>`), starting
/// from index 0. `None` if the row holds NaN or +inf.
pub fn first_max(row: &[f32], ov: &Overlay) -> Option<usize> {
    let mut best_i = 0usize;
    let mut best = ov.get(row, 0);
    let mut bad = false;
    for_blocks(row, ov, |start, block, edited| {
        if edited {
            bad |= any_bad(block);
            for i in start..start + block.len() {
                let v = ov.get(row, i);
                if v > best {
                    best = v;
                    best_i = i;
                }
            }
        } else if any_gt(block, best, &mut bad) {
            for (j, &v) in block.iter().enumerate() {
                if v > best {
                    best = v;
                    best_i = start + j;
                }
            }
        }
    });
    (!bad).then_some(best_i)
}

/// The `k` largest entries of "row + overlay" (values below `mask_below` read as -inf), sorted
/// descending, as `(logit, id)`, provided the answer does not depend on tie-breaking.
///
/// `k` is already `min(k, n)`. Unique means: the first k values are distinct and strictly above
/// the (k+1)-th. Then llama.cpp's heap partial sort (k <= 128) and bucket sort (k > 128) both
/// produce exactly this order.
pub fn top_k_unique(row: &[f32], ov: &Overlay, k: usize, mask_below: Option<f32>, buf: &mut Vec<(f32, u32)>) -> Scan {
    let n = row.len();
    buf.clear();
    if k == 0 || n == 0 {
        return Scan::Ambiguous;
    }
    let mut bad = false;
    let cap = (4 * k).max(64) + CHUNK;
    let floor = mask_below.unwrap_or(f32::NEG_INFINITY);
    let mut t = f32::NEG_INFINITY.max(floor);
    let mut too_many_ties = false;
    let masked = |v: f32| if v < floor { f32::NEG_INFINITY } else { v };
    for_blocks(row, ov, |start, block, edited| {
        if too_many_ties {
            return;
        }
        if edited {
            bad |= any_bad(block);
            for i in start..start + block.len() {
                let v = masked(ov.get(row, i));
                if v >= t {
                    buf.push((v, i as u32));
                }
            }
        } else if any_ge(block, t, &mut bad) {
            for (j, &v) in block.iter().enumerate() {
                let v = masked(v);
                if v >= t {
                    buf.push((v, (start + j) as u32));
                }
            }
        }
        if buf.len() >= cap {
            // keep everything >= the k-th largest (ties included) and raise the entry bar
            buf.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
            let kth = buf[k - 1].0;
            buf.retain(|e| e.0 >= kth);
            t = kth;
            if buf.len() >= cap {
                too_many_ties = true;
            }
        }
    });
    if bad {
        return Scan::Invalid;
    }
    if too_many_ties {
        return Scan::Ambiguous;
    }
    // Masked entries (-inf) only enter when fewer than k values survive the mask: they tie.
    if buf.len() < k && n > buf.len() {
        return Scan::Ambiguous;
    }
    buf.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let k = k.min(buf.len());
    for w in buf[..k].windows(2) {
        if w[0].0 <= w[1].0 {
            return Scan::Ambiguous;
        }
    }
    if buf.len() > k && buf[k - 1].0 <= buf[k].0 {
        return Scan::Ambiguous;
    }
    // The bucket sort files values beyond the i32 range of 6.4x+64 (and -inf) in bucket 0.
    if k > 128 && buf[..k].iter().any(|e| e.0.abs() >= 3.0e8) {
        return Scan::Ambiguous;
    }
    buf.truncate(k);
    Scan::Done
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

    fn row_with_edits(n: usize, seed: u64, n_edits: usize, ties: bool) -> (Vec<f32>, Overlay, Vec<f32>) {
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
            assert_eq!(first_max(&row, &ov), Some(naive_first_max(&full)), "seed {seed}");
        }
    }

    #[test]
    fn top_k_unique_is_the_sorted_top_or_declines() {
        let mut buf = Vec::new();
        let mut declined = 0;
        for seed in 0..300 {
            let n = 1 + (seed as usize * 53) % 3000;
            let k = 1 + (seed as usize * 7) % 200;
            let k = k.min(n);
            let ties = seed % 3 == 0;
            let (row, ov, full) = row_with_edits(n, seed, (seed % 11) as usize, ties);
            let mut sorted: Vec<(f32, u32)> = full.iter().enumerate().map(|(i, &v)| (v, i as u32)).collect();
            sorted.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let unique = sorted[..k].windows(2).all(|w| w[0].0 > w[1].0) && (n == k || sorted[k - 1].0 > sorted[k].0);
            match top_k_unique(&row, &ov, k, None, &mut buf) {
                Scan::Done => {
                    assert!(unique, "seed {seed}: fast path accepted an ambiguous top-k");
                    assert_eq!(&buf[..], &sorted[..k], "seed {seed}");
                }
                Scan::Ambiguous => {
                    assert!(!unique, "seed {seed}: fast path declined a unique top-k");
                    declined += 1;
                }
                Scan::Invalid => panic!("seed {seed}: finite row reported invalid"),
            }
        }
        assert!(declined > 0, "the tie cases should exercise the decline path");
    }

    #[test]
    fn masked_top_k_declines_when_too_few_survive() {
        let row = vec![5.0, 1.0, 4.0, 0.5, 3.0];
        let mut ov = Overlay::default();
        ov.reset(row.len());
        ov.prepare();
        let mut buf = Vec::new();
        assert_eq!(top_k_unique(&row, &ov, 2, Some(2.0), &mut buf), Scan::Done);
        assert_eq!(buf, vec![(5.0, 0), (4.0, 2)]);
        assert_eq!(top_k_unique(&row, &ov, 4, Some(2.0), &mut buf), Scan::Ambiguous);
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
                assert_eq!(top_k_unique(&row, &ov, 3, None, &mut buf), Scan::Invalid, "{bad} at {pos}");
            }
        }
    }
}
