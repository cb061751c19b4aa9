//! `dry` ("don't repeat yourself"): penalise the tokens that would extend a repeated sequence.
//!
//! # Semantics (llama.cpp `llama_sampler_dry`, docs/SPEC.md §1 DRY and §6.10)
//!
//! With `s[j]` the j-th most recent token of the last `N` (`s[0]` is the newest):
//!
//! 1. `N <= allowed_length` → no change (the `sorted` flag is left alone, as in llama.cpp).
//! 2. **Restart limit.** Scan `s` from the newest token; the first token that is a breaker head
//!    whose tail (the tokens that followed it, forward order) matches sets
//!    `rep_limit = i - tail_len`. The most recent breaker wins. `rep_limit < allowed_length` → no
//!    change.
//! 3. **Repeat lengths.** `Z[k]` = the length of the common prefix of `s` and `s[k..]` (the
//!    longest suffix of the context that also ends `k` tokens earlier), capped at `rep_limit`.
//!    llama.cpp computes it with a Z-box loop that caps inside the box; the capped values are the
//!    same as capping the plain Z-array afterwards, so this computes the standard Z-array in O(N).
//! 4. **Candidates.** For each `k` with `min(Z[k], rep_limit) >= allowed_length`, the token that
//!    followed the earlier occurrence, `s[k-1]`, would extend a repeat of that length; keep the
//!    maximum per token.
//! 5. **Penalty.** Unless the token is a single-token breaker, subtract
//!    `mult * pow(base, len - allowed_length)`, computed in f64 (C++'s `std::pow(float, int)`
//!    promotes to double) and rounded to f32, with the exponent clamped to
//!    `int(88.7228391f / logf(base))` when `base > 1.000001`. Then `sorted = false`.
//!
//! # Differences from llama.cpp
//!
//! * `Window::All` (`-1`) keeps the whole history; llama.cpp clamps `-1` to 0 and disables DRY.
//! * Cost: llama.cpp probes a hash map once per candidate (O(vocab) per token); here the at most
//!   `N` penalised tokens are found directly in an identity-layout array, so `apply` is O(N). A
//!   reordered array falls back to the per-candidate walk (see `penalties`).
//! * String breakers are expanded by [`expand_string_breakers`]; a tail whose bytes are not valid
//!   UTF-8 (a breaker cut inside a character, or matched by a byte token) cannot be passed to
//!   [`Vocab::tokenize`] and is skipped. Such a head/tail pair could only match text containing
//!   the same broken bytes.
//! * History tokens with negative ids never get a penalty (no candidate has one).

use std::collections::VecDeque;

use crate::candidates::{Candidates, TokenId};
use crate::overlay::Overlay;
use crate::sampler::{Sampler, Shift};
use crate::samplers::penalties::{for_each_keyed, IdMap, Window};
use crate::samplers::placeholder::Placeholder;
use crate::vocab::Vocab;

/// llama.cpp's `FLOAT_MAX_LOG = 88.7228391f`, an approximation of `ln(f32::MAX)`, spelled as in
/// the source (it rounds to the same f32 as a shorter literal).
#[allow(clippy::excessive_precision)]
const FLOAT_MAX_LOG: f32 = 88.722_839_1;
/// A string breaker longer than this many bytes is truncated (llama.cpp `MAX_CHAR_LEN`).
pub const MAX_BREAKER_BYTES: usize = 40;
/// A breaker tail is truncated to this many tokens (llama.cpp `MAX_SEQ_LEN`).
pub const MAX_TAIL_TOKENS: usize = 20;

/// Configuration of the DRY stage.
#[derive(Clone, Debug, PartialEq)]
pub struct DryConfig {
    /// Penalty multiplier (`0` = off).
    pub multiplier: f32,
    /// Base of the exponential penalty.
    pub base: f32,
    /// Repeats up to this length are not penalized.
    pub allowed_length: i32,
    /// How far back repeats are looked for.
    pub penalty_last_n: Window,
    /// Sequence breakers as token ids: `[head, tail...]` (llama.cpp's `init_dry_testing` form).
    pub breakers: Vec<Vec<TokenId>>,
}

