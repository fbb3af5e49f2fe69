//! [`MemStore`]: the in-memory store for tests and simulation, and its [`MemDisk`].
//!
//! Durability model: the [`MemDisk`] plays the disk. A [`RaftStore::write`] or
//! [`RaftStore::compact`] is applied to it whole under its lock before the call returns,
//! or not at all when refused; so the disk always holds exactly the writes that
//! returned `Ok`. To simulate a crash, drop every handle of the store (including the one
//! given to raft-rs) and call [`MemStore::open`] on the same disk.
//!
//! The disk also holds every named election's state and every removed election's
//! tombstone, so a crash keeps them too. All groups share the disk's one lock: a
//! [`RaftStore::write_all`] validates every part and then applies them all under it,
//! so it is atomic here as in RocksDB.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState};

use super::model::{LogState, SizeLimit, WritePlan};
use super::{ElectionIds, RaftStore, ReadyWrite, StorageError};
use crate::NodeId;

/// The durable state behind a [`MemStore`]: it outlives the store, so a test can drop a
/// node's store (a crash) and reopen it from exactly what had been written. It holds
/// the root's raft state and every named election's, tombstones included.
///
/// `Clone` shares the same disk.
#[derive(Debug, Clone)]
pub struct MemDisk {
    state: Arc<Mutex<DiskState>>,
}

#[derive(Debug)]
struct DiskState {
    /// The root election's log.
    root: GroupDisk,
    /// The live named elections' logs, by id.
    elections: BTreeMap<u32, GroupDisk>,
    /// The removed named elections' ids (their tombstones).
    removed: BTreeSet<u32>,
    /// The node the disk was made for, if any.
    node: Option<NodeId>,
    /// The founding nonces recorded ([`RaftStore::record_founding_nonces`]).
    founding_nonces: BTreeMap<NodeId, u128>,
}

/// One group's raft state on the disk.
#[derive(Debug)]
struct GroupDisk {
    /// Hard state, conf state, snapshot metadata and the entries themselves.
    log: LogState<Entry>,
    /// The stored snapshot's data (its metadata is in `log`).
    snapshot_data: Bytes,
}

impl GroupDisk {
    fn apply_write(&mut self, mut plan: WritePlan) {
        if let Some(snapshot) = &mut plan.snapshot {
            self.snapshot_data = std::mem::take(&mut snapshot.data);
        }
        self.log.apply_write(plan);
    }
}

impl DiskState {
    /// Group `id`'s state (0: the root), or why there is none.
    fn group(&self, id: u32) -> Result<&GroupDisk, StorageError> {
        if id == 0 {
            return Ok(&self.root);
        }
        self.elections.get(&id).ok_or_else(|| gone(id))
    }

    fn group_mut(&mut self, id: u32) -> Result<&mut GroupDisk, StorageError> {
        if id == 0 {
            return Ok(&mut self.root);
        }
        self.elections.get_mut(&id).ok_or_else(|| gone(id))
    }
}

/// A handle of an election the disk no longer holds: it can only have been removed (a
/// handle is only made for an election the disk holds, and only removal deletes one).
fn gone(id: u32) -> StorageError {
    StorageError::ElectionRemoved { id }
}

