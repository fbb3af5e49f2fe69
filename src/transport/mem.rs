//! An in-process network for tests and simulation.
//!
//! [`MemNetwork::endpoint`] registers a node and returns its [`MemTransport`] and the
//! receiver of its [`Inbound`] items, as
//! [`QuicTransport::start`](super::quic::QuicTransport::start) does. Delivery is
//! synchronous: `send` puts the message straight into the destination's inbound channel,
//! so no runtime is needed and a simulation stays deterministic.
//!
//! The semantics follow the QUIC transport:
//!
//! * unknown destination (never registered in this network, or the sender itself) →
//!   dropped, `dropped_unknown_peer`;
//! * `faults.outbound_blocked(to)` on the sender → dropped, sender's `dropped_fault`;
//! * destination down (its endpoint was closed or dropped: a crashed node) → dropped,
//!   sender's `dropped_disconnected`, and the sender's driver gets
//!   [`Inbound::Unreachable`] once per down episode of that peer;
//! * `from` not the sender's id → dropped, destination's `from_mismatch` (what the
//!   certificate check does over QUIC);
//! * `faults.inbound_blocked(from)` on the destination → dropped, destination's
//!   `dropped_fault`;
//! * destination's inbound channel full → dropped, destination's `dropped_inbound_full`.
//!
//! A named election's message ([`Transport::send_election`]) goes the same way and
//! arrives as [`Inbound::Election`] with the sender's id (counted also in
//! `election_sent` and `election_received`); the root's arrive as [`Inbound::Message`].
//!
//! Hellos ([`Transport::set_hello`]) reach every endpoint that is up when they are set,
//! and a new endpoint hears the latest hello of every node that is up; a member's hello
//! to each peer quotes the nonce set for that peer ([`Transport::set_quotes`]).
//!
//! A crash is `close()` on the endpoint (or dropping it); `network.endpoint(id)` again
//! registers a fresh endpoint for the same id (a restart), which replaces any endpoint
//! of that id still open.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use raft::eraftpb::Message;
use tokio::sync::mpsc::{self, error::TrySendError};

use super::{
    Faults, Hello, Inbound, Inbox, NodeId, Transport, TransportStats, TransportStatsSnapshot,
};

/// The default capacity of each endpoint's inbound channel.
pub const DEFAULT_INBOUND_DEPTH: usize = 1024;

/// An in-process network: a registry of endpoints by node id. Cheap to clone (shared).
#[derive(Clone)]
pub struct MemNetwork {
    state: Arc<Mutex<NetState>>,
}

struct NetState {
    inbound_depth: usize,
    nodes: HashMap<NodeId, Slot>,
}

/// One node id's place in the network. `generation` counts registrations: an endpoint
/// whose generation is not the slot's is stale (closed or replaced).
struct Slot {
    generation: u64,
    up: Option<Registered>,
}

struct Registered {
    inbound: mpsc::Sender<Inbound>,
    stats: Arc<TransportStats>,
    faults: Faults,
    /// What the node tells peers (as a QUIC connection's first bytes do).
    hello: Option<Hello>,
    /// The founding nonces a member's hello quotes, per peer ([`Transport::set_quotes`]).
    quotes: BTreeMap<NodeId, u128>,
}

impl Default for MemNetwork {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        let mut up: Vec<NodeId> = state
            .nodes
            .iter()
            .filter(|(_, s)| s.up.is_some())
            .map(|(id, _)| *id)
            .collect();
        up.sort_unstable();
        f.debug_struct("MemNetwork").field("up", &up).finish()
    }
}

impl MemNetwork {
    /// An empty network; inbound channels hold [`DEFAULT_INBOUND_DEPTH`] items.
    pub fn new() -> Self {
        Self::with_inbound_depth(DEFAULT_INBOUND_DEPTH)
    }

