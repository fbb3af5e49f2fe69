//! The real transport: QUIC (quinn) with mutual TLS.
//!
//! # Shape
//!
//! One UDP socket per node, one quinn endpoint on it acting as server and client.
//!
//! * **Outbound.** Every node dials each peer for its *own* outbound traffic: one
//!   connection per direction per pair. Each peer has a bounded queue (`send` never
//!   blocks: it `try_send`s, and a full queue drops and counts) and a task that connects
//!   with server name `node-<id>.tenure`, checks that the certificate names the peer it
//!   dialed, opens one unidirectional stream, writes this node's [hello](super::hello)
//!   and then frames in order. When the connect
//!   fails or the connection is lost, the task reports [`Inbound::Unreachable`] once for
//!   that failure (so at most once per backoff step), then reconnects with exponential
//!   backoff and jitter (`backoff_min..backoff_max`). While it is disconnected it keeps
//!   only the most recent few messages (`keep_while_disconnected`): raft-rs retransmits,
//!   and old heartbeats are useless. When the peer connects to *us*, it is up: a connect
//!   attempt of ours stuck in handshake retransmission, or a backoff wait, is cut short.
//! * **Inbound.** Every accepted connection is named by the node id in the client's
//!   certificate ([`node_id_from_cert`]); a certificate that is not a node certificate
//!   (an operator certificate among them) or names an unknown peer closes the connection
//!   with the reason, logged and sent to the client (`connections_refused`). A handshake
//!   that fails (certificate of another CA, no certificate) is refused by rustls and
//!   counted the same way. Each of the connection's unidirectional streams begins with
//!   the peer's hello (within 5 s): a peer of another group is refused
//!   (`close_code::WRONG_GROUP`, with both ids in the reason); the hello goes to the
//!   driver as [`Inbound::Hello`]. Then frames are read from the stream:
//!   an oversized or undecodable frame closes the connection and is counted; a message
//!   whose `from` is not the certificate's id is dropped (`from_mismatch`); the rest goes
//!   to the driver with `try_send` (full → `dropped_inbound_full`). Network input never
//!   panics. Failed handshakes and refusals are logged at WARN once per remote address
//!   per minute (with the count of those held back), the rest at DEBUG.
//!
//! # Limits
//!
//! What a peer can make this node hold is bounded (docs/design.md, section 9, says why
//! each number):
//!
//! * at most [`QuicConfig::max_connections_per_peer`] incoming connections per peer
//!   (more are refused with [`close_code::TOO_MANY_CONNECTIONS`] and counted
//!   `connections_over_limit`), [`MAX_STREAMS_PER_CONNECTION`] streams on each, and
//!   [`RECEIVE_WINDOW`] bytes buffered by QUIC per connection;
//! * a frame of at most [`QuicConfig::max_frame`] bytes holding at most
//!   [`QuicConfig::max_entries`] entries (counted on the wire before decoding, see
//!   [`frame::scan`]);
//! * a frame's payload must arrive within [`QuicConfig::frame_timeout`] of being
//!   started, or the connection is closed ([`close_code::FRAME_TIMEOUT`],
//!   `frames_timed_out`);
//! * every frame reserves what it may take decoded from one byte budget shared by all
//!   connections ([`QuicConfig::inbound_budget`]; one peer at most half) before its
//!   payload is read, and keeps it until the driver has taken the message: a frame
//!   waits for budget (`frames_waited_for_budget`) rather than allocating.
//!
//! # QUIC settings
//!
//! Keep-alive every second and a 5 s idle timeout (both in [`QuicConfig`]): on loopback
//! or a LAN five lost keep-alives in a row mean the path is gone. A peer that *restarts*
//! is noticed at once rather than after the idle timeout: the stateless-reset key and
//! the connection-id generator are derived from the node's private key, so a restarted
//! node answers packets of its previous life with a valid stateless reset. 0-RTT and TLS
//! session resumption are off (every connection shows its certificate), bidirectional
//! streams and datagrams are refused, connection migration is off.
//!
//! # Shutdown
//!
//! [`QuicTransport::shutdown`] closes every connection (CONNECTION_CLOSE), waits until the
//! tasks have ended, which includes until each open connection's CONNECTION_CLOSE has been
//! handed to the socket, and then closes the UDP socket: the port can be bound again at
//! once. It does not wait out QUIC's draining period (three probe timeouts, about 3 s for
//! a connection whose handshake never got an answer: no round-trip sample yet, so the
//! 333 ms initial RTT applies). Quinn finishes that period in memory, without a socket;
//! a peer's late packets reach nobody, or a restarted node on the same port, which
//! answers them with a stateless reset (see above).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use quinn::{Connection, ConnectionError, RecvStream, SendStream, VarInt};
use raft::eraftpb::Message;
use rand::Rng;
use rustls::pki_types::CertificateDer;
use slog::{debug, info, o, warn, Logger};
use tokio::io::Interest;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::budget::{Budget, Permit};
use super::frame::{self, FrameError, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_FRAME};
use super::hello::{Hello, HELLO_LEN};
use super::log_limit::{self, warn_limited, LogLimit};
use super::{Faults, Inbound, NodeId, Transport, TransportStats, TransportStatsSnapshot};
use crate::tls::{node_id_from_cert, node_server_name, TlsError, TlsIdentity};

/// Default capacity of each peer's outbound queue.
pub const DEFAULT_QUEUE_DEPTH: usize = 1024;
/// Default capacity of the inbound channel to the driver.
pub const DEFAULT_INBOUND_DEPTH: usize = 1024;
/// Default first reconnect delay.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(20);
/// Default longest reconnect delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Default QUIC keep-alive interval.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// Default QUIC idle timeout.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default number of messages kept for a peer while it is disconnected.
pub const DEFAULT_KEEP_WHILE_DISCONNECTED: usize = 8;
/// Default time a frame's payload has to arrive once its length prefix has: 5 s.
pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(5);
/// Default inbound byte budget shared by all connections: 64 MiB (one peer may hold at
/// most half).
pub const DEFAULT_INBOUND_BUDGET: usize = 64 * 1024 * 1024;
/// Default number of incoming connections one peer may hold open at once: 2 (its
/// connection, and its next one while a restart or a lost path is noticed).
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 2;
/// Unidirectional streams a peer may open at once on one connection. tenure sends on one.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 4;
/// Bytes QUIC buffers for one stream before the reader takes them (flow control).
pub const STREAM_RECEIVE_WINDOW: u32 = 1024 * 1024;
/// Bytes QUIC buffers for one connection, all its streams together.
pub const RECEIVE_WINDOW: u32 = 2 * STREAM_RECEIVE_WINDOW;

