//! Helpers shared by several samplers, with llama.cpp's exact arithmetic
//! (`softmax_impl`, `partial_sort_inplace`, `top_k_impl`, `temp_impl`).
//!
//! NOTE(skeleton): the sorts here are placeholders with std's sort; the exact libstdc++ ports live in
//! `sort.rs` and replace them.

use crate::candidates::{Candidates, TokenData};

/// Comparator of llama.cpp: descending by logit.
#[inline]
pub fn logit_greater(a: &TokenData, b: &TokenData) -> bool {
    a.logit > b.logit
}

/// Sort the top `npartial` entries descending, truncate to them, set `sorted`.
pub fn partial_sort_inplace(cur: &mut Candidates, npartial: usize) {
    let s = cur.as_mut_slice();
    s.sort_by(|a, b| b.logit.partial_cmp(&a.logit).unwrap_or(std::cmp::Ordering::Equal));
    cur.truncate(npartial);
    cur.sorted = true;
}

/// llama.cpp `softmax_impl`: optional full sort, then `p = expf(l - max) / sum` with an f32 sum in
/// array order.
pub fn softmax_impl(cur: &mut Candidates, do_sort: bool) {
    assert!(!cur.is_empty());
    if do_sort && !cur.sorted {
        let n = cur.len();
        partial_sort_inplace(cur, n);
    }
    let sorted = cur.sorted;
    let s = cur.as_mut_slice();
    let max_l = if sorted { s[0].logit } else { s.iter().fold(s[0].logit, |m, t| if t.logit > m { t.logit } else { m }) };
    let mut cum = 0.0f32;
    for t in s.iter_mut() {
        let p = (t.logit - max_l).exp();
        t.p = p;
        cum += p;
    }
    for t in s.iter_mut() {
        t.p /= cum;
    }
}

/// llama.cpp `top_k_impl`.
pub fn top_k_impl(cur: &mut Candidates, k: i32) {
    if k <= 0 {
        return;
    }
    let k = (k as usize).min(cur.len());
    if !cur.sorted {
        partial_sort_inplace(cur, k);
    }
    cur.truncate(k);
}

/// llama.cpp `temp_impl`: `t <= 0` keeps the first maximum and masks the rest to -inf; otherwise
/// divides (not multiplies by 1/t).
pub fn temp_impl(cur: &mut Candidates, t: f32) {
    if cur.is_empty() {
        return;
    }
    let s = cur.as_mut_slice();
    if t <= 0.0 {
        let mut max_i = 0;
        let mut max_l = s[0].logit;
        for (i, c) in s.iter().enumerate().skip(1) {
            if c.logit > max_l {
                max_l = c.logit;
                max_i = i;
            }
        }
        for (i, c) in s.iter_mut().enumerate() {
            if i != max_i {
                c.logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    for c in s.iter_mut() {
        c.logit /= t;
    }
}
