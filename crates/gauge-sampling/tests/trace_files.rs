//! Issue 9, files: a trace and its `.npy` rows are read only from regular files, and never more of
//! a `.npy` than its header declares. Each test is named after the defect it pins down.

use gauge_sampling::trace::npy::{parse_npy_f32, read_npy_f32};
use gauge_sampling::trace::{replay, Trace, TraceError};
use serde_json::json;
use std::io::Read;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gauge-trace-files-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_trace(dir: &Path, logits: &str) -> PathBuf {
    let p = dir.join("trace.json");
    std::fs::write(&p, json!({"n_vocab": 2, "logits": logits}).to_string()).unwrap();
    p
}

/// The `Io` error of `res`, as text; anything else fails the test.
fn io_message<T: std::fmt::Debug>(res: Result<T, TraceError>) -> String {
    match res {
        Err(e @ TraceError::Io { .. }) => e.to_string(),
        other => panic!("expected an Io error, got {other:?}"),
    }
}

/// A hand-written v1 `.npy` of `<f4` rows (independent of the library's writer).
fn npy_v1(shape: &str, vals: &[f32]) -> Vec<u8> {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(vals.iter().flat_map(|x| x.to_le_bytes()));
    out
}

#[test]
#[cfg(unix)]
fn dev_zero_as_logits_is_refused_not_read_without_bound() {
    let dir = scratch("dev-zero");
    let msg = io_message(replay(write_trace(&dir, "/dev/zero")));
    assert!(
        msg.contains("/dev/zero") && msg.contains("not a regular file (a character device)"),
        "{msg}"
    );
}

#[test]
#[cfg(unix)]
fn dev_zero_as_the_trace_itself_is_refused() {
    let msg = io_message(replay("/dev/zero"));
    assert!(msg.contains("not a regular file"), "{msg}");
}

#[test]
#[cfg(unix)]
fn fifo_as_logits_is_refused_without_blocking_on_open() {
    let dir = scratch("fifo");
    let fifo = dir.join("rows.npy");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(st.success());
    // Before the fix, opening the FIFO blocked forever (no writer ever comes).
    let msg = io_message(replay(write_trace(&dir, "rows.npy")));
    assert!(msg.contains("not a regular file (a FIFO)"), "{msg}");
}

#[test]
fn directory_as_logits_is_refused() {
    let dir = scratch("dir");
    std::fs::create_dir(dir.join("rows.npy")).unwrap();
    let msg = io_message(replay(write_trace(&dir, "rows.npy")));
    assert!(msg.contains("not a regular file (a directory)"), "{msg}");
}

#[test]
fn truncated_v2_header_is_reported_as_truncated_not_as_an_unsupported_version() {
    // 11 bytes: the 4-byte header length of a v2 file is cut (was "unsupported version 2.0").
    for bytes in [
        &b"\x93NUMPY\x02\x00\x76\x00\x00"[..],
        b"\x93NUMPY\x02\x00\x76\x00",
        b"\x93NUMPY\x02\x00",
    ] {
        let err = parse_npy_f32(bytes).unwrap_err();
        assert!(
            err.message().contains("truncated") && !err.message().contains("unsupported"),
            "{} bytes: {err}",
            bytes.len()
        );
    }
    // Through a trace file too, with the file named in the error.
    let dir = scratch("v2-trunc");
    std::fs::write(dir.join("rows.npy"), b"\x93NUMPY\x02\x00\x76\x00\x00").unwrap();
    match replay(write_trace(&dir, "rows.npy")).unwrap_err() {
        TraceError::Npy { path, message } => {
            assert!(path.ends_with("rows.npy"), "{path:?}");
            assert!(message.contains("truncated"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A genuinely unknown version still says so.
    let err = parse_npy_f32(b"\x93NUMPY\x04\x00\x10\x00\x00\x00").unwrap_err();
    assert!(
        err.message()
            .contains("unsupported .npy format version 4.0"),
        "{err}"
    );
}

#[test]
fn header_length_beyond_the_file_is_truncated() {
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend(u32::MAX.to_le_bytes());
    bytes.extend(b"{'descr': '<f4'}");
    let err = parse_npy_f32(&bytes).unwrap_err();
    assert!(err.message().contains("truncated header"), "{err}");
}

/// A reader that serves `prefix`, then the byte `b'A'` forever, counting what it served.
struct Endless<'a> {
    prefix: &'a [u8],
    served: usize,
}

impl Read for Endless<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = *self.prefix.get(self.served + i).unwrap_or(&b'A');
        }
        self.served += n;
        Ok(n)
    }
}

#[test]
fn npy_reader_reads_exactly_the_bytes_the_header_declares() {
    let vals = [0.5f32, -1.0, 2.0, f32::NEG_INFINITY];
    let file = npy_v1("(2, 2)", &vals);
    let mut src = Endless {
        prefix: &file,
        served: 0,
    };
    let (shape, data) = read_npy_f32(&mut src, file.len() as u64).unwrap();
    assert_eq!(shape, [2, 2]);
    assert_eq!(data, vals);
    assert_eq!(src.served, file.len(), "read past the declared data");

    // A header whose shape disagrees with the stated length is refused before the data is read:
    // nothing is allocated for a shape of 10^12 rows.
    let big = npy_v1("(1000000000000, 2)", &[]);
    let mut src = Endless {
        prefix: &big,
        served: 0,
    };
    let err = read_npy_f32(&mut src, big.len() as u64 + 8).unwrap_err();
    assert!(
        err.message()
            .contains("needs 8000000000000 data bytes but the file has 8"),
        "{err}"
    );
    assert_eq!(src.served, big.len(), "read the data of a refused file");
}

#[test]
fn npy_reader_trusts_a_stated_length_only_as_far_as_the_input_goes() {
    // A v2 header claiming 4 GiB of header text, from a 20-byte input said to be endless: an error
    // once the input runs out, without reserving the claimed size first.
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend(0xFFFF_FFF0u32.to_le_bytes());
    bytes.extend(b"{'descr'");
    let err = read_npy_f32(&mut &bytes[..], u64::MAX).unwrap_err();
    assert!(
        err.message()
            .contains("the input ends after 8 of 4294967280 bytes"),
        "{err}"
    );
}

#[test]
fn npy_rows_load_from_a_regular_file() {
    let dir = scratch("regular");
    std::fs::write(dir.join("rows.npy"), npy_v1("(1, 2)", &[0.0, 3.0])).unwrap();
    let (trace, rows) = Trace::load(write_trace(&dir, "rows.npy")).unwrap();
    assert_eq!(trace.n_vocab, 2);
    assert_eq!(rows.get(0).unwrap(), [0.0, 3.0]);
}