/// How long a connect attempt may go unanswered by a peer known to be up (it just
/// connected to us) before it is restarted.
const ANSWER_GRACE: Duration = Duration::from_millis(100);
/// A deadline that never comes.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365);
/// At shutdown, how long a task waits for the endpoint's close of its connection to be
/// processed (that is prompt: this only bounds a stuck runtime) before closing it itself.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// At shutdown, how long to wait for the last user of the UDP socket to let go of it
/// after it is released (that is prompt: this only bounds a stuck runtime).
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// Application error codes tenure closes QUIC connections with (seen by the peer as
/// `ConnectionError::ApplicationClosed`).
pub mod close_code {
    /// The endpoint is shutting down.
    pub const SHUTDOWN: u32 = 0;
    /// The client's certificate is not a node certificate (for example an operator
    /// certificate), or names an unknown peer. The close reason says which.
    pub const REFUSED: u32 = 1;
    /// A frame exceeded the receiver's frame limit.
    pub const FRAME_TOO_LARGE: u32 = 2;
    /// A frame did not decode as a raft message.
    pub const MALFORMED: u32 = 3;
    /// The peer was removed from the configuration.
    pub const PEER_REMOVED: u32 = 4;
    /// The server we dialed presented a certificate of another node.
    pub const WRONG_PEER: u32 = 5;
    /// The peer belongs to another group (its hello named another group id), or its
    /// stream did not begin with a hello. The close reason says which.
    pub const WRONG_GROUP: u32 = 6;
    /// A frame's payload did not arrive within the receiver's frame deadline.
    pub const FRAME_TIMEOUT: u32 = 7;
    /// A frame held more entries than the receiver's limit.
    pub const TOO_MANY_ENTRIES: u32 = 8;
    /// The peer already had as many connections to the receiver as it may.
    pub const TOO_MANY_CONNECTIONS: u32 = 9;
}

/// How long an accepted stream may take to deliver its 30-byte hello.
const HELLO_WAIT: Duration = Duration::from_secs(5);

fn code(c: u32) -> VarInt {
    VarInt::from_u32(c)
}

/// Everything [`QuicTransport::start`] needs. [`QuicConfig::new`] fills the defaults;
/// the fields are public to adjust them.
#[derive(Clone)]
pub struct QuicConfig {
    /// This node's id; must be the id in `identity`'s certificate.
    pub id: NodeId,
    /// The UDP address to bind (port 0 picks a free port; see
    /// [`QuicTransport::local_addr`]). Both directions use this one socket.
    pub listen: SocketAddr,
    /// The other members and where to reach them (not this node). Only these ids may
    /// connect to us; only these may be sent to.
    pub peers: HashMap<NodeId, SocketAddr>,
    /// The CA, certificate and key of this node.
    pub identity: TlsIdentity,
    /// Largest frame payload sent or accepted ([`DEFAULT_MAX_FRAME`]). Use the same value
    /// on every node.
    pub max_frame: usize,
    /// Most `entries` in one message sent or accepted ([`DEFAULT_MAX_ENTRIES`]), counted
    /// on the wire before decoding. Use the same value on every node.
    pub max_entries: usize,
    /// How long a frame's payload may take to arrive once its length prefix has and its
    /// budget was granted ([`DEFAULT_FRAME_TIMEOUT`]); then the connection is closed.
    pub frame_timeout: Duration,
    /// Bytes that inbound frames may take at once, all connections together, from the
    /// start of reading a payload until the driver has taken the decoded message
    /// ([`DEFAULT_INBOUND_BUDGET`]). One peer may hold at most half; must be at least
    /// twice [`frame::decode_bound`] of `max_frame`.
    pub inbound_budget: usize,
    /// Incoming connections one peer may have open at once
    /// ([`DEFAULT_MAX_CONNECTIONS_PER_PEER`]); more are refused.
    pub max_connections_per_peer: usize,
    /// Capacity of each peer's outbound queue ([`DEFAULT_QUEUE_DEPTH`]); when full,
    /// `send` drops and counts `dropped_queue_full`.
    pub queue_depth: usize,
    /// Capacity of the inbound channel to the driver ([`DEFAULT_INBOUND_DEPTH`]); when
    /// full, arrivals are dropped and counted `dropped_inbound_full`.
    pub inbound_depth: usize,
    /// First reconnect delay ([`DEFAULT_BACKOFF_MIN`]); doubles per failed attempt.
    pub backoff_min: Duration,
    /// Longest reconnect delay ([`DEFAULT_BACKOFF_MAX`]). Each delay is drawn uniformly
    /// from its upper half (jitter).
    pub backoff_max: Duration,
    /// QUIC keep-alive interval ([`DEFAULT_KEEP_ALIVE`]).
    pub keep_alive: Duration,
    /// QUIC idle timeout ([`DEFAULT_IDLE_TIMEOUT`]): a connection with no packets from
    /// the peer for this long is lost. Also bounds a connect attempt.
    pub idle_timeout: Duration,
    /// Messages kept per peer while it is disconnected, the most recent ones
    /// ([`DEFAULT_KEEP_WHILE_DISCONNECTED`]); older ones are counted
    /// `dropped_disconnected`.
    pub keep_while_disconnected: usize,
    /// Where the transport logs (connects, losses, refused peers, bad frames). Discards
    /// by default.
    pub logger: Logger,
    /// Test hook: seed quinn's endpoint RNG (per-connection choices such as skipped
    /// packet numbers, key-update intervals and the greased transport parameter) and the
    /// connection ids from this, so that a simulation replays them. `None` (the default)
    /// draws from the OS. The TLS handshake's randomness (rustls, ring) stays unseeded.
    #[doc(hidden)]
    pub rng_seed: Option<u64>,
    /// The [hello](super::hello) this node says first on every connection it opens.
    /// `None`: no outbound connection is opened until [`Transport::set_hello`] is called
    /// (what a node does once it has read its store, so that its first hello is true).
    /// [`QuicConfig::new`] sets a starting hello, for a transport used on its own.
    pub hello: Option<Hello>,
}

impl fmt::Debug for QuicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuicConfig")
            .field("id", &self.id)
            .field("listen", &self.listen)
            .field("peers", &self.peers)
            .field("identity", &self.identity)
            .field("max_frame", &self.max_frame)
            .field("max_entries", &self.max_entries)
            .field("frame_timeout", &self.frame_timeout)
            .field("inbound_budget", &self.inbound_budget)
            .field("max_connections_per_peer", &self.max_connections_per_peer)
            .field("queue_depth", &self.queue_depth)
            .field("inbound_depth", &self.inbound_depth)
            .field("backoff_min", &self.backoff_min)
            .field("backoff_max", &self.backoff_max)
            .field("keep_alive", &self.keep_alive)
            .field("idle_timeout", &self.idle_timeout)
            .field("keep_while_disconnected", &self.keep_while_disconnected)
            .field("rng_seed", &self.rng_seed)
            .field("hello", &self.hello)
            .finish_non_exhaustive()
    }
}

impl QuicConfig {
    /// A configuration with the defaults above and a logger that discards (set
    /// `logger` to see what the transport does). `id` must be `identity.id()`.
    pub fn new(
        id: NodeId,
        listen: SocketAddr,
        peers: HashMap<NodeId, SocketAddr>,
        identity: TlsIdentity,
    ) -> Self {
        QuicConfig {
            id,
            listen,
            peers,
            identity,
            max_frame: DEFAULT_MAX_FRAME,
            max_entries: DEFAULT_MAX_ENTRIES,
            frame_timeout: DEFAULT_FRAME_TIMEOUT,
            inbound_budget: DEFAULT_INBOUND_BUDGET,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            inbound_depth: DEFAULT_INBOUND_DEPTH,
            backoff_min: DEFAULT_BACKOFF_MIN,
            backoff_max: DEFAULT_BACKOFF_MAX,
            keep_alive: DEFAULT_KEEP_ALIVE,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            keep_while_disconnected: DEFAULT_KEEP_WHILE_DISCONNECTED,
            logger: Logger::root(slog::Discard, o!()),
            rng_seed: None,
            hello: Some(Hello::default()),
        }
    }

