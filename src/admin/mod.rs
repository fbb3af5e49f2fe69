//! Operator controls: a node's admin endpoint and the client that talks to it.
//!
//! A worker opens the endpoint next to its raft transport, on its own port:
//! [`serve`]`(node, addr, &identity, logger)`. An operator (a person with
//! `tenure-ctl`, or a tool using [`Client`]) reaches it with an **operator
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
//!
//! # Named elections
//!
//! `elections` lists the catalog (each entry with the answering node's view of its leader
//! and term) and `leaderships` the named elections the node leads; both work on any
//! node. `create_election`, `remove_election`, `suspend_election` and `resume_election`
//! change the catalog, which only the group's leader (the root election's) does (a
//! suspension is answered once the election's own log carries it, when no lease of it
//! is held anywhere: `election_suspended`, the entry with `"suspended":true`);
//! `transfer_election` goes to the named
//! election's own leader. Elsewhere they answer [`ErrorKind::NotLeader`] with the
//! leader to ask instead:
//!
//! ```text
//! → {"v":1,"command":"create_election","name":"shard-0","affinity":[2,1],"priority":10}
//! ← {"v":1,"ok":{"election_created":{"name":"shard-0","id":1,"options":{"affinity":[2,1],"priority":10},"created_at":7}}}
//! → {"v":1,"command":"transfer_election","name":"shard-0","to":3}
//! ← {"v":1,"error":{"kind":"not_leader","message":"node 1 does not lead election \"shard-0\"; node 2 leads it","leader_hint":2}}
//! → {"v":1,"command":"remove_election","name":"nope"}
//! ← {"v":1,"error":{"kind":"unknown_election","message":"no election named \"nope\""}}
//! ```
//!
//! # Layout
//!
//! | file | holds |
//! |---|---|
//! | `protocol.rs` | [`Request`], [`Reply`], [`ErrorReply`]: the JSON messages |
//! | `server.rs` | [`serve`] and [`AdminServer`]: the endpoint a node opens |
//! | `client.rs` | [`Client`]: what an operator's tool connects with |

use std::time::Duration;

use rustls::pki_types::CertificateDer;

#[cfg(doc)]
use crate::tls::{CertKind, ClusterCa};

mod client;
mod protocol;
mod server;

pub use client::{Client, ClientError, Credentials};
pub use protocol::{
    ElectionEntry, ErrorKind, ErrorReply, Leaderships, LedElection, Reply, Request, COMMANDS,
};
pub use server::{serve, AdminServer, ServeError};

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

/// An admin connection with no packets for this long is closed, in milliseconds (the
/// client sends keep-alives, so only a vanished peer reaches it).
const IDLE_TIMEOUT_MS: u32 = 60_000;

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

/// The end-entity certificate the peer of `conn` presented.
fn peer_cert(conn: &quinn::Connection) -> Option<CertificateDer<'static>> {
    conn.peer_identity()?
        .downcast::<Vec<CertificateDer<'static>>>()
        .ok()?
        .first()
        .cloned()
}
