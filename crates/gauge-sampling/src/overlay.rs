//! The logit row before the first dense stage: the caller's row plus a few edited entries and at
//! most two pending whole-row transforms.
//!
//! llama.cpp fills a `(id, logit, p)` array for the whole vocabulary before the first sampler runs:
//! at 152k tokens that fill alone costs more than the rest of the default chain. But the stages that
//! usually come first (logit-bias, penalties, DRY) touch only the tokens in a bias list or a history,
//! and top-k or greedy only need one pass over the row. So the chain keeps the row untouched, records
//! those stages' effects as sparse edits here, and lets the first dense stage read "row + edits"
//! directly. The result is bit-identical to filling first (each edit computes the same f32 from the
//! same input), and the slow path (`materialize`) is always available.
//!
//! Two dense stages are cheap to describe without touching the row, so they are recorded as
//! pending [`Transform`]s instead of being applied: plain temperature (`x / t`, per element, the
//! same f32 division) and top-n-sigma's mask (`x < cut` becomes `-inf`, once the stage has computed
//! `cut`). Readers apply them in the order they were recorded. An edit remembers how many transforms
//! existed when it was written: a stage after a transform writes the final value, so later reads
//! apply only the transforms recorded after it. This keeps `get`, the scanning kernels and
//! `materialize` exactly equal to running the stages one by one on a filled array.

use crate::candidates::{Candidates, TokenId};

/// A whole-row operation recorded instead of applied (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Transform {
    /// `x / t` with `t > 0`: llama.cpp's `temp_impl` (a division, not a multiplication by `1/t`).
    Div(f32),
    /// `x < cut` becomes `-inf`, anything else is kept: top-n-sigma's mask.
    MaskBelow(f32),
}

impl Transform {
    #[inline]
    fn apply(self, x: f32) -> f32 {
        match self {
            Transform::Div(t) => x / t,
            Transform::MaskBelow(c) => {
                if x < c {
                    f32::NEG_INFINITY
                } else {
                    x
                }
            }
        }
    }
}

/// How many transforms may be pending at once. Two covers `temp` before mirostat and a mask before
/// top-k; a stage that would need a third simply runs on the filled array.
pub const MAX_TRANSFORMS: usize = 2;

/// Reusable storage for sparse edits over a row of `n` logits. Lookups are O(1) through a
/// generation-stamped slot table, so clearing between steps is O(edits), not O(n).
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    stamp: Vec<u32>,
    slot: Vec<u32>,
    gen: u32,
    /// `(id, value, number of transforms already applied to value)`.
    edits: Vec<(TokenId, f32, u8)>,
    /// Sorted, deduplicated chunk indices (`id / CHUNK`) that hold an edit.
    chunks: Vec<u32>,
    chunks_dirty: bool,
    xf: [Option<Transform>; MAX_TRANSFORMS],
    n_xf: u8,
}

/// Width of the blocks the scanning kernels test at once.
pub const CHUNK: usize = 16;

