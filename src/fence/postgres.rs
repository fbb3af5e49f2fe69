//! [`PgFence`]: the fence as a row of a PostgreSQL table, advanced in the guarded write's
//! own transaction (the `postgres` feature; `docs/design.md`, section 16).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, IsolationLevel, Transaction};

use super::{BackendError, FenceError, FenceStats};
use crate::token::FencingToken;

/// What [`PgFence::install`] marks the table with (its comment), so that a later version
/// knows what it migrates from, and a table of the same name that is not the fence's is
/// refused instead of written.
const VERSION_MARK: &str = "tenure_fence v1";

/// The key of the transaction-scoped advisory lock under which [`PgFence::install`]
/// creates the table: two workers installing at once would otherwise race
/// `CREATE TABLE IF NOT EXISTS` into a unique violation in the catalog. ("tenure" in
/// ASCII.)
const INSTALL_LOCK: i64 = 0x7465_6e75_7265;

/// What the guarded write of [`PgFence::write`] returns: a boxed future borrowing the
/// transaction, `Box::pin(async move { … })`.
pub type PgWriteFuture<'t, T> =
    Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + Send + 't>>;

/// A fence kept in a PostgreSQL database, next to the data it guards.
///
/// The fence is a row of the `tenure_fence` table (the schema is the session's
/// `search_path`'s), named by the fence's name, holding the highest token accepted. The
/// check and the advance are one statement, first in the guarded write's transaction:
///
/// ```sql
/// UPDATE tenure_fence SET token = $1 WHERE name = $2 AND token <= $1
/// ```
///
/// It writes the row even for an equal token, so it takes the row's lock, held until the
/// transaction ends: every fenced transaction of one name waits for the one before it,
/// at every isolation level, and none commits below a token committed before it. Under
/// `READ COMMITTED` a waiting writer re-checks the condition against the row the holder
/// committed and gets [`FenceError::Stale`] if its token is now below; under
/// `REPEATABLE READ` and `SERIALIZABLE` it gets [`FenceError::Conflict`] (the server's
/// `serialization_failure`), and the whole transaction runs again with the same token.
///
/// A transaction that passed the check holds the lock until it ends, and so does one
/// refused after waiting for it (the server keeps the newest version locked although
/// the `WHERE` no longer matched). So that a holder that froze (a stopped process, a
/// partition between it and the database) cannot hold it for good, the check is sent
/// with `idle_in_transaction_session_timeout` for the rest of the transaction, set before
/// it in the same round trip (10 s unless [`with_idle_timeout`](Self::with_idle_timeout)
/// says otherwise): the server ends a session idle in its transaction for longer, rolls
/// it back and frees the lock. The next leader waits at most that long. A refused or
/// failed [`write`](Self::write) rolls back before it returns.
///
/// The value holds no connection. Clone it (clones share the [`stats`](Self::stats)) and
/// use it with any connection to the database: a `tokio_postgres::Client` of your own,
/// or one from a pool (`deadpool-postgres` and `bb8-postgres` hand out clients that
/// dereference to `tokio_postgres::Client`: pass `&mut client`).
///
/// # Example
///
/// ```no_run
/// use tenure::fence::tokio_postgres::{self, NoTls};
/// use tenure::fence::{FenceError, PgFence};
/// use tenure::FencingToken;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let (mut client, connection) =
///     tokio_postgres::connect("host=/run/postgresql dbname=ledger", NoTls).await?;
/// tokio::spawn(connection);
/// client
///     .batch_execute(
///         "CREATE TABLE IF NOT EXISTS settlement (batch bigint PRIMARY KEY, total bigint NOT NULL)",
///     )
///     .await?;
/// let fence = PgFence::install(&mut client, "settlement").await?;
///
/// // The leader's token, from Lease::confirm.
/// let token = FencingToken::new(42);
/// let (batch, total) = (7_i64, 120_i64);
/// match fence
///     .write(&mut client, token, |tx| {
///         Box::pin(async move {
///             tx.execute(
///                 "INSERT INTO settlement (batch, total) VALUES ($1, $2)
///                  ON CONFLICT (batch) DO UPDATE SET total = excluded.total",
///                 &[&batch, &total],
///             )
///             .await?;
///             Ok(())
///         })
///     })
///     .await
/// {
///     Ok(()) => {}
///     // A newer leader wrote here: stop the leader-only work.
///     Err(e) if e.is_stale() => return Err(e.into()),
///     // A concurrent transaction won (REPEATABLE READ, SERIALIZABLE): run it again.
///     Err(e) if e.is_conflict() => { /* retry with the same token */ }
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PgFence {
    /// The fence's row in `tenure_fence`.
    name: String,
    /// What this fence (and its clones) accepted and rejected in this process.
    stats: Arc<FenceStats>,
    /// `idle_in_transaction_session_timeout` for a transaction the check ran in.
    idle_timeout: Option<Duration>,
    /// The isolation level of [`write`](Self::write)'s transactions; `None` is the
    /// session's default.
    isolation: Option<IsolationLevel>,
}

