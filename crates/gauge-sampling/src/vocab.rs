//! What the chain needs to know about a tokenizer, and nothing more.
//!
//! String logit-bias keys, string DRY breakers and string penalty exemptions are resolved through
//! this trait; the engine implements it for a real GGUF vocabulary. Without one, those fields must be
//! given as token ids.

use crate::candidates::TokenId;

/// A vocabulary: sizes, token texts and tokenization.
pub trait Vocab {
    /// Number of rows in the logit vector.
    fn n_vocab(&self) -> usize;
    /// The bytes of one token rendered alone, special tokens included (llama.cpp
    /// `detokenize({id}, special=true)`).
    fn token_bytes(&self, id: TokenId) -> Vec<u8>;
    /// Tokenize text without adding BOS/EOS and without parsing special tokens.
    fn tokenize(&self, text: &str) -> Vec<TokenId>;
    /// End-of-generation tokens (for `ignore_eos`).
    fn eog_tokens(&self) -> Vec<TokenId>;
}
