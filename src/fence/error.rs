//! [`FenceError`]: why a fenced write was not made.

use std::path::PathBuf;

use crate::token::FencingToken;

/// Why a fenced write, or a fence operation, did not happen. In every case nothing of
/// the guarded write was committed, and the token was not advanced.
///
/// [`Stale`](Self::Stale) is the answer the fence exists for: the caller is no longer the
/// leader and must stop. [`Write`](Self::Write) is the caller's own write failing.
/// [`Locked`](Self::Locked), [`Corrupt`](Self::Corrupt), [`Backend`](Self::Backend) and
/// [`TokenOutOfRange`](Self::TokenOutOfRange) are about the fence's storage or input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The token is lower than the highest one this resource accepted: a later tenure
    /// has written here, so the caller no longer leads.
    ///
    /// Fix: stop the leader-only work and drop the lease. Do not retry with this token:
    /// it will never be accepted again. Wait for a new lease instead.
    #[error(
        "stale fencing token {presented}: this resource already accepted token {highest}, \
         so a newer leader exists; stop writing (nothing was written)"
    )]
    Stale {
        /// The token the caller presented.
        presented: FencingToken,
        /// The highest token the resource had accepted when it checked.
        highest: FencingToken,
    },

    /// The guarded write failed. The whole transaction, the token advance included, was
    /// rolled back.
    ///
    /// Fix: this is the caller's own SQL failing; see `source`. The token is still
    /// good, so the write may be retried with it.
    #[error("fence {fence:?}: the guarded write failed and was rolled back with the token advance: {source}")]
    Write {
        /// The fence's name.
        fence: String,
        /// What the write returned.
        #[source]
        source: rusqlite::Error,
    },

    /// Another process, or another open [`RocksFence`](super::RocksFence) in this
    /// process, has the fence's RocksDB directory open.
    ///
    /// Fix: one fence per directory. Drop the earlier `RocksFence`, or stop the other
    /// process, before opening it again.
    #[error("fence {fence:?}: the RocksDB directory {path} is locked: another process or RocksFence has it open")]
    Locked {
        /// The fence's name.
        fence: String,
        /// The fence's directory.
        path: PathBuf,
    },

    /// The fence's stored state cannot be trusted. RocksDB reported corruption, or the
    /// stored token does not decode, or the fence's row or table is missing.
    ///
    /// Fix: check that the path or database is the right one. If it is, restore it from
    /// a backup. Do not reset the token to 0 by hand: that would let every replaced
    /// leader write again.
    #[error("fence {fence:?}: corrupt fence state at {location}: {detail}")]
    Corrupt {
        /// The fence's name.
        fence: String,
        /// Where: the path, table or key.
        location: String,
        /// What is wrong.
        detail: String,
    },

    /// The token does not fit SQLite's signed 64-bit integers. No Raft term gets there
    /// in practice, so this means the token was not taken from a
    /// [`Lease`](crate::Lease).
    #[error("fence {fence:?}: token {presented} exceeds i64::MAX and cannot be stored in SQLite")]
    TokenOutOfRange {
        /// The fence's name.
        fence: String,
        /// The token the caller presented.
        presented: FencingToken,
    },

    /// The storage under the fence failed: I/O, a busy SQLite database after its busy
    /// timeout, a full disk, a missing parent directory.
    ///
    /// Fix: see `context` and `source`. For SQLite, a busy error means another writer held
    /// the database longer than the connection's busy timeout. The attempt may be
    /// retried with the same token.
    #[error("fence {fence:?}: {context}: {source}")]
    Backend {
        /// The fence's name.
        fence: String,
        /// What the fence was doing, and where.
        context: String,
        /// The database's error.
        #[source]
        source: BackendError,
    },
}

impl FenceError {
    /// Whether this is [`Stale`](Self::Stale): the caller must stop, because it no
    /// longer leads.
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale { .. })
    }
}

/// An error of the database under a fence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// From SQLite.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// From RocksDB.
    #[error(transparent)]
    Rocks(#[from] rocksdb::Error),
}
