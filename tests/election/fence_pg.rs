//! The PostgreSQL fence ([`PgFence`]) against a real server (`TENURE_PG_URL`; see
//! `tenure_harness::pg`): the SQLite fence's rules, and what only a server with
//! concurrent sessions can show: writers racing with interleaved tokens under each
//! isolation level, a stale leader that pauses between its check and its commit (and one
//! that freezes there), a connection dropped mid-transaction, a serialization failure.
//!
//! Every test skips without a server, unless `TENURE_PG_REQUIRE=1`. One command runs
//! them against a throwaway server: `scripts/pg.sh run cargo test --test election fence_pg`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tenure::fence::tokio_postgres::error::SqlState;
use tenure::fence::tokio_postgres::{Client, IsolationLevel, TransactionBuilder};
use tenure::fence::{FenceError, PgFence};
use tenure::FencingToken;
use tenure_harness::pg::{self, TestDb};

const T: fn(u64) -> FencingToken = FencingToken::new;

/// How long a test waits for something that should take milliseconds.
const WAIT: Duration = Duration::from_secs(20);

/// The test's schema, or `None` when there is no server (and none is required).
async fn db(label: &str) -> Option<TestDb> {
    if pg::skip_test().is_some() {
        return None;
    }
    Some(TestDb::new(label).await)
}

/// The test's schema with the `writes` table and the fence `settlement` installed, and
/// a client in it; `None` when there is no server (and none is required).
async fn setup(label: &str) -> Option<(TestDb, Client, PgFence)> {
    let db = db(label).await?;
    let mut c = db.client().await;
    tables(&c).await;
    let fence = PgFence::install(&mut c, "settlement")
        .await
        .expect("install");
    Some((db, c, fence))
}

/// The guarded data: what each accepted write wrote, in the order the writes took the
/// fence's row (a sequence drawn after the check, so under the row's lock).
async fn tables(c: &Client) {
    c.batch_execute(
        "CREATE TABLE writes (seq bigserial PRIMARY KEY, writer int NOT NULL, token bigint NOT NULL)",
    )
    .await
    .expect("the writes table");
}

/// One fenced write: a row of `writes`.
async fn write(fence: &PgFence, c: &mut Client, writer: i32, token: u64) -> Result<(), FenceError> {
    fence
        .write(c, T(token), move |tx| {
            Box::pin(async move {
                tx.execute(
                    "INSERT INTO writes (writer, token) VALUES ($1, $2)",
                    &[&writer, &(token as i64)],
                )
                .await?;
                Ok(())
            })
        })
        .await
}

/// What `writes` holds, in the order the writes took the fence: `(writer, token)`.
async fn written(c: &Client) -> Vec<(i32, u64)> {
    c.query("SELECT writer, token FROM writes ORDER BY seq", &[])
        .await
        .expect("reading writes")
        .iter()
        .map(|r| (r.get::<_, i32>(0), r.get::<_, i64>(1) as u64))
        .collect()
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {WAIT:?}"))
}

#[tokio::test]
async fn pg_fence_accepts_an_equal_or_higher_token_and_refuses_a_lower_one_naming_both() {
    let Some((db, mut c, fence)) = setup("basics").await else {
        return;
    };
    assert_eq!(fence.highest(&c).await.expect("highest"), T(0));
    write(&fence, &mut c, 1, 41).await.expect("the first token");
    write(&fence, &mut c, 1, 41)
        .await
        .expect("the same tenure again");
    write(&fence, &mut c, 2, 42).await.expect("a newer tenure");
    match write(&fence, &mut c, 1, 41).await {
        Err(FenceError::Stale { presented, highest }) => {
            assert_eq!((presented, highest), (T(41), T(42)));
        }
        other => panic!("a stale token must be refused, got {other:?}"),
    }
    assert_eq!(written(&c).await, vec![(1, 41), (1, 41), (2, 42)]);
    assert_eq!(fence.highest(&c).await.expect("highest"), T(42));
    let s = fence.stats().snapshot();
    assert_eq!((s.accepted, s.rejected_stale), (3, 1));
    // Another fence in the same table keeps tokens of its own.
    let other = PgFence::install(&mut c, "shard-1").await.expect("install");
    write(&other, &mut c, 3, 5)
        .await
        .expect("another name's first token");
    db.drop_schema().await;
}

