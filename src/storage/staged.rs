//! [`Staged`]: a store as raft-rs must see it under an asynchronous Ready
//! (`docs/design.md`, section 15, "The driver will not wait for the disk"): what is
//! written, plus what is *staged*, handed to the writer and not yet durable.
//!
//! raft-rs 0.7's `advance_append_async` requires that a Ready's entries, hard state and
//! snapshot can be read from the `Storage` before the call, durable or not. `Staged` wraps
//! any [`RaftStore`] with an overlay of the batches in flight, by sequence number:
//!
//! * the entries from the first index whose stored copy may be missing or stale (`from`)
//!   up to the last, each with the batch that staged it. A batch's entries replace the
//!   overlay's from their first index on (a conflicting suffix), so the overlay always
//!   holds exactly `[from, last]`, and what lies below `from` is in the store already;
//! * the hard state, the conf state and a snapshot (with its data), each with its batch.
//!
//! [`Staged::durable`] drops what the batches up to a sequence number staged, once the
//! writer reports them written (batches complete in order: one writer thread). Reads
//! look at the overlay first, then at the store, which the batches in flight do not
//! touch below `from`. Nothing here writes: the batch itself goes to the store's
//! [`RaftStore::write_all`] on the writer thread.
//!
//! Its user is the driver's Ready pass (`src/driver/ready.rs`): each group's `RawNode`
//! reads through one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use raft::prelude::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage};

use super::model::SizeLimit;
use super::{RaftStore, ReadyWrite};

/// A store and the overlay of its batches in flight. Clones share the overlay.
#[derive(Clone)]
pub(crate) struct Staged<S> {
    store: S,
    overlay: Arc<Mutex<Overlay>>,
}

/// What the batches in flight staged, each part with its batch's sequence number.
#[derive(Debug, Default)]
struct Overlay {
    /// The first index whose stored copy may be missing or stale; `None`: the store's
    /// log is the log.
    from: Option<u64>,
    /// The entries `[from, last]`, in order.
    entries: VecDeque<(u64, Entry)>,
    hard_state: Option<(u64, HardState)>,
    conf_state: Option<(u64, ConfState)>,
    snapshot: Option<(u64, Snapshot)>,
}

impl<S: RaftStore> Staged<S> {
    /// `store`, with nothing in flight.
    pub(crate) fn new(store: S) -> Self {
        Staged {
            store,
            overlay: Arc::new(Mutex::new(Overlay::default())),
        }
    }

    /// The store underneath.
    #[cfg(test)]
    pub(crate) fn store(&self) -> &S {
        &self.store
    }

    fn overlay(&self) -> MutexGuard<'_, Overlay> {
        // The overlay is changed only by code that does not panic midway.
        self.overlay.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a batch is in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> bool {
        let o = self.overlay();
        o.from.is_some() || o.hard_state.is_some() || o.conf_state.is_some()
    }

    /// Makes `write`, part of batch `seq` (higher than every batch staged before), what
    /// raft-rs reads from now on. `write` is a Ready's: its entries consecutive, above
    /// the snapshot, and starting at most one past the last entry (raft-rs makes them
    /// so; the store validates the batch again when it writes it). A commit-only move
    /// (`ReadyWrite::commit`) is folded into the hard state.
    pub(crate) fn stage(&self, seq: u64, write: &ReadyWrite) {
        let mut o = self.overlay();
        if let Some(snap) = &write.snapshot {
            let index = snap.get_metadata().index;
            o.snapshot = Some((seq, snap.clone()));
            o.entries.clear();
            o.from = Some(index + 1);
            o.conf_state = Some((seq, snap.get_metadata().get_conf_state().clone()));
            // As the store records it: the snapshot's index is committed, its term reached.
            let mut hs = self.hard_state_locked(&o);
            hs.commit = hs.commit.max(index);
            hs.term = hs.term.max(snap.get_metadata().term);
            o.hard_state = Some((seq, hs));
        }
        let floor = o
            .snapshot
            .as_ref()
            .map_or(0, |(_, s)| s.get_metadata().index);
        let mut entries = write.entries.iter().filter(|e| e.index > floor).peekable();
        if let Some(first) = entries.peek().map(|e| e.index) {
            while o.entries.back().is_some_and(|(_, e)| e.index >= first) {
                o.entries.pop_back();
            }
            o.from = Some(o.from.map_or(first, |f| f.min(first)));
            o.entries.extend(entries.map(|e| (seq, e.clone())));
        }
        let mut hs = write.hard_state.clone();
        if let Some(commit) = write.commit {
            let mut base = hs.unwrap_or_else(|| self.hard_state_locked(&o));
            base.commit = base.commit.max(commit);
            hs = Some(base);
        }
        if let Some(hs) = hs {
            o.hard_state = Some((seq, hs));
        }
        if let Some(cs) = &write.conf_state {
            o.conf_state = Some((seq, cs.clone()));
        }
    }

