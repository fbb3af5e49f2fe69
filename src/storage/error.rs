//! [`StorageError`]: why a store could not be opened, read or written.

use std::path::{Path, PathBuf};

/// Why a store could not be opened, created, read or written.
///
/// [`Missing`](Self::Missing), [`Locked`](Self::Locked) and
/// [`AlreadyInitialized`](Self::AlreadyInitialized) are about how the store was opened and
/// the caller can act on them. [`Corrupt`](Self::Corrupt) and [`Io`](Self::Io) are fatal
/// for the node: it must stop, because raft cannot run on a log it cannot trust.
/// [`InvalidWrite`](Self::InvalidWrite) is a bug in the caller: nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The data directory does not exist, or it exists but holds no store (it is empty,
    /// or a `create` was interrupted before its first write).
    ///
    /// Fix: check the configured path. A node creates a store only when it founds a group
    /// or joins one (see [`Config::found`](crate::Config::found) and
    /// [`Config::join`](crate::Config::join)); `RocksStore::create` does it by hand.
    #[error("no tenure store at {path}: the directory does not exist or holds no store")]
    Missing {
        /// The directory that was to hold the store.
        path: PathBuf,
    },

    /// Another process, or another open store in this process, holds the store's lock
    /// (RocksDB's `LOCK` file).
    ///
    /// Fix: only one node may use a data directory at a time. Stop the other process,
    /// or drop every handle (including the one given to raft-rs) of the earlier store
    /// before opening it again.
    #[error("tenure store at {path} is locked: another process or store instance has it open")]
    Locked {
        /// The store's directory.
        path: PathBuf,
    },

    /// The store's files or one of its records cannot be trusted: RocksDB reported
    /// corruption, a stored value does not decode, the log has a hole, or the directory
    /// holds a RocksDB database that is not a tenure store (or one of a newer format).
    ///
    /// Fix: this is fatal for the node. Check the path first (a wrong directory is
    /// reported here too). Otherwise restore the directory from a backup, or remove it
    /// and re-add the node to the group as a new member, so that it catches up from the
    /// others. Never edit the files by hand.
    #[error("tenure store at {path} is corrupt: {detail}")]
    Corrupt {
        /// The store's directory.
        path: PathBuf,
        /// What was wrong, as reported by RocksDB or by the decoder.
        detail: String,
    },

    /// `create` found a store already initialized in the directory.
    ///
    /// Fix: use `open` to keep the existing state. Creating again
    /// would discard this node's vote and log, which could let it vote twice in a term.
    #[error("tenure store at {path} is already initialized")]
    AlreadyInitialized {
        /// The store's directory.
        path: PathBuf,
    },

    /// Any other I/O or RocksDB failure: permissions, disk full, a failed fsync, a path
    /// that is not a directory.
    ///
    /// Fix: read `detail`, repair the environment (space, permissions, disk) and restart
    /// the node. After a failed write the node must stop: whether that write reached the
    /// disk is unknown until the store is opened again.
    #[error("I/O error on tenure store at {path}: {detail}")]
    Io {
        /// The store's directory.
        path: PathBuf,
        /// The underlying error's message.
        detail: String,
    },

    /// This node's store lacks what the group counts on it to hold: it was a member, lost
    /// its data folder, and came back empty. Nothing was written.
    ///
    /// Fix: do not start this node id on this folder again. Replace it by a new node id
    /// that joins the group (README: a replacement machine), then remove the old id.
    #[error("this node lost acknowledged data: {detail}")]
    LostData {
        /// What showed it.
        detail: String,
    },

    /// A snapshot a peer sent does not decode as tenure's group state; nothing was
    /// written. A broken or hostile peer, or a peer of an incompatible version.
    #[error("refused a snapshot from a peer: {detail}")]
    BadSnapshot {
        /// Which snapshot, from whom, and what is wrong.
        detail: String,
    },

    /// A write or compaction that would break the log's invariants was refused, and
    /// nothing was changed: a gap after the last entry, entries that are not
    /// consecutive or whose terms go down, overwriting a committed entry, a commit index
    /// beyond the last entry, a snapshot older than the stored one, or compaction beyond
    /// the commit index or below the snapshot.
    ///
    /// Fix: this is a bug in the caller (the driver must persist each `Ready` in order);
    /// `detail` names the offending indexes.
    #[error("invalid storage write: {detail}")]
    InvalidWrite {
        /// Which invariant the write would have broken.
        detail: String,
    },

    /// Named election `id` was removed from this store (its tombstone is there): its
    /// handles refuse writes and reads, and the id is never founded here again. Nothing
    /// was written.
    ///
    /// Fix: this is a bug in the caller (the driver stops an election's group when it
    /// applies its removal); a removed election's id is retired for good.
    #[error("named election {id} was removed from this store: its handles refuse writes and reads, and it is never founded again")]
    ElectionRemoved {
        /// The removed election's id.
        id: u32,
    },

    /// The store does not implement what was asked (a [`RaftStore`](super::RaftStore)
    /// written before named elections, using the trait's defaults). Nothing was written.
    ///
    /// Fix: use [`RocksStore`](super::RocksStore) or [`MemStore`](super::MemStore), or
    /// implement the named-election methods of the store.
    #[error("unsupported by this store: {detail}")]
    Unsupported {
        /// What was asked.
        detail: String,
    },
}

