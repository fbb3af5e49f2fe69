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
//! could take back, commit-index moves aside. [`RocksStore::write_counts`] counts synced
//! and unsynced batches.
//!
//! # On-disk format (version 2)
//!
//! One RocksDB database, default column family. Values are protobuf (raft-rs's
//! `eraftpb` messages) unless noted.
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
//!
//! Entries are exactly the indexes `snapshot index + 1 ..= last index`, without holes.
//! Opening checks all of this (and that the commit index lies inside the log, which
//! raft-rs assumes) and reports anything else as [`StorageError::Corrupt`], instead of
//! letting raft-rs panic on it later.
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

use std::collections::VecDeque;
use std::fmt;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState};
use rocksdb::{DBCompressionType, Options, ReadOptions, WriteBatch, WriteOptions, DB};

use super::model::{LogState, SizeLimit, MAX_INDEX};
use super::{RaftStore, ReadyWrite, StorageError};
use crate::transport::NodeId;

const META_KEY: &[u8] = b"tenure/meta";
const NODE_KEY: &[u8] = b"tenure/node";
const HARD_STATE_KEY: &[u8] = b"tenure/hard_state";
const CONF_STATE_KEY: &[u8] = b"tenure/conf_state";
const SNAPSHOT_META_KEY: &[u8] = b"tenure/snapshot_meta";
const SNAPSHOT_DATA_KEY: &[u8] = b"tenure/snapshot_data";
const LOG_PREFIX: &[u8] = b"tenure/log/";
/// The first key after every log key (`'0'` follows `'/'`).
const LOG_END: &[u8] = b"tenure/log0";

const MAGIC: &[u8] = b"tenure-raft-store";
const FORMAT_VERSION: u32 = 2;

/// A [`RaftStore`] on RocksDB: the durable state of one node.
///
/// `Clone` is cheap and shares the same open database, so the driver can keep one
/// handle and give raft-rs another. The database (and its lock on the directory) is
/// closed when the last handle is dropped.
#[derive(Clone)]
pub struct RocksStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The data directory, named in every error.
    path: PathBuf,
    /// The node the store was created for.
    node: NodeId,
    /// Batches written synced and unsynced ([`RocksStore::write_counts`]).
    stats: WriteCounts,
    /// The open database.
    db: DB,
    /// What the disk holds, minus entry payloads and snapshot data. Held for writing
    /// across a whole write (including the sync), so readers never see the disk and
    /// the cache disagree.
    state: RwLock<LogState<u64>>,
}