impl PgFence {
    /// The statements that create the fence's table, for a DBA to run where the
    /// application's role may not create tables (then [`install`](Self::install) only
    /// adds the fence's row). `install` runs the same.
    pub const CREATE_TABLE: &'static str = "CREATE TABLE IF NOT EXISTS tenure_fence (\
         name text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 0)); \
         COMMENT ON TABLE tenure_fence IS 'tenure_fence v1'";

    /// The idle timeout a fence sets for a transaction its check ran in.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

    /// Creates the `tenure_fence` table if it is missing, and the fence's row with token 0
    /// if that is missing. An existing row keeps its token, so calling this at every start
    /// is right.
    ///
    /// A `tenure_fence` table that is not the fence's (other columns, or no `tenure_fence
    /// v1` comment) is refused with [`FenceError::Corrupt`], naming what it found.
    pub async fn install(client: &mut Client, name: &str) -> Result<PgFence, FenceError> {
        let fence = PgFence {
            name: name.to_owned(),
            stats: Arc::default(),
            idle_timeout: Some(Self::DEFAULT_IDLE_TIMEOUT),
            isolation: None,
        };
        let tx = client
            .transaction()
            .await
            .map_err(|e| fence.pg_error("beginning the install transaction", e))?;
        tx.execute_typed(
            "SELECT pg_advisory_xact_lock($1)",
            &[(&INSTALL_LOCK, Type::INT8)],
        )
        .await
        .map_err(|e| fence.pg_error("taking the install lock", e))?;
        let comment = tx
            .query_typed_one(
                "SELECT to_regclass('tenure_fence') IS NOT NULL, \
                 obj_description(to_regclass('tenure_fence'), 'pg_class')",
                &[],
            )
            .await
            .map_err(|e| fence.pg_error("looking for the table tenure_fence", e))?;
        let (exists, mark): (bool, Option<String>) = (comment.get(0), comment.get(1));
        if !exists {
            tx.batch_execute(Self::CREATE_TABLE)
                .await
                .map_err(|e| fence.pg_error("creating the table tenure_fence", e))?;
        } else {
            fence.check_table(&tx, mark).await?;
        }
        tx.execute_typed(
            "INSERT INTO tenure_fence (name, token) VALUES ($1, 0) ON CONFLICT (name) DO NOTHING",
            &[(&fence.name, Type::TEXT)],
        )
        .await
        .map_err(|e| fence.pg_error("inserting the fence's row into tenure_fence", e))?;
        tx.commit()
            .await
            .map_err(|e| fence.pg_error("committing the install", e))?;
        Ok(fence)
    }