impl StorageError {
    /// Classifies a RocksDB error by its [`rocksdb::ErrorKind`] (and, for the lock, by
    /// its message: RocksDB reports a held lock as an `IOError` naming the `LOCK` file).
    pub(crate) fn from_rocks(path: &Path, err: rocksdb::Error) -> Self {
        let path = path.to_path_buf();
        let detail = err.to_string();
        match err.kind() {
            rocksdb::ErrorKind::Corruption => StorageError::Corrupt { path, detail },
            rocksdb::ErrorKind::IOError if is_lock_message(&detail) => {
                StorageError::Locked { path }
            }
            rocksdb::ErrorKind::InvalidArgument if detail.contains("does not exist") => {
                StorageError::Missing { path }
            }
            _ => StorageError::Io { path, detail },
        }
    }

    /// An I/O error from the standard library on `path`.
    pub(crate) fn from_io(path: &Path, context: &str, err: &std::io::Error) -> Self {
        StorageError::Io {
            path: path.to_path_buf(),
            detail: format!("{context}: {err}"),
        }
    }

    /// A record that failed to decode or broke an invariant.
    pub(crate) fn corrupt(path: &Path, detail: impl Into<String>) -> Self {
        StorageError::Corrupt {
            path: path.to_path_buf(),
            detail: detail.into(),
        }
    }

    /// A refused write.
    pub(crate) fn invalid(detail: impl Into<String>) -> Self {
        StorageError::InvalidWrite {
            detail: detail.into(),
        }
    }

    /// Names the group an error is about in its detail: `named election 7: ...` (the
    /// root, id 0, keeps its errors as they were). Only `Corrupt` and `InvalidWrite` carry
    /// a detail worth prefixing; the others are returned as they are.
    pub(crate) fn in_election(self, id: u32) -> Self {
        if id == 0 {
            return self;
        }
        match self {
            StorageError::Corrupt { path, detail } => StorageError::Corrupt {
                path,
                detail: format!("named election {id}: {detail}"),
            },
            StorageError::InvalidWrite { detail } => StorageError::InvalidWrite {
                detail: format!("named election {id}: {detail}"),
            },
            other => other,
        }
    }

    /// Names the group of a refused part of a `write_all`, the root included (`root
    /// election: ...`).
    pub(crate) fn in_part(self, id: u32) -> Self {
        match (id, self) {
            (0, StorageError::InvalidWrite { detail }) => StorageError::InvalidWrite {
                detail: format!("root election: {detail}"),
            },
            (_, err) => err.in_election(id),
        }
    }
}

/// RocksDB words a held lock in two ways: `While lock file: <dir>/LOCK: Resource
/// temporarily unavailable` (another process) and `lock hold by current process ...:
/// <dir>/LOCK: No locks available` (this process). Matching on "lock" alone would also
/// match "block".
fn is_lock_message(message: &str) -> bool {
    message.contains("/LOCK")
        || message.contains("\\LOCK")
        || message.contains("While lock file")
        || message.contains("lock hold by")
}

impl From<StorageError> for raft::Error {
    /// Wraps the error for raft-rs, which treats any storage error other than its own
    /// `Compacted`/`Unavailable`/`SnapshotTemporarilyUnavailable` as fatal.
    fn from(err: StorageError) -> Self {
        raft::Error::Store(raft::StorageError::Other(Box::new(err)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_messages_from_both_paths_are_recognized() {
        assert!(is_lock_message(
            "IO error: While lock file: /d/LOCK: Resource temporarily unavailable"
        ));
        assert!(is_lock_message(
            "IO error: lock hold by current process, acquire time 1 acquiring thread 2: /d/LOCK: No locks available"
        ));
        assert!(!is_lock_message(
            "IO error: While reading block at offset 10"
        ));
    }

    #[test]
    fn converts_into_a_raft_store_error() {
        let err = StorageError::invalid("x");
        match raft::Error::from(err.clone()) {
            raft::Error::Store(raft::StorageError::Other(inner)) => {
                assert_eq!(inner.to_string(), err.to_string());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
