//! The connection layer: our own accept loop over hyper's HTTP/1 server, so hostile clients
//! cannot hold the server.
//!
//! `axum::serve` has no timeouts and no connection limit: idle connections, headers sent one byte
//! a second and half-sent bodies were held forever, and enough of them exhausted the process's
//! file descriptors so that a normal request was never accepted. Here:
//!
//! - **Header timeout** (hyper's `header_read_timeout`): a request's head must arrive within
//!   `header_timeout` of the server starting to wait for it.
//! - **Keep-alive idle timeout**: a connection with no request in progress that has sent nothing
//!   for `keep_alive_timeout` is closed (a new connection that never speaks, or a kept-alive one
//!   that goes quiet).
//! - **Body timeout**: the generation handlers read the body under `body_timeout` (408 beyond;
//!   see `api::body::read_body`).
//! - **Connection limit**: at most `max_connections` open at once, kept below the process's
//!   file-descriptor limit. At the limit, a new connection evicts the connection idle the longest
//!   (nginx does the same with its keep-alive connections), so idle sockets can never lock out
//!   a real client; only when every connection is busy with a request does the newcomer get a
//!   503 and a close.
//!
//! A connection is *busy* from the moment its request head is parsed until its response body is
//! finished or dropped (a stream counts as busy for its whole life), so none of these timers ever
//! cuts a response.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tower::ServiceExt;

/// File descriptors kept free for everything that is not a connection (model, logs, the
/// listener, blocking workers) and for a few connections closing while new ones are accepted.
const FD_RESERVE: u64 = 64;

/// The timeouts and the limit, resolved from the server's config.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub header_timeout: Duration,
    pub keep_alive_timeout: Duration,
    pub max_connections: usize,
}

