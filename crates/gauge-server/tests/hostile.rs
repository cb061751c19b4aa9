//! The server under hostile clients: idle connections, headers sent a byte at a time, half-sent
//! bodies, more connections than the limit. Each test runs its own server.
//!
//! Bounds here are liveness bounds, not speed measurements: generous, and each one is either a
//! request being answered at all or a connection being closed at all within many times the
//! configured timeout.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use gauge_server::{RunningServer, ServerConfig};
use serde_json::json;

fn start(cfg: ServerConfig) -> RunningServer {
    RunningServer::start(cfg).expect("server starts")
}

/// Raise this process's soft file-descriptor limit to the hard limit (the test holds both ends
/// of every connection).
fn raise_fd_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = r.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
    let soft = r.rlim_cur as u64;
    soft
}

/// Resident memory of this process, in KiB.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Whether the server closed `s` within `within` (EOF or reset; a response counts as not closed).
fn closed_by_server(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

fn quick_health(addr: SocketAddr) -> Duration {
    let t0 = Instant::now();
    let r = get(addr, "/health");
    assert_eq!(r.status, 200, "{}", r.body);
    t0.elapsed()
}

#[test]
fn idle_and_slow_clients_cannot_hold_the_server() {
    let limit = raise_fd_limit();
    assert!(
        limit > 2 * 1100,
        "the hard fd limit {limit} is too low for this test"
    );
    let srv = start(test_config());
    let addr = srv.addr();
    quick_health(addr);
    let rss0 = rss_kib();

    // 1,000 connections that never send a byte.
    let mut idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    // 50 clients sending their headers one byte at a time.
    let head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    let mut slow: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let stop = std::sync::Arc::clone(&stop);
        let mut clones: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for c in &mut clones {
                    let _ = c.write_all(&head[i % head.len()..i % head.len() + 1]);
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));

    // A normal client is answered promptly: the liveness bound is 2 s.
    let took = quick_health(addr);
    assert!(took < Duration::from_secs(2), "/health took {took:?}");
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 3, "ignore_eos": true}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["usage"]["completion_tokens"], 3);
    let grown = rss_kib().saturating_sub(rss0);
    eprintln!("with 1,050 hostile connections: /health in {took:?}, RSS +{grown} KiB");
    // Both ends of 1,050 connections live in this process; the bound is generous (~60 KiB per
    // connection) but finite: the server keeps no per-connection buffers it does not need.
    assert!(
        grown < 64 * 1024,
        "RSS grew by {grown} KiB for 1,050 connections"
    );

    // Idle connections are closed after the keep-alive timeout (5 s), slow headers after the
    // header timeout (10 s); the bounds allow many times that.
    let t0 = Instant::now();
    for s in idle.iter_mut().step_by(50) {
        assert!(
            closed_by_server(s, Duration::from_secs(60)),
            "an idle connection was held for {:?}",
            t0.elapsed()
        );
    }
    for s in slow.iter_mut().step_by(10) {
        assert!(
            closed_by_server(s, Duration::from_secs(60)),
            "a slow-header connection was held for {:?}",
            t0.elapsed()
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickle.join().unwrap();
}

#[test]
fn a_half_sent_body_gets_408_after_the_body_timeout() {
    let srv = start(ServerConfig {
        body_timeout: Duration::from_secs(1),
        ..test_config()
    });
    let mut s = TcpStream::connect(srv.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\": ",
    )
    .unwrap();
    let mut raw = Vec::new();
    assert!(
        read_until(&mut s, &mut raw, b"}}"),
        "no response to a half-sent body: {:?}",
        String::from_utf8_lossy(&raw)
    );
    let r = parse(&raw);
    let v = assert_error(&r, 408, None);
    assert_eq!(v["error"]["code"], "request_timeout");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--body-timeout"));
}

#[test]
fn at_the_connection_limit_the_longest_idle_connection_makes_room() {
    let srv = start(ServerConfig {
        max_connections: 32,
        ..test_config()
    });
    let addr = srv.addr();
    let mut held: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    // Every newcomer evicted the oldest idle connection; a real request still gets through.
    let took = quick_health(addr);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(closed_by_server(&mut held[0], Duration::from_secs(30)));
    let m = get(addr, "/metrics").body;
    let evicted: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("gauge:connections_evicted_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(evicted >= 68.0, "{m}");
    assert!(m.contains("gauge:max_connections 32"), "{m}");
}

#[test]
fn with_every_connection_busy_a_newcomer_gets_503() {
    let srv = start(ServerConfig {
        max_connections: 2,
        ..test_config()
    });
    let addr = srv.addr();
    let mut a = open(addr, "/v1/completions", &long(200), &[]);
    let mut b = open(addr, "/v1/completions", &long(200), &[]);
    let mut buf = Vec::new();
    assert!(read_until(&mut a, &mut buf, b"data: "));
    buf.clear();
    assert!(read_until(&mut b, &mut buf, b"data: "));
    // Read without writing: the server answers and closes at once.
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    let v = assert_error(&parse(&raw), 503, None);
    assert_eq!(v["error"]["code"], "too_many_connections");
    drop(a);
    drop(b);
}

fn long(max_tokens: usize) -> serde_json::Value {
    json!({"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": true, "stream": true})
}
