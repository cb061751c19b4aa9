//! The logit row before the first dense stage: the caller's row plus a few edited entries and at
//! most three pending whole-row transforms.
//!
//! llama.cpp fills a `(id, logit, p)` array for the whole vocabulary before the first sampler runs:
//! at 152k tokens that fill alone costs more than the rest of the default chain. But the stages that
//! usually come first (logit-bias, penalties, DRY) touch only the tokens in a bias list or a history,
//! and top-k or greedy only need one pass over the row. So the chain keeps the row untouched, records
//! those stages' effects as sparse edits here, and lets the first dense stage read "row + edits"
//! directly. The result is bit-identical to filling first (each edit computes the same f32 from the
//! same input), and the slow path (`materialize`) is always available.
//!
//! Three kinds of dense stage are cheap to describe without touching the row, so they are recorded
//! as pending [`Transform`]s instead of being applied: plain temperature (`x / t`, per element,
//! the same f32 division), the normalized penalty's log-softmax (`(x - max) - lse`, per element,
//! once the stage has summed the row) and threshold masks. Readers apply them in the order they were recorded.
//! An edit remembers how many transforms existed when it was written: a stage after a transform
//! writes the final value, so later reads apply only the transforms recorded after it. This keeps
//! `get`, the scanning kernels and `materialize` exactly equal to running the stages one by one on
//! a filled array.
//!
//! # Lazy masks
//!
//! A mask whose exact cut is expensive (top-n-sigma's: two latency-bound f32 accumulations in
//! array order) may be recorded as [`Transform::LazyMask`]: a rigorous interval `[lo, hi]` around
//! the exact cut, and the stage's own function ([`LazyCut`]) to compute the cut should anyone need
//! it. Entries below `lo` are masked, entries at or above `hi` are kept, and only a reader that
//! meets an entry inside the band asks for the exact cut ([`Overlay::lazy_cut`]), which is
//! computed once per step, exactly as the stage computes it on a filled array, from a snapshot of
//! the values the stage saw ([`StageValues`]). The overlay knows nothing of how the cut is defined.

use std::sync::OnceLock;

use crate::candidates::{Candidates, TokenId};
use crate::samplers::penalties::shifted_log_prob;

mod slots;

/// A whole-row operation recorded instead of applied (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Transform {
    /// `x / t` with `t > 0`: llama.cpp's `temp_impl` (a division, not a multiplication by `1/t`).
    Div(f32),
    /// A mask whose `cut` is not yet computed but known to lie in `[lo, hi]` (recorded with
    /// [`Overlay::push_lazy_mask`], which keeps the function that computes the cut).
    LazyMask { lo: f32, hi: f32 },
    /// The normalized penalty's log-softmax, `(x - max) - lse` with the row's max and
    /// log-sum-exp ([`shifted_log_prob`]): per element, so it need not be written out.
    LogProb { max: f32, lse: f64 },
}

/// The exact cut of a lazy mask, computed on first need by the stage's own function from the
/// values it saw: `f(values, arg)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LazyCut {
    pub f: fn(&StageValues<'_>, f32) -> f32,
    pub arg: f32,
}

/// The values a lazy mask's stage saw, in id order: the row, the edits made before the stage and
/// the transforms recorded before it.
#[derive(Debug)]
pub(crate) struct StageValues<'a> {
    ov: &'a Overlay,
    row: &'a [f32],
    stage: u8,
}

impl StageValues<'_> {
    /// The values, in id order (cheap to call again: nothing is stored).
    pub fn iter(&self) -> impl Iterator<Item = f32> + '_ {
        let (ov, row, stage) = (self.ov, self.row, self.stage);
        let snap = &ov.mask_snap;
        let mut next = 0usize;
        row.iter().enumerate().map(move |(i, &x)| {
            let (v, k) = match snap.get(next) {
                Some(&(id, v, k)) if id as usize == i => {
                    next += 1;
                    (v, k)
                }
                _ => (x, 0),
            };
            ov.transform_range(k, stage, v, row)
        })
    }
}

