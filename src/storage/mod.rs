//! Durable Raft state: the [`RaftStore`] trait and its two implementations.
//!
//! * [`RocksStore`] keeps the log, hard state, conf state and snapshot in RocksDB.
//!   Every [`RaftStore::write`] is one `WriteBatch`, written with `sync = true` unless it
//!   only moves the commit index: when the call returns, votes, terms and entries are on
//!   disk.
//! * [`MemStore`] has the same behaviour in memory. Its [`MemDisk`] is the "disk": it
//!   outlives a dropped store, so a test or a simulation can crash a node (drop its
//!   store) and restart it from exactly what had been written.
//!
//! Both read through raft-rs's [`raft::Storage`] trait and write through [`RaftStore`].
//!
//! What is durable when: a write or compaction that returned `Ok` survives any crash, but
//! for a write that only moved the commit index, which a crash may take back (the next
//! synced write, or a sync of the log, makes it durable too); one interrupted by a crash
//! is, after restart, either wholly there or wholly absent; one that returned an error
//! changed nothing if it was refused ([`StorageError::InvalidWrite`]) and is in an
//! unknown state otherwise (the node must stop and reopen the store). Reads never see a
//! write before it is written.
//!
//! Both stores share one log model (`model.rs`): the validation of a write, how it
//! changes the log, and the range rules of the reads. They differ only in where the
//! bytes go.
//!
//! # Named elections
//!
//! One store also holds the raft state of the worker's named elections
//! (`docs/design.md`, section 11): each is its own raft group with its own log, reached
//! through a handle ([`RaftStore::election`], [`RaftStore::found_election`]) that
//! implements [`raft::Storage`] and [`RaftStore`] for that group alone. The store itself
//! is the handle of the root election (id 0). [`RaftStore::write_all`] writes one Ready
//! of many groups of one store as one atomic batch (one fsync per driver turn), and
//! [`RaftStore::remove_election`] deletes an election and leaves a tombstone so its id is
//! never founded again.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`RaftStore`], [`ReadyWrite`] (what one write carries), [`ElectionIds`] |
//! | `model.rs` | the log model both stores share: its checks, and how a write or a compaction changes it |
//! | `rocks.rs` | [`RocksStore`]; `rocks/`: its keys (`keys.rs`), folder, metadata and opening (`disk.rs`), per-group memory (`state.rs`), the founding record (`founding.rs`) |
//! | `mem.rs` | [`MemStore`] and its [`MemDisk`] |
//! | `staged.rs` | `Staged`: a store as raft-rs sees it while a Ready batch is on the disk (section 15) |
//! | `error.rs` | [`StorageError`] |

mod error;
mod mem;
mod model;
mod rocks;
pub(crate) mod staged;

pub use error::StorageError;
pub use mem::{MemDisk, MemStore};
pub use rocks::RocksStore;
pub(crate) use staged::Staged;

use std::collections::BTreeSet;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};

/// Everything one Raft `Ready` (or `LightReady`) asks to persist.
///
/// A store writes it as one atomic batch, in this order: `snapshot` (replacing the whole
/// log), then `entries` (truncating any conflicting suffix), then `hard_state`, then
/// `conf_state`, then `commit`. The call returns only after the batch is durable.
#[derive(Debug, Clone, Default)]
pub struct ReadyWrite {
    /// A snapshot received from the leader: replaces the log, the conf state and the
    /// snapshot; the hard state's commit index rises to at least its index.
    pub snapshot: Option<Snapshot>,
    /// New log entries. Existing entries at or after `entries[0].index` are removed
    /// first (a conflicting suffix). Entries at or below the snapshot index are skipped.
    pub entries: Vec<Entry>,
    /// The new hard state (term, vote, commit).
    pub hard_state: Option<HardState>,
    /// The new conf state (membership), written when a conf change is applied.
    pub conf_state: Option<ConfState>,
    /// A new commit index only (from a `LightReady`); ignored when lower than the stored one.
    pub commit: Option<u64>,
}

impl ReadyWrite {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_none()
            && self.entries.is_empty()
            && self.hard_state.is_none()
            && self.conf_state.is_none()
            && self.commit.is_none()
    }

    /// Makes this write the same as writing it and then `later`, as a store writes each
    /// (the driver merges the writes of one group that wait for the same batch). `later`
    /// is a later Ready's of the same group: its entries start at most one past the last
    /// entry this write leaves.
    pub(crate) fn then(&mut self, later: ReadyWrite) {
        if let Some(snap) = later.snapshot {
            // The snapshot replaces the log and the conf state, and raises the hard state
            // written before it, as a store records it.
            let meta = snap.get_metadata();
            if let Some(hs) = &mut self.hard_state {
                hs.commit = hs.commit.max(meta.index);
                hs.term = hs.term.max(meta.term);
            }
            self.entries.clear();
            self.conf_state = None;
            self.snapshot = Some(snap);
        }
        if let Some(first) = later.entries.first().map(|e| e.index) {
            self.entries.retain(|e| e.index < first);
            self.entries.extend(later.entries);
        }
        if later.hard_state.is_some() {
            self.hard_state = later.hard_state;
        }
        if later.conf_state.is_some() {
            self.conf_state = later.conf_state;
        }
        self.commit = self.commit.max(later.commit);
    }
}

