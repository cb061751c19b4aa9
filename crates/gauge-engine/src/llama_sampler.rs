//! gauge's samplers as `llama_cpp_2::sampling::LlamaSampler`s, for Rust programs that drive
//! llama.cpp through llama-cpp-2 and want gauge's penalties (or its whole chain) inside their own
//! chains: `LlamaSampler::chain_simple([llama_sampler::penalties(..)?, LlamaSampler::greedy()])`.
//!
//! These are the samplers of `libgauge` (crate gauge-capi) — the same `llama_sampler_i` table,
//! the same candidate-array rules, including what the normalized penalty does on a truncated
//! array (see [`gauge_capi::sampler`]) — created through the `llama_sampler_init` of the libllama
//! llama-cpp-2 links.
//!
//! llama-cpp-2 has no public constructor from a raw `llama_sampler *`, so [`from_gauge`] builds
//! the `LlamaSampler` by transmuting the non-null pointer: `LlamaSampler` is one field, a
//! `NonNull<llama_sampler>` newtype, and the compile-time checks below pin that (same size and
//! alignment as the pointer, hence the pointer at offset 0). The layout of gauge's
//! `llama_sampler_i` mirror is checked here, field by field, against llama-cpp-sys-2's bindgen
//! struct, i.e. against the `llama.h` that is actually linked.

use std::mem::{align_of, offset_of, size_of};
use std::ptr::NonNull;

use gauge_capi::llama_abi as abi;
use gauge_sampling::params::SamplingParams;
use gauge_sampling::samplers::penalties::PenaltyMode;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_sys_2 as sys;

pub use gauge_capi::GaugeSampler;

use crate::error::Result;

/// Wrap a gauge sampler as a llama-cpp-2 sampler (freed by its `Drop`, or by the chain it joins).
pub fn from_gauge(sampler: GaugeSampler) -> LlamaSampler {
    let raw = gauge_capi::into_raw(sampler).cast::<sys::llama_sampler>();
    // llama_sampler_init is C++ `new`: it throws (aborts) rather than return NULL.
    let raw = NonNull::new(raw).expect("llama_sampler_init returned NULL");
    // SAFETY: `raw` is a live sampler owned by nobody else; LlamaSampler is a pointer newtype
    // (checked below) whose Drop calls llama_sampler_free, the right release for it.
    unsafe { std::mem::transmute::<NonNull<sys::llama_sampler>, LlamaSampler>(raw) }
}

/// gauge's penalties stage alone, as `LlamaSampler::penalties` with a `mode` and `-1` meaning the
/// whole history (see `gauge_sampler_init_penalties` in `gauge.h`).
pub fn penalties(
    n_vocab: usize,
    penalty_last_n: i32,
    penalty_repeat: f32,
    penalty_freq: f32,
    penalty_present: f32,
    mode: PenaltyMode,
) -> Result<LlamaSampler> {
    let s = GaugeSampler::penalties(
        vocab_i32(n_vocab)?,
        penalty_last_n,
        penalty_repeat,
        penalty_freq,
        penalty_present,
        mode,
    )?;
    Ok(from_gauge(s))
}

/// gauge's whole chain from request fields, terminal included (`gauge_sampler_init_json`).
pub fn from_params(params: &SamplingParams, n_vocab: usize) -> Result<LlamaSampler> {
    Ok(from_gauge(GaugeSampler::from_params(
        params,
        vocab_i32(n_vocab)?,
    )?))
}

/// The first problem a gauge sampler met while sampling (see `gauge_sampler_error`), `None` when
/// there was none or `sampler` is not a gauge sampler.
pub fn sampler_error(sampler: &LlamaSampler) -> Option<String> {
    // SAFETY: LlamaSampler is a NonNull<llama_sampler> newtype (checked below); the pointer is
    // live for the borrow, and only read.
    let raw: NonNull<sys::llama_sampler> = unsafe { std::mem::transmute_copy(sampler) };
    let g = unsafe { gauge_capi::as_gauge(raw.as_ptr().cast::<abi::llama_sampler>()) }?;
    g.error().map(|e| e.to_string_lossy().into_owned())
}

fn vocab_i32(n_vocab: usize) -> Result<i32> {
    i32::try_from(n_vocab).map_err(|_| {
        gauge_sampling::SamplingError::param("n_vocab", n_vocab, "1..=2147483647").into()
    })
}

// `LlamaSampler` is exactly one non-null pointer.
const _: () = assert!(size_of::<LlamaSampler>() == size_of::<NonNull<sys::llama_sampler>>());
const _: () = assert!(align_of::<LlamaSampler>() == align_of::<NonNull<sys::llama_sampler>>());

// gauge's mirror of llama.h against the bindgen structs of the linked llama.h.
macro_rules! same_layout {
    ($ours:ty, $theirs:ty, [$($field:ident),+]) => {
        const _: () = assert!(size_of::<$ours>() == size_of::<$theirs>());
        const _: () = assert!(align_of::<$ours>() == align_of::<$theirs>());
        $(const _: () = assert!(offset_of!($ours, $field) == offset_of!($theirs, $field));)+
    };
}
same_layout!(
    abi::llama_sampler_i,
    sys::llama_sampler_i,
    [
        name,
        accept,
        apply,
        reset,
        clone,
        free,
        backend_init,
        backend_accept,
        backend_apply,
        backend_set_input,
        backend_reset,
        copy_state
    ]
);
same_layout!(abi::llama_sampler, sys::llama_sampler, [iface, ctx]);
same_layout!(
    abi::llama_token_data_array,
    sys::llama_token_data_array,
    [data, size, selected, sorted]
);
same_layout!(abi::llama_token_data, sys::llama_token_data, [id, logit, p]);