/// How many transforms may be pending at once. Three covers the normalized penalty's log-softmax,
/// then `temp` before mirostat or a mask before top-k; a stage that would need a fourth simply
/// runs on the filled array.
pub(crate) const MAX_TRANSFORMS: usize = 3;

/// On the bits: for finite values `|x|`'s bit pattern orders like `|x|`, and non-finite ones
/// (>= the exponent-all-ones pattern) count as 0.
#[inline(always)]
fn abs_bits(x: f32) -> u32 {
    const EXP_ALL_ONES: u32 = 0x7f80_0000;
    let b = x.to_bits() & 0x7fff_ffff;
    if b < EXP_ALL_ONES {
        b
    } else {
        0
    }
}

crate::simd::multiversion! {
/// The largest [`abs_bits`] of a row: an integer max, which vectorises from SSE4.1 on (baseline
/// SSE2 has no unsigned 32-bit max, so this is dispatched: it runs on every temperature step).
fn max_abs_bits(row: &[f32]) -> u32 {
    row.iter().fold(0u32, |m, &x| m.max(abs_bits(x)))
}
}

crate::simd::multiversion! {
/// Whether `words` set at least `min` bits, counted 64 words at a time until they do.
fn sets_at_least(words: &[u32], min: usize) -> bool {
    let mut n = 0usize;
    for chunk in words.chunks(64) {
        if n >= min {
            return true;
        }
        n += chunk.iter().map(|w| w.count_ones() as usize).sum::<usize>();
    }
    n >= min
}
}

/// Reusable storage for sparse edits over a row of `n` logits. Lookups are O(1) through a bit per
/// id and a table of the edited ids' slots, and clearing between steps is O(edits), not O(n).
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    /// One bit per id, set when it has an edit this step: the readers test ids in bulk (every hit
    /// in a span that holds an edit), and the bits of 151,936 ids (19 KB) stay in L1 where a
    /// table with an entry per id (600 KB) would not.
    edited: Vec<u64>,
    /// One bit per word of `edited` that has a bit set: `prepare` walks these to list the edited
    /// chunks in order instead of sorting them.
    edited_words: Vec<u64>,
    /// Per id with its bit set, the index of its edit in `edits`.
    slots: slots::Slots,
    /// The row length the tables are sized for.
    n: usize,
    /// `(id, value, number of transforms already applied to value)`.
    edits: Vec<(TokenId, f32, u8)>,
    /// Sorted, deduplicated chunk indices (`id / CHUNK`) that hold an edit.
    chunks: Vec<u32>,
    chunks_dirty: bool,
    xf: [Option<Transform>; MAX_TRANSFORMS],
    n_xf: u8,
    /// The edits as the pending `LazyMask` saw them (sorted by id), so later edits cannot change
    /// what its exact cut is computed from.
    mask_snap: Vec<(TokenId, f32, u8)>,
    /// How the pending lazy mask computes its exact cut.
    lazy: Option<LazyCut>,
    /// The lazy mask's exact cut, computed on first need.
    lazy_cut: OnceLock<f32>,
    /// The ids that remain candidates when `kept` (bit `i % 32` of word `i / 32`): a grammar's
    /// allowed set, recorded instead of filling the array of allowed entries
    /// ([`Overlay::keep_only`]).
    keep: Vec<u32>,
    kept: bool,
}

/// Width of the blocks the scanning kernels test at once.
pub(crate) const CHUNK: usize = 16;

impl Overlay {
    /// Forget all edits and transforms and size the tables for a row of `n` logits.
    pub fn reset(&mut self, n: usize) {
        self.slots.clear();
        if self.n != n {
            self.n = n;
            self.edited = vec![0; n.div_ceil(64)];
            self.edited_words = vec![0; n.div_ceil(64 * 64)];
        } else {
            for &(id, _, _) in &self.edits {
                self.edited[id as usize / 64] = 0;
                self.edited_words[id as usize / (64 * 64)] = 0;
            }
        }
        self.edits.clear();
        self.chunks.clear();
        self.chunks_dirty = false;
        self.xf = [None; MAX_TRANSFORMS];
        self.n_xf = 0;
        self.mask_snap.clear();
        self.lazy = None;
        self.lazy_cut = OnceLock::new();
        self.kept = false;
    }

