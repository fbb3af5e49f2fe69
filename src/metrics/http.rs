//! `GET /metrics` over HTTP/1.1 (hyper), within limits: the endpoint is unauthenticated,
//! so whoever reaches its port must not be able to keep scrapes out or pin the process's
//! file descriptors. The accept loop and the connection cap are tenure's; parsing and
//! answering HTTP is hyper's. With a [`HealthCheck`] ([`ServeOptions::health`]) it also
//! answers the probes `GET /ready` and `GET /live` of a process supervisor (Kubernetes).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
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
    /// What `GET /ready` and `GET /live` answer ([`Health`]); usually
    /// [`HealthCheck::node`]. `None` (the default): they are not served (404), as any
    /// path but `/metrics`.
    pub health: Option<HealthCheck>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            logger: slog::Logger::root(slog::Discard, slog::o!()),
            health: None,
        }
    }
}

/// What a node's probes answer: `GET /live` is 200 unless [`Health::Down`]; `GET /ready`
/// is 200 only when [`Health::Ready`]. Each 503 carries its reason, one line of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// The group is usable from this node's view: it is a voter that hears its leader,
    /// or the leader holding a confirmed lease.
    Ready,
    /// The node runs, but the group is not usable from its view (why, in words): no
    /// leader heard, a leader without a lease, founding, joining, a learner, removed.
    NotReady(String),
    /// The node does not run: its driver stopped, or did not answer in time.
    Down(String),
}

impl Health {
    /// The readiness rule, from a node's [`Status`](crate::Status): ready when it is the
    /// leader and holds its lease, or a voter that hears its leader
    /// (`quorum_healthy`); not ready otherwise; down when it stopped.
    pub fn of_status(s: &crate::Status) -> Health {
        use crate::Role;
        let t = s.term;
        let not_ready = |why: String| Health::NotReady(why);
        match s.role {
            Role::Leader if s.leased => Health::Ready,
            Role::Leader => not_ready(format!(
                "leader in term {t} without a confirmed lease: no quorum acknowledged it lately"
            )),
            Role::Follower if s.quorum_healthy => Health::Ready,
            Role::Follower => not_ready(format!("follower in term {t} that hears no leader")),
            Role::PreCandidate | Role::Candidate => {
                not_ready(format!("no leader: campaigning (term {t})"))
            }
            Role::Learner => not_ready(
                "a learner: it does not vote until it is promoted (members promote)".into(),
            ),
            Role::Joining => {
                not_ready("joining: not a member yet, waiting to be added (members add)".into())
            }
            Role::Founding => not_ready(
                "founding the group: waiting until every first member has said hello".into(),
            ),
            Role::Removed => not_ready("removed from the group: stop it".into()),
            Role::Stopped => Health::Down("the node stopped".into()),
        }
    }
}

/// How long [`HealthCheck::node`] waits for the node's status before it answers
/// [`Health::Down`]: 2 s.
pub const HEALTH_STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// How long [`HealthCheck::node`] reuses an answer: 1 s. Probes, however many, cost the
/// node's driver at most one status request per second.
pub const HEALTH_CACHE: Duration = Duration::from_secs(1);

type HealthFuture = Pin<Box<dyn Future<Output = Health> + Send>>;

/// Where `GET /ready` and `GET /live` get their answer ([`ServeOptions::health`]).
#[derive(Clone)]
pub struct HealthCheck(Arc<dyn Fn() -> HealthFuture + Send + Sync>);

impl std::fmt::Debug for HealthCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HealthCheck")
    }
}

impl HealthCheck {
    /// Answers each probe with `check().await` (within the endpoint's response timeout).
    /// The endpoint is unauthenticated: `check` should be cheap or cached.
    pub fn new<F, Fut>(check: F) -> HealthCheck
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Health> + Send + 'static,
    {
        HealthCheck(Arc::new(move || Box::pin(check()) as HealthFuture))
    }