#[tokio::test]
async fn pg_install_keeps_the_token_and_refuses_a_table_that_is_not_the_fences() {
    let Some((db, mut c, fence)) = setup("install").await else {
        return;
    };
    write(&fence, &mut c, 1, 7).await.expect("a write");
    // Installing again, from another connection, keeps the row's token.
    let mut c2 = db.client().await;
    let again = PgFence::install(&mut c2, "settlement")
        .await
        .expect("again");
    assert_eq!(again.highest(&c2).await.expect("highest"), T(7));

    // A table of the same name with other columns, or without the fence's mark.
    let foreign = TestDb::new("install_foreign").await;
    let mut f = foreign.client().await;
    f.batch_execute("CREATE TABLE tenure_fence (name text PRIMARY KEY, token integer NOT NULL)")
        .await
        .expect("a foreign table");
    match PgFence::install(&mut f, "settlement").await {
        Err(e @ FenceError::Corrupt { .. }) => {
            let text = e.to_string();
            assert!(text.contains("integer"), "names what it found: {text}");
        }
        other => panic!("a table with other columns must be refused, got {other:?}"),
    }
    f.batch_execute(
        "DROP TABLE tenure_fence; \
         CREATE TABLE tenure_fence (name text PRIMARY KEY, token bigint NOT NULL)",
    )
    .await
    .expect("an unmarked table");
    match PgFence::install(&mut f, "settlement").await {
        Err(e @ FenceError::Corrupt { .. }) => {
            assert!(e.to_string().contains("CREATE_TABLE"), "says how: {e}");
        }
        other => panic!("an unmarked table must be refused, got {other:?}"),
    }
    // The DBA's statement makes a table install accepts.
    f.batch_execute(&format!(
        "DROP TABLE tenure_fence; {}",
        PgFence::CREATE_TABLE
    ))
    .await
    .expect("the DBA's statement");
    PgFence::install(&mut f, "settlement")
        .await
        .expect("install on the DBA's table");
    foreign.drop_schema().await;
    db.drop_schema().await;
}

#[tokio::test]
async fn pg_failing_guarded_write_rolls_back_the_token_advance() {
    let Some((db, mut c, fence)) = setup("rollback").await else {
        return;
    };
    write(&fence, &mut c, 1, 5).await.expect("a write");
    let failed = fence
        .write(&mut c, T(9), |tx| {
            Box::pin(async move {
                tx.execute("INSERT INTO writes (writer, token) VALUES (2, 9)", &[])
                    .await?;
                tx.execute("INSERT INTO no_such_table VALUES (1)", &[])
                    .await?;
                Ok(())
            })
        })
        .await;
    match failed {
        Err(e @ FenceError::WriteFailed { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("no_such_table") && text.contains("42P01"),
                "the server's own message, with its SQLSTATE: {text}"
            );
        }
        other => panic!("expected WriteFailed, got {other:?}"),
    }
    assert_eq!(fence.highest(&c).await.expect("highest"), T(5));
    assert_eq!(written(&c).await, vec![(1, 5)]);
    // The token is still good.
    write(&fence, &mut c, 2, 9)
        .await
        .expect("the same token, again");
    db.drop_schema().await;
}

#[tokio::test]
async fn pg_token_at_or_above_two_to_the_63_is_refused_as_out_of_range() {
    let Some((db, mut c, fence)) = setup("range").await else {
        return;
    };
    for token in [1u64 << 63, u64::MAX] {
        match write(&fence, &mut c, 1, token).await {
            Err(FenceError::TokenOutOfRange { presented, .. }) => {
                assert_eq!(presented, T(token));
            }
            other => panic!("token {token} must be out of range, got {other:?}"),
        }
    }
    assert_eq!(fence.highest(&c).await.expect("highest"), T(0));
    let max = i64::MAX as u64;
    fence
        .write(&mut c, T(max), |_| Box::pin(async { Ok(()) }))
        .await
        .expect("2^63 - 1 fits");
    assert_eq!(fence.highest(&c).await.expect("highest"), T(max));
    db.drop_schema().await;
}