    fn validate(&self) -> Result<(), TransportError> {
        let bad = |setting: &'static str, reason: String| {
            Err(TransportError::InvalidConfig { setting, reason })
        };
        if self.id == 0 {
            return bad("id", "node id 0 is reserved by raft-rs".into());
        }
        if self.id != self.identity.id() {
            return bad(
                "id",
                format!(
                    "id is {} but the certificate names node {}",
                    self.id,
                    self.identity.id()
                ),
            );
        }
        if self.peers.contains_key(&self.id) {
            return bad("peers", format!("contains this node ({})", self.id));
        }
        if self.peers.contains_key(&0) {
            return bad("peers", "contains node id 0".into());
        }
        if self.max_frame == 0 || self.max_frame > u32::MAX as usize {
            return bad(
                "max_frame",
                format!("{} is not in 1..=2^32-1", self.max_frame),
            );
        }
        if self.max_entries == 0 {
            return bad("max_entries", "must be at least 1".into());
        }
        if self.frame_timeout.is_zero() {
            return bad("frame_timeout", "must be longer than 0".into());
        }
        let need = frame::decode_bound(self.max_frame, self.max_entries).saturating_mul(2);
        if self.inbound_budget < need {
            return bad(
                "inbound_budget",
                format!(
                    "{} bytes is less than twice what one frame of max_frame {} with \
                     max_entries {} may take decoded ({need} bytes): such a frame could \
                     never be read",
                    self.inbound_budget, self.max_frame, self.max_entries
                ),
            );
        }
        if self.max_connections_per_peer == 0 {
            return bad("max_connections_per_peer", "must be at least 1".into());
        }
        if self.queue_depth == 0 || self.inbound_depth == 0 {
            return bad("queue_depth/inbound_depth", "must be at least 1".into());
        }
        if self.backoff_min.is_zero() || self.backoff_min > self.backoff_max {
            return bad(
                "backoff_min/backoff_max",
                format!("need 0 < {:?} <= {:?}", self.backoff_min, self.backoff_max),
            );
        }
        if self.keep_alive.is_zero() || self.keep_alive >= self.idle_timeout {
            return bad(
                "keep_alive/idle_timeout",
                format!("need 0 < {:?} < {:?}", self.keep_alive, self.idle_timeout),
            );
        }
        Ok(())
    }
}

/// Why [`QuicTransport::start`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A setting is invalid. Cause and fix: see `reason`.
    #[error("invalid transport setting {setting}: {reason}")]
    InvalidConfig {
        /// Which setting.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS configuration could not be built from the identity. Cause and fix: see
    /// the inner error.
    #[error("TLS setup failed: {0}")]
    Tls(#[from] TlsError),
    /// The UDP socket could not be bound. Cause: address in use (another process, or
    /// the previous transport on this address was closed or dropped without
    /// [`QuicTransport::shutdown`] and its tasks are still ending: its socket is
    /// released a moment later), or not an address of this host. Fix: free the port, or
    /// retry shortly.
    #[error("cannot bind UDP {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the OS said.
        source: io::Error,
    },
    /// Not called inside a tokio runtime. Fix: call `start` from async code running on
    /// tokio (the transport spawns its tasks there).
    #[error("QuicTransport::start must be called inside a tokio runtime")]
    NoRuntime,
}

/// Settings the tasks read.
#[derive(Debug, Clone, Copy)]
struct Settings {
    max_frame: usize,
    max_entries: usize,
    frame_timeout: Duration,
    max_connections_per_peer: usize,
    queue_depth: usize,
    backoff_min: Duration,
    backoff_max: Duration,
    keep_while_disconnected: usize,
}

/// What the transport's tasks share.
struct Shared {
    id: NodeId,
    endpoint: quinn::Endpoint,
    /// The endpoint's UDP socket, released once the tasks have ended after `close`.
    socket: Arc<ReleasableSocket>,
    client_config: quinn::ClientConfig,
    runtime: tokio::runtime::Handle,
    settings: Settings,
    stats: TransportStats,
    faults: Faults,
    inbound: mpsc::Sender<Inbound>,
    /// The permits of the messages in `inbound`, oldest first (see [`DriverQueue`]).
    driver_queue: Mutex<DriverQueue>,
    /// The inbound byte budget (see [`QuicConfig::inbound_budget`]).
    budget: Arc<Budget>,
    /// Rate limit of the warnings about refused connections, per remote IP address.
    refusal_log: LogLimit,
    peers: RwLock<HashMap<NodeId, Peer>>,
    /// What this node says first on every connection it opens ([`Transport::set_hello`]);
    /// `None` until it is set, and outbound tasks wait for it.
    hello: watch::Sender<Option<Hello>>,
    /// Cancelled by `close`: every task stops.
    shutdown: CancellationToken,
    closed: AtomicBool,
    /// Every task holds a clone; `close` drops this one, so the receiver in
    /// `tasks_done` yields `None` once all tasks have ended.
    task_guard: Mutex<Option<mpsc::Sender<()>>>,
    tasks_done: tokio::sync::Mutex<mpsc::Receiver<()>>,
    log: Logger,
}

/// The handle of one peer.
struct Peer {
    queue: mpsc::Sender<Message>,
    addr: watch::Sender<SocketAddr>,
    /// Cancelled when the peer is removed (child of `shutdown`): stops its outbound task
    /// and closes its inbound connections.
    cancel: CancellationToken,
    /// Notified when the peer connects to us: it is up, so a pending connect attempt
    /// or backoff wait of its outbound task is cut short.
    seen: Arc<Notify>,
    /// Its incoming connections open now (at most `max_connections_per_peer`).
    connections: Arc<AtomicUsize>,
}

/// The budget permits of the items in the channel to the driver, oldest first: one per
/// item (`None` for items that hold none). The channel is first in, first out, so once
/// the channel holds `n` items, all but the newest `n` permits belong to items the
/// driver has taken, and are given back.
#[derive(Debug, Default)]
struct DriverQueue {
    permits: VecDeque<Option<Permit>>,
}

/// One of a peer's incoming connection slots; given back when dropped.
struct ConnectionSlot(Arc<AtomicUsize>);

impl ConnectionSlot {
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<ConnectionSlot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| ConnectionSlot(count.clone()))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The QUIC transport of one node. See the [module docs](self).
///
/// Dropping it closes it ([`Transport::close`]); [`QuicTransport::shutdown`] also waits
/// until its tasks have ended and its UDP socket is closed.
pub struct QuicTransport {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
}

