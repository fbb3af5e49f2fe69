//! The outbound task of one peer: resolve its name (if it has one), connect (and check
//! whose certificate answers), pump the queued messages into one stream, and on failure
//! report the peer unreachable and reconnect with backoff.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, SendStream};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use slog::{debug, info, o, warn, Logger};
use tokio::sync::mpsc;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::tls::node_server_name;
use crate::transport::frame::{self, FrameError};
use crate::transport::{NodeId, PeerAddr, TransportStats};

use super::config::{Settings, RESOLVE_TIMEOUT};
use super::shared::{describe_loss, peer_node_id, Lanes, Peer, Queued, Shared};
use super::{close_code, code};

/// How long a connect attempt may go unanswered by a peer known to be up (it just
/// connected to us) before it is restarted.
const ANSWER_GRACE: Duration = Duration::from_millis(100);
/// How long a connected task waits for the peer's name to resolve when the peer has
/// connected to us anew (to learn whether it moved); on no answer it keeps its
/// connection.
const MOVED_CHECK_TIMEOUT: Duration = Duration::from_secs(1);
/// A deadline that never comes.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365);

/// Why a connect attempt or a connection ended.
enum Ended {
    /// The transport closed or the peer was removed: the task stops.
    Stop,
    /// Connect failed or the connection was lost: back off and reconnect.
    Failed(String),
    /// The peer showed up while a connect attempt was pending: retry at once.
    Retry,
}

/// The outbound task of one peer.
pub(super) struct Outbound {
    shared: Arc<Shared>,
    peer: NodeId,
    rx: Lanes,
    addr: watch::Receiver<PeerAddr>,
    /// Which of the addresses a name resolves to the next attempt dials (moves on after
    /// each failed attempt, so one dead address of several is not the only one tried).
    rotate: usize,
    /// Whether this node's socket is IPv4: a name's IPv6 addresses are then skipped.
    ipv4_only: bool,
    cancel: CancellationToken,
    /// See [`Peer::seen`].
    seen: Arc<Notify>,
    /// Messages kept while disconnected (the most recent few).
    backlog: VecDeque<Queued>,
    /// The reconnect jitter's draws: OS-seeded, or from [`QuicConfig::rng_seed`] and the
    /// peer (a simulation that replays).
    jitter: StdRng,
    log: Logger,
}

impl Outbound {
    /// Peer `peer`'s handle and its outbound task (not started yet), joined by the
    /// peer's queue, its address, its cancellation and its `seen` notification.
    pub(super) fn new(shared: Arc<Shared>, peer: NodeId, addr: PeerAddr) -> (Peer, Outbound) {
        let (queue, bulk) = mpsc::channel(shared.settings.queue_depth);
        let (urgent, urgent_rx) = mpsc::channel(shared.settings.queue_depth);
        let rx = Lanes {
            urgent: urgent_rx,
            bulk,
        };
        let (addr_tx, addr_rx) = watch::channel(addr);
        let cancel = shared.shutdown.child_token();
        let seen = Arc::new(Notify::new());
        let handle = Peer {
            queue,
            urgent,
            addr: addr_tx,
            cancel: cancel.clone(),
            seen: seen.clone(),
            connections: Default::default(),
        };
        let log = shared.log.new(o!("peer" => peer));
        let ipv4_only = shared.endpoint.local_addr().is_ok_and(|a| a.is_ipv4());
        let jitter = match shared.settings.rng_seed {
            Some(seed) => StdRng::seed_from_u64(seed ^ 0x0b0f_f5e7 ^ peer.rotate_left(32)),
            None => StdRng::from_entropy(),
        };
        let task = Outbound {
            shared,
            peer,
            rx,
            addr: addr_rx,
            rotate: 0,
            ipv4_only,
            cancel,
            seen,
            backlog: VecDeque::new(),
            jitter,
            log,
        };
        (handle, task)
    }

