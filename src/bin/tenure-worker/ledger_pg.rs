//! The settlement ledger on PostgreSQL (`--ledger postgres://…`; the `postgres` feature):
//! the same tables, writes and checks as the SQLite ledger, under a
//! `tenure::fence::PgFence` per fence name.
//!
//! The ledger's callers are synchronous (a batch runs on a blocking thread, as a worker
//! thread calls a bank row by row), so each ledger owns a thread with a current-thread
//! tokio runtime and its connection, and runs each call there. A caller may be anywhere:
//! in a runtime or not.

use std::sync::mpsc;
use std::sync::Arc;

use std::path::Path;

use tenure::fence::tokio_postgres::config::SslMode;
use tenure::fence::tokio_postgres::{self, Client, Config, NoTls, Transaction};
use tenure::fence::{BackendError, FenceError, FenceStats, PgFence, PgWriteFuture};
use tenure::FencingToken;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The ledger's tables (the fence's own, `tenure_fence`, is [`PgFence::install`]'s).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS payments (
    id bigserial PRIMARY KEY,
    batch bigint NOT NULL,
    amount bigint NOT NULL,
    settled_token bigint,
    settled_by bigint,
    settled_ns bigint
);
CREATE INDEX IF NOT EXISTS payments_batch ON payments(batch);
CREATE TABLE IF NOT EXISTS batches (
    key text PRIMARY KEY,
    batch bigint NOT NULL UNIQUE,
    token bigint NOT NULL,
    rows bigint NOT NULL,
    node bigint NOT NULL,
    settled_ns bigint NOT NULL,
    fence text NOT NULL DEFAULT 'settlement'
);
CREATE TABLE IF NOT EXISTS writes (
    seq bigserial PRIMARY KEY,
    token bigint NOT NULL,
    kind text NOT NULL,
    batch bigint NOT NULL,
    payment bigint,
    node bigint NOT NULL,
    mono_ns bigint NOT NULL,
    fence text NOT NULL DEFAULT 'settlement'
);
";

/// The advisory lock under which workers starting together create the tables (a bare
/// `CREATE TABLE IF NOT EXISTS` from two sessions at once can fail on the catalog).
const SCHEMA_LOCK: i64 = 0x6c65_6467_6572;

/// What a call runs on the ledger's thread.
pub(super) struct State {
    rt: tokio::runtime::Runtime,
    client: Client,
    fence: PgFence,
    /// Why the last attempt to open a closed connection again failed.
    reconnect_error: Option<String>,
}

impl State {
    /// Opens the connection again if it closed. The fence keeps its counters; on a
    /// failure the closed client stays and the reason is kept for the next error.
    fn reconnect_if_closed(&mut self, at: &super::PgAt, name: &str) {
        if !self.client.is_closed() {
            return;
        }
        #[cfg(feature = "mutations")]
        if tenure::mutation::active("ledger-keeps-a-closed-connection") {
            // Broken on purpose (mutation testing): the closed connection stays.
            return;
        }
        match self.rt.block_on(connect(at, name)) {
            Ok((client, _)) => {
                self.client = client;
                self.reconnect_error = None;
            }
            Err(e) => self.reconnect_error = Some(e),
        }
    }

    /// `e`, from a call on this connection, with why it could not be opened again.
    fn error(&self, context: &str, e: tokio_postgres::Error) -> String {
        match &self.reconnect_error {
            Some(why) => format!("{}; opening it again: {why}", pg(context, e)),
            None => pg(context, e),
        }
    }
}

type Job = Box<dyn FnOnce(&mut State) + Send>;

/// A connection to a PostgreSQL ledger under one fence, on a thread of its own.
pub(super) struct PgLedger {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    stats: Arc<FenceStats>,
}

/// An error of the database, as the server said it (never the connection string), in
/// the words of the fence's errors.
fn pg(context: &str, e: tokio_postgres::Error) -> String {
    format!("ledger: {context}: {}", BackendError::Postgres(e))
}

impl PgLedger {
    /// Connects as worker `node`, creates the tables if they are missing, and installs
    /// the fence `fence_name`.
    ///
    /// A connection the server or the network closed (a restarted server, an operator's
    /// `pg_terminate_backend`) fails the call that finds it closed, and is opened again
    /// before the next; if that fails, the call fails with the reason, and the one after
    /// it tries again.
    pub(super) fn open(at: &super::PgAt, node: u64, fence_name: &str) -> Result<PgLedger, String> {
        let mut at = at.clone();
        if at.config.get_application_name().is_none() {
            // What pg_stat_activity shows an operator looking for the worker's sessions.
            at.config
                .application_name(format!("tenure-worker {node} {fence_name}"));
        }
        let name = fence_name.to_owned();
        let (ready, ready_rx) = mpsc::sync_channel::<Result<Arc<FenceStats>, String>>(1);
        let (jobs, jobs_rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name(format!("ledger {name}"))
            .spawn(move || {
                let opened = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("ledger: a runtime for the connection: {e}"))
                    .and_then(|rt| {
                        let (client, fence) = rt.block_on(connect(&at, &name))?;
                        Ok(State {
                            rt,
                            client,
                            fence,
                            reconnect_error: None,
                        })
                    });
                match opened {
                    Ok(mut state) => {
                        let _ = ready.send(Ok(state.fence.stats().clone()));
                        for job in jobs_rx {
                            state.reconnect_if_closed(&at, &name);
                            job(&mut state);
                        }
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                    }
                }
            })
            .map_err(|e| format!("ledger: a thread for the connection: {e}"))?;
        let stats = ready_rx
            .recv()
            .map_err(|_| "ledger: the connection's thread ended while opening".to_string())??;
        Ok(PgLedger {
            jobs: Some(jobs),
            thread: Some(thread),
            stats,
        })
    }

