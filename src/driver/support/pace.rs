//! The paced wake queue (`docs/design.md`, section 12, "One queue for mass wakes"):
//! every path that can wake many quiet elections at once puts them here, and a few wake
//! a tick, taken from each peer in turn. No I/O and no driver state: the driver decides
//! what a tick may wake ([`WakeQueue::begin_tick`]) and whether a taken entry still
//! needs waking.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};

use tokio::time::Instant;

use super::wake::Wake;
use crate::election::ElectionId;
use crate::transport::NodeId;

/// Which side of an election a queued wake is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// Led here; the peer is the one whose refusal, drop or lapse queued it (this
    /// node's own id for a lapse).
    Leads,
    /// Followed here under the peer, and no longer held for it: its promise was frozen
    /// when it was queued, until the peer's last request (the value) plus the window.
    Follows(Option<Instant>),
    /// Still held for the peer, whose stream went silent: it is dropped when it wakes,
    /// unless the peer spoke again meanwhile.
    Silent,
}

/// One queued wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pending {
    pub(super) side: Side,
    pub(super) why: Wake,
}

/// Quiet elections waiting to wake, by the peer that caused it, each peer's by id.
///
/// By id within a peer, as the silent leader's wakes always were: every follower of a
/// silent leader wakes the same elections first, so each has voters awake together. By
/// peer in turn: a peer that makes thousands wake at once (a restart, a lost book, a
/// hostile member) takes one place in each round, so another peer's silence is still
/// answered within a round of the peers.
#[derive(Debug, Default)]
pub(super) struct WakeQueue {
    by_peer: BTreeMap<NodeId, BTreeMap<ElectionId, Pending>>,
    /// The peer taken from last.
    cursor: NodeId,
    /// Entries in every peer's queue.
    len: usize,
    /// Wakes this tick may still take.
    budget: usize,
    /// Wakes taken since the tick began (for the burst gauge).
    burst: usize,
}

impl WakeQueue {
    /// A tick begins: it may take `budget` wakes.
    pub(super) fn begin_tick(&mut self, budget: usize) {
        self.budget = budget;
        self.burst = 0;
    }

    /// Queues election `id`'s wake for `peer`. An election already queued for that peer
    /// keeps one entry, the latest reason, and the later of the two frozen promises.
    pub(super) fn push(&mut self, peer: NodeId, id: ElectionId, p: Pending) {
        let q = self.by_peer.entry(peer).or_default();
        match q.get_mut(&id) {
            Some(old) => {
                let side = match (old.side, p.side) {
                    (Side::Follows(a), Side::Follows(b)) => Side::Follows(a.max(b)),
                    (_, new) => new,
                };
                *old = Pending { side, why: p.why };
            }
            None => {
                q.insert(id, p);
                self.len += 1;
            }
        }
    }

    /// Election `id` closes: it leaves every peer's queue.
    pub(super) fn remove(&mut self, id: ElectionId) {
        let mut emptied = Vec::new();
        for (peer, q) in &mut self.by_peer {
            if q.remove(&id).is_some() {
                self.len -= 1;
                if q.is_empty() {
                    emptied.push(*peer);
                }
            }
        }
        for peer in emptied {
            self.by_peer.remove(&peer);
        }
    }

    /// The next entry to look at, if this tick may still wake one: the lowest id of the
    /// next peer after the last one taken from. The caller wakes it or finds it needs no
    /// waking any more; only a wake is charged ([`WakeQueue::charge`]).
    pub(super) fn next(&mut self) -> Option<(NodeId, ElectionId, Pending)> {
        if self.budget == 0 {
            return None;
        }
        let peer = self
            .by_peer
            .range((Excluded(self.cursor), Unbounded))
            .next()
            .or_else(|| self.by_peer.iter().next())
            .map(|(p, _)| *p)?;
        self.cursor = peer;
        let q = self.by_peer.get_mut(&peer)?;
        let (id, p) = q.pop_first()?;
        if q.is_empty() {
            self.by_peer.remove(&peer);
        }
        self.len -= 1;
        Some((peer, id, p))
    }

    /// A taken entry woke its election; returns the wakes taken this tick so far.
    pub(super) fn charge(&mut self) -> usize {
        self.budget = self.budget.saturating_sub(1);
        self.burst += 1;
        self.burst
    }

    /// A mass wake that bypassed the queue (only under a mutation): counted in the
    /// burst all the same, so that the gauge shows it.
    pub(super) fn bypassed(&mut self) -> usize {
        self.burst += 1;
        self.burst
    }

    /// Entries waiting.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leads(why: Wake) -> Pending {
        Pending {
            side: Side::Leads,
            why,
        }
    }

    fn drain(q: &mut WakeQueue) -> Vec<(NodeId, u32)> {
        let mut out = Vec::new();
        while let Some((peer, id, _)) = q.next() {
            q.charge();
            out.push((peer, id));
        }
        out
    }

    #[test]
    fn each_peer_takes_one_place_in_each_round_and_its_own_by_id() {
        let mut q = WakeQueue::default();
        for id in [5, 1, 3, 2, 4] {
            q.push(2, id, leads(Wake::LeaderRestarted));
        }
        q.push(4, 9, leads(Wake::LeaderSilent));
        q.push(4, 7, leads(Wake::LeaderSilent));
        assert_eq!(q.len(), 7);
        q.begin_tick(4);
        assert_eq!(drain(&mut q), [(2, 1), (4, 7), (2, 2), (4, 9)]);
        q.begin_tick(10);
        assert_eq!(drain(&mut q), [(2, 3), (2, 4), (2, 5)]);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_second_push_keeps_one_entry_with_the_later_promise() {
        let mut q = WakeQueue::default();
        let t = Instant::now();
        let later = t + std::time::Duration::from_millis(5);
        let follows = |at| Pending {
            side: Side::Follows(Some(at)),
            why: Wake::Refused,
        };
        q.push(1, 3, follows(later));
        q.push(1, 3, follows(t));
        assert_eq!(q.len(), 1);
        q.begin_tick(1);
        let (_, _, p) = q.next().expect("one entry");
        assert_eq!(p.side, Side::Follows(Some(later)));
    }

    #[test]
    fn no_budget_takes_nothing_and_a_closed_election_leaves_every_queue() {
        let mut q = WakeQueue::default();
        q.push(1, 3, leads(Wake::Unheld));
        q.push(2, 3, leads(Wake::Refused));
        q.begin_tick(0);
        assert!(q.next().is_none());
        q.remove(3);
        assert_eq!(q.len(), 0);
        q.begin_tick(5);
        assert!(q.next().is_none());
    }
}
