//! [`Shared`]: what the transport's tasks share (the endpoint, the peers, the counters,
//! the channel to the driver with the budget its items hold), and what they do with it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use quinn::{Connection, ConnectionError};
use raft::eraftpb::Message;
use rustls::pki_types::CertificateDer;
use slog::{debug, info, warn, Logger};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::tls::{node_id_from_cert, TlsError, TlsReload};
use crate::transport::hello::Hello;
use crate::transport::inbox::{recv_urgent_first, try_recv_urgent_first};
use crate::transport::log_limit::LogLimit;
use crate::transport::{Faults, Inbound, NodeId, PeerAddr, Resolve, TransportStats};

use super::budget::{Budget, Permit};
use super::code;
use super::config::Settings;
use super::outbound::Outbound;
use super::socket::ReleasableSocket;
use super::tls_state::TlsState;

/// At shutdown, how long a task waits for the endpoint's close of its connection to be
/// processed (that is prompt: this only bounds a stuck runtime) before closing it itself.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// At shutdown, how long to wait for the last user of the UDP socket to let go of it
/// after it is released (that is prompt: this only bounds a stuck runtime).
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// What the transport's tasks share.
pub(super) struct Shared {
    pub(super) id: NodeId,
    pub(super) endpoint: quinn::Endpoint,
    /// The endpoint's UDP socket, released once the tasks have ended after `close`.
    pub(super) socket: Arc<ReleasableSocket>,
    /// The credential new connections use, and reloading it.
    pub(super) tls: TlsState,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) settings: Settings,
    pub(super) stats: TransportStats,
    pub(super) faults: Faults,
    /// The channel to the driver of named elections' messages.
    pub(super) inbound: mpsc::Sender<Inbound>,
    /// The urgent lane to the driver ([`Inbound::is_urgent`]: the root's and the support
    /// stream's messages, hellos, unreachable peers), which the driver reads first.
    pub(super) urgent: mpsc::Sender<Inbound>,
    /// The permits of the messages in each channel, oldest first (see [`DriverQueue`]).
    pub(super) driver_queue: Mutex<DriverQueue>,
    /// The inbound byte budget (see [`QuicConfig::inbound_budget`]).
    pub(super) budget: Arc<Budget>,
    /// Rate limit of the warnings about refused connections, per remote IP address.
    pub(super) refusal_log: LogLimit,
    /// Ordered, so that dropping them all (on close) wakes their tasks in one order.
    pub(super) peers: RwLock<BTreeMap<NodeId, Peer>>,
    /// Resolves peers' names, on every connect attempt ([`QuicConfig::resolver`]).
    ///
    /// [`QuicConfig::resolver`]: super::QuicConfig::resolver
    pub(super) resolver: Arc<dyn Resolve>,
    /// What this node says first on every connection it opens ([`Transport::set_hello`]);
    /// `None` until it is set, and outbound tasks wait for it.
    pub(super) hello: watch::Sender<Option<Hello>>,
    /// The founding nonces a member's hello quotes, per peer ([`Transport::set_quotes`]).
    pub(super) quotes: Mutex<BTreeMap<NodeId, u128>>,
    /// Cancelled by `close`: every task stops.
    pub(super) shutdown: CancellationToken,
    pub(super) closed: AtomicBool,
    /// Every task holds a clone; `close` drops this one, so the receiver in
    /// `tasks_done` yields `None` once all tasks have ended.
    pub(super) task_guard: Mutex<Option<mpsc::Sender<()>>>,
    pub(super) tasks_done: tokio::sync::Mutex<mpsc::Receiver<()>>,
    pub(super) log: Logger,
}

/// A message waiting in a peer's outbound queue, with its election (0: the root).
pub(super) type Queued = (u32, Message);

