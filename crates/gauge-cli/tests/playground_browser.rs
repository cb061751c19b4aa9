//! The playground in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`)
//! driven over WebDriver against a live `gauge serve` on loopback with the default model.
//!
//! Load the page, generate, open a step, move the "shift every logit by c" slider, and check the
//! screenshot is not blank (decoded PNG, distinct colours counted). Without Chromium the test
//! skips locally with the reason; under CI (`CI` set) it fails instead. Set
//! `GAUGE_PLAYGROUND_SCREENSHOT=path.png` to keep the screenshot (docs/img/playground.png comes
//! from this test).
//!
//! The WebDriver client is the W3C protocol's few JSON-over-HTTP calls this test needs, written
//! against a plain `TcpStream`.

#[path = "../../test-support/skip.rs"]
mod skip;

use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One HTTP/1.1 request; the body of the response as JSON. chromedriver keeps connections open
/// whatever the request says, so the body is read by its `Content-Length` (or chunk by chunk).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<Value> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(180)))?;
    let payload = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    )?;
    let mut r = BufReader::new(s);
    let mut length = None;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("connection closed in the headers"));
        }
        let line = line.trim_end().to_ascii_lowercase();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
        chunked |= line.starts_with("transfer-encoding:") && line.contains("chunked");
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim(), 16).map_err(std::io::Error::other)?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
    }
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// A WebDriver session.
struct Session {
    driver: SocketAddr,
    id: String,
}

