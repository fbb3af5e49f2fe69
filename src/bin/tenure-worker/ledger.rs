//! The settlement ledger: an SQLite file shared by the workers of a local group, or (the
//! `postgres` feature, `--ledger postgres://…`) a PostgreSQL database (`ledger_pg.rs`).
//!
//! The worker settles it (`--ledger`); `local_group` and the tests seed and check it with
//! this same file: the test harness (`harness/src/lib.rs`, module `ledger`) includes it
//! by path, the one file it shares so, because the worker, a binary of the published
//! crate, cannot depend on the unpublished harness. Its items are `pub` for the harness.
//!
//! `payments` holds the work (rows grouped in batches); settling a payment and closing a
//! batch are fenced writes, each idempotent (a payment is settled only if it is not yet;
//! a batch is closed under its idempotency key `batch-<n>` only once). Every accepted
//! write is also logged in `writes`, in the same transaction, so a checker can see the
//! order in which tokens were accepted.
//!
//! With named elections (`tenure-worker --elections N`) the ledger is split in N shards: batch
//! `b` belongs to shard `b mod N`, settled by the leader of election `shard-<b mod N>`
//! under a fence of its own, keyed by that name (`SqliteFence::install(&conn, name)`).
//! Each accepted write records the fence it passed, so [`Ledger::verify`] judges token
//! order per fence: tokens of different elections lie in different ranges
//! (`token >> 40` is the election's id) and must never be compared.

#![allow(dead_code)] // the worker settles; seeding and verifying are the harness's
#![allow(unreachable_pub)] // pub for the harness, which includes this file

use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure::fence::rusqlite::{self, params, Connection, OptionalExtension};
use tenure::fence::{FenceError, SqliteFence};
use tenure::FencingToken;

/// The fence of the root election's settlement (no named elections).
pub const FENCE: &str = "settlement";

/// The name of shard `i`'s election, and of its fence.
pub fn shard_name(i: u64) -> String {
    format!("shard-{i}")
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS payments (
    id INTEGER PRIMARY KEY,
    batch INTEGER NOT NULL,
    amount INTEGER NOT NULL,
    settled_token INTEGER,
    settled_by INTEGER,
    settled_ns INTEGER
);
CREATE INDEX IF NOT EXISTS payments_batch ON payments(batch);
CREATE TABLE IF NOT EXISTS batches (
    key TEXT PRIMARY KEY,
    batch INTEGER NOT NULL UNIQUE,
    token INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    node INTEGER NOT NULL,
    settled_ns INTEGER NOT NULL,
    fence TEXT NOT NULL DEFAULT 'settlement'
);
CREATE TABLE IF NOT EXISTS writes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    token INTEGER NOT NULL,
    kind TEXT NOT NULL,
    batch INTEGER NOT NULL,
    payment INTEGER,
    node INTEGER NOT NULL,
    mono_ns INTEGER NOT NULL,
    fence TEXT NOT NULL DEFAULT 'settlement'
);
";

#[cfg(feature = "postgres")]
#[path = "ledger_pg.rs"]
mod pg;

#[cfg(feature = "postgres")]
use tenure::fence::tokio_postgres;

/// Where a ledger is: `--ledger PATH`, an SQLite file, or `--ledger postgres://…` (the
/// `postgres` feature), a PostgreSQL database. Its `Debug` never shows a password.
#[derive(Clone)]
pub enum LedgerAt {
    /// An SQLite file.
    File(PathBuf),
    /// A PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(Box<PgAt>),
}

/// A PostgreSQL ledger's connection settings: tokio-postgres's, and the CA that signed
/// the server's certificate (`sslrootcert=FILE`, libpq's name, which tokio-postgres does
/// not take: with it the connection uses TLS and verifies the server; `sslmode=require`
/// without it is refused rather than left unverified).
#[cfg(feature = "postgres")]
#[derive(Clone)]
pub struct PgAt {
    /// What tokio-postgres connects with.
    pub config: tokio_postgres::Config,
    /// `sslrootcert`.
    pub root_cert: Option<PathBuf>,
}