impl Overlay {
    /// Forget all edits and transforms and size the tables for a row of `n` logits.
    pub fn reset(&mut self, n: usize) {
        if self.stamp.len() != n {
            self.stamp = vec![0; n];
            self.slot = vec![0; n];
            self.gen = 0;
        }
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.gen = 1;
        }
        self.edits.clear();
        self.chunks.clear();
        self.chunks_dirty = false;
        self.xf = [None; MAX_TRANSFORMS];
        self.n_xf = 0;
    }

    #[inline]
    fn slot_of(&self, id: usize) -> Option<usize> {
        (self.stamp[id] == self.gen).then(|| self.slot[id] as usize)
    }

    /// Apply the transforms recorded from index `from` on.
    #[inline]
    fn transform_from(&self, from: u8, mut x: f32) -> f32 {
        for t in self.xf[from as usize..self.n_xf as usize].iter().flatten() {
            x = t.apply(x);
        }
        x
    }

    /// The current logit of `id`: the edit if there is one, else the row's value, with the
    /// pending transforms applied.
    #[inline]
    pub fn get(&self, row: &[f32], id: usize) -> f32 {
        match self.slot_of(id) {
            Some(s) => {
                let (_, v, k) = self.edits[s];
                self.transform_from(k, v)
            }
            None => self.transform_from(0, row[id]),
        }
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
                self.stamp[id] = self.gen;
                self.slot[id] = self.edits.len() as u32;
                self.edits.push((id as TokenId, v, k));
                self.chunks_dirty = true;
            }
        }
    }

    /// Whether `id` has an edit.
    #[inline]
    pub fn is_edited(&self, id: usize) -> bool {
        self.slot_of(id).is_some()
    }

    /// Record a whole-row transform. `false` (nothing recorded) when `MAX_TRANSFORMS` are pending:
    /// the caller then declines its sparse form.
    pub fn push_transform(&mut self, t: Transform) -> bool {
        if (self.n_xf as usize) < MAX_TRANSFORMS {
            self.xf[self.n_xf as usize] = Some(t);
            self.n_xf += 1;
            true
        } else {
            false
        }
    }

    /// The pending transforms, in the order they apply.
    pub fn transforms(&self) -> impl Iterator<Item = Transform> + '_ {
        self.xf[..self.n_xf as usize].iter().flatten().copied()
    }

    /// Whether any transform is pending (readers of raw row blocks must then transform them).
    #[inline]
    pub fn has_transforms(&self) -> bool {
        self.n_xf > 0
    }

    /// The pending divisor when the only transform is a temperature division (mirostat's fast path
    /// divides as it reads).
    pub fn only_div(&self) -> Option<f32> {
        match (self.n_xf, self.xf[0]) {
            (1, Some(Transform::Div(t))) => Some(t),
            _ => None,
        }
    }

    /// Bring the sorted list of edited chunks up to date (call before scanning).
    pub fn prepare(&mut self) {
        if self.chunks_dirty {
            self.chunks.clear();
            self.chunks.extend(
                self.edits
                    .iter()
                    .map(|&(id, _, _)| id as u32 / CHUNK as u32),
            );
            self.chunks.sort_unstable();
            self.chunks.dedup();
            self.chunks_dirty = false;
        }
    }

    /// Chunk indices holding edits, sorted (valid after `prepare`).
    pub fn edited_chunks(&self) -> &[u32] {
        debug_assert!(!self.chunks_dirty, "Overlay::prepare not called");
        &self.chunks
    }

    /// The current values of the row block starting at `start` (`block` is `row[start..]`, at most
    /// `CHUNK` long): `block` itself when it holds no edit and no transform is pending, else the
    /// values written into `buf`. One vectorisable loop for the transform-only case.
    #[inline]
    pub fn current_block<'a>(
        &self,
        row: &[f32],
        start: usize,
        block: &'a [f32],
        edited: bool,
        buf: &'a mut [f32; CHUNK],
    ) -> &'a [f32] {
        let n = block.len();
        if edited {
            for (j, b) in buf[..n].iter_mut().enumerate() {
                *b = self.get(row, start + j);
            }
            return &buf[..n];
        }
        if self.n_xf == 0 {
            return block;
        }
        buf[..n].copy_from_slice(block);
        for t in self.transforms() {
            match t {
                Transform::Div(d) => buf[..n].iter_mut().for_each(|x| *x /= d),
                Transform::MaskBelow(c) => buf[..n]
                    .iter_mut()
                    .for_each(|x| *x = if *x < c { f32::NEG_INFINITY } else { *x }),
            }
        }
        &buf[..n]
    }

    /// The slow path: the full identity-layout array, as llama.cpp's fill plus the same stages.
    pub fn materialize(&self, row: &[f32], cur: &mut Candidates) {
        cur.fill(row);
        if self.n_xf == 0 {
            let s = cur.as_mut_slice();
            for &(id, v, _) in &self.edits {
                s[id as usize].logit = v;
            }
            return;
        }
        // Replay in recorded order: edits written before transform k, then transform k, ...
        let s = cur.as_mut_slice();
        for k in 0..=self.n_xf {
            for &(id, v, at) in &self.edits {
                if at == k {
                    s[id as usize].logit = v;
                }
            }
            if let Some(t) = self.xf[..self.n_xf as usize]
                .get(k as usize)
                .copied()
                .flatten()
            {
                s.iter_mut().for_each(|c| c.logit = t.apply(c.logit));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transforms_apply_in_order_and_edits_after_them_are_final() {
        let row = [4.0f32, -2.0, 1.0, 8.0];
        let mut ov = Overlay::default();
        ov.reset(row.len());
        ov.set(0, 2.0); // before the division: read as 2 / 2
        assert!(ov.push_transform(Transform::Div(2.0)));
        ov.set(1, 5.0); // after it: final
        assert!(ov.push_transform(Transform::MaskBelow(1.0)));
        assert!(
            !ov.push_transform(Transform::Div(3.0)),
            "at most two pending"
        );
        let got: Vec<f32> = (0..4).map(|i| ov.get(&row, i)).collect();
        assert_eq!(got, [1.0, 5.0, f32::NEG_INFINITY, 4.0]);
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
