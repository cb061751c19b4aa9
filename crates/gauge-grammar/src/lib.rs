//! Grammar and JSON-schema constrained decoding for gauge's chain, backed by `llguidance`.
//!
//! A request's constraint (a JSON Schema, "any JSON", a GBNF or Lark grammar, a regex or a list of
//! choices; [`ConstraintSpec`]) is compiled once, off the decode thread, against the model's
//! [`GrammarVocab`] (every token's bytes, built once per model) into a [`GrammarStage`]: a
//! [`gauge_sampling::Sampler`] that goes *first* in the chain.
//!
//! # Where the constraint acts, and why
//!
//! llama.cpp runs its grammar after the chain: it samples, checks the token against the grammar,
//! and on a forbidden token applies the grammar to the full row and runs the whole chain again.
//! gauge masks first instead (`logits -> grammar -> logit-bias -> penalties -> ...`) and removes
//! every forbidden token from the candidate array before any other stage sees it:
//!
//! * **The chosen token is always allowed, whatever the chain.** Stages only reorder, rescale or
//!   drop candidates; none can bring back a token that is no longer in the array, so no sampler
//!   setting can select a forbidden token (tests `always_allowed`). A chain that removes every
//!   allowed token (a `logit_bias` banning them all) fails with an error, never with a forbidden
//!   token.
//! * **The normalized penalty's log-softmax is over the allowed tokens.** `normalized` computes
//!   `log_softmax` over the current candidate set, which after the mask is the grammar's set: the
//!   penalty scales `log p(token | grammar)`, the distribution that is actually sampled. A token
//!   the grammar forces (the only allowed one) has `log p = 0` and is never penalised, however
//!   often it was seen: the penalty cannot fight the syntax. Over the full row, a forced `"` that
//!   the model finds unlikely would be pushed down further for nothing. `ctrl` reads raw logits,
//!   which the mask leaves untouched, so it acts exactly as without a grammar on the allowed set.
//! * One sample per token (the RNG advances once), and the array after the mask is small in
//!   structural positions, so the later stages run on a few candidates there.
//!
//! The cost is the mask itself on every token, where llama.cpp usually pays it only on a
//! rejection. `llguidance` computes a mask in tens of microseconds for most states
//! (docs/bench.md); the first mask of a request is computed when the stage is compiled, on the
//! request's worker thread, so it is off the decode thread.
//!
//! Prompt tokens do not advance the grammar (`accept_prompt` is a no-op): the constraint applies
//! to the generated text only.

mod error;
mod gbnf;
pub mod keywords;
pub mod limits;
mod spec;
mod stage;
mod state;
mod vocab;

pub use error::GrammarError;
pub use gbnf::{gbnf_to_lark, is_llguidance_lark, looks_like_gbnf, GbnfError};
pub use keywords::{check_schema, Support, Unenforced};
pub use spec::{grammar_text, ConstraintRequest, ConstraintSpec, CONSTRAINT_FIELDS, LENIENT_FIELD};
pub use stage::{constrain, GrammarStage, STAGE_NAME};
pub use state::{DeadEnd, GrammarState};
pub use vocab::{GrammarVocab, SPECIAL_MARKER};