    /// Record that only the ids whose bit is set in `words` remain candidates (a grammar's allowed
    /// set; bit `i % 32` of word `i / 32`): the filled array would hold just those, in id order.
    /// Removed ids read as `-inf` through `get` and the block readers, which is what a reader
    /// that handles the mask ([`crate::Sampler::reads_keep_mask`]) needs; `materialize` drops them.
    /// Ids past the end of `words` are removed (a tokenizer shorter than the padded row), as
    /// `Candidates::fill_where` drops them. Only as the first record of a step (`false`
    /// otherwise).
    pub fn keep_only(&mut self, words: &[u32]) -> bool {
        if !self.is_pristine() {
            return false;
        }
        let len = self.n.div_ceil(32);
        self.keep.clear();
        self.keep.extend_from_slice(&words[..words.len().min(len)]);
        self.keep.resize(len, 0);
        self.kept = true;
        true
    }

    /// [`Overlay::keep_only`] for a set of at least `min` ids; a smaller one is not recorded
    /// (`false`). The bits are counted only until there are `min` (inside a grammar's free
    /// string, the first few words) and with the CPU's `popcnt`: a caller that filled a small
    /// set itself spent more on counting every word in software than on the fill.
    pub fn keep_only_at_least(&mut self, words: &[u32], min: usize) -> bool {
        sets_at_least(words, min) && self.keep_only(words)
    }

    /// The recorded allowed set, if any ([`Overlay::keep_only`]).
    #[inline]
    pub(crate) fn keep_mask(&self) -> Option<&[u32]> {
        self.kept.then_some(&self.keep[..])
    }

    #[inline(always)]
    fn removed(&self, id: usize) -> bool {
        self.kept && self.keep[id / 32] >> (id % 32) & 1 == 0
    }

    #[inline]
    fn slot_of(&self, id: usize) -> Option<usize> {
        self.is_edited(id)
            .then(|| self.slots.get(id as u32) as usize)
    }

    /// One transform applied to one value (`row` is needed only to resolve a lazy mask).
    #[inline]
    fn apply_one(&self, t: Transform, x: f32, row: &[f32]) -> f32 {
        match t {
            Transform::Div(d) => x / d,
            Transform::LogProb { max, lse } => shifted_log_prob(x, max, lse),
            Transform::LazyMask { lo, hi, .. } => {
                if x >= hi || (x >= lo && x >= self.lazy_cut(row)) {
                    x
                } else {
                    f32::NEG_INFINITY
                }
            }
        }
    }

    /// Apply the transforms with index in `from..upto`.
    #[inline]
    fn transform_range(&self, from: u8, upto: u8, mut x: f32, row: &[f32]) -> f32 {
        let upto = upto.min(self.n_xf);
        if from < upto {
            for t in self.xf[from as usize..upto as usize].iter().flatten() {
                x = self.apply_one(*t, x, row);
            }
        }
        x
    }

    /// The value of `id` after the edits and the first `upto` transforms (always inlined: the
    /// edited blocks of the row kernels read every entry through it).
    #[inline(always)]
    fn value_upto(&self, row: &[f32], id: usize, upto: u8) -> f32 {
        if self.removed(id) {
            return f32::NEG_INFINITY;
        }
        match self.slot_of(id) {
            Some(s) => {
                let (_, v, k) = self.edits[s];
                self.transform_range(k, upto, v, row)
            }
            None => self.transform_range(0, upto, row[id], row),
        }
    }

    /// Whether `id` has an edit.
    #[inline(always)]
    pub(crate) fn is_edited(&self, id: usize) -> bool {
        self.edited[id / 64] >> (id % 64) & 1 != 0
    }

