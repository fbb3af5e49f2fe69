//! [`RocksStore`]: the Raft log, hard state, conf state and snapshot in RocksDB.
//!
//! # Durability
//!
//! Every [`RaftStore::write`] and [`RaftStore::compact`] is one RocksDB `WriteBatch`;
//! when the process dies during the call, after a restart either the whole batch is
//! there or none of it. Every batch that holds a vote, a term, entries, a snapshot or a
//! membership is written with `sync = true`: when the call returns `Ok`, it is on disk and
//! survives a process crash or power loss. A batch that only moves the commit index is
//! not synced (raft-rs does not need it durable: `docs/design.md`, section 5); RocksDB's
//! write-ahead log keeps batches in order, so the next synced batch makes it durable too,
//! and a crash can only take back commit-index moves. `create` writes the initial state
//! synced. The in-memory cache (hard state, conf state, snapshot metadata, entry terms)
//! is updated only after the batch is written, so readers never see state that a crash
//! could take back, commit-index moves aside. Writes take turns, and a Ready batch holds
//! no group's lock while it is on the disk, so a stalled disk holds no reader up (the
//! driver goes on reading while its batch is out: `docs/design.md`, section 15).
//! [`RocksStore::write_counts`] counts synced and unsynced batches.
//!
//! Named elections (`docs/design.md`, section 11) live in the same database: every
//! handle of one store shares the database, its write counters and one registry of the
//! elections opened so far, so [`RaftStore::election`] hands out handles that share one
//! cache per election. [`RaftStore::write_all`] puts the parts of many groups into one
//! `WriteBatch`: one write, one fsync (or none, when every part only moves a commit
//! index), counted once by [`RocksStore::write_counts`].
//!
//! # On-disk format (versions 2 and 3)
//!
//! One RocksDB database, default column family. Values are protobuf (raft-rs's
//! `eraftpb` messages) unless noted. A store is created at version 2; it becomes
//! version 3 with the first write of a named election's key (founding or removing one),
//! so a build that reads only version 2 refuses it instead of ignoring its elections.
//! This build opens versions 2 and 3.
//!
//! | key | value |
//! |---|---|
//! | `tenure/meta` | `tenure-raft-store` followed by the format version (u32, big endian); not protobuf |
//! | `tenure/node` | the node id the store was created for (u64, big endian); not protobuf |
//! | `tenure/hard_state` | `HardState` |
//! | `tenure/conf_state` | `ConfState` |
//! | `tenure/snapshot_meta` | `SnapshotMetadata` of the stored snapshot (index 0 when none) |
//! | `tenure/snapshot_data` | the stored snapshot's data, raw bytes |
//! | `tenure/log/` + index (u64, big endian) | `Entry` |
//! | `tenure/e/` + id (u32, big endian) + `/hard_state` | named election `id`'s `HardState` (version 3) |
//! | `tenure/e/` + id + `/conf_state` | its `ConfState` |
//! | `tenure/e/` + id + `/snapshot_meta` | its `SnapshotMetadata` (index 1 when founded) |
//! | `tenure/e/` + id + `/snapshot_data` | its snapshot's data, raw bytes |
//! | `tenure/e/` + id + `/log/` + index (u64, big endian) | its `Entry`s |
//! | `tenure/e/` + id + `/removed` | the tombstone of a removed election: empty; no other key of `id` is left |
//! | `tenure/founded_with` | the founding nonces of the first members this node founded with (`founding.rs`); not raft state, older builds ignore it |
//!
//! The keys above are the root election's (id 0), which a version 2 store holds alone.
//! Each log's entries are exactly the indexes `snapshot index + 1 ..= last index`,
//! without holes. Opening checks all of this for the root (and that the commit index lies
//! inside the log, which raft-rs assumes) and reports anything else as
//! [`StorageError::Corrupt`], instead of letting raft-rs panic on it later; an
//! election's records are checked the same way when its handle is first opened
//! ([`RaftStore::election`]), not when the store is. Removing an election is one synced
//! batch: a `DeleteRange` of `tenure/e/<id>/` to `tenure/e/<id>0` (`'0'` follows `'/'`)
//! and then the tombstone.
//!
//! # What a folder may hold
//!
//! A store is created only in a folder that does not exist or is empty (a `lost+found`
//! of a mounted volume aside), and only by [`RocksStore::create`], which the node calls
//! only when it founds or joins a group. A folder that holds files but no RocksDB
//! `CURRENT` file (say, one whose `CURRENT` was deleted or not copied) is
//! [`StorageError::Corrupt`]: opening it never writes anything, so a second attempt sees
//! the same folder, not a new empty database over the old files. Version 1 stores (no
//! `tenure/node` record) are refused with a message saying so. See `docs/design.md`,
//! section 6.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState};
use rocksdb::{DBCompressionType, Options, ReadOptions, WriteBatch, WriteOptions, DB};