/// The process's soft `RLIMIT_NOFILE`, if it can be read.
pub fn fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own and reads nothing else.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
        #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
        let soft = r.rlim_cur as u64;
        (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(soft)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `wanted`, lowered so connections never exhaust the file descriptors (each takes one).
pub fn effective_max_connections(wanted: usize) -> usize {
    match fd_limit() {
        Some(n) => wanted.min(n.saturating_sub(FD_RESERVE).max(16) as usize),
        None => wanted,
    }
}

/// One open connection, as the tracker sees it.
struct Conn {
    /// Requests on it whose response is not finished (HTTP/1: 0 or 1).
    busy: AtomicUsize,
    /// Milliseconds since the tracker's epoch of the last byte read or the last response end.
    last_activity: AtomicU64,
    /// Notified to close the connection at once (evicted to make room).
    close: Notify,
}

/// Every open connection, for the limit and for shutdown.
pub(crate) struct Tracker {
    epoch: Instant,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// Requests in progress over all connections.
    busy_requests: AtomicUsize,
    /// Notified whenever a request finishes (shutdown waits for the count to reach 0).
    request_done: Notify,
    /// Connections evicted at the limit and refused with 503, since the start.
    pub evicted: AtomicU64,
    pub refused: AtomicU64,
}

impl Tracker {
    pub fn new() -> Self {
        Tracker {
            epoch: Instant::now(),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            busy_requests: AtomicUsize::new(0),
            request_done: Notify::new(),
            evicted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.conns.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// Requests being served now (head parsed, response not finished).
    pub fn busy_requests(&self) -> usize {
        self.busy_requests.load(Ordering::Acquire)
    }

    /// Register a new connection, evicting the longest-idle one when at `max`. `None`: every
    /// connection is busy, refuse the new one.
    fn admit(&self, max: usize) -> Option<(u64, Arc<Conn>)> {
        let mut conns = self.conns.lock().ok()?;
        if conns.len() >= max {
            let victim = conns
                .iter()
                .filter(|(_, c)| c.busy.load(Ordering::Acquire) == 0)
                .min_by_key(|(_, c)| c.last_activity.load(Ordering::Relaxed))
                .map(|(&id, _)| id);
            match victim.and_then(|id| conns.remove(&id)) {
                Some(old) => {
                    old.close.notify_one();
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            last_activity: AtomicU64::new(self.now_ms()),
            close: Notify::new(),
        });
        conns.insert(id, Arc::clone(&conn));
        Some((id, conn))
    }

    fn remove(&self, id: u64) {
        if let Ok(mut c) = self.conns.lock() {
            c.remove(&id);
        }
    }

    /// Resolves once no request is in progress.
    pub async fn wait_idle(&self) {
        loop {
            let done = self.request_done.notified();
            if self.busy_requests() == 0 {
                return;
            }
            done.await;
        }
    }
}

/// Marks a connection busy for as long as it lives (moved into the response body).
struct Busy {
    tracker: Arc<Tracker>,
    conn: Arc<Conn>,
}

impl Busy {
    fn new(tracker: &Arc<Tracker>, conn: &Arc<Conn>) -> Self {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        tracker.busy_requests.fetch_add(1, Ordering::AcqRel);
        Busy {
            tracker: Arc::clone(tracker),
            conn: Arc::clone(conn),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.conn
            .last_activity
            .store(self.tracker.now_ms(), Ordering::Relaxed);
        self.conn.busy.fetch_sub(1, Ordering::AcqRel);
        self.tracker.busy_requests.fetch_sub(1, Ordering::AcqRel);
        self.tracker.request_done.notify_waiters();
    }
}

/// The socket, noting the time of every read that brought bytes (the idle timer's clock), and
/// giving hyper's own answers to unparsable requests the JSON body every other error has.
struct Activity {
    inner: TcpStream,
    tracker: Arc<Tracker>,
    conn: Arc<Conn>,
    /// A response written in place of hyper's, and how much of it has been written.
    pending: Option<(Vec<u8>, usize)>,
}

/// hyper answers a request it cannot parse itself, before any handler runs, with a status and
/// an empty body: 400 (malformed request line or header), 414 (URI longer than 65,534 bytes) or
/// 431 (request head too large, or more than 100 headers). `head` is one such answer (a status
/// line and headers ending the slice, `content-length: 0`; the app's own errors always have a
/// body): the same status with the documented `{"error": {...}}` body, and a close.
pub(crate) fn parse_error_response(head: &[u8]) -> Option<Vec<u8>> {
    use axum::http::StatusCode;
    let (status, message, code) = if head.starts_with(b"HTTP/1.1 431 ") {
        (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "the request head is too large (at most 100 headers, and a request line and headers \
             of at most about 400 KB)",
            "headers_too_large",
        )
    } else if head.starts_with(b"HTTP/1.1 414 ") {
        (
            StatusCode::URI_TOO_LONG,
            "the request URI is too long (at most 65534 bytes)",
            "uri_too_long",
        )
    } else if head.starts_with(b"HTTP/1.1 400 ") {
        (
            StatusCode::BAD_REQUEST,
            "malformed HTTP request (request line or headers)",
            "malformed_request",
        )
    } else {
        return None;
    };
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")?;
    let bodiless = head
        .to_ascii_lowercase()
        .windows(21)
        .any(|w| w == b"\r\ncontent-length: 0\r\n");
    if end + 4 != head.len() || !bodiless {
        return None;
    }
    let mut e = crate::error::ApiError::invalid(None, message)
        .with_status(status)
        .with_code(code);
    e.param = None;
    let body = e.body().to_string();
    Some(
        format!(
            "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n{body}",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes(),
    )
}

impl Activity {
    /// Write what is left of a replaced response.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some((bytes, at)) = &mut self.pending {
            let n = match Pin::new(&mut self.inner).poll_write(cx, &bytes[*at..]) {
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            *at += n;
            if *at == bytes.len() {
                self.pending = None;
            }
        }
        Poll::Ready(Ok(()))
    }

    /// If `buf` is hyper's bodiless parse-error answer, take it (all of it) and send ours.
    fn replace(&mut self, buf: &[u8], cx: &mut Context<'_>) -> Option<std::io::Result<usize>> {
        let ours = parse_error_response(buf)?;
        self.pending = Some((ours, 0));
        match self.poll_pending(cx) {
            Poll::Ready(Err(e)) => Some(Err(e)),
            // The rest goes out on the flush hyper does next.
            _ => Some(Ok(buf.len())),
        }
    }
}

impl AsyncRead for Activity {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let now = self.tracker.now_ms();
            self.conn.last_activity.store(now, Ordering::Relaxed);
        }
        r
    }
}

impl AsyncWrite for Activity {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(Err(e)) = this.poll_pending(cx) {
            return Poll::Ready(Err(e));
        }
        if this.pending.is_some() {
            return Poll::Pending;
        }
        if let Some(r) = this.replace(buf, cx) {
            return Poll::Ready(r);
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match this.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match this.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_shutdown(cx),
            other => other,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(Err(e)) = this.poll_pending(cx) {
            return Poll::Ready(Err(e));
        }
        if this.pending.is_some() {
            return Poll::Pending;
        }
        // hyper queues a bodiless answer's head as one slice.
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            if let Some(r) = this.replace(first, cx) {
                return Poll::Ready(r);
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// What a refused connection reads before the close (written without waiting: the socket's
/// buffer is empty, so the small response fits).
fn refused_response() -> Vec<u8> {
    let body = r#"{"error":{"message":"too many open connections, all busy; retry later","type":"server_error","param":null,"code":"too_many_connections"}}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Accept and serve connections until `stop` resolves. Connections accepted after `draining`
/// turned true serve one request without keep-alive (the app answers it with 503); those open
/// before are told to finish their current response and close.
pub(crate) async fn accept_loop(
    listener: &TcpListener,
    app: Router,
    tracker: Arc<Tracker>,
    limits: Limits,
    draining: watch::Receiver<bool>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors or a connection reset before accept: back off briefly
                // instead of spinning (the limit keeps EMFILE from happening in the first place).
                let pause = if is_fd_exhaustion(&e) { 100 } else { 5 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Some((id, conn)) = tracker.admit(limits.max_connections) else {
            let _ = stream.try_write(&refused_response());
            continue;
        };
        let app = app.clone();
        let tracker = Arc::clone(&tracker);
        let draining = draining.clone();
        tokio::spawn(async move {
            serve_one(stream, app, &tracker, conn, limits, draining).await;
            tracker.remove(id);
        });
    }
}

fn is_fd_exhaustion(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

async fn serve_one(
    stream: TcpStream,
    app: Router,
    tracker: &Arc<Tracker>,
    conn: Arc<Conn>,
    limits: Limits,
    mut draining: watch::Receiver<bool>,
) {
    let io = TokioIo::new(Activity {
        inner: stream,
        tracker: Arc::clone(tracker),
        conn: Arc::clone(&conn),
        pending: None,
    });
    let (t2, c2) = (Arc::clone(tracker), Arc::clone(&conn));
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let busy = Busy::new(&t2, &c2);
        let app = app.clone();
        async move {
            let resp = app
                .oneshot(req.map(Body::new))
                .await
                .unwrap_or_else(|e| match e {});
            // The connection stays busy until the body is finished or dropped.
            Ok::<_, std::convert::Infallible>(resp.map(|b| {
                Body::new(b.map_frame(move |f| {
                    let _held = &busy;
                    f
                }))
            }))
        }
    });
    let late = *draining.borrow();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(!late);
    let http = builder.serve_connection(io, svc);
    tokio::pin!(http);
    let mut told_to_drain = late;
    loop {
        let wait = idle_wait(tracker, &conn, limits.keep_alive_timeout);
        tokio::select! {
            _ = http.as_mut() => return,
            _ = conn.close.notified() => return,
            _ = tokio::time::sleep(wait) => {
                if idle_for(tracker, &conn) >= limits.keep_alive_timeout {
                    return;
                }
            }
            r = draining.changed(), if !told_to_drain => {
                told_to_drain = true;
                if r.is_ok() {
                    http.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// How long the connection has been idle (zero while a request is in progress).
fn idle_for(tracker: &Tracker, conn: &Conn) -> Duration {
    if conn.busy.load(Ordering::Acquire) > 0 {
        return Duration::ZERO;
    }
    let last = conn.last_activity.load(Ordering::Relaxed);
    Duration::from_millis(tracker.now_ms().saturating_sub(last))
}

/// When to look again: at the idle deadline, or a full period from now while busy.
fn idle_wait(tracker: &Tracker, conn: &Conn, timeout: Duration) -> Duration {
    timeout
        .saturating_sub(idle_for(tracker, conn))
        .max(Duration::from_millis(10))
}

#[cfg(test)]
mod tests {
    use super::parse_error_response;

    #[test]
    fn hypers_bodiless_414_and_431_get_the_json_error_body() {
        for (status, code) in [(414, "uri_too_long"), (431, "headers_too_large")] {
            let hyper = format!(
                "HTTP/1.1 {status} X\r\nconnection: close\r\ncontent-length: 0\r\ndate: now\r\n\r\n"
            );
            let out = String::from_utf8(parse_error_response(hyper.as_bytes()).unwrap()).unwrap();
            assert!(out.starts_with(&format!("HTTP/1.1 {status} ")), "{out}");
            let (_, body) = out.split_once("\r\n\r\n").unwrap();
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(v["error"]["code"], code, "{v}");
            assert!(v["error"]["message"].is_string(), "{v}");
            assert!(out.contains(&format!("Content-Length: {}\r\n", body.len())));
        }
    }

    #[test]
    fn the_apps_own_responses_are_left_alone() {
        // A body follows, or the length is not 0, or it is not one of hyper's statuses.
        for resp in [
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 431 X\r\ncontent-length: 0\r\n",
        ] {
            assert!(parse_error_response(resp.as_bytes()).is_none(), "{resp}");
        }
    }
}
