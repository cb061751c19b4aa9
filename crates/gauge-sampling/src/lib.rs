//! # gauge-sampling
//!
//! A llama.cpp-exact sampler chain with repetition controls that mean the same thing on every model.
//!
//! Every sampler of llama.cpp's chain is here with llama.cpp's parameters, defaults, order, names and
//! chain print, reproducing its numbers (libstdc++'s `mt19937`, distributions and sort tie order
//! included). On top, the repeat penalty has a `normalized` mode (the penalty on log-softmax), which
//! does not depend on where a model's logits happen to sit relative to zero.
//!
//! ## Key types
//!
//! * [`params::SamplingParams`]: one request's settings, with llama-server's field names, aliases
//!   and defaults, the OpenAI names, and gauge's own fields; `validate` checks every range.
//! * [`Chain`]: the stages in llama.cpp's order. [`Chain::from_params`] builds exactly what
//!   llama.cpp's `common_sampler_init` builds; [`Chain::describe`] prints it the same way.
//! * [`chain::ChainBuilder`]: the same chain from `with_*` calls (call order never matters), and
//!   [`chain::ChainBuilder::greedy`].
//! * [`presets::Preset`]: task presets (`json`, `code`, `chat`, `creative`, `llama-cpp-default`).
//! * [`order::SamplerType`]: `--samplers` names and `--sampler-seq` letters.
//! * [`Vocab`]: what the chain needs from a tokenizer (string biases, DRY breakers); optional.
//! * [`explain`]: one step stage by stage (each candidate's logit and p before and after).
//! * [`trace`]: replay recorded logit rows (inline or `.npy`) through a chain, offline.
//! * [`SamplingError`]: every failure is typed; bad input never panics.
//!
//! ## The loop
//!
//! 1. Build a chain from a request: `Chain::from_params(&params, n_vocab, vocab)`.
//! 2. Feed the prompt: `chain.accept_prompt(token)` for each prompt token (penalties and DRY see the
//!    prompt, as in llama.cpp's server and CLI).
//! 3. For every step: `chain.sample(&logits)` fills the candidates, runs every stage, picks a token
//!    and accepts it (llama.cpp's `llama_sampler_sample`). Use `sample_no_accept` + `accept` when
//!    the caller decides later.
//!
//! The candidate array is reused from step to step, so the chain itself allocates nothing per step.
//!
//! ```
//! use gauge_sampling::params::SamplingParams;
//! use gauge_sampling::Chain;
//!
//! let params = SamplingParams::from_json(
//!     r#"{"seed": 42, "top_k": 3, "temperature": 0.7, "repeat_penalty": 1.2,
//!         "repeat_penalty_mode": "normalized"}"#,
//! )?;
//! let n_vocab = 6;
//! let mut chain = Chain::from_params(&params, n_vocab, None)?;
//! assert_eq!(
//!     chain.describe(),
//!     "logits -> penalties -> ?dry -> ?top-n-sigma -> top-k -> ?typical -> top-p -> min-p -> ?xtc -> temp-ext -> dist "
//! );
//!
//! for t in [4, 1] {
//!     chain.accept_prompt(t);
//! }
//! let logits = [0.5, 2.0, 1.5, -1.0, 1.9, 0.0];
//! let token = chain.sample(&logits)?; // sampled and accepted
//! assert!([1, 2, 4].contains(&token)); // top-k 3 keeps tokens 1, 4 and 2
//! # Ok::<(), gauge_sampling::SamplingError>(())
//! ```

