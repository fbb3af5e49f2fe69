//! `GET /metrics` over HTTP/1.1 (hyper), within limits: the endpoint is unauthenticated,
//! so whoever reaches its port must not be able to keep scrapes out or pin the process's
//! file descriptors. The accept loop and the connection cap are tenure's; parsing and
//! answering HTTP is hyper's.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::prometheus_text;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Default most connections the metrics endpoint serves at once: 32.
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;
/// Default time a connection has to send its request head: 5 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time the answer may take to be written: 5 s.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request head read (bytes, request line included); a longer one is answered
/// 431 and the connection closed.
const MAX_REQUEST_HEAD: usize = 4096;
/// hyper's read and write buffer per connection (its smallest): bounds what an idle
/// client makes the endpoint hold.
const MAX_BUF: usize = 8192;
/// First and longest pause of the accept loop after an accept error (such as `EMFILE`:
/// the process is out of file descriptors), doubling in between.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How the metrics endpoint limits what clients can hold ([`serve_with`]).
///
/// The endpoint is unauthenticated, so these bound what anyone who reaches the port can
/// take: at most `max_connections` file descriptors, each for at most
/// `request_timeout + response_timeout`. When all connections are taken, the oldest one
/// that has not sent its request yet is closed to make room (an idle client cannot keep
/// a scrape out); only when every connection is busy answering is the new one closed.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Most connections open at once ([`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Time a connection has to send its request head ([`DEFAULT_REQUEST_TIMEOUT`]);
    /// then it is closed.
    pub request_timeout: Duration,
    /// Time answering may take once the request head is in, writing included
    /// ([`DEFAULT_RESPONSE_TIMEOUT`]); then the connection is closed.
    pub response_timeout: Duration,
    /// Where accept errors are logged (one warning a minute, with the count of those
    /// held back; the rest at DEBUG). Discards by default.
    pub logger: slog::Logger,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            logger: slog::Logger::root(slog::Discard, slog::o!()),
        }
    }
}

/// What the metrics endpoint did so far ([`MetricsServer::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Connections open now.
    pub open: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Requests answered (200 or 404).
    pub answered: u64,
    /// Connections closed because they sent no request head within `request_timeout`
    /// (or a head that was too long, malformed or cut off).
    pub timed_out: u64,
    /// Idle connections (no request yet) closed to make room for a new one.
    pub evicted: u64,
    /// New connections closed at once: every open one was busy answering.
    pub refused: u64,
    /// Errors accepting a connection (for example `EMFILE`); each is followed by a pause.
    pub accept_errors: u64,
}

#[derive(Debug, Default)]
struct ServeCounters {
    open: AtomicU64,
    accepted: AtomicU64,
    answered: AtomicU64,
    timed_out: AtomicU64,
    evicted: AtomicU64,
    refused: AtomicU64,
    accept_errors: AtomicU64,
}

/// A running metrics endpoint ([`serve_with`]). Dropping it does not stop it; call
/// [`MetricsServer::abort`].
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    task: JoinHandle<()>,
    counters: Arc<ServeCounters>,
}

impl MetricsServer {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// What it did so far.
    pub fn stats(&self) -> ServeStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServeStats {
            open: l(&c.open),
            accepted: l(&c.accepted),
            answered: l(&c.answered),
            timed_out: l(&c.timed_out),
            evicted: l(&c.evicted),
            refused: l(&c.refused),
            accept_errors: l(&c.accept_errors),
        }
    }

    /// Stops accepting (open connections end on their own timeouts).
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// Serves `GET /metrics` on `addr` with `render()` of the given metrics source until
/// the returned task is aborted, with the default limits ([`ServeOptions`]). Returns the
/// bound address (useful with port 0).
pub async fn serve<F>(addr: SocketAddr, render: F) -> std::io::Result<(SocketAddr, JoinHandle<()>)>
where
    F: Fn() -> String + Send + Sync + 'static,
{
    let server = serve_with(addr, render, ServeOptions::default()).await?;
    Ok((server.local_addr, server.task))
}

/// The connections that have not sent their request head yet, oldest first: the ones
/// to close when a new connection needs room.
#[derive(Debug, Default)]
struct Idle {
    next_id: u64,
    waiting: std::collections::VecDeque<(u64, CancellationToken)>,
}

