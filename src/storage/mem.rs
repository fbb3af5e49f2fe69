//! [`MemStore`]: the in-memory store for tests and simulation, and its [`MemDisk`].
//!
//! Durability model: the [`MemDisk`] plays the disk. A [`RaftStore::write`] or
//! [`RaftStore::compact`] is applied to it whole under its lock before the call returns,
//! or not at all when refused; so the disk always holds exactly the writes that
//! returned `Ok`. To simulate a crash, drop every handle of the store (including the one
//! given to raft-rs) and call [`MemStore::open`] on the same disk.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState};

use super::model::{LogState, SizeLimit};
use super::{RaftStore, ReadyWrite, StorageError};
use crate::NodeId;

/// The durable state behind a [`MemStore`]: it outlives the store, so a test can drop a
/// node's store (a crash) and reopen it from exactly what had been written.
///
/// `Clone` shares the same disk.
#[derive(Debug, Clone)]
pub struct MemDisk {
    state: Arc<Mutex<DiskState>>,
}

#[derive(Debug)]
struct DiskState {
    /// Hard state, conf state, snapshot metadata and the entries themselves.
    log: LogState<Entry>,
    /// The stored snapshot's data (its metadata is in `log`).
    snapshot_data: Bytes,
    /// The node the disk was made for, if any.
    node: Option<NodeId>,
}

impl MemDisk {
    /// A fresh disk, as [`RocksStore::create`](super::RocksStore::create) would leave
    /// it: no entries, snapshot index and term 0, default hard state, membership
    /// `initial`.
    pub fn new(initial: ConfState) -> Self {
        Self::with(None, initial)
    }

    /// A fresh, empty disk of node `node` (no membership): what
    /// [`RocksStore::create`](super::RocksStore::create) leaves for a node that founds
    /// or joins a group.
    pub fn for_node(node: NodeId) -> Self {
        Self::with(Some(node), ConfState::default())
    }

    fn with(node: Option<NodeId>, initial: ConfState) -> Self {
        MemDisk {
            state: Arc::new(Mutex::new(DiskState {
                log: LogState::new(initial),
                snapshot_data: Bytes::new(),
                node,
            })),
        }
    }

    /// Locks the disk. A poisoned lock still holds a consistent state: the state is only
    /// changed after every check has passed, by code that does not panic.
    fn lock(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A [`RaftStore`] in memory, with the same behaviour as
/// [`RocksStore`](super::RocksStore).
///
/// `Clone` shares the same store.
#[derive(Debug, Clone)]
pub struct MemStore {
    disk: MemDisk,
}

impl MemStore {
    /// Opens the store kept on `disk`: after a simulated crash, everything written
    /// before is there.
    pub fn open(disk: MemDisk) -> Self {
        MemStore { disk }
    }

    /// A store on a fresh [`MemDisk`] with membership `initial`.
    pub fn new(initial: ConfState) -> Self {
        Self::open(MemDisk::new(initial))
    }

    /// The disk this store writes to; keep it to reopen the store after dropping it.
    pub fn disk(&self) -> MemDisk {
        self.disk.clone()
    }
}

impl raft::Storage for MemStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let disk = self.disk.lock();
        Ok(RaftState::new(
            disk.log.hard_state.clone(),
            disk.log.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let disk = self.disk.lock();
        disk.log.check_range(low, high)?;
        let mut limit = SizeLimit::new(max_size.into());
        Ok((low..high)
            .map_while(|index| disk.log.item(index))
            .take_while(|entry| limit.admit(entry))
            .cloned()
            .collect())
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.disk.lock().log.term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.disk.lock().log.first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.disk.lock().log.last_index())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let disk = self.disk.lock();
        if disk.log.snapshot.index < request_index {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(disk.log.snapshot.clone());
        snapshot.data = disk.snapshot_data.clone();
        Ok(snapshot)
    }
}

impl RaftStore for MemStore {
    fn write(&self, write: ReadyWrite) -> Result<(), StorageError> {
        let mut disk = self.disk.lock();
        let mut plan = disk.log.plan_write(write)?;
        if let Some(snapshot) = &mut plan.snapshot {
            disk.snapshot_data = std::mem::take(&mut snapshot.data);
        }
        disk.log.apply_write(plan);
        Ok(())
    }

    fn compact(
        &self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), StorageError> {
        let mut disk = self.disk.lock();
        let mut snapshot = disk.log.plan_compact(index, conf_state, data)?;
        disk.snapshot_data = std::mem::take(&mut snapshot.data);
        disk.log.apply_compact(snapshot.take_metadata());
        Ok(())
    }

    fn hard_state(&self) -> HardState {
        self.disk.lock().log.hard_state.clone()
    }

    fn conf_state(&self) -> ConfState {
        self.disk.lock().log.conf_state.clone()
    }

    fn node_id(&self) -> Option<NodeId> {
        self.disk.lock().node
    }
}
