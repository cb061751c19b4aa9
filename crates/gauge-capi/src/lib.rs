//! # gauge-capi (`libgauge`)
//!
//! gauge's samplers as llama.cpp samplers. llama.cpp lets a program add a sampler of its own to
//! any chain (`llama_sampler_init(&iface, ctx)`); this crate builds such samplers from gauge's
//! stages, so a llama.cpp user swaps the sign-branched repeat penalty for the normalized one, or
//! runs gauge's whole chain, without leaving llama.cpp:
//!
//! ```c
//! llama_sampler_chain_add(chain, gauge_sampler_init_penalties(n_vocab, 64, 1.3f, 0, 0, "normalized"));
//! llama_sampler_chain_add(chain, llama_sampler_init_greedy());
//! ```
//!
//! The C API is in `include/gauge.h` (generated from [`ffi`] by cbindgen; a test keeps it
//! current); the guide is `docs/c-api.md`. The library does not contain a llama.cpp:
//! `llama_sampler_init` is resolved against the caller's libllama when the program is linked.
//! [`llama_abi`] states which `llama.h` layout it is built for and how that is checked.
//!
//! Rust users of `llama-cpp-2` get the same samplers as `LlamaSampler`s from gauge-engine
//! (`gauge_engine::llama_sampler`), which wraps [`GaugeSampler`] through [`into_raw`].

pub mod ffi;
pub mod iface;
pub mod llama_abi;
pub mod sampler;

pub use iface::{as_gauge, into_raw};
pub use sampler::{parse_mode, GaugeSampler};