impl fmt::Debug for QuicTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuicTransport")
            .field("id", &self.shared.id)
            .field("local_addr", &self.local_addr)
            .field("closed", &self.shared.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// Connection ids of 8 random bytes. Any id is accepted as possibly ours, so packets of
/// a previous life of this node get a stateless reset instead of being ignored.
///
/// Drawn from the OS, or from a seeded RNG ([`QuicConfig::rng_seed`]).
struct RandomCids(Option<rand::rngs::StdRng>);

impl RandomCids {
    /// A generator for `seed`; `made` counts the generators made for it, so two never
    /// draw the same ids.
    fn new(seed: Option<u64>, made: &AtomicU64) -> RandomCids {
        use rand::SeedableRng;
        RandomCids(seed.map(|s| {
            let k = made.fetch_add(1, Ordering::Relaxed);
            rand::rngs::StdRng::seed_from_u64(s ^ 0xc1d5 ^ (k << 32))
        }))
    }
}

impl quinn::ConnectionIdGenerator for RandomCids {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let bytes: [u8; 8] = match &mut self.0 {
            Some(rng) => rng.gen(),
            None => rand::random(),
        };
        quinn::ConnectionId::new(&bytes)
    }
    fn cid_len(&self) -> usize {
        8
    }
    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// The endpoint's UDP socket (what quinn's tokio runtime would wrap it in), which the
/// transport can close while quinn still holds it.
///
/// Quinn keeps its socket until every connection has drained, seconds after the
/// endpoint is closed. [`ReleasableSocket::release`] closes it at once: from then on,
/// what quinn sends is discarded and nothing is received.
struct ReleasableSocket {
    /// `None` once released. The only other holders of the `Arc` are writability waits
    /// in progress, which end on `released`.
    io: RwLock<Option<Arc<SocketIo>>>,
    released: CancellationToken,
    /// Its sender is dropped with the socket: `changed` then fails.
    closed: watch::Receiver<()>,
    local_addr: SocketAddr,
}

struct SocketIo {
    io: tokio::net::UdpSocket,
    state: quinn::udp::UdpSocketState,
    /// Dropped after `io` (fields drop in order): tells `release` the socket is closed.
    _closed: watch::Sender<()>,
}

impl ReleasableSocket {
    /// Wraps `socket` (makes it non-blocking). Must be called inside a tokio runtime.
    fn new(socket: std::net::UdpSocket) -> io::Result<ReleasableSocket> {
        let state = quinn::udp::UdpSocketState::new((&socket).into())?;
        let local_addr = socket.local_addr()?;
        let (closed_tx, closed_rx) = watch::channel(());
        Ok(ReleasableSocket {
            io: RwLock::new(Some(Arc::new(SocketIo {
                io: tokio::net::UdpSocket::from_std(socket)?,
                state,
                _closed: closed_tx,
            }))),
            released: CancellationToken::new(),
            closed: closed_rx,
            local_addr,
        })
    }

    /// Stands in for a socket the caller owns ([`QuicTransport::start_on_socket`]):
    /// nothing to close, so releasing it resolves at once.
    fn detached(local_addr: SocketAddr) -> ReleasableSocket {
        // The sender is dropped here: `release` sees the socket closed at once.
        let (_, closed) = watch::channel(());
        ReleasableSocket {
            io: RwLock::new(None),
            released: CancellationToken::new(),
            closed,
            local_addr,
        }
    }

    fn io(&self) -> std::sync::RwLockReadGuard<'_, Option<Arc<SocketIo>>> {
        self.io.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets go of the socket; the returned future resolves once it is closed (at once,
    /// unless a writability wait still holds it: that wait ends now too). Idempotent.
    fn release(&self) -> impl Future<Output = ()> + Send + 'static {
        self.released.cancel();
        let io = self.io.write().unwrap_or_else(|e| e.into_inner()).take();
        drop(io);
        let mut closed = self.closed.clone();
        async move { while closed.changed().await.is_ok() {} }
    }
}

impl fmt::Debug for ReleasableSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleasableSocket")
            .field("local_addr", &self.local_addr)
            .field("released", &self.released.is_cancelled())
            .finish()
    }
}

impl quinn::AsyncUdpSocket for ReleasableSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        Box::pin(WritablePoller {
            socket: self,
            wait: None,
        })
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit) -> io::Result<()> {
        match &*self.io() {
            Some(s) => s.io.try_io(Interest::WRITABLE, || {
                s.state.send((&s.io).into(), transmit)
            }),
            // Released: the datagram is lost, as if on the wire.
            None => Ok(()),
        }
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let guard = self.io();
        // Released: nothing arrives any more (the endpoint's other work wakes its driver).
        let Some(s) = &*guard else {
            return Poll::Pending;
        };
        loop {
            ready!(s.io.poll_recv_ready(cx))?;
            if let Ok(res) = s.io.try_io(Interest::READABLE, || {
                s.state.recv((&s.io).into(), bufs, meta)
            }) {
                return Poll::Ready(Ok(res));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    fn may_fragment(&self) -> bool {
        self.io().as_ref().is_none_or(|s| s.state.may_fragment())
    }

    fn max_transmit_segments(&self) -> usize {
        self.io().as_ref().map_or(1, |s| s.state.max_gso_segments())
    }

    fn max_receive_segments(&self) -> usize {
        self.io().as_ref().map_or(1, |s| s.state.gro_segments())
    }
}

type WritableWait = Pin<Box<dyn Future<Output = io::Result<()>> + Send + Sync>>;

/// Waits for the socket to be writable, for one connection (each has its own, so each is
/// woken). Holds the socket only while a wait is in progress; release ends the wait.
struct WritablePoller {
    socket: Arc<ReleasableSocket>,
    wait: Option<WritableWait>,
}

impl fmt::Debug for WritablePoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WritablePoller")
            .field("waiting", &self.wait.is_some())
            .finish()
    }
}

impl quinn::UdpPoller for WritablePoller {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.wait.is_none() {
            let Some(io) = this.socket.io().clone() else {
                return Poll::Ready(Ok(())); // released: sends are discarded
            };
            let released = this.socket.released.clone();
            this.wait = Some(Box::pin(async move {
                tokio::select! {
                    biased;
                    r = io.io.writable() => r,
                    _ = released.cancelled() => Ok(()),
                }
            }));
        }
        let wait = this.wait.as_mut().expect("set above");
        let r = wait.as_mut().poll(cx);
        if r.is_ready() {
            this.wait = None;
        }
        r
    }
}

/// The socket a transport is started on.
enum GivenSocket {
    /// A bound OS socket: the transport wraps it and closes it at shutdown.
    Std(std::net::UdpSocket),
    /// A socket the caller owns, and the quinn runtime to drive it with.
    Abstract(Arc<dyn quinn::AsyncUdpSocket>, Arc<dyn quinn::Runtime>),
}

impl GivenSocket {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            GivenSocket::Std(s) => s.local_addr(),
            GivenSocket::Abstract(s, _) => s.local_addr(),
        }
    }
}

impl QuicTransport {
    /// Binds `cfg.listen`, starts accepting and starts one outbound task per peer.
    /// Returns the transport and the receiver of what arrives. Must be called inside a
    /// tokio runtime.
    pub fn start(
        cfg: QuicConfig,
    ) -> Result<(QuicTransport, mpsc::Receiver<Inbound>), TransportError> {
        tokio::runtime::Handle::try_current().map_err(|_| TransportError::NoRuntime)?;
        cfg.validate()?;
        let socket =
            std::net::UdpSocket::bind(cfg.listen).map_err(|source| TransportError::Bind {
                addr: cfg.listen,
                source,
            })?;
        Self::start_on(cfg, socket)
    }

