//! The part of `llama.h` that a custom sampler touches, mirrored with `#[repr(C)]`.
//!
//! The mirror follows the `llama.h` of the llama.cpp that the workspace builds (llama-cpp-sys-2
//! 0.1.161). `struct llama_sampler_i` there has the six classic hooks followed by six experimental
//! backend hooks; gauge fills the first six and leaves the rest NULL. A libllama whose
//! `llama_sampler_i` has only the first six (llama.cpp before backend sampling) reads a prefix of
//! the same table, so it works too; one whose table differs in the first six would not, which is
//! what the checks are for: `gauge.h` static-asserts the size against the `llama.h` it is
//! compiled with, [`gauge_llama_sampler_i_size`](crate::ffi::gauge_llama_sampler_i_size) reports
//! it at run time, and gauge-engine compares every offset with llama-cpp-sys-2's bindgen structs
//! at compile time.
//!
//! Nothing here is linked from a llama.cpp of gauge's own: [`llama_sampler_init`] is resolved
//! against the caller's libllama when the final program is linked.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

/// `llama_token`.
pub type llama_token = i32;

/// `llama_token_data`: one candidate. Same layout as [`gauge_sampling::TokenData`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct llama_token_data {
    pub id: llama_token,
    pub logit: f32,
    pub p: f32,
}

/// `llama_token_data_array`: the candidates a sampler edits in place. Samplers may reorder the
/// entries, shrink `size`, advance `data`, set `selected` (an index into `data`) and `sorted`.
#[repr(C)]
#[derive(Debug)]
pub struct llama_token_data_array {
    pub data: *mut llama_token_data,
    pub size: usize,
    pub selected: i64,
    pub sorted: bool,
}

/// `struct llama_sampler`: the interface table and the sampler's own state.
#[repr(C)]
#[derive(Debug)]
pub struct llama_sampler {
    pub iface: *const llama_sampler_i,
    pub ctx: *mut c_void,
}

/// An experimental backend hook gauge does not implement; always NULL. The argument types do not
/// matter for a NULL pointer, only the pointer's size does.
pub type backend_hook = Option<unsafe extern "C" fn()>;

/// `struct llama_sampler_i`: six classic hooks, then llama.cpp's six experimental backend hooks
/// (`backend_init`, `backend_accept`, `backend_apply`, `backend_set_input`, `backend_reset`,
/// `copy_state`).
#[repr(C)]
#[derive(Debug)]
pub struct llama_sampler_i {
    pub name: Option<unsafe extern "C" fn(*const llama_sampler) -> *const c_char>,
    pub accept: Option<unsafe extern "C" fn(*mut llama_sampler, llama_token)>,
    pub apply: Option<unsafe extern "C" fn(*mut llama_sampler, *mut llama_token_data_array)>,
    pub reset: Option<unsafe extern "C" fn(*mut llama_sampler)>,
    pub clone: Option<unsafe extern "C" fn(*const llama_sampler) -> *mut llama_sampler>,
    pub free: Option<unsafe extern "C" fn(*mut llama_sampler)>,
    pub backend_init: backend_hook,
    pub backend_accept: backend_hook,
    pub backend_apply: backend_hook,
    pub backend_set_input: backend_hook,
    pub backend_reset: backend_hook,
    pub copy_state: backend_hook,
}

/// Number of function pointers in the `llama_sampler_i` gauge is built for.
pub const LLAMA_SAMPLER_I_FIELDS: usize = crate::ffi::GAUGE_LLAMA_SAMPLER_I_FIELDS;

const _: () = assert!(
    std::mem::size_of::<llama_sampler_i>()
        == LLAMA_SAMPLER_I_FIELDS * std::mem::size_of::<*const c_void>()
);
const _: () = assert!(
    std::mem::size_of::<llama_token_data>() == std::mem::size_of::<gauge_sampling::TokenData>()
);

extern "C" {
    /// From the caller's libllama: `new llama_sampler { iface, ctx }`. A sampler must be allocated
    /// there, because `llama_sampler_free` releases it with C++ `delete`.
    pub fn llama_sampler_init(iface: *mut llama_sampler_i, ctx: *mut c_void) -> *mut llama_sampler;
}
