//! Shared test helpers: servers on ephemeral loopback ports and a small blocking HTTP/1.1 client.
//!
//! The client is deliberately minimal (one request per connection, `Connection: close`, chunked
//! bodies decoded), so the tests see exactly the bytes the server sends: status line, headers and
//! the raw SSE text.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use gauge_server::{RunningServer, ServerConfig};
use serde_json::Value;

/// The model every test serves (the project's default; pulled on first use).
pub const MODEL: &str = "smollm2-135m-instruct";

/// Two llama.cpp threads where this process has two cores, else one: under `scripts/test.sh`'s
/// lanes the Rust tests are pinned to their own cores, and two ggml threads spinning at their
/// barriers on one core make each token many times slower.
pub fn decode_threads() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2)) as u32
}

/// A small, test-sized configuration: one llama thread, short contexts, port 0.
pub fn test_config() -> ServerConfig {
    ServerConfig {
        model: MODEL.into(),
        port: 0,
        threads: 1,
        ctx_size: 512,
        parallel: 4,
        max_queue: 16,
        max_tokens: 256,
        max_body_bytes: 64 * 1024,
        ..ServerConfig::default()
    }
}

/// One server shared by every test of a test binary.
pub fn shared() -> SocketAddr {
    static SERVER: OnceLock<RunningServer> = OnceLock::new();
    started(&SERVER, test_config)
}

/// The server in `cell`, started with `config()` on first use (a test binary's own servers).
pub fn started(
    cell: &'static OnceLock<RunningServer>,
    config: impl FnOnce() -> ServerConfig,
) -> SocketAddr {
    cell.get_or_init(|| RunningServer::start(config()).expect("server starts"))
        .addr()
}

/// A raw HTTP response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of an SSE body, in order.
    pub fn sse_data(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter_map(|ev| {
                let data: Vec<&str> = ev
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                (!data.is_empty()).then(|| data.join("\n"))
            })
            .collect()
    }
}

/// Decode a `Transfer-Encoding: chunked` body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = std::str::from_utf8(&raw[..eol]).unwrap_or("0");
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        raw = &raw[eol + 2..];
        if size == 0 || raw.len() < size {
            out.extend_from_slice(&raw[..size.min(raw.len())]);
            break;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[(size + 2).min(raw.len())..];
    }
    out
}

/// Send one request and read the whole response.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    parse(&raw)
}

pub fn parse(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], b"")
}

/// `/health` as JSON.
pub fn health(addr: SocketAddr) -> Value {
    get(addr, "/health").json()
}

/// Poll until `cond` holds on `/health` (or panic after `secs`).
pub fn wait_health(
    addr: SocketAddr,
    secs: u64,
    what: &str,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let end = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let h = health(addr);
        if cond(&h) {
            return h;
        }
        if std::time::Instant::now() > end {
            panic!("timed out waiting for {what}: {h}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Assert an OpenAI-shaped error with `status` and, if given, `param`.
pub fn assert_error(r: &Resp, status: u16, param: Option<&str>) -> Value {
    assert_eq!(r.status, status, "body: {}", r.body);
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].is_string(), "no message: {v}");
    assert!(e["type"].is_string(), "no type: {v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
        assert!(
            e["message"].as_str().unwrap().contains(p),
            "the message should name `{p}`: {v}"
        );
    }
    v
}

/// Send a request and return the open connection, to read the response incrementally.
pub fn open(addr: SocketAddr, path: &str, body: &Value, headers: &[(&str, &str)]) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.to_string();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    s
}

/// Read from `s` into `buf` until `needle` appears in it (or EOF); returns whether it appeared.
pub fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, needle: &[u8]) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        if buf.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
