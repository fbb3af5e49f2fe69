//! [`SqliteFence`]: the fence as a row of a SQLite database, advanced in the same
//! transaction as the write it guards.
//!
//! One row per fence name, so one database holds a fence per named election: install
//! each with the election's name (`SqliteFence::install(&conn, "shard-3")`) and write
//! with that election's tokens only (see [the module docs](super#one-fence-per-election-keyed-by-its-name)).

use std::sync::Arc;

use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};

use super::{BackendError, FenceError, FenceStats};
use crate::token::FencingToken;

/// The table holding every SQLite fence's highest token, one row per fence name.
const CREATE_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS tenure_fence (name TEXT PRIMARY KEY, token INTEGER NOT NULL)";

/// A fence kept in a SQLite database, next to the data it guards.
///
/// The fence is a row of the `tenure_fence` table, named by the fence's name, holding
/// the highest token accepted. [`write`](Self::write) runs the caller's SQL and advances
/// that row in one `BEGIN IMMEDIATE` transaction, so the check, the advance and the
/// write commit together or not at all.
///
/// The value holds no connection. Clone it (clones share the [`stats`](Self::stats)) and
/// use it with any connection to the same database, from any thread or process.
///
/// # Connections
///
/// - `BEGIN IMMEDIATE` takes the database's write lock at the start, so concurrent
///   writers queue on the connection's **busy timeout** instead of failing halfway.
///   rusqlite sets 5 s; set one longer than your longest write transaction with
///   [`Connection::busy_timeout`]. A writer that waits longer gets
///   [`FenceError::Backend`] and may retry.
/// - With several processes or threads, `PRAGMA journal_mode = WAL` lets readers run
///   during writes.
/// - `PRAGMA synchronous` decides durability. `FULL`, the bundled SQLite's default, makes
///   a committed token survive a power cut. With `NORMAL` in WAL mode, a power cut can
///   lose the last commits, each token advance together with the write it guarded.
///
/// # Example
///
/// A settlement service guards its writes. Each request carries the leader's token,
/// from [`Lease::confirm`](crate::Lease::confirm):
///
/// ```
/// use rusqlite::{params, Connection};
/// use tenure::fence::{FenceError, SqliteFence};
/// use tenure::FencingToken;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A file in production; in memory for this example.
/// let mut conn = Connection::open_in_memory()?;
/// conn.execute_batch(
///     "CREATE TABLE settlement (batch INTEGER PRIMARY KEY, total INTEGER NOT NULL)",
/// )?;
/// let fence = SqliteFence::install(&conn, "settlement")?;
///
/// /// Settles one batch, if `token` still leads.
/// fn settle(
///     fence: &SqliteFence,
///     conn: &mut Connection,
///     token: FencingToken,
///     batch: i64,
///     total: i64,
/// ) -> Result<(), FenceError> {
///     fence.write(conn, token, |tx| {
///         tx.execute(
///             "INSERT INTO settlement (batch, total) VALUES (?1, ?2)
///              ON CONFLICT (batch) DO UPDATE SET total = excluded.total",
///             params![batch, total],
///         )?;
///         Ok(())
///     })
/// }
///
/// // The leader of term 41 settles batch 1, then stalls.
/// settle(&fence, &mut conn, FencingToken::new(41), 1, 100)?;
/// // The leader of term 42 takes over and settles batch 1 again.
/// settle(&fence, &mut conn, FencingToken::new(42), 1, 120)?;
/// // The old leader wakes up and writes: rejected, nothing is written.
/// match settle(&fence, &mut conn, FencingToken::new(41), 1, 999) {
///     Err(FenceError::Stale { presented, highest }) => {
///         assert_eq!((presented, highest), (FencingToken::new(41), FencingToken::new(42)));
///         // Here the worker stops its leader-only work.
///     }
///     other => panic!("expected a stale token, got {other:?}"),
/// }
/// let total: i64 = conn.query_row("SELECT total FROM settlement WHERE batch = 1", [], |r| r.get(0))?;
/// assert_eq!(total, 120);
/// assert_eq!(fence.highest(&conn)?, FencingToken::new(42));
/// assert_eq!(fence.stats().snapshot().rejected_stale, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteFence {
    /// The fence's row in `tenure_fence`: one database can hold several fences, one per
    /// guarded resource.
    name: String,
    /// What this fence (and its clones) accepted and rejected in this process.
    stats: Arc<FenceStats>,
}

impl SqliteFence {
    /// Creates the `tenure_fence` table if it is missing, and the fence's row with
    /// token 0 if that is missing. An existing row keeps its token, so calling this at
    /// every start is right.
    pub fn install(conn: &Connection, name: &str) -> Result<SqliteFence, FenceError> {
        let fence = SqliteFence {
            name: name.to_owned(),
            stats: Arc::default(),
        };
        conn.execute_batch(CREATE_TABLE)
            .map_err(|e| fence.backend("creating the table tenure_fence", e))?;
        conn.execute(
            "INSERT OR IGNORE INTO tenure_fence (name, token) VALUES (?1, 0)",
            params![fence.name],
        )
        .map_err(|e| fence.backend("inserting the fence's row into tenure_fence", e))?;
        Ok(fence)
    }

