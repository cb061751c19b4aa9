//! The logit row before the first dense stage: the caller's row plus a few edited entries.
//!
//! llama.cpp fills a `(id, logit, p)` array for the whole vocabulary before the first sampler runs:
//! at 152k tokens that fill alone costs more than the rest of the default chain. But the stages that
//! usually come first (logit-bias, penalties, DRY) touch only the tokens in a bias list or a history,
//! and top-k or greedy only need one pass over the row. So the chain keeps the row untouched, records
//! those stages' effects as sparse edits here, and lets the first dense stage read "row + edits"
//! directly. The result is bit-identical to filling first (each edit computes the same f32 from the
//! same input), and the slow path (`materialize`) is always available.

use crate::candidates::{Candidates, TokenId};

/// Reusable storage for sparse edits over a row of `n` logits. Lookups are O(1) through a
/// generation-stamped slot table, so clearing between steps is O(edits), not O(n).
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    stamp: Vec<u32>,
    slot: Vec<u32>,
    gen: u32,
    edits: Vec<(TokenId, f32)>,
    /// Sorted, deduplicated chunk indices (`id / CHUNK`) that hold an edit.
    chunks: Vec<u32>,
    chunks_dirty: bool,
}

/// Width of the blocks the scanning kernels test at once.
pub const CHUNK: usize = 16;

impl Overlay {
    /// Forget all edits and size the tables for a row of `n` logits.
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
    }

    #[inline]
    fn slot_of(&self, id: usize) -> Option<usize> {
        (self.stamp[id] == self.gen).then(|| self.slot[id] as usize)
    }

    /// The current logit of `id`: the edit if there is one, else the row's value.
    #[inline]
    pub fn get(&self, row: &[f32], id: usize) -> f32 {
        match self.slot_of(id) {
            Some(s) => self.edits[s].1,
            None => row[id],
        }
    }

    /// Set the logit of `id` (ids must be `< n`; callers validated them).
    #[inline]
    pub fn set(&mut self, id: usize, v: f32) {
        match self.slot_of(id) {
            Some(s) => self.edits[s].1 = v,
            None => {
                self.stamp[id] = self.gen;
                self.slot[id] = self.edits.len() as u32;
                self.edits.push((id as TokenId, v));
                self.chunks_dirty = true;
            }
        }
    }

    /// Whether `id` has an edit.
    #[inline]
    pub fn is_edited(&self, id: usize) -> bool {
        self.slot_of(id).is_some()
    }

    /// The edits in insertion order.
    pub fn edits(&self) -> &[(TokenId, f32)] {
        &self.edits
    }

    /// Bring the sorted list of edited chunks up to date (call before scanning).
    pub fn prepare(&mut self) {
        if self.chunks_dirty {
            self.chunks.clear();
            self.chunks.extend(self.edits.iter().map(|&(id, _)| id as u32 / CHUNK as u32));
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

    /// The slow path: the full identity-layout array, as llama.cpp's fill plus the same stages.
    pub fn materialize(&self, row: &[f32], cur: &mut Candidates) {
        cur.fill(row);
        let s = cur.as_mut_slice();
        for &(id, v) in &self.edits {
            s[id as usize].logit = v;
        }
    }
}