    /// Like [`QuicTransport::start`], on a socket the caller bound (`cfg.listen` is not
    /// used). Lets a caller learn every node's port before any node starts (tests binding
    /// port 0), or hand over an inherited socket.
    pub fn start_on(
        cfg: QuicConfig,
        socket: std::net::UdpSocket,
    ) -> Result<(QuicTransport, mpsc::Receiver<Inbound>), TransportError> {
        Self::start_inner(cfg, GivenSocket::Std(socket))
    }

    /// Like [`QuicTransport::start_on`], on any socket quinn can drive, with quinn's
    /// runtime of the caller's choice: a simulated network (the deterministic simulation
    /// runs this transport over turmoil's UDP this way). The caller owns the socket:
    /// [`shutdown`](Self::shutdown) does not wait for it to close. Must be called inside
    /// a tokio runtime (the transport's own tasks run there).
    pub fn start_on_socket(
        cfg: QuicConfig,
        socket: Arc<dyn quinn::AsyncUdpSocket>,
        runtime: Arc<dyn quinn::Runtime>,
    ) -> Result<(QuicTransport, mpsc::Receiver<Inbound>), TransportError> {
        Self::start_inner(cfg, GivenSocket::Abstract(socket, runtime))
    }

    fn start_inner(
        cfg: QuicConfig,
        socket: GivenSocket,
    ) -> Result<(QuicTransport, mpsc::Receiver<Inbound>), TransportError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| TransportError::NoRuntime)?;
        cfg.validate()?;
        let bound = socket.local_addr().map_err(|source| TransportError::Bind {
            addr: cfg.listen,
            source,
        })?;

        let mut transport = quinn::TransportConfig::default();
        transport
            .keep_alive_interval(Some(cfg.keep_alive))
            .max_idle_timeout(Some(
                quinn::IdleTimeout::try_from(cfg.idle_timeout).map_err(|_| {
                    TransportError::InvalidConfig {
                        setting: "idle_timeout",
                        reason: format!("{:?} is too long for QUIC", cfg.idle_timeout),
                    }
                })?,
            ))
            .max_concurrent_bidi_streams(VarInt::from_u32(0))
            .max_concurrent_uni_streams(VarInt::from_u32(MAX_STREAMS_PER_CONNECTION))
            .stream_receive_window(VarInt::from_u32(STREAM_RECEIVE_WINDOW))
            .receive_window(VarInt::from_u32(RECEIVE_WINDOW))
            .datagram_receive_buffer_size(None);
        let transport = Arc::new(transport);

        let mut server_config = cfg.identity.server_config()?;
        server_config
            .transport_config(transport.clone())
            .migration(false);
        let mut client_config = cfg.identity.client_config()?;
        client_config.transport_config(transport);

        let reset_key = ring::hmac::Key::new(
            ring::hmac::HMAC_SHA256,
            &cfg.identity
                .derive_secret(b"tenure/1 QUIC stateless reset key"),
        );
        let mut endpoint_config = quinn::EndpointConfig::new(Arc::new(reset_key));
        let (seed, made) = (cfg.rng_seed, AtomicU64::new(0));
        endpoint_config.cid_generator(move || Box::new(RandomCids::new(seed, &made)));
        endpoint_config.rng_seed(cfg.rng_seed.map(|s| {
            use rand::SeedableRng;
            rand::rngs::StdRng::seed_from_u64(s).gen()
        }));

        let (socket, endpoint) = {
            let _guard = runtime.enter();
            let bind_err = |source| TransportError::Bind {
                addr: bound,
                source,
            };
            let (socket, quinn_socket, quinn_runtime): (_, Arc<dyn quinn::AsyncUdpSocket>, _) =
                match socket {
                    GivenSocket::Std(socket) => {
                        let s = Arc::new(ReleasableSocket::new(socket).map_err(bind_err)?);
                        (s.clone(), s, Arc::new(quinn::TokioRuntime) as _)
                    }
                    GivenSocket::Abstract(s, rt) => {
                        (Arc::new(ReleasableSocket::detached(bound)), s, rt)
                    }
                };
            let endpoint = quinn::Endpoint::new_with_abstract_socket(
                endpoint_config,
                Some(server_config),
                quinn_socket,
                quinn_runtime,
            )
            .map_err(bind_err)?;
            (socket, endpoint)
        };
        let local_addr = endpoint
            .local_addr()
            .map_err(|source| TransportError::Bind {
                addr: bound,
                source,
            })?;

        let log = cfg
            .logger
            .new(o!("node" => cfg.id, "addr" => local_addr.to_string()));
        let (inbound, inbound_rx) = mpsc::channel(cfg.inbound_depth);
        let (guard, done) = mpsc::channel(1);
        let shared = Arc::new(Shared {
            id: cfg.id,
            endpoint,
            socket,
            client_config,
            runtime,
            settings: Settings {
                max_frame: cfg.max_frame,
                max_entries: cfg.max_entries,
                frame_timeout: cfg.frame_timeout,
                max_connections_per_peer: cfg.max_connections_per_peer,
                queue_depth: cfg.queue_depth,
                backoff_min: cfg.backoff_min,
                backoff_max: cfg.backoff_max,
                keep_while_disconnected: cfg.keep_while_disconnected,
            },
            stats: TransportStats::default(),
            faults: Faults::default(),
            inbound,
            driver_queue: Mutex::new(DriverQueue::default()),
            budget: Budget::new(cfg.inbound_budget),
            refusal_log: LogLimit::new(log_limit::WINDOW),
            peers: RwLock::new(HashMap::new()),
            hello: watch::Sender::new(cfg.hello),
            shutdown: CancellationToken::new(),
            closed: AtomicBool::new(false),
            task_guard: Mutex::new(Some(guard)),
            tasks_done: tokio::sync::Mutex::new(done),
            log,
        });
        info!(shared.log, "QUIC transport listening"; "peers" => format!("{:?}", cfg.peers));
        for w in cfg.identity.warnings() {
            warn!(shared.log, "TLS identity: fix this file"; "warning" => %w);
        }
        // Peers first: the accept loop refuses ids it does not know yet. In id order:
        // the order of their tasks is the order of their first packets.
        let mut peers: Vec<(NodeId, SocketAddr)> = cfg.peers.into_iter().collect();
        peers.sort_unstable_by_key(|(id, _)| *id);
        for (id, addr) in peers {
            shared.add_peer(id, addr);
        }
        shared.spawn(accept_loop(shared.clone()));
        Ok((QuicTransport { shared, local_addr }, inbound_rx))
    }

    /// The bound UDP address (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.shared.id
    }

    /// Sets where peer `id` is reached, adding it as a peer if it is new. A changed
    /// address is used from the next connect on (an open connection stays; it is to the
    /// right node, by its certificate).
    pub fn set_peer_addr(&self, id: NodeId, addr: SocketAddr) {
        if id == self.shared.id || id == 0 || self.shared.closed.load(Ordering::Acquire) {
            return;
        }
        let peers = self.shared.peers_read();
        if let Some(peer) = peers.get(&id) {
            peer.addr.send_replace(addr);
            return;
        }
        drop(peers);
        self.shared.add_peer(id, addr);
    }

    /// Forgets peer `id`: stops sending to it, closes its connections both ways and
    /// refuses it from now on. Its queued messages are dropped.
    pub fn remove_peer(&self, id: NodeId) {
        let removed = self
            .shared
            .peers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        if let Some(peer) = removed {
            info!(self.shared.log, "peer removed"; "peer" => id);
            peer.cancel.cancel();
        }
    }

    /// Closes the transport (as [`Transport::close`]) and waits until all its tasks have
    /// ended, every open connection's CONNECTION_CLOSE has been sent and the UDP socket is
    /// closed: when it returns, the address can be bound again. The connections' draining
    /// period is not waited for (see the [module docs](self#shutdown)).
    pub async fn shutdown(&self) {
        self.close();
        self.shared.release_socket().await;
    }
}

