//! Exact ports of the sorts llama.cpp's samplers run: GCC 12 libstdc++'s `std::sort` and
//! `std::partial_sort`, and llama.cpp's 128-bucket partial sort.
//!
//! # Why not `slice::sort_by`
//!
//! The order of the candidate array is observable. `dist` walks the array in order and picks the
//! first index whose running sum reaches `sum * rnd`, so two arrays holding the same distribution in
//! a different order give different tokens for the same seed (docs/SPEC.md §6.2, §6.3). Candidates with equal
//! logits are common (quantised models, masked `-inf` tails, typical's tied scores), and neither
//! `std::sort` nor `std::partial_sort` is stable, so a seeded run only reproduces llama.cpp's tokens
//! if the ties come out in libstdc++'s order. A stable sort gets `typical({0.4,0.2,0.2,0.2}, 0.5)`
//! wrong (`[1,2,3]` instead of `[1,3,2]`).
//!
//! These functions therefore mirror libstdc++ 12 step by step (same pivots, same comparisons in the
//! same order, same element moves), generic over a strict `less(a, b)` predicate and `Copy` elements
//! (a libstdc++ "move" is a copy here). They are written from the algorithm, not pasted.
//!
//! # Safety against bad comparators
//!
//! libstdc++'s "unguarded" loops rely on a sentinel that exists only for a strict weak order; with
//! an inconsistent predicate (NaN keys) C++ may read past the range. The ports add explicit range
//! guards to those loops. For a strict weak order the guards never fire, so the output is identical;
//! for anything else the functions still return a permutation of the input and never panic.
//!
//! # Allocation
//!
//! `sort_by` and `partial_sort_by` work in place. [`BucketSorter`] owns its output buffer, so a
//! caller that keeps one allocates only when the vocabulary grows.

use crate::candidates::TokenData;

/// libstdc++'s `_S_threshold`: introsort leaves runs of at most this many elements to the final
/// insertion sort.
const S_THRESHOLD: usize = 16;

/// `std::sort(v.begin(), v.end(), less)` as libstdc++ 12 implements it (introsort).
pub fn sort_by<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], mut less: F) {
    let n = v.len();
    if n == 0 {
        return;
    }
    // std::__lg(n) * 2: twice floor(log2 n)
    let depth = (usize::BITS - 1 - n.leading_zeros()) as usize * 2;
    introsort_loop(v, depth, &mut less);
    final_insertion_sort(v, &mut less);
}

/// `std::partial_sort(v.begin(), v.begin() + middle, v.end(), less)`: heap-select then sort_heap.
///
/// After the call `v[..middle]` holds the `middle` smallest elements (by `less`) in order; the rest
/// is in heap-select order. `middle` is clamped to `v.len()`.
pub fn partial_sort_by<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], middle: usize, mut less: F) {
    let middle = middle.min(v.len());
    partial_sort_impl(v, middle, &mut less);
}

fn partial_sort_impl<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], middle: usize, less: &mut F) {
    heap_select(v, middle, less);
    sort_heap(v, middle, less);
}

fn introsort_loop<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], mut depth: usize, less: &mut F) {
    let mut last = v.len();
    while last > S_THRESHOLD {
        if depth == 0 {
            // heapsort of the whole remaining range
            partial_sort_impl(&mut v[..last], last, less);
            return;
        }
        depth -= 1;
        let cut = unguarded_partition_pivot(&mut v[..last], less);
        introsort_loop(&mut v[cut..last], depth, less);
        last = cut;
    }
}

/// Median of `v[1]`, `v[mid]`, `v[n-1]` moved to `v[0]`, then a Hoare partition of `v[1..]` around it.
fn unguarded_partition_pivot<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    less: &mut F,
) -> usize {
    let n = v.len();
    let mid = n / 2;
    move_median_to_first(v, 0, 1, mid, n - 1, less);
    unguarded_partition(v, 1, n, 0, less)
}

