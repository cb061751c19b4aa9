//! `gauge serve` as a user starts it: llama.cpp's flag spellings, the API key from the
//! environment, and a server under `ulimit -n 1024` holding more idle connections than that.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Wait for `child` to exit within `secs`; kill it and fail otherwise.
fn exits_within(mut child: Child, secs: u64) -> (i32, String) {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gauge serve was still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_empty_gauge_api_key_is_refused_like_an_empty_flag() {
    let child = Command::new(env!("CARGO_BIN_EXE_gauge"))
        .args(["serve", "--port", "0", "-c", "256", "-t", "1"])
        .env("GAUGE_API_KEY", "")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, err) = exits_within(child, 120);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("GAUGE_API_KEY") && err.contains("empty"),
        "{err}"
    );
    let o = gauge(&["serve", "--port", "0", "--api-key", ""]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("api_key"), "{}", stderr(&o));
}

#[test]
fn serve_takes_llama_cpp_spellings() {
    // -np is the number of parallel sequences (checked before the model loads).
    let o = gauge(&["serve", "-np", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("`parallel`: 0"), "{}", stderr(&o));
    // -n is n_predict, as everywhere in llama.cpp; a bad value points to -np.
    let o = gauge(&["serve", "-n", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("-np/--parallel"), "{}", stderr(&o));
    let help = String::from_utf8_lossy(&gauge(&["serve", "--help"]).stdout).into_owned();
    for flag in [
        "-a, --alias",
        "-c, --ctx-size",
        "-t, --threads",
        "-n, --n-predict",
        "--parallel",
        "--n-gpu-layers",
        "--jinja",
        "--chat-template",
        "--cors",
        "--host",
        "--port",
        "--header-timeout",
        "--body-timeout",
        "--keep-alive-timeout",
        "--max-connections",
    ] {
        assert!(help.contains(flag), "serve --help lacks {flag}:\n{help}");
    }
    for cmd in ["generate", "probe", "json", "delim"] {
        let help = String::from_utf8_lossy(&gauge(&[cmd, "--help"]).stdout).into_owned();
        assert!(help.contains("-t, --threads"), "{cmd}: {help}");
        assert!(help.contains("--n-gpu-layers"), "{cmd}: {help}");
    }
}

#[test]
fn a_cpu_build_says_it_has_no_gpu_backend() {
    if cfg!(any(feature = "cuda", feature = "vulkan", feature = "metal")) {
        eprintln!("skipped: this is a GPU build");
        return;
    }
    let o = gauge(&["generate", "-p", "Hi", "-n", "1", "-ngl", "99"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("n_gpu_layers") && err.contains("without a GPU backend"),
        "{err}"
    );
    let o = gauge(&["serve", "--port", "0", "-ngl", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("without a GPU backend"),
        "{}",
        stderr(&o)
    );
}

/// Raise this process's soft file-descriptor limit to the hard limit.
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

/// `gauge serve` under `ulimit -n 1024`, and its address once it listens.
fn serve_with_ulimit(fds: u32) -> (Child, SocketAddr) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {fds} && exec \"$0\" serve --port 0 -c 256 -t 1 -np 1"
        ))
        .arg(env!("CARGO_BIN_EXE_gauge"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("gauge serve exited before listening")
            .unwrap();
        if let Some(rest) = line.split("on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

#[test]
fn under_ulimit_1024_more_idle_connections_than_descriptors_do_not_lock_out_a_client() {
    let limit = raise_fd_limit();
    assert!(
        limit >= 4096,
        "the hard fd limit {limit} is too low for this test"
    );
    let (mut child, addr) = serve_with_ulimit(1024);
    let held: Vec<TcpStream> = (0..1050)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let took = t0.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    drop(held);
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "no answer after {took:?}: {text:?}"
    );
    // A liveness bound, far above the few milliseconds it takes.
    assert!(
        took < Duration::from_secs(2),
        "answered only after {took:?}"
    );
}
