//! Moving raft-rs [`Message`]s between nodes.
//!
//! * [`quic`]: the real transport. QUIC (quinn) with mutual TLS: every node holds a
//!   certificate issued by the cluster CA that names it by node id ([`crate::tls`], beside
//!   the transport since config, node and admin use it too; `tenure::transport::tls`
//!   still names it). Messages travel as length-prefixed protobuf frames with a size
//!   limit ([`frame`]).
//! * [`mem`]: an in-process network for tests, with the same fault hooks.
//!
//! The driver sees only the [`Transport`] trait (to send) and a channel of [`Inbound`]
//! items (to receive). Every transport carries the root election's messages
//! ([`Transport::send`], [`Inbound::Message`]) and named elections' (ids ≥ 1:
//! [`Transport::send_election`], [`Inbound::Election`]) the same way, over the same
//! connection.
//!
//! # Layout
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`Transport`], [`Inbound`], [`Faults`], [`TransportStats`] |
//! | `hello.rs` | [`Hello`]: what a node says first on every connection |
//! | `addr.rs` | [`PeerAddr`]: an IP address or a name and a port; [`Resolve`]: how names are resolved |
//! | `frame/mod.rs` | frames (root frames and named elections' frames): the limits, encoding, decoding, reading them from a stream |
//! | `frame/scan.rs` | the wire scan: entries and unknown fields counted before decoding |
//! | `quic/` | the QUIC transport, a file per part (see [`quic`]) |
//! | `inbox.rs` | [`Inbox`]: what a transport delivers to its node, one [`Inbound`] at a time |
//! | `mem.rs` | [`mem::MemNetwork`]: the in-process network |
//! | `log_limit.rs` | warnings rate-limited per remote address |

mod addr;
pub mod frame;
pub mod hello;
mod inbox;
pub(crate) mod log_limit;
pub mod mem;
pub mod quic;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use raft::eraftpb::Message;

pub use addr::{PeerAddr, PeerAddrError, Resolve, Resolving, SystemResolver, ToPeerAddr};
pub use hello::{Floor, Hello, Standing};
pub use inbox::{DeliverError, Inbox, InboxSender};

/// The election id the support stream's messages carry (`docs/design.md`, section 12):
/// above every id an election can have (`MAX_ELECTION_ID`), so no election's messages are
/// mistaken for it. The transport sends them, as the root's, in a peer's urgent lane.
pub(crate) const SUPPORT_STREAM: u32 = u32::MAX;
/// The TLS layer's old home: [`crate::tls`] is where it lives now.
pub use crate::tls;

pub use crate::NodeId;

/// What a transport hands the driver.
#[derive(Debug)]
pub enum Inbound {
    /// A raft message of the root election (id 0) from an authenticated peer (its `from`
    /// matched the peer's certificate).
    Message(Message),
    /// A raft message of a named election from an authenticated peer (its `from` matched
    /// the peer's certificate), with the election id the sender gave
    /// ([`Transport::send_election`]); never 0 (the root's messages are
    /// [`Inbound::Message`]). Whether this node knows the id is the driver's to judge.
    Election {
        /// The election, ≥ 1.
        election: u32,
        /// The message.
        message: Message,
    },
    /// Sending to this peer failed (no connection, connection lost): the driver tells
    /// raft-rs with `report_unreachable` so it slows replication to it.
    Unreachable(NodeId),
    /// An authenticated peer said hello (once per connection, before its messages).
    Hello {
        /// The peer (named by its certificate).
        from: NodeId,
        /// What it said.
        hello: Hello,
    },
}

impl Inbound {
    /// The item that delivers `message` of election `election`: [`Inbound::Message`] for
    /// the root (election 0), [`Inbound::Election`] for any other.
    pub fn of_election(election: u32, message: Message) -> Inbound {
        match election {
            0 => Inbound::Message(message),
            election => Inbound::Election { election, message },
        }
    }

    /// Whether the item travels the urgent lane: the root election's messages, the
    /// support stream's, and what the transport says of its peers. A node serves these
    /// before named elections' messages, and a backlog of those never crowds them out:
    /// the stream renews every quiet lease, so its acks must not wait behind a burst of
    /// campaigns.
    pub(crate) fn is_urgent(&self) -> bool {
        match self {
            Inbound::Election { election, .. } => *election == SUPPORT_STREAM,
            Inbound::Message(_) | Inbound::Unreachable(_) | Inbound::Hello { .. } => true,
        }
    }
}