    /// The batches up to `seq` are written: what they staged is read from the store now
    /// (unless a later batch staged over it).
    pub(crate) fn durable(&self, seq: u64) {
        let mut o = self.overlay();
        while o.entries.front().is_some_and(|(s, _)| *s <= seq) {
            o.entries.pop_front();
        }
        if o.snapshot.as_ref().is_some_and(|(s, _)| *s <= seq) {
            o.snapshot = None;
        }
        o.from = match (o.entries.front(), &o.snapshot) {
            (Some((_, e)), _) => Some(e.index),
            (None, Some((_, s))) => Some(s.get_metadata().index + 1),
            (None, None) => None,
        };
        if o.hard_state.as_ref().is_some_and(|(s, _)| *s <= seq) {
            o.hard_state = None;
        }
        if o.conf_state.as_ref().is_some_and(|(s, _)| *s <= seq) {
            o.conf_state = None;
        }
    }

    fn hard_state_locked(&self, o: &Overlay) -> HardState {
        match &o.hard_state {
            Some((_, hs)) => hs.clone(),
            None => self.store.hard_state(),
        }
    }

    /// The hard state raft-rs sees: staged or stored.
    pub(crate) fn hard_state(&self) -> HardState {
        let o = self.overlay();
        self.hard_state_locked(&o)
    }

    /// The conf state raft-rs sees: staged or stored.
    pub(crate) fn conf_state(&self) -> ConfState {
        match &self.overlay().conf_state {
            Some((_, cs)) => cs.clone(),
            None => self.store.conf_state(),
        }
    }
}

