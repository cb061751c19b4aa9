//! Zero-copy access to a logit row: a 1-D float32 array through the buffer protocol.
//!
//! PyO3 exposes the buffer protocol only from the stable ABI of Python 3.11, and the wheel targets
//! abi3 for 3.9+. `PyObject_GetBuffer` / `PyBuffer_Release` and the `Py_buffer` layout have not
//! changed since Python 3.3 (3.11 froze that exact layout into the stable ABI), so they are
//! declared here and resolved from the running interpreter.
//!
//! A CPU torch tensor has no buffer of its own; its zero-copy `.numpy()` view is used instead.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::os::raw::{c_char, c_int, c_void};

/// CPython's `Py_buffer` (stable since 3.3; part of the limited API since 3.11).
#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut pyo3::ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(
        obj: *mut pyo3::ffi::PyObject,
        view: *mut RawBuffer,
        flags: c_int,
    ) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
}

/// `PyBUF_C_CONTIGUOUS | PyBUF_FORMAT`: a C-contiguous buffer that states its item format.
const FLAGS: c_int = 0x0038 | 0x0004;

/// A held buffer export; released (with the GIL held) on drop.
struct Export {
    view: RawBuffer,
}

impl Drop for Export {
    fn drop(&mut self) {
        // SAFETY: `view` was filled by a successful `PyObject_GetBuffer`, and `Row` (the only
        // owner) is dropped while the GIL is held.
        unsafe { PyBuffer_Release(&mut self.view) }
    }
}

/// A logit row borrowed from a Python object for the duration of one call.
pub struct Row {
    export: Export,
    len: usize,
    /// Set when the data pointer is not 4-byte aligned (numpy allows that): an aligned copy.
    copy: Option<Vec<f32>>,
}

impl Row {
    /// Borrow `obj` (a 1-D float32 buffer, or a CPU float32 torch tensor) without copying.
    pub fn borrow(obj: &Bound<'_, PyAny>) -> PyResult<Row> {
        if is_torch_tensor(obj) {
            return Row::borrow(&torch_cpu_view(obj)?);
        }
        let mut view = std::mem::MaybeUninit::<RawBuffer>::zeroed();
        // SAFETY: `obj` is a live object (the GIL is held); `view` is writable memory of the
        // right layout.
        let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), FLAGS) };
        if rc != 0 {
            let cause = PyErr::fetch(obj.py());
            let err = PyValueError::new_err(format!(
                "row must be a C-contiguous 1-D float32 array (numpy array or CPU torch tensor), got {}",
                type_name(obj)
            ));
            err.set_cause(obj.py(), Some(cause));
            return Err(err);
        }
        // SAFETY: the export succeeded, so `view` is initialised; from here `Export` releases it.
        let export = Export {
            view: unsafe { view.assume_init() },
        };
        let v = &export.view;
        // SAFETY: with PyBUF_FORMAT the exporter sets `format` (a NUL-terminated C string).
        let format = unsafe { std::ffi::CStr::from_ptr(v.format) }.to_string_lossy();
        if !matches!(&*format, "f" | "<f" | "=f" | "@f") || v.itemsize != 4 {
            return Err(PyValueError::new_err(format!(
                "row must hold float32 values, got item format {format:?} ({} bytes per item): convert with .astype(numpy.float32) or .float()",
                v.itemsize
            )));
        }
        if v.ndim != 1 {
            return Err(PyValueError::new_err(format!(
                "row must be 1-D (one logit per vocabulary entry), got {} dimensions",
                v.ndim
            )));
        }
        let len = (v.len / 4) as usize;
        let copy = if !(v.buf as usize).is_multiple_of(std::mem::align_of::<f32>()) {
            let mut out = vec![0f32; len];
            // SAFETY: `buf` holds `len * 4` readable bytes; the destination is a fresh Vec.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    v.buf as *const u8,
                    out.as_mut_ptr() as *mut u8,
                    len * 4,
                )
            };
            Some(out)
        } else {
            None
        };
        Ok(Row { export, len, copy })
    }

    /// The values. The slice stays valid while `self` lives; callers may release the GIL while
    /// reading it, as with any buffer export (the exporter keeps the memory alive).
    pub fn values(&self) -> &[f32] {
        match &self.copy {
            Some(v) => v,
            None if self.len == 0 => &[],
            // SAFETY: C-contiguous, aligned (checked in `borrow`), `len` float32 items, kept
            // alive by the export until `self` is dropped.
            None => unsafe {
                std::slice::from_raw_parts(self.export.view.buf as *const f32, self.len)
            },
        }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "an object".into())
}

fn is_torch_tensor(obj: &Bound<'_, PyAny>) -> bool {
    obj.get_type()
        .getattr("__module__")
        .and_then(|m| m.extract::<String>())
        .is_ok_and(|m| m == "torch")
        && obj.hasattr("data_ptr").unwrap_or(false)
}

/// A CPU float32 tensor's zero-copy numpy view; other devices and dtypes are refused by name.
fn torch_cpu_view<'py>(t: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let device = t.getattr("device")?.getattr("type")?.extract::<String>()?;
    if device != "cpu" {
        return Err(PyValueError::new_err(format!(
            "row is a torch tensor on `{device}`: the chain samples on the CPU, pass row.cpu()"
        )));
    }
    let dtype = t.getattr("dtype")?.str()?.to_string();
    if dtype != "torch.float32" {
        return Err(PyValueError::new_err(format!(
            "row is a {dtype} tensor: the chain reads float32 logits, pass row.float()"
        )));
    }
    t.call_method0("detach")?.call_method0("numpy")
}