    /// An empty network whose endpoints' inbound channels hold `depth` items (at least 1).
    pub fn with_inbound_depth(depth: usize) -> Self {
        MemNetwork {
            state: Arc::new(Mutex::new(NetState {
                inbound_depth: depth.max(1),
                nodes: HashMap::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, NetState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers node `id` (again, after a crash) and returns its transport and inbound
    /// receiver. An endpoint of the same id that is still open is replaced: it stops
    /// sending and receiving.
    pub fn endpoint(&self, id: NodeId) -> (MemTransport, Inbox) {
        let mut state = self.lock();
        let (tx, rx) = mpsc::channel(state.inbound_depth);
        // A new endpoint "connects" to every node that is up and hears its hello.
        for (peer, slot) in &state.nodes {
            let Some(up) = slot.up.as_ref().filter(|_| *peer != id) else {
                continue;
            };
            if let Some(hello) = up.hello {
                let hello = hello.to_peer(id, &up.quotes);
                let _ = tx.try_send(Inbound::Hello { from: *peer, hello });
            }
        }
        let stats = Arc::new(TransportStats::default());
        let faults = Faults::default();
        let slot = state.nodes.entry(id).or_insert(Slot {
            generation: 0,
            up: None,
        });
        slot.generation += 1;
        slot.up = Some(Registered {
            inbound: tx.clone(),
            stats: stats.clone(),
            faults: faults.clone(),
            hello: None,
            quotes: BTreeMap::new(),
        });
        let transport = MemTransport {
            id,
            generation: slot.generation,
            net: self.clone(),
            stats,
            faults,
            reported: Mutex::new(HashMap::new()),
        };
        (transport, Inbox::from_receiver(rx))
    }

    /// True while node `id` has an open endpoint.
    pub fn is_up(&self, id: NodeId) -> bool {
        self.lock().nodes.get(&id).is_some_and(|s| s.up.is_some())
    }
}

/// One node's endpoint on a [`MemNetwork`].
pub struct MemTransport {
    id: NodeId,
    generation: u64,
    net: MemNetwork,
    stats: Arc<TransportStats>,
    faults: Faults,
    /// Per peer, the down episode (the peer's slot generation) already reported as
    /// unreachable, so a dead peer is reported once, not once per message.
    reported: Mutex<HashMap<NodeId, u64>>,
}

impl fmt::Debug for MemTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemTransport")
            .field("id", &self.id)
            .field("generation", &self.generation)
            .finish()
    }
}

impl MemTransport {
    /// The node id of this endpoint.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Reports `peer` unreachable to our own driver, once per down episode.
    fn report_unreachable(&self, state: &NetState, peer: NodeId, episode: u64) {
        let mut reported = self
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if reported.get(&peer) == Some(&episode) {
            return;
        }
        reported.insert(peer, episode);
        let Some(me) = state.nodes.get(&self.id).and_then(|s| s.up.as_ref()) else {
            return;
        };
        if let Err(TrySendError::Full(_)) = me.inbound.try_send(Inbound::Unreachable(peer)) {
            TransportStats::bump(&self.stats.dropped_inbound_full);
        }
    }
}

impl Transport for MemTransport {
    fn send(&self, msg: Message) {
        self.send_election(0, msg);
    }

    fn send_election(&self, election: u32, msg: Message) {
        let state = self.net.lock();
        let mine = state.nodes.get(&self.id);
        if mine.is_none_or(|s| s.generation != self.generation || s.up.is_none()) {
            return; // closed or replaced: a crashed node sends nothing
        }
        let to = msg.to;
        let Some(slot) = state.nodes.get(&to).filter(|_| to != self.id) else {
            TransportStats::bump(&self.stats.dropped_unknown_peer);
            return;
        };
        if self.faults.outbound_blocked(to) {
            TransportStats::bump(&self.stats.dropped_fault);
            return;
        }
        let Some(dest) = slot.up.as_ref() else {
            TransportStats::bump(&self.stats.dropped_disconnected);
            self.report_unreachable(&state, to, slot.generation);
            return;
        };
        TransportStats::bump(&self.stats.sent);
        if election != 0 {
            TransportStats::bump(&self.stats.election_sent);
        }
        if msg.from != self.id {
            TransportStats::bump(&dest.stats.from_mismatch);
            return;
        }
        if dest.faults.inbound_blocked(self.id) {
            TransportStats::bump(&dest.stats.dropped_fault);
            return;
        }
        match dest.inbound.try_send(Inbound::of_election(election, msg)) {
            Ok(()) => {
                TransportStats::bump(&dest.stats.received);
                if election != 0 {
                    TransportStats::bump(&dest.stats.election_received);
                }
            }
            Err(TrySendError::Full(_)) => TransportStats::bump(&dest.stats.dropped_inbound_full),
            // The receiver was dropped: the node is as good as down.
            Err(TrySendError::Closed(_)) => {
                TransportStats::bump(&self.stats.dropped_disconnected);
                self.report_unreachable(&state, to, slot.generation);
            }
        }
    }

    fn stats(&self) -> TransportStatsSnapshot {
        self.stats.snapshot()
    }

    fn faults(&self) -> &Faults {
        &self.faults
    }

    fn set_hello(&self, hello: Hello) {
        let mut state = self.net.lock();
        let quotes = match state.nodes.get_mut(&self.id) {
            Some(slot) if slot.generation == self.generation => match slot.up.as_mut() {
                Some(me) => {
                    me.hello = Some(hello);
                    me.quotes.clone()
                }
                None => return,
            },
            _ => return,
        };
        for (peer, slot) in &state.nodes {
            let Some(dest) = slot.up.as_ref().filter(|_| *peer != self.id) else {
                continue;
            };
            if self.faults.outbound_blocked(*peer) || dest.faults.inbound_blocked(self.id) {
                continue;
            }
            let _ = dest.inbound.try_send(Inbound::Hello {
                from: self.id,
                hello: hello.to_peer(*peer, &quotes),
            });
        }
    }

    fn set_quotes(&self, quotes: BTreeMap<NodeId, u128>) {
        let mut state = self.net.lock();
        if let Some(slot) = state.nodes.get_mut(&self.id) {
            if slot.generation == self.generation {
                if let Some(me) = slot.up.as_mut() {
                    me.quotes = quotes;
                }
            }
        }
    }

    fn close(&self) {
        let mut state = self.net.lock();
        if let Some(slot) = state.nodes.get_mut(&self.id) {
            if slot.generation == self.generation {
                slot.up = None;
            }
        }
    }
}

impl Drop for MemTransport {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(from: NodeId, to: NodeId, term: u64) -> Message {
        Message {
            from,
            to,
            term,
            ..Default::default()
        }
    }

    fn next_message(rx: &mut Inbox) -> Option<Message> {
        match rx.try_recv() {
            Some(Inbound::Message(m)) => Some(m),
            _ => None,
        }
    }

    #[test]
    fn delivers_between_endpoints_and_counts() {
        let net = MemNetwork::new();
        let (a, mut ra) = net.endpoint(1);
        let (b, mut rb) = net.endpoint(2);
        a.send(msg(1, 2, 5));
        b.send(msg(2, 1, 6));
        assert_eq!(next_message(&mut rb).map(|m| m.term), Some(5));
        assert_eq!(next_message(&mut ra).map(|m| m.term), Some(6));
        assert_eq!(a.stats().sent, 1);
        assert_eq!(a.stats().received, 1);
    }

    #[test]
    fn unknown_peer_forged_sender_and_faults_are_dropped_and_counted() {
        let net = MemNetwork::new();
        let (a, _ra) = net.endpoint(1);
        let (b, mut rb) = net.endpoint(2);
        a.send(msg(1, 9, 1));
        a.send(msg(1, 1, 1));
        assert_eq!(a.stats().dropped_unknown_peer, 2);
        a.send(msg(3, 2, 1));
        assert_eq!(b.stats().from_mismatch, 1);
        a.faults().block_outbound(2);
        a.send(msg(1, 2, 1));
        assert_eq!(a.stats().dropped_fault, 1);
        a.faults().heal();
        b.faults().block_inbound(1);
        a.send(msg(1, 2, 1));
        assert_eq!(b.stats().dropped_fault, 1);
        assert!(rb.try_recv().is_none());
    }

    #[test]
    fn crashed_peer_is_reported_unreachable_once_per_episode_and_restart_delivers() {
        let net = MemNetwork::new();
        let (a, mut ra) = net.endpoint(1);
        let (b, _rb) = net.endpoint(2);
        b.close();
        b.close(); // idempotent
        assert!(!net.is_up(2));
        a.send(msg(1, 2, 1));
        a.send(msg(1, 2, 2));
        assert!(matches!(ra.try_recv(), Some(Inbound::Unreachable(2))));
        assert!(ra.try_recv().is_none(), "one report per episode");
        assert_eq!(a.stats().dropped_disconnected, 2);

        let (_b2, mut rb2) = net.endpoint(2);
        a.send(msg(1, 2, 3));
        assert_eq!(next_message(&mut rb2).map(|m| m.term), Some(3));
        // The stale endpoint neither sends nor takes the new one down.
        b.send(msg(2, 1, 9));
        drop(b);
        assert!(net.is_up(2));
        assert!(ra.try_recv().is_none());
    }

    #[test]
    fn election_messages_arrive_with_their_id_and_root_ones_as_messages() {
        let net = MemNetwork::new();
        let (a, _ra) = net.endpoint(1);
        let (b, mut rb) = net.endpoint(2);
        let sent: Vec<(u32, u64)> = vec![(0, 1), (7, 2), (1, 3), (0, 4), (u32::MAX, 5), (7, 6)];
        for &(e, term) in &sent {
            if e == 0 && term == 4 {
                a.send(msg(1, 2, term)); // `send` and `send_election(0, ..)` are the same
            } else {
                a.send_election(e, msg(1, 2, term));
            }
        }
        let mut got = Vec::new();
        while let Some(item) = rb.try_recv() {
            match item {
                Inbound::Message(m) => got.push((0, m.term)),
                Inbound::Election { election, message } => {
                    assert_ne!(election, 0, "the root travels as Inbound::Message");
                    got.push((election, message.term));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(got, sent, "every message, in order, with its election");
        assert_eq!((a.stats().sent, a.stats().election_sent), (6, 4));
        assert_eq!((b.stats().received, b.stats().election_received), (6, 4));
    }

    #[test]
    fn election_messages_meet_the_same_checks_as_root_ones() {
        let net = MemNetwork::with_inbound_depth(1);
        let (a, _ra) = net.endpoint(1);
        let (b, mut rb) = net.endpoint(2);
        a.send_election(3, msg(1, 9, 1));
        assert_eq!(a.stats().dropped_unknown_peer, 1);
        a.send_election(3, msg(3, 2, 1));
        assert_eq!(b.stats().from_mismatch, 1);
        a.faults().block_outbound(2);
        a.send_election(3, msg(1, 2, 1));
        assert_eq!(a.stats().dropped_fault, 1);
        a.faults().heal();
        b.faults().block_inbound(1);
        a.send_election(3, msg(1, 2, 1));
        assert_eq!(b.stats().dropped_fault, 1);
        b.faults().heal();
        a.send_election(3, msg(1, 2, 1));
        a.send_election(3, msg(1, 2, 2));
        assert_eq!(b.stats().dropped_inbound_full, 1);
        assert!(matches!(
            rb.try_recv(),
            Some(Inbound::Election { election: 3, message }) if message.term == 1
        ));
        assert!(rb.try_recv().is_none());
    }

    #[test]
    fn full_inbound_channel_drops_instead_of_blocking() {
        let net = MemNetwork::with_inbound_depth(2);
        let (a, _ra) = net.endpoint(1);
        let (b, _rb) = net.endpoint(2);
        for t in 0..5 {
            a.send(msg(1, 2, t));
        }
        assert_eq!(b.stats().received, 2);
        assert_eq!(b.stats().dropped_inbound_full, 3);
    }
}
