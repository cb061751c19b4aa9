//! The model's tokens as the grammar engine sees them: built once per model, shared by every
//! grammar compiled for it.

use std::sync::Arc;

use llguidance::earley::SlicedBiasComputer;
use llguidance::ParserFactory;
use toktrie::{ApproximateTokEnv, InferenceCapabilities, TokEnv, TokRxInfo, TokTrie};

use crate::error::GrammarError;

/// toktrie's marker for a special (control) token: its text never matches grammar text.
pub const SPECIAL_MARKER: u8 = 0xFF;

/// A token trie over a vocabulary and the parser factory built on it. Cheap to clone (shared).
#[derive(Clone)]
pub struct GrammarVocab {
    inner: Arc<Inner>,
}

struct Inner {
    factory: ParserFactory,
    n_vocab: usize,
    eos: Vec<u32>,
}

impl std::fmt::Debug for GrammarVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarVocab")
            .field("n_vocab", &self.inner.n_vocab)
            .field("eos", &self.inner.eos)
            .finish()
    }
}

impl GrammarVocab {
    /// A vocabulary from every token's bytes, in id order. A special token is its rendered text
    /// prefixed with [`SPECIAL_MARKER`] (so grammar text never matches it), an unused id an empty
    /// entry. `eos` are the end-of-generation tokens, the first one primary: the grammar allows
    /// them exactly where the output may end.
    pub fn from_token_bytes(words: &[Vec<u8>], eos: &[u32]) -> Result<Self, GrammarError> {
        let n_vocab = words.len();
        let &primary = eos
            .first()
            .ok_or_else(|| GrammarError::Vocab("no end-of-generation token".into()))?;
        if let Some(&bad) = eos.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(GrammarError::Vocab(format!(
                "end-of-generation token {bad} is outside the vocabulary of {n_vocab}"
            )));
        }
        let info = TokRxInfo::new(n_vocab as u32, primary);
        let trie = TokTrie::from(&info, words).with_eos_tokens(eos);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new(
            &env,
            InferenceCapabilities::default(),
            &SlicedBiasComputer::general_slices(),
        )
        .map_err(|e| GrammarError::Vocab(e.to_string()))?;
        // Warnings and progress would go to stderr from inside the decode loop.
        factory.set_stderr_log_level(0);
        factory.set_buffer_log_level(0);
        Ok(Self {
            inner: Arc::new(Inner {
                factory,
                n_vocab,
                eos: eos.to_vec(),
            }),
        })
    }

    /// Vocabulary size (the logit row's length).
    pub fn n_vocab(&self) -> usize {
        self.inner.n_vocab
    }

    /// End-of-generation tokens, primary first.
    pub fn eos(&self) -> &[u32] {
        &self.inner.eos
    }

    pub(crate) fn factory(&self) -> &ParserFactory {
        &self.inner.factory
    }
}