fn move_median_to_first<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    less: &mut F,
) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn unguarded_partition<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut first: usize,
    mut last: usize,
    pivot: usize,
    less: &mut F,
) -> usize {
    let end = last;
    loop {
        while first < end && less(&v[first], &v[pivot]) {
            first += 1;
        }
        last -= 1;
        while last > pivot && less(&v[pivot], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], less: &mut F) {
    if v.len() > S_THRESHOLD {
        insertion_sort(&mut v[..S_THRESHOLD], less);
        for i in S_THRESHOLD..v.len() {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, less);
    }
}

fn insertion_sort<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], less: &mut F) {
    for i in 1..v.len() {
        if less(&v[i], &v[0]) {
            // move_backward: the new minimum goes to the front, [0, i) shifts right by one
            v[..=i].rotate_right(1);
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut last: usize,
    less: &mut F,
) {
    let val = v[last];
    while last > 0 && less(&val, &v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = val;
}

/// `__adjust_heap(first, hole, len, value)`: sift the hole down to a leaf, then push `value` up.
/// `len == 0` is legal (libstdc++ reaches it from `partial_sort` with an empty middle) and just
/// stores `value` at `hole`.
pub(crate) fn adjust_heap<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut hole: usize,
    len: usize,
    value: T,
    less: &mut F,
) {
    let top = hole;
    let mut second = hole;
    // (len - 1) / 2 in signed arithmetic: 0 for len == 0
    let inner = len.saturating_sub(1) / 2;
    while second < inner {
        second = 2 * (second + 1);
        if less(&v[second], &v[second - 1]) {
            second -= 1;
        }
        v[hole] = v[second];
        hole = second;
    }
    if len & 1 == 0 && len >= 2 && second == (len - 2) / 2 {
        second = 2 * (second + 1);
        v[hole] = v[second - 1];
        hole = second - 1;
    }
    push_heap(v, hole, top, value, less);
}

fn push_heap<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut hole: usize,
    top: usize,
    value: T,
    less: &mut F,
) {
    while hole > top {
        let parent = (hole - 1) / 2;
        if !less(&v[parent], &value) {
            break;
        }
        v[hole] = v[parent];
        hole = parent;
    }
    v[hole] = value;
}

/// `__pop_heap(first, first + len, result)`: the heap top goes to `result`, `v[result]` re-enters
/// the heap `v[..len]`.
fn pop_heap<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    len: usize,
    result: usize,
    less: &mut F,
) {
    let value = v[result];
    v[result] = v[0];
    adjust_heap(v, 0, len, value, less);
}

pub(crate) fn make_heap<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], len: usize, less: &mut F) {
    if len < 2 {
        return;
    }
    let mut parent = (len - 2) / 2;
    loop {
        let value = v[parent];
        adjust_heap(v, parent, len, value, less);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

fn heap_select<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], middle: usize, less: &mut F) {
    make_heap(v, middle, less);
    for i in middle..v.len() {
        // with middle == 0 libstdc++ still compares against v[0] (which is outside the heap); kept
        if less(&v[i], &v[0]) {
            pop_heap(v, middle, i, less);
        }
    }
}

pub(crate) fn sort_heap<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut last: usize,
    less: &mut F,
) {
    while last > 1 {
        last -= 1;
        pop_heap(v, last, last, less);
    }
}

/// Number of buckets of llama.cpp's histogram partial sort.
pub const N_BUCKETS: usize = 128;

/// The bucket of a logit in llama.cpp's partial sort: `int(6.4f * logit + 64.0f)` clamped to
/// `[0, 127]`.
///
/// The C++ `int()` conversion of a NaN or an out-of-range value gives `INT_MIN` on x86 (`cvttss2si`),
/// which clamps to bucket 0. So `+inf` (and anything above ~3.4e8) lands in the *lowest* bucket
/// (docs/SPEC.md §6.15), unlike Rust's saturating `as i32`, which would put it in bucket 127.
#[inline]
pub fn bucket_of(logit: f32) -> usize {
    const SCALE: f32 = 128.0 / 20.0; // nbuckets / (high - low) = 6.4f
    const INTER: f32 = 10.0 * SCALE; // -low * scale = 64.0f
    let y = SCALE * logit + INTER;
    // the range where cvttss2si is exact; everything else (NaN included) is INT_MIN -> bucket 0
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&y) {
        return 0;
    }
    (y as i32).clamp(0, N_BUCKETS as i32 - 1) as usize
}

#[inline]
fn logit_greater(a: &TokenData, b: &TokenData) -> bool {
    a.logit > b.logit
}

/// llama.cpp's `llama_token_data_array_partial_sort` with a reusable output buffer.
///
/// Histogram the logits into 128 buckets over [-10, 10), find the highest buckets that hold at least
/// `npartial` candidates, copy those buckets out (descending, input order within a bucket), then
/// `std::sort` every bucket above the threshold one and `std::partial_sort` the threshold bucket for
/// the remaining places. O(n) for the histogram plus a sort of roughly `npartial` elements, versus
/// O(n log k) for a heap over the whole array.
#[derive(Clone, Debug, Default)]
pub struct BucketSorter {
    out: Vec<TokenData>,
}