    /// Runs `f` on the ledger's thread and waits for its answer. Panics if that thread
    /// is gone (it panicked: a bug, as is any panic).
    fn call<T: Send + 'static>(&self, f: impl FnOnce(&mut State) -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::sync_channel(1);
        self.jobs
            .as_ref()
            .expect("an open ledger")
            .send(Box::new(move |s| {
                let _ = tx.send(f(s));
            }))
            .expect("the ledger's thread is running");
        rx.recv().expect("the ledger's thread answered")
    }

    pub(super) fn fence_stats(&self) -> Arc<FenceStats> {
        self.stats.clone()
    }

    pub(super) fn highest_token(&self) -> Result<FencingToken, FenceError> {
        self.call(|s| s.rt.block_on(s.fence.highest(&s.client)))
    }

    pub(super) fn seed(&self, count: u64, rows: u64) -> Result<Vec<u64>, String> {
        self.call(move |s| {
            let State { rt, client, .. } = s;
            rt.block_on(async move {
                let tx = client.transaction().await.map_err(|e| pg("seeding", e))?;
                let seeded = async {
                    tx.execute("LOCK TABLE payments IN EXCLUSIVE MODE", &[])
                        .await
                        .map_err(|e| pg("seeding", e))?;
                    let last: i64 = tx
                        .query_one("SELECT COALESCE(MAX(batch), 0)::bigint FROM payments", &[])
                        .await
                        .map_err(|e| pg("seeding", e))?
                        .get(0);
                    let mut out = Vec::new();
                    for b in last as u64 + 1..=last as u64 + count {
                        for i in 0..rows {
                            let amount = (100 + (b * 7 + i * 13) % 900) as i64;
                            tx.execute(
                                "INSERT INTO payments (batch, amount) VALUES ($1, $2)",
                                &[&(b as i64), &amount],
                            )
                            .await
                            .map_err(|e| pg("seeding", e))?;
                        }
                        out.push(b);
                    }
                    Ok::<_, String>(out)
                }
                .await;
                let out = match seeded {
                    Ok(out) => out,
                    Err(e) => {
                        // Rolled back now: a dropped transaction's ROLLBACK would wait
                        // for this thread's next call, the table locked until then.
                        let _ = tx.rollback().await;
                        return Err(e);
                    }
                };
                tx.commit().await.map_err(|e| pg("seeding", e))?;
                Ok(out)
            })
        })
    }

    pub(super) fn next_batch(&self, i: u64, n: u64) -> Result<Option<(u64, Vec<u64>)>, String> {
        self.call(move |s| {
            s.rt.block_on(async {
                let batch: Option<i64> = s
                    .client
                    .query_one(
                        "SELECT MIN(p.batch) FROM payments p
                         WHERE p.batch % $2 = $1
                           AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.batch = p.batch)",
                        &[&(i as i64), &(n as i64)],
                    )
                    .await
                    .map_err(|e| s.error("finding the next batch", e))?
                    .get(0);
                let Some(batch) = batch else { return Ok(None) };
                let ids = s
                    .client
                    .query(
                        "SELECT id FROM payments WHERE batch = $1 AND settled_token IS NULL ORDER BY id",
                        &[&batch],
                    )
                    .await
                    .map_err(|e| s.error("reading the batch's payments", e))?
                    .iter()
                    .map(|r| r.get::<_, i64>(0) as u64)
                    .collect();
                Ok(Some((batch as u64, ids)))
            })
        })
    }

    /// Runs `f` under the fence with `token`, on the ledger's thread.
    fn fenced<T: Send + 'static>(
        &self,
        token: FencingToken,
        f: impl for<'t> FnOnce(&'t Transaction<'_>) -> PgWriteFuture<'t, T> + Send + 'static,
    ) -> Result<T, FenceError> {
        self.call(move |s| s.rt.block_on(s.fence.write(&mut s.client, token, f)))
    }

    pub(super) fn settle_payment(
        &self,
        node: u64,
        fence_name: &str,
        token: FencingToken,
        batch: u64,
        payment: u64,
    ) -> Result<bool, FenceError> {
        let fence_name = fence_name.to_owned();
        self.fenced(token, move |tx| {
            Box::pin(async move {
                let (t, node, now) = (token.term() as i64, node as i64, super::now_ns());
                let n = tx
                    .execute(
                        "UPDATE payments SET settled_token = $1, settled_by = $2, settled_ns = $3
                         WHERE id = $4 AND settled_token IS NULL",
                        &[&t, &node, &now, &(payment as i64)],
                    )
                    .await?;
                if n == 1 {
                    let write = (t, batch as i64, Some(payment as i64), node, now);
                    log_write(tx, "payment", write, &fence_name).await?;
                }
                Ok(n == 1)
            })
        })
    }

    pub(super) fn close_batch(
        &self,
        node: u64,
        fence_name: &str,
        token: FencingToken,
        batch: u64,
    ) -> Result<Option<u64>, FenceError> {
        let fence_name = fence_name.to_owned();
        self.fenced(token, move |tx| {
            Box::pin(async move {
                let (t, node, now, b) = (
                    token.term() as i64,
                    node as i64,
                    super::now_ns(),
                    batch as i64,
                );
                let row = tx
                    .query_one(
                        "SELECT COUNT(settled_token), COUNT(*) - COUNT(settled_token)
                         FROM payments WHERE batch = $1",
                        &[&b],
                    )
                    .await?;
                let (rows, open): (i64, i64) = (row.get(0), row.get(1));
                if open > 0 {
                    // Not all payments settled: never close a batch early.
                    return Ok(None);
                }
                let key = format!("batch-{batch}");
                let n = tx
                    .execute(
                        "INSERT INTO batches (key, batch, token, rows, node, settled_ns, fence)
                         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
                        &[&key, &b, &t, &rows, &node, &now, &fence_name],
                    )
                    .await?;
                if n != 1 {
                    return Ok(None);
                }
                log_write(tx, "batch", (t, b, None, node, now), &fence_name).await?;
                Ok(Some(rows as u64))
            })
        })
    }

    /// One number from `sql` (a count or a maximum).
    pub(super) fn number(&self, sql: &'static str) -> Result<u64, String> {
        self.call(move |s| {
            s.rt.block_on(async {
                let row = s
                    .client
                    .query_one(sql, &[])
                    .await
                    .map_err(|e| pg("verifying", e))?;
                Ok(row.get::<_, i64>(0) as u64)
            })
        })
    }

    /// The rows of `sql`, each column read as text (`None` for NULL), for the shared
    /// checks to parse.
    pub(super) fn rows(&self, sql: &'static str) -> Result<Vec<Vec<Option<String>>>, String> {
        self.call(move |s| {
            s.rt.block_on(async {
                let rows = s
                    .client
                    .simple_query(sql)
                    .await
                    .map_err(|e| pg("verifying", e))?;
                Ok(rows
                    .into_iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => {
                            Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                        }
                        _ => None,
                    })
                    .collect())
            })
        })
    }
}