/// The DRY stage.
#[derive(Clone, Debug)]
pub struct Dry {
    cfg: DryConfig,
    /// `int(88.7228391f / logf(base))` when `base > 1.000001`, else 0 (no clamp).
    max_exponent: i32,
    /// Breaker head → every tail that may follow it (an empty tail is a single-token breaker).
    breakers: IdMap<Vec<Vec<TokenId>>>,
    /// Heads with an empty tail: never penalised.
    single: IdMap<()>,
    /// The window, oldest first (unbounded for `Window::All`).
    history: VecDeque<TokenId>,
    /// Scratch, reused across steps: the last N tokens newest first, the Z-array, and the longest
    /// repeat each token would extend.
    rev: Vec<TokenId>,
    z: Vec<usize>,
    max_repeat: IdMap<i64>,
}

/// Build the stage as llama.cpp's init does (a `?dry` placeholder when disabled).
pub fn build(cfg: DryConfig) -> Box<dyn Sampler> {
    if cfg.multiplier == 0.0 || cfg.base < 1.0 || cfg.penalty_last_n.is_disabled() {
        return Placeholder::boxed("?dry");
    }
    Box::new(Dry::new(cfg))
}

impl Dry {
    /// The active stage, even for a configuration llama.cpp would turn into a placeholder (use
    /// [`build`] for llama.cpp's behaviour), for callers that need the concrete type.
    pub fn new(cfg: DryConfig) -> Self {
        let max_exponent = if cfg.base > 1.000_001 {
            // f32 division as in llama.cpp, then truncation toward zero (`as` saturates).
            (FLOAT_MAX_LOG / cfg.base.ln()) as i32
        } else {
            0
        };
        let mut breakers: IdMap<Vec<Vec<TokenId>>> = IdMap::default();
        let mut single: IdMap<()> = IdMap::default();
        for b in &cfg.breakers {
            // llama.cpp skips empty breakers with a warning.
            let Some((&head, tail)) = b.split_first() else {
                continue;
            };
            let tails = breakers.entry(head).or_default();
            if !tails.iter().any(|t| t == tail) {
                tails.push(tail.to_vec());
            }
            if tail.is_empty() {
                single.insert(head, ());
            }
        }
        Dry {
            cfg,
            max_exponent,
            breakers,
            single,
            history: VecDeque::new(),
            rev: Vec::new(),
            z: Vec::new(),
            max_repeat: IdMap::default(),
        }
    }

    /// Step 1: the restart limit from the most recent breaker occurrence in `rev`.
    fn restart_limit(&self) -> usize {
        let s = &self.rev;
        for (i, tok) in s.iter().enumerate() {
            let Some(tails) = self.breakers.get(tok) else {
                continue;
            };
            // The longest tail that fits in the i newer tokens and matches them.
            let longest = tails
                .iter()
                .filter(|t| t.len() <= i && t.iter().enumerate().all(|(o, &x)| x == s[i - 1 - o]))
                .map(Vec::len)
                .max();
            if let Some(len) = longest {
                return i - len;
            }
        }
        s.len()
    }

    /// Step 2: the standard Z-array of `rev` into `z` (`z[0]` unused), O(N).
    fn z_array(&mut self) {
        let s = &self.rev;
        let n = s.len();
        self.z.clear();
        self.z.resize(n, 0);
        let (mut l, mut r) = (0usize, 0usize); // the Z-box [l, r), r exclusive
        for k in 1..n {
            let mut len = if k < r { (r - k).min(self.z[k - l]) } else { 0 };
            while k + len < n && s[len] == s[k + len] {
                len += 1;
            }
            if k + len > r {
                l = k;
                r = k + len;
            }
            self.z[k] = len;
        }
    }

    /// Steps 1–4: fill `max_repeat` with the longest repeat each token would extend. False when an
    /// early out applies (llama.cpp then leaves the array, `sorted` flag included, untouched).
    fn find_repeats(&mut self) -> bool {
        let allowed = i64::from(self.cfg.allowed_length);
        let n = match self.cfg.penalty_last_n {
            Window::Last(w) => self.history.len().min(w),
            Window::All => self.history.len(),
        };
        if n as i64 <= allowed {
            return false;
        }
        self.rev.clear();
        self.rev.extend(self.history.iter().rev().take(n));

        let rep_limit = self.restart_limit();
        if (rep_limit as i64) < allowed {
            return false;
        }

        self.z_array();
        self.max_repeat.clear();
        for k in 1..n {
            let len = self.z[k].min(rep_limit) as i64;
            if len >= allowed {
                let best = self.max_repeat.entry(self.rev[k - 1]).or_insert(len);
                *best = (*best).max(len);
            }
        }
        true
    }