/// The sending half of a transport, as the driver uses it.
pub trait Transport: Send + Sync + 'static {
    /// Queues `msg` for `msg.to`. Never blocks and never fails: when the peer's queue is
    /// full, or the peer is unknown, the message is dropped and counted (raft-rs
    /// retransmits what matters).
    fn send(&self, msg: Message);

    /// Queues `msg` of election `election` for `msg.to`, on the same connection and in
    /// the same order as [`send`](Transport::send)'s messages; the peer's transport
    /// delivers it as [`Inbound::Election`] with this id. Like `send`, never blocks and
    /// never fails: dropped and counted when the peer's queue is full or the peer is
    /// unknown. Election 0 is the root: the same as `send(msg)`.
    ///
    /// The default implementation sends election 0 with `send` and drops every other
    /// message without counting it, so that a transport written before named elections
    /// keeps compiling; the transports of this crate implement it.
    fn send_election(&self, election: u32, msg: Message) {
        if election == 0 {
            self.send(msg);
        }
    }

    /// Counters of what happened so far.
    fn stats(&self) -> TransportStatsSnapshot;

    /// The fault-injection hooks of this endpoint (used by tests).
    fn faults(&self) -> &Faults;

    /// Stops sending and receiving. Idempotent.
    fn close(&self);

    /// What this node tells peers that it connects to from now on (see [`hello`]). The
    /// node sets it when it starts and when its standing changes; peers of another group
    /// are refused once it names a group.
    fn set_hello(&self, hello: Hello);

    /// The founding nonces this node recorded for its first members when it founded
    /// (`docs/design.md`, section 6): from now on a member's hello to peer `p` carries
    /// `quotes[p]` ([`Hello::to_peer`]), so that a first member still founding learns
    /// that the group was founded counting on its very hello. Set before the first
    /// member hello. The default ignores them (such a transport's slow founders stop
    /// with lost data instead of founding: safe, not live).
    fn set_quotes(&self, quotes: std::collections::BTreeMap<NodeId, u128>) {
        let _ = quotes;
    }

    /// The group's membership changed: reach peer `id` at `addr` from now on (a new
    /// member, or one that moved), or forget it (`None`: it left the group). Transports
    /// without addresses ignore it.
    fn set_peer(&self, id: NodeId, addr: Option<PeerAddr>) {
        let _ = (id, addr);
    }

    /// The nodes the group removed (`docs/design.md`, section 6, "Shutting out a
    /// node"): their certificates are refused from now on, at the handshake, however
    /// valid under the CA; their ids are never admitted again. Connections open now are
    /// left to [`set_peer`](Transport::set_peer). Transports without certificates
    /// ignore it.
    fn set_removed(&self, removed: &std::collections::BTreeSet<NodeId>) {
        let _ = removed;
    }
}

/// Test hooks to cut links of one endpoint: messages to a blocked peer are dropped
/// instead of sent, messages from a blocked peer are dropped on arrival. Cheap to
/// check; off by default.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    inner: Arc<RwLock<FaultState>>,
}

#[derive(Debug, Default)]
struct FaultState {
    block_out: HashSet<NodeId>,
    block_in: HashSet<NodeId>,
}

impl Faults {
    /// Drops every message this endpoint sends to `peer` from now on.
    pub fn block_outbound(&self, peer: NodeId) {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .block_out
            .insert(peer);
    }
    /// Drops every message from `peer` that reaches this endpoint from now on.
    pub fn block_inbound(&self, peer: NodeId) {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .block_in
            .insert(peer);
    }
    /// Cuts both directions between this endpoint and `peer`.
    pub fn isolate_from(&self, peer: NodeId) {
        self.block_outbound(peer);
        self.block_inbound(peer);
    }
    /// Restores every link of this endpoint.
    pub fn heal(&self) {
        let mut s = self
            .inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.block_out.clear();
        s.block_in.clear();
    }
    /// True when messages to `peer` must be dropped.
    pub fn outbound_blocked(&self, peer: NodeId) -> bool {
        let s = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !s.block_out.is_empty() && s.block_out.contains(&peer)
    }
    /// True when messages from `peer` must be dropped.
    pub fn inbound_blocked(&self, peer: NodeId) -> bool {
        let s = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !s.block_in.is_empty() && s.block_in.contains(&peer)
    }
}