/// Whether messages of `election` go in a peer's urgent lane: the root election's and
/// the support stream's (every quiet lease rides on it), so that a burst of named
/// elections' messages (thousands waking or being created at once) neither delays them
/// nor has them dropped from a full queue.
pub(super) fn is_urgent(election: u32) -> bool {
    election == 0 || election == crate::transport::SUPPORT_STREAM
}

/// A peer's outbound queues, as its task reads them: the urgent lane first.
pub(super) struct Lanes {
    pub(super) urgent: mpsc::Receiver<Queued>,
    pub(super) bulk: mpsc::Receiver<Queued>,
}

impl Lanes {
    /// The next message, urgent first; `None` once both lanes are closed.
    pub(super) async fn recv(&mut self) -> Option<Queued> {
        recv_urgent_first(&mut self.urgent, &mut self.bulk).await
    }

    /// A message that waits now, urgent first.
    pub(super) fn try_recv(&mut self) -> Option<Queued> {
        try_recv_urgent_first(&mut self.urgent, &mut self.bulk)
    }
}

/// The handle of one peer.
pub(super) struct Peer {
    /// Named elections' messages, in the order they were sent.
    pub(super) queue: mpsc::Sender<Queued>,
    /// The root's and the support stream's messages, in the order they were sent (each
    /// lane keeps its own order; the urgent one is sent first).
    pub(super) urgent: mpsc::Sender<Queued>,
    /// Where it is reached: read at every connect attempt (a name is resolved then).
    pub(super) addr: watch::Sender<PeerAddr>,
    /// Cancelled when the peer is removed (child of `shutdown`): stops its outbound task
    /// and closes its inbound connections.
    pub(super) cancel: CancellationToken,
    /// Notified when the peer connects to us: it is up, so a pending connect attempt
    /// or backoff wait of its outbound task is cut short.
    pub(super) seen: Arc<Notify>,
    /// Its incoming connections open now (at most `max_connections_per_peer`).
    pub(super) connections: Arc<AtomicUsize>,
}

/// The budget permits of the items in the channel to the driver, oldest first: one per
/// item (`None` for items that hold none), with the peer whose message it is. The
/// channel is first in, first out, so once the channel holds `n` items, all but the
/// newest `n` permits belong to items the driver has taken, and are given back.
#[derive(Debug, Default)]
pub(super) struct DriverQueue {
    /// Per channel: bulk (0), urgent (1).
    lanes: [VecDeque<(Option<Permit>, Option<NodeId>)>; 2],
    /// Each peer's messages waiting in each channel (bulk, urgent): a peer may have at
    /// most its share ([`Shared::lane_share`]) waiting in one.
    waiting: BTreeMap<NodeId, [usize; 2]>,
}

impl DriverQueue {
    /// The driver took the oldest item of a channel (`lane`: 0 bulk, 1 urgent).
    fn taken(&mut self, lane: usize) {
        if let Some((_, Some(peer))) = self.lanes[lane].pop_front() {
            if let Some(w) = self.waiting.get_mut(&peer) {
                w[lane] = w[lane].saturating_sub(1);
                if *w == [0, 0] {
                    self.waiting.remove(&peer);
                }
            }
        }
    }
}

/// Why [`Shared::to_driver`] did not hand an item to the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotDelivered {
    /// The channel is full.
    Full,
    /// The item's peer has its share of the channel waiting.
    OverShare,
    /// The driver is gone.
    Closed,
}

impl Shared {
    pub(super) fn peers_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<NodeId, Peer>> {
        self.peers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Spawns `fut` as one of the transport's tasks (not after close).
    pub(super) fn spawn<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let guard = self
            .task_guard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(guard) = guard {
            self.runtime.spawn(async move {
                fut.await;
                drop(guard);
            });
        }
    }

    pub(super) fn add_peer(self: &Arc<Self>, id: NodeId, addr: PeerAddr) {
        let (peer, task) = Outbound::new(self.clone(), id, addr);
        {
            let mut peers = self
                .peers
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if self.closed.load(Ordering::Acquire) || peers.contains_key(&id) {
                return;
            }
            peers.insert(id, peer);
        }
        self.spawn(task.run());
    }