impl<S: RaftStore> Storage for Staged<S> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state(), self.conf_state()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max_size = max_size.into();
        let o = self.overlay();
        let Some(from) = o.from else {
            drop(o);
            return self.store.entries(low, high, max_size, context);
        };
        if low < self.first_locked(&o)? {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        let last = self.last_locked(&o)?;
        if high > last + 1 {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let mut out = Vec::new();
        let mut limit = SizeLimit::new(max_size);
        if low < from {
            let stored = self.store.entries(low, high.min(from), max_size, context)?;
            let complete = stored.len() as u64 == high.min(from) - low;
            for e in &stored {
                limit.admit(e);
            }
            out = stored;
            if !complete {
                return Ok(out);
            }
        }
        let start = low.max(from);
        for (_, e) in o.entries.iter().skip((start - from) as usize) {
            if e.index >= high || !limit.admit(e) {
                break;
            }
            out.push(e.clone());
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let o = self.overlay();
        if let Some((_, snap)) = &o.snapshot {
            let meta = snap.get_metadata();
            if idx == meta.index {
                return Ok(meta.term);
            }
            if idx < meta.index {
                return Err(raft::Error::Store(raft::StorageError::Compacted));
            }
        }
        match o.from {
            Some(from) if idx >= from => o
                .entries
                .get((idx - from) as usize)
                .map(|(_, e)| e.term)
                .ok_or(raft::Error::Store(raft::StorageError::Unavailable)),
            _ => self.store.term(idx),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        let o = self.overlay();
        self.first_locked(&o)
    }

    fn last_index(&self) -> raft::Result<u64> {
        let o = self.overlay();
        self.last_locked(&o)
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        if let Some((_, snap)) = &self.overlay().snapshot {
            if snap.get_metadata().index >= request_index {
                return Ok(snap.clone());
            }
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        self.store.snapshot(request_index, to)
    }
}

impl<S: RaftStore> Staged<S> {
    fn first_locked(&self, o: &Overlay) -> raft::Result<u64> {
        match &o.snapshot {
            Some((_, snap)) => Ok(snap.get_metadata().index + 1),
            None => self.store.first_index(),
        }
    }

    fn last_locked(&self, o: &Overlay) -> raft::Result<u64> {
        match (o.entries.back(), &o.snapshot) {
            (Some((_, e)), _) => Ok(e.index),
            (None, Some((_, snap))) => Ok(snap.get_metadata().index),
            (None, None) => self.store.last_index(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStore;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8; 3].into(),
            ..Default::default()
        }
    }

    fn hs(term: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote: 1,
            commit,
            ..Default::default()
        }
    }

    fn snapshot(index: u64, term: u64) -> Snapshot {
        let mut s = Snapshot::default();
        s.mut_metadata().index = index;
        s.mut_metadata().term = term;
        s.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        s.data = vec![7; 4].into();
        s
    }

    fn store() -> MemStore {
        MemStore::new(ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        })
    }

    /// Everything raft-rs reads, from `s`.
    fn view(s: &impl Storage) -> (u64, u64, Vec<(u64, u64)>, HardState, ConfState) {
        let first = s.first_index().unwrap();
        let last = s.last_index().unwrap();
        let entries = s
            .entries(first, last + 1, None, GetEntriesContext::empty(false))
            .unwrap()
            .iter()
            .map(|e| (e.index, e.term))
            .collect::<Vec<_>>();
        for &(i, t) in &entries {
            assert_eq!(s.term(i).unwrap(), t, "term of {i}");
        }
        let state = s.initial_state().unwrap();
        (first, last, entries, state.hard_state, state.conf_state)
    }

    /// Ready-like writes: appends, a conflicting suffix, hard states, a snapshot.
    fn writes() -> Vec<ReadyWrite> {
        let w = |entries: Vec<Entry>, h: Option<HardState>| ReadyWrite {
            entries,
            hard_state: h,
            ..Default::default()
        };
        vec![
            w(vec![entry(1, 1), entry(2, 1), entry(3, 1)], Some(hs(1, 0))),
            w(vec![entry(4, 1)], Some(hs(1, 2))),
            // A new leader's entries replace 4 (uncommitted).
            w(vec![entry(4, 2), entry(5, 2)], Some(hs(2, 3))),
            w(vec![], Some(hs(2, 4))),
            w(vec![entry(6, 2)], None),
            ReadyWrite {
                snapshot: Some(snapshot(9, 3)),
                hard_state: Some(hs(3, 9)),
                ..Default::default()
            },
            w(vec![entry(10, 3), entry(11, 3)], None),
            w(vec![entry(11, 4), entry(12, 4)], Some(hs(4, 10))),
        ]
    }

    /// Staged writes, made durable `lag` batches late (all at the end), read as the same
    /// writes made at once.
    #[test]
    fn a_staged_view_reads_as_the_writes_made_at_once_whatever_is_still_in_flight() {
        for lag in 0..4usize {
            let reference = store();
            let staged = Staged::new(store());
            let mut written = 0usize;
            let all = writes();
            for (i, write) in all.iter().enumerate() {
                reference.write(write.clone()).unwrap();
                staged.stage(i as u64 + 1, write);
                assert_eq!(
                    view(&staged),
                    view(&reference),
                    "lag {lag}, after staging {i}"
                );
                // The writer catches up to `lag` batches behind.
                while written + lag <= i {
                    staged.store().write(all[written].clone()).unwrap();
                    staged.durable(written as u64 + 1);
                    written += 1;
                    assert_eq!(
                        view(&staged),
                        view(&reference),
                        "lag {lag}, after batch {written} is durable"
                    );
                }
            }
            while written < all.len() {
                staged.store().write(all[written].clone()).unwrap();
                staged.durable(written as u64 + 1);
                written += 1;
                assert_eq!(view(&staged), view(&reference), "lag {lag}, draining");
            }
            assert!(!staged.in_flight(), "lag {lag}: nothing left in flight");
        }
    }

    /// Writes merged with `ReadyWrite::then` (the driver's held batch) leave a store as
    /// the same writes made one by one, from whatever state they start.
    #[test]
    fn merged_writes_leave_the_store_as_the_writes_made_one_by_one() {
        let all = writes();
        for from in 0..all.len() {
            for to in from + 1..=all.len() {
                let (one_by_one, merged) = (store(), store());
                for w in &all[..from] {
                    one_by_one.write(w.clone()).unwrap();
                    merged.write(w.clone()).unwrap();
                }
                let mut batch = all[from].clone();
                for w in &all[from..to] {
                    one_by_one.write(w.clone()).unwrap();
                }
                for w in &all[from + 1..to] {
                    batch.then(w.clone());
                }
                merged.write(batch).unwrap();
                assert_eq!(view(&merged), view(&one_by_one), "writes {from}..{to}");
            }
        }
    }

    #[test]
    fn reads_below_the_staged_entries_come_from_the_store_within_the_size_limit() {
        let s = Staged::new(store());
        s.store()
            .write(ReadyWrite {
                entries: vec![entry(1, 1), entry(2, 1)],
                hard_state: Some(hs(1, 0)),
                ..Default::default()
            })
            .unwrap();
        s.stage(
            1,
            &ReadyWrite {
                entries: vec![entry(3, 1), entry(4, 1)],
                ..Default::default()
            },
        );
        let ctx = || GetEntriesContext::empty(false);
        let one = u64::from(protobuf::Message::compute_size(&entry(1, 1)));
        let got = |max| {
            s.entries(1, 5, Some(max), ctx())
                .unwrap()
                .iter()
                .map(|e| e.index)
                .collect::<Vec<_>>()
        };
        assert_eq!(got(0), vec![1], "the first entry always fits");
        assert_eq!(got(one * 3), vec![1, 2, 3]);
        assert_eq!(got(u64::MAX), vec![1, 2, 3, 4]);
        assert_eq!(
            s.entries(3, 5, None, ctx()).unwrap().len(),
            2,
            "only the overlay"
        );
        assert!(s.entries(3, 6, None, ctx()).is_err(), "past the last entry");
        assert!(s.term(5).is_err());
        assert_eq!(s.snapshot(0, 0).unwrap().get_metadata().index, 0);
    }

    #[test]
    fn a_staged_snapshot_is_what_raft_reads_until_it_is_durable() {
        let s = Staged::new(store());
        s.stage(
            1,
            &ReadyWrite {
                snapshot: Some(snapshot(5, 2)),
                ..Default::default()
            },
        );
        assert_eq!((s.first_index().unwrap(), s.last_index().unwrap()), (6, 5));
        assert_eq!(s.term(5).unwrap(), 2);
        assert!(matches!(
            s.term(4),
            Err(raft::Error::Store(raft::StorageError::Compacted))
        ));
        assert_eq!(s.snapshot(5, 0).unwrap().data.as_ref(), &[7; 4]);
        assert_eq!(s.hard_state().commit, 5);
        assert_eq!(s.conf_state().voters, vec![1, 2, 3]);
        assert!(s.store().last_index().unwrap() < 5, "not written yet");
    }
}