impl Transport for QuicTransport {
    fn send(&self, msg: Message) {
        let shared = &self.shared;
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        let to = msg.to;
        let peers = shared.peers_read();
        let Some(peer) = peers.get(&to) else {
            TransportStats::bump(&shared.stats.dropped_unknown_peer);
            return;
        };
        if shared.faults.outbound_blocked(to) {
            TransportStats::bump(&shared.stats.dropped_fault);
            return;
        }
        match peer.queue.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => TransportStats::bump(&shared.stats.dropped_queue_full),
            Err(TrySendError::Closed(_)) => {
                TransportStats::bump(&shared.stats.dropped_disconnected)
            }
        }
    }

    fn stats(&self) -> TransportStatsSnapshot {
        let mut s = self.shared.stats.snapshot();
        s.budget_peak_bytes = self.shared.budget.peak();
        s
    }

    fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    fn set_hello(&self, hello: Hello) {
        self.shared.hello.send_replace(Some(hello));
    }

    fn set_peer(&self, id: NodeId, addr: Option<SocketAddr>) {
        match addr {
            Some(a) => self.set_peer_addr(id, a),
            None => self.remove_peer(id),
        }
    }

    fn close(&self) {
        let shared = &self.shared;
        if shared.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        info!(shared.log, "QUIC transport closing");
        shared.shutdown.cancel();
        // Refuse new handshakes right away (packets of new connections are ignored), so
        // that draining the open ones is not prolonged by peers that keep dialing.
        shared.endpoint.set_server_config(None);
        shared
            .peers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // Every connection, open or in handshake, sends CONNECTION_CLOSE the next time its
        // driver runs. The tasks holding an open connection wait for that (see
        // `Shared::close_conn`).
        shared
            .endpoint
            .close(code(close_code::SHUTDOWN), b"node shutting down");
        shared
            .task_guard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // Free the port once the tasks have ended, also when the transport is only
        // closed or dropped (`shutdown` does the same and waits for it).
        let shared2 = self.shared.clone();
        shared
            .runtime
            .spawn(async move { shared2.release_socket().await });
    }
}

impl Drop for QuicTransport {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    fn peers_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<NodeId, Peer>> {
        self.peers.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawns `fut` as one of the transport's tasks (not after close).
    fn spawn<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let guard = self
            .task_guard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(guard) = guard {
            self.runtime.spawn(async move {
                fut.await;
                drop(guard);
            });
        }
    }

    fn add_peer(self: &Arc<Self>, id: NodeId, addr: SocketAddr) {
        let (queue, rx) = mpsc::channel(self.settings.queue_depth);
        let (addr_tx, addr_rx) = watch::channel(addr);
        let cancel = self.shutdown.child_token();
        let seen = Arc::new(Notify::new());
        let peer = Peer {
            queue,
            addr: addr_tx,
            cancel: cancel.clone(),
            seen: seen.clone(),
            connections: Default::default(),
        };
        {
            let mut peers = self.peers.write().unwrap_or_else(|e| e.into_inner());
            if self.closed.load(Ordering::Acquire) || peers.contains_key(&id) {
                return;
            }
            peers.insert(id, peer);
        }
        let log = self.log.new(o!("peer" => id));
        self.spawn(
            Outbound {
                shared: self.clone(),
                peer: id,
                rx,
                addr: addr_rx,
                cancel,
                seen,
                backlog: VecDeque::new(),
                log,
            }
            .run(),
        );
    }

