//! A memory store that can be told to die in the middle of a chosen write: the write never
//! reaches the disk and the driver stops on the error, as a process killed during that
//! fsync would. Used by the simulation and by the lost-acknowledgement test.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use tenure::storage::{MemStore, RaftStore, ReadyWrite, StorageError};

/// Which write dies (the values of [`TornStore::tear`]).
pub mod tear {
    /// None.
    pub const NONE: u8 = 0;
    /// The next write with a hard state (term, vote).
    pub const HARD_STATE: u8 = 1;
    /// The next write with log entries carrying a leadership record.
    pub const RECORD: u8 = 2;
}

/// Whether an entry carries a leadership record (tenure's history entries start with
/// this tag byte).
pub fn is_record(e: &Entry) -> bool {
    e.data.first() == Some(&b'H')
}

/// A [`MemStore`] whose next write of the armed kind dies.
#[derive(Clone)]
pub struct TornStore {
    /// The store written to.
    pub inner: MemStore,
    /// Which write dies: one of the [`tear`] values; reset when it happened. Shared across
    /// restarts of one node, so a fault can be armed before the node starts.
    pub tear: Arc<AtomicU8>,
    /// Set when the store died.
    pub died: Arc<AtomicBool>,
    /// Shared by every clone: when the last one is dropped, the store "closes".
    pub closing: Arc<CloseProbe>,
}

/// What closing a store takes, made observable: dropping the last clone of a
/// [`TornStore`] blocks for `delay` (as RocksDB's close does while it syncs and unlocks)
/// and then sets `closed`.
#[derive(Default)]
pub struct CloseProbe {
    /// How long closing blocks.
    pub delay: Duration,
    /// Set once the store closed.
    pub closed: Arc<AtomicBool>,
}

impl Drop for CloseProbe {
    fn drop(&mut self) {
        std::thread::sleep(self.delay);
        self.closed.store(true, Ordering::SeqCst);
    }
}

impl raft::Storage for TornStore {
    fn initial_state(&self) -> raft::Result<raft::RaftState> {
        self.inner.initial_state()
    }
    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: raft::GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.inner.entries(low, high, max_size, context)
    }
    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.inner.term(idx)
    }
    fn first_index(&self) -> raft::Result<u64> {
        self.inner.first_index()
    }
    fn last_index(&self) -> raft::Result<u64> {
        self.inner.last_index()
    }
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        self.inner.snapshot(request_index, to)
    }
}

impl RaftStore for TornStore {
    fn write(&self, write: ReadyWrite) -> Result<(), StorageError> {
        let dies = match self.tear.load(Ordering::SeqCst) {
            tear::HARD_STATE => write.hard_state.is_some(),
            tear::RECORD => write.entries.iter().any(is_record),
            _ => false,
        };
        if dies && self.tear.swap(tear::NONE, Ordering::SeqCst) != tear::NONE {
            self.died.store(true, Ordering::SeqCst);
            return Err(StorageError::Io {
                path: "memory disk".into(),
                detail: "the process died during this write (simulated)".into(),
            });
        }
        self.inner.write(write)
    }
    fn compact(
        &self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), StorageError> {
        self.inner.compact(index, conf_state, data)
    }
    fn hard_state(&self) -> HardState {
        self.inner.hard_state()
    }
    fn node_id(&self) -> Option<tenure::NodeId> {
        self.inner.node_id()
    }

    fn conf_state(&self) -> ConfState {
        self.inner.conf_state()
    }
    /// In memory: the driver writes in place (and hears of the batch's end in its next
    /// turn), so a simulation replays.
    fn blocks_on_io(&self) -> bool {
        self.inner.blocks_on_io()
    }
}