impl fmt::Debug for RocksStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.inner.path)
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
        let mut meta = MAGIC.to_vec();
        meta.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
        batch.put(META_KEY, meta);
        batch.put(NODE_KEY, node.to_be_bytes());
        batch.put(HARD_STATE_KEY, encode(&state.hard_state)?);
        batch.put(CONF_STATE_KEY, encode(&state.conf_state)?);
        batch.put(SNAPSHOT_META_KEY, encode(&state.snapshot)?);
        batch.put(SNAPSHOT_DATA_KEY, b"");
        write_synced(&path, &db, batch)?;
        Ok(Self::from_parts(path, db, node, state))
    }

    /// Opens the store in `path`, as the last successful write left it. Writes nothing
    /// before the store is known to be whole.
    ///
    /// Errors: [`StorageError::Missing`] if the directory does not exist, is empty, or
    /// holds the empty database of a `create` interrupted before its first write;
    /// [`StorageError::Locked`] if it is already open (by another process or by another
    /// `RocksStore` in this one); [`StorageError::Corrupt`] if it holds files that are
    /// not a whole tenure store (no `CURRENT`, damaged records, another database).
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
        let db = open_db(&path, false)?;
        match load(&path, &db)? {
            Some(state) => {
                let node = read_node(&path, &db)?;
                Ok(Self::from_parts(path, db, node, state))
            }
            None => Err(StorageError::Missing { path }),
        }
    }

    /// How many [`write`](RaftStore::write)s this handle's store has made synced (an
    /// fsync each) and unsynced (commit-index moves), since it was opened.
    pub fn write_counts(&self) -> (u64, u64) {
        let c = &self.inner.stats;
        (
            c.synced.load(std::sync::atomic::Ordering::Relaxed),
            c.unsynced.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn from_parts(path: PathBuf, db: DB, node: NodeId, state: LogState<u64>) -> Self {
        RocksStore {
            inner: Arc::new(Inner {
                path,
                node,
                stats: WriteCounts::default(),
                db,
                state: RwLock::new(state),
            }),
        }
    }

    /// The cache is only changed after a successful write, by code that does not
    /// panic, so a poisoned lock still guards a consistent state.
    fn read_state(&self) -> RwLockReadGuard<'_, LogState<u64>> {
        self.inner
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, LogState<u64>> {
        self.inner
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn rocks_err(&self, err: rocksdb::Error) -> StorageError {
        StorageError::from_rocks(&self.inner.path, err)
    }
}

impl raft::Storage for RocksStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let state = self.read_state();
        Ok(RaftState::new(
            state.hard_state.clone(),
            state.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let path = &self.inner.path;
        // Held while reading, so no write changes the log underneath.
        let state = self.read_state();
        state.check_range(low, high)?;
        let mut out = Vec::new();
        if low == high {
            return Ok(out);
        }
        let mut limit = SizeLimit::new(max_size.into());
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(log_key(high));
        let mut iter = self.inner.db.raw_iterator_opt(opts);
        iter.seek(log_key(low));
        let mut expected = low;
        while expected < high {
            let Some((key, value)) = iter.item() else {
                break;
            };
            if key != log_key(expected) {
                break;
            }
            let entry: Entry = decode(path, key, value)?;
            if entry.index != expected {
                return Err(StorageError::corrupt(
                    path,
                    format!("log key {expected} holds entry {}", entry.index),
                )
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
            return Err(
                StorageError::corrupt(path, format!("log entry {expected} is missing")).into(),
            );
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.read_state().term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.read_state().first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.read_state().last_index())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let state = self.read_state();
        if state.snapshot.index < request_index {
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let data = self
            .inner
            .db
            .get(SNAPSHOT_DATA_KEY)
            .map_err(|e| self.rocks_err(e))?
            .ok_or_else(|| StorageError::corrupt(&self.inner.path, "snapshot data is missing"))?;
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(state.snapshot.clone());
        snapshot.data = Bytes::from(data);
        Ok(snapshot)
    }
}

impl RaftStore for RocksStore {
    fn write(&self, write: ReadyWrite) -> Result<(), StorageError> {
        let mut state = self.write_state();
        let plan = state.plan_write(write)?;
        if plan.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        if let Some(snapshot) = &plan.snapshot {
            batch.delete_range(LOG_PREFIX, LOG_END);
            batch.put(SNAPSHOT_META_KEY, encode(snapshot.get_metadata())?);
            batch.put(SNAPSHOT_DATA_KEY, &snapshot.data);
        }
        if let Some(from) = plan.truncate_from {
            batch.delete_range(log_key(from), LOG_END.to_vec());
        }
        for entry in &plan.entries {
            batch.put(log_key(entry.index), encode(entry)?);
        }
        if let Some(hs) = &plan.hard_state {
            batch.put(HARD_STATE_KEY, encode(hs)?);
        }
        if let Some(cs) = &plan.conf_state {
            batch.put(CONF_STATE_KEY, encode(cs)?);
        }
        if plan.sync {
            write_synced(&self.inner.path, &self.inner.db, batch)?;
        } else {
            self.inner
                .db
                .write(batch)
                .map_err(|e| StorageError::from_rocks(&self.inner.path, e))?;
        }
        self.inner.stats.count(plan.sync);
        state.apply_write(plan);
        Ok(())
    }

    fn compact(
        &self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), StorageError> {
        let mut state = self.write_state();
        let mut snapshot = state.plan_compact(index, conf_state, data)?;
        let mut batch = WriteBatch::default();
        // index <= commit <= last index <= MAX_INDEX, so index + 1 does not overflow.
        batch.delete_range(log_key(0), log_key(index + 1));
        batch.put(SNAPSHOT_META_KEY, encode(snapshot.get_metadata())?);
        batch.put(
            CONF_STATE_KEY,
            encode(snapshot.get_metadata().get_conf_state())?,
        );
        batch.put(SNAPSHOT_DATA_KEY, &snapshot.data);
        write_synced(&self.inner.path, &self.inner.db, batch)?;
        state.apply_compact(snapshot.take_metadata());
        Ok(())
    }

    fn hard_state(&self) -> HardState {
        self.read_state().hard_state.clone()
    }

    fn conf_state(&self) -> ConfState {
        self.read_state().conf_state.clone()
    }

    fn node_id(&self) -> Option<NodeId> {
        Some(self.inner.node)
    }
}

/// Synced and unsynced writes of a store.
#[derive(Debug, Default)]
struct WriteCounts {
    synced: std::sync::atomic::AtomicU64,
    unsynced: std::sync::atomic::AtomicU64,
}

impl WriteCounts {
    fn count(&self, synced: bool) {
        let c = if synced { &self.synced } else { &self.unsynced };
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a data folder holds, as far as can be told without opening it.
#[derive(Debug, PartialEq, Eq)]
enum Folder {
    /// Nothing (or only a mounted volume's `lost+found`).
    Empty,
    /// A RocksDB database (it has `CURRENT`); whether it is a tenure store is for `load`.
    Database,
}

/// Looks at the folder's entries. Files without RocksDB's `CURRENT` are not a whole
/// store: `Corrupt`, and nothing is written (RocksDB's own open would create a new
/// `CURRENT` over the old files, and a second start would then find an empty store).
fn inspect_folder(path: &Path) -> Result<Folder, StorageError> {
    let entries = fs::read_dir(path)
        .map_err(|e| StorageError::from_io(path, "cannot list the directory", &e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| StorageError::from_io(path, "cannot list the directory", &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "lost+found" {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Ok(Folder::Empty);
    }
    if names.iter().any(|n| n == "CURRENT") {
        return Ok(Folder::Database);
    }
    names.sort();
    let shown: Vec<&str> = names.iter().take(6).map(String::as_str).collect();
    let more = if names.len() > shown.len() {
        format!(" and {} more", names.len() - shown.len())
    } else {
        String::new()
    };
    Err(StorageError::corrupt(
        path,
        format!(
            "the folder is not empty but holds no whole tenure store: RocksDB's CURRENT file \
             is missing (found {}{more}). It was damaged or copied in part, or it is not a data \
             folder. Refusing to create a new store over it: a node that forgot its vote and \
             log could vote twice in a term. Restore the folder from a backup, or remove it \
             and replace the node by a new member (README: a replacement machine)",
            shown.join(", ")
        ),
    ))
}

/// The `tenure/node` record.
fn read_node(path: &Path, db: &DB) -> Result<NodeId, StorageError> {
    let value = db
        .get(NODE_KEY)
        .map_err(|e| StorageError::from_rocks(path, e))?
        .ok_or_else(|| StorageError::corrupt(path, "the node record (tenure/node) is missing"))?;
    let bytes: [u8; 8] = value
        .as_slice()
        .try_into()
        .map_err(|_| StorageError::corrupt(path, "the node record (tenure/node) is malformed"))?;
    match u64::from_be_bytes(bytes) {
        0 => Err(StorageError::corrupt(path, "the node record names node 0")),
        id => Ok(id),
    }
}

fn log_key(index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(LOG_PREFIX.len() + 8);
    key.extend_from_slice(LOG_PREFIX);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

fn parse_log_key(key: &[u8]) -> Option<u64> {
    let index: [u8; 8] = key.strip_prefix(LOG_PREFIX)?.try_into().ok()?;
    Some(u64::from_be_bytes(index))
}

fn open_db(path: &Path, create: bool) -> Result<DB, StorageError> {
    let mut opts = Options::default();
    opts.create_if_missing(create);
    opts.set_paranoid_checks(true);
    // No compression library is built in; say so rather than rely on the fallback.
    opts.set_compression_type(DBCompressionType::None);
    // Disk use. Compaction deletes log entries, but RocksDB gives the space back only
    // when the memtable is flushed, which also retires the write-ahead log behind it.
    // With the default 64 MiB memtable a node's WAL grew by ~520 bytes per leadership
    // change (entries, hard states, a snapshot per compaction) and had not been flushed
    // once after 100 000 changes: 50 MiB per node (`cargo bench --bench disk`). The live
    // data is well under 1 MiB: flush at 1 MiB, so WAL plus tables stay a few MiB.
    opts.set_write_buffer_size(1 << 20);
    // RocksDB's own info log: roll it at 1 MiB (its periodic stats dumps otherwise grow
    // one file for as long as the process runs) and keep a few, not one per restart
    // forever.
    opts.set_max_log_file_size(1 << 20);
    opts.set_keep_log_file_num(4);
    DB::open(&opts, path).map_err(|e| StorageError::from_rocks(path, e))
}

fn write_synced(path: &Path, db: &DB, batch: WriteBatch) -> Result<(), StorageError> {
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    db.write_opt(batch, &opts)
        .map_err(|e| StorageError::from_rocks(path, e))
}

fn encode(message: &impl protobuf::Message) -> Result<Vec<u8>, StorageError> {
    message
        .write_to_bytes()
        .map_err(|e| StorageError::invalid(format!("cannot encode a record: {e}")))
}

fn decode<M: protobuf::Message>(path: &Path, key: &[u8], value: &[u8]) -> Result<M, StorageError> {
    M::parse_from_bytes(value).map_err(|e| {
        StorageError::corrupt(
            path,
            format!("record {} does not decode: {e}", key.escape_ascii()),
        )
    })
}

fn get_required<M: protobuf::Message>(path: &Path, db: &DB, key: &[u8]) -> Result<M, StorageError> {
    match db.get(key).map_err(|e| StorageError::from_rocks(path, e))? {
        Some(value) => decode(path, key, &value),
        None => Err(StorageError::corrupt(
            path,
            format!("record {} is missing", key.escape_ascii()),
        )),
    }
}

/// Reads and checks the whole store. `None`: an empty database, which is what a
/// `create` interrupted before its first write leaves behind.
fn load(path: &Path, db: &DB) -> Result<Option<LogState<u64>>, StorageError> {
    let rocks = |e| StorageError::from_rocks(path, e);
    let Some(meta) = db.get(META_KEY).map_err(rocks)? else {
        let mut iter = db.raw_iterator();
        iter.seek_to_first();
        if iter.valid() {
            return Err(StorageError::corrupt(
                path,
                "not a tenure store: a RocksDB database without tenure metadata",
            ));
        }
        iter.status().map_err(rocks)?;
        return Ok(None);
    };
    check_meta(path, &meta)?;

    let hard_state: HardState = get_required(path, db, HARD_STATE_KEY)?;
    let conf_state: ConfState = get_required(path, db, CONF_STATE_KEY)?;
    let snapshot: SnapshotMetadata = get_required(path, db, SNAPSHOT_META_KEY)?;
    if db.get_pinned(SNAPSHOT_DATA_KEY).map_err(rocks)?.is_none() {
        return Err(StorageError::corrupt(path, "snapshot data is missing"));
    }
    if snapshot.index > MAX_INDEX {
        return Err(StorageError::corrupt(path, "snapshot index out of range"));
    }

    let mut log = VecDeque::new();
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(LOG_END);
    let mut iter = db.raw_iterator_opt(opts);
    iter.seek(LOG_PREFIX);
    let mut expected = snapshot.index + 1;
    while let Some((key, value)) = iter.item() {
        let index = parse_log_key(key).ok_or_else(|| {
            StorageError::corrupt(path, format!("malformed log key {}", key.escape_ascii()))
        })?;
        if index != expected {
            return Err(StorageError::corrupt(
                path,
                format!(
                    "log entry {index} found where entry {expected} was expected (snapshot index {})",
                    snapshot.index
                ),
            ));
        }
        let entry: Entry = decode(path, key, value)?;
        if entry.index != index {
            return Err(StorageError::corrupt(
                path,
                format!("log key {index} holds entry {}", entry.index),
            ));
        }
        log.push_back(entry.term);
        expected = index
            .checked_add(1)
            .ok_or_else(|| StorageError::corrupt(path, "log index out of range"))?;
        iter.next();
    }
    iter.status().map_err(rocks)?;

    let state = LogState {
        hard_state,
        conf_state,
        snapshot,
        log,
    };
    state
        .check_restored()
        .map_err(|detail| StorageError::corrupt(path, detail))?;
    Ok(Some(state))
}

fn check_meta(path: &Path, meta: &[u8]) -> Result<(), StorageError> {
    let version = meta
        .strip_prefix(MAGIC)
        .and_then(|rest| <[u8; 4]>::try_from(rest).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| {
            StorageError::corrupt(path, "not a tenure store: unexpected metadata record")
        })?;
    if version == 1 {
        return Err(StorageError::corrupt(
            path,
            "store format version 1, written before stores recorded their node and group; \
             this build reads version 2. Remove the folder and add the node back as a new \
             member, or found the group again",
        ));
    }
    if version != FORMAT_VERSION {
        return Err(StorageError::corrupt(
            path,
            format!("store format version {version}; this build reads version {FORMAT_VERSION}"),
        ));
    }
    Ok(())
}