#[tokio::test]
async fn pg_missing_fence_row_is_corrupt_not_a_panic() {
    let Some((db, mut c, fence)) = setup("corrupt").await else {
        return;
    };
    c.batch_execute("DELETE FROM tenure_fence")
        .await
        .expect("delete");
    match write(&fence, &mut c, 1, 3).await {
        Err(e @ FenceError::Corrupt { .. }) => assert!(e.to_string().contains("install")),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(matches!(
        fence.highest(&c).await,
        Err(FenceError::Corrupt { .. })
    ));
    assert!(written(&c).await.is_empty());
    db.drop_schema().await;
}

/// Six writers, each on its own connection, write with tokens around a leader token
/// that advances: some current, some a tenure or two behind. Under `level`, what
/// committed must be in token order, every refusal of a token below one accepted, and
/// the counts must agree. Conflicts (REPEATABLE READ, SERIALIZABLE) are retried with the
/// same token.
async fn race(level: IsolationLevel, label: &str) {
    let Some((db, c, fence)) = setup(label).await else {
        return;
    };
    let fence = fence.with_isolation(level);
    let leader = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let mut tasks = Vec::new();
    for writer in 0..6i32 {
        let mut wc = db.client().await;
        let fence = fence.clone();
        let leader = leader.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(writer as u64);
            let (mut ok, mut stale, mut conflicts) = (0u64, 0u64, 0u64);
            for _ in 0..40 {
                let now = leader.load(std::sync::atomic::Ordering::SeqCst);
                let token = now.saturating_sub(rng.gen_range(0..3)).max(1);
                if writer == 0 {
                    leader.fetch_add(
                        u64::from(rng.gen_bool(0.3)),
                        std::sync::atomic::Ordering::SeqCst,
                    );
                }
                let mut tries = 0;
                loop {
                    match write(&fence, &mut wc, writer, token).await {
                        Ok(()) => ok += 1,
                        Err(FenceError::Stale { presented, highest }) => {
                            assert!(presented < highest, "a refusal names a higher token");
                            stale += 1;
                        }
                        Err(e) if e.is_conflict() => {
                            conflicts += 1;
                            tries += 1;
                            assert!(tries < 50, "writer {writer}: 50 conflicts in a row: {e}");
                            continue;
                        }
                        Err(e) => panic!("writer {writer}: {e}"),
                    }
                    break;
                }
            }
            (ok, stale, conflicts)
        }));
    }
    let (mut ok, mut stale, mut conflicts) = (0, 0, 0);
    for t in tasks {
        let (o, s, k) = within("a writer", t).await.expect("a writer panicked");
        ok += o;
        stale += s;
        conflicts += k;
    }
    let rows = written(&c).await;
    let tokens: Vec<u64> = rows.iter().map(|(_, t)| *t).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] <= w[1]),
        "{label}: writes committed out of token order: {tokens:?}"
    );
    assert_eq!(
        rows.len() as u64,
        ok,
        "{label}: every accepted write is there, once"
    );
    assert_eq!(ok + stale, 240);
    let highest = fence.highest(&c).await.expect("highest");
    assert_eq!(
        Some(&highest.term()),
        tokens.last(),
        "{label}: the fence holds the last token"
    );
    let s = fence.stats().snapshot();
    assert_eq!((s.accepted, s.rejected_stale), (ok, stale));
    eprintln!(
        "{label}: 6 writers, 240 writes: {ok} accepted in token order, {stale} refused as \
         stale, {conflicts} conflicts retried"
    );
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_interleaved_writers_commit_in_token_order_under_read_committed() {
    race(IsolationLevel::ReadCommitted, "race_rc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_interleaved_writers_commit_in_token_order_under_repeatable_read() {
    race(IsolationLevel::RepeatableRead, "race_rr").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_interleaved_writers_commit_in_token_order_under_serializable() {
    race(IsolationLevel::Serializable, "race_ser").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_stale_leader_that_pauses_between_check_and_commit_lands_before_the_new_leader() {
    let Some((db, c, fence)) = setup("pause").await else {
        return;
    };
    let mut old = db.client().await;
    let mut new = db.client().await;
    // The old leader (41) passes the check, then pauses 300 ms before its write and commit.
    let tx = old.transaction().await.expect("begin");
    fence
        .check_and_advance(&tx, T(41))
        .await
        .expect("41 passes");
    let newer = {
        let fence = fence.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = write(&fence, &mut new, 2, 42).await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.execute("INSERT INTO writes (writer, token) VALUES (1, 41)", &[])
        .await
        .expect("the old leader's write");
    fence.commit(tx).await.expect("the old leader commits");
    let (r, waited) = within("the new leader's write", newer).await.expect("task");
    r.expect("the new leader writes after it");
    // The stale write landed before the newer token's, never after it.
    assert_eq!(written(&c).await, vec![(1, 41), (2, 42)]);
    eprintln!(
        "the new leader waited {:.0} ms for the paused holder's commit",
        waited.as_secs_f64() * 1e3
    );
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_stale_leader_frozen_between_check_and_commit_is_cut_off_and_writes_nothing() {
    let Some((db, c, fence)) = setup("frozen").await else {
        return;
    };
    let idle = Duration::from_millis(500);
    let frozen = fence.clone().with_idle_timeout(Some(idle));
    let mut old = db.connect().await;
    let mut new = db.client().await;
    let tx = old.client.transaction().await.expect("begin");
    frozen
        .check_and_advance(&tx, T(41))
        .await
        .expect("41 passes");
    tx.execute("INSERT INTO writes (writer, token) VALUES (1, 41)", &[])
        .await
        .expect("the old leader's write, before it freezes");
    // The new leader waits on the fence's row until the server ends the frozen session.
    let started = Instant::now();
    within("the new leader's write", write(&fence, &mut new, 2, 42))
        .await
        .expect("the new leader writes once the frozen holder is cut off");
    let waited = started.elapsed();
    // The server said why it ended the session.
    let said = within("the frozen session's end", &mut old.connection)
        .await
        .expect("the connection task");
    let e = said.expect_err("the server ended the session");
    assert_eq!(
        e.code(),
        Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT),
        "{e:?}"
    );
    // The old leader wakes and commits: nothing of it lands, and the error says so.
    match frozen.commit(tx).await {
        Err(e @ FenceError::Backend { .. }) => {
            assert!(e.to_string().contains("nothing was committed"), "{e}");
        }
        other => panic!("the frozen holder's commit must fail as not made, got {other:?}"),
    }
    assert_eq!(written(&c).await, vec![(2, 42)]);
    eprintln!(
        "the frozen holder was cut off after {:.0} ms (idle timeout {} ms); the server said: {}",
        waited.as_secs_f64() * 1e3,
        idle.as_millis(),
        e.as_db_error()
            .map_or_else(|| e.to_string(), ToString::to_string)
    );
    db.drop_schema().await;
}

/// The backend process id of `c`'s session.
async fn backend_pid(c: &Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pg_backend_pid")
        .get(0)
}

/// `pid`'s session as `pg_stat_activity` shows it: (state, wait event type).
async fn activity(observer: &Client, pid: i32) -> (Option<String>, Option<String>) {
    let row = observer
        .query_one(
            "SELECT state, wait_event_type FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .await
        .expect("pg_stat_activity");
    (row.get(0), row.get(1))
}

/// Waits until `pid`'s session waits on a lock (the fence's row).
async fn waits_on_a_lock(observer: &Client, pid: i32) {
    within("a session waiting on the fence's row", async {
        while activity(observer, pid).await.1.as_deref() != Some("Lock") {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A holder takes the fence's row with `held`; `refused` (a future that checks a lower
/// token on the session `pid`) waits for the row, and the holder commits once it does.
/// Returns what `refused` returned.
async fn refused_after_waiting<T>(
    fence: &PgFence,
    db: &TestDb,
    observer: &Client,
    pid: i32,
    held: u64,
    refused: impl std::future::Future<Output = T>,
) -> T {
    let mut holder = db.client().await;
    let htx = holder.transaction().await.expect("begin");
    fence
        .check_and_advance(&htx, T(held))
        .await
        .expect("the holder passes");
    let commit = async {
        waits_on_a_lock(observer, pid).await;
        fence.commit(htx).await.expect("the holder commits");
    };
    let (out, ()) = within("the refused check", async { tokio::join!(refused, commit) }).await;
    out
}

// A refused check that waited for the fence's row keeps that row locked until its
// transaction ends (the server locks the newest version to re-check it). A worker whose
// connection runs only while it calls (a current-thread runtime, as `tenure-worker`'s
// ledger has) never sent the ROLLBACK a dropped transaction queues, and held every later
// writer of the fence off: the netns suite's seed 3 settled nothing on one shard for 30 s.
// `write` rolls back before it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_refused_write_that_waited_for_the_row_frees_it_before_returning() {
    use tenure::fence::tokio_postgres::{connect, NoTls};
    let Some((db, c, fence)) = setup("refused_frees").await else {
        return;
    };
    // The refused writer's connection runs only while the test drives it.
    let (mut stale, conn) = connect(&db.url(), NoTls).await.expect("connect");
    let mut conn = std::pin::pin!(conn);
    let pid = tokio::select! {
        pid = backend_pid(&stale) => pid,
        r = &mut conn => panic!("the connection ended: {r:?}"),
    };
    let refused = async {
        tokio::select! {
            r = write(&fence, &mut stale, 1, 41) => r,
            r = &mut conn => panic!("the connection ended: {r:?}"),
        }
    };
    let r = refused_after_waiting(&fence, &db, &c, pid, 42, refused).await;
    match r {
        Err(FenceError::Stale { presented, highest }) => {
            assert_eq!((presented, highest), (T(41), T(42)));
        }
        other => panic!("41 after 42 must be stale, got {other:?}"),
    }
    // Its connection is no longer driven: whatever the session holds, it holds now.
    let (state, _) = activity(&c, pid).await;
    assert_eq!(
        state.as_deref(),
        Some("idle"),
        "the refused writer's session must have ended its transaction"
    );
    let mut next = db.client().await;
    within("the next leader's write", write(&fence, &mut next, 3, 43))
        .await
        .expect("the next leader writes");
    assert_eq!(written(&c).await, vec![(3, 43)]);
    drop(stale);
    db.drop_schema().await;
}

// The same refusal inside a caller's transaction: the row stays locked until the caller
// rolls back, and the idle timeout is set for it all the same, so that a caller that
// froze before rolling back frees the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_refused_check_holds_the_row_under_the_idle_timeout_until_rolled_back() {
    let Some((db, c, fence)) = setup("refused_holds").await else {
        return;
    };
    let fence = fence.with_idle_timeout(Some(Duration::from_secs(7)));
    let mut stale = db.client().await;
    let pid = backend_pid(&stale).await;
    let stx = stale.transaction().await.expect("begin");
    let r = refused_after_waiting(
        &fence,
        &db,
        &c,
        pid,
        42,
        fence.check_and_advance(&stx, T(41)),
    )
    .await;
    assert!(
        matches!(r, Err(FenceError::Stale { .. })),
        "41 after 42 must be stale, got {r:?}"
    );
    let timeout: String = stx
        .query_one("SHOW idle_in_transaction_session_timeout", &[])
        .await
        .expect("SHOW")
        .get(0);
    assert_eq!(
        timeout, "7s",
        "the refused check's transaction has the idle timeout"
    );
    let locked = c
        .execute(
            "SELECT 1 FROM tenure_fence WHERE name = 'settlement' FOR UPDATE NOWAIT",
            &[],
        )
        .await
        .expect_err("the refused check's transaction holds the fence's row");
    assert_eq!(
        locked.code(),
        Some(&SqlState::LOCK_NOT_AVAILABLE),
        "{locked:?}"
    );
    stx.rollback().await.expect("rollback");
    c.execute(
        "SELECT 1 FROM tenure_fence WHERE name = 'settlement' FOR UPDATE NOWAIT",
        &[],
    )
    .await
    .expect("the row is free once the caller rolled back");
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_connection_dropped_mid_transaction_rolls_back_and_frees_the_fence() {
    let Some((db, c, fence)) = setup("dropped").await else {
        return;
    };
    let mut old = db.connect().await;
    let mut new = db.client().await;
    let tx = old.client.transaction().await.expect("begin");
    fence
        .check_and_advance(&tx, T(41))
        .await
        .expect("41 passes");
    tx.execute("INSERT INTO writes (writer, token) VALUES (1, 41)", &[])
        .await
        .expect("the old leader's write");
    // The socket closes with the transaction open (no ROLLBACK sent): the server rolls
    // it back when it notices, and frees the row.
    old.connection.abort();
    let _ = (&mut old.connection).await;
    within("the new leader's write", write(&fence, &mut new, 2, 42))
        .await
        .expect("the new leader writes");
    match fence.commit(tx).await {
        Err(e @ FenceError::Backend { .. }) => {
            assert!(e.to_string().contains("nothing was committed"), "{e}");
        }
        other => panic!("a commit on a closed connection must fail as not made, got {other:?}"),
    }
    assert_eq!(written(&c).await, vec![(2, 42)]);
    assert_eq!(fence.highest(&c).await.expect("highest"), T(42));
    db.drop_schema().await;
}

#[tokio::test]
async fn pg_serialization_failure_is_a_conflict_and_a_retry_sees_the_newer_token() {
    let Some((db, mut c, fence)) = setup("conflict").await else {
        return;
    };
    write(&fence, &mut c, 1, 40).await.expect("a first write");
    let mut a = db.client().await;
    fn rr(a: &mut Client) -> TransactionBuilder<'_> {
        a.build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
    }
    // A snapshot taken before another writer's commit, then a token above both.
    let tx = rr(&mut a).start().await.expect("begin");
    tx.query_one("SELECT count(*) FROM writes", &[])
        .await
        .expect("the snapshot");
    write(&fence, &mut c, 2, 41)
        .await
        .expect("the other writer");
    match fence.check_and_advance(&tx, T(43)).await {
        Err(e) if e.is_conflict() => {
            let text = e.to_string();
            assert!(
                text.contains("40001"),
                "names the serialization failure: {text}"
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    drop(tx);
    // The retry, with the same token, in a new transaction: accepted.
    let tx = rr(&mut a).start().await.expect("begin");
    fence
        .check_and_advance(&tx, T(43))
        .await
        .expect("the retry");
    tx.execute("INSERT INTO writes (writer, token) VALUES (1, 43)", &[])
        .await
        .expect("the write");
    fence.commit(tx).await.expect("commit");
    // A token below the snapshot's is stale at once, whatever committed since.
    let tx = rr(&mut a).start().await.expect("begin");
    tx.query_one("SELECT count(*) FROM writes", &[])
        .await
        .expect("the snapshot");
    write(&fence, &mut c, 2, 44)
        .await
        .expect("the other writer");
    match fence.check_and_advance(&tx, T(42)).await {
        Err(FenceError::Stale { presented, highest }) => {
            // The snapshot's token: a lower bound of the committed one.
            assert_eq!((presented, highest), (T(42), T(43)));
        }
        other => panic!("expected stale, got {other:?}"),
    }
    drop(tx);
    assert_eq!(written(&c).await, vec![(1, 40), (2, 41), (1, 43), (2, 44)]);
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_fence_works_with_a_pools_clients() {
    let Some(db) = db("pool").await else { return };
    let c = db.client().await;
    tables(&c).await;
    let mut config = pg::config();
    config.options(format!("-c search_path={}", db.schema()));
    let manager = deadpool_postgres::Manager::new(config, tenure::fence::tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(4)
        .build()
        .expect("a pool");
    // A pooled client dereferences to tokio_postgres::Client: the fence takes it as it is.
    let mut a = pool.get().await.expect("a pooled client");
    let fence = PgFence::install(&mut a, "settlement")
        .await
        .expect("install");
    fence
        .write(&mut a, T(5), |tx| {
            Box::pin(async move {
                tx.execute("INSERT INTO writes (writer, token) VALUES (1, 5)", &[])
                    .await?;
                Ok(())
            })
        })
        .await
        .expect("a write through a pooled client");
    drop(a);
    let mut b = pool.get().await.expect("another pooled client");
    let tx = b
        .transaction()
        .await
        .expect("the pool's own transaction type");
    fence
        .check_and_advance(&tx, T(4))
        .await
        .expect_err("a stale token through the pool's transaction");
    drop(tx);
    assert_eq!(written(&c).await, vec![(1, 5)]);
    assert_eq!(fence.highest(&c).await.expect("highest"), T(5));
    db.drop_schema().await;
}
