//! The candidate array every sampler works on.
//!
//! This mirrors llama.cpp's `llama_token_data_array`: a list of `(id, logit, p)` with a `sorted` flag
//! ("sorted by logit, descending") and a `selected` index. Samplers may reorder it, shrink it, drop
//! entries from the front (XTC advances llama.cpp's `data` pointer; here `start` moves), mask entries
//! to `-inf`, or overwrite `p`. The buffer is reused across steps, so a step allocates nothing.

/// A token id, as llama.cpp's `llama_token` (i32).
pub type TokenId = i32;

/// One candidate: llama.cpp's `llama_token_data`.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[repr(C)]
pub struct TokenData {
    /// The token id.
    pub id: TokenId,
    /// Its logit.
    pub logit: f32,
    /// Its probability, once a stage has computed one (llama.cpp's `p`).
    pub p: f32,
}

/// The candidate set for one step.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    buf: Vec<TokenData>,
    start: usize,
    end: usize,
    /// True when the live entries are sorted by logit, descending.
    pub sorted: bool,
    /// Index into the live entries of the chosen candidate, set by a terminal sampler.
    pub selected: Option<usize>,
}

impl Candidates {
    /// An empty set with no allocation.
    pub fn new() -> Self {
        Self::default()
    }

    /// `{id: i, logit: logits[i], p: 0}` for every i, unsorted: what `llama_sampler_sample` fills.
    pub fn from_logits(logits: &[f32]) -> Self {
        let mut c = Self::new();
        c.fill(logits);
        c
    }

    /// Build from explicit entries (tests, replays of llama.cpp's own arrays).
    pub fn from_data(data: Vec<TokenData>, sorted: bool) -> Self {
        let end = data.len();
        Self {
            buf: data,
            start: 0,
            end,
            sorted,
            selected: None,
        }
    }

    /// Refill in place from a logit row, reusing the buffer.
    pub fn fill(&mut self, logits: &[f32]) {
        self.buf.clear();
        self.buf
            .extend(logits.iter().enumerate().map(|(i, &logit)| TokenData {
                id: i as TokenId,
                logit,
                p: 0.0,
            }));
        self.start = 0;
        self.end = self.buf.len();
        self.sorted = false;
        self.selected = None;
    }

    /// Refill in place with the entries of [`fill`](Self::fill) whose bit is set in `bits` (bit
    /// `i % 32` of word `i / 32`, a token mask such as a grammar's allowed set), in id order:
    /// the identity fill filtered, without making the vocabulary-sized fill first. Runs of 32
    /// allowed ids are copied as a block.
    pub fn fill_where(&mut self, logits: &[f32], bits: &[u32]) {
        self.buf.clear();
        // eight words at a time past the empty ones: a small set (a grammar's JSON structure)
        // leaves most of the vocabulary's words empty
        for (g, group) in bits.chunks(8).enumerate() {
            if group.iter().fold(0, |a, &w| a | w) != 0 {
                for (j, &word) in group.iter().enumerate() {
                    self.push_word(logits, (g * 8 + j) * 32, word);
                }
            }
        }
        self.start = 0;
        self.end = self.buf.len();
        self.sorted = false;
        self.selected = None;
    }

    /// [`Candidates::fill_where`]'s entries for the ids `base..base + 32` whose bit is set in
    /// `word` (ids past the row: none).
    #[inline]
    fn push_word(&mut self, logits: &[f32], base: usize, word: u32) {
        let n = logits.len();
        let entry = |i: usize, logit: f32| TokenData {
            id: i as TokenId,
            logit,
            p: 0.0,
        };
        if word == u32::MAX && base + 32 <= n {
            let block = &logits[base..base + 32];
            let ids = base..base + 32;
            self.buf
                .extend(ids.zip(block).map(|(i, &logit)| entry(i, logit)));
            return;
        }
        let mut rest = word;
        while rest != 0 {
            let i = base + rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if i < n {
                self.buf.push(entry(i, logits[i]));
            }
        }
    }

    /// Replace the live entries with `data` (reusing the buffer).
    pub fn set_data(&mut self, data: impl IntoIterator<Item = TokenData>, sorted: bool) {
        self.buf.clear();
        self.buf.extend(data);
        self.start = 0;
        self.end = self.buf.len();
        self.sorted = sorted;
        self.selected = None;
    }

    /// The live entries.
    #[inline]
    pub fn as_slice(&self) -> &[TokenData] {
        &self.buf[self.start..self.end]
    }

    /// The live entries, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [TokenData] {
        &mut self.buf[self.start..self.end]
    }

    /// Number of live entries (llama.cpp's `size`).
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    #[inline]
    /// True when no candidate is live.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Keep the first `n` live entries (no-op when `n >= len`).
    #[inline]
    pub fn truncate(&mut self, n: usize) {
        if n < self.len() {
            self.end = self.start + n;
        }
    }

    /// Drop the first `n` live entries, as XTC's `data += n` does.
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) {
        let n = n.min(self.len());
        self.start += n;
    }

    /// The token id of the selected entry, if a terminal sampler chose one.
    pub fn selected_token(&self) -> Option<TokenId> {
        self.selected
            .and_then(|i| self.as_slice().get(i))
            .map(|t| t.id)
    }

    /// Ids of the live entries in array order.
    pub fn ids(&self) -> Vec<TokenId> {
        self.as_slice().iter().map(|t| t.id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: the identity fill, then the entries whose bit is set.
    fn identity_fill_where(logits: &[f32], words: &[u32]) -> Vec<TokenData> {
        Candidates::from_logits(logits)
            .as_slice()
            .iter()
            .filter(|t| words[t.id as usize / 32] >> (t.id % 32) & 1 == 1)
            .copied()
            .collect()
    }

    #[test]
    fn fill_where_is_the_identity_fill_filtered_by_the_bits() {
        let n = 100; // a partial last word, and bits past n in it
        let logits: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
        let words = [u32::MAX, 0, 0x8000_0001, u32::MAX];
        let mut got = Candidates::from_logits(&[1.0; 3]);
        got.sorted = true;
        got.selected = Some(1);
        got.fill_where(&logits, &words);
        let want = identity_fill_where(&logits, &words);
        assert_eq!(want.len(), 32 + 2 + 4);
        assert_eq!(got.as_slice(), &want[..]);
        assert!(!got.sorted && got.selected.is_none());
    }

    /// Sparse sets over a longer row: empty groups of eight words skipped, a lone bit in a group
    /// kept, full words copied whole, and words past the row (set) ignored.
    #[test]
    fn fill_where_skips_empty_words_and_keeps_lone_bits() {
        let n = 1000; // 31 whole words and 8 ids of the 32nd
        let logits: Vec<f32> = (0..n).map(|i| (i as f32).sin() * 9.0).collect();
        let mut words = vec![0u32; 40];
        words[0] = 1 << 31; // a lone bit closing the first group
        words[9] = u32::MAX; // a full word after an empty group
        words[23] = 1; // the only bit of its group
        words[31] = 0xF0; // ids 996..999 and past the row
        words[35] = u32::MAX; // wholly past the row
        let mut got = Candidates::from_logits(&[1.0; 3]);
        got.fill_where(&logits, &words);
        let want = identity_fill_where(&logits, &words);
        assert_eq!(want.len(), 1 + 32 + 1 + 4);
        assert_eq!(got.as_slice(), &want[..]);
    }
}
