//! `Model`: a GGUF model loaded through llama.cpp, with its tokenizer, chat template and
//! end-of-generation tokens.
//!
//! Design choices:
//! - **One backend per process.** llama.cpp's backend is initialised once (llama-cpp-2 refuses a
//!   second `LlamaBackend::init`), in a `OnceLock`, together with the log hook.
//! - **Quiet by default.** llama.cpp logs every tensor it loads; the hook drops everything unless
//!   `GAUGE_LLAMA_LOG=1`, but keeps the last warning/error lines so a failed load can say why.
//! - **Ids are checked before they cross the FFI.** llama.cpp indexes its vocabulary with
//!   `std::vector::at`; an out-of-range id would throw through C and abort the process, so every
//!   method that takes a token id checks it first and returns a typed error.
//! - **Streaming text.** A token may end in the middle of a UTF-8 character (byte-fallback
//!   tokens), so [`Utf8Stream`] holds incomplete bytes until the next token completes them.

use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use gauge_sampling::{TokenId, Vocab};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use crate::error::{EngineError, Result};
use crate::registry::{self, Registry};
use crate::sampling_defaults::ModelSamplingDefaults;

/// Options for loading a model and for the contexts made from it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ModelOptions {
    /// Context window per sequence, in tokens (llama.cpp rounds it up to a multiple of 256).
    pub n_ctx: u32,
    /// Threads for decoding; 0 = auto (all available cores but one, at least one).
    pub n_threads: u32,
    /// Sequences one context can hold at once (the batch width of a `LlamaSource`).
    pub n_seq_max: u32,
    /// Most tokens per `llama_decode` call (prefill chunk size).
    pub n_batch: u32,
    /// Layers offloaded to a GPU (needs a GPU feature: `cuda`, `vulkan` or `metal`; 0 = CPU
    /// only; a CPU build refuses more).
    pub n_gpu_layers: u32,
    /// One KV buffer shared by all sequences: forks then share the prefix cells instead of
    /// copying them, but every sequence attends over the whole buffer. Off by default.
    pub kv_unified: bool,
    /// Attention entirely in f32: an f32 KV cache instead of llama.cpp's default f16, and no
    /// flash attention (whose CPU kernel accumulates in f16). Each moves a float32 model's logits
    /// by ~0.01–0.02 (measured against HF fp32: docs/results.md, Table 3); for logit comparisons
    /// against other float32 engines.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub f32_attention: bool,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            n_ctx: 2048,
            n_threads: 0,
            n_seq_max: 1,
            n_batch: 512,
            n_gpu_layers: 0,
            kv_unified: false,
            f32_attention: false,
        }
    }
}

impl ModelOptions {
    /// Check the ranges llama.cpp would otherwise assert on.
    pub fn validate(&self) -> Result<()> {
        if self.n_ctx == 0 || self.n_ctx > 1 << 20 {
            return Err(EngineError::option("n_ctx", self.n_ctx, "1..=1048576"));
        }
        if self.n_seq_max == 0 || self.n_seq_max > 256 {
            return Err(EngineError::option(
                "n_seq_max",
                self.n_seq_max,
                "1..=256 (LLAMA_MAX_SEQ)",
            ));
        }
        if self.n_batch == 0 || self.n_batch > 1 << 16 {
            return Err(EngineError::option("n_batch", self.n_batch, "1..=65536"));
        }
        if self.n_gpu_layers > 0 && crate::GPU_BACKEND.is_none() {
            return Err(EngineError::option(
                "n_gpu_layers",
                self.n_gpu_layers,
                "0: this gauge was built without a GPU backend (rebuild with \
                 `--features cuda`, `vulkan` or `metal` to offload layers)",
            ));
        }
        if self.n_threads > 1024 {
            return Err(EngineError::option(
                "n_threads",
                self.n_threads,
                "0 (auto) ..= 1024",
            ));
        }
        Ok(())
    }

