//! The real transport: QUIC (quinn) with mutual TLS.
//!
//! # Shape
//!
//! One UDP socket per node, one quinn endpoint on it acting as server and client.
//!
//! * **Outbound.** Every node dials each peer for its *own* outbound traffic: one
//!   connection per direction per pair. Each peer has a bounded queue (`send` never
//!   blocks: it `try_send`s, and a full queue drops and counts) and a task that
//!   resolves the peer's name if it has one ([`PeerAddr`], through
//!   [`QuicConfig::resolver`], on every attempt: a failure is a failed attempt), connects
//!   with server name `node-<id>.tenure`, checks that the certificate names the peer it
//!   dialed, opens one unidirectional stream, writes this node's [hello](super::hello)
//!   (a member's quotes the founding nonce it recorded for that peer,
//!   [`Transport::set_quotes`]) and then frames in order. When the connect
//!   fails or the connection is lost, the task reports [`Inbound::Unreachable`] once for
//!   that failure (so at most once per backoff step), then reconnects with exponential
//!   backoff and jitter (`backoff_min..backoff_max`). While it is disconnected it keeps
//!   only the most recent few messages (`keep_while_disconnected`): raft-rs retransmits,
//!   and old heartbeats are useless. When the peer connects to *us*, it is up: a connect
//!   attempt of ours stuck in handshake retransmission, or a backoff wait, is cut short;
//!   and for a named peer, the name is asked again, and a connection of ours to an
//!   address it no longer resolves to is replaced at once (the peer moved; docs/design.md,
//!   section 13).
//!   The queue holds the root's messages ([`Transport::send`]) and named elections'
//!   ([`Transport::send_election`]) together, in the order they were sent, and one
//!   write carries a batch of both kinds: root frames and election frames (see
//!   [`frame`]).
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
//!   to the driver with `try_send` (full → `dropped_inbound_full`; past the peer's
//!   share of it → `dropped_inbound_share`): a root frame's message as
//!   [`Inbound::Message`], an election frame's as [`Inbound::Election`] with its id.
//!   The limits, checks, fault hooks and counters are the same for both. Network input never
//!   panics. Failed handshakes and refusals are logged at WARN once per remote address
//!   per minute (with the count of those held back), the rest at DEBUG.
//!
//! # Certificates
//!
//! The credential new connections use is swapped while the transport runs
//! ([`QuicTransport::reload_tls`], and every [`QuicConfig::tls_poll`] when
//! [`QuicConfig::tls_files`] is set): the files are checked as at a start, then the
//! endpoint's server configuration is replaced and the next dial uses the new client
//! configuration; open connections keep theirs (docs/design.md, section 6, "Rotating
//! certificates"). Every server configuration also refuses, at the handshake, a client
//! certificate naming a node the group removed ([`Transport::set_removed`]; "Shutting out
//! a node").
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
//! [`Inbound::Unreachable`]: crate::transport::Inbound::Unreachable
//! [`Inbound::Hello`]: crate::transport::Inbound::Hello
//! [`Inbound::Message`]: crate::transport::Inbound::Message
//! [`Inbound::Election`]: crate::transport::Inbound::Election
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
//!
//! # Layout
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`QuicTransport`] and its [`Transport`] impl, [`TransportError`], [`close_code`] |
//! | `config.rs` | [`QuicConfig`], its defaults and checks; the settings the tasks read |
//! | `shared.rs` | what the tasks share: the peers, the counters, closing, the channel to the driver |
//! | `budget.rs` | the inbound byte budget all connections share |
//! | `outbound.rs` | the outbound task of one peer: connect, pump, backoff |
//! | `inbound.rs` | the accept loop, naming a peer by its certificate, the connection cap, the hello, reading frames |
//! | `socket.rs` | the UDP socket, which the transport releases at shutdown |
//! | `tls_state.rs` | the credential in use and reloading it from its files |
//! | `cids.rs` | connection ids (any may be ours, so a restarted node answers with a stateless reset) |