impl LedgerAt {
    /// `postgres://…` or `postgresql://…` (tokio-postgres's URL form, `sslmode`
    /// included), else a path. The error never repeats the string, which may hold a
    /// password.
    pub fn parse(s: &str) -> Result<LedgerAt, String> {
        let url = s.starts_with("postgres://") || s.starts_with("postgresql://");
        if !url {
            return Ok(LedgerAt::File(PathBuf::from(s)));
        }
        #[cfg(feature = "postgres")]
        {
            let (rest, root_cert) = take_query_param(s, "sslrootcert");
            rest.parse::<tokio_postgres::Config>()
                .map(|config| {
                    LedgerAt::Postgres(Box::new(PgAt {
                        config,
                        root_cert: root_cert.map(PathBuf::from),
                    }))
                })
                .map_err(|e| format!("the PostgreSQL connection string does not parse: {e}"))
        }
        #[cfg(not(feature = "postgres"))]
        {
            Err(
                "this tenure-worker was built without PostgreSQL: build it with --features \
                 postgres for a postgres:// ledger"
                    .to_string(),
            )
        }
    }

    /// The password, when the connection string has none: from `file` (its first line),
    /// else from `PGPASSWORD`, as libpq takes it. A file ledger is unchanged.
    pub fn with_password(self, file: Option<&Path>) -> Result<LedgerAt, String> {
        self.with_password_from(file, std::env::var_os("PGPASSWORD"))
    }

    /// [`with_password`](Self::with_password), with `PGPASSWORD`'s value given.
    pub fn with_password_from(
        self,
        file: Option<&Path>,
        env: Option<std::ffi::OsString>,
    ) -> Result<LedgerAt, String> {
        #[cfg(not(feature = "postgres"))]
        let _ = (file, env);
        match self {
            #[cfg(feature = "postgres")]
            LedgerAt::Postgres(mut at) if at.config.get_password().is_none() => {
                let c = &mut at.config;
                if let Some(file) = file {
                    let text = std::fs::read_to_string(file).map_err(|e| {
                        format!("the ledger's password file {}: {e}", file.display())
                    })?;
                    let line = text.lines().next().unwrap_or("");
                    if line.is_empty() {
                        return Err(format!(
                            "the ledger's password file {} is empty",
                            file.display()
                        ));
                    }
                    c.password(line);
                } else if let Some(p) = env {
                    c.password(p.as_encoded_bytes());
                }
                Ok(LedgerAt::Postgres(at))
            }
            other => Ok(other),
        }
    }

    /// Where it is, for people: the path, or `postgres://USER@HOST:PORT/DB` (no password).
    pub fn describe(&self) -> String {
        match self {
            LedgerAt::File(p) => p.display().to_string(),
            #[cfg(feature = "postgres")]
            LedgerAt::Postgres(at) => {
                let c = &at.config;
                let host = c
                    .get_hosts()
                    .iter()
                    .map(|h| match h {
                        tokio_postgres::config::Host::Tcp(h) => h.clone(),
                        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                let port = c.get_ports().first().copied().unwrap_or(5432);
                format!(
                    "postgres://{}@{host}:{port}/{}",
                    c.get_user().unwrap_or(""),
                    c.get_dbname().unwrap_or("")
                )
            }
        }
    }
}

/// `url` without its query parameter `key`, and that parameter's value (percent-decoded).
#[cfg(feature = "postgres")]
fn take_query_param(url: &str, key: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.split_once('=') {
            Some((k, v)) if k == key => {
                value = Some(percent_decode(v));
                false
            }
            _ => true,
        })
        .collect();
    if kept.is_empty() {
        (base.to_string(), value)
    } else {
        (format!("{base}?{}", kept.join("&")), value)
    }
}

/// `%XX` escapes decoded (a malformed one is kept as it is).
#[cfg(feature = "postgres")]
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl std::fmt::Debug for LedgerAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LedgerAt({})", self.describe())
    }
}

/// The ledger's database, and the fence of this handle.
enum Store {
    Sqlite {
        conn: Connection,
        fence: SqliteFence,
    },
    #[cfg(feature = "postgres")]
    Postgres(pg::PgLedger),
}

/// A connection to the ledger, as worker `node`, under one fence.
pub struct Ledger {
    store: Store,
    node: u64,
    /// The fence's name: [`FENCE`], or the shard's election.
    fence_name: String,
    /// `(i, n)`: this handle settles only batches `b` with `b mod n == i`.
    shard: Option<(u64, u64)>,
}

