//! What a [`RocksStore`](super::RocksStore) keeps in memory of one group: its log's
//! state (what the disk holds, minus payloads) and the tail of entries it last wrote.

use std::collections::VecDeque;

use raft::eraftpb::Entry;

use crate::storage::model::{LogState, WritePlan};
use crate::storage::StorageError;

pub(super) struct GroupState {
    pub(super) log: LogState<u64>,
    /// The election was removed: its handles refuse reads and writes.
    pub(super) removed: bool,
    /// The last entries written, consecutive and ending at the last index (at most
    /// [`TAIL_ENTRIES`]): raft-rs reads what it just wrote, to apply it and to send it,
    /// and with thousands of elections founding at once those reads went to the
    /// database's files, a quarter of a worker's time (`docs/design.md`, section 12).
    pub(super) tail: VecDeque<Entry>,
}

/// How many of a group's last entries [`GroupState::tail`] keeps.
const TAIL_ENTRIES: usize = 8;

impl GroupState {
    pub(super) fn new(log: LogState<u64>) -> Self {
        GroupState {
            log,
            removed: false,
            tail: VecDeque::new(),
        }
    }

    /// Applies `plan` (once it is written) to the state and the tail.
    pub(super) fn apply_write(&mut self, plan: WritePlan) {
        self.remember(&plan);
        self.log.apply_write(plan);
        // Not a run that ends at the last index (a write this cache does not follow):
        // forget it rather than answer from it.
        if self
            .tail
            .back()
            .is_some_and(|e| e.index != self.log.last_index())
        {
            self.tail.clear();
        }
    }

    /// Keeps `plan`'s entries in the tail, after what it deletes.
    fn remember(&mut self, plan: &WritePlan) {
        if plan.snapshot.is_some() {
            self.tail.clear();
        }
        let drop_from = |from: u64, tail: &mut VecDeque<Entry>| {
            while tail.back().is_some_and(|e| e.index >= from) {
                tail.pop_back();
            }
        };
        if let Some(from) = plan.truncate_from {
            drop_from(from, &mut self.tail);
        }
        for entry in &plan.entries {
            drop_from(entry.index, &mut self.tail);
            if self.tail.back().is_some_and(|e| e.index + 1 != entry.index) {
                self.tail.clear();
            }
            self.tail.push_back(entry.clone());
            if self.tail.len() > TAIL_ENTRIES {
                self.tail.pop_front();
            }
        }
    }

    /// Forgets the tail's entries at or below `index` (compacted).
    pub(super) fn compacted(&mut self, index: u64) {
        while self.tail.front().is_some_and(|e| e.index <= index) {
            self.tail.pop_front();
        }
    }

    /// Entries `[low, high)` from the tail, if it holds them all (`low < high`).
    pub(super) fn tail_range(&self, low: u64, high: u64) -> Option<impl Iterator<Item = &Entry>> {
        let first = self.tail.front()?.index;
        let last = self.tail.back()?.index;
        (first <= low && high - 1 <= last).then(|| {
            self.tail
                .iter()
                .skip((low - first) as usize)
                .take((high - low) as usize)
        })
    }

    pub(super) fn live(&self, id: u32) -> Result<&LogState<u64>, StorageError> {
        if self.removed {
            return Err(StorageError::ElectionRemoved { id });
        }
        Ok(&self.log)
    }
}