mod budget;
mod cids;
mod config;
mod inbound;
mod outbound;
mod shared;
mod socket;
mod tls_state;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use quinn::VarInt;
use raft::eraftpb::Message;
use rand::Rng;
use slog::{info, o, warn};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::tls::{TlsError, TlsIdentity, TlsReload};
use crate::transport::hello::Hello;
use crate::transport::log_limit::{self, LogLimit};
use crate::transport::{
    Faults, Inbox, NodeId, PeerAddr, Transport, TransportStats, TransportStatsSnapshot,
};

pub use config::{
    QuicConfig, DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN, DEFAULT_FRAME_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_INBOUND_BUDGET, DEFAULT_INBOUND_DEPTH, DEFAULT_KEEP_ALIVE,
    DEFAULT_KEEP_WHILE_DISCONNECTED, DEFAULT_MAX_CONNECTIONS_PER_PEER, DEFAULT_QUEUE_DEPTH,
    DEFAULT_TLS_POLL, RESOLVE_TIMEOUT,
};

#[cfg(doc)]
use crate::tls::node_id_from_cert;
#[cfg(doc)]
use crate::transport::frame;

use budget::Budget;
use cids::RandomCids;
use config::Settings;
use inbound::accept_loop;
use shared::{DriverQueue, Shared};
use socket::{GivenSocket, ReleasableSocket};
use tls_state::TlsState;

/// Unidirectional streams a peer may open at once on one connection. tenure sends on one.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 4;
/// Bytes QUIC buffers for one stream before the reader takes them (flow control).
pub const STREAM_RECEIVE_WINDOW: u32 = 1024 * 1024;
/// Bytes QUIC buffers for one connection, all its streams together.
pub const RECEIVE_WINDOW: u32 = 2 * STREAM_RECEIVE_WINDOW;

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