    /// After `close`: waits until the tasks have ended (so every open connection's
    /// CONNECTION_CLOSE has been sent, see `close_conn`), then closes the UDP socket and
    /// waits until it is closed. The connections finish their draining period without it.
    /// Idempotent.
    pub(super) async fn release_socket(&self) {
        {
            let mut done = self.tasks_done.lock().await;
            while done.recv().await.is_some() {}
        }
        if tokio::time::timeout(RELEASE_WAIT, self.socket.release())
            .await
            .is_err()
        {
            warn!(self.log, "UDP socket still in use after close";
                "waited" => format!("{RELEASE_WAIT:?}"));
        }
    }

    /// Closes `conn` with `c`, unless the transport is shutting down: then
    /// [`quinn::Endpoint::close`] closes it, and this waits until that close has been
    /// processed. Quinn processes an endpoint close and sends the CONNECTION_CLOSE in one
    /// step of the connection's driver, so when this returns the close has been handed
    /// to the socket (or the connection had ended already), and the socket may be
    /// released (a close of our own could still be waiting for the driver to run).
    pub(super) async fn close_conn(&self, conn: &Connection, c: u32, reason: &[u8]) {
        if self.shutdown.is_cancelled()
            && tokio::time::timeout(CLOSE_WAIT, conn.closed())
                .await
                .is_ok()
        {
            return;
        }
        conn.close(code(c), reason);
    }

    /// Reloads the TLS files ([`TlsState::reload`]) and logs what happened: a swap at
    /// INFO, files that do not pass at WARN (the credential in use stays).
    pub(super) fn reload_tls(&self, poll: bool) -> Result<TlsReload, TlsError> {
        let r = self.tls.reload(&self.endpoint, poll);
        match &r {
            Ok(TlsReload::Reloaded { not_after }) => {
                let identity = self.tls.current();
                let days = not_after
                    .duration_since(std::time::SystemTime::now())
                    .map_or(0, |d| d.as_secs() / 86_400);
                info!(self.log, "TLS identity reloaded: new connections use the new certificate";
                    "expires_in_days" => days, "cas_trusted" => identity.ca_certs().len());
                for w in identity.warnings() {
                    warn!(self.log, "TLS identity: fix this file"; "warning" => %w);
                }
            }
            Ok(_) => {}
            Err(e) => warn!(self.log,
                "TLS files not reloaded: keeping the certificate in use"; "error" => %e),
        }
        r
    }

    /// Tells the driver that `peer` is unreachable (never blocks).
    pub(super) fn report_unreachable(&self, peer: NodeId) {
        if let Err(NotDelivered::Full) = self.to_driver(Inbound::Unreachable(peer), None) {
            TransportStats::bump(&self.stats.dropped_inbound_full);
        }
    }

    /// Gives back the budget of the messages the driver has taken from its channel.
    pub(super) fn reclaim_budget(&self) {
        let mut q = self
            .driver_queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.reclaim_locked(&mut q);
    }

    fn reclaim_locked(&self, q: &mut DriverQueue) {
        // Items still in each channel (never fewer than there are: a channel frees a
        // slot only after the driver has taken its item).
        let queued = |tx: &mpsc::Sender<Inbound>| tx.max_capacity() - tx.capacity();
        for (lane, tx) in [&self.inbound, &self.urgent].into_iter().enumerate() {
            while q.lanes[lane].len() > queued(tx) {
                q.taken(lane);
            }
        }
    }

    /// How many of one peer's messages may wait in one channel to the driver: the
    /// channel's depth over the peers (at least 1). However a member floods, the other
    /// peers find their shares free, and their messages wait behind at most one share of
    /// its (`docs/design.md`, section 9, "A fair share of the driver's channels").
    fn lane_share(&self, peers: usize) -> usize {
        (self.inbound.max_capacity() / peers.max(1)).max(1)
    }

