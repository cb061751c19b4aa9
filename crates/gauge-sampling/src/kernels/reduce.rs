//! One-pass reductions over "row + overlay": greedy's first maximum, dist's maximum and weights.

use super::{any_bad, span_max, spans};
use crate::overlay::{Overlay, CHUNK};
use crate::simd::multiversion;

multiversion! {
/// llama.cpp greedy over the identity layout: index of the first maximum (strict `>`), starting
/// from index 0. `None` if the row holds NaN or +inf (pending transforms may create `+inf`, e.g. a
/// huge logit divided by a small temperature; that is a valid value, not an error). Dispatched
/// ([`crate::simd`]).
pub fn first_max(row: &[f32], ov: &Overlay) -> Option<usize> {
    let mut best_i = 0usize;
    let mut best = ov.get(row, 0);
    let mut bad = false;
    let plain = !ov.has_transforms();
    let mut buf = [0.0f32; CHUNK];
    for (start, span, edited) in spans(row, ov) {
        if plain && !edited {
            // a later span only wins with a strictly larger value, at its first occurrence
            let sm = span_max(span, &mut bad);
            if sm > best {
                best = sm;
                best_i = start + span.iter().position(|&x| x == sm).unwrap_or(0);
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
}