fn refused_id_zero(what: &str) -> StorageError {
    StorageError::invalid(format!(
        "cannot {what} election 0: id 0 is the root election, the store itself"
    ))
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
                root: GroupDisk {
                    log: LogState::new(initial),
                    snapshot_data: Bytes::new(),
                },
                elections: BTreeMap::new(),
                removed: BTreeSet::new(),
                node,
                founding_nonces: BTreeMap::new(),
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
/// `Clone` shares the same store. A handle of a named election
/// ([`RaftStore::election`]) is a `MemStore` too, on the same disk.
#[derive(Debug, Clone)]
pub struct MemStore {
    disk: MemDisk,
    /// The group this handle reads and writes: 0 for the root, else a named election.
    election: u32,
}

impl MemStore {
    /// Opens the store kept on `disk`: after a simulated crash, everything written
    /// before is there. The store is the root election's handle.
    pub fn open(disk: MemDisk) -> Self {
        MemStore { disk, election: 0 }
    }

    /// A store on a fresh [`MemDisk`] with membership `initial`.
    pub fn new(initial: ConfState) -> Self {
        Self::open(MemDisk::new(initial))
    }

    /// The disk this store writes to; keep it to reopen the store after dropping it.
    pub fn disk(&self) -> MemDisk {
        self.disk.clone()
    }

    /// The election this handle is of: 0 for the store itself (the root election).
    pub fn election_id(&self) -> u32 {
        self.election
    }

    /// Puts a new election's state on the disk, unless `id` is the root's, live or
    /// removed.
    fn add_election(
        &self,
        id: u32,
        what: &str,
        group: impl FnOnce() -> GroupDisk,
    ) -> Result<Self, StorageError> {
        if id == 0 {
            return Err(refused_id_zero(what));
        }
        let mut disk = self.disk.lock();
        if disk.removed.contains(&id) {
            return Err(StorageError::ElectionRemoved { id });
        }
        if disk.elections.contains_key(&id) {
            return Err(StorageError::invalid(format!(
                "cannot {what} named election {id}: it is already founded in this store"
            )));
        }
        disk.elections.insert(id, group());
        Ok(self.handle(id))
    }

    fn handle(&self, election: u32) -> Self {
        MemStore {
            disk: self.disk.clone(),
            election,
        }
    }
}

fn raft_err(err: StorageError) -> raft::Error {
    err.into()
}

impl raft::Storage for MemStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let disk = self.disk.lock();
        let group = disk.group(self.election).map_err(raft_err)?;
        Ok(RaftState::new(
            group.log.hard_state.clone(),
            group.log.conf_state.clone(),
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
        let log = &disk.group(self.election).map_err(raft_err)?.log;
        log.check_range(low, high)?;
        let mut limit = SizeLimit::new(max_size.into());
        Ok((low..high)
            .map_while(|index| log.item(index))
            .take_while(|entry| limit.admit(entry))
            .cloned()
            .collect())
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let disk = self.disk.lock();
        disk.group(self.election).map_err(raft_err)?.log.term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        let disk = self.disk.lock();
        Ok(disk
            .group(self.election)
            .map_err(raft_err)?
            .log
            .first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        let disk = self.disk.lock();
        Ok(disk
            .group(self.election)
            .map_err(raft_err)?
            .log
            .last_index())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let disk = self.disk.lock();
        let group = disk.group(self.election).map_err(raft_err)?;
        if group.log.snapshot.index < request_index {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(group.log.snapshot.clone());
        snapshot.data = group.snapshot_data.clone();
        Ok(snapshot)
    }
}

impl RaftStore for MemStore {
    fn blocks_on_io(&self) -> bool {
        false
    }

    fn write(&self, write: ReadyWrite) -> Result<(), StorageError> {
        let id = self.election;
        let mut disk = self.disk.lock();
        let group = disk.group_mut(id)?;
        let plan = group.log.plan_write(write).map_err(|e| e.in_election(id))?;
        group.apply_write(plan);
        Ok(())
    }

    fn compact(
        &self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), StorageError> {
        let id = self.election;
        let mut disk = self.disk.lock();
        let group = disk.group_mut(id)?;
        let mut snapshot = group
            .log
            .plan_compact(index, conf_state, data)
            .map_err(|e| e.in_election(id))?;
        group.snapshot_data = std::mem::take(&mut snapshot.data);
        group.log.apply_compact(snapshot.take_metadata());
        Ok(())
    }

    fn hard_state(&self) -> HardState {
        let disk = self.disk.lock();
        disk.group(self.election)
            .map(|g| g.log.hard_state.clone())
            .unwrap_or_default()
    }

    fn conf_state(&self) -> ConfState {
        let disk = self.disk.lock();
        disk.group(self.election)
            .map(|g| g.log.conf_state.clone())
            .unwrap_or_default()
    }

    fn node_id(&self) -> Option<NodeId> {
        self.disk.lock().node
    }

    fn founding_nonces(&self) -> Result<BTreeMap<NodeId, u128>, StorageError> {
        Ok(self.disk.lock().founding_nonces.clone())
    }

    fn record_founding_nonces(&self, nonces: &BTreeMap<NodeId, u128>) -> Result<(), StorageError> {
        self.disk.lock().founding_nonces = nonces.clone();
        Ok(())
    }

    fn election(&self, id: u32) -> Result<Option<Self>, StorageError> {
        if id == 0 {
            return Err(refused_id_zero("open"));
        }
        let disk = self.disk.lock();
        Ok(disk.elections.contains_key(&id).then(|| self.handle(id)))
    }

    fn election_ids(&self) -> Result<ElectionIds, StorageError> {
        let disk = self.disk.lock();
        Ok(ElectionIds {
            live: disk.elections.keys().copied().collect(),
            removed: disk.removed.clone(),
        })
    }

    fn found_election(
        &self,
        id: u32,
        term: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<Self, StorageError> {
        self.add_election(id, "found", || GroupDisk {
            log: LogState::founded(term, conf_state),
            snapshot_data: Bytes::from(data),
        })
    }

    fn join_election(&self, id: u32, initial: ConfState) -> Result<Self, StorageError> {
        self.add_election(id, "create", || GroupDisk {
            log: LogState::new(initial),
            snapshot_data: Bytes::new(),
        })
    }

    fn remove_election(&self, id: u32) -> Result<(), StorageError> {
        if id == 0 {
            return Err(refused_id_zero("remove"));
        }
        let mut disk = self.disk.lock();
        disk.elections.remove(&id);
        disk.removed.insert(id);
        Ok(())
    }

    fn write_all(parts: Vec<(Self, ReadyWrite)>) -> Result<(), StorageError> {
        let Some((first, _)) = parts.first() else {
            return Ok(());
        };
        let disk_handle = first.disk.clone();
        for (i, (store, _)) in parts.iter().enumerate() {
            if !Arc::ptr_eq(&store.disk.state, &disk_handle.state) {
                return Err(StorageError::invalid(format!(
                    "write_all: part {i} (election {}) is a handle of another store",
                    store.election
                )));
            }
        }
        let mut seen = BTreeSet::new();
        for (store, _) in &parts {
            if !seen.insert(store.election) {
                return Err(StorageError::invalid(format!(
                    "write_all: two parts for election {}; one part per group",
                    store.election
                )));
            }
        }
        let mut disk = disk_handle.lock();
        // Validate every part before changing anything.
        let mut plans = Vec::with_capacity(parts.len());
        for (store, write) in parts {
            let id = store.election;
            let plan = disk
                .group(id)?
                .log
                .plan_write(write)
                .map_err(|e| e.in_part(id))?;
            plans.push((id, plan));
        }
        for (id, plan) in plans {
            // Every id was found by the validation above, under the same lock.
            disk.group_mut(id)?.apply_write(plan);
        }
        Ok(())
    }
}
