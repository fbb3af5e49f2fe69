//! The free functions of [`RocksStore`](super::RocksStore): keys of named elections, the
//! metadata record, looking at a folder, opening the database, reading and checking the
//! stored records (`load`), and the write counters.

use super::*;

/// `tenure/e/<id as u32, big endian>/`.
pub(super) fn election_prefix(id: u32) -> Vec<u8> {
    [ELECTIONS_PREFIX, &id.to_be_bytes(), b"/"].concat()
}

/// The first key after every key of election `id`: `tenure/e/<id>0`.
pub(super) fn election_end(id: u32) -> Vec<u8> {
    [ELECTIONS_PREFIX, &id.to_be_bytes(), b"0"].concat()
}

pub(super) fn tombstone_key(id: u32) -> Vec<u8> {
    [election_prefix(id).as_slice(), REMOVED].concat()
}

pub(super) fn meta_record(version: u32) -> Vec<u8> {
    let mut meta = MAGIC.to_vec();
    meta.extend_from_slice(&version.to_be_bytes());
    meta
}

pub(super) fn refused_id_zero(what: &str) -> StorageError {
    StorageError::invalid(format!(
        "cannot {what} election 0: id 0 is the root election, the store itself"
    ))
}

/// Synced and unsynced writes of a store.
#[derive(Debug, Default)]
pub(super) struct WriteCounts {
    pub(super) synced: std::sync::atomic::AtomicU64,
    pub(super) unsynced: std::sync::atomic::AtomicU64,
}