/// What the ledger says of one fence (one election).
#[derive(Debug, Default, Clone)]
pub struct FenceReport {
    /// Batches closed under it.
    pub settled_batches: u64,
    /// Writes it accepted.
    pub writes: u64,
    /// The lowest token it accepted.
    pub lowest_token: u64,
    /// The highest token it accepted.
    pub highest_token: u64,
    /// The election ids (`token >> 40`) of its accepted tokens: one per incarnation.
    pub election_ids: std::collections::BTreeSet<u64>,
}

/// One accepted write, as the ledger's `writes` table logs it.
#[derive(Debug, Clone)]
pub struct AcceptedWrite {
    /// The fence that accepted it.
    pub fence: String,
    /// Its place in the order the writes took their fences.
    pub seq: u64,
    /// Its token.
    pub token: u64,
    /// The worker that wrote it.
    pub node: u64,
    /// When, on the writer's monotonic clock.
    pub mono_ns: u64,
}

/// What the ledger says at the end of a run.
#[derive(Debug, Default)]
pub struct LedgerReport {
    /// Batches seeded.
    pub seeded_batches: u64,
    /// Batches closed.
    pub settled_batches: u64,
    /// Payments seeded.
    pub payments: u64,
    /// Payments settled.
    pub settled_payments: u64,
    /// Batches closed more than once, or payments settled more than once (must be empty).
    pub duplicates: Vec<String>,
    /// Accepted writes whose token is below an earlier accepted one (must be empty).
    pub token_regressions: Vec<String>,
    /// Accepted writes, every fence's.
    pub writes: u64,
    /// The highest token any fence accepted.
    pub highest_token: u64,
    /// Per fence name (`settlement`, or each shard's election).
    pub fences: std::collections::BTreeMap<String, FenceReport>,
    /// Batches closed under another shard's fence than their own (must be empty).
    pub misplaced: Vec<String>,
}

impl LedgerReport {
    /// Every seeded batch and payment settled once, and every batch under its own fence.
    pub fn exactly_once(&self) -> bool {
        self.seeded_batches == self.settled_batches
            && self.payments == self.settled_payments
            && self.duplicates.is_empty()
            && self.misplaced.is_empty()
    }
}

fn now_ns() -> i64 {
    tenure::clock::monotonic_ns() as i64
}

impl Ledger {
    /// Opens (creating the schema if needed) the ledger at `path` as worker `node`.
    pub fn open(path: &Path, node: u64) -> Result<Ledger, String> {
        Ledger::open_at(&LedgerAt::File(path.to_owned()), node)
    }

    /// Opens the ledger at `at` (a file or a database) as worker `node`.
    pub fn open_at(at: &LedgerAt, node: u64) -> Result<Ledger, String> {
        Ledger::open_fenced(at, node, FENCE, None)
    }

    /// Opens shard `i` of `n` as worker `node`: its batches, under the fence of election
    /// `shard-<i>` (one fence per election, keyed by its name).
    pub fn open_shard(at: &LedgerAt, node: u64, i: u64, n: u64) -> Result<Ledger, String> {
        Ledger::open_fenced(at, node, &shard_name(i), Some((i, n)))
    }

    fn open_fenced(
        at: &LedgerAt,
        node: u64,
        fence_name: &str,
        shard: Option<(u64, u64)>,
    ) -> Result<Ledger, String> {
        let store = match at {
            LedgerAt::File(path) => Ledger::open_sqlite(path, fence_name)?,
            #[cfg(feature = "postgres")]
            LedgerAt::Postgres(at) => Store::Postgres(pg::PgLedger::open(at, node, fence_name)?),
        };
        Ok(Ledger {
            store,
            node,
            fence_name: fence_name.to_string(),
            shard,
        })
    }

    fn open_sqlite(path: &Path, fence_name: &str) -> Result<Store, String> {
        let conn = Connection::open(path).map_err(|e| format!("ledger {}: {e}", path.display()))?;
        conn.busy_timeout(Duration::from_secs(10))
            .and_then(|_| conn.pragma_update(None, "journal_mode", "WAL"))
            .and_then(|_| conn.pragma_update(None, "synchronous", "FULL"))
            .and_then(|_| conn.execute_batch(SCHEMA))
            .map_err(|e| format!("ledger {}: {e}", path.display()))?;
        let fence = SqliteFence::install(&conn, fence_name).map_err(|e| e.to_string())?;
        Ok(Store::Sqlite { conn, fence })
    }

