//! The credit path's view of the elections led here that the stream may renew
//! (`docs/design.md`, section 12, "As built": "Credit costs per election only when `σ`
//! moves"): one dense slot per offered or quiet election, with its voters and which of
//! them hold it as bits by the peer's place in the support stream's peer list.
//!
//! An ack is then one pass over a `Vec` (no map lookup and no walk of the peers' held
//! sets per election), `σ` once per class, and an election's own state (its group) is
//! looked at only when its `σ` moved past what it was last credited with: once per round,
//! not once per ack. The slots are a cache of what the books (`book.rs`) and the groups
//! say: debug builds check every ack against them.

use std::collections::HashMap;

use crate::clock::Stamp;
use crate::election::ElectionId;
use crate::transport::NodeId;

/// One election led here that the stream may renew.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) id: ElectionId,
    /// The term it was offered in.
    pub(super) term: u64,
    /// Its voters among the peers (bits by place), whether this node votes, and how many
    /// voters it has.
    pub(super) voters: u64,
    pub(super) member: bool,
    pub(super) count: usize,
    /// The voters (among the peers) that hold it, as their acks say.
    pub(super) holders: u64,
    /// The last `σ` it was credited with (nothing newer to give: skipped).
    pub(super) credited: Option<Stamp>,
}

/// The slots, dense, with an index by election.
#[derive(Debug, Default)]
pub(super) struct Slots {
    slots: Vec<Slot>,
    at: HashMap<ElectionId, usize>,
    /// The peer list the bits refer to (the support stream's peers, in order).
    peers: Vec<NodeId>,
}

impl Slots {
    /// The peer list the bits are by; `false` if it differs from `peers` (then every
    /// slot's bits must be computed again: [`Slots::rebuild`]).
    pub(super) fn same_peers(&self, peers: &[NodeId]) -> bool {
        self.peers == peers
    }

    /// The place of `peer` in the peer list, if it is there and fits the bits.
    pub(super) fn place(&self, peer: NodeId) -> Option<usize> {
        self.peers
            .iter()
            .position(|p| *p == peer)
            .filter(|i| *i < 64)
    }

    /// Starts over with a new peer list: `bits(id)` gives each slot's voters and holders
    /// as bits of the new list.
    pub(super) fn rebuild(
        &mut self,
        peers: &[NodeId],
        mut bits: impl FnMut(ElectionId) -> Option<(u64, u64, bool, usize)>,
    ) {
        self.peers = peers.to_vec();
        let old = std::mem::take(&mut self.slots);
        self.at.clear();
        for s in old {
            if let Some((voters, holders, member, count)) = bits(s.id) {
                self.insert(Slot {
                    voters,
                    holders,
                    member,
                    count,
                    credited: None,
                    ..s
                });
            }
        }
    }

    /// Adds (or replaces) election `slot.id`'s slot.
    pub(super) fn insert(&mut self, slot: Slot) {
        match self.at.get(&slot.id) {
            Some(&i) => self.slots[i] = slot,
            None => {
                self.at.insert(slot.id, self.slots.len());
                self.slots.push(slot);
            }
        }
    }

    /// Election `id` has no slot any more (it woke, or closes).
    pub(super) fn remove(&mut self, id: ElectionId) {
        let Some(i) = self.at.remove(&id) else {
            return;
        };
        self.slots.swap_remove(i);
        if let Some(moved) = self.slots.get(i) {
            self.at.insert(moved.id, i);
        }
    }

    pub(super) fn get(&self, id: ElectionId) -> Option<&Slot> {
        self.at.get(&id).map(|&i| &self.slots[i])
    }

    /// The peer at `place` holds election `id` now (`true`) or not any more.
    pub(super) fn set_holder(&mut self, id: ElectionId, place: usize, holds: bool) {
        if let Some(&i) = self.at.get(&id) {
            let s = &mut self.slots[i];
            if holds {
                s.holders |= (1 << place) & s.voters;
            } else {
                s.holders &= !(1 << place);
            }
        }
    }

    /// Every slot, for one ack's pass.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.slots.iter_mut()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(id: ElectionId) -> Slot {
        Slot {
            id,
            term: 1,
            voters: 0b1111,
            member: true,
            count: 5,
            holders: 0,
            credited: None,
        }
    }

    #[test]
    fn removing_a_slot_keeps_the_index_of_the_one_moved_into_its_place() {
        let mut s = Slots::default();
        for id in 1..=3 {
            s.insert(slot(id));
        }
        s.remove(1);
        assert_eq!(s.len(), 2);
        s.set_holder(3, 2, true);
        assert_eq!(s.get(3).map(|x| x.holders), Some(0b100));
        assert!(s.get(1).is_none());
        s.remove(3);
        s.remove(3);
        assert_eq!(s.len(), 1);
        assert_eq!(s.get(2).map(|x| x.id), Some(2));
    }

    #[test]
    fn only_voters_count_as_holders() {
        let mut s = Slots::default();
        s.insert(Slot {
            voters: 0b0101,
            ..slot(7)
        });
        s.set_holder(7, 1, true);
        s.set_holder(7, 2, true);
        assert_eq!(s.get(7).map(|x| x.holders), Some(0b0100));
        s.set_holder(7, 2, false);
        assert_eq!(s.get(7).map(|x| x.holders), Some(0));
    }

    #[test]
    fn a_new_peer_list_recomputes_every_slot_and_drops_the_unknown() {
        let mut s = Slots::default();
        s.rebuild(&[2, 3], |_| None);
        s.insert(slot(1));
        s.insert(slot(2));
        assert!(s.same_peers(&[2, 3]));
        assert_eq!(s.place(3), Some(1));
        s.rebuild(&[2, 3, 4], |id| {
            (id == 2).then_some((0b111, 0b001, true, 4))
        });
        assert!(!s.same_peers(&[2, 3]));
        assert!(s.get(1).is_none());
        assert_eq!(
            s.get(2).map(|x| (x.voters, x.holders)),
            Some((0b111, 0b001))
        );
    }
}
