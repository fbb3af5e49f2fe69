//! Operator controls: a node's admin endpoint and the client that talks to it.
//!
//! A worker opens the endpoint next to its raft transport, on its own port:
//! [`serve`]`(node, addr, &identity, logger)`. An operator (a person with
//! `cargo run --example ctl`, or a tool using [`Client`]) reaches it with an **operator
//! certificate** issued by the cluster CA ([`ClusterCa::issue_operator`]).
//!
//! # Who may connect
//!
//! The endpoint is QUIC with mutual TLS (TLS 1.3, ring), ALPN [`ALPN`]
//! (`tenure-admin/1`). It presents the node's certificate, so the client checks it is
//! talking to a node of its group (and, if it asked for one, to that node). The client
//! must present a certificate chained to the cluster CA **whose kind is operator**
//! ([`CertKind::Operator`]). A node certificate passes the TLS handshake (it is from the
//! CA) but is then refused: the connection is closed with [`close_code::REFUSED`] and
//! the reason, e.g. "certificate of node 3 is not an operator certificate", which
//! [`Client`] reports as [`ClientError::Refused`]. So a node's files are not enough to
//! act as an operator. The other way round, the raft transport accepts only node
//! certificates, so an operator certificate cannot join the group as a node.
//!
//! # Protocol
//!
//! One bidirectional stream per request. The client writes one JSON object (at most
//! [`MAX_REQUEST`] bytes) and finishes the stream; the node answers with one JSON object
//! and finishes its side. Both carry the protocol version `"v": 1`
//! ([`PROTOCOL_VERSION`]):
//!
//! ```text
//! → {"v":1,"command":"transfer","to":2}
//! ← {"v":1,"ok":{"transferred":{"leader":2}}}
//! → {"v":1,"command":"promote","id":4}
//! ← {"v":1,"error":{"kind":"not_leader","message":"…","leader_hint":1}}
//! ```
//!
//! The commands are the variants of [`Request`], the answers those of [`Reply`]; a
//! refusal is an [`ErrorReply`] with a machine-readable [`ErrorKind`] and a message for
//! people. Bad input (not JSON, too large, an unknown command, a missing argument, another
//! protocol version) gets an error reply that says what is wrong; it never panics the
//! node. Leader-only commands ([`Request::leader_only`]) sent to a follower answer
//! [`ErrorKind::NotLeader`] with the leader this node knows of.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quinn::{ConnectionError, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use slog::{debug, info, o, warn, Logger};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{MembershipError, NodeStopped, TransferError};
use crate::history::TenureRecord;
use crate::node::{Membership, Node, Status};
use crate::transport::tls::{
    check_operator_cert, node_id_from_cert, node_server_name, ring_provider, root_store,
    OperatorIdentity, TlsError, TlsIdentity,
};
#[cfg(doc)]
use crate::transport::tls::{CertKind, ClusterCa};
use crate::transport::NodeId;

/// The ALPN protocol of the admin endpoint, version 1. The raft transport's ALPN
/// (`tenure/1`) differs, so a client pointed at the wrong port fails at once with
/// [`ClientError::WrongProtocol`].
pub const ALPN: &[u8] = b"tenure-admin/1";

/// The version of the JSON protocol, carried in every request and answer as `"v"`.
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest request the endpoint reads, in bytes. A larger one is answered with
/// [`ErrorKind::BadRequest`].
pub const MAX_REQUEST: usize = 64 * 1024;

/// The largest answer the client reads, in bytes (a long history is the largest).
pub const MAX_RESPONSE: usize = 16 * 1024 * 1024;

/// How long the endpoint waits for a request's bytes once its stream is open.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How many requests one connection may have open at once.
const MAX_STREAMS: u32 = 16;

/// Default bound of one request as the client sees it. Membership changes wait for a
/// learner to catch up and transfers for an election, so this is generous.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Client::connect`] waits for the handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Application error codes the admin endpoint closes connections with.
pub mod close_code {
    /// The endpoint is closing (the node stops).
    pub const SHUTDOWN: u32 = 0;
    /// The client's certificate is not an operator certificate. The close reason says
    /// whose it is.
    pub const REFUSED: u32 = 1;
    /// The client is done.
    pub const DONE: u32 = 2;
}

// ---------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------

/// A command to a node. On the wire: `{"v":1,"command":"<name>", ...arguments}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Request {
    /// The node's view: role, term, leader, members, quorum health, lease. Any node.
    Status,
    /// The replicated leadership history, oldest first. Any node.
    History,
    /// Hand leadership to `to`, or to the most up-to-date follower. Leader only.
    Transfer {
        /// The node to hand over to; `None`: the most up-to-date follower.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<NodeId>,
    },
    /// Keep node `id` from campaigning; if it leads, it hands over at once. Leader only.
    Drain {
        /// The node.
        id: NodeId,
    },
    /// Let node `id` campaign again. Leader only.
    Undrain {
        /// The node.
        id: NodeId,
    },
    /// Add node `id`, reachable at `addr` (its raft address), as a learner. Leader only.
    AddLearner {
        /// The new node.
        id: NodeId,
        /// Its raft transport address.
        addr: SocketAddr,
    },
    /// Make learner `id` a voter once it has caught up. Leader only.
    Promote {
        /// The learner.
        id: NodeId,
    },
    /// Remove node `id` from the group. Leader only.
    Remove {
        /// The member.
        id: NodeId,
    },
    /// Replace voter `old` by the caught-up learner `new` in one joint change. Leader only.
    Replace {
        /// The voter to remove.
        old: NodeId,
        /// The learner to promote in its place.
        new: NodeId,
    },
}