/// Serves `GET /metrics` (and `GET /`) on `addr` with `render()` (as
/// `text/plain; version=0.0.4`), within the limits of `options`: HTTP/1.1, one request
/// per connection (`Connection: close`), any other request answered 404.
pub async fn serve_with<F>(
    addr: SocketAddr,
    render: F,
    options: ServeOptions,
) -> std::io::Result<MetricsServer>
where
    F: Fn() -> String + Send + Sync + 'static,
{
    use crate::transport::log_limit::{self, warn_limited, LogLimit};

    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let render: Arc<dyn Fn() -> String + Send + Sync> = Arc::new(render);
    let counters = Arc::new(ServeCounters::default());
    let idle = Arc::new(Mutex::new(Idle::default()));
    let max = options.max_connections.max(1);
    let mut http = http1::Builder::new();
    http.keep_alive(false)
        // A client may shut its sending side once its request is out; it still gets the
        // answer (within `response_timeout`).
        .half_close(true)
        .max_header_size(MAX_REQUEST_HEAD)
        .max_buf_size(MAX_BUF)
        // The request timeout is the connection task's (below), which also evicts.
        .header_read_timeout(None);
    let c = counters.clone();
    let task = tokio::spawn(async move {
        let log = options.logger.clone();
        let accept_log = LogLimit::new(log_limit::WINDOW);
        let mut backoff = ACCEPT_BACKOFF_MIN;
        loop {
            let sock = match listener.accept().await {
                Ok((sock, _)) => {
                    backoff = ACCEPT_BACKOFF_MIN;
                    sock
                }
                Err(e) => {
                    c.accept_errors.fetch_add(1, Ordering::Relaxed);
                    warn_limited!(accept_log, "accept", log,
                        "metrics endpoint: accept failed; pausing"; "error" => %e,
                        "pause" => format!("{backoff:?}"),);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            };
            c.accepted.fetch_add(1, Ordering::Relaxed);
            // Room for it: below the cap, or by closing the oldest idle connection.
            let token = CancellationToken::new();
            let id = {
                let mut idle = idle
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if c.open.load(Ordering::Acquire) as usize >= max {
                    match idle.waiting.pop_front() {
                        Some((_, oldest)) => {
                            oldest.cancel();
                            c.evicted.fetch_add(1, Ordering::Relaxed);
                        }
                        None => {
                            c.refused.fetch_add(1, Ordering::Relaxed);
                            drop(sock);
                            continue;
                        }
                    }
                }
                // The evicted connection is still counted until its task ends: `open`
                // may exceed `max` by the evictions in progress, for a moment.
                c.open.fetch_add(1, Ordering::AcqRel);
                idle.next_id += 1;
                let id = idle.next_id;
                idle.waiting.push_back((id, token.clone()));
                id
            };
            let conn = Connection {
                http: http.clone(),
                render: render.clone(),
                counters: c.clone(),
                idle: idle.clone(),
                id,
                evict: token,
                request_timeout: options.request_timeout,
                response_timeout: options.response_timeout,
            };
            tokio::spawn(conn.run(sock));
        }
    });
    Ok(MetricsServer {
        local_addr: local,
        task,
        counters,
    })
}

/// One accepted connection: waits for its request head (or eviction, or the request
/// timeout), then gives hyper the response timeout to answer it.
struct Connection {
    http: http1::Builder,
    render: Arc<dyn Fn() -> String + Send + Sync>,
    counters: Arc<ServeCounters>,
    idle: Arc<Mutex<Idle>>,
    id: u64,
    evict: CancellationToken,
    request_timeout: Duration,
    response_timeout: Duration,
}

/// How the wait for a connection's request head ended.
enum Head {
    /// hyper has it and is answering.
    Received,
    /// The connection ended first (closed, cut off, too long, malformed), or was
    /// answered within the same poll (`true`: a request came in).
    Ended {
        answered: bool,
    },
    Evicted,
    TimedOut,
}

impl Connection {
    async fn run(self, sock: TcpStream) {
        let c = &*self.counters;
        let _open = OpenGuard(&c.open);
        // Set when hyper hands the request to the service: the head is in.
        let (head_tx, mut head_rx) = oneshot::channel::<()>();
        let head_tx = Mutex::new(Some(head_tx));
        let render = self.render.clone();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            if let Some(tx) = head_tx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
            {
                let _ = tx.send(());
            }
            let response = answer(&req, &*render);
            async move { Ok::<_, Infallible>(response) }
        });
        let conn = self.http.serve_connection(TokioIo::new(sock), service);
        tokio::pin!(conn);
        let head = tokio::select! {
            biased;
            _ = self.evict.cancelled() => Head::Evicted,
            _ = &mut head_rx => Head::Received,
            done = &mut conn => Head::Ended {
                answered: done.is_ok() && head_rx.try_recv().is_ok(),
            },
            _ = tokio::time::sleep(self.request_timeout) => Head::TimedOut,
        };
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .waiting
            .retain(|(i, _)| *i != self.id);
        match head {
            Head::Evicted => {} // counted by the accept loop
            Head::Ended { answered: true } => {
                c.answered.fetch_add(1, Ordering::Relaxed);
            }
            Head::Ended { answered: false } | Head::TimedOut => {
                c.timed_out.fetch_add(1, Ordering::Relaxed);
            }
            Head::Received => {
                if let Ok(Ok(())) = tokio::time::timeout(self.response_timeout, conn).await {
                    c.answered.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // Dropping the connection closes the socket.
    }
}

/// 200 with `render()` for `GET /metrics` and `GET /`, 404 for anything else.
fn answer(
    req: &Request<hyper::body::Incoming>,
    render: &dyn Fn() -> String,
) -> Response<Full<Bytes>> {
    let served = req.method() == Method::GET && matches!(req.uri().path(), "/metrics" | "/");
    let (status, content_type, body) = if served {
        (StatusCode::OK, prometheus_text::CONTENT_TYPE, render())
    } else {
        (
            StatusCode::NOT_FOUND,
            "text/plain",
            "only GET /metrics is served\n".to_string(),
        )
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Takes one off the open-connection count when the connection's task ends.
struct OpenGuard<'a>(&'a AtomicU64);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