fn code(c: u32) -> VarInt {
    VarInt::from_u32(c)
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

impl QuicTransport {
    /// Binds `cfg.listen`, starts accepting and starts one outbound task per peer.
    /// Returns the transport and the receiver of what arrives. Must be called inside a
    /// tokio runtime.
    pub fn start(cfg: QuicConfig) -> Result<(QuicTransport, Inbox), TransportError> {
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
    ) -> Result<(QuicTransport, Inbox), TransportError> {
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
    ) -> Result<(QuicTransport, Inbox), TransportError> {
        Self::start_inner(cfg, GivenSocket::Abstract(socket, runtime))
    }

    fn start_inner(
        cfg: QuicConfig,
        socket: GivenSocket,
    ) -> Result<(QuicTransport, Inbox), TransportError> {
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

        let (tls, server_config) = TlsState::new(
            cfg.identity.clone(),
            cfg.tls_files.clone(),
            transport,
            cfg.rng_seed,
        )?;

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
        let (urgent, urgent_rx) = mpsc::channel(cfg.inbound_depth);
        let (guard, done) = mpsc::channel(1);
        let shared = Arc::new(Shared {
            id: cfg.id,
            endpoint,
            socket,
            tls,
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
                rng_seed: cfg.rng_seed,
            },
            stats: TransportStats::default(),
            faults: Faults::default(),
            inbound,
            urgent,
            driver_queue: Mutex::new(DriverQueue::default()),
            budget: Budget::new(cfg.inbound_budget),
            refusal_log: LogLimit::new(log_limit::WINDOW),
            peers: RwLock::new(BTreeMap::new()),
            resolver: cfg.resolver,
            hello: watch::Sender::new(cfg.hello),
            quotes: Mutex::new(BTreeMap::new()),
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
        let mut peers: Vec<(NodeId, PeerAddr)> = cfg.peers.into_iter().collect();
        peers.sort_unstable_by_key(|(id, _)| *id);
        for (id, addr) in peers {
            shared.add_peer(id, addr);
        }
        shared.spawn(accept_loop(shared.clone()));
        if shared.tls.reloadable() && !cfg.tls_poll.is_zero() {
            shared.spawn(poll_tls(shared.clone(), cfg.tls_poll));
        }
        Ok((
            QuicTransport { shared, local_addr },
            Inbox::with_urgent(urgent_rx, inbound_rx),
        ))
    }

    /// The bound UDP address (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.shared.id
    }

    /// Sets where peer `id` is reached (an IP address or a name: a [`SocketAddr`] or a
    /// [`PeerAddr`]), adding it as a peer if it is new. A changed address is used from
    /// the next connect on (an open connection stays; it is to the right node, by its
    /// certificate).
    pub fn set_peer_addr(&self, id: NodeId, addr: impl Into<PeerAddr>) {
        let addr = addr.into();
        if id == self.shared.id || id == 0 || self.shared.closed.load(Ordering::Acquire) {
            return;
        }
        let peers = self.shared.peers_read();
        if let Some(peer) = peers.get(&id) {
            peer.addr.send_if_modified(|a| {
                let changed = *a != addr;
                *a = addr;
                changed
            });
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
        if let Some(peer) = removed {
            info!(self.shared.log, "peer removed"; "peer" => id);
            peer.cancel.cancel();
        }
    }

    /// Reads this node's certificate, key and CA bundle again and, if they changed and
    /// pass every check a start makes (PEM, a node certificate naming this node, the
    /// key belongs to it, it verifies under the bundle), uses them for every new
    /// connection, both ways; open connections keep theirs, so nothing is dropped. A
    /// failure keeps the credential in use and says what is wrong with the files
    /// ([`TlsError::NotReloadable`] if the identity was not loaded from files). Also
    /// done every [`QuicConfig::tls_poll`].
    pub fn reload_tls(&self) -> Result<TlsReload, TlsError> {
        self.shared.reload_tls(false)
    }

    /// The TLS identity new connections use now.
    pub fn tls_identity(&self) -> TlsIdentity {
        self.shared.tls.current()
    }

    /// Sees each identity the transport swaps in by a reload (the current one first).
    pub fn tls_updates(&self) -> watch::Receiver<TlsIdentity> {
        self.shared.tls.subscribe()
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
        self.send_election(0, msg);
    }

    fn send_election(&self, election: u32, msg: Message) {
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
        let lane = if shared::is_urgent(election) {
            &peer.urgent
        } else {
            &peer.queue
        };
        match lane.try_send((election, msg)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => TransportStats::bump(&shared.stats.dropped_queue_full),
            Err(TrySendError::Closed(_)) => {
                TransportStats::bump(&shared.stats.dropped_disconnected);
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

    fn set_quotes(&self, quotes: BTreeMap<NodeId, u128>) {
        *self
            .shared
            .quotes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = quotes;
    }

    fn set_peer(&self, id: NodeId, addr: Option<PeerAddr>) {
        match addr {
            Some(a) if !self.shared.tls.removed.contains(id) => self.set_peer_addr(id, a),
            Some(_) => {}
            None => self.remove_peer(id),
        }
    }

    fn set_removed(&self, removed: &std::collections::BTreeSet<NodeId>) {
        // The verifier of every server configuration (the current one included) reads
        // this set at each handshake.
        self.shared.tls.removed.set(removed);
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
        shared.tls.close(&shared.endpoint);
        shared
            .peers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        // Free the port once the tasks have ended, also when the transport is only
        // closed or dropped (`shutdown` does the same and waits for it).
        let shared2 = self.shared.clone();
        shared
            .runtime
            .spawn(async move { shared2.release_socket().await });
    }
}

/// Reloads the TLS files every `every` until the transport closes.
async fn poll_tls(shared: Arc<Shared>, every: std::time::Duration) {
    loop {
        tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // Errors are logged by `reload_tls`; the next change of the files is tried again.
        let _ = shared.reload_tls(true);
    }
}

impl Drop for QuicTransport {
    fn drop(&mut self) {
        self.close();
    }
}