/// The names of the commands, as they appear on the wire.
pub const COMMANDS: &[&str] = &[
    "status",
    "history",
    "transfer",
    "drain",
    "undrain",
    "add_learner",
    "promote",
    "remove",
    "replace",
];

/// The arguments each command takes.
fn arguments_of(command: &str) -> &'static [&'static str] {
    match command {
        "transfer" => &["to"],
        "drain" | "undrain" | "promote" | "remove" => &["id"],
        "add_learner" => &["id", "addr"],
        "replace" => &["old", "new"],
        _ => &[],
    }
}

impl Request {
    /// The command's name on the wire (`"add_learner"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::History => "history",
            Request::Transfer { .. } => "transfer",
            Request::Drain { .. } => "drain",
            Request::Undrain { .. } => "undrain",
            Request::AddLearner { .. } => "add_learner",
            Request::Promote { .. } => "promote",
            Request::Remove { .. } => "remove",
            Request::Replace { .. } => "replace",
        }
    }

    /// Whether only the leader can carry it out (everything but `status` and `history`).
    /// A follower answers such a command with [`ErrorKind::NotLeader`].
    pub fn leader_only(&self) -> bool {
        !matches!(self, Request::Status | Request::History)
    }

    /// The request as it goes on the wire, version included.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("v".into(), PROTOCOL_VERSION.into());
        }
        v
    }

    /// Parses a request as it comes off the wire. Every failure is an
    /// [`ErrorKind::BadRequest`] or [`ErrorKind::UnsupportedVersion`] reply that says what
    /// is wrong.
    pub fn from_json(bytes: &[u8]) -> Result<Request, ErrorReply> {
        let bad = |message: String| ErrorReply::new(ErrorKind::BadRequest, message);
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| bad(format!("the request is not valid JSON: {e}")))?;
        let Value::Object(mut obj) = value else {
            return Err(bad(
                "the request is not a JSON object like {\"v\":1,\"command\":\"status\"}".into(),
            ));
        };
        match obj.remove("v") {
            Some(v) if v.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => {}
            Some(v) => {
                return Err(ErrorReply::new(
                    ErrorKind::UnsupportedVersion,
                    format!(
                        "protocol version {v} is not supported; this node speaks version {PROTOCOL_VERSION}"
                    ),
                ))
            }
            None => {
                return Err(bad(format!(
                    "the request has no protocol version \"v\" (this node speaks {PROTOCOL_VERSION})"
                )))
            }
        }
        let command = match obj.get("command") {
            Some(Value::String(c)) => c.clone(),
            Some(other) => return Err(bad(format!("\"command\" is {other}, not a string"))),
            None => {
                return Err(bad(format!(
                    "the request has no \"command\" (one of: {})",
                    COMMANDS.join(", ")
                )))
            }
        };
        if !COMMANDS.contains(&command.as_str()) {
            return Err(bad(format!(
                "unknown command {command:?} (known: {})",
                COMMANDS.join(", ")
            )));
        }
        let takes = arguments_of(&command);
        if let Some(extra) = obj
            .keys()
            .find(|k| k.as_str() != "command" && !takes.contains(&k.as_str()))
        {
            return Err(bad(format!(
                "bad arguments for {command}: unknown argument {extra:?} (it takes: {})",
                if takes.is_empty() {
                    "none".to_string()
                } else {
                    takes.join(", ")
                }
            )));
        }
        serde_json::from_value(Value::Object(obj))
            .map_err(|e| bad(format!("bad arguments for {command}: {e}")))
    }
}

/// A successful answer. On the wire: `{"<kind>": {...}}`, e.g.
/// `{"transferred":{"leader":2}}` (externally tagged: the membership's address map has
/// numeric keys, which an internally tagged enum could not read back).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// Answer to [`Request::Status`].
    Status(Status),
    /// Answer to [`Request::History`].
    History {
        /// The tenures, oldest first.
        records: Vec<TenureRecord>,
    },
    /// Answer to [`Request::Transfer`]: the node that leads now.
    Transferred {
        /// The new leader.
        leader: NodeId,
    },
    /// Answer to the drain and membership commands: the configuration after the change.
    Membership(Membership),
}

/// What kind of refusal an [`ErrorReply`] is. Unknown kinds (from a newer node) read as
/// [`ErrorKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The command needs the leader and this node is not it; see `leader_hint`.
    NotLeader,
    /// Another membership change is still in flight; retry when it is done.
    ChangeInFlight,
    /// The node named is not a member (or not a voter, for a transfer).
    UnknownNode,
    /// The node to add is already a member.
    AlreadyMember,
    /// The node to promote (or replace with) is not a learner.
    NotALearner,
    /// The learner has not caught up with the log yet; retry later.
    LearnerBehind,
    /// The change would leave the group without a reachable quorum.
    WouldLoseQuorum,
    /// The transfer target already leads.
    AlreadyLeader,
    /// No follower to transfer to.
    NoCandidate,
    /// The transfer target is drained and may not lead; undrain it or pick another.
    Drained,
    /// The operation did not complete in time (for example no quorum); it may still
    /// take effect.
    TimedOut,
    /// The node has stopped.
    Stopped,
    /// The request is malformed: not JSON, too large, unknown command, bad arguments.
    BadRequest,
    /// The request's protocol version is not spoken by this node.
    UnsupportedVersion,
    /// Something else; the message says what.
    #[serde(other)]
    Other,
}

