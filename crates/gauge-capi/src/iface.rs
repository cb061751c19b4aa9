//! The `llama_sampler_i` table that makes a [`GaugeSampler`] a llama.cpp sampler.
//!
//! `ctx` is a `Box<GaugeSampler>` turned into a raw pointer. `free` releases it; llama.cpp's
//! `llama_sampler_free` then deletes the `llama_sampler` itself, which is why it must come from
//! the caller's `llama_sampler_init`. A panic never crosses into C: each hook catches it, records
//! it as the sampler's error and returns (a `clone` that fails returns NULL).

use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::llama_abi::{
    llama_sampler, llama_sampler_i, llama_sampler_init, llama_token, llama_token_data_array,
};
use crate::sampler::GaugeSampler;

/// One table for every gauge sampler. llama.cpp only reads it; `llama_sampler_copy` requires
/// source and destination to share it, which any two gauge samplers do.
static GAUGE_SAMPLER_I: llama_sampler_i = llama_sampler_i {
    name: Some(name),
    accept: Some(accept),
    apply: Some(apply),
    reset: Some(reset),
    clone: Some(clone),
    free: Some(free),
    backend_init: None,
    backend_accept: None,
    backend_apply: None,
    backend_set_input: None,
    backend_reset: None,
    copy_state: None,
};

/// Hand `sampler` to llama.cpp: a `struct llama_sampler *` owned by the caller (free it with
/// `llama_sampler_free`, or give it to a chain with `llama_sampler_chain_add`).
pub fn into_raw(sampler: GaugeSampler) -> *mut llama_sampler {
    let ctx = Box::into_raw(Box::new(sampler)).cast::<c_void>();
    // SAFETY: llama_sampler_init only stores both pointers; the table is never written through.
    let smpl = unsafe { llama_sampler_init(ptr::addr_of!(GAUGE_SAMPLER_I).cast_mut(), ctx) };
    if smpl.is_null() {
        // SAFETY: ctx came from Box::into_raw just above and was not handed over.
        drop(unsafe { Box::from_raw(ctx.cast::<GaugeSampler>()) });
    }
    smpl
}

/// The gauge sampler behind `smpl`, or `None` when `smpl` is NULL or another kind of sampler.
///
/// # Safety
/// `smpl` must be NULL or a live `llama_sampler`, not used elsewhere for the lifetime `'a`.
pub unsafe fn as_gauge<'a>(smpl: *const llama_sampler) -> Option<&'a mut GaugeSampler> {
    let s = smpl.as_ref()?;
    if !ptr::eq(s.iface, ptr::addr_of!(GAUGE_SAMPLER_I)) || s.ctx.is_null() {
        return None;
    }
    Some(&mut *s.ctx.cast::<GaugeSampler>())
}

unsafe extern "C" fn name(smpl: *const llama_sampler) -> *const c_char {
    match as_gauge(smpl) {
        Some(g) => g.name().as_ptr(),
        None => c"gauge(invalid)".as_ptr(),
    }
}

unsafe extern "C" fn accept(smpl: *mut llama_sampler, token: llama_token) {
    if let Some(g) = as_gauge(smpl) {
        guarded(g, "accept", |g| g.accept(token));
    }
}

unsafe extern "C" fn apply(smpl: *mut llama_sampler, cur_p: *mut llama_token_data_array) {
    if let Some(g) = as_gauge(smpl) {
        // SAFETY: llama.cpp hands a valid array (the caller's contract for llama_sampler_apply).
        guarded(g, "apply", |g| unsafe { g.apply_raw(cur_p) });
    }
}

unsafe extern "C" fn reset(smpl: *mut llama_sampler) {
    if let Some(g) = as_gauge(smpl) {
        guarded(g, "reset", GaugeSampler::reset);
    }
}

unsafe extern "C" fn clone(smpl: *const llama_sampler) -> *mut llama_sampler {
    match as_gauge(smpl) {
        Some(g) => catch_unwind(AssertUnwindSafe(|| into_raw(g.clone()))).unwrap_or_else(|_| {
            eprintln!("gauge: clone panicked; returning NULL");
            ptr::null_mut()
        }),
        None => ptr::null_mut(),
    }
}

unsafe extern "C" fn free(smpl: *mut llama_sampler) {
    if let Some(s) = smpl.as_mut() {
        if ptr::eq(s.iface, ptr::addr_of!(GAUGE_SAMPLER_I)) && !s.ctx.is_null() {
            let ctx = std::mem::replace(&mut s.ctx, ptr::null_mut());
            // SAFETY: ctx is the Box leaked by into_raw, released exactly once (nulled above).
            let boxed = Box::from_raw(ctx.cast::<GaugeSampler>());
            let _ = catch_unwind(AssertUnwindSafe(move || drop(boxed)));
        }
    }
}

/// Run `f`, turning a panic into the sampler's recorded error.
fn guarded(g: &mut GaugeSampler, hook: &str, f: impl FnOnce(&mut GaugeSampler)) {
    if catch_unwind(AssertUnwindSafe(|| f(&mut *g))).is_err() {
        g.record_error(format!("internal error: {hook} panicked"));
    }
}