impl Drop for PgLedger {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Logs an accepted write in `writes`: (token, batch, payment, node, mono_ns), of `kind`.
async fn log_write(
    tx: &Transaction<'_>,
    kind: &str,
    (token, batch, payment, node, mono_ns): (i64, i64, Option<i64>, i64, i64),
    fence_name: &str,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "INSERT INTO writes (token, kind, batch, payment, node, mono_ns, fence)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &token,
            &kind,
            &batch,
            &payment,
            &node,
            &mono_ns,
            &fence_name,
        ],
    )
    .await
    .map(drop)
}

/// TLS that trusts the CA in `root` only (PEM), on ring, as tenure's QUIC.
fn tls(root: &Path) -> Result<MakeRustlsConnect, String> {
    let pem =
        std::fs::read(root).map_err(|e| format!("ledger: sslrootcert {}: {e}", root.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| format!("ledger: sslrootcert {}: {e}", root.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("ledger: sslrootcert {}: {e}", root.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "ledger: sslrootcert {} holds no PEM certificate",
            root.display()
        ));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("ledger: TLS: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

async fn connect(at: &super::PgAt, fence_name: &str) -> Result<(Client, PgFence), String> {
    let config: &Config = &at.config;
    let mut client = match &at.root_cert {
        Some(root) => {
            let (client, connection) = config
                .connect(tls(root)?)
                .await
                .map_err(|e| pg("connecting (TLS)", e))?;
            tokio::spawn(connection);
            client
        }
        None if config.get_ssl_mode() == SslMode::Require => {
            return Err(
                "ledger: sslmode=require needs sslrootcert=FILE, the CA that signed \
                        the server's certificate: the worker verifies the server it settles \
                        into"
                    .to_string(),
            )
        }
        None => {
            let (client, connection) = config
                .connect(NoTls)
                .await
                .map_err(|e| pg("connecting", e))?;
            tokio::spawn(connection);
            client
        }
    };
    let tx = client
        .transaction()
        .await
        .map_err(|e| pg("creating the tables", e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(|e| pg("creating the tables", e))?;
    tx.batch_execute(SCHEMA)
        .await
        .map_err(|e| pg("creating the tables", e))?;
    tx.commit()
        .await
        .map_err(|e| pg("creating the tables", e))?;
    let fence = PgFence::install(&mut client, fence_name)
        .await
        .map_err(|e| format!("ledger: {e}"))?;
    Ok((client, fence))
}
