//! The exported C functions (declared in `include/gauge.h`, generated from this file by cbindgen).

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::OnceLock;

use gauge_sampling::SamplingError;

use crate::iface::{as_gauge, into_raw};
use crate::llama_abi::llama_sampler;
use crate::sampler::{parse_mode, GaugeSampler};

/// Number of function pointers in the `struct llama_sampler_i` this library fills (the six
/// classic hooks, then six experimental backend hooks left NULL). `gauge.h` checks it against the
/// `llama.h` it is compiled with.
pub const GAUGE_LLAMA_SAMPLER_I_FIELDS: usize = 12;

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).expect("NULs replaced");
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(c));
}

/// Turn a constructor's result into a sampler pointer, or NULL with the message kept for
/// `gauge_last_error` (and copied into `err` when given).
fn finish(
    built: std::thread::Result<Result<GaugeSampler, SamplingError>>,
    err: *mut c_char,
    err_len: usize,
) -> *mut llama_sampler {
    let msg = match built {
        Ok(Ok(s)) => {
            let smpl = into_raw(s);
            if !smpl.is_null() {
                return smpl;
            }
            "llama_sampler_init returned NULL".to_string()
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "internal error: the constructor panicked".to_string(),
    };
    set_last_error(&msg);
    // SAFETY: the caller promises `err` holds `err_len` bytes when it is not NULL.
    unsafe { copy_message(&msg, err, err_len) };
    ptr::null_mut()
}

/// Copy `msg` into `err[..err_len]`, cut to fit, always NUL-terminated.
unsafe fn copy_message(msg: &str, err: *mut c_char, err_len: usize) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let n = msg.len().min(err_len - 1);
    ptr::copy_nonoverlapping(msg.as_ptr().cast::<c_char>(), err, n);
    *err.add(n) = 0;
}

/// A C string argument as UTF-8, or an error naming the argument.
unsafe fn arg_str<'a>(field: &str, s: *const c_char) -> Result<&'a str, SamplingError> {
    if s.is_null() {
        return Err(SamplingError::param(
            field,
            "NULL",
            "a NUL-terminated UTF-8 string",
        ));
    }
    CStr::from_ptr(s)
        .to_str()
        .map_err(|_| SamplingError::param(field, "invalid UTF-8", "a NUL-terminated UTF-8 string"))
}

/// The penalties stage alone: a drop-in for `llama_sampler_init_penalties`.
///
/// `mode`: `"ctrl"` (llama.cpp's own rule, bit for bit) or `"normalized"` (log-softmax over the
/// full row first, then `ℓ·penalty_repeat` for every seen token). `penalty_last_n = -1` means the
/// whole history (llama.cpp turns -1 into 0, i.e. off). Returns NULL on bad input; the message is
/// then in `gauge_last_error()`. On an array that does not hold all `n_vocab` candidates the
/// normalized mode skips itself and records why (`gauge_sampler_error`).
///
/// # Safety
/// `mode` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn gauge_sampler_init_penalties(
    n_vocab: i32,
    penalty_last_n: i32,
    penalty_repeat: f32,
    penalty_freq: f32,
    penalty_present: f32,
    mode: *const c_char,
) -> *mut llama_sampler {
    let built = catch_unwind(AssertUnwindSafe(|| {
        let mode = parse_mode(arg_str("mode", mode)?)?;
        GaugeSampler::penalties(
            n_vocab,
            penalty_last_n,
            penalty_repeat,
            penalty_freq,
            penalty_present,
            mode,
        )
    }));
    finish(built, ptr::null_mut(), 0)
}

/// gauge's whole chain from request fields (the JSON the CLI and server accept), terminal
/// included: after `apply`, `cur_p->selected` is the chosen token.
///
/// Returns NULL on bad input, with the message in `err` (cut to `err_len - 1` bytes and
/// NUL-terminated; `err` may be NULL) and in `gauge_last_error()`.
///
/// # Safety
/// `params_json` must be NULL or a NUL-terminated string; `err` must be NULL or hold `err_len`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gauge_sampler_init_json(
    params_json: *const c_char,
    n_vocab: i32,
    err: *mut c_char,
    err_len: usize,
) -> *mut llama_sampler {
    let built = catch_unwind(AssertUnwindSafe(|| {
        GaugeSampler::from_json(arg_str("params_json", params_json)?, n_vocab)
    }));
    finish(built, err, err_len)
}

/// Every request field `gauge_sampler_init_json` knows, as JSON text: gauge's table of fields,
/// the one its parser reads (`gauge_sampling::fields::catalog`). `"sampling"` holds one object
/// per field (`name`, `aliases` [{`name`, `from`}], `json` types, `takes`, `gguf`, `read_with`,
/// `doc`), in the order they are read; `"refused"` the fields refused unless neutral; then
/// `"constraint"` and `"no_effect"` names. Static: valid for the life of the process, never freed.
#[no_mangle]
pub extern "C" fn gauge_request_fields() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| {
        // serde_json escapes NUL as \u0000, so the text has none.
        CString::new(gauge_sampling::fields::catalog().to_string()).unwrap_or_default()
    })
    .as_ptr()
}

/// The message of the last gauge constructor that returned NULL on this thread, or NULL. Valid
/// until the next failing constructor call on the same thread.
#[no_mangle]
pub extern "C" fn gauge_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ref().map_or(ptr::null(), |c| c.as_ptr()))
}

/// The first problem a gauge sampler met while sampling since it was created or reset (a
/// normalized penalty skipped on a truncated array, a NaN or `+inf` logit), or NULL when there
/// was none, or when `smpl` is not a gauge sampler. Valid until the sampler is reset or freed.
///
/// # Safety
/// `smpl` must be NULL or a live `llama_sampler`.
#[no_mangle]
pub unsafe extern "C" fn gauge_sampler_error(smpl: *const llama_sampler) -> *const c_char {
    as_gauge(smpl)
        .and_then(|g| g.error())
        .map_or(ptr::null(), CStr::as_ptr)
}

/// `sizeof(struct llama_sampler_i)` as this library fills it, for callers that cannot include
/// `gauge.h` (ctypes): compare with the `llama_sampler_i` of the libllama in use.
#[no_mangle]
pub extern "C" fn gauge_llama_sampler_i_size() -> usize {
    std::mem::size_of::<crate::llama_abi::llama_sampler_i>()
}