use super::model::{LogState, SizeLimit, MAX_INDEX};
use super::{ElectionIds, RaftStore, ReadyWrite, StorageError};
use crate::transport::NodeId;

mod disk;
mod founding;
mod keys;
mod state;

use keys::Keys;

use disk::*;
use state::GroupState;

const META_KEY: &[u8] = b"tenure/meta";
const NODE_KEY: &[u8] = b"tenure/node";
const HARD_STATE_KEY: &[u8] = b"tenure/hard_state";
const CONF_STATE_KEY: &[u8] = b"tenure/conf_state";
const SNAPSHOT_META_KEY: &[u8] = b"tenure/snapshot_meta";
const SNAPSHOT_DATA_KEY: &[u8] = b"tenure/snapshot_data";
const LOG_PREFIX: &[u8] = b"tenure/log/";
/// The first key after every log key (`'0'` follows `'/'`).
const LOG_END: &[u8] = b"tenure/log0";
/// Every named election's keys start with this, then the id (u32, big endian) and `/`.
const ELECTIONS_PREFIX: &[u8] = b"tenure/e/";
/// The first key after every named election's key.
const ELECTIONS_END: &[u8] = b"tenure/e0";
/// The tombstone of a removed election, after its prefix.
const REMOVED: &[u8] = b"removed";

const MAGIC: &[u8] = b"tenure-raft-store";
/// The version `create` writes: the root's keys only.
const FORMAT_VERSION: u32 = 2;
/// The version of a store that holds named elections' keys; the newest this build reads.
const ELECTIONS_VERSION: u32 = 3;

/// A [`RaftStore`] on RocksDB: the durable state of one node.
///
/// `Clone` is cheap and shares the same open database, so the driver can keep one
/// handle and give raft-rs another. The database (and its lock on the directory) is
/// closed when the last handle is dropped, election handles included. A handle of a
/// named election ([`RaftStore::election`]) is a `RocksStore` too, on the same database.
#[derive(Clone)]
pub struct RocksStore {
    shared: Arc<Shared>,
    group: Arc<Group>,
}

/// What every handle of one store shares.
struct Shared {
    /// The data directory, named in every error.
    path: PathBuf,
    /// The node the store was created for.
    node: NodeId,
    /// Batches written synced and unsynced ([`RocksStore::write_counts`]).
    stats: WriteCounts,
    /// The open database.
    db: DB,
    /// The named elections opened so far and the format version on disk. Held while
    /// founding, opening or removing an election (never while a group's lock is held
    /// first), so each election has at most one cache.
    registry: Mutex<Registry>,
    /// Held by each write from its plan to its cache update, so writes take turns; the
    /// groups' locks are not held across the disk write ([`RaftStore::write_all`]).
    writing: Mutex<()>,
}

struct Registry {
    /// Each named election opened (or founded) since the store was opened, until it is
    /// removed.
    groups: HashMap<u32, Arc<Group>>,
    /// The format version the disk holds.
    version: u32,
    /// Which elections the database holds keys of (live, or only a tombstone), read
    /// once with a scan when first needed and kept since: this store is the database's
    /// only writer. Founding thousands of elections used to probe the files twice per
    /// election instead (a read of the tombstone, a seek into its keys).
    on_disk: Option<ElectionIds>,
}

