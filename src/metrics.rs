//! Metrics in the Prometheus text exposition format, and a tiny HTTP endpoint.
//!
//! [`Node::metrics`](crate::Node::metrics) returns this node's [`Metrics`]; the driver
//! updates it. [`Metrics::render`] produces the text; [`serve`] answers `GET /metrics`
//! ([`serve_with`] with a logger and other limits). Values are the latest state, not
//! every change.
//!
//! The endpoint is unauthenticated, so it bounds what a client can hold
//! ([`ServeOptions`]): at most 32 connections (when all are taken, the oldest one that
//! has not sent its request is closed to make room for the new one), 5 s to send the
//! request and 5 s to take the answer; an accept error (`EMFILE`: out of file
//! descriptors) pauses the loop, 10 ms doubling to 1 s, and is logged once a minute.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `tenure_term` | gauge | current Raft term at this node |
//! | `tenure_role` | gauge | 0 follower, 1 pre-candidate, 2 candidate, 3 leader, 4 stopped, 5 learner, 6 removed, 7 joining |
//! | `tenure_leader_id` | gauge | leader this node knows of (0: none) |
//! | `tenure_lease_held` | gauge | 1 while this node holds a confirmed lease |
//! | `tenure_members` | gauge | voters in the group |
//! | `tenure_peers_reachable` | gauge | voters heard from recently (leader: itself and the voters heard from within an election timeout; follower: 1 + leader) |
//! | `tenure_quorum_healthy` | gauge | leader: holds its lease; follower: hears from a leader |
//! | `tenure_lease_renew_seconds` | histogram | round trip of quorum-acknowledged ReadIndex rounds |
//! | `tenure_failover_seconds` | histogram | time this node spent without a known leader, per episode |
//! | `tenure_elections_started_total` | counter | campaigns this node started (became candidate) |
//! | `tenure_elections_won_total` | counter | times this node became leader |
//! | `tenure_leases_acquired_total` | counter | leases granted |
//! | `tenure_lease_expiries_total` | counter | leases that ran out unrenewed |
//! | `tenure_lease_revocations_total{reason}` | counter | leases revoked, by reason |
//! | `tenure_fence_accepted_total{fence}` / `tenure_fence_rejections_total{fence}` | counter | registered fences |
//! | `tenure_transport_*_total` | counter | messages sent/received/dropped, frames rejected, connections |
//! | `tenure_peer_messages_refused_total{reason}` | counter | authenticated peer messages dropped before raft-rs, by [`Refusal`] (a correct peer sends none) |

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::error::LostReason;
use crate::fence::FenceStats;
use crate::peer_input::Refusal;
use crate::transport::TransportStatsSnapshot;

const RENEW_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
];
const FAILOVER_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];

/// A cumulative histogram with fixed buckets (seconds).
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if s <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// This node's metrics. Shared (`Arc`) between the driver, the node handle and the
/// HTTP endpoint.
#[derive(Debug)]
pub struct Metrics {
    node: u64,
    term: AtomicU64,
    role: AtomicU64,
    leader: AtomicU64,
    lease_held: AtomicU64,
    members: AtomicU64,
    peers_reachable: AtomicU64,
    quorum_healthy: AtomicU64,
    elections_started: AtomicU64,
    elections_won: AtomicU64,
    leases_acquired: AtomicU64,
    revocations: [AtomicU64; 6],
    renew: Histogram,
    failover: Histogram,
    fences: Mutex<Vec<(String, Arc<FenceStats>)>>,
    transport: Mutex<Option<TransportStatsSnapshot>>,
    peer_refused: [AtomicU64; Refusal::ALL.len()],
}

const REASONS: [LostReason; 6] = [
    LostReason::Expired,
    LostReason::TermChanged,
    LostReason::SteppedDown,
    LostReason::HandedOver,
    LostReason::Shutdown,
    LostReason::Failed,
];