    /// Step 5: what a token that would extend a repeat of `len` loses, or `None` for a
    /// single-token breaker.
    #[inline]
    fn penalty(&self, id: TokenId, len: i64) -> Option<f32> {
        if self.single.contains_key(&id) {
            return None;
        }
        let mut exp = len - i64::from(self.cfg.allowed_length);
        if self.max_exponent > 0 && exp > i64::from(self.max_exponent) {
            exp = i64::from(self.max_exponent);
        }
        // `powf`, not `powi`: libm `pow` as C++'s `std::pow` calls it (powi multiplies
        // repeatedly and rounds differently). The product is f64, rounded once to f32.
        let p = f64::from(self.cfg.multiplier) * f64::from(self.cfg.base).powf(exp as f64);
        Some(p as f32)
    }
}

impl Sampler for Dry {
    fn name(&self) -> &str {
        "dry"
    }

    fn apply(&mut self, cur: &mut Candidates) {
        if !self.find_repeats() {
            return;
        }
        let this = &*self;
        for_each_keyed(cur.as_mut_slice(), &this.max_repeat, |t, len| {
            if let Some(p) = this.penalty(t.id, len) {
                t.logit -= p;
            }
        });
        cur.sorted = false;
    }

    /// The chain's sparse path: the stage's effect on the freshly filled identity layout, held as
    /// "row + edits" (see `crate::overlay`), with the same f32 results as `apply`, in
    /// O(history) and without filling. Always possible for DRY, so it always returns true. Ids outside the row
    /// are skipped, as no candidate carries them.
    fn apply_sparse(&mut self, row: &[f32], ov: &mut Overlay) -> bool {
        if self.find_repeats() {
            for (&id, &len) in &self.max_repeat {
                let Some(i) = usize::try_from(id).ok().filter(|&i| i < row.len()) else {
                    continue;
                };
                if let Some(p) = self.penalty(id, len) {
                    ov.update(row, i, |now| now - p);
                }
            }
        }
        true
    }

    fn accept(&mut self, token: TokenId) {
        if let Window::Last(w) = self.cfg.penalty_last_n {
            if w == 0 {
                // An empty window (only reachable through `Dry::new`) records nothing.
                return;
            }
            while self.history.len() >= w {
                self.history.pop_front();
            }
        }
        self.history.push_back(token);
    }

    fn reset(&mut self) {
        self.history.clear();
        self.max_repeat.clear();
    }

    fn shift(&self) -> Shift {
        // It only subtracts, and what it subtracts depends on token ids, never on logit values.
        Shift::Invariant
    }
}

/// Expand string sequence breakers against a vocabulary into `[head, tail...]` token breakers,
/// as llama.cpp's `get_overlapping_token_sequences` does (ported from koboldcpp).
///
/// For every breaker string (empty ones skipped, each cut to [`MAX_BREAKER_BYTES`] bytes) and
/// every token id, with `word` the token's bytes:
/// * `word` contains the breaker → `[id]`, a single-token breaker (never penalised itself);
/// * else, for every position where `word` ends with a proper prefix of the breaker →
///   `[id, tokenize(rest of the breaker)...]` with the tail cut to [`MAX_TAIL_TOKENS`] tokens.
///
/// Duplicates are removed. The result is ordered by head id. This is a one-off O(vocab × breakers)
/// walk, done when a chain is built, never per token.
pub fn expand_string_breakers(vocab: &dyn Vocab, breakers: &[String]) -> Vec<Vec<TokenId>> {
    let strs: Vec<&[u8]> = breakers
        .iter()
        .map(|b| {
            let b = b.as_bytes();
            &b[..b.len().min(MAX_BREAKER_BYTES)]
        })
        .filter(|b| !b.is_empty())
        .collect();
    let mut out: Vec<Vec<TokenId>> = Vec::new();
    let n_vocab = TokenId::try_from(vocab.n_vocab()).unwrap_or(TokenId::MAX);
    for id in 0..n_vocab {
        let word = vocab.token_bytes(id);
        let first = out.len();
        for s in &strs {
            if contains(&word, s) {
                push_unique(&mut out, first, vec![id]);
                continue;
            }
            for pos in (0..word.len()).filter(|&p| word[p] == s[0]) {
                // Bytes of the breaker already present at the end of `word` from `pos`.
                let matched = (word.len() - pos).min(s.len());
                if word[pos..pos + matched] != s[..matched] {
                    continue;
                }
                // `word` does not contain `s`, so `matched < s.len()`: a proper prefix.
                let Ok(rest) = std::str::from_utf8(&s[matched..]) else {
                    continue;
                };
                let mut entry = vec![id];
                entry.extend(vocab.tokenize(rest).into_iter().take(MAX_TAIL_TOKENS));
                push_unique(&mut out, first, entry);
            }
        }
    }
    out
}