impl BucketSorter {
    /// An empty sorter (its buffer grows on first use).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sort the top `npartial` of `src` (clamped to `src.len()`) into the buffer and return the
    /// buffer: its first `npartial` entries are sorted descending; it may hold more (the unsorted
    /// rest of the threshold bucket), as llama.cpp's `res` does.
    pub fn sort(&mut self, src: &[TokenData], npartial: usize) -> &[TokenData] {
        let npartial = npartial.min(src.len());
        let mut histo = [0usize; N_BUCKETS];
        for t in src {
            histo[bucket_of(t.logit)] += 1;
        }
        // walk down from the top bucket until the count reaches npartial
        let mut nhave = 0;
        let mut ib = N_BUCKETS - 1;
        loop {
            nhave += histo[ib];
            if nhave >= npartial || ib == 0 {
                break;
            }
            ib -= 1;
        }
        // write cursor of each kept bucket, buckets in descending order
        let mut cursor = [0usize; N_BUCKETS];
        let mut off = 0;
        for j in (ib..N_BUCKETS).rev() {
            cursor[j] = off;
            off += histo[j];
        }
        self.out.clear();
        self.out.resize(nhave, TokenData::default());
        for t in src {
            let j = bucket_of(t.logit);
            if j >= ib {
                self.out[cursor[j]] = *t;
                cursor[j] += 1;
            }
        }
        let mut ptr = 0;
        let mut ndone = 0;
        for j in (ib + 1..N_BUCKETS).rev() {
            sort_by(&mut self.out[ptr..ptr + histo[j]], logit_greater);
            ptr += histo[j];
            ndone += histo[j];
        }
        partial_sort_by(
            &mut self.out[ptr..ptr + histo[ib]],
            npartial - ndone,
            logit_greater,
        );
        &self.out
    }

    /// The buffer as left by the last [`BucketSorter::sort`].
    pub fn buf(&self) -> &[TokenData] {
        &self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_of_matches_the_x86_conversion() {
        assert_eq!(bucket_of(0.0), 64);
        assert_eq!(bucket_of(-10.0), 0);
        assert_eq!(bucket_of(9.99), 127);
        assert_eq!(bucket_of(100.0), 127);
        assert_eq!(bucket_of(-100.0), 0);
        assert_eq!(bucket_of(-0.1), 63); // 63.36 truncates toward zero
        assert_eq!(
            bucket_of(f32::INFINITY),
            0,
            "+inf is INT_MIN in C++, so bucket 0"
        );
        assert_eq!(bucket_of(f32::NEG_INFINITY), 0);
        assert_eq!(bucket_of(f32::NAN), 0);
        assert_eq!(bucket_of(1e9), 0, "out of int range is INT_MIN too");
    }

    #[test]
    fn sort_sorts_small_and_large() {
        for n in [0usize, 1, 2, 5, 16, 17, 33, 100, 1000] {
            let mut v: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % 97).collect();
            let mut want = v.clone();
            want.sort();
            sort_by(&mut v, |a, b| a < b);
            assert_eq!(v, want, "n={n}");
        }
    }

    #[test]
    fn partial_sort_puts_the_smallest_first_in_order() {
        let mut v: Vec<u32> = (0..200u32).map(|i| (i * 7919) % 211).collect();
        let mut want = v.clone();
        want.sort();
        partial_sort_by(&mut v, 10, |a, b| a < b);
        assert_eq!(&v[..10], &want[..10]);
    }

    #[test]
    fn partial_sort_with_empty_middle_swaps_like_libstdcxx() {
        // libstdc++ compares against *first even when the heap is empty and swaps in any smaller
        // element: [3, 1, 2] -> 1 < 3 swap -> [1, 3, 2]; 2 < 1 no.
        let mut v = [3u32, 1, 2];
        partial_sort_by(&mut v, 0, |a, b| a < b);
        assert_eq!(v, [1, 3, 2]);
    }

    #[test]
    fn bucket_sort_top_is_sorted_and_drops_plus_inf_for_large_k() {
        let mut src: Vec<TokenData> = (0..300)
            .map(|i| TokenData {
                id: i,
                logit: ((i * 37) % 101) as f32 / 10.0 - 5.0,
                p: 0.0,
            })
            .collect();
        src[7].logit = f32::INFINITY;
        let mut b = BucketSorter::new();
        let out = b.sort(&src, 200).to_vec();
        assert!(out.len() >= 200);
        assert!(out[..200].windows(2).all(|w| w[0].logit >= w[1].logit));
        assert!(
            !out[..200].iter().any(|t| t.id == 7),
            "+inf sits in bucket 0, below the cut"
        );
    }
}