    /// The edited entries as `(id, value)`, the value with the first `upto` transforms applied
    /// (what [`Overlay::value_at`] gives for each), in the order they were first written.
    pub(crate) fn edited_values<'a>(
        &'a self,
        row: &'a [f32],
        upto: usize,
    ) -> impl Iterator<Item = (usize, f32)> + 'a {
        let upto = upto.min(self.n_xf as usize) as u8;
        self.edits.iter().map(move |&(id, v, k)| {
            let id = id as usize;
            let v = if self.removed(id) {
                f32::NEG_INFINITY
            } else {
                self.transform_range(k, upto, v, row)
            };
            (id, v)
        })
    }

    /// Whether the `CHUNK` ids from `start` (a multiple of `CHUNK`) hold an edit.
    #[inline]
    pub(crate) fn block_has_edit(&self, start: usize) -> bool {
        self.edited[start / 64] >> (start % 64) & ((1 << CHUNK) - 1) != 0
    }

    /// The edited ids, in the order they were first written.
    pub(crate) fn edited_ids(&self) -> impl Iterator<Item = usize> + '_ {
        self.edits.iter().map(|&(id, _, _)| id as usize)
    }

    /// What [`Overlay::value_at`] would give for `id` without its edit: the raw entry with the
    /// first `upto` transforms applied (`-inf` when the allowed set removes it).
    #[inline]
    pub(crate) fn unedited_value(&self, row: &[f32], id: usize, upto: usize) -> f32 {
        if self.removed(id) {
            return f32::NEG_INFINITY;
        }
        self.map_upto(row[id], upto, row)
    }

    /// The value of `id` with only the first `upto` transforms applied.
    #[inline]
    pub(crate) fn value_at(&self, row: &[f32], id: usize, upto: usize) -> f32 {
        self.value_upto(row, id, upto.min(self.n_xf as usize) as u8)
    }

    /// The current logit of `id`: the edit if there is one, else the row's value, with the
    /// pending transforms applied.
    #[inline]
    pub fn get(&self, row: &[f32], id: usize) -> f32 {
        self.value_upto(row, id, self.n_xf)
    }

    /// Set the current logit of `id` (ids must be `< n`; callers validated them).
    #[inline]
    pub fn set(&mut self, id: usize, v: f32) {
        let k = self.n_xf;
        match self.slot_of(id) {
            Some(s) => {
                self.edits[s].1 = v;
                self.edits[s].2 = k;
            }
            None => {
                self.edited[id / 64] |= 1 << (id % 64);
                self.edited_words[id / (64 * 64)] |= 1 << (id / 64 % 64);
                self.slots.insert(id as u32, self.edits.len() as u32);
                self.edits.push((id as TokenId, v, k));
                self.chunks_dirty = true;
            }
        }
    }

    /// Set `id` to `f` of what it reads now, unless that changes no bit: an edit that changes
    /// nothing only costs the readers a span with an edit in it (a grammar's removed ids read
    /// `-inf` and stay so under the penalties and DRY).
    #[inline]
    pub(crate) fn update(&mut self, row: &[f32], id: usize, f: impl FnOnce(f32) -> f32) {
        let now = self.get(row, id);
        let v = f(now);
        if v.to_bits() != now.to_bits() {
            self.set(id, v);
        }
    }

    /// Record a whole-row transform. `false` (nothing recorded) when `MAX_TRANSFORMS` are pending,
    /// or for a second lazy mask: the caller then declines its sparse form.
    pub(crate) fn push_transform(&mut self, t: Transform) -> bool {
        if (self.n_xf as usize) >= MAX_TRANSFORMS {
            return false;
        }
        if let Transform::LazyMask { .. } = t {
            if self
                .transforms()
                .any(|t| matches!(t, Transform::LazyMask { .. }))
            {
                return false;
            }
            self.mask_snap.clear();
            self.mask_snap.extend_from_slice(&self.edits);
            self.mask_snap.sort_unstable_by_key(|e| e.0);
        }
        self.xf[self.n_xf as usize] = Some(t);
        self.n_xf += 1;
        true
    }

    /// Record a lazy mask with band `[lo, hi]` whose exact cut `cut` computes; `false` as
    /// [`Overlay::push_transform`].
    pub(crate) fn push_lazy_mask(&mut self, lo: f32, hi: f32, cut: LazyCut) -> bool {
        let ok = self.push_transform(Transform::LazyMask { lo, hi });
        if ok {
            self.lazy = Some(cut);
        }
        ok
    }

    /// The pending transforms, in the order they apply.
    pub(crate) fn transforms(&self) -> impl Iterator<Item = Transform> + '_ {
        self.xf[..self.n_xf as usize].iter().flatten().copied()
    }

    /// How many transforms are pending.
    #[inline]
    pub(crate) fn n_transforms(&self) -> usize {
        self.n_xf as usize
    }

    /// No edit and no pending transform: every current value is the row's own.
    #[inline]
    pub fn is_pristine(&self) -> bool {
        self.edits.is_empty() && self.n_xf == 0 && !self.kept
    }

    /// Whether any entry has been edited.
    #[inline]
    pub(crate) fn has_edits(&self) -> bool {
        !self.edits.is_empty()
    }

    /// Whether any transform is pending (readers of raw row blocks must then transform them).
    #[inline]
    pub(crate) fn has_transforms(&self) -> bool {
        self.n_xf > 0 || self.kept
    }

    /// An upper bound on `|x|` over the finite values of the row as it stands (raw entries, edits,
    /// pending divisions), `+inf` when no finite bound holds. Temperature asks this before it
    /// records a division, which must not overflow (see `ops::temp_overflows`).
    pub(crate) fn max_abs_bound(&self, row: &[f32]) -> f32 {
        let bits = max_abs_bits(row);
        let bits = self.edits.iter().fold(bits, |m, e| m.max(abs_bits(e.1)));
        let mut m = f32::from_bits(bits);
        for t in self.transforms() {
            match t {
                Transform::Div(d) => m = (m / d).max(m),
                // |(x - max) - lse| <= |x| + |max| + lse (lse >= 0), rounded up generously.
                Transform::LogProb { max, lse } => {
                    m = m.max((m + max.abs() + lse as f32) * (1.0 + f32::EPSILON * 4.0))
                }
                Transform::LazyMask { .. } => {}
            }
        }
        m
    }

    /// Whether the first `upto` transforms are all monotone maps of one value (divisions and the
    /// log-softmax; not a mask). Then an unedited span's largest value is the map of its largest
    /// raw entry, and a bar on values has a raw bar ([`Overlay::raw_bar`]), so a kernel can read
    /// raw spans at raw speed and map only what it keeps. An allowed set ([`Overlay::keep_only`])
    /// is not a transform: both maps send `-inf` to `-inf`, so the value of a removed id is `-inf`
    /// with or without them, and a kernel that applies the set to raw entries itself
    /// ([`Overlay::keep_mask`]) still reads raw.
    pub(crate) fn monotone_upto(&self, upto: usize) -> bool {
        self.xf[..upto.min(self.n_xf as usize)]
            .iter()
            .flatten()
            .all(|t| matches!(t, Transform::Div(_) | Transform::LogProb { .. }))
    }

    /// An unedited raw value with the first `upto` transforms applied (what `value_at` gives for
    /// an id without an edit).
    #[inline(always)]
    pub(crate) fn map_upto(&self, x: f32, upto: usize, row: &[f32]) -> f32 {
        self.transform_range(0, upto.min(u8::MAX as usize) as u8, x, row)
    }

    /// A raw bar `r` for the value bar `t` under the first `upto` transforms, which must be
    /// monotone ([`Overlay::monotone_upto`]): every raw `x` whose value reaches `t` has `x >= r`.
    /// Found by inverting the maps approximately, then stepping down until the map of the bar is
    /// below `t` (each map is non-decreasing, so everything at or below it is too); `-inf` (read
    /// everything) when no such point turns up. Callers still test each hit's value against `t`.
    pub(crate) fn raw_bar(&self, t: f32, upto: usize, row: &[f32]) -> f32 {
        if !(t > f32::NEG_INFINITY && t.is_finite()) {
            return f32::NEG_INFINITY;
        }
        let xf = &self.xf[..upto.min(self.n_xf as usize)];
        let mut y = f64::from(t);
        for tr in xf.iter().rev().flatten() {
            y = match *tr {
                Transform::Div(d) => y * f64::from(d),
                Transform::LogProb { max, lse } => y + lse + f64::from(max),
                Transform::LazyMask { .. } => return f32::NEG_INFINITY,
            };
        }
        let mut below = y as f32;
        if !below.is_finite() {
            return f32::NEG_INFINITY;
        }
        let mut step = below.abs().max(f32::MIN_POSITIVE) * f32::EPSILON * 4.0;
        for _ in 0..64 {
            if self.map_upto(below, upto, row) < t {
                return below.next_up();
            }
            below -= step;
            step *= 2.0;
        }
        f32::NEG_INFINITY
    }

    /// The pending divisor when the only transform is a temperature division (mirostat's fast path
    /// divides as it reads).
    pub(crate) fn only_div(&self) -> Option<f32> {
        match (self.n_xf, self.xf[0]) {
            (1, Some(Transform::Div(t))) if !self.kept => Some(t),
            _ => None,
        }
    }

    /// `(lo, hi)` of a lazy mask when it is the last pending transform and no edit was written
    /// after it: then every entry's value before the mask is at hand and the mask is the only
    /// thing between it and the current value (an edit after the mask is final and must not be
    /// masked again).
    pub(crate) fn last_lazy_band(&self) -> Option<(f32, f32)> {
        let last = self.n_xf.checked_sub(1)?;
        if self.edits.iter().any(|e| e.2 > last) {
            return None;
        }
        match self.xf[last as usize] {
            Some(Transform::LazyMask { lo, hi, .. }) => Some((lo, hi)),
            _ => None,
        }
    }

    /// The exact cut of the pending lazy mask (`-inf`, masking nothing, if there is none),
    /// computed on first use by its stage's function over the values the stage saw.
    pub(crate) fn lazy_cut(&self, row: &[f32]) -> f32 {
        *self.lazy_cut.get_or_init(|| {
            let stage = self
                .transforms()
                .position(|t| matches!(t, Transform::LazyMask { .. }));
            let (Some(stage), Some(cut)) = (stage, self.lazy) else {
                return f32::NEG_INFINITY;
            };
            let stage = stage as u8;
            let values = StageValues {
                ov: self,
                row,
                stage,
            };
            (cut.f)(&values, cut.arg)
        })
    }

    /// Bring the sorted list of edited chunks up to date (call before scanning).
    pub(crate) fn prepare(&mut self) {
        if self.chunks_dirty {
            self.chunks.clear();
            for (sw, &summary) in self.edited_words.iter().enumerate() {
                let mut words = summary;
                while words != 0 {
                    let w = sw * 64 + words.trailing_zeros() as usize;
                    words &= words - 1;
                    let mut bits = self.edited[w];
                    while bits != 0 {
                        let chunk = ((w * 64 + bits.trailing_zeros() as usize) / CHUNK) as u32;
                        // the rest of this chunk's bits: one entry per chunk
                        bits &= !(((1u64 << CHUNK) - 1) << (chunk as usize * CHUNK % 64));
                        self.chunks.push(chunk);
                    }
                }
            }
            self.chunks_dirty = false;
        }
    }

    /// Chunk indices holding edits, sorted (valid after `prepare`).
    pub(crate) fn edited_chunks(&self) -> &[u32] {
        debug_assert!(!self.chunks_dirty, "Overlay::prepare not called");
        &self.chunks
    }

    /// The current values of the row block starting at `start` (`block` is `row[start..]`, at most
    /// `CHUNK` long): `block` itself when it holds no edit and no transform is pending, else the
    /// values written into `buf`.
    #[inline]
    pub(crate) fn current_block<'a>(
        &self,
        row: &[f32],
        start: usize,
        block: &'a [f32],
        edited: bool,
        buf: &'a mut [f32; CHUNK],
    ) -> &'a [f32] {
        self.block_upto(row, start, block, edited, self.n_xf as usize, buf)
    }

    /// Like [`Overlay::current_block`], with only the first `upto` transforms applied (a kernel
    /// that handles the last transform itself reads the values before it).
    #[inline]
    pub(crate) fn block_upto<'a>(
        &self,
        row: &[f32],
        start: usize,
        block: &'a [f32],
        edited: bool,
        upto: usize,
        buf: &'a mut [f32; CHUNK],
    ) -> &'a [f32] {
        let n = block.len();
        let upto = upto.min(self.n_xf as usize) as u8;
        if edited {
            for (j, b) in buf[..n].iter_mut().enumerate() {
                *b = self.value_upto(row, start + j, upto);
            }
            return &buf[..n];
        }
        if upto == 0 && !self.kept {
            return block;
        }
        buf[..n].copy_from_slice(block);
        if self.kept {
            // blocks start at multiples of CHUNK (16): their bits are one half of a mask word
            let bits = self.keep[start / 32] >> (start % 32);
            for (j, b) in buf[..n].iter_mut().enumerate() {
                *b = if bits >> j & 1 != 0 {
                    *b
                } else {
                    f32::NEG_INFINITY
                };
            }
        }
        for t in self.xf[..upto as usize].iter().flatten() {
            match *t {
                Transform::Div(d) => buf[..n].iter_mut().for_each(|x| *x /= d),
                Transform::LogProb { max, lse } => buf[..n]
                    .iter_mut()
                    .for_each(|x| *x = shifted_log_prob(*x, max, lse)),
                t @ Transform::LazyMask { .. } => buf[..n]
                    .iter_mut()
                    .for_each(|x| *x = self.apply_one(t, *x, row)),
            }
        }
        &buf[..n]
    }

    /// The slow path: the full identity-layout array, as llama.cpp's fill plus the same stages.
    ///
    /// With an allowed set the array holds only the allowed entries, in id order (what the
    /// grammar's `apply` leaves on a filled array), and every later stage's effect on an entry is
    /// the same f32 there: edits land on their entry (found by id), removed ids are left out.
    pub fn materialize(&self, row: &[f32], cur: &mut Candidates) {
        if self.kept {
            cur.fill_where(row, &self.keep);
        } else {
            cur.fill(row);
        }
        // Replay in recorded order: edits written before transform k, then transform k, ...
        let kept = self.kept;
        let s = cur.as_mut_slice();
        for k in 0..=self.n_xf {
            for &(id, v, at) in &self.edits {
                if at != k {
                    continue;
                }
                if !kept {
                    s[id as usize].logit = v;
                } else if let Ok(i) = s.binary_search_by_key(&id, |t| t.id) {
                    s[i].logit = v;
                }
            }
            let Some(t) = self.xf[..self.n_xf as usize]
                .get(k as usize)
                .copied()
                .flatten()
            else {
                continue;
            };
            if let Transform::LazyMask { .. } = t {
                // The cut from the snapshot of what the stage saw: an entry edited again after the
                // mask no longer holds its pre-mask value here (its final value is written below).
                let cut = self.lazy_cut(row);
                s.iter_mut().for_each(|c| {
                    if c.logit < cut {
                        c.logit = f32::NEG_INFINITY
                    }
                });
            } else {
                s.iter_mut()
                    .for_each(|c| c.logit = self.apply_one(t, c.logit, row));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set is recorded exactly when it holds `min` ids or more, on every level: counts just
    /// below and at the threshold, packed into the first words, one bit per word over hundreds
    /// of words, or in the last word only, and `min = 0` (any set, even an empty one).
    #[test]
    fn keep_only_at_least_records_sets_from_min_ids() {
        let n_words = 400;
        // (first word, bits per word, how many bits)
        let layouts = [
            (0, 32, 255),
            (0, 32, 256),
            (3, 1, 255),
            (3, 1, 256),
            (399, 32, 32),
        ];
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for (first, per_word, count) in layouts {
                let mut words = vec![0u32; n_words];
                for i in 0..count {
                    let (w, b) = (first + i / per_word, i % per_word);
                    words[w] |= 1 << b;
                }
                for min in [0, count, count + 1] {
                    let mut ov = Overlay::default();
                    ov.reset(n_words * 32);
                    let at = format!("{} first={first} count={count} min={min}", level.name());
                    assert_eq!(ov.keep_only_at_least(&words, min), count >= min, "{at}");
                    assert_eq!(ov.keep_mask().is_some(), count >= min, "{at}");
                }
            }
        }
        crate::simd::testing::force(None);
    }

    /// The edit bits and the chunk list across steps: each step's list is its edited chunks in
    /// order, once each (ids in one chunk, in neighbouring words, far apart, the last id), and a
    /// reset forgets the step before (an id edited then reads raw again).
    #[test]
    fn edited_chunks_list_each_steps_chunks_in_order_and_reset_forgets_them() {
        let n = 151_936;
        let row: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut g = crate::synth::SplitMix64(3);
        let mut ov = Overlay::default();
        let mut before: Vec<usize> = Vec::new();
        for step in 0..50 {
            ov.reset(n);
            for &id in &before {
                assert!(!ov.is_edited(id), "step {step}: {id} still edited");
                assert_eq!(ov.get(&row, id), row[id]);
            }
            let mut ids: Vec<usize> = (0..step % 70)
                .map(|_| (g.next_u64() % n as u64) as usize)
                .collect();
            ids.extend([0, 15, 16, 63, 64, 4095, 4096, n - 1].iter().take(step % 9));
            for &id in &ids {
                ov.set(id, -1.0);
            }
            ov.prepare();
            let mut want: Vec<u32> = ids.iter().map(|&id| (id / CHUNK) as u32).collect();
            want.sort_unstable();
            want.dedup();
            assert_eq!(ov.edited_chunks(), &want[..], "step {step}");
            for &id in &ids {
                assert!(ov.is_edited(id));
                assert_eq!(ov.get(&row, id), -1.0);
            }
            before = ids;
        }
    }

    #[test]
    fn transforms_apply_in_order_and_edits_after_them_are_final() {
        let row = [4.0f32, -2.0, 1.0, 8.0];
        let mut ov = Overlay::default();
        ov.reset(row.len());
        ov.set(0, 2.0); // before the transforms: read as ((2 - 0) - 1) / 2
        assert!(ov.push_transform(Transform::LogProb { max: 0.0, lse: 1.0 }));
        assert!(ov.push_transform(Transform::Div(2.0)));
        ov.set(1, 5.0); // after them: final
                        // a mask at 0.25 (its band a single point; the cut function returns its argument)
        let at = |_: &StageValues<'_>, c: f32| -> f32 { c };
        assert!(ov.push_lazy_mask(0.25, 0.25, LazyCut { f: at, arg: 0.25 }));
        assert!(
            !ov.push_transform(Transform::Div(3.0)),
            "at most three pending"
        );
        let got: Vec<f32> = (0..4).map(|i| ov.get(&row, i)).collect();
        assert_eq!(got, [0.5, 5.0, f32::NEG_INFINITY, 3.5]);
        let mut c = Candidates::new();
        ov.materialize(&row, &mut c);
        let filled: Vec<f32> = c.as_slice().iter().map(|t| t.logit).collect();
        assert_eq!(filled, got);
        ov.prepare();
        let mut buf = [0.0; CHUNK];
        assert_eq!(ov.current_block(&row, 0, &row, true, &mut buf), &got[..]);
    }

    #[test]
    fn an_edit_rewritten_after_a_transform_is_final() {
        let row = [3.0f32, 6.0];
        let mut ov = Overlay::default();
        ov.reset(2);
        ov.set(1, 10.0);
        ov.push_transform(Transform::Div(2.0));
        assert_eq!(ov.get(&row, 1), 5.0);
        ov.set(1, ov.get(&row, 1) + 1.0);
        assert_eq!(ov.get(&row, 1), 6.0);
        assert_eq!(ov.get(&row, 0), 1.5);
        let mut c = Candidates::new();
        ov.materialize(&row, &mut c);
        assert_eq!(c.as_slice()[1].logit, 6.0);
        assert_eq!(c.as_slice()[0].logit, 1.5);
    }
}