    pub(super) async fn run(mut self) {
        if !self.wait_for_hello().await {
            return;
        }
        let mut attempt: u32 = 0;
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            let started = tokio::time::Instant::now();
            let ended = match self.connect().await {
                Ok((conn, stream)) => {
                    TransportStats::bump(&self.shared.stats.connects);
                    if let Some(since) = failing_since.take() {
                        info!(self.log, "connected to peer";
                            "after_failing_for" => format!("{:?}", since.elapsed()));
                    } else {
                        debug!(self.log, "connected to peer");
                    }
                    let ended = self.pump(&conn, stream).await;
                    let reason: &[u8] = match &ended {
                        Ended::Stop => b"closing",
                        Ended::Failed(_) | Ended::Retry => b"reconnecting",
                    };
                    self.shared
                        .close_conn(&conn, close_code::SHUTDOWN, reason)
                        .await;
                    ended
                }
                Err(Ended::Failed(e)) => {
                    TransportStats::bump(&self.shared.stats.connect_failures);
                    self.rotate = self.rotate.wrapping_add(1);
                    Ended::Failed(format!("connect failed: {e}"))
                }
                Err(Ended::Retry) => {
                    debug!(
                        self.log,
                        "peer connected to us; retrying the connect at once"
                    );
                    attempt = 0;
                    continue;
                }
                Err(Ended::Stop) => Ended::Stop,
            };
            let reason = match ended {
                Ended::Failed(reason) => reason,
                Ended::Retry => continue,
                Ended::Stop => return,
            };
            if failing_since.is_none() {
                failing_since = Some(tokio::time::Instant::now());
                info!(self.log, "peer unreachable"; "reason" => &reason);
            } else {
                debug!(self.log, "peer still unreachable"; "reason" => &reason);
            }
            self.shared.report_unreachable(self.peer);
            // A connection that stayed up a while starts a new failure episode; one that
            // drops right away keeps backing off (e.g. the peer refuses us).
            if started.elapsed() >= self.shared.settings.backoff_max {
                attempt = 0;
            }
            let delay = backoff_delay(&self.shared.settings, attempt, &mut self.jitter);
            attempt = attempt.saturating_add(1);
            if let Ended::Stop = self.wait(delay).await {
                return;
            }
        }
    }

    /// Waits until this node's hello is set (keeping what is sent meanwhile), so that the
    /// first connection already says what the node's store holds. False: stop.
    async fn wait_for_hello(&mut self) -> bool {
        let mut hello = self.shared.hello.subscribe();
        loop {
            if hello.borrow_and_update().is_some() {
                return true;
            }
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return false,
                changed = hello.changed() => {
                    if changed.is_err() {
                        return false;
                    }
                }
                msg = self.rx.recv() => match msg {
                    Some(msg) => self.keep(msg),
                    None => return false,
                },
            }
        }
    }

    /// Keeps `msg` for the next connection, dropping the oldest kept one when full.
    fn keep(&mut self, msg: Queued) {
        self.backlog.push_back(msg);
        while self.backlog.len() > self.shared.settings.keep_while_disconnected {
            self.backlog.pop_front();
            TransportStats::bump(&self.shared.stats.dropped_disconnected);
        }
    }

    /// Waits `delay` (or until the peer's address changes), draining the queue.
    async fn wait(&mut self, delay: Duration) -> Ended {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ended::Stop,
                _ = &mut sleep => return Ended::Retry,
                _ = self.seen.notified() => return Ended::Retry,
                changed = self.addr.changed() => {
                    if changed.is_err() {
                        return Ended::Stop;
                    }
                    return Ended::Retry;
                }
                msg = self.rx.recv() => match msg {
                    Some(msg) => self.keep(msg),
                    None => return Ended::Stop,
                },
            }
        }
    }

    /// Where to dial now: the peer's IP address, or one of the addresses its name
    /// resolves to now (taken in turn after failed attempts). Drains the queue while the
    /// name resolves; a name that does not resolve within [`RESOLVE_TIMEOUT`] fails the
    /// attempt.
    async fn target(&mut self) -> Result<SocketAddr, Ended> {
        let addr = self.addr.borrow_and_update().clone();
        if let PeerAddr::Ip(a) = addr {
            return Ok(a);
        }
        let resolver = self.shared.resolver.clone();
        let resolving = tokio::time::timeout(RESOLVE_TIMEOUT, addr.resolve(&*resolver));
        tokio::pin!(resolving);
        let resolved = loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Ended::Stop),
                r = &mut resolving => break r,
                msg = self.rx.recv() => match msg {
                    Some(msg) => self.keep(msg),
                    None => return Err(Ended::Stop),
                },
            }
        };
        let all = match resolved {
            Ok(Ok(all)) => all,
            Ok(Err(e)) => return Err(Ended::Failed(format!("cannot resolve {addr}: {e}"))),
            Err(_) => {
                return Err(Ended::Failed(format!(
                    "cannot resolve {addr}: no answer within {RESOLVE_TIMEOUT:?}"
                )))
            }
        };
        let usable: Vec<SocketAddr> = all
            .iter()
            .copied()
            .filter(|a| !self.ipv4_only || a.is_ipv4())
            .collect();
        if usable.is_empty() {
            return Err(Ended::Failed(format!(
                "{addr} resolves only to IPv6 addresses ({all:?}) and this node's socket is IPv4"
            )));
        }
        let chosen = usable[self.rotate % usable.len()];
        debug!(self.log, "resolved peer"; "name" => %addr, "to" => %chosen,
            "addresses" => ?usable);
        Ok(chosen)
    }

    /// After the peer connected to us anew while our connection is up: whether its name
    /// now resolves to addresses without the one our connection goes to (it moved, and
    /// our connection may go to where it was). `None`: keep the connection (an IP
    /// address, the same address, or no answer in time).
    async fn moved_from(&self, conn: &Connection) -> Option<Vec<SocketAddr>> {
        let addr = self.addr.borrow().clone();
        if !addr.is_name() {
            return None;
        }
        let resolver = self.shared.resolver.clone();
        let now = tokio::time::timeout(MOVED_CHECK_TIMEOUT, addr.resolve(&*resolver))
            .await
            .ok()?
            .ok()?;
        let canonical = |a: SocketAddr| (a.ip().to_canonical(), a.port());
        let ours = canonical(conn.remote_address());
        (!now.iter().any(|a| canonical(*a) == ours)).then_some(now)
    }

    /// Connects, checks the peer's identity and opens the stream, draining the queue
    /// meanwhile.
    async fn connect(&mut self) -> Result<(Connection, SendStream), Ended> {
        let dial = self.target().await?;
        // What the errors name: the address, and the name it came from.
        let addr = match &*self.addr.borrow() {
            PeerAddr::Ip(_) => dial.to_string(),
            name => format!("{name} ({dial})"),
        };
        let addr = addr.as_str();
        let server_name = node_server_name(self.peer);
        let connecting = self
            .shared
            .endpoint
            .connect_with(self.shared.tls.client_config(), dial, &server_name)
            .map_err(|e| Ended::Failed(format!("{addr}: {e}")))?;
        let peer = self.peer;
        let hello = (*self.shared.hello.borrow()).unwrap_or_default().to_peer(
            peer,
            &self
                .shared
                .quotes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut connecting = connecting;
        // Set once the peer has answered (its handshake messages arrived).
        let answered = AtomicBool::new(false);
        let answered = &answered;
        let attempt = async move {
            connecting
                .handshake_data()
                .await
                .map_err(|e| format!("{addr}: {e}"))?;
            answered.store(true, Ordering::Relaxed);
            let conn = connecting.await.map_err(|e| format!("{addr}: {e}"))?;
            match peer_node_id(&conn) {
                Ok(id) if id == peer => {}
                Ok(id) => {
                    conn.close(code(close_code::WRONG_PEER), b"wrong node");
                    return Err(format!("{addr} presented the certificate of node {id}"));
                }
                Err(e) => {
                    conn.close(code(close_code::WRONG_PEER), b"not a node certificate");
                    return Err(format!("{addr}: {e}"));
                }
            }
            let mut stream = conn.open_uni().await.map_err(|e| format!("{addr}: {e}"))?;
            stream
                .write_all(&hello.encode())
                .await
                .map_err(|e| format!("{addr}: {e}"))?;
            Ok((conn, stream))
        };
        tokio::pin!(attempt);
        let started = tokio::time::Instant::now();
        // When the peer connects to us, it is up. If our attempt has not been answered
        // within ANSWER_GRACE by then, its first packets went out while the peer was down
        // and now wait in retransmission backoff (about a second): start afresh.
        let mut recheck: Option<tokio::time::Instant> = None;
        loop {
            let deadline = recheck.unwrap_or_else(|| started + FAR_FUTURE);
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Ended::Stop),
                r = &mut attempt => return r.map_err(Ended::Failed),
                _ = self.seen.notified() => {
                    if !answered.load(Ordering::Relaxed) {
                        recheck = Some(started + ANSWER_GRACE);
                    }
                }
                _ = tokio::time::sleep_until(deadline), if recheck.is_some() => {
                    if !answered.load(Ordering::Relaxed) {
                        return Err(Ended::Retry);
                    }
                    recheck = None;
                }
                msg = self.rx.recv() => match msg {
                    Some(msg) => self.keep(msg),
                    None => return Err(Ended::Stop),
                },
            }
        }
    }

    /// Writes the backlog, then every queued message, until the connection ends.
    async fn pump(&mut self, conn: &Connection, mut stream: SendStream) -> Ended {
        let mut batch: Vec<Queued> = self.backlog.drain(..).collect();
        loop {
            let (frames, n, of_elections) = self.encode(&mut batch);
            if n > 0 {
                let bytes = frames.len() as u64;
                tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => return Ended::Stop,
                    r = stream.write_chunk(frames.into()) => {
                        if let Err(e) = r {
                            return Ended::Failed(format!("connection lost: {e}"));
                        }
                    }
                }
                self.shared.stats.sent.fetch_add(n, Ordering::Relaxed);
                self.shared
                    .stats
                    .election_sent
                    .fetch_add(of_elections, Ordering::Relaxed);
                self.shared
                    .stats
                    .bytes_sent
                    .fetch_add(bytes, Ordering::Relaxed);
            }
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ended::Stop,
                e = conn.closed() => return Ended::Failed(describe_loss(&e)),
                // The peer connected to us again: it may have restarted elsewhere, under
                // the same name, and our connection go to its old address (where nothing
                // answers with a reset). Ask the name again.
                _ = self.seen.notified() => {
                    if let Some(now) = self.moved_from(conn).await {
                        info!(self.log, "peer's name resolves elsewhere now; reconnecting";
                            "connected_to" => %conn.remote_address(), "resolves_to" => ?now);
                        return Ended::Retry;
                    }
                }
                msg = self.rx.recv() => match msg {
                    Some(msg) => {
                        batch.push(msg);
                        while batch.len() < 64 {
                            match self.rx.try_recv() {
                                Some(m) => batch.push(m),
                                None => break,
                            }
                        }
                    }
                    None => return Ended::Stop,
                },
            }
        }
    }

    /// Encodes and empties `batch`, root and election messages alike, in order, into one
    /// buffer; returns the frames, how many messages they hold, and how many of those
    /// are of named elections.
    fn encode(&self, batch: &mut Vec<Queued>) -> (Vec<u8>, u64, u64) {
        let mut buf = Vec::new();
        let (mut n, mut of_elections) = (0, 0);
        for (election, msg) in batch.drain(..) {
            let max_entries = self.shared.settings.max_entries;
            let encoded = if msg.entries.len() > max_entries {
                Err(FrameError::TooManyEntries {
                    count: msg.entries.len(),
                    max: max_entries,
                })
            } else {
                frame::encode_election_into(
                    election,
                    &msg,
                    self.shared.settings.max_frame,
                    &mut buf,
                )
            };
            match encoded {
                Ok(()) => {
                    n += 1;
                    if election != 0 {
                        of_elections += 1;
                    }
                }
                Err(e) => {
                    TransportStats::bump(&self.shared.stats.dropped_too_large);
                    warn!(self.log, "dropped outbound message"; "error" => %e,
                        "election" => election, "msg_type" => ?msg.get_msg_type());
                }
            }
        }
        (buf, n, of_elections)
    }
}