    /// The fence's name: its row in `tenure_fence`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This fence's counters, shared with its clones.
    ///
    /// Each process counts its own attempts. The token itself is shared through the
    /// database.
    pub fn stats(&self) -> &Arc<FenceStats> {
        &self.stats
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction, after checking `token` and advancing
    /// the fence to it, and commits both together.
    ///
    /// `token` is accepted if it is at least the highest accepted so far (equal means the
    /// same tenure). Otherwise the result is [`FenceError::Stale`], and `f` does not run.
    /// If `f` fails ([`FenceError::Write`]), the commit fails, or `f` panics, everything
    /// is rolled back, the token advance included. `f` must not commit or roll back
    /// itself.
    ///
    /// The fence counts an accepted write once the commit succeeds.
    pub fn write<T>(
        &self,
        conn: &mut Connection,
        token: FencingToken,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, FenceError> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.backend("beginning an IMMEDIATE transaction", e))?;
        // On every early return below, dropping `tx` rolls it back.
        self.advance(&tx, token)?;
        let value = f(&tx).map_err(|source| FenceError::Write {
            fence: self.name.clone(),
            source,
        })?;
        tx.commit()
            .map_err(|e| self.backend("committing the guarded write", e))?;
        self.stats.record_accepted();
        Ok(value)
    }

    /// Checks `token` and advances the fence to it inside the caller's transaction, for
    /// callers that manage the transaction themselves.
    ///
    /// Call it first in the transaction, and commit the guarded write in that same
    /// transaction. On an error, roll the transaction back. Begin the transaction with
    /// [`TransactionBehavior::Immediate`]. A deferred transaction that read before this
    /// call fails with `SQLITE_BUSY` here if another writer committed in between.
    ///
    /// This counts an accepted token when the check passes, since the commit is out of
    /// the fence's sight. [`write`](Self::write) counts only commits.
    pub fn check_and_advance(
        &self,
        tx: &Transaction<'_>,
        token: FencingToken,
    ) -> Result<(), FenceError> {
        self.advance(tx, token)?;
        self.stats.record_accepted();
        Ok(())
    }

    /// The highest token this fence accepted (0 if none), as committed in the database.
    pub fn highest(&self, conn: &Connection) -> Result<FencingToken, FenceError> {
        self.read_highest(conn)
    }

    /// The check and the advance in one statement: the row changes only if `token` is
    /// at least the stored one.
    fn advance(&self, conn: &Connection, token: FencingToken) -> Result<(), FenceError> {
        let value = i64::try_from(token.term()).map_err(|_| FenceError::TokenOutOfRange {
            fence: self.name.clone(),
            presented: token,
        })?;
        let changed = conn
            .execute(
                if crate::mutation::active("fence-accepts-any") {
                    // Broken on purpose (mutation testing): no token check at all.
                    "UPDATE tenure_fence SET token = ?1 WHERE name = ?2"
                } else {
                    "UPDATE tenure_fence SET token = ?1 WHERE name = ?2 AND token <= ?1"
                },
                params![value, self.name],
            )
            .map_err(|e| self.backend("advancing the token in tenure_fence", e))?;
        if changed > 0 {
            return Ok(());
        }
        let highest = self.read_highest(conn)?;
        if token < highest {
            self.stats.record_stale();
            return Err(FenceError::Stale {
                presented: token,
                highest,
            });
        }
        // The row exists and holds an integer no higher than `token`, yet the update did
        // not apply it: the stored value is not what it seems.
        Err(self.corrupt(format!(
            "the stored token {highest} is not above {token}, yet the update changed no row"
        )))
    }

    fn read_highest(&self, conn: &Connection) -> Result<FencingToken, FenceError> {
        let stored: Option<Value> = conn
            .query_row(
                "SELECT token FROM tenure_fence WHERE name = ?1",
                params![self.name],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.backend("reading the token from tenure_fence", e))?;
        match stored {
            Some(Value::Integer(t)) if t >= 0 => Ok(FencingToken::new(t as u64)),
            Some(other) => Err(self.corrupt(format!(
                "the stored token is {other:?}, not a non-negative integer"
            ))),
            None => Err(self.corrupt(
                "the fence's row is missing; was SqliteFence::install run on this database?"
                    .to_owned(),
            )),
        }
    }

    pub(super) fn backend(&self, context: &str, source: rusqlite::Error) -> FenceError {
        FenceError::Backend {
            fence: self.name.clone(),
            context: context.to_owned(),
            source: BackendError::Sqlite(source),
        }
    }

    fn corrupt(&self, detail: String) -> FenceError {
        FenceError::Corrupt {
            fence: self.name.clone(),
            location: format!("table tenure_fence, row {:?}", self.name),
            detail,
        }
    }
}