    /// After `close`: waits until the tasks have ended (so every open connection's
    /// CONNECTION_CLOSE has been sent, see `close_conn`), then closes the UDP socket and
    /// waits until it is closed. The connections finish their draining period without it.
    /// Idempotent.
    async fn release_socket(&self) {
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
    async fn close_conn(&self, conn: &Connection, c: u32, reason: &[u8]) {
        if self.shutdown.is_cancelled()
            && tokio::time::timeout(CLOSE_WAIT, conn.closed())
                .await
                .is_ok()
        {
            return;
        }
        conn.close(code(c), reason);
    }

    /// Tells the driver that `peer` is unreachable (never blocks).
    fn report_unreachable(&self, peer: NodeId) {
        if let Err(TrySendError::Full(_)) = self.to_driver(Inbound::Unreachable(peer), None) {
            TransportStats::bump(&self.stats.dropped_inbound_full);
        }
    }

    /// Gives back the budget of the messages the driver has taken from its channel.
    fn reclaim_budget(&self) {
        let mut q = self.driver_queue.lock().unwrap_or_else(|e| e.into_inner());
        self.reclaim_locked(&mut q);
    }

    fn reclaim_locked(&self, q: &mut DriverQueue) {
        // Items still in the channel (never fewer than there are: the channel frees a
        // slot only after the driver has taken its item).
        let queued = self.inbound.max_capacity() - self.inbound.capacity();
        while q.permits.len() > queued {
            q.permits.pop_front();
        }
    }

    /// The one way into the channel to the driver: sends `item`, keeping `permit` until
    /// the driver has taken it. A refused item is dropped (with its permit).
    fn to_driver(&self, item: Inbound, permit: Option<Permit>) -> Result<(), TrySendError<()>> {
        let mut q = self.driver_queue.lock().unwrap_or_else(|e| e.into_inner());
        self.reclaim_locked(&mut q);
        match self.inbound.try_send(item) {
            Ok(()) => {
                q.permits.push_back(permit);
                Ok(())
            }
            Err(TrySendError::Full(_)) => Err(TrySendError::Full(())),
            Err(TrySendError::Closed(_)) => Err(TrySendError::Closed(())),
        }
    }

    /// Hands a message from the authenticated `peer` to the driver, with the budget it
    /// holds, or drops and counts it.
    fn deliver(&self, peer: NodeId, msg: Message, permit: Permit, log: &Logger) -> Result<(), ()> {
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
        match self.to_driver(Inbound::Message(msg), Some(permit)) {
            Ok(()) => {
                TransportStats::bump(&self.stats.received);
                Ok(())
            }
            Err(TrySendError::Full(_)) => {
                TransportStats::bump(&self.stats.dropped_inbound_full);
                Ok(())
            }
            Err(TrySendError::Closed(_)) => Err(()),
        }
    }
}

/// The node id in the certificate the peer of `conn` presented.
fn peer_node_id(conn: &Connection) -> Result<NodeId, String> {
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
struct Outbound {
    shared: Arc<Shared>,
    peer: NodeId,
    rx: mpsc::Receiver<Message>,
    addr: watch::Receiver<SocketAddr>,
    cancel: CancellationToken,
    /// See [`Peer::seen`].
    seen: Arc<Notify>,
    /// Messages kept while disconnected (the most recent few).
    backlog: VecDeque<Message>,
    log: Logger,
}

impl Outbound {
    async fn run(mut self) {
        if !self.wait_for_hello().await {
            return;
        }
        let mut attempt: u32 = 0;
        let mut failing_since: Option<Instant> = None;
        loop {
            let started = Instant::now();
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
                failing_since = Some(Instant::now());
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
            let delay = backoff_delay(&self.shared.settings, attempt);
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
    fn keep(&mut self, msg: Message) {
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

    /// Connects, checks the peer's identity and opens the stream, draining the queue
    /// meanwhile.
    async fn connect(&mut self) -> Result<(Connection, SendStream), Ended> {
        let addr = *self.addr.borrow_and_update();
        let server_name = node_server_name(self.peer);
        let connecting = self
            .shared
            .endpoint
            .connect_with(self.shared.client_config.clone(), addr, &server_name)
            .map_err(|e| Ended::Failed(format!("{addr}: {e}")))?;
        let peer = self.peer;
        let hello = (*self.shared.hello.borrow()).unwrap_or_default();
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
        let mut batch: Vec<Message> = self.backlog.drain(..).collect();
        loop {
            let (frames, n) = self.encode(&mut batch);
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
                    .bytes_sent
                    .fetch_add(bytes, Ordering::Relaxed);
            }
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ended::Stop,
                e = conn.closed() => return Ended::Failed(describe_loss(&e)),
                msg = self.rx.recv() => match msg {
                    Some(msg) => {
                        batch.push(msg);
                        while batch.len() < 64 {
                            match self.rx.try_recv() {
                                Ok(m) => batch.push(m),
                                Err(_) => break,
                            }
                        }
                    }
                    None => return Ended::Stop,
                },
            }
        }
    }

    /// Encodes and empties `batch`; returns the frames and how many messages they hold.
    fn encode(&self, batch: &mut Vec<Message>) -> (Vec<u8>, u64) {
        let mut buf = Vec::new();
        let mut n = 0;
        for msg in batch.drain(..) {
            let max_entries = self.shared.settings.max_entries;
            let encoded = if msg.entries.len() > max_entries {
                Err(FrameError::TooManyEntries {
                    count: msg.entries.len(),
                    max: max_entries,
                })
            } else {
                frame::encode_into(&msg, self.shared.settings.max_frame, &mut buf)
            };
            match encoded {
                Ok(()) => n += 1,
                Err(e) => {
                    TransportStats::bump(&self.shared.stats.dropped_too_large);
                    warn!(self.log, "dropped outbound message"; "error" => %e,
                        "msg_type" => ?msg.get_msg_type());
                }
            }
        }
        (buf, n)
    }
}

fn describe_loss(e: &ConnectionError) -> String {
    match e {
        ConnectionError::ApplicationClosed(close) => format!(
            "peer closed the connection (code {}: {})",
            close.error_code,
            String::from_utf8_lossy(&close.reason)
        ),
        other => format!("connection lost: {other}"),
    }
}

/// The delay before reconnect attempt `attempt` (0-based): `backoff_min * 2^attempt`
/// capped at `backoff_max`, then drawn uniformly from its upper half.
fn backoff_delay(s: &Settings, attempt: u32) -> Duration {
    let base = s
        .backoff_min
        .saturating_mul(1u32 << attempt.min(20))
        .min(s.backoff_max);
    let half = base / 2;
    let jitter = rand::thread_rng().gen_range(0..=half.as_micros() as u64);
    half + Duration::from_micros(jitter)
}

/// Accepts incoming connections until the transport closes.
async fn accept_loop(shared: Arc<Shared>) {
    loop {
        let incoming = tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => return,
            incoming = shared.endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => return,
            },
        };
        shared.spawn(serve_connection(shared.clone(), incoming));
    }
}

/// Completes the handshake of one incoming connection, names the peer by its
/// certificate, and reads its streams.
async fn serve_connection(shared: Arc<Shared>, incoming: quinn::Incoming) {
    let remote = incoming.remote_address();
    let log = shared.log.new(o!("remote" => remote.to_string()));
    // Warnings about this remote: one a minute per IP address (a reconnecting client
    // changes ports), the rest at DEBUG.
    let log_key = remote.ip().to_string();
    let conn = tokio::select! {
        biased;
        _ = shared.shutdown.cancelled() => return,
        r = incoming => match r {
            Ok(conn) => conn,
            // We detected the failure: rustls rejected the client (no certificate, a
            // certificate of another CA, expired, ...) or the handshake broke protocol.
            Err(e @ ConnectionError::TransportError(_)) => {
                TransportStats::bump(&shared.stats.connections_refused);
                warn_limited!(shared.refusal_log, &log_key, log,
                    "refused incoming connection: handshake failed"; "error" => %e,);
                return;
            }
            // The client gave up (it rejected our certificate, timed out, or abandoned
            // the attempt): not a refusal of ours.
            Err(e) => {
                debug!(log, "incoming handshake did not complete"; "error" => %e);
                return;
            }
        },
    };
    let refuse = |c: u32, reason: String| {
        TransportStats::bump(&shared.stats.connections_refused);
        warn_limited!(shared.refusal_log, &log_key, log,
            "refused incoming connection"; "reason" => &reason,);
        // The client passed the handshake (its certificate is from our CA): tell it why.
        conn.close(code(c), reason.as_bytes());
    };
    let peer = match peer_node_id(&conn) {
        Ok(id) => id,
        Err(e) => return refuse(close_code::REFUSED, e),
    };
    let max_conns = shared.settings.max_connections_per_peer;
    let (cancel, seen, slot) = match shared.peers_read().get(&peer) {
        Some(p) => (
            p.cancel.clone(),
            p.seen.clone(),
            ConnectionSlot::take(&p.connections, max_conns),
        ),
        None => {
            return refuse(
                close_code::REFUSED,
                format!("node {peer} is not a known peer"),
            )
        }
    };
    // Held while the connection is served: the peer's slot.
    let Some(_slot) = slot else {
        TransportStats::bump(&shared.stats.connections_over_limit);
        return refuse(
            close_code::TOO_MANY_CONNECTIONS,
            format!("node {peer} already has {max_conns} connections open to this node"),
        );
    };
    let log = log.new(o!("peer" => peer));
    debug!(log, "accepted connection");
    seen.notify_one();
    loop {
        let stream = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                let c = if shared.shutdown.is_cancelled() {
                    close_code::SHUTDOWN
                } else {
                    close_code::PEER_REMOVED
                };
                shared.close_conn(&conn, c, b"closing").await;
                return;
            }
            s = conn.accept_uni() => s,
        };
        match stream {
            Ok(stream) => shared.spawn(read_stream(
                shared.clone(),
                conn.clone(),
                peer,
                stream,
                cancel.clone(),
                log.clone(),
            )),
            Err(e) => {
                debug!(log, "incoming connection ended"; "reason" => describe_loss(&e));
                return;
            }
        }
    }
}