/// One raft group's keys and cache: the root's (id 0) or a named election's.
struct Group {
    id: u32,
    keys: Keys,
    /// What the disk holds, minus entry payloads and snapshot data. Read to plan a write
    /// and held for writing to update it after the write, not across the disk write
    /// (a Ready batch): meanwhile readers see what the disk held before it, except at the
    /// batch's own indices, which its writer reads elsewhere (`Staged`). Compactions and
    /// removals hold it across theirs.
    state: RwLock<GroupState>,
}

impl fmt::Debug for RocksStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.shared.path)
            .field("election", &self.group.id)
            .finish_non_exhaustive()
    }
}

impl RocksStore {
    /// Creates a new store for node `node` in `path`, with membership `initial` and an
    /// empty log (snapshot index and term 0, default hard state).
    ///
    /// `path` must not exist (its parent must) or be an empty directory (a `lost+found`
    /// aside). Errors: [`StorageError::AlreadyInitialized`] if it already holds a store,
    /// [`StorageError::Corrupt`] if it holds anything else (never overwritten),
    /// [`StorageError::Locked`] if another process has it open.
    pub fn create(
        path: impl AsRef<Path>,
        node: NodeId,
        initial: ConfState,
    ) -> Result<Self, StorageError> {
        let path = path.as_ref().to_path_buf();
        match fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists && path.is_dir() => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(StorageError::from_io(
                    &path,
                    "cannot create the directory: its parent does not exist",
                    &e,
                ))
            }
            Err(e) => {
                return Err(StorageError::from_io(
                    &path,
                    "cannot create the directory",
                    &e,
                ))
            }
        }
        // Caught by the crash trials over the fault filesystem with strict directory
        // syncs (`tests/storage/crash.rs`): without it a power loss could take the whole
        // folder after the store had reported writes.
        disk::sync_parent(&path)?;
        match inspect_folder(&path)? {
            Folder::Empty => {}
            // A create interrupted before its first write leaves an empty database:
            // nothing was ever stored there, so creating again loses nothing.
            Folder::Database => {
                let db = open_db(&path, false)?;
                if load(&path, &db)?.is_some() {
                    return Err(StorageError::AlreadyInitialized { path });
                }
            }
        }
        let db = open_db(&path, true)?;
        if load(&path, &db)?.is_some() {
            return Err(StorageError::AlreadyInitialized { path });
        }
        let state = LogState::<u64>::new(initial);
        let mut batch = WriteBatch::default();
        batch.put(META_KEY, meta_record(FORMAT_VERSION));
        batch.put(NODE_KEY, node.to_be_bytes());
        Keys::root().add_state(&mut batch, &state, b"")?;
        write_synced(&path, &db, batch)?;
        Ok(Self::from_parts(path, db, node, state, FORMAT_VERSION))
    }

    /// Opens the store in `path`, as the last successful write left it. Writes nothing
    /// before the store is known to be whole.
    ///
    /// Only the root election's records are read and checked here; a named election's
    /// are when its handle is first opened ([`RaftStore::election`]).
    ///
    /// Errors: [`StorageError::Missing`] if the directory does not exist, is empty, or
    /// holds the empty database of a `create` interrupted before its first write;
    /// [`StorageError::Locked`] if it is already open (by another process or by another
    /// `RocksStore` in this one); [`StorageError::Corrupt`] if it holds files that are
    /// not a whole tenure store (no `CURRENT`, damaged records, another database, a
    /// format version above 3).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StorageError> {
        let path = path.as_ref().to_path_buf();
        match fs::metadata(&path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(StorageError::Io {
                    path,
                    detail: "not a directory".to_string(),
                })
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(StorageError::Missing { path })
            }
            Err(e) => {
                return Err(StorageError::from_io(
                    &path,
                    "cannot read the directory",
                    &e,
                ))
            }
        }
        if inspect_folder(&path)? == Folder::Empty {
            return Err(StorageError::Missing { path });
        }
        // Read what the disk holds, not what a failed fsync left in the page cache.
        drop_cached(&path);
        let db = open_db(&path, false)?;
        match load(&path, &db)? {
            Some((state, version)) => {
                let node = read_node(&path, &db)?;
                Ok(Self::from_parts(path, db, node, state, version))
            }
            None => Err(StorageError::Missing { path }),
        }
    }

    /// How many writes this handle's store has made synced (an fsync each) and unsynced
    /// (commit-index moves), since it was opened, through any of its handles:
    /// [`write`](RaftStore::write)s, [`write_all`](RaftStore::write_all)s (one each,
    /// however many groups it wrote), [`found_election`](RaftStore::found_election)s and
    /// [`remove_election`](RaftStore::remove_election)s (synced). Compactions and writes
    /// that changed nothing are not counted.
    pub fn write_counts(&self) -> (u64, u64) {
        let c = &self.shared.stats;
        (
            c.synced.load(std::sync::atomic::Ordering::Relaxed),
            c.unsynced.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The election this handle is of: 0 for the store itself (the root election).
    pub fn election_id(&self) -> u32 {
        self.group.id
    }

    fn from_parts(path: PathBuf, db: DB, node: NodeId, state: LogState<u64>, version: u32) -> Self {
        RocksStore {
            shared: Arc::new(Shared {
                path,
                node,
                stats: WriteCounts::default(),
                db,
                registry: Mutex::new(Registry {
                    groups: HashMap::new(),
                    version,
                    on_disk: None,
                }),
                writing: Mutex::new(()),
            }),
            group: Arc::new(Group {
                id: 0,
                keys: Keys::root(),
                state: RwLock::new(GroupState::new(state)),
            }),
        }
    }

    fn handle(&self, group: Arc<Group>) -> Self {
        RocksStore {
            shared: Arc::clone(&self.shared),
            group,
        }
    }

    /// The cache is only changed after a successful write, by code that does not
    /// panic, so a poisoned lock still guards a consistent state.
    fn read_state(&self) -> RwLockReadGuard<'_, GroupState> {
        self.group
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// This store's turn to write (nothing panics while it is held but the write).
    fn writing(&self) -> MutexGuard<'_, ()> {
        self.shared
            .writing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, GroupState> {
        self.group
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Only changed by code that does not panic between its checks and its changes.
    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.shared
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn rocks_err(&self, err: rocksdb::Error) -> StorageError {
        StorageError::from_rocks(&self.shared.path, err)
    }

    /// Errors of this handle's group name it (a named election; the root's stay as
    /// they were).
    fn named(&self, err: StorageError) -> StorageError {
        err.in_election(self.group.id)
    }

    /// Writes `batch`, synced or not, and counts it.
    fn write_batch(&self, batch: WriteBatch, sync: bool) -> Result<(), StorageError> {
        let shared = &self.shared;
        if sync {
            write_synced(&shared.path, &shared.db, batch)?;
        } else {
            shared.db.write(batch).map_err(|e| self.rocks_err(e))?;
        }
        shared.stats.count(sync);
        Ok(())
    }

    /// Which elections the database holds keys of ([`Registry::on_disk`]), scanned on
    /// first use.
    fn on_disk<'a>(&self, registry: &'a mut Registry) -> Result<&'a mut ElectionIds, StorageError> {
        if registry.on_disk.is_none() {
            registry.on_disk = Some(self.election_ids()?);
        }
        Ok(registry.on_disk.get_or_insert_with(ElectionIds::default))
    }

    /// Writes a new election's state (synced) and registers its cache, unless `id` is
    /// the root's, live or removed.
    fn add_election(
        &self,
        id: u32,
        what: &str,
        log: LogState<u64>,
        snapshot_data: &[u8],
    ) -> Result<Self, StorageError> {
        if id == 0 {
            return Err(refused_id_zero(what));
        }
        let mut registry = self.registry();
        let on_disk = self.on_disk(&mut registry)?;
        if on_disk.removed.contains(&id) {
            return Err(StorageError::ElectionRemoved { id });
        }
        if on_disk.live.contains(&id) || registry.groups.contains_key(&id) {
            return Err(StorageError::invalid(format!(
                "cannot {what} named election {id}: it is already founded in this store"
            )));
        }
        let keys = Keys::election(id);
        let mut batch = WriteBatch::default();
        Self::upgrade_in(&registry, &mut batch);
        keys.add_state(&mut batch, &log, snapshot_data)?;
        // Not synced (design, section 11, "Storage"): nothing is promised from a founding
        // before a later synced write, which the one WAL orders after it; one lost in a
        // crash is made again from the catalog at start.
        self.write_batch(batch, false)?;
        registry.version = ELECTIONS_VERSION;
        if let Some(ids) = registry.on_disk.as_mut() {
            ids.live.insert(id);
        }
        let group = Arc::new(Group {
            id,
            keys,
            state: RwLock::new(GroupState::new(log)),
        });
        registry.groups.insert(id, Arc::clone(&group));
        Ok(self.handle(group))
    }

    /// Adds the version-3 metadata record to `batch` if the disk is still at version 2.
    fn upgrade_in(registry: &Registry, batch: &mut WriteBatch) {
        if registry.version < ELECTIONS_VERSION {
            batch.put(META_KEY, meta_record(ELECTIONS_VERSION));
        }
    }
}