/// Ids of the named elections a store holds ([`RaftStore::election_ids`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElectionIds {
    /// Elections founded in this store and not removed.
    pub live: BTreeSet<u32>,
    /// Elections removed from this store: only their tombstone is left, and they are
    /// never founded here again.
    pub removed: BTreeSet<u32>,
}

/// The write side of Raft storage that the driver needs, on top of [`raft::Storage`].
///
/// Implementations are cheap handles (`Clone` shares the same underlying store), so the
/// driver can keep one and give raft-rs another.
pub trait RaftStore: raft::Storage + Clone + Send + Sync + 'static {
    /// Persists one Ready as one atomic batch, synced to disk before returning unless it
    /// only moves the commit index (see `docs/design.md`, section 5).
    ///
    /// A write that would break the log is refused with [`StorageError::InvalidWrite`]
    /// and changes nothing: a gap after the last entry, entries that are not consecutive
    /// or whose terms go down, rewriting an entry at or below the commit index, a
    /// snapshot not newer than the stored one, or a resulting commit index outside
    /// `[snapshot index, last index]` (raft-rs would refuse to restart from that).
    fn write(&self, write: ReadyWrite) -> Result<(), StorageError>;

    /// Compacts the log: records a snapshot at `index` (its term, `conf_state` — the
    /// membership as of `index`, as the application applied it — and `data`, the
    /// application state as of `index`) and deletes every entry at or below `index`.
    /// Afterwards `first_index() == index + 1` and [`conf_state`](Self::conf_state)
    /// returns `conf_state`.
    ///
    /// `index` must be at most the commit index and at least the current snapshot index;
    /// otherwise [`StorageError::InvalidWrite`] and nothing changes.
    fn compact(&self, index: u64, conf_state: ConfState, data: Vec<u8>)
        -> Result<(), StorageError>;

    /// The stored hard state.
    fn hard_state(&self) -> HardState;

    /// The stored conf state.
    fn conf_state(&self) -> ConfState;

    /// The node this store was created for, if it records one (every [`RocksStore`]
    /// does; a [`MemDisk`] made with [`MemDisk::for_node`] does). A node refuses to start
    /// on a store of another node.
    fn node_id(&self) -> Option<crate::NodeId>;

    /// A handle of named election `id`'s raft state in this same store, or `None` if it
    /// was never founded here or was removed.
    ///
    /// The handle implements [`raft::Storage`] and [`RaftStore`] for that election's log
    /// alone (its own hard state, conf state, snapshot, entries and compaction); its
    /// [`node_id`](Self::node_id) is the store's. Two calls for one id give handles that
    /// share one in-memory state: a write through one is seen by the other. Opening
    /// checks the election's stored log as opening the store checks the root's: damage
    /// is [`StorageError::Corrupt`] naming the election. Id 0 (the root: the store
    /// itself) is refused with [`StorageError::InvalidWrite`].
    ///
    /// The default (a store without named elections) holds none: `Ok(None)`.
    fn election(&self, id: u32) -> Result<Option<Self>, StorageError> {
        let _ = id;
        Ok(None)
    }

    /// Every named election id this store holds: live ones and removed (tombstoned)
    /// ones. The root (id 0) is in neither set.
    ///
    /// The default (a store without named elections) holds none.
    fn election_ids(&self) -> Result<ElectionIds, StorageError> {
        Ok(ElectionIds::default())
    }

    /// Founds named election `id`: a snapshot at index 1 with term `term`, membership
    /// `conf_state` and data `data`; hard state term `term`, no vote, commit 1; an empty
    /// log. Written synced before it returns its handle.
    ///
    /// Refused, with nothing written: id 0 ([`StorageError::InvalidWrite`]), an id live
    /// in this store ([`StorageError::InvalidWrite`] naming it), an id removed from it
    /// ([`StorageError::ElectionRemoved`]).
    ///
    /// The default returns [`StorageError::Unsupported`].
    fn found_election(
        &self,
        id: u32,
        term: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<Self, StorageError> {
        let _ = (term, conf_state, data);
        Err(StorageError::Unsupported {
            detail: format!("cannot found named election {id}: this store has no named elections"),
        })
    }

    /// Creates named election `id`'s raft state empty, as a member that is not among its
    /// founders starts it (a joiner, `docs/design.md` sections 6 and 11): no entries,
    /// snapshot index and term 0, default hard state, membership `initial`. Written
    /// synced before it returns its handle; refused as
    /// [`found_election`](Self::found_election) is.
    ///
    /// The default returns [`StorageError::Unsupported`].
    fn join_election(&self, id: u32, initial: ConfState) -> Result<Self, StorageError> {
        let _ = initial;
        Err(StorageError::Unsupported {
            detail: format!("cannot create named election {id}: this store has no named elections"),
        })
    }

    /// Deletes every record of named election `id` and writes its tombstone, as one
    /// synced batch. Handles of it that still exist refuse writes from then on
    /// ([`StorageError::ElectionRemoved`]), their reads fail the same way, and their
    /// [`hard_state`](Self::hard_state) and [`conf_state`](Self::conf_state) are empty.
    /// Removing an id this store never held just writes the tombstone; removing it
    /// again changes nothing. Id 0 is refused ([`StorageError::InvalidWrite`]).
    ///
    /// The default returns [`StorageError::Unsupported`].
    fn remove_election(&self, id: u32) -> Result<(), StorageError> {
        Err(StorageError::Unsupported {
            detail: format!("cannot remove named election {id}: this store has no named elections"),
        })
    }

    /// The founding nonces this node recorded when it founded the group: for each first
    /// member that was founding then, the nonce of its founding hello
    /// (`docs/design.md`, section 6). Empty if none were recorded (a store of a joiner,
    /// of an older version, or of a store without this record).
    fn founding_nonces(
        &self,
    ) -> Result<std::collections::BTreeMap<crate::NodeId, u128>, StorageError> {
        Ok(Default::default())
    }

    /// Records the founding nonces (synced), replacing any earlier record; written just
    /// before the founding snapshot. The default records nothing: the node's hellos then
    /// quote nothing, and a slow first member stops with lost data instead of founding
    /// (safe, not live).
    fn record_founding_nonces(
        &self,
        nonces: &std::collections::BTreeMap<crate::NodeId, u128>,
    ) -> Result<(), StorageError> {
        let _ = nonces;
        Ok(())
    }

    /// Whether this store's writes may wait on a device (an fsync), and so may take as
    /// long as the device does. The driver runs such writes on a writer thread of its
    /// own, and waits for a slow one off the tokio runtime's worker threads
    /// (`block_in_place`, on a multi-thread runtime), so that a stalled disk holds the
    /// driver's own turn and nothing else: the lease clock that ends
    /// leases on time, the transport and the application's tasks run on
    /// (`docs/design.md`, section 2, "The lease's own deadline").
    ///
    /// The default says yes; a store in memory says no.
    fn blocks_on_io(&self) -> bool {
        true
    }

    /// A small synced write that changes nothing the node reads: the driver's probe of
    /// a disk it found stalled (`docs/design.md`, section 15). A node that saw a synced
    /// write take longer than its bound ([`Config::disk_stall_bound`]) leads nothing
    /// until a few probes in a row come back within it.
    ///
    /// The default does nothing and returns at once: right for a store in memory. A
    /// store on a device should sync something small (a store whose probe cannot stall
    /// lets a stalled node back as soon as its first write after the stall returns).
    ///
    /// [`Config::disk_stall_bound`]: crate::Config::disk_stall_bound
    fn probe(&self) -> Result<(), StorageError> {
        Ok(())
    }

    /// Writes `parts`, each one group's [`ReadyWrite`] on that group's handle (the store
    /// itself for the root, or an election handle of the same store), as one atomic
    /// batch.
    ///
    /// Every part is first validated against its own group's log, with the rules of
    /// [`write`](Self::write); one invalid part means nothing is written
    /// ([`StorageError::InvalidWrite`] naming the election). Also refused, with nothing
    /// written: a handle of another store, two parts of one group, a part of a removed
    /// election ([`StorageError::ElectionRemoved`]). The batch is synced iff any part
    /// would be synced on its own (only commit-index moves go unsynced), and the
    /// groups' in-memory state changes only after it was written.
    ///
    /// The default writes each part with [`write`](Self::write), in order: **not
    /// atomic** (a failed part leaves the parts before it written).
    fn write_all(parts: Vec<(Self, ReadyWrite)>) -> Result<(), StorageError>
    where
        Self: Sized,
    {
        for (store, write) in parts {
            store.write(write)?;
        }
        Ok(())
    }
}
