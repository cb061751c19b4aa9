//! A compiled constraint and where the output is in it: the allowed set for the next token.

use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::{JsonCompileOptions, Matcher};
use serde_json::Value;
use toktrie::SimpleVob;

use crate::error::GrammarError;
use crate::keywords::{check_schema, SchemaCheckError, Unenforced};
use crate::limits::{check_lark, on_compile_stack, COMPILE_STACK_BYTES};
use crate::spec::{ConstraintRequest, ConstraintSpec};
use crate::vocab::GrammarVocab;

/// The grammar state of one output. Cloning copies the state (a fork of the output).
pub struct GrammarState {
    matcher: Matcher,
    n_vocab: usize,
    eos: u32,
    /// The allowed set for the next token, computed once per position.
    mask: Option<SimpleVob>,
    /// The first engine error met while decoding (the output is then ended with EOS).
    error: Option<String>,
    label: &'static str,
    /// The schema keywords a lenient compile dropped.
    dropped: Vec<Unenforced>,
    /// Set when the output reached a dead end (see [`DeadEnd`]); shared by clones.
    dead_end: DeadEnd,
}

/// Whether an output's constraint reached a dead end: no token could continue it (or the
/// engine hit a resource limit computing which), so only the end-of-generation token was
/// allowed. An output that ends this way does not match its constraint, and whoever reports
/// the end must not call it a normal stop. Clones share the flag, so a handle taken before the
/// stage goes into a chain sees what the chain's copy met.
#[derive(Clone, Debug, Default)]
pub struct DeadEnd(Arc<OnceLock<String>>);

impl DeadEnd {
    /// What went wrong, in one line, if the output reached a dead end.
    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

impl Clone for GrammarState {
    fn clone(&self) -> Self {
        Self {
            matcher: self.matcher.deep_clone(),
            n_vocab: self.n_vocab,
            eos: self.eos,
            mask: self.mask.clone(),
            error: self.error.clone(),
            label: self.label,
            dropped: self.dropped.clone(),
            dead_end: self.dead_end.clone(),
        }
    }
}

impl std::fmt::Debug for GrammarState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarState")
            .field("label", &self.label)
            .field("n_vocab", &self.n_vocab)
            .field("stopped", &self.matcher.is_stopped())
            .field("error", &self.error)
            .finish()
    }
}