    /// The `idle_in_transaction_session_timeout` the check sets for the rest of its
    /// transaction, so that a holder that froze cannot keep the fence's row locked for
    /// good; `None` leaves the session's own setting. Keep it above the
    /// longest pause your guarded write makes between its statements.
    pub fn with_idle_timeout(mut self, timeout: Option<Duration>) -> PgFence {
        self.idle_timeout = timeout;
        self
    }

    /// The isolation level of [`write`](Self::write)'s transactions (the session's
    /// default, normally `READ COMMITTED`, unless set).
    pub fn with_isolation(mut self, level: IsolationLevel) -> PgFence {
        self.isolation = Some(level);
        self
    }

    /// The fence's name: its row in `tenure_fence`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This fence's counters, shared with its clones. Each process counts its own
    /// attempts; the token itself is shared through the database.
    pub fn stats(&self) -> &Arc<FenceStats> {
        &self.stats
    }

    /// Runs `f` in a transaction, after checking `token` and advancing the fence to it,
    /// and commits both together.
    ///
    /// `token` is accepted if it is at least the highest accepted so far (equal means the
    /// same tenure). Otherwise the result is [`FenceError::Stale`], and `f` does not run.
    /// If `f` fails ([`FenceError::WriteFailed`], or [`FenceError::Conflict`] for a
    /// serialization failure), the commit fails, or the future is dropped, everything is
    /// rolled back, the token advance included. `f` must not commit or roll back itself.
    ///
    /// The fence counts an accepted write once the commit succeeds.
    pub async fn write<T, F>(
        &self,
        client: &mut Client,
        token: FencingToken,
        f: F,
    ) -> Result<T, FenceError>
    where
        F: for<'t> FnOnce(&'t Transaction<'_>) -> PgWriteFuture<'t, T>,
    {
        let mut builder = client.build_transaction();
        if let Some(level) = self.isolation {
            builder = builder.isolation_level(level);
        }
        let tx = builder
            .start()
            .await
            .map_err(|e| self.pg_error("beginning the transaction", e))?;
        let outcome = match self.advance(&tx, token).await {
            Ok(()) => f(&tx).await.map_err(|e| {
                if is_conflict(&e) {
                    self.conflict("the guarded write", e)
                } else {
                    FenceError::WriteFailed {
                        fence: self.name.clone(),
                        source: BackendError::Postgres(e),
                    }
                }
            }),
            Err(e) => Err(e),
        };
        let value = match outcome {
            Ok(value) => value,
            Err(e) => {
                // Rolled back now, not left to dropping `tx`: a dropped transaction's
                // ROLLBACK waits in the client's queue until its connection task next
                // runs (on a current-thread runtime, the next call), and until then the
                // server keeps what the transaction locked. A stale token's UPDATE that
                // waited for the fence's row keeps that row locked although it changed
                // nothing, with no idle timeout: every later writer of the fence would
                // wait on it. A failed rollback leaves the server to end the transaction
                // when the connection closes.
                if crate::mutation::active("fence-rollback-on-drop") {
                    // Broken on purpose (mutation testing): the rollback left to the drop.
                    drop(tx);
                } else {
                    let _ = tx.rollback().await;
                }
                return Err(e);
            }
        };
        self.commit(tx).await?;
        self.stats.record_accepted();
        Ok(value)
    }

    /// Checks `token` and advances the fence to it inside the caller's transaction, for
    /// callers that manage the transaction themselves (another isolation level, several
    /// fences in one transaction, a pool's transaction type).
    ///
    /// Call it first in the transaction, commit the guarded write in that same
    /// transaction ([`commit`](Self::commit) says what a failed commit means), and on an
    /// error roll back and await it (`tx.rollback().await`): a dropped transaction's
    /// rollback waits in the client's queue until its connection task runs, and a
    /// refused check may hold the fence's row locked until then. It sets the
    /// transaction's `idle_in_transaction_session_timeout`, accepted or refused (see
    /// [`with_idle_timeout`](Self::with_idle_timeout)).
    ///
    /// This counts an accepted token when the check passes, since the commit may be out of
    /// the fence's sight. [`write`](Self::write) counts only commits.
    pub async fn check_and_advance(
        &self,
        tx: &Transaction<'_>,
        token: FencingToken,
    ) -> Result<(), FenceError> {
        self.advance(tx, token).await?;
        self.stats.record_accepted();
        Ok(())
    }