/// Reads frames from one stream of `peer` until it ends or misbehaves.
///
/// Per frame: the length prefix (nothing allocated yet, no deadline: a stream may idle
/// between frames), then the frame's reservation of the inbound budget (waiting while it
/// is spent), then the payload within the frame deadline, then the wire scan (entries,
/// unknown fields) and the decode. The message goes to the driver with its reservation,
/// shrunk to what the decoded message may take.
async fn read_stream(
    shared: Arc<Shared>,
    conn: Connection,
    peer: NodeId,
    mut stream: RecvStream,
    cancel: CancellationToken,
    log: Logger,
) {
    match read_hello(&shared, &conn, peer, &mut stream, &cancel, &log).await {
        Some(hello) => {
            // Through `to_driver`, like every item, so the budget's count of the
            // channel's items stays right.
            if shared
                .to_driver(Inbound::Hello { from: peer, hello }, None)
                .is_err()
            {
                TransportStats::bump(&shared.stats.dropped_inbound_full);
            }
        }
        None => return,
    }
    let Settings {
        max_frame,
        max_entries,
        frame_timeout,
        ..
    } = shared.settings;
    let close = |c: u32, reason: &'static [u8]| conn.close(code(c), reason);
    loop {
        let prefix = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            r = frame::read_prefix(&mut stream) => r,
        };
        let len = match prefix {
            Ok(Some(len)) if len <= max_frame => len,
            Ok(Some(len)) => {
                TransportStats::bump(&shared.stats.frames_oversized);
                let e = FrameError::TooLarge {
                    len,
                    max: max_frame,
                };
                warn!(log, "closing connection: oversized frame"; "error" => %e);
                return close(close_code::FRAME_TOO_LARGE, b"frame too large");
            }
            Ok(None) => return,
            Err(e @ FrameError::Malformed(_)) => {
                TransportStats::bump(&shared.stats.frames_malformed);
                warn!(log, "closing connection: malformed frame"; "error" => %e);
                return close(close_code::MALFORMED, b"malformed frame");
            }
            Err(e) => {
                debug!(log, "stream ended"; "reason" => %e);
                return;
            }
        };
        let reserve = frame::decode_bound(len, max_entries);
        let reclaim = || shared.reclaim_budget();
        let mut permit = match shared.budget.try_acquire(peer, reserve, reclaim) {
            Some(p) => p,
            None => {
                TransportStats::bump(&shared.stats.frames_waited_for_budget);
                debug!(log, "frame waits for inbound budget"; "reserve" => reserve);
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return,
                    // A connection that ends meanwhile needs no budget any more.
                    _ = conn.closed() => return,
                    p = shared.budget.acquire(peer, reserve, reclaim) => p,
                }
            }
        };
        let payload = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(frame_timeout, frame::read_payload(&mut stream, len)) => r,
        };
        let payload = match payload {
            Ok(Ok(payload)) => payload,
            Err(_elapsed) => {
                TransportStats::bump(&shared.stats.frames_timed_out);
                warn!(log, "closing connection: frame not received in time";
                    "len" => len, "timeout" => format!("{frame_timeout:?}"));
                return close(close_code::FRAME_TIMEOUT, b"frame timed out");
            }
            Ok(Err(e @ FrameError::Malformed(_))) => {
                TransportStats::bump(&shared.stats.frames_malformed);
                warn!(log, "closing connection: malformed frame"; "error" => %e);
                return close(close_code::MALFORMED, b"malformed frame");
            }
            Ok(Err(e)) => {
                debug!(log, "stream ended"; "reason" => %e);
                return;
            }
        };
        match frame::parse_limited(&payload, max_entries) {
            Ok((msg, shape)) => {
                drop(payload);
                permit.shrink_to(shape.decoded_bytes(len));
                if shared.deliver(peer, msg, permit, &log).is_err() {
                    return; // the driver is gone
                }
            }
            Err(e @ FrameError::TooManyEntries { .. }) => {
                TransportStats::bump(&shared.stats.frames_too_many_entries);
                warn!(log, "closing connection: too many entries in a frame"; "error" => %e);
                return close(close_code::TOO_MANY_ENTRIES, b"too many entries");
            }
            Err(e) => {
                TransportStats::bump(&shared.stats.frames_malformed);
                warn!(log, "closing connection: malformed frame"; "error" => %e);
                return close(close_code::MALFORMED, b"malformed frame");
            }
        }
    }
}

/// Reads the hello a stream begins with; refuses (closes the connection) a stream that
/// does not begin with one, or a peer of another group than ours.
async fn read_hello(
    shared: &Shared,
    conn: &Connection,
    peer: NodeId,
    stream: &mut RecvStream,
    cancel: &CancellationToken,
    log: &Logger,
) -> Option<Hello> {
    let mut bytes = [0u8; HELLO_LEN];
    let read = tokio::select! {
        biased;
        _ = cancel.cancelled() => return None,
        r = tokio::time::timeout(HELLO_WAIT, stream.read_exact(&mut bytes)) => r,
    };
    let refuse = |why: String| {
        TransportStats::bump(&shared.stats.connections_refused);
        let key = conn.remote_address().ip().to_string();
        warn_limited!(shared.refusal_log, &key, log,
            "refused incoming connection"; "reason" => &why,);
        conn.close(code(close_code::WRONG_GROUP), why.as_bytes());
    };
    let hello = match read {
        Ok(Ok(())) => match Hello::decode(&bytes) {
            Ok(h) => h,
            Err(e) => {
                TransportStats::bump(&shared.stats.frames_malformed);
                refuse(format!("node {peer}: {e}"));
                return None;
            }
        },
        Ok(Err(e)) => {
            debug!(log, "stream ended before its hello"; "reason" => %e);
            return None;
        }
        Err(_) => {
            TransportStats::bump(&shared.stats.frames_malformed);
            refuse(format!(
                "node {peer} sent no hello within {HELLO_WAIT:?}: not a tenure peer of this version"
            ));
            return None;
        }
    };
    let ours = shared.hello.borrow().and_then(|h| h.group);
    if let (Some(ours), Some(theirs)) = (ours, hello.group) {
        if ours != theirs {
            refuse(format!(
                "node {peer} belongs to group {theirs}, this node to group {ours}: a node of \
                 another group (or a data folder copied from one) uses this group's certificates"
            ));
            return None;
        }
    }
    debug!(log, "peer said hello"; "hello" => %hello);
    Some(hello)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        for attempt in 0..40 {
            let base = (Duration::from_millis(20) * 2u32.pow(attempt.min(20))).min(s.backoff_max);
            for _ in 0..20 {
                let d = backoff_delay(&s, attempt);
                assert!(
                    d >= base / 2 && d <= base,
                    "attempt {attempt}: {d:?} vs {base:?}"
                );
            }
        }
    }
}