impl Metrics {
    /// Empty metrics for node `node`.
    pub fn new(node: u64) -> Arc<Metrics> {
        Arc::new(Metrics {
            node,
            term: AtomicU64::new(0),
            role: AtomicU64::new(0),
            leader: AtomicU64::new(0),
            lease_held: AtomicU64::new(0),
            members: AtomicU64::new(0),
            peers_reachable: AtomicU64::new(0),
            quorum_healthy: AtomicU64::new(0),
            elections_started: AtomicU64::new(0),
            elections_won: AtomicU64::new(0),
            leases_acquired: AtomicU64::new(0),
            revocations: Default::default(),
            renew: Histogram::new(RENEW_BUCKETS),
            failover: Histogram::new(FAILOVER_BUCKETS),
            fences: Mutex::new(Vec::new()),
            transport: Mutex::new(None),
            peer_refused: Default::default(),
        })
    }

    /// Adds a fence's counters to the exposition (`tenure_fence_*{fence="name"}`).
    pub fn register_fence(&self, name: &str, stats: Arc<FenceStats>) {
        self.fences
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), stats));
    }

    pub(crate) fn set_state(&self, term: u64, role: u64, leader: u64, lease_held: bool) {
        self.term.store(term, Ordering::Relaxed);
        self.role.store(role, Ordering::Relaxed);
        self.leader.store(leader, Ordering::Relaxed);
        self.lease_held.store(lease_held as u64, Ordering::Relaxed);
    }

    pub(crate) fn set_health(&self, members: u64, reachable: u64, quorum_healthy: bool) {
        self.members.store(members, Ordering::Relaxed);
        self.peers_reachable.store(reachable, Ordering::Relaxed);
        self.quorum_healthy
            .store(quorum_healthy as u64, Ordering::Relaxed);
    }

    pub(crate) fn election_started(&self) {
        self.elections_started.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn election_won(&self) {
        self.elections_won.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lease_acquired(&self) {
        self.leases_acquired.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lease_revoked(&self, reason: LostReason) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.revocations[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn renew_round_trip(&self, d: Duration) {
        self.renew.observe(d);
    }

    pub(crate) fn leaderless_for(&self, d: Duration) {
        self.failover.observe(d);
    }

    pub(crate) fn set_transport(&self, t: TransportStatsSnapshot) {
        *self.transport.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
    }

    pub(crate) fn peer_refused_one(&self, r: Refusal) {
        self.peer_refused[r.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Peer messages refused so far for `reason` (dropped before raft-rs saw them).
    pub fn peer_refused(&self, reason: Refusal) -> u64 {
        self.peer_refused[reason.index()].load(Ordering::Relaxed)
    }

    /// Lease revocations so far for `reason`.
    pub fn revocations(&self, reason: LostReason) -> u64 {
        REASONS
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.revocations[i].load(Ordering::Relaxed))
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let node = self.node;
        let mut gauge = |name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name}{{node=\"{node}\"}} {v}");
        };
        gauge(
            "tenure_term",
            "Current Raft term at this node.",
            l(&self.term),
        );
        gauge(
            "tenure_role",
            "0 follower, 1 pre-candidate, 2 candidate, 3 leader, 4 stopped, 5 learner, 6 removed, 7 joining.",
            l(&self.role),
        );
        gauge(
            "tenure_leader_id",
            "Leader known to this node (0: none).",
            l(&self.leader),
        );
        gauge(
            "tenure_lease_held",
            "1 while this node holds a confirmed lease.",
            l(&self.lease_held),
        );
        gauge("tenure_members", "Voters in the group.", l(&self.members));
        gauge(
            "tenure_peers_reachable",
            "Voters heard from recently, this node included.",
            l(&self.peers_reachable),
        );
        gauge(
            "tenure_quorum_healthy",
            "Leader: holds its lease. Follower: hears from a leader.",
            l(&self.quorum_healthy),
        );
        let mut counter = |name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name}{{node=\"{node}\"}} {v}");
        };
        counter(
            "tenure_elections_started_total",
            "Campaigns this node started.",
            l(&self.elections_started),
        );
        counter(
            "tenure_elections_won_total",
            "Times this node became leader.",
            l(&self.elections_won),
        );
        counter(
            "tenure_leases_acquired_total",
            "Leases granted.",
            l(&self.leases_acquired),
        );
        counter(
            "tenure_lease_expiries_total",
            "Leases that ran out unrenewed.",
            self.revocations(LostReason::Expired),
        );
        let _ = writeln!(
            out,
            "# HELP tenure_lease_revocations_total Leases revoked, by reason."
        );
        let _ = writeln!(out, "# TYPE tenure_lease_revocations_total counter");
        for (i, r) in REASONS.iter().enumerate() {
            let _ = writeln!(
                out,
                "tenure_lease_revocations_total{{node=\"{node}\",reason=\"{}\"}} {}",
                r.as_str(),
                l(&self.revocations[i])
            );
        }
        let _ = writeln!(
            out,
            "# HELP tenure_peer_messages_refused_total Peer messages dropped before raft-rs, by reason."
        );
        let _ = writeln!(out, "# TYPE tenure_peer_messages_refused_total counter");
        for r in Refusal::ALL {
            let _ = writeln!(
                out,
                "tenure_peer_messages_refused_total{{node=\"{node}\",reason=\"{}\"}} {}",
                r.as_str(),
                self.peer_refused(r)
            );
        }
        self.renew.render(
            &mut out,
            "tenure_lease_renew_seconds",
            "Round trip of quorum-acknowledged ReadIndex rounds.",
        );
        self.failover.render(
            &mut out,
            "tenure_failover_seconds",
            "Time this node spent without a known leader, per episode.",
        );
        let fences = self
            .fences
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if !fences.is_empty() {
            let _ = writeln!(
                out,
                "# HELP tenure_fence_accepted_total Writes a fence accepted."
            );
            let _ = writeln!(out, "# TYPE tenure_fence_accepted_total counter");
            for (name, s) in &fences {
                let _ = writeln!(
                    out,
                    "tenure_fence_accepted_total{{fence=\"{}\"}} {}",
                    escape(name),
                    s.snapshot().accepted
                );
            }
            let _ = writeln!(
                out,
                "# HELP tenure_fence_rejections_total Writes a fence rejected (stale token)."
            );
            let _ = writeln!(out, "# TYPE tenure_fence_rejections_total counter");
            for (name, s) in &fences {
                let _ = writeln!(
                    out,
                    "tenure_fence_rejections_total{{fence=\"{}\"}} {}",
                    escape(name),
                    s.snapshot().rejected_stale
                );
            }
        }
        if let Some(t) = *self.transport.lock().unwrap_or_else(|e| e.into_inner()) {
            let rows: [(&str, &str, u64); 14] = [
                ("sent", "Messages handed to a connection.", t.sent),
                ("received", "Messages delivered to the driver.", t.received),
                (
                    "dropped_queue_full",
                    "Messages dropped: peer queue full.",
                    t.dropped_queue_full,
                ),
                (
                    "dropped_unknown_peer",
                    "Messages dropped: unknown peer.",
                    t.dropped_unknown_peer,
                ),
                (
                    "dropped_inbound_full",
                    "Inbound messages dropped: driver busy.",
                    t.dropped_inbound_full,
                ),
                (
                    "from_mismatch",
                    "Messages dropped: sender differs from certificate.",
                    t.from_mismatch,
                ),
                (
                    "frames_oversized",
                    "Frames over the size limit.",
                    t.frames_oversized,
                ),
                (
                    "frames_malformed",
                    "Frames that did not decode.",
                    t.frames_malformed,
                ),
                (
                    "connections_refused",
                    "Incoming connections refused.",
                    t.connections_refused,
                ),
                (
                    "connect_failures",
                    "Outbound connection attempts that failed.",
                    t.connect_failures,
                ),
                (
                    "frames_too_many_entries",
                    "Frames with more entries than the limit.",
                    t.frames_too_many_entries,
                ),
                (
                    "frames_timed_out",
                    "Frames not received within the frame deadline.",
                    t.frames_timed_out,
                ),
                (
                    "frames_waited_for_budget",
                    "Frames that waited for the inbound byte budget.",
                    t.frames_waited_for_budget,
                ),
                (
                    "connections_over_limit",
                    "Incoming connections refused: the peer had too many.",
                    t.connections_over_limit,
                ),
            ];
            for (name, help, v) in rows {
                let _ = writeln!(out, "# HELP tenure_transport_{name}_total {help}");
                let _ = writeln!(out, "# TYPE tenure_transport_{name}_total counter");
                let _ = writeln!(out, "tenure_transport_{name}_total{{node=\"{node}\"}} {v}");
            }
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Default most connections the metrics endpoint serves at once: 32.
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;
/// Default time a connection has to send its request head: 5 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time the answer may take to be written: 5 s.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request head read (bytes); a longer one is dropped.
const MAX_REQUEST_HEAD: usize = 4096;
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
    /// Time writing the answer may take ([`DEFAULT_RESPONSE_TIMEOUT`]); then the
    /// connection is closed.
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
    /// (or a head that was too long or cut off).
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
    waiting: std::collections::VecDeque<(u64, tokio_util::sync::CancellationToken)>,
}

/// Serves `GET /metrics` (and `GET /`) on `addr` with `render()`, within the limits of
/// `options`: HTTP/1.1, one request per connection (`Connection: close`), any other
/// request answered 404.
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
    let render = Arc::new(render);
    let counters = Arc::new(ServeCounters::default());
    let idle = Arc::new(Mutex::new(Idle::default()));
    let max = options.max_connections.max(1);
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
            let token = tokio_util::sync::CancellationToken::new();
            let id = {
                let mut idle = idle.lock().unwrap_or_else(|e| e.into_inner());
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
            let (render, c, idle) = (render.clone(), c.clone(), idle.clone());
            let (request_timeout, response_timeout) =
                (options.request_timeout, options.response_timeout);
            tokio::spawn(async move {
                let _open = OpenGuard(&c.open);
                let head = tokio::select! {
                    _ = token.cancelled() => None,
                    h = tokio::time::timeout(request_timeout, read_head(sock)) => Some(h),
                };
                idle.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .waiting
                    .retain(|(i, _)| *i != id);
                let (mut sock, first) = match head {
                    None => return, // evicted (counted by the accept loop)
                    Some(Ok(Some(h))) => h,
                    Some(_) => {
                        c.timed_out.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                };
                let (status, ctype, body) =
                    if first.starts_with("GET /metrics ") || first.starts_with("GET / ") {
                        (
                            "200 OK",
                            "text/plain; version=0.0.4; charset=utf-8",
                            render(),
                        )
                    } else {
                        (
                            "404 Not Found",
                            "text/plain",
                            "only GET /metrics is served\n".to_string(),
                        )
                    };
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let written = tokio::time::timeout(response_timeout, async {
                    sock.write_all(resp.as_bytes()).await?;
                    sock.shutdown().await
                })
                .await;
                if matches!(written, Ok(Ok(()))) {
                    c.answered.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    Ok(MetricsServer {
        local_addr: local,
        task,
        counters,
    })
}

/// Takes one off the open-connection count when the connection's task ends.
struct OpenGuard<'a>(&'a AtomicU64);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads a request head (up to a blank line, at most [`MAX_REQUEST_HEAD`] bytes);
/// returns the socket and the request line, or `None` for a head that was cut off or
/// too long.
async fn read_head(mut sock: tokio::net::TcpStream) -> Option<(tokio::net::TcpStream, String)> {
    let mut buf = vec![0u8; MAX_REQUEST_HEAD];
    let mut n = 0;
    while n < buf.len() {
        match sock.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => return None,
            Ok(k) => n += k,
        }
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buf[..n]);
            let first = text.lines().next().unwrap_or("").to_string();
            return Some((sock, first));
        }
    }
    None
}