    /// Commits a transaction that [`check_and_advance`](Self::check_and_advance) checked,
    /// saying what a failure means: [`FenceError::Conflict`] for a serialization failure
    /// at the commit, [`FenceError::CommitUnknown`] when the connection failed with the
    /// commit in flight, [`FenceError::Backend`] when the commit certainly did not happen
    /// (the connection had closed before it, or the server refused it).
    pub async fn commit(&self, tx: Transaction<'_>) -> Result<(), FenceError> {
        let closed_before = tx.client().is_closed();
        match tx.commit().await {
            Ok(()) => Ok(()),
            Err(e) if is_conflict(&e) => Err(self.conflict("committing", e)),
            Err(e) if closed_before => Err(self.pg_error(
                "committing: the connection had closed before the commit was sent \
                 (nothing was committed)",
                e,
            )),
            // The server answered: the commit did not happen.
            Err(e) if e.as_db_error().is_some() => Err(self.pg_error("committing", e)),
            Err(e) => Err(FenceError::CommitUnknown {
                fence: self.name.clone(),
                source: BackendError::Postgres(e),
            }),
        }
    }

    /// The highest token this fence accepted (0 if none), as committed in the database.
    pub async fn highest(&self, client: &Client) -> Result<FencingToken, FenceError> {
        self.read_highest(client.query_typed_opt(
            "SELECT token FROM tenure_fence WHERE name = $1",
            &[(&self.name, Type::TEXT)],
        ))
        .await
    }

