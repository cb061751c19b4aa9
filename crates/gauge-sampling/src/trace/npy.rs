//! `.npy` files of little-endian float32 (format versions 1.0, 2.0 and 3.0; C or Fortran order):
//! what a trace's `logits` may name, and what `gauge` writes when it records rows.

use std::io::Read;

/// Why a `.npy` file was refused: what was wrong, in words (`TraceError::Npy` carries it with the
/// file's path).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NpyError(String);

impl NpyError {
    /// What was wrong with the file.
    #[cfg(feature = "testing")]
    pub fn message(&self) -> &str {
        &self.0
    }
}

const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// The value of `'key': value` in a numpy header dict, as raw text up to the next top-level comma.
fn header_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = [format!("'{key}'"), format!("\"{key}\"")]
        .iter()
        .find_map(|k| header.find(k.as_str()).map(|i| i + k.len()))?;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    if rest.starts_with('(') {
        return rest.find(')').map(|end| &rest[..=end]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

#[cfg(feature = "testing")]
/// Parse a `.npy` file holding little-endian float32 values. Returns the shape and the values in
/// C (row-major) order; a Fortran-order 2-D array is transposed.
pub fn parse_npy_f32(bytes: &[u8]) -> Result<(Vec<usize>, Vec<f32>), NpyError> {
    read_npy_f32(&mut &bytes[..], bytes.len() as u64)
}

/// Read `n` bytes, or say what was being read when the input ended. Memory grows with the bytes
/// actually read, not with `n`.
fn read_n(r: &mut impl Read, n: usize, what: &str) -> Result<Vec<u8>, String> {
    let mut buf = Vec::with_capacity(n.min(1 << 16));
    r.by_ref()
        .take(n as u64)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read the {what}: {e}"))?;
    if buf.len() < n {
        return Err(format!(
            "cannot read the {what}: the input ends after {} of {n} bytes",
            buf.len()
        ));
    }
    Ok(buf)
}

/// Read a `.npy` array of `len` bytes from `r` (see [`parse_npy_f32`]). Every size is checked
/// against `len` before anything is allocated, and no byte past the data the header declares is
/// read, so a lying header or a source that never ends cannot make this read without bound.
pub fn read_npy_f32(r: &mut impl Read, len: u64) -> Result<(Vec<usize>, Vec<f32>), NpyError> {
    read(r, len).map_err(NpyError)
}

/// [`read_npy_f32`], with the message as a string.
fn read(r: &mut impl Read, len: u64) -> Result<(Vec<usize>, Vec<f32>), String> {
    if len < 10 {
        let head = read_n(r, len as usize, "magic")?;
        return Err(if head.starts_with(NPY_MAGIC) {
            format!("truncated header: the file ends after {len} bytes")
        } else {
            "not a .npy file (no \\x93NUMPY magic)".into()
        });
    }
    let pre = read_n(r, 10, "preamble")?;
    if &pre[..6] != NPY_MAGIC {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let (major, minor) = (pre[6], pre[7]);
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([pre[8], pre[9]]) as u64, 10u64),
        2 | 3 if len < 12 => {
            return Err(format!(
                "truncated header: a version {major}.{minor} file needs a 4-byte header length \
                 but ends after {len} bytes"
            ))
        }
        2 | 3 => {
            let more = read_n(r, 2, "header length")?;
            let n = u32::from_le_bytes([pre[8], pre[9], more[0], more[1]]) as u64;
            (n, 12u64)
        }
        _ => return Err(format!("unsupported .npy format version {major}.{minor}")),
    };
    if header_len > len - start {
        return Err(format!(
            "truncated header: it declares {header_len} bytes but only {} follow",
            len - start
        ));
    }
    let header = read_n(r, header_len as usize, "header")?;
    let header = std::str::from_utf8(&header).map_err(|_| "header is not text")?;
    let (shape, fortran) = parse_header(header)?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("shape overflows")?;
    let want = count.checked_mul(4).ok_or("shape overflows")?;
    let body_len = len - start - header_len;
    if body_len != want as u64 {
        return Err(format!(
            "shape {shape:?} needs {want} data bytes but the file has {body_len}"
        ));
    }
    // `len` is trusted only as far as the reader bears it out: reserve at most 1 Mi values up front.
    let mut data = Vec::with_capacity(count.min(1 << 20));
    let mut block = vec![0u8; want.min(1 << 16)];
    let mut left = want;
    while left > 0 {
        let n = left.min(block.len());
        r.read_exact(&mut block[..n])
            .map_err(|e| format!("cannot read the data: {e}"))?;
        data.extend(
            block[..n]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        left -= n;
    }
    if fortran && shape.len() == 2 && shape[0] > 1 && shape[1] > 1 {
        let (r, c) = (shape[0], shape[1]);
        let mut t = vec![0.0f32; data.len()];
        for i in 0..r {
            for j in 0..c {
                t[i * c + j] = data[j * r + i];
            }
        }
        data = t;
    } else if fortran && shape.len() > 2 {
        return Err("Fortran-order arrays of more than 2 dimensions are not supported".into());
    }
    Ok((shape, data))
}

/// The shape and the Fortran-order flag of a `<f4` header dict.
fn parse_header(header: &str) -> Result<(Vec<usize>, bool), String> {
    let descr = header_value(header, "descr").ok_or("header has no 'descr'")?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    if descr != "<f4" {
        return Err(format!(
            "dtype {descr:?}: expected '<f4' (little-endian float32)"
        ));
    }
    let fortran = match header_value(header, "fortran_order") {
        Some("False") => false,
        Some("True") => true,
        _ => return Err("header has no 'fortran_order' True/False".into()),
    };
    let shape_text = header_value(header, "shape").ok_or("header has no 'shape'")?;
    let shape = shape_text
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| format!("bad shape {shape_text}"))?;
    Ok((shape, fortran))
}

#[cfg(feature = "testing")]
/// Write `rows` (each `n_vocab` wide) as a version 1.0 `.npy` file of little-endian float32.
pub fn write_npy_f32(
    out: &mut impl std::io::Write,
    n_vocab: usize,
    rows: &[f32],
) -> std::io::Result<()> {
    let n_rows = rows.len().checked_div(n_vocab).unwrap_or(0);
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({n_rows}, {n_vocab}), }}");
    // Magic (6) + version (2) + length (2) + header + '\n' is padded to a multiple of 64.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    out.write_all(NPY_MAGIC)?;
    out.write_all(&[1, 0])?;
    out.write_all(&(header.len() as u16).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    for &x in &rows[..n_rows * n_vocab] {
        out.write_all(&x.to_le_bytes())?;
    }
    Ok(())
}