/// Counters shared by a transport's tasks.
#[derive(Debug, Default)]
pub struct TransportStats {
    /// Messages handed to a connection.
    pub sent: AtomicU64,
    /// Bytes of the frames of those messages (length prefixes included; QUIC, UDP and
    /// IP overhead not).
    pub bytes_sent: AtomicU64,
    /// Messages delivered to the driver.
    pub received: AtomicU64,
    /// Messages of named elections (not the root) among `sent`.
    pub election_sent: AtomicU64,
    /// Messages of named elections (not the root) among `received`.
    pub election_received: AtomicU64,
    /// Messages dropped because a peer's outbound queue was full.
    pub dropped_queue_full: AtomicU64,
    /// Messages dropped because the destination is not a known peer.
    pub dropped_unknown_peer: AtomicU64,
    /// Messages dropped by fault injection ([`Faults`]).
    pub dropped_fault: AtomicU64,
    /// Outbound messages discarded because the peer was unreachable: while a peer is
    /// disconnected only the most recent few are kept for the next connection (raft-rs
    /// retransmits; old heartbeats are useless).
    pub dropped_disconnected: AtomicU64,
    /// Outbound messages dropped because their frame would exceed the frame limit.
    pub dropped_too_large: AtomicU64,
    /// Inbound messages dropped because the driver's inbound channel was full.
    pub dropped_inbound_full: AtomicU64,
    /// Inbound messages dropped because their peer already had its share of the
    /// driver's channel waiting (the channel's depth over the peers: one peer's flood
    /// never crowds out the others' messages).
    pub dropped_inbound_share: AtomicU64,
    /// Inbound messages dropped because `from` differed from the sender's certificate.
    pub from_mismatch: AtomicU64,
    /// Frames over the size limit (the stream was closed).
    pub frames_oversized: AtomicU64,
    /// Frames that did not decode as a raft message (the stream was closed).
    pub frames_malformed: AtomicU64,
    /// Frames with more `entries` than the limit, refused before decoding (the
    /// connection was closed).
    pub frames_too_many_entries: AtomicU64,
    /// Frames whose payload did not arrive within the frame deadline (the connection was
    /// closed).
    pub frames_timed_out: AtomicU64,
    /// Frames that had to wait for the inbound byte budget before being read.
    pub frames_waited_for_budget: AtomicU64,
    /// The most bytes of the inbound budget ever reserved at once (frames being read,
    /// decoded, or waiting for the driver). Not a counter: a high-water mark.
    pub budget_peak_bytes: AtomicU64,
    /// Incoming connections refused because their peer already had as many connections
    /// as allowed (also counted in `connections_refused`).
    pub connections_over_limit: AtomicU64,
    /// Incoming connections refused (TLS failure, unknown or invalid identity, too many
    /// connections of one peer).
    pub connections_refused: AtomicU64,
    /// Outbound connections established (first connect and every reconnect).
    pub connects: AtomicU64,
    /// Outbound connection attempts that failed.
    pub connect_failures: AtomicU64,
}

impl TransportStats {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> TransportStatsSnapshot {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransportStatsSnapshot {
            sent: l(&self.sent),
            bytes_sent: l(&self.bytes_sent),
            received: l(&self.received),
            election_sent: l(&self.election_sent),
            election_received: l(&self.election_received),
            dropped_queue_full: l(&self.dropped_queue_full),
            dropped_unknown_peer: l(&self.dropped_unknown_peer),
            dropped_fault: l(&self.dropped_fault),
            dropped_disconnected: l(&self.dropped_disconnected),
            dropped_too_large: l(&self.dropped_too_large),
            dropped_inbound_full: l(&self.dropped_inbound_full),
            dropped_inbound_share: l(&self.dropped_inbound_share),
            from_mismatch: l(&self.from_mismatch),
            frames_oversized: l(&self.frames_oversized),
            frames_malformed: l(&self.frames_malformed),
            frames_too_many_entries: l(&self.frames_too_many_entries),
            frames_timed_out: l(&self.frames_timed_out),
            frames_waited_for_budget: l(&self.frames_waited_for_budget),
            budget_peak_bytes: l(&self.budget_peak_bytes),
            connections_over_limit: l(&self.connections_over_limit),
            connections_refused: l(&self.connections_refused),
            connects: l(&self.connects),
            connect_failures: l(&self.connect_failures),
        }
    }
}

/// A point-in-time copy of [`TransportStats`].
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStatsSnapshot {
    pub sent: u64,
    pub bytes_sent: u64,
    pub received: u64,
    pub election_sent: u64,
    pub election_received: u64,
    pub dropped_queue_full: u64,
    pub dropped_unknown_peer: u64,
    pub dropped_fault: u64,
    pub dropped_disconnected: u64,
    pub dropped_too_large: u64,
    pub dropped_inbound_full: u64,
    pub dropped_inbound_share: u64,
    pub from_mismatch: u64,
    pub frames_oversized: u64,
    pub frames_malformed: u64,
    pub frames_too_many_entries: u64,
    pub frames_timed_out: u64,
    pub frames_waited_for_budget: u64,
    pub budget_peak_bytes: u64,
    pub connections_over_limit: u64,
    pub connections_refused: u64,
    pub connects: u64,
    pub connect_failures: u64,
}