impl raft::Storage for RocksStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let state = self.read_state();
        let log = state.live(self.group.id)?;
        Ok(RaftState::new(
            log.hard_state.clone(),
            log.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let path = &self.shared.path;
        let keys = &self.group.keys;
        // Held while reading, so no write changes the log underneath.
        let state = self.read_state();
        let log = state.live(self.group.id)?;
        log.check_range(low, high)?;
        let mut out = Vec::new();
        if low == high {
            return Ok(out);
        }
        let mut limit = SizeLimit::new(max_size.into());
        if let Some(tail) = state.tail_range(low, high) {
            for entry in tail {
                if !limit.admit(entry) {
                    break;
                }
                out.push(entry.clone());
            }
            return Ok(out);
        }
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(keys.log(high));
        let mut iter = self.shared.db.raw_iterator_opt(opts);
        iter.seek(keys.log(low));
        let mut expected = low;
        while expected < high {
            let Some((key, value)) = iter.item() else {
                break;
            };
            if key != keys.log(expected) {
                break;
            }
            let entry: Entry = decode(path, key, value).map_err(|e| self.named(e))?;
            if entry.index != expected {
                return Err(self
                    .named(StorageError::corrupt(
                        path,
                        format!("log key {expected} holds entry {}", entry.index),
                    ))
                    .into());
            }
            if !limit.admit(&entry) {
                return Ok(out);
            }
            out.push(entry);
            expected += 1;
            iter.next();
        }
        iter.status().map_err(|e| self.rocks_err(e))?;
        if expected < high {
            return Err(self
                .named(StorageError::corrupt(
                    path,
                    format!("log entry {expected} is missing"),
                ))
                .into());
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.read_state().live(self.group.id)?.term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.read_state().live(self.group.id)?.first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.read_state().live(self.group.id)?.last_index())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let state = self.read_state();
        let log = state.live(self.group.id)?;
        if log.snapshot.index < request_index {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let data = self
            .shared
            .db
            .get(&self.group.keys.snapshot_data)
            .map_err(|e| self.rocks_err(e))?
            .ok_or_else(|| {
                self.named(StorageError::corrupt(
                    &self.shared.path,
                    "snapshot data is missing",
                ))
            })?;
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(log.snapshot.clone());
        snapshot.data = Bytes::from(data);
        Ok(snapshot)
    }
}

impl RaftStore for RocksStore {
    fn write(&self, write: ReadyWrite) -> Result<(), StorageError> {
        // As in `write_all`: the group's lock is not held across the disk write.
        let _writing = self.writing();
        let plan = self
            .read_state()
            .live(self.group.id)?
            .plan_write(write)
            .map_err(|e| self.named(e))?;
        if plan.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        self.group
            .keys
            .add_plan(&mut batch, &plan)
            .map_err(|e| self.named(e))?;
        self.write_batch(batch, plan.sync)?;
        self.write_state().apply_write(plan);
        Ok(())
    }

    fn compact(
        &self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), StorageError> {
        let keys = &self.group.keys;
        let _writing = self.writing();
        let mut state = self.write_state();
        let mut snapshot = state
            .live(self.group.id)?
            .plan_compact(index, conf_state, data)
            .map_err(|e| self.named(e))?;
        let mut batch = WriteBatch::default();
        // index <= commit <= last index <= MAX_INDEX, so index + 1 does not overflow.
        batch.delete_range(keys.log(0), keys.log(index + 1));
        batch.put(&keys.snapshot_meta, encode(snapshot.get_metadata())?);
        batch.put(
            &keys.conf_state,
            encode(snapshot.get_metadata().get_conf_state())?,
        );
        batch.put(&keys.snapshot_data, &snapshot.data);
        write_synced(&self.shared.path, &self.shared.db, batch)?;
        state.log.apply_compact(snapshot.take_metadata());
        state.compacted(index);
        Ok(())
    }

    fn hard_state(&self) -> HardState {
        self.read_state().log.hard_state.clone()
    }

    fn conf_state(&self) -> ConfState {
        self.read_state().log.conf_state.clone()
    }

    fn node_id(&self) -> Option<NodeId> {
        Some(self.shared.node)
    }

    fn founding_nonces(&self) -> Result<std::collections::BTreeMap<NodeId, u128>, StorageError> {
        founding::read(&self.shared.path, &self.shared.db)
    }

    fn probe(&self) -> Result<(), StorageError> {
        disk::probe(&self.shared.path, &self.shared.db)
    }

    fn record_founding_nonces(
        &self,
        nonces: &std::collections::BTreeMap<NodeId, u128>,
    ) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        founding::put(&mut batch, nonces);
        // Once per store, before its founding snapshot; not one of the counted writes.
        write_synced(&self.shared.path, &self.shared.db, batch)
    }

    fn election(&self, id: u32) -> Result<Option<Self>, StorageError> {
        if id == 0 {
            return Err(refused_id_zero("open"));
        }
        let mut registry = self.registry();
        if let Some(group) = registry.groups.get(&id) {
            return Ok(Some(self.handle(Arc::clone(group))));
        }
        let on_disk = self.on_disk(&mut registry)?;
        if on_disk.removed.contains(&id) || !on_disk.live.contains(&id) {
            return Ok(None);
        }
        let keys = Keys::election(id);
        let log =
            load_group(&self.shared.path, &self.shared.db, &keys).map_err(|e| e.in_election(id))?;
        let group = Arc::new(Group {
            id,
            keys,
            state: RwLock::new(GroupState::new(log)),
        });
        registry.groups.insert(id, Arc::clone(&group));
        Ok(Some(self.handle(group)))
    }

    fn election_ids(&self) -> Result<ElectionIds, StorageError> {
        let path = &self.shared.path;
        let mut ids = ElectionIds::default();
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(ELECTIONS_END);
        let mut iter = self.shared.db.raw_iterator_opt(opts);
        iter.seek(ELECTIONS_PREFIX);
        while let Some(key) = iter.key() {
            let parsed = key
                .strip_prefix(ELECTIONS_PREFIX)
                .filter(|rest| rest.len() > 5 && rest[4] == b'/')
                .and_then(|rest| Some((<[u8; 4]>::try_from(&rest[..4]).ok()?, &rest[5..])));
            let Some((id, suffix)) = parsed else {
                return Err(StorageError::corrupt(
                    path,
                    format!("malformed named election key {}", key.escape_ascii()),
                ));
            };
            let id = u32::from_be_bytes(id);
            if id == 0 {
                return Err(StorageError::corrupt(
                    path,
                    format!("a named election key with id 0: {}", key.escape_ascii()),
                ));
            }
            if suffix == REMOVED {
                ids.removed.insert(id);
            } else {
                ids.live.insert(id);
            }
            if suffix.starts_with(b"log/") {
                // Skip the rest of the election's log.
                iter.seek(Keys::election(id).log_end);
            } else {
                iter.next();
            }
        }
        iter.status().map_err(|e| self.rocks_err(e))?;
        if let Some(id) = ids.live.intersection(&ids.removed).next() {
            return Err(StorageError::corrupt(
                path,
                format!("named election {id}: its tombstone lies beside records of its log"),
            ));
        }
        Ok(ids)
    }

    fn found_election(
        &self,
        id: u32,
        term: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<Self, StorageError> {
        self.add_election(id, "found", LogState::founded(term, conf_state), &data)
    }

    fn join_election(&self, id: u32, initial: ConfState) -> Result<Self, StorageError> {
        self.add_election(id, "create", LogState::new(initial), b"")
    }

    fn remove_election(&self, id: u32) -> Result<(), StorageError> {
        if id == 0 {
            return Err(refused_id_zero("remove"));
        }
        let _writing = self.writing();
        let mut registry = self.registry();
        let group = registry.groups.get(&id).cloned();
        // Held across the write: no write of the election slips in after the delete.
        let mut state = group
            .as_ref()
            .map(|g| g.state.write().unwrap_or_else(PoisonError::into_inner));
        let mut batch = WriteBatch::default();
        Self::upgrade_in(&registry, &mut batch);
        batch.delete_range(election_prefix(id), election_end(id));
        batch.put(tombstone_key(id), b"");
        self.write_batch(batch, true)?;
        registry.version = ELECTIONS_VERSION;
        if let Some(ids) = registry.on_disk.as_mut() {
            ids.live.remove(&id);
            ids.removed.insert(id);
        }
        if let Some(state) = state.as_mut() {
            state.removed = true;
            state.log = LogState::new(ConfState::default());
            state.tail.clear();
        }
        drop(state);
        registry.groups.remove(&id);
        Ok(())
    }

    fn write_all(parts: Vec<(Self, ReadyWrite)>) -> Result<(), StorageError> {
        let Some((first, _)) = parts.first() else {
            return Ok(());
        };
        let first = first.clone();
        for (i, (store, _)) in parts.iter().enumerate() {
            if !Arc::ptr_eq(&store.shared, &first.shared) {
                return Err(StorageError::invalid(format!(
                    "write_all: part {i} (election {}) is a handle of another store \
                     (at {}; part 0's is at {})",
                    store.group.id,
                    store.shared.path.display(),
                    first.shared.path.display()
                )));
            }
        }
        // In id order (the root first), to find a group given twice; the groups are
        // disjoint, so the order changes nothing on disk.
        let mut parts = parts;
        parts.sort_by_key(|(store, _)| store.group.id);
        if let Some(pair) = parts
            .windows(2)
            .find(|pair| pair[0].0.group.id == pair[1].0.group.id)
        {
            return Err(StorageError::invalid(format!(
                "write_all: two parts for election {}; one part per group",
                pair[0].0.group.id
            )));
        }
        let (stores, writes): (Vec<Self>, Vec<ReadyWrite>) = parts.into_iter().unzip();
        // Writes take turns; the groups' locks are held to plan and to update the cache,
        // not across the disk write, so that a reader (raft-rs, below what the driver
        // staged) is not held up by a stalled disk (`docs/design.md`, section 15). Until
        // the cache is updated a reader sees what the disk held before: the batch's own
        // indices are read from the driver's overlay (`Staged`), not from here.
        let _writing = first.writing();
        // Validate every part before writing anything.
        let mut plans = Vec::with_capacity(writes.len());
        for (store, write) in stores.iter().zip(writes) {
            let id = store.group.id;
            let plan = store
                .read_state()
                .live(id)?
                .plan_write(write)
                .map_err(|e| e.in_part(id))?;
            plans.push(plan);
        }
        let mut batch = WriteBatch::default();
        let mut sync = false;
        let mut any = false;
        for (store, plan) in stores.iter().zip(&plans) {
            if plan.is_empty() {
                continue;
            }
            store
                .group
                .keys
                .add_plan(&mut batch, plan)
                .map_err(|e| e.in_part(store.group.id))?;
            sync |= plan.sync;
            any = true;
        }
        if any {
            first.write_batch(batch, sync)?;
        }
        for (store, plan) in stores.iter().zip(plans) {
            store.write_state().apply_write(plan);
        }
        Ok(())
    }
}