    /// The thread count to give llama.cpp. Auto leaves one core free: ggml's threads spin at
    /// barriers, and when they outnumber the free cores (a busy or small machine) a token can
    /// take 50x longer; one spare core removes that cliff for a small loss on an idle machine.
    pub fn threads(&self) -> i32 {
        if self.n_threads == 0 {
            let n = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            n.saturating_sub(1).max(1) as i32
        } else {
            self.n_threads as i32
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Backend and logging

static BACKEND: OnceLock<std::result::Result<LlamaBackend, String>> = OnceLock::new();
static LOG_TAIL: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
static LOG_VERBOSE: OnceLock<bool> = OnceLock::new();

const LOG_TAIL_LINES: usize = 8;

fn log_verbose() -> bool {
    *LOG_VERBOSE.get_or_init(|| std::env::var("GAUGE_LLAMA_LOG").is_ok_and(|v| v == "1"))
}

/// llama.cpp/ggml log hook: print only when asked, remember recent warnings and errors.
unsafe extern "C" fn log_hook(
    level: llama_cpp_sys_2::ggml_log_level,
    text: *const c_char,
    _ud: *mut c_void,
) {
    if text.is_null() {
        return;
    }
    let verbose = log_verbose();
    let keep = level == llama_cpp_sys_2::GGML_LOG_LEVEL_WARN
        || level == llama_cpp_sys_2::GGML_LOG_LEVEL_ERROR;
    if !verbose && !keep {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string valid for the call.
    let s = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    if verbose {
        eprint!("{s}");
    }
    if keep {
        if let Ok(mut tail) = LOG_TAIL.lock() {
            if tail.len() == LOG_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(s.trim_end().to_string());
        }
    }
}

/// Forget the remembered log lines (before an operation whose failure should be explained).
fn log_tail_clear() {
    if let Ok(mut t) = LOG_TAIL.lock() {
        t.clear();
    }
}

/// The remembered warning/error lines, joined, or a fallback.
pub(crate) fn log_tail(fallback: &str) -> String {
    let t = LOG_TAIL
        .lock()
        .map(|t| t.iter().cloned().collect::<Vec<_>>().join(" | "))
        .unwrap_or_default();
    if t.is_empty() {
        fallback.to_string()
    } else {
        t
    }
}

/// The process-wide llama.cpp backend, initialised on first use.
pub fn backend() -> Result<&'static LlamaBackend> {
    BACKEND
        .get_or_init(|| {
            // SAFETY: installing a log callback is a plain setter; the hook is 'static.
            unsafe { llama_cpp_sys_2::llama_log_set(Some(log_hook), std::ptr::null_mut()) };
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| EngineError::Backend(e.clone()))
}

// ---------------------------------------------------------------------------------------------
// Model

/// A loaded GGUF model. Share it with `Arc`; contexts (`LlamaSource`) borrow it.
pub struct Model {
    inner: LlamaModel,
    path: PathBuf,
    options: ModelOptions,
    n_vocab: usize,
    eog: Vec<TokenId>,
    suppress: Vec<TokenId>,
    add_bos: bool,
    chat_template: Option<LlamaChatTemplate>,
    /// The GGUF's `general.sampling.*` defaults, read as llama.cpp reads them.
    sampling_defaults: ModelSamplingDefaults,
    /// llama-cpp-2 notes that creating two contexts of one model concurrently is unsound.
    ctx_lock: Mutex<()>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("path", &self.path)
            .field("n_vocab", &self.n_vocab)
            .field("eog", &self.eog)
            .field("chat_template", &self.chat_template.is_some())
            .finish()
    }
}

/// A short description for `gauge models` and reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModelInfo {
    pub path: PathBuf,
    pub architecture: String,
    pub name: String,
    pub n_vocab: usize,
    pub n_ctx_train: u32,
    pub n_layer: u32,
    pub n_params: u64,
    pub size_bytes: u64,
    pub has_chat_template: bool,
    pub eog_tokens: Vec<TokenId>,
}

impl Model {
    /// Load a GGUF file. The path is checked first (exists, not a directory, GGUF magic), so the
    /// common mistakes get a precise error instead of llama.cpp's "failed to load".
    pub fn load(path: impl AsRef<Path>, options: ModelOptions) -> Result<Model> {
        let path = path.as_ref();
        options.validate()?;
        registry::check_gguf(path)?;
        let backend = backend()?;
        let params = LlamaModelParams::default().with_n_gpu_layers(options.n_gpu_layers);
        log_tail_clear();
        let inner =
            LlamaModel::load_from_file(backend, path, &params).map_err(|e| EngineError::Load {
                path: path.to_path_buf(),
                detail: log_tail(&e.to_string()),
            })?;
        let (n, eog, suppress, add_bos) = {
            let vocab = inner.vocab();
            let n = vocab.n_tokens();
            let eog: Vec<TokenId> = (0..n.max(0))
                .filter(|&t| vocab.is_eog(LlamaToken(t)))
                .collect();
            let suppress: Vec<TokenId> = vocab.suppress_tokens().iter().map(|t| t.0).collect();
            (n, eog, suppress, vocab.should_add_bos())
        };
        if n <= 0 {
            return Err(EngineError::Load {
                path: path.to_path_buf(),
                detail: "the model has no vocabulary".into(),
            });
        }
        let n_vocab = n as usize;
        let chat_template = inner.chat_template(None).ok();
        // llama.cpp's own text of each key (`llama_model_meta_val_str`); a key it lacks, or an
        // array (llama.cpp keeps no text for those), is absent.
        let sampling_defaults = ModelSamplingDefaults::from_meta(|k| inner.meta_val_str(k).ok());
        Ok(Model {
            inner,
            path: path.to_path_buf(),
            options,
            n_vocab,
            eog,
            suppress,
            add_bos,
            chat_template,
            sampling_defaults,
            ctx_lock: Mutex::new(()),
        })
    }

    /// Resolve a registry name (pulling it on first use) or a local path, then load it.
    pub fn open(name_or_path: &str, options: ModelOptions) -> Result<Model> {
        let path = Registry::from_env()?.resolve_model(name_or_path)?;
        Model::load(path, options)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sampling defaults the model's GGUF gives (`general.sampling.*`), which llama.cpp
    /// applies to every field the user did not set (see [`ModelSamplingDefaults::apply`]).
    pub fn sampling_defaults(&self) -> &ModelSamplingDefaults {
        &self.sampling_defaults
    }

    pub fn options(&self) -> &ModelOptions {
        &self.options
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// End-of-generation tokens (EOS, EOT, `<|im_end|>`, ...), ascending.
    pub fn eog_tokens(&self) -> &[TokenId] {
        &self.eog
    }

    /// Tokens the GGUF asks samplers to ban (`tokenizer.ggml.suppress_tokens`); llama.cpp's
    /// common adds them to the logit-bias stage as `-inf`.
    pub fn suppress_tokens(&self) -> &[TokenId] {
        &self.suppress
    }

    /// Whether `token` ends generation.
    pub fn is_eog(&self, token: TokenId) -> bool {
        self.eog.binary_search(&token).is_ok()
    }

    /// Whether tokenizing a prompt adds BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn has_chat_template(&self) -> bool {
        self.chat_template.is_some()
    }

    /// The raw chat template stored in the GGUF, if any.
    pub fn chat_template_text(&self) -> Option<String> {
        self.chat_template.as_ref().and_then(|t| t.to_string().ok())
    }

    pub fn info(&self) -> ModelInfo {
        ModelInfo {
            path: self.path.clone(),
            architecture: self
                .inner
                .meta_val_str("general.architecture")
                .unwrap_or_default(),
            name: self.inner.meta_val_str("general.name").unwrap_or_default(),
            n_vocab: self.n_vocab,
            n_ctx_train: self.inner.n_ctx_train(),
            n_layer: self.inner.n_layer(),
            n_params: self.inner.n_params(),
            size_bytes: self.inner.size(),
            has_chat_template: self.has_chat_template(),
            eog_tokens: self.eog.clone(),
        }
    }

    pub(crate) fn llama(&self) -> &LlamaModel {
        &self.inner
    }

    /// A new llama.cpp context (serialised per model; see `ctx_lock`).
    pub(crate) fn new_context(&self, params: LlamaContextParams) -> Result<LlamaContext<'_>> {
        let backend = backend()?;
        let _g = self.ctx_lock.lock().unwrap_or_else(|p| p.into_inner());
        log_tail_clear();
        self.inner
            .new_context(backend, params)
            .map_err(|e| EngineError::Context(log_tail(&e.to_string())))
    }

    /// Check a token id before it reaches llama.cpp.
    pub fn check_token(&self, token: TokenId) -> Result<()> {
        if token < 0 || token as usize >= self.n_vocab {
            return Err(EngineError::TokenOutOfRange {
                token,
                n_vocab: self.n_vocab,
            });
        }
        Ok(())
    }

    /// Tokenize `text`. `add_special` adds BOS (if the model wants it); `parse_special` turns
    /// special-token text such as `<|im_start|>` into the special token.
    pub fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<TokenId>> {
        if text.len() > (i32::MAX as usize) / 2 {
            return Err(EngineError::Text(format!(
                "{} bytes is too long to tokenize",
                text.len()
            )));
        }
        let toks = self
            .inner
            .vocab()
            .tokenize(text.as_bytes(), add_special, parse_special);
        Ok(toks.into_iter().map(|t| t.0).collect())
    }

    /// Tokenize a prompt as llama.cpp's tools do: BOS if the model wants it, special tokens parsed.
    pub fn tokenize_prompt(&self, text: &str) -> Result<Vec<TokenId>> {
        self.tokenize(text, true, true)
    }

    /// The bytes of one token. `special = false` renders control tokens (EOS, `<|im_end|>`) as
    /// nothing, as generated text should; `true` shows their text.
    pub fn token_bytes_checked(&self, token: TokenId, special: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.token_piece_into(token, special, &mut out)?;
        Ok(out)
    }

    /// Append one token's bytes to `out` (no allocation once `out` has room).
    pub fn token_piece_into(&self, token: TokenId, special: bool, out: &mut Vec<u8>) -> Result<()> {
        self.check_token(token)?;
        self.inner
            .vocab()
            .token_to_piece_into(LlamaToken(token), out, special, None);
        Ok(())
    }

    /// Every token's bytes as a grammar engine reads them (llama.cpp's llguidance glue does the
    /// same): the text a token adds to the output, or, for a control token (which adds nothing),
    /// its own text behind the marker byte `0xFF`, so no grammar text ever matches it. One pass
    /// over the vocabulary: build it once per model.
    pub fn grammar_token_bytes(&self) -> Vec<Vec<u8>> {
        let mut words = Vec::with_capacity(self.n_vocab);
        let mut buf = Vec::with_capacity(64);
        for id in 0..self.n_vocab as TokenId {
            buf.clear();
            self.inner
                .vocab()
                .token_to_piece_into(LlamaToken(id), &mut buf, false, None);
            if buf.is_empty() {
                self.inner
                    .vocab()
                    .token_to_piece_into(LlamaToken(id), &mut buf, true, None);
                if !buf.is_empty() {
                    buf.insert(0, 0xFF);
                }
            }
            words.push(buf.clone());
        }
        words
    }

    /// The end-of-generation tokens for a grammar, the primary one first (EOT when the model has
    /// one, else EOS, as llama.cpp's llguidance glue), then every other one.
    pub fn grammar_eos(&self) -> Vec<u32> {
        let eot = self.inner.vocab().eot().0;
        let primary = if eot >= 0 {
            eot
        } else {
            self.inner.vocab().eos().0
        };
        let mut out = Vec::with_capacity(self.eog.len() + 1);
        if primary >= 0 && (primary as usize) < self.n_vocab {
            out.push(primary as u32);
        }
        out.extend(
            self.eog
                .iter()
                .filter(|&&t| t != primary)
                .map(|&t| t as u32),
        );
        out
    }

    /// Text of a token sequence (control tokens rendered as nothing), invalid UTF-8 replaced.
    pub fn detokenize(&self, tokens: &[TokenId]) -> Result<String> {
        let mut bytes = Vec::new();
        for &t in tokens {
            self.token_piece_into(t, false, &mut bytes)?;
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The prompt for one user message in the model's chat template, ending with the opening of
    /// the assistant turn (llama.cpp `llama_chat_apply_template`, `add_ass = true`).
    pub fn apply_chat_template(&self, user_message: &str) -> Result<String> {
        let tmpl = self
            .chat_template
            .as_ref()
            .ok_or(EngineError::NoChatTemplate)?;
        if user_message.len() > (i32::MAX as usize) / 4 {
            return Err(EngineError::Text(
                "the message is too long for the chat template".into(),
            ));
        }
        let msg = LlamaChatMessage::new("user".into(), user_message.into())
            .map_err(|e| EngineError::Text(format!("the message contains a NUL byte ({e})")))?;
        self.inner
            .apply_chat_template(tmpl, &[msg], true)
            .map_err(|e| EngineError::ChatTemplate(e.to_string()))
    }

    /// A whole conversation (`(role, content)` pairs: system, user, assistant, ...) in the
    /// model's chat template, ending with the opening of the assistant turn. The server's
    /// chat endpoint needs more than the single user message of [`Model::apply_chat_template`].
    pub fn apply_chat_messages(&self, messages: &[(&str, &str)]) -> Result<String> {
        let tmpl = self
            .chat_template
            .as_ref()
            .ok_or(EngineError::NoChatTemplate)?;
        self.apply_chat_messages_with(tmpl, messages)
    }

    /// [`Model::apply_chat_messages`] with another template: one of llama.cpp's built-in names
    /// (`chatml`, `llama3`, `gemma`, ...) or a template text llama.cpp recognises by its markers
    /// (llama-server's `--chat-template` without `--jinja`).
    pub fn apply_chat_messages_named(
        &self,
        template: &str,
        messages: &[(&str, &str)],
    ) -> Result<String> {
        let tmpl = LlamaChatTemplate::new(template).map_err(|e| {
            EngineError::Text(format!("the chat template contains a NUL byte ({e})"))
        })?;
        self.apply_chat_messages_with(&tmpl, messages)
    }

    /// The text of the BOS and EOS tokens (for Jinja chat templates' `bos_token`/`eos_token`);
    /// empty for a model without one.
    pub fn bos_eos_text(&self) -> (String, String) {
        let vocab = self.inner.vocab();
        let text = |t: LlamaToken| {
            self.token_bytes_checked(t.0, true)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default()
        };
        (text(vocab.bos()), text(vocab.eos()))
    }

    fn apply_chat_messages_with(
        &self,
        tmpl: &LlamaChatTemplate,
        messages: &[(&str, &str)],
    ) -> Result<String> {
        let total: usize = messages.iter().map(|(r, c)| r.len() + c.len()).sum();
        if total > (i32::MAX as usize) / 4 {
            return Err(EngineError::Text(
                "the conversation is too long for the chat template".into(),
            ));
        }
        let msgs = messages
            .iter()
            .map(|&(role, content)| {
                LlamaChatMessage::new(role.into(), content.into())
                    .map_err(|e| EngineError::Text(format!("a message contains a NUL byte ({e})")))
            })
            .collect::<Result<Vec<_>>>()?;
        self.inner
            .apply_chat_template(tmpl, &msgs, true)
            .map_err(|e| EngineError::ChatTemplate(e.to_string()))
    }
}

impl Vocab for Model {
    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// `detokenize({id}, special = true)`; an out-of-range id renders as nothing.
    fn token_bytes(&self, id: TokenId) -> Vec<u8> {
        self.token_bytes_checked(id, true).unwrap_or_default()
    }

    /// No BOS, no special-token parsing (how llama.cpp resolves string biases and DRY breakers).
    fn tokenize(&self, text: &str) -> Vec<TokenId> {
        Model::tokenize(self, text, false, false).unwrap_or_default()
    }

    fn eog_tokens(&self) -> Vec<TokenId> {
        self.eog.clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Streaming UTF-8

/// Turns a stream of token bytes into text pieces that are always whole characters.
///
/// Bytes of an incomplete character are held until the next push completes them; bytes that can
/// never form a character become U+FFFD, as `String::from_utf8_lossy` would render them.
#[derive(Clone, Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add bytes; append every complete character to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut String) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // SAFETY-free: from_utf8 just said this prefix is valid.
                    out.push_str(
                        std::str::from_utf8(&self.pending[start..start + valid])
                            .unwrap_or_default(),
                    );
                    start += valid;
                    match e.error_len() {
                        // Incomplete character at the end: keep it for the next push.
                        None => break,
                        Some(n) => {
                            out.push('\u{FFFD}');
                            start += n;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
    }

    /// Flush what is left (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self, out: &mut String) {
        if !self.pending.is_empty() {
            out.push_str(&String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = Utf8Stream::new();
        let mut pieces = Vec::new();
        for c in chunks {
            let mut out = String::new();
            s.push(c, &mut out);
            pieces.push(out);
        }
        let mut out = String::new();
        s.finish(&mut out);
        pieces.push(out);
        pieces
    }

    #[test]
    fn utf8_character_split_across_tokens_is_emitted_whole() {
        // "é" = C3 A9, "😀" = F0 9F 98 80
        let p = stream(&[b"caf\xC3", b"\xA9 ", b"\xF0\x9F", b"\x98", b"\x80!"]);
        assert_eq!(p, ["caf", "é ", "", "", "😀!", ""]);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let p = stream(&[b"a\xFFb", b"\xC3"]);
        assert_eq!(p, ["a\u{FFFD}b", "", "\u{FFFD}"]);
    }

    #[test]
    fn options_out_of_range_are_typed_errors() {
        let bad = ModelOptions {
            n_seq_max: 0,
            ..Default::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(EngineError::Option {
                field: "n_seq_max",
                ..
            })
        ));
        let bad = ModelOptions {
            n_seq_max: 257,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let bad = ModelOptions {
            n_ctx: 0,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        assert!(ModelOptions::default().validate().is_ok());
    }
}