/// The delay before reconnect attempt `attempt` (0-based): `backoff_min * 2^attempt`
/// capped at `backoff_max`, then drawn uniformly from its upper half.
fn backoff_delay(s: &Settings, attempt: u32, rng: &mut impl Rng) -> Duration {
    let base = s
        .backoff_min
        .saturating_mul(1u32 << attempt.min(20))
        .min(s.backoff_max);
    let half = base / 2;
    let jitter = rng.gen_range(0..=half.as_micros() as u64);
    half + Duration::from_micros(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::frame::{DEFAULT_MAX_ENTRIES, DEFAULT_MAX_FRAME};
    use crate::transport::quic::{DEFAULT_FRAME_TIMEOUT, DEFAULT_MAX_CONNECTIONS_PER_PEER};

    #[test]
    fn backoff_grows_is_capped_and_jittered_within_the_upper_half() {
        let s = Settings {
            max_frame: DEFAULT_MAX_FRAME,
            max_entries: DEFAULT_MAX_ENTRIES,
            frame_timeout: DEFAULT_FRAME_TIMEOUT,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            queue_depth: 1,
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_secs(1),
            keep_while_disconnected: 1,
            rng_seed: None,
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for attempt in 0..40 {
            let base = (Duration::from_millis(20) * 2u32.pow(attempt.min(20))).min(s.backoff_max);
            for _ in 0..20 {
                let d = backoff_delay(&s, attempt, &mut rng);
                assert!(
                    d >= base / 2 && d <= base,
                    "attempt {attempt}: {d:?} vs {base:?}"
                );
            }
        }
    }
}
