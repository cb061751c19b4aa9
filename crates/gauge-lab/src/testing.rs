//! A small deterministic [`LogitSource`] for tests: rows are a pure function of a sequence's token
//! history, so runs are reproducible, forks are exact, and batch composition cannot matter.
//!
//! Shape of a row (designed so repetition penalties actually bite, as on a real model):
//! * every logit is `offset + noise`, noise uniform in `[-spread, spread)` from a hash of
//!   (history, token): `offset` plays the model's zero point (gpt2 sits near −160, Qwen near +25),
//!   which is what makes the sign-branched penalty gauge dependent;
//! * one "continuation" token per history gets `+peak` (a confident prediction);
//! * tokens among the last `echo` history tokens get `+echo_boost`, so greedy decoding falls into
//!   loops and the penalty has seen tokens near the top to push down.
//!
//! It also enforces the trait's contract strictly (no logits for a forked or pending sequence, a
//! sequence limit, a context limit), so the probe's bookkeeping is exercised, and counts every
//! evaluated token for the work accounting.

use gauge_engine::{LogitSource, SeqId, SourceError};
use gauge_sampling::TokenId;
use std::collections::BTreeMap;

/// An empty directory for one test: `<tmp>/gauge-lab-<tag>-<pid>-<name>`, cleared first.
pub fn scratch_dir(tag: &str, name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("gauge-lab-{tag}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create a scratch directory");
    d
}

/// The engine record of a test's stand-in Python stack (cpu, float32, a fake torch version).
pub fn test_engine() -> crate::stack::EngineInfo {
    crate::stack::EngineInfo {
        device: "cpu".into(),
        dtype: "float32".into(),
        versions: [("torch".to_string(), "test".to_string())].into(),
        options: Default::default(),
    }
}

/// SplitMix64: a tiny, well-mixed hash step.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Parameters of a [`HashSource`].
#[derive(Debug, Clone, PartialEq)]
pub struct HashSourceConfig {
    pub n_vocab: usize,
    pub n_ctx: usize,
    pub max_sequences: usize,
    /// Added to every logit: the source's zero point.
    pub offset: f32,
    /// Half-width of the uniform noise.
    pub spread: f32,
    /// Boost of the per-history continuation token.
    pub peak: f32,
    /// How many recent tokens are echoed.
    pub echo: usize,
    /// Boost of echoed tokens.
    pub echo_boost: f32,
    /// Seed mixed into every hash (a different "model").
    pub seed: u64,
}

impl Default for HashSourceConfig {
    fn default() -> Self {
        HashSourceConfig {
            n_vocab: 512,
            n_ctx: 1024,
            max_sequences: 256,
            offset: 12.0,
            spread: 6.0,
            peak: 5.0,
            echo: 6,
            echo_boost: 4.5,
            seed: 1,
        }
    }
}

#[derive(Debug, Clone)]
struct Seq {
    history: Vec<TokenId>,
    /// Rolling hash of the whole history.
    hash: u64,
    pending: Vec<TokenId>,
    row: Option<Vec<f32>>,
}

/// The deterministic test source. See the module docs.
#[derive(Debug)]
pub struct HashSource {
    cfg: HashSourceConfig,
    seqs: BTreeMap<SeqId, Seq>,
    next_id: SeqId,
    forward: u64,
    steps: u64,
}

impl HashSource {
    /// A source with the given parameters.
    pub fn new(cfg: HashSourceConfig) -> Self {
        HashSource {
            cfg,
            seqs: BTreeMap::new(),
            next_id: 0,
            forward: 0,
            steps: 0,
        }
    }

    /// Number of `step` calls that evaluated something.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Live sequences.
    pub fn live(&self) -> usize {
        self.seqs.len()
    }