    /// The health of `node`: [`Health::of_status`] of its [`Node::status`](crate::Node::status),
    /// which the driver answers, so a driver that stopped or hangs is
    /// [`Health::Down`] (no answer within [`HEALTH_STATUS_TIMEOUT`]). An answer is
    /// reused for [`HEALTH_CACHE`] and one request is in flight at a time, so a flood of
    /// probes does not reach the driver.
    pub fn node(node: crate::Node) -> HealthCheck {
        let last: Arc<tokio::sync::Mutex<Option<(tokio::time::Instant, Health)>>> = Arc::default();
        HealthCheck::new(move || {
            let node = node.clone();
            let last = last.clone();
            async move {
                let mut last = last.lock().await;
                if let Some((at, health)) = &*last {
                    if at.elapsed() < HEALTH_CACHE {
                        return health.clone();
                    }
                }
                let health = match tokio::time::timeout(HEALTH_STATUS_TIMEOUT, node.status()).await
                {
                    Ok(Ok(status)) => Health::of_status(&status),
                    Ok(Err(stopped)) => Health::Down(format!("the node stopped: {stopped}")),
                    Err(_) => Health::Down(format!(
                        "the node's driver did not answer within {} s",
                        HEALTH_STATUS_TIMEOUT.as_secs()
                    )),
                };
                *last = Some((tokio::time::Instant::now(), health.clone()));
                health
            }
        })
    }

    fn check(&self) -> HealthFuture {
        (self.0)()
    }
}

/// What the metrics endpoint did so far ([`MetricsServer::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Connections open now.
    pub open: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Requests answered (200, 404, or 503 from `/ready` and `/live`).
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
/// per connection (`Connection: close`), any other request answered 404. With
/// [`ServeOptions::health`], also `GET /ready` and `GET /live` ([`Health`]): 200 or 503,
/// with one line of text.
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
    let health = options.health.clone();
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
                health: health.clone(),
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
    health: Option<HealthCheck>,
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
        let health = self.health.clone();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            if let Some(tx) = head_tx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
            {
                let _ = tx.send(());
            }
            let probe = health
                .as_ref()
                .and_then(|h| Probe::of(&req).map(|p| (p, h.check())));
            let response = match probe {
                None => Ok(answer(&req, &*render, health.is_some())),
                Some(probe) => Err(probe),
            };
            async move {
                Ok::<_, Infallible>(match response {
                    Ok(response) => response,
                    Err((probe, check)) => probe.answer(check.await),
                })
            }
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

/// 200 with `render()` for `GET /metrics` and `GET /`, 404 for anything else (but the
/// probes, when `probes` are served: [`Probe`]).
fn answer(
    req: &Request<hyper::body::Incoming>,
    render: &dyn Fn() -> String,
    probes: bool,
) -> Response<Full<Bytes>> {
    let served = req.method() == Method::GET && matches!(req.uri().path(), "/metrics" | "/");
    let (status, content_type, body) = if served {
        (StatusCode::OK, prometheus_text::CONTENT_TYPE, render())
    } else if probes {
        (
            StatusCode::NOT_FOUND,
            "text/plain",
            "only GET /metrics, /ready and /live are served\n".to_string(),
        )
    } else {
        (
            StatusCode::NOT_FOUND,
            "text/plain",
            "only GET /metrics is served\n".to_string(),
        )
    };
    response(status, content_type, body)
}