//!
//! ## Writing your own stage
//!
//! A stage is a [`Sampler`]: `apply` transforms the candidate array in place (llama.cpp's
//! `llama_sampler_i::apply`), `accept` sees every accepted token, and `shift` says whether the
//! stage's output survives adding a constant to every logit. Any `Clone` stage gets `box_clone`
//! for free. Put it in a chain with the library's own stages (each has `X::new(..)`, re-exported
//! from [`samplers`]) through [`Chain::from_stages`]:
//!
//! ```
//! use gauge_sampling::samplers::{Greedy, TopK};
//! use gauge_sampling::{Candidates, Chain, Sampler, Shift};
//!
//! /// Ban one token.
//! #[derive(Clone, Debug)]
//! struct Ban(i32);
//!
//! impl Sampler for Ban {
//!     fn name(&self) -> &str {
//!         "ban"
//!     }
//!     fn apply(&mut self, cur: &mut Candidates) {
//!         for t in cur.as_mut_slice() {
//!             if t.id == self.0 {
//!                 t.logit = f32::NEG_INFINITY;
//!             }
//!         }
//!     }
//!     fn shift(&self) -> Shift {
//!         Shift::Invariant // a ban does not depend on where the logits sit
//!     }
//! }
//!
//! let stages: Vec<Box<dyn Sampler>> =
//!     vec![Box::new(Ban(1)), Box::new(TopK::new(2)), Box::new(Greedy::new())];
//! let mut chain = Chain::from_stages(4, stages);
//! assert_eq!(chain.describe(), "logits -> ban -> top-k -> greedy ");
//! assert_eq!(chain.sample(&[0.0, 3.0, 2.0, 1.0])?, 2); // token 1 is banned
//! # Ok::<(), gauge_sampling::SamplingError>(())
//! ```
//!
//! ## The row fast path
//!
//! By default a chain does not fill a candidate for every token of the vocabulary: stages that can
//! act sparsely ([`Sampler::apply_sparse`]: penalties, DRY, logit bias, temperature) record edits
//! over the untouched row, and the first dense stage ([`Sampler::apply_from_row`]: top-k, dist,
//! greedy, mirostat) reads row + edits once and leaves a small array. It picks the same token, bit
//! for bit, as llama.cpp's fill path; a stage that implements neither method simply gets the fill
//! path. [`Chain::with_fast_path`]`(false)` switches it off (every step fills the full array, as
//! llama.cpp does), e.g. to inspect every candidate in [`Chain::last_candidates`]. The kernels
//! pick AVX-512, AVX2 or baseline code at run time ([`simd`]; `GAUGE_SIMD=baseline|avx2` caps
//! it), with the same arithmetic in the same order on every level.
//!
//! ## Features
//!
//! * `bench`: synthetic logit rows and benchmark scenarios (`synth`), for `gauge bench sampling`
//!   and this crate's benches. Off by default.
//! * `testing`: internal kernels and hooks this crate's tests reach (`ops`, `sort`, `trace::npy`,
//!   `simd::testing`, the fast-path counters in `chain::testing`). Not part of the API: no
//!   stability promise. Off by default.
//!
//! No feature is needed to use the library; serde and serde_json are its only dependencies
//! besides thiserror.

#![warn(missing_debug_implementations)]
#![deny(missing_docs)]

pub mod candidates;
pub mod chain;
pub mod error;
pub mod explain;
pub mod fields;
pub mod gauge;
mod kernels;
/// llama.cpp's shared helpers (softmax, partial sort, top-k, temperature): internal, public only
/// with the `testing` feature (this crate's tests).
#[cfg(feature = "testing")]
pub mod ops;
#[cfg(not(feature = "testing"))]
mod ops;
pub mod order;
mod overlay;
pub mod params;
pub mod presets;
pub mod rng;
pub mod sampler;
pub mod samplers;
pub mod simd;
/// libstdc++'s sorts and llama.cpp's bucket sort, ported with their tie order: internal, public
/// only with the `testing` feature (this crate's tie-order tests).
#[cfg(feature = "testing")]
pub mod sort;
#[cfg(not(feature = "testing"))]
mod sort;
/// Synthetic logit rows and benchmark scenarios: for benches and tests, behind the `bench` feature.
#[cfg(any(test, feature = "bench"))]
pub mod synth;
pub mod trace;
pub mod vocab;

pub use candidates::{Candidates, TokenData, TokenId};
pub use chain::{Chain, ChainBuilder};
pub use error::{Result, SamplingError};
pub use order::SamplerType;
pub use overlay::Overlay;
pub use params::SamplingParams;
pub use presets::Preset;
pub use sampler::{CloneSampler, Sampler, Shift};
pub use vocab::Vocab;

// The README's Rust example is compiled and run as a doctest, so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