impl ErrorKind {
    /// The kind's name on the wire (`"not_leader"`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::NotLeader => "not_leader",
            ErrorKind::ChangeInFlight => "change_in_flight",
            ErrorKind::UnknownNode => "unknown_node",
            ErrorKind::AlreadyMember => "already_member",
            ErrorKind::NotALearner => "not_a_learner",
            ErrorKind::LearnerBehind => "learner_behind",
            ErrorKind::WouldLoseQuorum => "would_lose_quorum",
            ErrorKind::AlreadyLeader => "already_leader",
            ErrorKind::NoCandidate => "no_candidate",
            ErrorKind::Drained => "drained",
            ErrorKind::TimedOut => "timed_out",
            ErrorKind::Stopped => "stopped",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::UnsupportedVersion => "unsupported_version",
            ErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node's refusal of a command: what kind, a message for people, and for
/// [`ErrorKind::NotLeader`] the leader it knows of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ErrorReply {
    /// The kind, for programs.
    pub kind: ErrorKind,
    /// What happened, for people.
    pub message: String,
    /// With [`ErrorKind::NotLeader`]: the leader the node knows of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_hint: Option<NodeId>,
}

impl ErrorReply {
    /// A refusal without a leader hint.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorReply {
            kind,
            message: message.into(),
            leader_hint: None,
        }
    }

    fn not_leader(node: NodeId, leader_hint: Option<NodeId>) -> Self {
        let message = match leader_hint {
            Some(l) => format!("node {node} is not the leader; node {l} leads"),
            None => format!(
                "node {node} is not the leader, and knows of no leader right now (no quorum?)"
            ),
        };
        ErrorReply {
            kind: ErrorKind::NotLeader,
            message,
            leader_hint,
        }
    }
}

impl From<NodeStopped> for ErrorReply {
    fn from(e: NodeStopped) -> Self {
        ErrorReply::new(ErrorKind::Stopped, e.to_string())
    }
}

/// An answer as it goes on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Response {
    v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ok: Option<Reply>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorReply>,
}

impl Response {
    fn from_result(r: Result<Reply, ErrorReply>) -> Self {
        let (ok, error) = match r {
            Ok(reply) => (Some(reply), None),
            Err(e) => (None, Some(e)),
        };
        Response {
            v: PROTOCOL_VERSION,
            ok,
            error,
        }
    }

    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|e| {
            // Serializing our own types does not fail; answer something valid anyway.
            let fallback = Response::from_result(Err(ErrorReply::new(
                ErrorKind::Other,
                format!("the node could not encode its answer: {e}"),
            )));
            serde_json::to_vec(&fallback).unwrap_or_default()
        })
    }
}

// ---------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------

/// Why [`serve`] could not open the admin endpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The UDP socket could not be bound. Cause: address in use or not an address of
    /// this host. Fix: choose another `--admin` address (port 0 picks a free one).
    #[error("cannot bind the admin endpoint to UDP {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The TLS configuration could not be built from the node's identity.
    #[error("admin endpoint TLS setup failed: {0}")]
    Tls(#[from] TlsError),
    /// The identity names another node than the one served. Fix: pass the node's own
    /// identity (the one it was started with).
    #[error("the TLS identity names node {identity}, but the admin endpoint serves node {node}")]
    IdentityMismatch {
        /// The node served.
        node: NodeId,
        /// The node the certificate names.
        identity: NodeId,
    },
    /// Not called inside a tokio runtime. Fix: call it from async code on tokio.
    #[error("admin::serve must be called inside a tokio runtime")]
    NoRuntime,
}

/// A running admin endpoint. Closing it ([`AdminServer::close`], or dropping it) stops
/// accepting connections and closes the open ones; the node keeps running.
pub struct AdminServer {
    local_addr: SocketAddr,
    endpoint: quinn::Endpoint,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl AdminServer {
    /// The address the endpoint is bound to (with the real port when port 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Closes every connection and waits until the endpoint's tasks have ended.
    pub async fn close(mut self) {
        self.stop();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
    }

    fn stop(&self) {
        self.shutdown.cancel();
        self.endpoint.close(
            VarInt::from_u32(close_code::SHUTDOWN),
            b"admin endpoint closed",
        );
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Opens node `node`'s admin endpoint on UDP `addr` (port 0 picks a free port; see
/// [`AdminServer::local_addr`]). `identity` is the node's own TLS identity: the endpoint
/// presents its certificate and trusts its CA. Must be called inside a tokio runtime.
///
/// The endpoint logs every request (command and outcome) and every refused client to
/// `logger`.
pub fn serve(
    node: Node,
    addr: SocketAddr,
    identity: &TlsIdentity,
    logger: Logger,
) -> Result<AdminServer, ServeError> {
    if identity.id() != node.id() {
        return Err(ServeError::IdentityMismatch {
            node: node.id(),
            identity: identity.id(),
        });
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| ServeError::NoRuntime)?;
    let mut crypto = identity.rustls_server_config()?;
    crypto.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
        .map_err(|e| ServeError::Tls(TlsError::Quic(e.to_string())))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(MAX_STREAMS))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .datagram_receive_buffer_size(None)
        .max_idle_timeout(Some(
            Duration::from_secs(60)
                .try_into()
                .expect("60 s is a valid idle timeout"),
        ));
    config.transport_config(Arc::new(transport));
    config.migration(false);
    let socket =
        std::net::UdpSocket::bind(addr).map_err(|source| ServeError::Bind { addr, source })?;
    let endpoint = {
        let _guard = runtime.enter();
        quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            Some(config),
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|source| ServeError::Bind { addr, source })?
    };
    let local_addr = endpoint
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let log = logger.new(o!("admin" => local_addr.to_string()));
    info!(log, "admin endpoint listening");
    let shutdown = CancellationToken::new();
    let task = runtime.spawn(accept_loop(endpoint.clone(), node, shutdown.clone(), log));
    Ok(AdminServer {
        local_addr,
        endpoint,
        shutdown,
        task: Some(task),
    })
}

async fn accept_loop(
    endpoint: quinn::Endpoint,
    node: Node,
    shutdown: CancellationToken,
    log: Logger,
) {
    loop {
        let incoming = tokio::select! {
            _ = shutdown.cancelled() => return,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => return,
            },
        };
        let (node, shutdown, log) = (node.clone(), shutdown.clone(), log.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = serve_connection(incoming, node, log) => {}
            }
        });
    }
}