/// Push `entry` unless `out[first..]` (the entries of the same head) already holds it.
fn push_unique(out: &mut Vec<Vec<TokenId>>, first: usize, entry: Vec<TokenId>) {
    if !out[first..].contains(&entry) {
        out.push(entry);
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.len() <= hay.len() && hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dry(mult: f32, base: f32, allowed: i32, breakers: Vec<Vec<TokenId>>) -> Box<dyn Sampler> {
        build(DryConfig {
            multiplier: mult,
            base,
            allowed_length: allowed,
            penalty_last_n: Window::All,
            breakers,
        })
    }

    fn penalised(s: &mut Box<dyn Sampler>, history: &[TokenId], n_vocab: usize) -> Vec<f32> {
        for &t in history {
            s.accept(t);
        }
        let mut cur = Candidates::from_logits(&vec![0.0; n_vocab]);
        s.apply(&mut cur);
        cur.as_slice().iter().map(|t| -t.logit).collect()
    }

    /// Repeat lengths by brute force: for each candidate, the longest suffix of `h` that also ends
    /// at an earlier position followed by that candidate.
    fn brute(h: &[TokenId], n_vocab: usize) -> Vec<usize> {
        let n = h.len();
        let mut best = vec![0; n_vocab];
        for end in 0..n - 1 {
            let mut len = 0;
            while len <= end && h[end - len] == h[n - 1 - len] {
                len += 1;
            }
            let c = h[end + 1] as usize;
            best[c] = best[c].max(len);
        }
        best
    }

    #[test]
    fn z_array_repeat_lengths_match_brute_force() {
        // Pseudo-random histories over a small alphabet (many repeats), no breakers.
        let mut x = 12345u32;
        for _ in 0..200 {
            let len = 2 + (x % 40) as usize;
            let h: Vec<TokenId> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    ((x >> 16) % 3) as TokenId
                })
                .collect();
            let mut s = dry(1.0, 1.0, 1, vec![]);
            let got = penalised(&mut s, &h, 3);
            let want = brute(&h, 3);
            for c in 0..3 {
                // base 1 → every penalised token loses exactly `mult`.
                assert_eq!(
                    got[c],
                    if want[c] >= 1 { 1.0 } else { 0.0 },
                    "{h:?} token {c}"
                );
            }
        }
    }

    #[test]
    fn single_token_breaker_is_never_penalised_and_limits_repeats() {
        // 0 1 2 | 0 1 → token 2 would extend "0 1" (length 2).
        let mut s = dry(1.0, 2.0, 2, vec![]);
        assert_eq!(
            penalised(&mut s, &[0, 1, 2, 0, 1], 4),
            vec![0.0, 0.0, 1.0, 0.0]
        );
        // Token 2 as a breaker: never penalised.
        let mut s = dry(1.0, 2.0, 2, vec![vec![2]]);
        assert_eq!(penalised(&mut s, &[0, 1, 2, 0, 1], 4), vec![0.0; 4]);
        // "5 0 1" repeats and was followed by 2: a repeat of 3, penalty 2^(3-2) = 2.
        let h = [5, 0, 1, 2, 5, 0, 1];
        let mut s = dry(1.0, 2.0, 2, vec![]);
        assert_eq!(penalised(&mut s, &h, 6), vec![0.0, 0.0, 2.0, 0.0, 0.0, 0.0]);
        // A breaker 5 two tokens back caps the repeat at 2: penalty 2^0 = 1.
        let mut s = dry(1.0, 2.0, 2, vec![vec![5]]);
        assert_eq!(penalised(&mut s, &h, 6), vec![0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
        // A breaker 0 one token back: rep_limit 1 < allowed 2, nothing at all.
        let mut s = dry(1.0, 2.0, 2, vec![vec![0]]);
        assert_eq!(penalised(&mut s, &h, 6), vec![0.0; 6]);
    }

    #[test]
    fn multi_token_breaker_matches_its_tail() {
        // Breaker [3, 0]: "3 0" in the recent text limits the repeat to the tokens after it.
        let h = [1, 2, 3, 0, 1, 2, 3, 0, 1, 2];
        let mut s = dry(1.0, 2.0, 2, vec![vec![3, 0]]);
        // rat: 2 1 0 3 ...; head 3 at i=3, tail [0] matches rat(2)=0 → rep_limit = 3 - 1 = 2.
        // Token 3 would extend "1 2" (capped at 2): penalty 1 * 2^0 = 1.
        assert_eq!(penalised(&mut s, &h, 4), vec![0.0, 0.0, 0.0, 1.0]);
        // Without the breaker the repeat is 6 long: 2^(6-2) = 16.
        let mut s = dry(1.0, 2.0, 2, vec![]);
        assert_eq!(penalised(&mut s, &h, 4), vec![0.0, 0.0, 0.0, 16.0]);
    }

    #[test]
    fn exponent_is_clamped_for_large_bases() {
        // base 1000: max_exponent = int(88.72 / 6.9078) = 12; a 30-long repeat is capped.
        let h: Vec<TokenId> = (0..2).flat_map(|_| 0..31).collect();
        let mut s = dry(1.0, 1000.0, 2, vec![]);
        let got = penalised(&mut s, &h[..h.len() - 1], 31);
        assert_eq!(got[30], (1000f64.powf(12.0)) as f32);
        assert!(got.iter().all(|p| p.is_finite()));
    }

    #[test]
    fn overlay_path_gives_the_same_bits_as_apply() {
        let row: Vec<f32> = (0..9).map(|i| i as f32 * 0.7 - 3.0).collect();
        let history = [0, 1, 2, 3, 0, 1, 2, 3, 4, -4, 99, 0, 1, 2, 3, 0, 1];
        let mut a = Dry::new(DryConfig {
            multiplier: 0.8,
            base: 1.75,
            allowed_length: 1,
            penalty_last_n: Window::Last(16),
            breakers: vec![vec![4], vec![1, 2]],
        });
        for t in history {
            a.accept(t);
        }
        crate::samplers::testing::assert_sparse_matches_dense(&a, &row);
    }

    /// The ids a grammar removed read `-inf` and stay so: no edit for them, the allowed ones
    /// penalised as usual.
    #[test]
    fn removed_ids_get_no_edit() {
        let row: Vec<f32> = (0..64).map(|i| i as f32 * 0.1).collect();
        let mut s = Dry::new(DryConfig {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: 1,
            penalty_last_n: Window::All,
            breakers: vec![],
        });
        // the suffix "0 1" was followed by 2 and by 3 before
        for t in [0, 1, 2, 0, 1, 3, 0, 1] {
            s.accept(t);
        }
        let mut ov = Overlay::default();
        ov.reset(row.len());
        assert!(ov.keep_only(&[!(1 << 2), u32::MAX])); // every id but 2
        assert!(s.apply_sparse(&row, &mut ov));
        assert!(!ov.is_edited(2));
        assert!(ov.is_edited(3) && ov.get(&row, 3) < row[3]);
        assert_eq!(ov.get(&row, 2), f32::NEG_INFINITY);
    }

    #[test]
    fn empty_window_records_nothing() {
        let mut s = Dry::new(DryConfig {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: -1,
            penalty_last_n: Window::Last(0),
            breakers: vec![],
        });
        for t in [0, 1, 0, 1] {
            s.accept(t);
        }
        let mut cur = Candidates::from_logits(&[0.0; 2]);
        s.apply(&mut cur);
        assert_eq!(
            cur.as_slice().iter().map(|t| t.logit).collect::<Vec<_>>(),
            vec![0.0; 2]
        );
    }

    #[test]
    fn window_limits_the_history() {
        let mut s = build(DryConfig {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: 2,
            penalty_last_n: Window::Last(4),
            breakers: vec![],
        });
        // Only "2 0 1" remains... window [1, 2, 0, 1]: "1" repeats (len 1 < 2): nothing.
        assert_eq!(penalised(&mut s, &[0, 1, 2, 0, 1], 3), vec![0.0; 3]);
    }
}