    /// Adds `count` batches of `rows` payments after the last batch; returns the new
    /// batch numbers.
    pub fn seed(&mut self, count: u64, rows: u64) -> Result<Vec<u64>, String> {
        let conn = match &mut self.store {
            Store::Sqlite { conn, .. } => conn,
            #[cfg(feature = "postgres")]
            Store::Postgres(p) => return p.seed(count, rows),
        };
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| e.to_string())?;
        let last: u64 = tx
            .query_row("SELECT COALESCE(MAX(batch), 0) FROM payments", [], |r| {
                r.get::<_, i64>(0)
            })
            .map_err(|e| e.to_string())? as u64;
        let mut out = Vec::new();
        for b in last + 1..=last + count {
            for i in 0..rows {
                tx.execute(
                    "INSERT INTO payments (batch, amount) VALUES (?1, ?2)",
                    params![b as i64, (100 + (b * 7 + i * 13) % 900) as i64],
                )
                .map_err(|e| e.to_string())?;
            }
            out.push(b);
        }
        tx.commit().map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// The fence's name: [`FENCE`], or the shard's election.
    pub fn fence_name(&self) -> &str {
        &self.fence_name
    }

    /// The oldest batch (of this handle's shard) not yet closed, with its payments
    /// still to settle.
    pub fn next_batch(&self) -> Result<Option<(u64, Vec<u64>)>, String> {
        let (i, n) = self.shard.unwrap_or((0, 1));
        let conn = match &self.store {
            Store::Sqlite { conn, .. } => conn,
            #[cfg(feature = "postgres")]
            Store::Postgres(p) => return p.next_batch(i, n),
        };
        let batch: Option<i64> = conn
            .query_row(
                "SELECT MIN(p.batch) FROM payments p
                 WHERE p.batch % ?2 = ?1
                   AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.batch = p.batch)",
                params![i as i64, n as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| e.to_string())?
            .flatten();
        let Some(batch) = batch else { return Ok(None) };
        let mut stmt = conn
            .prepare(
                "SELECT id FROM payments WHERE batch = ?1 AND settled_token IS NULL ORDER BY id",
            )
            .map_err(|e| e.to_string())?;
        let ids = stmt
            .query_map([batch], |r| r.get::<_, i64>(0))
            .map_err(|e| e.to_string())?
            .collect::<Result<Vec<i64>, _>>()
            .map_err(|e| e.to_string())?;
        Ok(Some((
            batch as u64,
            ids.into_iter().map(|i| i as u64).collect(),
        )))
    }

    /// Settles one payment with `token`: fenced and idempotent. `Ok(false)` if it was
    /// already settled.
    pub fn settle_payment(
        &mut self,
        token: FencingToken,
        batch: u64,
        payment: u64,
    ) -> Result<bool, FenceError> {
        let (conn, sqlite_fence) = match &mut self.store {
            Store::Sqlite { conn, fence } => (conn, fence),
            #[cfg(feature = "postgres")]
            Store::Postgres(p) => {
                return p.settle_payment(self.node, &self.fence_name, token, batch, payment)
            }
        };
        let node = self.node as i64;
        let fence = self.fence_name.clone();
        sqlite_fence.write(conn, token, |tx| {
            let n = tx.execute(
                "UPDATE payments SET settled_token = ?1, settled_by = ?2, settled_ns = ?3
                 WHERE id = ?4 AND settled_token IS NULL",
                params![token.term() as i64, node, now_ns(), payment as i64],
            )?;
            if n == 1 {
                tx.execute(
                    "INSERT INTO writes (token, kind, batch, payment, node, mono_ns, fence)
                     VALUES (?1, 'payment', ?2, ?3, ?4, ?5, ?6)",
                    params![
                        token.term() as i64,
                        batch as i64,
                        payment as i64,
                        node,
                        now_ns(),
                        fence
                    ],
                )?;
            }
            Ok(n == 1)
        })
    }

