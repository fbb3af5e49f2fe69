//! [`QuicConfig`]: what a QUIC transport is started with, its defaults and its checks,
//! and the settings its tasks read.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use slog::{o, Logger};

use crate::tls::{TlsFiles, TlsIdentity};
use crate::transport::frame::{self, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_FRAME};
use crate::transport::hello::Hello;
use crate::transport::{NodeId, PeerAddr, Resolve, SystemResolver};

use super::TransportError;

#[cfg(doc)]
use super::QuicTransport;
#[cfg(doc)]
use crate::transport::Transport;

/// Default capacity of each peer's outbound queue.
pub const DEFAULT_QUEUE_DEPTH: usize = 1024;
/// Default capacity of the inbound channel to the driver, in messages (their bytes are
/// bounded by the inbound budget): with thousands of named elections, one turn's burst
/// from four peers is this large.
pub const DEFAULT_INBOUND_DEPTH: usize = 16 * 1024;
/// Default first reconnect delay.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(20);
/// Default longest reconnect delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Default QUIC keep-alive interval.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// Default QUIC idle timeout.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default interval between looks at the TLS files for a renewed certificate: 5 s.
pub const DEFAULT_TLS_POLL: Duration = Duration::from_secs(5);
/// Default number of messages kept for a peer while it is disconnected.
pub const DEFAULT_KEEP_WHILE_DISCONNECTED: usize = 8;
/// Default time a frame's payload has to arrive once its length prefix has: 5 s.
pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(5);
/// Default inbound byte budget shared by all connections: 64 MiB (one peer may hold at
/// most half).
pub const DEFAULT_INBOUND_BUDGET: usize = 64 * 1024 * 1024;
/// How long a connect attempt waits for a peer's name to resolve before it counts as a
/// failed attempt (and the task backs off).
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default number of incoming connections one peer may hold open at once: 2 (its
/// connection, and its next one while a restart or a lost path is noticed).
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 2;

/// Everything [`QuicTransport::start`] needs. [`QuicConfig::new`] fills the defaults;
/// the fields are public to adjust them.
#[derive(Clone)]
pub struct QuicConfig {
    /// This node's id; must be the id in `identity`'s certificate.
    pub id: NodeId,
    /// The UDP address to bind (port 0 picks a free port; see
    /// [`QuicTransport::local_addr`]). Both directions use this one socket.
    pub listen: SocketAddr,
    /// The other members and where to reach them (not this node): an IP address, or a
    /// name resolved through `resolver` on every connect attempt. Only these ids may
    /// connect to us (named by their certificates, wherever they connect from); only
    /// these may be sent to.
    pub peers: HashMap<NodeId, PeerAddr>,
    /// How peers' names are resolved ([`SystemResolver`] by default). Each peer's task
    /// asks it on every connect attempt and waits at most [`RESOLVE_TIMEOUT`].
    pub resolver: Arc<dyn Resolve>,
    /// The CA, certificate and key of this node.
    pub identity: TlsIdentity,
    /// The files `identity` was loaded from, if it was: the transport reads them again
    /// every `tls_poll` and on [`QuicTransport::reload_tls`], and a changed, valid
    /// credential of this node is used for new connections from then on (`None`, the
    /// default of [`QuicConfig::new`]: `identity` is used for good).
    pub tls_files: Option<TlsFiles>,
    /// How often to look at `tls_files` ([`DEFAULT_TLS_POLL`]); zero: only on
    /// [`QuicTransport::reload_tls`].
    pub tls_poll: Duration,
    /// Largest frame payload sent or accepted ([`DEFAULT_MAX_FRAME`]). Use the same value
    /// on every node. Below the default, a root snapshot of a full catalog
    /// ([`MAX_CATALOG_BYTES`](crate::election::MAX_CATALOG_BYTES)) may not fit, and a new
    /// member could not catch up.
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
    /// Capacity of each inbound channel to the driver ([`DEFAULT_INBOUND_DEPTH`]); when
    /// full, arrivals are dropped and counted `dropped_inbound_full`. One peer may have
    /// at most this over the number of peers waiting in a channel; its further messages
    /// are dropped and counted `dropped_inbound_share`, so that a flood from one peer
    /// never fills the channel for the others.
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
    /// draws from the OS. It seeds the reconnect jitter and the dials' first destination
    /// ids too. The TLS handshake's own randomness (rustls, ring) comes from the crypto
    /// provider, which a test sets with `tls::set_thread_crypto_provider`.
    #[doc(hidden)]
    pub rng_seed: Option<u64>,
    /// The [hello](crate::transport::hello) this node says first on every connection it opens.
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
            .field("tls_files", &self.tls_files)
            .field("tls_poll", &self.tls_poll)
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
    /// `logger` to see what the transport does). `id` must be `identity.id()`. Peers
    /// reached by name go into [`peers`](Self::peers) afterwards.
    pub fn new(
        id: NodeId,
        listen: SocketAddr,
        peers: HashMap<NodeId, SocketAddr>,
        identity: TlsIdentity,
    ) -> Self {
        QuicConfig {
            id,
            listen,
            peers: peers.into_iter().map(|(id, a)| (id, a.into())).collect(),
            resolver: Arc::new(SystemResolver),
            identity,
            tls_files: None,
            tls_poll: DEFAULT_TLS_POLL,
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

    pub(super) fn validate(&self) -> Result<(), TransportError> {
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

/// Settings the tasks read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub(super) max_frame: usize,
    pub(super) max_entries: usize,
    pub(super) frame_timeout: Duration,
    pub(super) max_connections_per_peer: usize,
    pub(super) queue_depth: usize,
    pub(super) backoff_min: Duration,
    pub(super) backoff_max: Duration,
    pub(super) keep_while_disconnected: usize,
    /// [`QuicConfig::rng_seed`]: seeds the reconnect jitter too.
    pub(super) rng_seed: Option<u64>,
}