impl Session {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("/session/{}{path}", self.id);
        let empty = json!({});
        let payload = (method == "POST").then(|| body.as_ref().unwrap_or(&empty));
        let v = http(self.driver, method, &url, payload)
            .unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"));
        if v["value"].get("error").is_some() {
            panic!("webdriver {method} {path}: {}", v["value"]);
        }
        v["value"].clone()
    }

    fn find(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_string()
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.call("POST", &format!("/element/{e}/click"), None);
    }

    fn keys(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.call(
            "POST",
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        );
    }

    fn script(&self, js: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": js, "args": []})),
        )
    }

    fn text(&self, css: &str) -> String {
        let e = self.find(css);
        self.call("GET", &format!("/element/{e}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Poll `css`'s text until `done` says so.
    fn wait_text(&self, css: &str, secs: u64, done: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let t = self.text(css);
            if done(&t) {
                return t;
            }
            assert!(
                Instant::now() < end,
                "{css} still says {t:?} after {secs} s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Kills the child (a process this test started) when dropped.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .chain([PathBuf::from("/usr/lib/chromium").join(n)])
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `gauge serve` on an ephemeral loopback port; returns once it prints its address.
fn start_gauge_serve() -> (Reaper, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gauge"))
        .args(["serve", "--port", "0", "-c", "1024", "-t", "1", "-np", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gauge serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("gauge serve exited before printing its address")
            .unwrap();
        if let Some(rest) = line.split("on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Reaper(child), addr)
}

fn start_driver(driver: &PathBuf) -> (Reaper, SocketAddr) {
    let port = free_port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    while !http(addr, "GET", "/status", None).is_ok_and(|v| v["value"]["ready"] == true) {
        assert!(Instant::now() < end, "chromedriver did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    (Reaper(child), addr)
}

/// Distinct colours and the share of the most common one, of a PNG.
fn png_colours(bytes: &[u8]) -> (usize, f64, (u32, u32)) {
    let dec = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = dec.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let mut counts = std::collections::HashMap::new();
    for px in buf[..info.buffer_size()].chunks(channels) {
        *counts
            .entry(px[..3.min(channels)].to_vec())
            .or_insert(0usize) += 1;
    }
    let total: usize = counts.values().sum();
    let top = counts.values().copied().max().unwrap_or(0);
    (
        counts.len(),
        top as f64 / total as f64,
        (info.width, info.height),
    )
}

#[test]
fn playground_generates_explains_and_shifts_in_headless_chromium() {
    let (Some(browser), Some(driver)) = (
        find_program(&["chromium", "chromium-browser"]),
        find_program(&["chromedriver"]),
    ) else {
        let why = "chromium and chromedriver are not installed (Debian: apt-get install chromium chromium-driver)";
        skip::skip_unless_ci(why);
        return;
    };
    let (_serve, addr) = start_gauge_serve();
    let (_driver, driver_addr) = start_driver(&driver);
    let caps = json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": browser,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1500", "--hide-scrollbars"]
        }
    }}});
    let v = http(driver_addr, "POST", "/session", Some(&caps)).expect("new session");
    let id = v["value"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {v}"))
        .to_string();
    let s = Session {
        driver: driver_addr,
        id,
    };

    s.call(
        "POST",
        "/url",
        Some(json!({"url": format!("http://{addr}/")})),
    );
    // The page built its settings table with both names side by side.
    let table = s.text("#settings");
    for name in ["repeat_penalty", "frequency_penalty", "top_k"] {
        assert!(table.contains(name), "settings table lacks {name}: {table}");
    }
    // A task preset fills the settings from the server's own presets (code: temperature 0.2).
    s.wait_text("#status", 30, |t| t == "ready");
    let value = |id: &str| {
        s.script(&format!("return document.getElementById('{id}').value;"))
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(value("f-temperature"), "0.8");
    let end = Instant::now() + Duration::from_secs(30);
    while value("f-temperature") != "0.2" {
        // presets.json may still be loading: click until it applies
        s.click(".preset[data-preset=code]");
        assert!(Instant::now() < end, "the code preset never applied");
        std::thread::sleep(Duration::from_millis(100));
    }
    // back to the page's defaults (a fixed seed) for the run below
    s.call(
        "POST",
        "/url",
        Some(json!({"url": format!("http://{addr}/")})),
    );
    s.script("document.getElementById('n_predict').value = '16';");
    s.click("#generate");
    let status = s.wait_text("#status", 240, |t| {
        t.starts_with("done") || t.starts_with("error")
    });
    assert!(status.starts_with("done"), "generation: {status}");
    let n_tokens = s
        .script("return document.querySelectorAll('#output .tok').length;")
        .as_u64()
        .unwrap();
    assert!(n_tokens >= 1, "no tokens streamed");

    // Open steps until one shows ctrl moving under the largest shift; normalized must not move.
    let mut ctrl_moved = false;
    let mut best = (0.0f64, "\u{E010}");
    for k in (0..n_tokens).rev() {
        s.click(&format!("#tok-{k}"));
        let stages = s
            .script("return Array.from(document.querySelectorAll('#step .stage')).map(e => e.dataset.stage);")
            .to_string();
        assert!(
            stages.contains("penalties") && stages.contains("dist"),
            "stages shown: {stages}"
        );
        let max = s.script("return document.getElementById('shift').max;");
        let steps_right = max.as_str().unwrap().parse::<usize>().unwrap();
        let dp =
            |panel: &str| -> f64 { s.text(&format!("#shift-{panel} .meta b")).parse().unwrap() };
        // the keyboard moves the slider as a user would: Home (most negative c), then End
        for (key, want) in [("\u{E011}", 0), ("\u{E010}", steps_right)] {
            s.keys("#shift", key);
            let label = s.text("#shift-value");
            assert_eq!(
                s.script("return document.getElementById('shift').value;")
                    .as_str(),
                Some(want.to_string().as_str()),
                "the slider did not move ({label})"
            );
            let (c, n) = (dp("ctrl"), dp("normalized"));
            assert!(n < 1e-4, "step {k}: normalized moved by {n} at {label}");
            ctrl_moved |= c > 1e-3;
            if c > best.0 {
                best = (c, key);
            }
        }
        if ctrl_moved {
            break;
        }
    }
    assert!(
        ctrl_moved,
        "ctrl never moved under the largest shift in {n_tokens} steps"
    );
    // leave the slider where ctrl moved most, for the screenshot
    s.keys("#shift", best.1);

    let shot = s.call("GET", "/screenshot", None);
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot.as_str().expect("base64 screenshot"))
        .expect("valid base64");
    let (colours, top_share, (w, h)) = png_colours(&png);
    assert!(w >= 800 && h >= 600, "screenshot is {w}x{h}");
    assert!(
        colours > 200,
        "screenshot has only {colours} colours: blank?"
    );
    assert!(
        top_share < 0.9,
        "one colour covers {:.0}% of the screenshot",
        top_share * 100.0
    );
    if let Some(path) = std::env::var_os("GAUGE_PLAYGROUND_SCREENSHOT") {
        std::fs::write(&path, &png).expect("write the screenshot");
    }
    let _ = http(driver_addr, "DELETE", &format!("/session/{}", s.id), None);
}