fn response(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A probe request: `GET /ready` or `GET /live`.
#[derive(Debug, Clone, Copy)]
enum Probe {
    Ready,
    Live,
}

impl Probe {
    fn of(req: &Request<hyper::body::Incoming>) -> Option<Probe> {
        if req.method() != Method::GET {
            return None;
        }
        match req.uri().path() {
            "/ready" => Some(Probe::Ready),
            "/live" => Some(Probe::Live),
            _ => None,
        }
    }

    /// 200 `ready` / `live`, or 503 with the reason (on one line).
    fn answer(self, health: Health) -> Response<Full<Bytes>> {
        let fail = match (self, health) {
            (Probe::Ready, Health::Ready) => None,
            (Probe::Live, Health::Ready | Health::NotReady(_)) => None,
            (Probe::Ready, Health::NotReady(why) | Health::Down(why)) => Some(why),
            (Probe::Live, Health::Down(why)) => Some(why),
        };
        let text = "text/plain; charset=utf-8";
        match fail {
            None => {
                let ok = match self {
                    Probe::Ready => "ready",
                    Probe::Live => "live",
                };
                response(StatusCode::OK, text, format!("{ok}\n"))
            }
            Some(why) => {
                let line: String = why.lines().collect::<Vec<_>>().join(" ");
                response(StatusCode::SERVICE_UNAVAILABLE, text, format!("{line}\n"))
            }
        }
    }
}

/// Takes one off the open-connection count when the connection's task ends.
struct OpenGuard<'a>(&'a AtomicU64);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Membership, Node, Role, Status, Timing};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// `GET path` on `addr`: (status code, headers without `date`, body).
    async fn get(addr: SocketAddr, path: &str) -> (u16, Vec<String>, String) {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .await
            .expect("send");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.expect("read");
        let raw = String::from_utf8(raw).expect("utf-8");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
        let mut lines = head.lines();
        let code = lines.next().expect("status line")[9..12]
            .parse()
            .expect("code");
        let headers = lines
            .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
            .map(str::to_string)
            .collect();
        (code, headers, body.to_string())
    }

    fn status(role: Role, leased: bool, quorum_healthy: bool) -> Status {
        Status {
            id: 1,
            term: 7,
            role,
            leader: Some(2),
            leased,
            members: Membership::default(),
            quorum_healthy,
            peers_reachable: 1,
            commit: 0,
            applied: 0,
            change_in_flight: false,
            disk_stalled: false,
            peers_disk_stalled: Vec::new(),
        }
    }

    #[test]
    fn ready_means_a_voter_that_hears_its_leader_or_the_leader_with_its_lease() {
        use Health::*;
        assert_eq!(Health::of_status(&status(Role::Leader, true, true)), Ready);
        assert_eq!(
            Health::of_status(&status(Role::Follower, false, true)),
            Ready
        );
        let not_ready = [
            (
                status(Role::Leader, false, false),
                "without a confirmed lease",
            ),
            (status(Role::Follower, false, false), "hears no leader"),
            (status(Role::PreCandidate, false, false), "campaigning"),
            (status(Role::Candidate, false, false), "campaigning"),
            (status(Role::Learner, false, true), "a learner"),
            (status(Role::Joining, false, false), "joining"),
            (status(Role::Founding, false, false), "founding"),
            (status(Role::Removed, false, false), "removed"),
        ];
        for (s, why) in not_ready {
            match Health::of_status(&s) {
                NotReady(r) => assert!(r.contains(why), "{:?}: {r}", s.role),
                other => panic!("{:?}: {other:?}", s.role),
            }
        }
        assert!(matches!(
            Health::of_status(&status(Role::Stopped, false, false)),
            Down(_)
        ));
    }

    #[tokio::test]
    async fn probes_answer_from_the_health_check_and_metrics_stay_the_same() {
        let text = "# HELP tenure_term t.\n# TYPE tenure_term gauge\ntenure_term{node=\"1\"} 7\n";
        let now = Arc::new(Mutex::new(Health::Ready));
        let h = now.clone();
        let options = ServeOptions {
            health: Some(HealthCheck::new(move || {
                let h = h.lock().unwrap().clone();
                async move { h }
            })),
            ..Default::default()
        };
        let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let probed = serve_with(local, move || text.to_string(), options)
            .await
            .unwrap();
        let plain = serve_with(local, move || text.to_string(), ServeOptions::default())
            .await
            .unwrap();
        let (p, q) = (probed.local_addr(), plain.local_addr());

        // /metrics (and /) as without probes: the same status, headers and bytes.
        for path in ["/metrics", "/"] {
            let with = get(p, path).await;
            assert_eq!(with, get(q, path).await);
            assert_eq!((with.0, with.2.as_str()), (200, text));
        }
        // Without a health check the probes are not served.
        let (code, _, body) = get(q, "/ready").await;
        assert_eq!(
            (code, body.as_str()),
            (404, "only GET /metrics is served\n")
        );
        assert_eq!(get(q, "/live").await.0, 404);

        let probes = |a| async move {
            let (r, _, rb) = get(a, "/ready").await;
            let (l, _, lb) = get(a, "/live").await;
            (r, rb, l, lb)
        };
        assert_eq!(
            probes(p).await,
            (200, "ready\n".into(), 200, "live\n".into())
        );
        *now.lock().unwrap() = Health::NotReady("follower in term 3 that hears no leader".into());
        assert_eq!(
            probes(p).await,
            (
                503,
                "follower in term 3 that hears no leader\n".into(),
                200,
                "live\n".into()
            )
        );
        // A reason of several lines is sent as one.
        *now.lock().unwrap() = Health::Down("the node stopped:\nstorage failed".into());
        let down = "the node stopped: storage failed\n".to_string();
        assert_eq!(probes(p).await, (503, down.clone(), 503, down));
        let (code, headers, _) = get(p, "/ready").await;
        assert_eq!(code, 503);
        assert!(
            headers.contains(&"content-type: text/plain; charset=utf-8".to_string()),
            "{headers:?}"
        );
        let (code, _, body) = get(p, "/health").await;
        assert_eq!(
            (code, body.as_str()),
            (404, "only GET /metrics, /ready and /live are served\n")
        );
        probed.abort();
        plain.abort();
    }

    /// Three real nodes (QUIC, RocksDB): node 1's probes over HTTP while it founds alone,
    /// once the group has a leader, after the other two stopped, and after it stopped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_is_ready_while_its_group_is_usable_from_its_view() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        crate::transport::tls::write_cluster_certs(&certs, [1, 2, 3]).unwrap();
        let addrs: Vec<(u64, SocketAddr)> = (1..=3)
            .map(|id| {
                let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                (id, s.local_addr().unwrap())
            })
            .collect();
        let group = crate::GroupId::random();
        let config = |id: u64| {
            Config::builder(id)
                .peers(addrs.iter().copied())
                .data_dir(dir.path().join(format!("data-{id}")))
                .tls_dir(&certs)
                .timing(Timing::from_millis(10, 30, 150, 250))
                .found(group)
                .build()
        };
        let one = Node::start(config(1)).await.unwrap();
        let options = ServeOptions {
            health: Some(HealthCheck::node(one.clone())),
            ..Default::default()
        };
        let n = one.clone();
        let server = serve_with(
            "127.0.0.1:0".parse().unwrap(),
            move || n.metrics_text(),
            options,
        )
        .await
        .unwrap();
        let addr = server.local_addr();
        // Polls /ready until its answer satisfies `ok`; (code, body).
        let until = |what: &'static str, ok: fn(u16, &str) -> bool| async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                let (code, _, body) = get(addr, "/ready").await;
                if ok(code, &body) {
                    return (code, body);
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{what}: still {code} {body:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };

        let (_, why) = until("founding", |c, b| c == 503 && b.contains("founding")).await;
        assert!(why.ends_with('\n') && why.lines().count() == 1, "{why:?}");
        assert_eq!(get(addr, "/live").await.0, 200);
        let others = [
            Node::start(config(2)).await.unwrap(),
            Node::start(config(3)).await.unwrap(),
        ];
        until("ready", |c, b| c == 200 && b == "ready\n").await;
        // The values move between two reads (ticks, messages); the series served are
        // the node's own.
        let names = |text: &str| -> std::collections::BTreeSet<String> {
            let lines = text.lines().map(|l| Ok(l.to_string()));
            let scrape = prometheus_parse::Scrape::parse(lines).expect("valid exposition");
            scrape.samples.into_iter().map(|s| s.metric).collect()
        };
        let served = get(addr, "/metrics").await.2;
        assert!(served.contains("tenure_"), "{served}");
        // A family may gain its first series between the two reads, never lose one.
        let (served, now) = (names(&served), names(&one.metrics_text()));
        assert!(served.is_subset(&now), "{served:?} vs {now:?}");
        assert!(served.len() > 10, "{served:?}");

        for n in &others {
            n.shutdown().await.unwrap();
        }
        // Alone, node 1 is a leader that loses its lease, or a follower whose leader is
        // gone: not ready, and still live.
        let (_, why) = until("not ready", |c, _| c == 503).await;
        assert!(
            [
                "without a confirmed lease",
                "hears no leader",
                "campaigning"
            ]
            .iter()
            .any(|w| why.contains(w)),
            "{why:?}"
        );
        assert_eq!(get(addr, "/live").await.0, 200);

        one.shutdown().await.unwrap();
        tokio::time::sleep(HEALTH_CACHE).await;
        let (code, _, body) = get(addr, "/live").await;
        assert_eq!(code, 503, "{body}");
        assert!(body.starts_with("the node stopped"), "{body}");
        server.abort();
    }
}
