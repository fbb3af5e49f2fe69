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

    /// The token does not fit the database's signed 64-bit integers (SQLite's
    /// `INTEGER`, PostgreSQL's `bigint`). No Raft term gets there in practice, so this
    /// means the token was not taken from a [`Lease`](crate::Lease).
    #[error(
        "fence {fence:?}: token {presented} exceeds i64::MAX and cannot be stored in the \
         fence's database (SQLite INTEGER, PostgreSQL bigint)"
    )]
    TokenOutOfRange {
        /// The fence's name.
        fence: String,
        /// The token the caller presented.
        presented: FencingToken,
    },

    /// The database rolled the transaction back because a concurrent transaction
    /// conflicted with it: PostgreSQL's `serialization_failure` (SQLSTATE 40001, under
    /// `REPEATABLE READ` or `SERIALIZABLE`, when another writer advanced the fence after
    /// this transaction's snapshot) or `deadlock_detected` (40P01). Nothing was committed.
    ///
    /// Fix: run the whole transaction again, from its `BEGIN`, with the same token. The
    /// new snapshot sees the other writer's token, and the fence then accepts or answers
    /// [`Stale`](Self::Stale). Retry a bounded number of times.
    #[error(
        "fence {fence:?}: {context}: a concurrent transaction conflicted and the database \
         rolled this one back (nothing was written); run the whole transaction again with \
         the same token: {source}"
    )]
    Conflict {
        /// The fence's name.
        fence: String,
        /// What the fence was doing.
        context: String,
        /// The database's error.
        #[source]
        source: BackendError,
    },

    /// The connection to the database failed while the commit was in flight, so the
    /// guarded write may have committed or not. No fence can tell which from outside the
    /// transaction: a token equal to the stored one does not say whose write landed.
    ///
    /// Fix: make the guarded write idempotent (an upsert keyed by what it settles) and
    /// run it again with the same token on a new connection; or read back what it wrote.
    #[error(
        "fence {fence:?}: the connection failed while the commit was in flight: the guarded \
         write may or may not have committed; retry it (idempotently) with the same token: \
         {source}"
    )]
    CommitUnknown {
        /// The fence's name.
        fence: String,
        /// The database's error.
        #[source]
        source: BackendError,
    },

    /// The guarded write failed, on a fence whose database is not SQLite (the
    /// PostgreSQL fence's `PgFence::write` (the `postgres` feature), when the caller's statements
    /// fail). The whole transaction, the token advance included, was rolled back.
    /// SQLite's fence reports [`Write`](Self::Write), whose source is `rusqlite`'s error.
    ///
    /// Fix: see `source`. The token is still good, so the write may be retried with it.
    #[error("fence {fence:?}: the guarded write failed and was rolled back with the token advance: {source}")]
    WriteFailed {
        /// The fence's name.
        fence: String,
        /// What the write returned.
        #[source]
        source: BackendError,
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

    /// Whether this is [`Conflict`](Self::Conflict): the database rolled the
    /// transaction back for a concurrent one, and the whole transaction may run again
    /// with the same token.
    pub fn is_conflict(&self) -> bool {
        matches!(self, FenceError::Conflict { .. })
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
    /// From PostgreSQL (the `postgres` feature). The message is the server's own
    /// (severity, SQLSTATE, message, detail and hint) when the server answered, and the
    /// client's (with its causes) when it did not, so the error is not also given as
    /// this one's source (a report would print the server's message twice). Match it
    /// for the error itself, [`code`](tokio_postgres::Error::code) for its SQLSTATE.
    #[cfg(feature = "postgres")]
    #[error("{}", super::postgres::describe(.0))]
    Postgres(tokio_postgres::Error),
}
