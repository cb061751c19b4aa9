//! # gauge-sampling
//!
//! A llama.cpp-exact sampler chain with repetition controls that mean the same thing on every model.
//!
//! (crate docs: see README; filled in when the API settles)

#![warn(missing_debug_implementations)]

pub mod candidates;
pub mod chain;
pub mod error;
pub mod gauge;
pub mod ops;
pub mod order;
pub mod overlay;
pub mod params;
pub mod presets;
pub mod rng;
pub mod sampler;
pub mod samplers;
pub mod scan;
pub mod sort;
pub mod synth;
pub mod trace;
pub mod vocab;

pub use candidates::{Candidates, TokenData, TokenId};
pub use chain::Chain;
pub use error::{Result, SamplingError};
pub use sampler::{Sampler, Shift};
pub use vocab::Vocab;