    /// The one way into the channel to the driver: sends `item`, keeping `permit` until
    /// the driver has taken it. A refused item is dropped (with its permit). A peer's
    /// message is refused while that peer has its share of the channel waiting.
    pub(super) fn to_driver(
        &self,
        item: Inbound,
        permit: Option<Permit>,
    ) -> Result<(), NotDelivered> {
        let peer = match &item {
            Inbound::Message(m) | Inbound::Election { message: m, .. } => Some(m.from),
            Inbound::Unreachable(_) | Inbound::Hello { .. } => None,
        };
        let share = self.lane_share(self.peers_read().len());
        let mut q = self
            .driver_queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.reclaim_locked(&mut q);
        let urgent = item.is_urgent();
        let lane = usize::from(urgent);
        // Broken on purpose (mutation testing): one channel for every peer, first come
        // first served, as before issue 35.
        let shared = !crate::mutation::active("inbound-lane-unshared");
        if let Some(p) = peer {
            let waiting = q.waiting.get(&p).map_or(0, |w| w[lane]);
            if shared && waiting >= share {
                return Err(NotDelivered::OverShare);
            }
        }
        let tx = if urgent { &self.urgent } else { &self.inbound };
        match tx.try_send(item) {
            Ok(()) => {
                q.lanes[lane].push_back((permit, peer));
                if let Some(p) = peer {
                    q.waiting.entry(p).or_default()[lane] += 1;
                }
                Ok(())
            }
            Err(TrySendError::Full(_)) => Err(NotDelivered::Full),
            Err(TrySendError::Closed(_)) => Err(NotDelivered::Closed),
        }
    }

    /// Hands a message of election `election` (0: the root) from the authenticated
    /// `peer` to the driver, with the budget it holds, or drops and counts it.
    pub(super) fn deliver(
        &self,
        peer: NodeId,
        election: u32,
        msg: Message,
        permit: Permit,
        log: &Logger,
    ) -> Result<(), ()> {
        if msg.from != peer {
            TransportStats::bump(&self.stats.from_mismatch);
            debug!(log, "dropped message whose sender is not the certificate's node";
                "from" => msg.from);
            return Ok(());
        }
        if self.faults.inbound_blocked(peer) {
            TransportStats::bump(&self.stats.dropped_fault);
            return Ok(());
        }
        match self.to_driver(Inbound::of_election(election, msg), Some(permit)) {
            Ok(()) => {
                TransportStats::bump(&self.stats.received);
                if election != 0 {
                    TransportStats::bump(&self.stats.election_received);
                }
                Ok(())
            }
            Err(NotDelivered::Full) => {
                TransportStats::bump(&self.stats.dropped_inbound_full);
                Ok(())
            }
            Err(NotDelivered::OverShare) => {
                TransportStats::bump(&self.stats.dropped_inbound_share);
                Ok(())
            }
            Err(NotDelivered::Closed) => Err(()),
        }
    }
}

/// The node id in the certificate the peer of `conn` presented.
pub(super) fn peer_node_id(conn: &Connection) -> Result<NodeId, String> {
    let identity = conn
        .peer_identity()
        .ok_or_else(|| "no peer certificate".to_string())?;
    let chain = identity
        .downcast::<Vec<CertificateDer<'static>>>()
        .map_err(|_| "peer identity is not a certificate chain".to_string())?;
    let end_entity = chain
        .first()
        .ok_or_else(|| "empty certificate chain".to_string())?;
    node_id_from_cert(end_entity).map_err(|e| e.to_string())
}

pub(super) fn describe_loss(e: &ConnectionError) -> String {
    match e {
        ConnectionError::ApplicationClosed(close) => format!(
            "peer closed the connection (code {}: {})",
            close.error_code,
            String::from_utf8_lossy(&close.reason)
        ),
        other => format!("connection lost: {other}"),
    }
}
