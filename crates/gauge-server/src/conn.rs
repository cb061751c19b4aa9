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
//!   see `api::read_body`).
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

/// The socket, noting the time of every read that brought bytes (the idle timer's clock).
struct Activity {
    inner: TcpStream,
    tracker: Arc<Tracker>,
    conn: Arc<Conn>,
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
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
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