    /// Closes `batch` under its idempotency key: fenced; `Ok(Some(rows))` if this call
    /// closed it, `Ok(None)` if it was closed before.
    pub fn close_batch(
        &mut self,
        token: FencingToken,
        batch: u64,
    ) -> Result<Option<u64>, FenceError> {
        let (conn, sqlite_fence) = match &mut self.store {
            Store::Sqlite { conn, fence } => (conn, fence),
            #[cfg(feature = "postgres")]
            Store::Postgres(p) => return p.close_batch(self.node, &self.fence_name, token, batch),
        };
        let node = self.node as i64;
        let fence = self.fence_name.clone();
        sqlite_fence.write(conn, token, |tx| {
            let (rows, open): (i64, i64) = tx.query_row(
                "SELECT COUNT(settled_token), COUNT(*) - COUNT(settled_token) FROM payments WHERE batch = ?1",
                [batch as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            if open > 0 {
                // Not all payments settled: never close a batch early.
                return Ok(None);
            }
            let n = tx.execute(
                "INSERT OR IGNORE INTO batches (key, batch, token, rows, node, settled_ns, fence)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![format!("batch-{batch}"), batch as i64, token.term() as i64, rows, node, now_ns(), fence],
            )?;
            if n == 1 {
                tx.execute(
                    "INSERT INTO writes (token, kind, batch, payment, node, mono_ns, fence)
                     VALUES (?1, 'batch', ?2, NULL, ?3, ?4, ?5)",
                    params![token.term() as i64, batch as i64, node, now_ns(), fence],
                )?;
                Ok(Some(rows as u64))
            } else {
                Ok(None)
            }
        })
    }

    /// Checks the whole ledger: exactly-once settlement, and token order per fence (each
    /// election's tokens against its own only). With `shards` (`--elections N`), also that
    /// every batch was closed under its own shard's fence.
    pub fn verify_shards(&self, shards: u64) -> Result<LedgerReport, String> {
        let mut r = self.verify()?;
        if shards == 0 {
            return Ok(r);
        }
        let rows = self.rows("SELECT batch, fence FROM batches ORDER BY batch")?;
        for row in rows {
            let (batch, fence) = (int(&row, 0)?, text(&row, 1)?);
            let own = shard_name(batch as u64 % shards);
            if fence != own {
                r.misplaced.push(format!(
                    "batch {batch} closed under fence {fence}, not {own}"
                ));
            }
        }
        Ok(r)
    }

    /// Checks the whole ledger: exactly-once settlement and token order per fence.
    pub fn verify(&self) -> Result<LedgerReport, String> {
        let q = |sql: &'static str| self.number(sql);
        let mut r = LedgerReport {
            seeded_batches: q("SELECT COUNT(DISTINCT batch) FROM payments")?,
            settled_batches: q("SELECT COUNT(*) FROM batches")?,
            payments: q("SELECT COUNT(*) FROM payments")?,
            settled_payments: q("SELECT COUNT(*) FROM payments WHERE settled_token IS NOT NULL")?,
            writes: q("SELECT COUNT(*) FROM writes")?,
            highest_token: q("SELECT COALESCE(MAX(token), 0) FROM writes")?,
            ..Default::default()
        };
        for row in self.rows(
            "SELECT kind, batch, payment, COUNT(*) FROM writes
             GROUP BY kind, batch, payment HAVING COUNT(*) > 1",
        )? {
            r.duplicates.push(format!(
                "{} batch {} payment {:?} written {} times",
                text(&row, 0)?,
                int(&row, 1)?,
                row.get(2).cloned().flatten(),
                int(&row, 3)?
            ));
        }
        let mut rows = Vec::new();
        for row in self.rows("SELECT seq, token, node, fence, kind FROM writes ORDER BY seq")? {
            rows.push((
                int(&row, 0)?,
                int(&row, 1)?,
                int(&row, 2)?,
                text(&row, 3)?,
                text(&row, 4)?,
            ));
        }
        // Per fence: (highest token, its write).
        let mut highest: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
        for (seq, token, node, fence, kind) in rows {
            let f = r.fences.entry(fence.clone()).or_default();
            f.writes += 1;
            f.settled_batches += u64::from(kind == "batch");
            f.lowest_token = if f.writes == 1 {
                token as u64
            } else {
                f.lowest_token.min(token as u64)
            };
            f.highest_token = f.highest_token.max(token as u64);
            f.election_ids
                .insert(token as u64 >> tenure::election::TERM_BITS);
            let h = highest.entry(fence.clone()).or_insert((0, 0));
            if token < h.0 {
                r.token_regressions.push(format!(
                    "fence {fence}: write {seq} by node {node} with token {token} accepted after token {} (write {})",
                    h.0, h.1
                ));
            } else {
                *h = (token, seq);
            }
        }
        Ok(r)
    }

    /// Every accepted write, in the order the writes took their fences.
    pub fn accepted_writes(&self) -> Result<Vec<AcceptedWrite>, String> {
        self.rows("SELECT fence, seq, token, node, mono_ns FROM writes ORDER BY seq")?
            .iter()
            .map(|row| {
                Ok(AcceptedWrite {
                    fence: text(row, 0)?,
                    seq: int(row, 1)? as u64,
                    token: int(row, 2)? as u64,
                    node: int(row, 3)? as u64,
                    mono_ns: int(row, 4)? as u64,
                })
            })
            .collect()
    }

    /// The fence's counters (accepted / rejected), for the metrics.
    pub fn fence_stats(&self) -> std::sync::Arc<tenure::fence::FenceStats> {
        match &self.store {
            Store::Sqlite { fence, .. } => fence.stats().clone(),
            #[cfg(feature = "postgres")]
            Store::Postgres(p) => p.fence_stats(),
        }
    }

    /// The highest token the fence has seen.
    pub fn highest_token(&self) -> Result<FencingToken, FenceError> {
        match &self.store {
            Store::Sqlite { conn, fence } => fence.highest(conn),
            #[cfg(feature = "postgres")]
            Store::Postgres(p) => p.highest_token(),
        }
    }

    /// One number from `sql` (a count or a maximum).
    fn number(&self, sql: &'static str) -> Result<u64, String> {
        match &self.store {
            Store::Sqlite { conn, .. } => conn
                .query_row(sql, [], |r| r.get::<_, i64>(0))
                .map(|v| v as u64)
                .map_err(|e| e.to_string()),
            #[cfg(feature = "postgres")]
            Store::Postgres(p) => p.number(sql),
        }
    }

    /// The rows of `sql`, each column as text (`None` for NULL), read the same way from
    /// either database.
    fn rows(&self, sql: &'static str) -> Result<Vec<Vec<Option<String>>>, String> {
        match &self.store {
            Store::Sqlite { conn, .. } => {
                let mut stmt = conn.prepare(sql).map_err(|e| e.to_string())?;
                let columns = stmt.column_count();
                let rows = stmt
                    .query_map([], |row| {
                        (0..columns)
                            .map(|i| {
                                Ok(match row.get::<_, rusqlite::types::Value>(i)? {
                                    rusqlite::types::Value::Null => None,
                                    rusqlite::types::Value::Integer(v) => Some(v.to_string()),
                                    rusqlite::types::Value::Real(v) => Some(v.to_string()),
                                    rusqlite::types::Value::Text(t) => Some(t),
                                    rusqlite::types::Value::Blob(b) => {
                                        Some(String::from_utf8_lossy(&b).into_owned())
                                    }
                                })
                            })
                            .collect::<Result<Vec<_>, rusqlite::Error>>()
                    })
                    .map_err(|e| e.to_string())?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                Ok(rows)
            }
            #[cfg(feature = "postgres")]
            Store::Postgres(p) => p.rows(sql),
        }
    }
}

/// Column `i` of a row of [`Ledger::rows`], as text.
fn text(row: &[Option<String>], i: usize) -> Result<String, String> {
    row.get(i)
        .cloned()
        .flatten()
        .ok_or_else(|| format!("ledger: column {i} of a row is missing or NULL"))
}

/// Column `i` of a row of [`Ledger::rows`], as an integer.
fn int(row: &[Option<String>], i: usize) -> Result<i64, String> {
    let t = text(row, i)?;
    t.parse()
        .map_err(|_| format!("ledger: column {i} of a row is {t:?}, not an integer"))
}