    fn compute_row(&self, seq: &Seq) -> Vec<f32> {
        let c = &self.cfg;
        let n = c.n_vocab;
        let h = seq.hash;
        let peak_tok = (splitmix64(h ^ 0xfeed) % n as u64) as usize;
        let mut row: Vec<f32> = (0..n)
            .map(|j| {
                let r = splitmix64(h ^ (j as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
                let u = (r >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                c.offset + c.spread * (2.0 * u - 1.0)
            })
            .collect();
        row[peak_tok] += c.peak;
        for &t in seq.history.iter().rev().take(c.echo) {
            if let Some(v) = row.get_mut(t as usize) {
                *v += c.echo_boost;
            }
        }
        row
    }

    fn seq_mut(&mut self, id: SeqId) -> Result<&mut Seq, SourceError> {
        self.seqs
            .get_mut(&id)
            .ok_or(SourceError::UnknownSequence(id))
    }
}

impl LogitSource for HashSource {
    fn n_vocab(&self) -> usize {
        self.cfg.n_vocab
    }

    fn n_ctx(&self) -> usize {
        self.cfg.n_ctx
    }

    fn new_sequence(&mut self) -> Result<SeqId, SourceError> {
        if self.seqs.len() >= self.cfg.max_sequences {
            return Err(SourceError::TooManySequences {
                max: self.cfg.max_sequences,
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        let hash = splitmix64(self.cfg.seed);
        self.seqs.insert(
            id,
            Seq {
                history: Vec::new(),
                hash,
                pending: Vec::new(),
                row: None,
            },
        );
        Ok(id)
    }

    fn fork(&mut self, parent: SeqId) -> Result<SeqId, SourceError> {
        let p = self
            .seqs
            .get(&parent)
            .ok_or(SourceError::UnknownSequence(parent))?;
        if !p.pending.is_empty() {
            return Err(SourceError::Backend(format!(
                "fork of sequence {parent} with pending tokens"
            )));
        }
        let child = Seq {
            history: p.history.clone(),
            hash: p.hash,
            pending: Vec::new(),
            row: None,
        };
        if self.seqs.len() >= self.cfg.max_sequences {
            return Err(SourceError::TooManySequences {
                max: self.cfg.max_sequences,
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        self.seqs.insert(id, child);
        Ok(id)
    }

    fn push(&mut self, seq: SeqId, tokens: &[TokenId]) -> Result<(), SourceError> {
        let n_vocab = self.cfg.n_vocab;
        let n_ctx = self.cfg.n_ctx;
        let s = self.seq_mut(seq)?;
        if let Some(&t) = tokens.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
            return Err(SourceError::TokenOutOfRange { token: t, n_vocab });
        }
        let needed = s.history.len() + s.pending.len() + tokens.len();
        if needed > n_ctx {
            return Err(SourceError::ContextOverflow { seq, needed, n_ctx });
        }
        s.pending.extend_from_slice(tokens);
        s.row = None;
        Ok(())
    }

    fn step(&mut self) -> Result<(), SourceError> {
        let ids: Vec<SeqId> = self
            .seqs
            .iter()
            .filter(|(_, s)| !s.pending.is_empty())
            .map(|(&id, _)| id)
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        self.steps += 1;
        for id in ids {
            let mut s = self.seqs.remove(&id).expect("listed above");
            let pending = std::mem::take(&mut s.pending);
            self.forward += pending.len() as u64;
            for t in pending {
                s.history.push(t);
                s.hash = splitmix64(s.hash ^ (t as u64).wrapping_mul(0x9e37_79b9));
            }
            s.row = Some(self.compute_row(&s));
            self.seqs.insert(id, s);
        }
        Ok(())
    }

    fn logits(&self, seq: SeqId) -> Result<&[f32], SourceError> {
        let s = self
            .seqs
            .get(&seq)
            .ok_or(SourceError::UnknownSequence(seq))?;
        if !s.pending.is_empty() {
            return Err(SourceError::NoLogits(seq));
        }
        s.row.as_deref().ok_or(SourceError::NoLogits(seq))
    }

    fn free(&mut self, seq: SeqId) -> Result<(), SourceError> {
        self.seqs
            .remove(&seq)
            .map(|_| ())
            .ok_or(SourceError::UnknownSequence(seq))
    }

    fn forward_tokens(&self) -> u64 {
        self.forward
    }
}

/// A codec for tests: one id per whitespace-separated word, hashed into `0..n_vocab`; a token's
/// text is `w<id> `; nothing ends generation.
#[derive(Debug, Clone, Copy)]
pub struct WordCodec {
    n_vocab: usize,
}

impl WordCodec {
    /// A codec for a vocabulary of `n_vocab` ids.
    pub fn new(n_vocab: usize) -> Self {
        WordCodec { n_vocab }
    }
}

impl crate::run::Codec for WordCodec {
    fn tokenize(&self, text: &str, _parse_special: bool) -> Result<Vec<TokenId>, String> {
        Ok(text
            .split_whitespace()
            .map(|w| (crate::run::resume::fnv1a64(w.as_bytes()) % self.n_vocab as u64) as TokenId)
            .collect())
    }
    fn piece(&self, token: TokenId) -> Vec<u8> {
        format!("w{token} ").into_bytes()
    }
    fn is_eog(&self, _token: TokenId) -> bool {
        false
    }
}

/// A codec around a tokenizing closure (pieces as [`WordCodec`]'s): for tests of what the
/// experiments do with a tokenizer's output.
pub struct FnCodec<F>(pub F);

impl<F> std::fmt::Debug for FnCodec<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnCodec")
    }
}

impl<F: Fn(&str) -> Result<Vec<TokenId>, String>> crate::run::Codec for FnCodec<F> {
    fn tokenize(&self, text: &str, _parse_special: bool) -> Result<Vec<TokenId>, String> {
        (self.0)(text)
    }
    fn piece(&self, token: TokenId) -> Vec<u8> {
        format!("w{token} ").into_bytes()
    }
    fn is_eog(&self, _token: TokenId) -> bool {
        false
    }
}

/// A codec for the JSON task on the hash source: prompt bytes folded into the vocabulary (at most
/// 40 tokens), token pieces chosen so greedy outputs hit braces, a key, the stop string and the
/// end of generation (token 3).
#[derive(Debug, Clone, Copy)]
pub struct BraceCodec;

impl crate::run::Codec for BraceCodec {
    fn tokenize(&self, text: &str, _parse_special: bool) -> Result<Vec<TokenId>, String> {
        Ok(text
            .bytes()
            .take(40)
            .map(|b| TokenId::from(b) % 500 + 4)
            .collect())
    }
    fn piece(&self, t: TokenId) -> Vec<u8> {
        match t % 23 {
            0 => b"\n\n".to_vec(),
            1 | 2 => b"{".to_vec(),
            3 | 4 => b"}".to_vec(),
            5 => b"\"a\": 1".to_vec(),
            _ => b"x".to_vec(),
        }
    }
    fn is_eog(&self, t: TokenId) -> bool {
        t == 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_depend_only_on_history() {
        let mut s = HashSource::new(HashSourceConfig::default());
        let a = s.new_sequence().unwrap();
        let b = s.new_sequence().unwrap();
        s.push(a, &[1, 2, 3]).unwrap();
        s.push(b, &[1, 2]).unwrap();
        s.step().unwrap();
        let f = s.fork(b).unwrap();
        assert!(matches!(s.logits(f), Err(SourceError::NoLogits(_))));
        s.push(b, &[3]).unwrap();
        s.push(f, &[3]).unwrap();
        s.step().unwrap();
        assert_eq!(s.logits(a).unwrap(), s.logits(b).unwrap());
        assert_eq!(s.logits(a).unwrap(), s.logits(f).unwrap());
        assert_eq!(s.forward_tokens(), 3 + 2 + 1 + 1);
        let row = s.logits(a).unwrap();
        assert!(row.iter().all(|v| (0.0..30.0).contains(v)));
    }

    #[test]
    fn contract_is_enforced() {
        let mut s = HashSource::new(HashSourceConfig {
            max_sequences: 1,
            n_ctx: 4,
            ..Default::default()
        });
        let a = s.new_sequence().unwrap();
        assert!(matches!(
            s.new_sequence(),
            Err(SourceError::TooManySequences { .. })
        ));
        assert!(matches!(
            s.push(a, &[1, 2, 3, 4, 5]),
            Err(SourceError::ContextOverflow { .. })
        ));
        assert!(matches!(
            s.push(a, &[9999]),
            Err(SourceError::TokenOutOfRange { .. })
        ));
        assert!(matches!(s.logits(a), Err(SourceError::NoLogits(_))));
        s.free(a).unwrap();
        assert!(matches!(s.free(a), Err(SourceError::UnknownSequence(_))));
    }
}