/// The end-entity certificate the peer of `conn` presented.
fn peer_cert(conn: &quinn::Connection) -> Option<CertificateDer<'static>> {
    conn.peer_identity()?
        .downcast::<Vec<CertificateDer<'static>>>()
        .ok()?
        .first()
        .cloned()
}

async fn serve_connection(incoming: quinn::Incoming, node: Node, log: Logger) {
    let log = log.new(o!("client" => incoming.remote_address().to_string()));
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            // rustls refused the client (no certificate, another CA, ...), or the client
            // gave up. The client learns why from the TLS alert.
            warn!(log, "admin handshake failed"; "error" => %e);
            return;
        }
    };
    let refusal = match peer_cert(&conn) {
        None => Some("no client certificate".to_string()),
        Some(cert) => match check_operator_cert(&cert) {
            Ok(()) => None,
            Err(TlsError::NotOperatorCertificate { reason, .. }) => Some(reason),
            Err(e) => Some(e.to_string()),
        },
    };
    if let Some(reason) = refusal {
        warn!(log, "refused admin connection"; "reason" => &reason);
        conn.close(VarInt::from_u32(close_code::REFUSED), reason.as_bytes());
        return;
    }
    debug!(log, "operator connected");
    loop {
        let (send, recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(e) => {
                debug!(log, "operator connection ended"; "reason" => %e);
                return;
            }
        };
        let (node, log) = (node.clone(), log.clone());
        tokio::spawn(async move { serve_stream(send, recv, node, log).await });
    }
}

async fn serve_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    node: Node,
    log: Logger,
) {
    let read = tokio::time::timeout(READ_TIMEOUT, recv.read_to_end(MAX_REQUEST)).await;
    let result = match read {
        Err(_) => Err(ErrorReply::new(
            ErrorKind::BadRequest,
            format!(
                "the request did not arrive within {} s; send one JSON object and finish the stream",
                READ_TIMEOUT.as_secs()
            ),
        )),
        Ok(Err(quinn::ReadToEndError::TooLong)) => Err(ErrorReply::new(
            ErrorKind::BadRequest,
            format!("the request is larger than {MAX_REQUEST} bytes"),
        )),
        Ok(Err(quinn::ReadToEndError::Read(e))) => {
            debug!(log, "admin request not read"; "error" => %e);
            return;
        }
        Ok(Ok(bytes)) => match Request::from_json(&bytes) {
            Ok(request) => {
                let command = request.name();
                // Reads (status, history) may be polled: log them at debug level.
                let changes = request.leader_only();
                let r = execute(&node, request).await;
                match &r {
                    Ok(_) if changes => info!(log, "admin request done"; "command" => command),
                    Ok(_) => debug!(log, "admin request done"; "command" => command),
                    Err(e) => {
                        info!(log, "admin request refused"; "command" => command, "kind" => e.kind.as_str(), "reason" => &e.message)
                    }
                }
                r
            }
            Err(e) => {
                info!(log, "bad admin request"; "reason" => &e.message);
                Err(e)
            }
        },
    };
    let _ = recv.stop(VarInt::from_u32(0));
    let bytes = Response::from_result(result).encode();
    if send.write_all(&bytes).await.is_ok() {
        let _ = send.finish();
    }
}

/// Carries out one request on `node`.
async fn execute(node: &Node, request: Request) -> Result<Reply, ErrorReply> {
    let me = node.id();
    match request {
        Request::Status => Ok(Reply::Status(node.status().await?)),
        Request::History => Ok(Reply::History {
            records: node.history().await?,
        }),
        Request::Transfer { to } => node
            .transfer_leadership(to)
            .await
            .map(|leader| Reply::Transferred { leader })
            .map_err(|e| transfer_refusal(me, e)),
        Request::Drain { id } => membership(me, node.set_drained(id, true).await),
        Request::Undrain { id } => membership(me, node.set_drained(id, false).await),
        Request::AddLearner { id, addr } => membership(me, node.add_learner(id, addr).await),
        Request::Promote { id } => membership(me, node.promote(id).await),
        Request::Remove { id } => membership(me, node.remove_member(id).await),
        Request::Replace { old, new } => membership(me, node.replace_member(old, new).await),
    }
}

