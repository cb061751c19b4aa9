//! What the experiments need from a tokenizer, in one trait: prompt tokens, the bytes a token adds
//! to the output, its rendered text, end of generation and the chat template. Implemented once
//! for the engine's [`Model`]; tests implement it on toy vocabularies.

use crate::error::LabError;
use gauge_sampling::TokenId;

/// A model's tokenizer as the experiments see it.
pub trait Codec {
    /// Tokenize a prompt with the model's defaults (BOS iff the model asks for one, as the note's
    /// HF tokenizers did); `parse_special` reads control-token text as control tokens.
    fn tokenize(&self, text: &str, parse_special: bool) -> Result<Vec<TokenId>, String>;
    /// The bytes a generated token adds to the output text (control tokens add nothing, as with
    /// `skip_special_tokens=True`).
    fn piece(&self, token: TokenId) -> Vec<u8>;
    /// `tok.decode([id])`: the token's bytes with control tokens RENDERED as their text (a
    /// classifier must not see `<eos>` as an empty token). Defaults to [`Codec::piece`].
    fn token_text(&self, token: TokenId) -> Vec<u8> {
        self.piece(token)
    }
    /// Does this token end generation (EOS / end-of-generation)?
    fn is_eog(&self, token: TokenId) -> bool;
    /// A user message wrapped in the model's chat template.
    fn chat_prompt(&self, message: &str) -> Result<String, String> {
        let _ = message;
        Err("the tokenizer has no chat template".into())
    }
}

#[cfg(feature = "llama")]
impl Codec for gauge_engine::Model {
    fn tokenize(&self, text: &str, parse_special: bool) -> Result<Vec<TokenId>, String> {
        gauge_engine::Model::tokenize(self, text, true, parse_special).map_err(|e| e.to_string())
    }
    fn piece(&self, token: TokenId) -> Vec<u8> {
        self.token_bytes_checked(token, false).unwrap_or_default()
    }
    fn token_text(&self, token: TokenId) -> Vec<u8> {
        self.token_bytes_checked(token, true).unwrap_or_default()
    }
    fn is_eog(&self, token: TokenId) -> bool {
        gauge_engine::Model::is_eog(self, token)
    }
    fn chat_prompt(&self, message: &str) -> Result<String, String> {
        self.apply_chat_template(message).map_err(|e| e.to_string())
    }
}

/// How an experiment turns its prompt texts into tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PromptStyle {
    /// Wrap the text in the chat template first.
    pub chat: bool,
    /// Parse control-token text (see [`Codec::tokenize`]).
    pub parse_special: bool,
}

/// Tokenize `(index, text)` prompts, refusing an empty prompt or a token outside `0..n_vocab`
/// (errors name the prompt's manifest index).
pub(crate) fn tokenize_prompts<'a>(
    codec: &dyn Codec,
    prompts: impl IntoIterator<Item = (usize, &'a str)>,
    style: PromptStyle,
    n_vocab: usize,
) -> Result<Vec<Vec<TokenId>>, LabError> {
    let mut out = Vec::new();
    for (index, text) in prompts {
        let err = |message: String| LabError::Tokenize {
            prefix: index,
            message,
        };
        let ids = if style.chat {
            let wrapped = codec.chat_prompt(text).map_err(err)?;
            codec.tokenize(&wrapped, style.parse_special)
        } else {
            codec.tokenize(text, style.parse_special)
        }
        .map_err(err)?;
        if ids.is_empty() {
            return Err(err("no tokens".into()));
        }
        if let Some(&t) = ids.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
            return Err(err(format!("token {t} outside the vocabulary ({n_vocab})")));
        }
        out.push(ids);
    }
    Ok(out)
}