    /// The idle timeout, then the check and the advance in one statement, sent together
    /// (one round trip).
    ///
    /// The timeout comes first so that it bounds every outcome: an accepted check holds
    /// the row until the transaction ends, and so does a refused one that waited for the
    /// row (under `READ COMMITTED` the server re-checks the newest version, and keeps it
    /// locked although the `WHERE` no longer matched).
    async fn advance(&self, tx: &Transaction<'_>, token: FencingToken) -> Result<(), FenceError> {
        let value = i64::try_from(token.term()).map_err(|_| FenceError::TokenOutOfRange {
            fence: self.name.clone(),
            presented: token,
        })?;
        let statement = if crate::mutation::active("fence-accepts-any") {
            // Broken on purpose (mutation testing): no token check at all.
            "UPDATE tenure_fence SET token = $1 WHERE name = $2 RETURNING 1"
        } else {
            "UPDATE tenure_fence SET token = $1 WHERE name = $2 AND token <= $1 RETURNING 1"
        };
        let timeout = self
            .idle_timeout
            .map(|t| format!("{}ms", t.as_millis().max(1)));
        let set_timeout = async {
            match &timeout {
                Some(t) => tx
                    .query_typed(
                        "SELECT set_config('idle_in_transaction_session_timeout', $1, true)",
                        &[(t, Type::TEXT)],
                    )
                    .await
                    .map(drop),
                None => Ok(()),
            }
        };
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&value, Type::INT8), (&self.name, Type::TEXT)];
        let check = tx.query_typed(statement, &params);
        // `biased`: polled in this order, so sent in this order.
        let (set, rows) = tokio::join!(biased; set_timeout, check);
        set.map_err(|e| self.pg_error("setting idle_in_transaction_session_timeout", e))?;
        let rows = rows.map_err(|e| {
            if is_conflict(&e) {
                self.conflict("advancing the token in tenure_fence", e)
            } else {
                self.pg_error("advancing the token in tenure_fence", e)
            }
        })?;
        if !rows.is_empty() {
            return Ok(());
        }
        let highest = self
            .read_highest(tx.query_typed_opt(
                "SELECT token FROM tenure_fence WHERE name = $1",
                &[(&self.name, Type::TEXT)],
            ))
            .await?;
        if token < highest {
            self.stats.record_stale();
            return Err(FenceError::Stale {
                presented: token,
                highest,
            });
        }
        Err(self.corrupt(format!(
            "the stored token {highest} is not above {token}, yet the update changed no row"
        )))
    }

    async fn read_highest(
        &self,
        query: impl Future<Output = Result<Option<tokio_postgres::Row>, tokio_postgres::Error>>,
    ) -> Result<FencingToken, FenceError> {
        let row = query
            .await
            .map_err(|e| self.pg_error("reading the token from tenure_fence", e))?;
        let Some(row) = row else {
            return Err(self.corrupt(
                "the fence's row is missing; was PgFence::install run on this database?".to_owned(),
            ));
        };
        match row.try_get::<_, i64>(0) {
            Ok(t) if t >= 0 => Ok(FencingToken::new(t as u64)),
            Ok(t) => Err(self.corrupt(format!("the stored token is {t}, below 0"))),
            Err(e) => Err(self.corrupt(format!("the stored token is not a bigint: {e}"))),
        }
    }

    /// Refuses a `tenure_fence` table that is not the fence's.
    async fn check_table(
        &self,
        tx: &Transaction<'_>,
        mark: Option<String>,
    ) -> Result<(), FenceError> {
        let columns = tx
            .query_typed(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute \
                 WHERE attrelid = to_regclass('tenure_fence') AND attnum > 0 \
                 AND NOT attisdropped ORDER BY attnum",
                &[],
            )
            .await
            .map_err(|e| self.pg_error("reading the columns of tenure_fence", e))?;
        let columns: Vec<(String, String)> = columns.iter().map(|r| (r.get(0), r.get(1))).collect();
        let expected = [("name", "text"), ("token", "bigint")];
        let shape_ok = columns.len() == expected.len()
            && columns
                .iter()
                .zip(expected)
                .all(|((n, t), (en, et))| n == en && t == et);
        if !shape_ok {
            return Err(self.corrupt_table(format!(
                "its columns are {columns:?}, not name text and token bigint: \
                 another program's table of the same name?"
            )));
        }
        if mark.as_deref() != Some(VERSION_MARK) {
            return Err(self.corrupt_table(format!(
                "its comment is {mark:?}, not {VERSION_MARK:?}: create it with \
                 PgFence::CREATE_TABLE, which marks it"
            )));
        }
        Ok(())
    }

    fn pg_error(&self, context: &str, e: tokio_postgres::Error) -> FenceError {
        let context = if e.code() == Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT) {
            format!(
                "{context}: the server ended the session, its transaction idle longer than \
                 idle_in_transaction_session_timeout (nothing was committed)"
            )
        } else {
            context.to_owned()
        };
        FenceError::Backend {
            fence: self.name.clone(),
            context,
            source: BackendError::Postgres(e),
        }
    }

    fn conflict(&self, context: &str, e: tokio_postgres::Error) -> FenceError {
        FenceError::Conflict {
            fence: self.name.clone(),
            context: context.to_owned(),
            source: BackendError::Postgres(e),
        }
    }

    fn corrupt(&self, detail: String) -> FenceError {
        FenceError::Corrupt {
            fence: self.name.clone(),
            location: format!("table tenure_fence, row {:?}", self.name),
            detail,
        }
    }

    fn corrupt_table(&self, detail: String) -> FenceError {
        FenceError::Corrupt {
            fence: self.name.clone(),
            location: "table tenure_fence".to_owned(),
            detail,
        }
    }
}

/// Whether the server rolled the transaction back for a concurrent one.
fn is_conflict(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// An error's message for [`BackendError::Postgres`]: the server's (severity, SQLSTATE,
/// message, detail, hint) when it answered, the client's with its causes otherwise.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} (SQLSTATE {})", db, db.code().code());
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