fn transfer_refusal(me: NodeId, e: TransferError) -> ErrorReply {
    let kind = match &e {
        TransferError::NotLeader { leader_hint } => {
            return ErrorReply::not_leader(me, *leader_hint)
        }
        TransferError::UnknownNode(_) => ErrorKind::UnknownNode,
        TransferError::AlreadyLeader(_) => ErrorKind::AlreadyLeader,
        TransferError::NoCandidate => ErrorKind::NoCandidate,
        TransferError::Drained(_) => ErrorKind::Drained,
        TransferError::TimedOut { .. } => ErrorKind::TimedOut,
        TransferError::Stopped(_) => ErrorKind::Stopped,
    };
    ErrorReply::new(kind, e.to_string())
}

fn membership(me: NodeId, r: Result<Membership, MembershipError>) -> Result<Reply, ErrorReply> {
    let e = match r {
        Ok(m) => return Ok(Reply::Membership(m)),
        Err(e) => e,
    };
    let kind = match &e {
        MembershipError::NotLeader { leader_hint } => {
            return Err(ErrorReply::not_leader(me, *leader_hint))
        }
        MembershipError::ChangeInFlight => ErrorKind::ChangeInFlight,
        MembershipError::UnknownNode(_) => ErrorKind::UnknownNode,
        MembershipError::AlreadyMember(_) => ErrorKind::AlreadyMember,
        MembershipError::NotALearner(_) => ErrorKind::NotALearner,
        MembershipError::LearnerBehind { .. } => ErrorKind::LearnerBehind,
        MembershipError::WouldLoseQuorum { .. } => ErrorKind::WouldLoseQuorum,
        MembershipError::TimedOut { .. } => ErrorKind::TimedOut,
        MembershipError::Stopped(_) => ErrorKind::Stopped,
    };
    Err(ErrorReply::new(kind, e.to_string()))
}

// ---------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------

/// The certificate a [`Client`] presents and the CA it trusts.
///
/// Normally made from an [`OperatorIdentity`]. A node's [`TlsIdentity`] converts too, so
/// a setup can be checked: the node refuses it ([`ClientError::Refused`]).
pub struct Credentials {
    ca_certs: Vec<CertificateDer<'static>>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("chain", &self.chain.len())
            .field("key", &"<redacted>")
            .finish()
    }
}

impl From<&OperatorIdentity> for Credentials {
    fn from(id: &OperatorIdentity) -> Self {
        Credentials {
            ca_certs: id.ca_certs().to_vec(),
            chain: id.cert_chain().to_vec(),
            key: id.key().clone_key(),
        }
    }
}

impl From<&TlsIdentity> for Credentials {
    fn from(id: &TlsIdentity) -> Self {
        Credentials {
            ca_certs: id.ca_certs().to_vec(),
            chain: id.cert_chain().to_vec(),
            key: id.key().clone_key(),
        }
    }
}

/// Why a [`Client`] call failed. [`ClientError::Node`] is the node's own refusal (it
/// understood and answered); the others are about reaching it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The node answered with a refusal: not the leader, change in flight, unknown node,
    /// bad request, ... The [`ErrorReply`] says which and why.
    #[error("node {node} refused {command}: {reply}")]
    Node {
        /// The node that answered.
        node: NodeId,
        /// The command.
        command: &'static str,
        /// Its answer.
        reply: ErrorReply,
    },
    /// The node refused the certificate presented, after the handshake: it is not an
    /// operator certificate. Fix: use `operator.pem` / `operator-key.pem`.
    #[error("{addr} refused our certificate: {reason}")]
    Refused {
        /// The endpoint.
        addr: SocketAddr,
        /// What the node said, e.g. "certificate of node 3 is not an operator certificate".
        reason: String,
    },
    /// The TLS handshake failed: the node did not accept our certificate (another CA,
    /// expired) or we did not accept its (not a node of our group, or not the node
    /// asked for). Fix: use the certificates of this group.
    #[error("TLS handshake with {addr} failed: {reason}")]
    Handshake {
        /// The endpoint.
        addr: SocketAddr,
        /// What failed.
        reason: String,
    },
    /// The address answers, but not as an admin endpoint: no common ALPN. Cause: the
    /// raft port (or another QUIC service) instead of the admin port. Fix: use the
    /// address the worker reports as `admin`.
    #[error("{addr} does not speak the admin protocol (tenure-admin/1); is it the node's raft port rather than its admin port?")]
    WrongProtocol {
        /// The endpoint.
        addr: SocketAddr,
    },
    /// No answer in time. Cause: nothing listens there, the host is down or cut off, or
    /// (for a request) the command took longer than the timeout; it may still take effect.
    #[error("{addr}: no answer within {} ms: {what}", timeout.as_millis())]
    TimedOut {
        /// The endpoint.
        addr: SocketAddr,
        /// What we waited for.
        what: String,
        /// How long.
        timeout: Duration,
    },
    /// The connection broke or was closed (the node stopped, the network failed).
    #[error("connection to {addr} lost: {reason}")]
    Connection {
        /// The endpoint.
        addr: SocketAddr,
        /// What happened.
        reason: String,
    },
    /// The answer could not be understood (not JSON of this protocol, too large).
    #[error("bad answer from {addr}: {reason}")]
    Protocol {
        /// The endpoint.
        addr: SocketAddr,
        /// What is wrong with it.
        reason: String,
    },
    /// The client could not be set up (local socket, TLS configuration).
    #[error("cannot set up the admin client: {0}")]
    Setup(String),
}