impl WriteCounts {
    pub(super) fn count(&self, synced: bool) {
        let c = if synced { &self.synced } else { &self.unsynced };
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a data folder holds, as far as can be told without opening it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Folder {
    /// Nothing (or only a mounted volume's `lost+found`).
    Empty,
    /// A RocksDB database (it has `CURRENT`); whether it is a tenure store is for `load`.
    Database,
}

/// Looks at the folder's entries. Files without RocksDB's `CURRENT` are not a whole
/// store: `Corrupt`, and nothing is written (RocksDB's own open would create a new
/// `CURRENT` over the old files, and a second start would then find an empty store).
pub(super) fn inspect_folder(path: &Path) -> Result<Folder, StorageError> {
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
pub(super) fn read_node(path: &Path, db: &DB) -> Result<NodeId, StorageError> {
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

pub(super) fn open_db(path: &Path, create: bool) -> Result<DB, StorageError> {
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

/// Makes the entry of `path` in its parent folder durable: a new data folder survives a
/// power loss only once its parent is synced (POSIX; ext4 and XFS happen to commit it
/// with the store's first synced write, other file systems need not). RocksDB syncs the
/// folder's own entries, not the folder's name.
pub(super) fn sync_parent(path: &Path) -> Result<(), StorageError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| StorageError::from_io(path, "cannot sync the folder that holds it", &e))
}

pub(super) fn write_synced(path: &Path, db: &DB, batch: WriteBatch) -> Result<(), StorageError> {
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    db.write_opt(batch, &opts)
        .map_err(|e| StorageError::from_rocks(path, e))
}

/// The disk probe (`RaftStore::probe`): one synced write-ahead-log record and nothing
/// else, a delete of a key that is never written.
pub(super) fn probe(path: &Path, db: &DB) -> Result<(), StorageError> {
    let mut batch = WriteBatch::default();
    batch.delete(b"tenure/disk_probe");
    write_synced(path, db, batch)
}

pub(super) fn encode(message: &impl protobuf::Message) -> Result<Vec<u8>, StorageError> {
    message
        .write_to_bytes()
        .map_err(|e| StorageError::invalid(format!("cannot encode a record: {e}")))
}

pub(super) fn decode<M: protobuf::Message>(
    path: &Path,
    key: &[u8],
    value: &[u8],
) -> Result<M, StorageError> {
    M::parse_from_bytes(value).map_err(|e| {
        StorageError::corrupt(
            path,
            format!("record {} does not decode: {e}", key.escape_ascii()),
        )
    })
}

pub(super) fn get_required<M: protobuf::Message>(
    path: &Path,
    db: &DB,
    key: &[u8],
) -> Result<M, StorageError> {
    match db.get(key).map_err(|e| StorageError::from_rocks(path, e))? {
        Some(value) => decode(path, key, &value),
        None => Err(StorageError::corrupt(
            path,
            format!("record {} is missing", key.escape_ascii()),
        )),
    }
}

/// Reads and checks the whole store (the root's records; elections are checked when
/// opened). `None`: an empty database, which is what a `create` interrupted before its
/// first write leaves behind. Also returns the format version.
pub(super) fn load(path: &Path, db: &DB) -> Result<Option<(LogState<u64>, u32)>, StorageError> {
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
    let version = check_meta(path, &meta)?;
    Ok(Some((load_group(path, db, &Keys::root())?, version)))
}

/// Reads and checks one group's records.
pub(super) fn load_group(path: &Path, db: &DB, keys: &Keys) -> Result<LogState<u64>, StorageError> {
    let rocks = |e| StorageError::from_rocks(path, e);
    let hard_state: HardState = get_required(path, db, &keys.hard_state)?;
    let conf_state: ConfState = get_required(path, db, &keys.conf_state)?;
    let snapshot: SnapshotMetadata = get_required(path, db, &keys.snapshot_meta)?;
    if db.get_pinned(&keys.snapshot_data).map_err(rocks)?.is_none() {
        return Err(StorageError::corrupt(path, "snapshot data is missing"));
    }
    if snapshot.index > MAX_INDEX {
        return Err(StorageError::corrupt(path, "snapshot index out of range"));
    }

    let mut log = VecDeque::new();
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(keys.log_end.clone());
    let mut iter = db.raw_iterator_opt(opts);
    iter.seek(&keys.log_prefix);
    let mut expected = snapshot.index + 1;
    while let Some((key, value)) = iter.item() {
        let index = keys.parse_log(key).ok_or_else(|| {
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
    Ok(state)
}

/// Checks the metadata record and returns the format version (2 or 3).
pub(super) fn check_meta(path: &Path, meta: &[u8]) -> Result<u32, StorageError> {
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
             this build reads versions 2 and 3. Remove the folder and add the node back as a \
             new member, or found the group again",
        ));
    }
    if !(FORMAT_VERSION..=ELECTIONS_VERSION).contains(&version) {
        return Err(StorageError::corrupt(
            path,
            format!(
                "store format version {version}; this build reads versions \
                 {FORMAT_VERSION} and {ELECTIONS_VERSION}"
            ),
        ));
    }
    Ok(version)
}

/// Drops the files of the store at `path` from the page cache before RocksDB opens them,
/// so that the open reads what the disk holds. After a failed fsync the kernel may keep
/// the pages it could not write, marked clean: a process that opened the store again
/// would read data that is not on disk, act on it (acknowledge an entry, repeat a vote),
/// and lose it at the next power loss (`docs/design.md`, section 15). `POSIX_FADV_DONTNEED`
/// drops clean pages (dirty ones are written back first); it is advice, so a file it
/// cannot open or advise is left as it is. Returns how many files were advised.
pub(super) fn drop_cached(path: &Path) -> usize {
    use std::os::fd::AsRawFd;
    let Ok(entries) = fs::read_dir(path) else {
        return 0;
    };
    let mut advised = 0;
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let Ok(file) = fs::File::open(entry.path()) else {
            continue;
        };
        // SAFETY: `file` is an open descriptor for the duration of the call; the call
        // reads nothing from this process's memory.
        let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r == 0 {
            advised += 1;
        }
    }
    advised
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    use super::*;

    /// How many of `file`'s first `len` bytes' pages are in the page cache (`mincore`).
    fn resident_pages(file: &fs::File, len: usize) -> usize {
        let page = 4096;
        // SAFETY: a read-only shared mapping of `len` bytes of an open file, unmapped
        // before returning; `mincore` writes one byte per page into `vec`, which has room.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let mut vec = vec![0u8; len.div_ceil(page)];
            let rc = libc::mincore(p, len, vec.as_mut_ptr());
            libc::munmap(p, len);
            assert_eq!(rc, 0);
            vec.iter().filter(|b| *b & 1 == 1).count()
        }
    }

    #[test]
    fn opening_a_store_drops_its_files_from_the_page_cache() {
        // tmpfs keeps files in the page cache itself: use the crate's own folder.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        // SAFETY: `statfs` fills `st` for a NUL-terminated path.
        let tmpfs = unsafe {
            let c = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
            let mut st: libc::statfs = std::mem::zeroed();
            libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type == libc::TMPFS_MAGIC
        };
        if tmpfs {
            eprintln!(
                "skipped: {} is on tmpfs, whose pages are the file",
                dir.path().display()
            );
            return;
        }
        let len = 1 << 20;
        let path = dir.path().join("000001.log");
        let mut f = fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; len]).unwrap();
        f.sync_all().unwrap();
        let mut f = fs::File::open(&path).unwrap();
        f.read_to_end(&mut Vec::new()).unwrap();
        assert!(resident_pages(&f, len) > 0, "read: cached");
        assert_eq!(drop_cached(dir.path()), 1);
        assert_eq!(
            resident_pages(&f, len),
            0,
            "dropped: the next read goes to the disk"
        );
    }
}