/// A Lark string literal (JSON's escapes are Lark's).
fn lark_literal(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// gauge's JSON compile options, unless the schema brings its own (`x-guidance`):
/// * strict by default: llguidance refuses what it cannot enforce (an overlapping `oneOf`,
///   `min/maxProperties` over optional properties), after [`check_schema`] has refused every
///   keyword it would drop. Lenient (the request's `lenient_schema`, and the lab's A2 scoring,
///   which treats `format` as an annotation as its validator does): those are dropped instead;
/// * whitespace between tokens bounded to 20 characters, as llama.cpp's schema grammars bound it,
///   so a penalised model cannot fill its budget with blank lines inside a value.
fn with_options(schema: &Value, lenient: bool) -> Value {
    let mut schema = schema.clone();
    if let Some(o) = schema.as_object_mut() {
        if !o.contains_key("x-guidance") {
            let opts = JsonCompileOptions {
                lenient,
                whitespace_pattern: Some(r"[ \t\n\r]{0,20}".into()),
                ..JsonCompileOptions::default()
            };
            opts.apply_to(&mut schema);
        }
    }
    schema
}

/// The grammar llguidance compiles, after the size checks of [`crate::limits`] and (for
/// schemas) the keyword check; returns the keywords a lenient compile drops.
fn top_level(req: &ConstraintRequest) -> Result<(TopLevelGrammar, Vec<Unenforced>), GrammarError> {
    let compile_err = |message: String| GrammarError::Compile {
        field: req.field.clone(),
        what: req.spec.kind(),
        message,
    };
    let lark = |text: String| -> Result<TopLevelGrammar, GrammarError> {
        check_lark(&req.field, &text)?;
        Ok(TopLevelGrammar::from_lark(text))
    };
    let schema = |s: &Value| -> Result<(TopLevelGrammar, Vec<Unenforced>), GrammarError> {
        let dropped = check_schema(s).map_err(|e| match e {
            SchemaCheckError::TooLarge { limit } => GrammarError::TooLarge {
                field: req.field.clone(),
                what: "subschemas".into(),
                limit,
            },
        })?;
        if let (false, Some(u)) = (req.lenient, dropped.first()) {
            return Err(GrammarError::Unenforced {
                field: req.field.clone(),
                path: u.path.clone(),
                keyword: u.keyword.clone(),
                why: u.why.clone(),
            });
        }
        Ok((
            TopLevelGrammar::from_json_schema(with_options(s, req.lenient)),
            dropped,
        ))
    };
    Ok(match &req.spec {
        ConstraintSpec::JsonSchema(s) => return schema(s),
        ConstraintSpec::AnyJson => return schema(&serde_json::json!({"type": "object"})),
        ConstraintSpec::Lark(text) => {
            // llama.cpp marks llguidance grammars with a first line `%llguidance {}`.
            let body = match text.trim_start().strip_prefix("%llguidance") {
                Some(rest) => rest.split_once('\n').map_or("", |(_, b)| b).to_string(),
                None => text.clone(),
            };
            (lark(body)?, Vec::new())
        }
        ConstraintSpec::Gbnf(text) => {
            let translated =
                crate::gbnf::gbnf_to_lark(text).map_err(|e| compile_err(e.to_string()))?;
            (lark(translated)?, Vec::new())
        }
        ConstraintSpec::Regex(rx) => (TopLevelGrammar::from_regex(rx), Vec::new()),
        ConstraintSpec::Choice(choices) => {
            let alts: Vec<String> = choices.iter().map(|c| lark_literal(c)).collect();
            (lark(format!("start: {}", alts.join(" | ")))?, Vec::new())
        }
    })
}

impl GrammarState {
    /// Compile `req` for `vocab`, and compute the first mask (so the decode thread does not).
    /// The compile runs on a thread with [`COMPILE_STACK_BYTES`] of stack (see [`crate::limits`]).
    pub fn compile(req: &ConstraintRequest, vocab: &GrammarVocab) -> Result<Self, GrammarError> {
        Self::compile_on_stack(req, vocab, COMPILE_STACK_BYTES)
    }

    /// [`GrammarState::compile`] on a compiler thread with `stack` bytes of stack (the test of
    /// the limits runs them on a fraction of the real stack).
    #[doc(hidden)]
    pub fn compile_on_stack(
        req: &ConstraintRequest,
        vocab: &GrammarVocab,
        stack: usize,
    ) -> Result<Self, GrammarError> {
        let compile_err = |message: String| GrammarError::Compile {
            field: req.field.clone(),
            what: req.spec.kind(),
            message: plain_message(&message),
        };
        // Everything that walks the input recursively (the schema's clone, llguidance's compile
        // and first mask) runs on the compiler's stack.
        let built = on_compile_stack(stack, || -> Result<Self, GrammarError> {
            let (grammar, dropped) = top_level(req)?;
            let parser = vocab
                .factory()
                .create_parser(grammar)
                .map_err(|e| compile_err(e.to_string()))?;
            let matcher = Matcher::new(Ok(parser));
            if let Some(e) = matcher.get_error() {
                return Err(compile_err(e));
            }
            let mut st = Self {
                matcher,
                n_vocab: vocab.n_vocab(),
                eos: vocab.eos()[0],
                mask: None,
                error: None,
                label: req.spec.label(),
                dropped,
                dead_end: DeadEnd::default(),
            };
            // The first mask: an engine error, or a grammar with no way forward from the start,
            // is the request's error.
            if let Some(e) = st.dead_end_here() {
                return Err(compile_err(e));
            }
            Ok(st)
        });
        built.map_err(compile_err)?
    }

    /// The schema keywords a lenient compile dropped (empty for a strict one).
    pub fn dropped(&self) -> &[Unenforced] {
        &self.dropped
    }

    /// What kind of constraint (`json_schema`, `lark`, ...).
    pub fn label(&self) -> &'static str {
        self.label
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The allowed set for the next token (computed on first need at each position).
    fn mask(&mut self) -> Result<&SimpleVob, String> {
        if self.mask.is_none() {
            let m = self.matcher.compute_mask().map_err(|e| e.to_string())?;
            self.mask = Some(m);
        }
        Ok(self.mask.as_ref().expect("just set"))
    }

    /// The allowed set for the next token. If the engine fails (a resource limit; the error is
    /// kept in [`GrammarState::error`]) or the output reaches a dead end ([`DeadEnd`]), only the
    /// end-of-generation token is allowed, so the output ends instead of leaving the grammar.
    /// The checks run once per position, when the mask is computed; later calls read the cache.
    pub fn allowed(&mut self) -> &SimpleVob {
        if self.mask.is_none() {
            if self.matcher.is_stopped() {
                // After the end nothing follows; that is not a dead end.
                self.mask = Some(self.only_eos());
            } else if let Some(e) = self.dead_end_here() {
                self.error.get_or_insert(e.clone());
                self.dead_end.0.get_or_init(|| e);
                self.mask = Some(self.only_eos());
            }
        }
        self.mask.as_ref().expect("set above")
    }

    /// Compute this position's mask; why the output cannot go on from here, if it cannot.
    fn dead_end_here(&mut self) -> Option<String> {
        let eos = self.eos;
        match self.mask() {
            Err(e) => Some(plain_message(&e)),
            // Nothing allowed, or only the end where the output is incomplete: llguidance
            // offers the end when no text can follow, even where the grammar cannot end.
            Ok(m) if at_most_eos(m, eos) => {
                let accepting = self.matcher.is_accepting().unwrap_or(false);
                (!accepting).then(|| DEAD_END.to_string())
            }
            Ok(_) => None,
        }
    }

    fn only_eos(&self) -> SimpleVob {
        let mut m = SimpleVob::alloc(self.n_vocab);
        m.allow_token(self.eos);
        m
    }

    /// The dead-end flag of this output (see [`DeadEnd`]).
    pub fn dead_end(&self) -> DeadEnd {
        self.dead_end.clone()
    }

    /// Is `token` allowed next?
    pub fn is_allowed(&mut self, token: u32) -> bool {
        (token as usize) < self.n_vocab && self.allowed().is_allowed(token)
    }

    /// Advance past a generated token. A token the grammar does not allow is an error (and is
    /// kept in [`GrammarState::error`]); after the grammar has ended, tokens are ignored.
    pub fn consume(&mut self, token: u32) -> Result<(), String> {
        self.mask = None;
        if self.matcher.is_stopped() {
            return Ok(());
        }
        let r = self.matcher.consume_token(token).map_err(|e| e.to_string());
        if let Err(e) = &r {
            self.error.get_or_insert(e.clone());
        }
        r
    }

    /// The grammar has ended (an end-of-generation token was consumed where allowed).
    pub fn is_stopped(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Could the output end here?
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    /// The first engine error, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Back to the start of the grammar.
    pub fn reset(&mut self) {
        self.mask = None;
        if let Err(e) = self.matcher.reset() {
            self.error.get_or_insert(e.to_string());
        }
    }
}

impl GrammarState {
    /// `row` with every forbidden token at `-inf`, into `out` (for callers that decide on a
    /// materialised row instead of through a chain, such as the lab's decode tree).
    pub fn mask_row(&mut self, row: &[f32], out: &mut Vec<f32>) {
        let mask = self.allowed();
        out.clear();
        out.extend(row.iter().enumerate().map(|(i, &v)| {
            if mask.is_allowed(i as u32) {
                v
            } else {
                f32::NEG_INFINITY
            }
        }));
    }
}

/// Does `m` allow nothing but (perhaps) `eos`? Stops at the second allowed token, so a mask
/// with many allowed tokens costs a word or two.
fn at_most_eos(m: &SimpleVob, eos: u32) -> bool {
    let mut seen = 0u32;
    for &w in m.as_slice() {
        seen += w.count_ones();
        if seen > 1 {
            return false;
        }
    }
    seen == 0 || m.is_allowed(eos)
}

/// What a dead end is, in plain words.
const DEAD_END: &str = "no text can continue the output here, and it is incomplete (a part of \
                        the constraint cannot be satisfied)";

/// llguidance's compile errors in plain words: the known ones rephrased for the client who sent
/// the schema, and the rest without the parser-state dump that follows the first line.
fn plain_message(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message).trim();
    if first.contains("NoExtensionBias") {
        return DEAD_END.into();
    }
    if first.contains("oneOf constraints are not supported") {
        return "a `oneOf` whose branches may overlap cannot be enforced as exactly one of them; \
                make the branches disjoint (a `const` or `enum` property that tells them apart), \
                or send `anyOf`"
            .into();
    }
    if first.contains("min/maxProperties only supported") {
        return "`minProperties`/`maxProperties` are enforced only when every property listed in \
                `properties` is `required` (and no others may appear); list the properties the \
                object must have"
            .into();
    }
    first.to_string()
}