impl ClientError {
    /// The node's refusal, if it answered with one.
    pub fn reply(&self) -> Option<&ErrorReply> {
        match self {
            ClientError::Node { reply, .. } => Some(reply),
            _ => None,
        }
    }
}

/// Checks the admin endpoint's certificate: a node certificate of the group, and, when
/// one was asked for, of that node. The name dialed does not matter.
#[derive(Debug)]
struct NodeServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    expected: Option<NodeId>,
}

impl ServerCertVerifier for NodeServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let id = node_id_from_cert(end_entity)
            .map_err(|e| rustls::Error::General(format!("the admin endpoint's {e}")))?;
        if let Some(want) = self.expected {
            if id != want {
                return Err(rustls::Error::General(format!(
                    "the endpoint is node {id}, not node {want} as asked"
                )));
            }
        }
        let name = ServerName::try_from(node_server_name(id))
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        self.inner
            .verify_server_cert(end_entity, intermediates, &name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A connection to one node's admin endpoint. Requests may be sent concurrently (one
/// stream each). Dropping it closes the connection.
pub struct Client {
    endpoint: quinn::Endpoint,
    conn: quinn::Connection,
    addr: SocketAddr,
    node: NodeId,
    timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// Maps a QUIC connection error to what it means for an admin client.
fn connection_error(addr: SocketAddr, e: ConnectionError) -> ClientError {
    match e {
        ConnectionError::ApplicationClosed(c)
            if c.error_code == VarInt::from_u32(close_code::REFUSED) =>
        {
            ClientError::Refused {
                addr,
                reason: String::from_utf8_lossy(&c.reason).into_owned(),
            }
        }
        ConnectionError::ConnectionClosed(c)
            if c.error_code == quinn::TransportErrorCode::crypto(120) =>
        {
            // no_application_protocol
            ClientError::WrongProtocol { addr }
        }
        ConnectionError::ConnectionClosed(c)
            if (0x100..0x200).contains(&u64::from(c.error_code)) =>
        {
            let alert = u64::from(c.error_code) & 0xff;
            let hint = match alert {
                42 | 48 | 51 => " (is our certificate from this group's CA?)",
                45 => " (our certificate has expired?)",
                _ => "",
            };
            ClientError::Handshake {
                addr,
                reason: format!(
                    "the node refused the TLS handshake (alert {alert}): {}{hint}",
                    String::from_utf8_lossy(&c.reason)
                ),
            }
        }
        ConnectionError::TransportError(t) if (0x100..0x200).contains(&u64::from(t.code)) => {
            ClientError::Handshake {
                addr,
                reason: format!(
                    "we did not accept the node's certificate: {} (is ca.pem this group's CA? is it the node asked for?)",
                    t.reason
                ),
            }
        }
        ConnectionError::TransportError(t) => ClientError::Handshake {
            addr,
            reason: t.to_string(),
        },
        ConnectionError::TimedOut => ClientError::TimedOut {
            addr,
            what: "the connection went idle (the node stopped or is cut off)".into(),
            timeout: Duration::from_secs(60),
        },
        other => ClientError::Connection {
            addr,
            reason: other.to_string(),
        },
    }
}

impl Client {
    /// Connects to the admin endpoint at `addr` presenting `credentials` (normally an
    /// [`OperatorIdentity`]). With `node: Some(id)` the endpoint must be node `id`'s;
    /// with `None` any node of the group will do ([`Client::node_id`] says which).
    ///
    /// Returns once the TLS handshake is done. A node that refuses the certificate
    /// because it is not an operator's does so just after: the first request then fails
    /// with [`ClientError::Refused`].
    pub async fn connect(
        addr: SocketAddr,
        credentials: impl Into<Credentials>,
        node: Option<NodeId>,
    ) -> Result<Client, ClientError> {
        let creds: Credentials = credentials.into();
        let setup = |e: String| ClientError::Setup(e);
        let provider = ring_provider();
        let roots = root_store(&creds.ca_certs).map_err(|e| setup(e.to_string()))?;
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| setup(e.to_string()))?;
        let verifier = Arc::new(NodeServerVerifier {
            inner,
            expected: node,
        });
        let mut crypto = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| setup(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(creds.chain, creds.key)
            .map_err(|e| setup(e.to_string()))?;
        crypto.alpn_protocols = vec![ALPN.to_vec()];
        crypto.resumption = rustls::client::Resumption::disabled();
        crypto.enable_early_data = false;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto)
            .map_err(|e| setup(e.to_string()))?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        let mut transport = quinn::TransportConfig::default();
        transport
            .keep_alive_interval(Some(Duration::from_secs(5)))
            .max_idle_timeout(Some(
                Duration::from_secs(60)
                    .try_into()
                    .expect("60 s is a valid idle timeout"),
            ));
        config.transport_config(Arc::new(transport));

        let bind: SocketAddr = if addr.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let endpoint =
            quinn::Endpoint::client(bind).map_err(|e| setup(format!("local UDP socket: {e}")))?;
        let server_name = node
            .map(node_server_name)
            .unwrap_or_else(|| "admin.tenure".into());
        let connecting = endpoint
            .connect_with(config, addr, &server_name)
            .map_err(|e| setup(format!("{addr}: {e}")))?;
        let conn = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Err(_) => {
                return Err(ClientError::TimedOut {
                    addr,
                    what: "no TLS handshake; is a node's admin endpoint listening there?".into(),
                    timeout: CONNECT_TIMEOUT,
                })
            }
            Ok(Err(e)) => return Err(connection_error(addr, e)),
            Ok(Ok(c)) => c,
        };
        let id = peer_cert(&conn)
            .and_then(|c| node_id_from_cert(&c).ok())
            .ok_or_else(|| ClientError::Handshake {
                addr,
                reason: "the endpoint presented no node certificate".into(),
            })?;
        Ok(Client {
            endpoint,
            conn,
            addr,
            node: id,
            timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// The node this client talks to (from its certificate).
    pub fn node_id(&self) -> NodeId {
        self.node
    }

    /// The endpoint's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets how long one request may take ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sends `request` and returns the node's answer.
    pub async fn request(&self, request: &Request) -> Result<Reply, ClientError> {
        let body = serde_json::to_vec(&request.to_json())
            .map_err(|e| ClientError::Setup(format!("cannot encode the request: {e}")))?;
        let response = self.raw_request(&body).await?;
        match (response.ok, response.error) {
            (Some(reply), None) => Ok(reply),
            (None, Some(reply)) => Err(ClientError::Node {
                node: self.node,
                command: request.name(),
                reply,
            }),
            _ => Err(ClientError::Protocol {
                addr: self.addr,
                reason: "the answer has neither \"ok\" nor \"error\"".into(),
            }),
        }
    }

    /// Sends raw bytes as a request and parses the answer (for tests of bad input; use
    /// [`Client::request`] otherwise).
    #[doc(hidden)]
    pub async fn request_bytes(
        &self,
        body: &[u8],
    ) -> Result<Result<Reply, ErrorReply>, ClientError> {
        let r = self.raw_request(body).await?;
        match (r.ok, r.error) {
            (Some(reply), None) => Ok(Ok(reply)),
            (None, Some(e)) => Ok(Err(e)),
            _ => Err(ClientError::Protocol {
                addr: self.addr,
                reason: "the answer has neither \"ok\" nor \"error\"".into(),
            }),
        }
    }

    async fn raw_request(&self, body: &[u8]) -> Result<Response, ClientError> {
        let addr = self.addr;
        let exchange = async {
            let (mut send, mut recv) = self
                .conn
                .open_bi()
                .await
                .map_err(|e| connection_error(addr, e))?;
            let write = async {
                send.write_all(body).await?;
                send.finish()?;
                Ok::<_, quinn::WriteError>(())
            };
            if let Err(e) = write.await {
                // A refused connection shows up here first; the reason is on the
                // connection.
                return Err(match self.conn.close_reason() {
                    Some(c) => connection_error(addr, c),
                    None => ClientError::Connection {
                        addr,
                        reason: e.to_string(),
                    },
                });
            }
            match recv.read_to_end(MAX_RESPONSE).await {
                Ok(bytes) => Ok(bytes),
                Err(quinn::ReadToEndError::TooLong) => Err(ClientError::Protocol {
                    addr,
                    reason: format!("the answer is larger than {MAX_RESPONSE} bytes"),
                }),
                Err(quinn::ReadToEndError::Read(e)) => Err(match self.conn.close_reason() {
                    Some(c) => connection_error(addr, c),
                    None => ClientError::Connection {
                        addr,
                        reason: e.to_string(),
                    },
                }),
            }
        };
        let bytes = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::TimedOut {
                addr,
                what: "the command did not finish in time; it may still take effect".into(),
                timeout: self.timeout,
            })??;
        let response: Response =
            serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol {
                addr,
                reason: format!("not a version {PROTOCOL_VERSION} answer: {e}"),
            })?;
        if response.v != PROTOCOL_VERSION {
            return Err(ClientError::Protocol {
                addr,
                reason: format!(
                    "the node answers in protocol version {}, this client speaks {PROTOCOL_VERSION}",
                    response.v
                ),
            });
        }
        Ok(response)
    }

    fn unexpected(&self, reply: Reply) -> ClientError {
        ClientError::Protocol {
            addr: self.addr,
            reason: format!("unexpected answer {reply:?}"),
        }
    }

    /// The node's view: role, term, leader, members, quorum health, lease.
    pub async fn status(&self) -> Result<Status, ClientError> {
        match self.request(&Request::Status).await? {
            Reply::Status(s) => Ok(s),
            other => Err(self.unexpected(other)),
        }
    }

    /// The replicated leadership history, oldest first.
    pub async fn history(&self) -> Result<Vec<TenureRecord>, ClientError> {
        match self.request(&Request::History).await? {
            Reply::History { records } => Ok(records),
            other => Err(self.unexpected(other)),
        }
    }

    /// Hands leadership to `to` (or the most up-to-date follower); returns the new
    /// leader. The node must be the leader.
    pub async fn transfer(&self, to: Option<NodeId>) -> Result<NodeId, ClientError> {
        match self.request(&Request::Transfer { to }).await? {
            Reply::Transferred { leader } => Ok(leader),
            other => Err(self.unexpected(other)),
        }
    }

    async fn membership(&self, request: Request) -> Result<Membership, ClientError> {
        match self.request(&request).await? {
            Reply::Membership(m) => Ok(m),
            other => Err(self.unexpected(other)),
        }
    }

    /// Drains node `id`: it never campaigns, and hands over at once if it leads.
    pub async fn drain(&self, id: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Drain { id }).await
    }

    /// Lets drained node `id` campaign again.
    pub async fn undrain(&self, id: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Undrain { id }).await
    }

    /// Adds node `id` at raft address `addr` as a learner.
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: SocketAddr,
    ) -> Result<Membership, ClientError> {
        self.membership(Request::AddLearner { id, addr }).await
    }

    /// Promotes learner `id` to voter.
    pub async fn promote(&self, id: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Promote { id }).await
    }

    /// Removes member `id`.
    pub async fn remove(&self, id: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Remove { id }).await
    }

    /// Replaces voter `old` by learner `new`.
    pub async fn replace(&self, old: NodeId, new: NodeId) -> Result<Membership, ClientError> {
        self.membership(Request::Replace { old, new }).await
    }

    /// Closes the connection, giving the close a moment to reach the node.
    pub async fn close(self) {
        self.conn.close(VarInt::from_u32(close_code::DONE), b"done");
        let _ = tokio::time::timeout(Duration::from_millis(200), self.endpoint.wait_idle()).await;
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.conn.close(VarInt::from_u32(close_code::DONE), b"done");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_with_their_version() {
        let all = vec![
            Request::Status,
            Request::History,
            Request::Transfer { to: None },
            Request::Transfer { to: Some(2) },
            Request::Drain { id: 1 },
            Request::Undrain { id: 1 },
            Request::AddLearner {
                id: 4,
                addr: "127.0.0.1:7004".parse().unwrap(),
            },
            Request::Promote { id: 4 },
            Request::Remove { id: 3 },
            Request::Replace { old: 3, new: 4 },
        ];
        for r in all {
            let bytes = serde_json::to_vec(&r.to_json()).unwrap();
            assert_eq!(Request::from_json(&bytes).unwrap(), r);
            assert!(COMMANDS.contains(&r.name()));
        }
        assert_eq!(
            Request::Transfer { to: Some(2) }.to_json(),
            serde_json::json!({"v": 1, "command": "transfer", "to": 2})
        );
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let cases: &[(&[u8], ErrorKind, &str)] = &[
            (b"{not json", ErrorKind::BadRequest, "not valid JSON"),
            (b"[1,2]", ErrorKind::BadRequest, "not a JSON object"),
            (
                br#"{"command":"status"}"#,
                ErrorKind::BadRequest,
                "no protocol version",
            ),
            (
                br#"{"v":2,"command":"status"}"#,
                ErrorKind::UnsupportedVersion,
                "version 2",
            ),
            (br#"{"v":1}"#, ErrorKind::BadRequest, "no \"command\""),
            (
                br#"{"v":1,"command":7}"#,
                ErrorKind::BadRequest,
                "not a string",
            ),
            (
                br#"{"v":1,"command":"reboot"}"#,
                ErrorKind::BadRequest,
                "unknown command \"reboot\"",
            ),
            (
                br#"{"v":1,"command":"drain"}"#,
                ErrorKind::BadRequest,
                "bad arguments for drain",
            ),
            (
                br#"{"v":1,"command":"drain","id":"x"}"#,
                ErrorKind::BadRequest,
                "bad arguments for drain",
            ),
            (
                br#"{"v":1,"command":"status","extra":1}"#,
                ErrorKind::BadRequest,
                "bad arguments for status",
            ),
            (
                br#"{"v":1,"command":"add_learner","id":4,"addr":"nowhere"}"#,
                ErrorKind::BadRequest,
                "bad arguments for add_learner",
            ),
        ];
        for (input, kind, needle) in cases {
            let e = Request::from_json(input).unwrap_err();
            assert_eq!(e.kind, *kind, "{}", String::from_utf8_lossy(input));
            assert!(
                e.message.contains(needle),
                "{}: {}",
                String::from_utf8_lossy(input),
                e.message
            );
        }
    }

    #[test]
    fn refusals_keep_their_kind_and_hint_on_the_wire() {
        let r = Response::from_result(Err(ErrorReply::not_leader(2, Some(1))));
        let text = String::from_utf8(r.encode()).unwrap();
        assert!(text.contains(r#""kind":"not_leader""#), "{text}");
        assert!(text.contains(r#""leader_hint":1"#), "{text}");
        let back: Response = serde_json::from_str(&text).unwrap();
        assert_eq!(back.error.unwrap().leader_hint, Some(1));
        // Answers carrying the membership's numeric-keyed address map read back.
        let mut m = Membership {
            voters: vec![1, 2],
            learners: vec![3],
            outgoing: vec![],
            drained: vec![2],
            addrs: Default::default(),
        };
        m.addrs.insert(1, "127.0.0.1:7001".into());
        let text =
            String::from_utf8(Response::from_result(Ok(Reply::Membership(m.clone()))).encode())
                .unwrap();
        match serde_json::from_str::<Response>(&text).unwrap().ok {
            Some(Reply::Membership(back)) => assert_eq!(back, m),
            other => panic!("{text} read back as {other:?}"),
        }
        // A kind this client does not know reads as Other.
        let e: ErrorReply = serde_json::from_str(r#"{"kind":"brand_new","message":"m"}"#).unwrap();
        assert_eq!(e.kind, ErrorKind::Other);
    }
}
