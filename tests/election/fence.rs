//! The resource-side fence: a resource accepts a token equal to or above the highest it
//! accepted, rejects a lower one, and makes the check, the token advance and the guarded
//! write one atomic step, for [`SqliteFence`] and [`RocksFence`].
//!
//! The concurrency properties run threads that write with tokens from a generated
//! schedule, then check what committed, in commit order: tokens never decrease, every
//! rejection was of a token below one already accepted, and the counters agree.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use proptest::prelude::*;
use rusqlite::{params, Connection, TransactionBehavior};
use tenure::fence::{FenceError, FenceStatsSnapshot, RocksFence, SqliteFence};
use tenure::FencingToken;

const T: fn(u64) -> FencingToken = FencingToken::new;

// ---------------------------------------------------------------------------------------
// SQLite
// ---------------------------------------------------------------------------------------

/// A settlement table guarded by the fence "settlement".
fn settlement_db(conn: &Connection) -> SqliteFence {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS settlement (
             batch INTEGER PRIMARY KEY, total INTEGER NOT NULL, token INTEGER NOT NULL)",
    )
    .unwrap();
    SqliteFence::install(conn, "settlement").unwrap()
}

/// Settles `batch` with `total`, recording the token that wrote it.
fn settle(
    fence: &SqliteFence,
    conn: &mut Connection,
    token: FencingToken,
    batch: i64,
    total: i64,
) -> Result<(), FenceError> {
    fence.write(conn, token, |tx| {
        tx.execute(
            "INSERT INTO settlement (batch, total, token) VALUES (?1, ?2, ?3)
             ON CONFLICT (batch) DO UPDATE SET total = excluded.total, token = excluded.token",
            params![batch, total, token.term() as i64],
        )?;
        Ok(())
    })
}

/// The (total, token) of `batch`, if settled.
fn settled(conn: &Connection, batch: i64) -> Option<(i64, i64)> {
    conn.query_row(
        "SELECT total, token FROM settlement WHERE batch = ?1",
        params![batch],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .ok()
}

fn rows(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM settlement", [], |r| r.get(0))
        .unwrap()
}

fn stats(accepted: u64, rejected_stale: u64) -> FenceStatsSnapshot {
    FenceStatsSnapshot {
        accepted,
        rejected_stale,
    }
}

#[track_caller]
fn assert_stale<T: std::fmt::Debug>(
    r: Result<T, FenceError>,
    presented: FencingToken,
    highest: FencingToken,
) {
    match r {
        Err(FenceError::Stale {
            presented: p,
            highest: h,
        }) => assert_eq!((p, h), (presented, highest)),
        other => panic!("expected Stale {{ {presented}, {highest} }}, got {other:?}"),
    }
}

#[test]
fn sqlite_new_fence_starts_at_zero_and_accepts_the_first_token() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    assert_eq!(fence.highest(&conn).unwrap(), T(0));
    settle(&fence, &mut conn, T(1), 1, 10).unwrap();
    assert_eq!(fence.highest(&conn).unwrap(), T(1));
    assert_eq!(fence.stats().snapshot(), stats(1, 0));
}

#[test]
fn sqlite_equal_token_is_the_same_tenure_and_is_accepted_again() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    settle(&fence, &mut conn, T(7), 1, 10).unwrap();
    settle(&fence, &mut conn, T(7), 2, 20).unwrap();
    settle(&fence, &mut conn, T(7), 1, 11).unwrap();
    assert_eq!(fence.highest(&conn).unwrap(), T(7));
    assert_eq!(settled(&conn, 1), Some((11, 7)));
    assert_eq!(settled(&conn, 2), Some((20, 7)));
    assert_eq!(fence.stats().snapshot(), stats(3, 0));
}

#[test]
fn sqlite_lower_token_is_rejected_naming_presented_and_highest() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    settle(&fence, &mut conn, T(9), 1, 10).unwrap();
    let err = settle(&fence, &mut conn, T(3), 1, 99).unwrap_err();
    assert!(err.is_stale());
    let message = err.to_string();
    assert!(
        message.contains("stale fencing token 3") && message.contains("token 9"),
        "{message}"
    );
    assert_stale(Err::<(), _>(err), T(3), T(9));
    assert_eq!(fence.highest(&conn).unwrap(), T(9));
    assert_eq!(fence.stats().snapshot(), stats(1, 1));
}

#[test]
fn sqlite_business_write_is_rolled_back_when_the_fence_rejects() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    settle(&fence, &mut conn, T(5), 1, 10).unwrap();
    let mut ran = false;
    let r = fence.write(&mut conn, T(4), |tx| {
        ran = true;
        tx.execute(
            "INSERT INTO settlement (batch, total, token) VALUES (2, 20, 4)",
            [],
        )
    });
    assert_stale(r, T(4), T(5));
    assert!(!ran, "the guarded write must not run for a stale token");
    assert_eq!(rows(&conn), 1);
    assert_eq!(settled(&conn, 2), None);
    assert!(
        conn.is_autocommit(),
        "the transaction must be closed after a rejection"
    );

    // The same holds when the caller runs the transaction and writes first.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    tx.execute(
        "INSERT INTO settlement (batch, total, token) VALUES (3, 30, 4)",
        [],
    )
    .unwrap();
    assert_stale(fence.check_and_advance(&tx, T(4)), T(4), T(5));
    drop(tx); // rolls back, as the docs tell the caller to do on an error
    assert_eq!(settled(&conn, 3), None);
    assert_eq!(fence.stats().snapshot(), stats(1, 2));
}

#[test]
fn sqlite_failing_business_write_rolls_back_the_token_advance() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    settle(&fence, &mut conn, T(5), 1, 10).unwrap();
    // Token 6 passes the fence, then its write fails (NOT NULL violated).
    let err = fence
        .write(&mut conn, T(6), |tx| {
            tx.execute(
                "INSERT INTO settlement (batch, total, token) VALUES (2, 20, 6)",
                [],
            )?;
            tx.execute(
                "INSERT INTO settlement (batch, total, token) VALUES (3, NULL, 6)",
                [],
            )
        })
        .unwrap_err();
    assert!(matches!(err, FenceError::Write { .. }), "{err:?}");
    assert!(err.to_string().contains("rolled back"), "{err}");
    assert_eq!(
        fence.highest(&conn).unwrap(),
        T(5),
        "the advance to 6 must roll back"
    );
    assert_eq!(
        settled(&conn, 2),
        None,
        "the first statement of the failed write must roll back"
    );
    // Token 5 still writes: the failed attempt did not shut out the current tenure.
    settle(&fence, &mut conn, T(5), 2, 21).unwrap();
    assert_eq!(fence.stats().snapshot(), stats(2, 0));
}

#[test]
fn sqlite_panicking_business_write_rolls_back_everything() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    settle(&fence, &mut conn, T(5), 1, 10).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = fence.write(&mut conn, T(8), |tx| -> rusqlite::Result<()> {
            tx.execute(
                "INSERT INTO settlement (batch, total, token) VALUES (2, 20, 8)",
                [],
            )?;
            panic!("the business code panics mid-write");
        });
    }));
    assert!(r.is_err());
    assert_eq!(fence.highest(&conn).unwrap(), T(5));
    assert_eq!(settled(&conn, 2), None);
}

#[test]
fn sqlite_token_survives_reopening_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resource.db");
    {
        let mut conn = Connection::open(&path).unwrap();
        let fence = settlement_db(&conn);
        settle(&fence, &mut conn, T(12), 1, 10).unwrap();
    }
    let mut conn = Connection::open(&path).unwrap();
    // Installing again at start-up keeps the stored token.
    let fence = settlement_db(&conn);
    assert_eq!(fence.highest(&conn).unwrap(), T(12));
    assert_stale(settle(&fence, &mut conn, T(11), 1, 99), T(11), T(12));
    assert_eq!(settled(&conn, 1), Some((10, 12)));
}

#[test]
fn sqlite_fences_with_different_names_are_independent() {
    let mut conn = Connection::open_in_memory().unwrap();
    let a = SqliteFence::install(&conn, "a").unwrap();
    let b = SqliteFence::install(&conn, "b").unwrap();
    a.write(&mut conn, T(10), |_| Ok(())).unwrap();
    b.write(&mut conn, T(2), |_| Ok(())).unwrap();
    assert_eq!(a.highest(&conn).unwrap(), T(10));
    assert_eq!(b.highest(&conn).unwrap(), T(2));
    assert_eq!(b.name(), "b");
}

#[test]
fn stale_leader_write_is_rejected_after_pause_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    // Two workers, each with its own connection to the resource.
    let mut old_leader = Connection::open(&path).unwrap();
    let mut new_leader = Connection::open(&path).unwrap();
    let fence = settlement_db(&old_leader);

    // Term 41's leader settles batch 1...
    settle(&fence, &mut old_leader, T(41), 1, 100).unwrap();
    // ...then stalls (GC, SIGSTOP). Term 42's leader is elected and settles batch 1.
    settle(&fence, &mut new_leader, T(42), 1, 120).unwrap();
    // The old leader wakes up, still believing it leads, and writes again.
    assert_stale(settle(&fence, &mut old_leader, T(41), 1, 999), T(41), T(42));

    assert_eq!(settled(&new_leader, 1), Some((120, 42)));
    assert_eq!(fence.highest(&new_leader).unwrap(), T(42));
    assert_eq!(fence.stats().snapshot(), stats(2, 1));
}

#[test]
fn sqlite_check_and_advance_in_the_callers_transaction() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    fence.check_and_advance(&tx, T(3)).unwrap();
    tx.execute(
        "INSERT INTO settlement (batch, total, token) VALUES (1, 10, 3)",
        [],
    )
    .unwrap();
    tx.commit().unwrap();
    assert_eq!(fence.highest(&conn).unwrap(), T(3));

    // A rolled-back transaction takes its advance with it.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    fence.check_and_advance(&tx, T(4)).unwrap();
    tx.rollback().unwrap();
    assert_eq!(fence.highest(&conn).unwrap(), T(3));
}

#[test]
fn sqlite_corrupt_or_missing_fence_row_is_an_error_not_a_panic() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    // Someone stored text in the token column (INTEGER affinity keeps 'abc' as text).
    conn.execute(
        "UPDATE tenure_fence SET token = 'abc' WHERE name = 'settlement'",
        [],
    )
    .unwrap();
    let err = fence.highest(&conn).unwrap_err();
    assert!(matches!(err, FenceError::Corrupt { .. }), "{err:?}");
    let err = settle(&fence, &mut conn, T(1), 1, 10).unwrap_err();
    assert!(matches!(err, FenceError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("settlement"), "{err}");
    assert_eq!(rows(&conn), 0);

    conn.execute(
        "UPDATE tenure_fence SET token = -5 WHERE name = 'settlement'",
        [],
    )
    .unwrap();
    assert!(matches!(
        fence.highest(&conn),
        Err(FenceError::Corrupt { .. })
    ));

    conn.execute("DELETE FROM tenure_fence", []).unwrap();
    let err = settle(&fence, &mut conn, T(1), 1, 10).unwrap_err();
    assert!(
        matches!(&err, FenceError::Corrupt { detail, .. } if detail.contains("install")),
        "{err:?}"
    );
    assert_eq!(rows(&conn), 0);
    assert_eq!(fence.stats().snapshot(), stats(0, 0));
}

#[test]
fn sqlite_token_above_i64_max_is_refused() {
    let mut conn = Connection::open_in_memory().unwrap();
    let fence = settlement_db(&conn);
    let err = settle(&fence, &mut conn, T(u64::MAX), 1, 10).unwrap_err();
    assert!(
        matches!(err, FenceError::TokenOutOfRange { presented, .. } if presented == T(u64::MAX)),
        "{err:?}"
    );
    assert_eq!(fence.highest(&conn).unwrap(), T(0));
    settle(&fence, &mut conn, T(i64::MAX as u64), 1, 10).unwrap();
    assert_eq!(fence.highest(&conn).unwrap(), T(i64::MAX as u64));
}

// ---------------------------------------------------------------------------------------
// RocksDB
// ---------------------------------------------------------------------------------------

fn rocks_put(fence: &RocksFence, token: u64, key: &str, value: &str) -> Result<(), FenceError> {
    fence.apply(T(token), |b| b.put(key, value))
}

fn rocks_value(fence: &RocksFence, key: &str) -> Option<String> {
    fence
        .get(key)
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap())
}

#[test]
fn rocks_equal_token_accepted_lower_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let fence = RocksFence::open(dir.path().join("fence"), "ledger").unwrap();
    assert_eq!(fence.highest().unwrap(), T(0));
    rocks_put(&fence, 7, "batch/1", "10").unwrap();
    rocks_put(&fence, 7, "batch/1", "11").unwrap();
    assert_stale(rocks_put(&fence, 6, "batch/1", "99"), T(6), T(7));
    assert_eq!(rocks_value(&fence, "batch/1").as_deref(), Some("11"));
    assert_eq!(fence.highest().unwrap(), T(7));
    assert_eq!(fence.stats().snapshot(), stats(2, 1));
}

#[test]
fn stale_leader_write_is_rejected_after_pause_rocks() {
    let dir = tempfile::tempdir().unwrap();
    let fence = Arc::new(RocksFence::open(dir.path().join("fence"), "ledger").unwrap());
    let (old_leader, new_leader) = (Arc::clone(&fence), Arc::clone(&fence));
    rocks_put(&old_leader, 41, "batch/1", "100 by 41").unwrap();
    rocks_put(&new_leader, 42, "batch/1", "120 by 42").unwrap();
    let mut ran = false;
    let r = old_leader.apply(T(41), |b| {
        ran = true;
        b.put("batch/1", "999 by 41");
    });
    assert_stale(r, T(41), T(42));
    assert!(!ran, "the write closure must not run for a stale token");
    assert_eq!(rocks_value(&fence, "batch/1").as_deref(), Some("120 by 42"));
}

#[test]
fn rocks_token_and_data_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence");
    {
        let fence = RocksFence::open(&path, "ledger").unwrap();
        rocks_put(&fence, 12, "batch/1", "10").unwrap();
    }
    let fence = RocksFence::open(&path, "ledger").unwrap();
    assert_eq!(fence.highest().unwrap(), T(12));
    assert_stale(rocks_put(&fence, 11, "batch/1", "99"), T(11), T(12));
    assert_eq!(rocks_value(&fence, "batch/1").as_deref(), Some("10"));
}

#[test]
fn rocks_closure_cannot_drop_the_token_advance() {
    let dir = tempfile::tempdir().unwrap();
    let fence = RocksFence::open(dir.path().join("fence"), "ledger").unwrap();
    fence
        .apply(T(3), |b| {
            b.put("k", "v");
            b.clear();
        })
        .unwrap();
    assert_eq!(fence.highest().unwrap(), T(3));
    assert_eq!(fence.get("k").unwrap(), None);
}

#[test]
fn rocks_panicking_closure_writes_nothing_and_the_fence_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let fence = RocksFence::open(dir.path().join("fence"), "ledger").unwrap();
    rocks_put(&fence, 2, "k", "before").unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = fence.apply(T(5), |b| {
            b.put("k", "during");
            panic!("the business code panics mid-batch");
        });
    }));
    assert!(r.is_err());
    assert_eq!(fence.highest().unwrap(), T(2));
    assert_eq!(rocks_value(&fence, "k").as_deref(), Some("before"));
    rocks_put(&fence, 5, "k", "after").unwrap();
    assert_eq!(rocks_value(&fence, "k").as_deref(), Some("after"));
}

#[test]
fn rocks_corrupt_token_value_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence");
    {
        let fence = RocksFence::open(&path, "ledger").unwrap();
        rocks_put(&fence, 4, "k", "v").unwrap();
    }
    // Overwrite the stored token with 3 bytes, behind the fence's back.
    {
        let opts = rocksdb::Options::default();
        let db = rocksdb::DB::open_cf(&opts, &path, ["default", "tenure_fence"]).unwrap();
        let cf = db.cf_handle("tenure_fence").unwrap();
        db.put_cf(cf, "ledger", [1u8, 2, 3]).unwrap();
    }
    let err = RocksFence::open(&path, "ledger").unwrap_err();
    match &err {
        FenceError::Corrupt {
            fence,
            location,
            detail,
        } => {
            assert_eq!(fence, "ledger");
            assert!(location.contains(&path.display().to_string()), "{location}");
            assert!(detail.contains("3 bytes"), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn rocks_corrupt_files_are_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence");
    {
        let fence = RocksFence::open(&path, "ledger").unwrap();
        rocks_put(&fence, 4, "k", "v").unwrap();
    }
    // CURRENT names the live MANIFEST; garbage there makes the database unreadable.
    std::fs::write(path.join("CURRENT"), b"\xff\xfe garbage").unwrap();
    let err = RocksFence::open(&path, "ledger").unwrap_err();
    assert!(matches!(err, FenceError::Corrupt { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn rocks_locked_directory_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence");
    let _first = RocksFence::open(&path, "ledger").unwrap();
    let err = RocksFence::open(&path, "ledger").unwrap_err();
    assert!(
        matches!(&err, FenceError::Locked { path: p, .. } if p == &path),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn rocks_path_that_cannot_be_created_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let path = file.join("fence");
    let err = RocksFence::open(&path, "ledger").unwrap_err();
    assert!(matches!(err, FenceError::Backend { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
}

// ---------------------------------------------------------------------------------------
// Concurrency properties
// ---------------------------------------------------------------------------------------

/// One write a thread tries.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    token: u64,
    /// How long the guarded write takes, between the fence's check and the commit: a
    /// window in which a fence that did not serialize writers would let others in.
    pause_us: u64,
}

/// What one attempt returned.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Accepted,
    Stale { highest: u64 },
}

/// A schedule: 2 to 4 threads, each trying 1 to 8 writes with tokens 1 to 6.
fn schedule() -> impl Strategy<Value = Vec<Vec<Attempt>>> {
    let attempt = (1u64..=6, 0u64..200).prop_map(|(token, pause_us)| Attempt { token, pause_us });
    prop::collection::vec(prop::collection::vec(attempt, 1..=8), 2..=4)
}

/// Checks what the threads saw (`outcomes`, per thread and attempt) against
/// `committed`: the (thread, seq, token) of each accepted write in commit order, as the
/// resource recorded it.
fn check_history(
    schedule: &[Vec<Attempt>],
    outcomes: &[Vec<Outcome>],
    committed: &[(usize, usize, u64)],
    stats: FenceStatsSnapshot,
    highest: FencingToken,
) -> Result<(), TestCaseError> {
    // Tokens in commit order never decrease.
    for pair in committed.windows(2) {
        prop_assert!(
            pair[0].2 <= pair[1].2,
            "token decreased in commit order: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    let accepted_tokens: BTreeSet<u64> = committed.iter().map(|c| c.2).collect();
    let mut accepted = BTreeSet::new();
    let mut rejected = 0u64;
    for (thread, (attempts, seen)) in schedule.iter().zip(outcomes).enumerate() {
        for (seq, (attempt, outcome)) in attempts.iter().zip(seen).enumerate() {
            match *outcome {
                Outcome::Accepted => {
                    accepted.insert((thread, seq, attempt.token));
                }
                Outcome::Stale { highest } => {
                    rejected += 1;
                    // Rejected only below a token that really was accepted.
                    prop_assert!(
                        attempt.token < highest,
                        "{} rejected against {highest}",
                        attempt.token
                    );
                    prop_assert!(
                        accepted_tokens.contains(&highest),
                        "rejected against {highest}, which no committed write carries"
                    );
                }
            }
        }
    }
    // Exactly the accepted attempts committed, each once, with its own token.
    let committed_set: BTreeSet<_> = committed.iter().copied().collect();
    prop_assert_eq!(
        committed_set.len(),
        committed.len(),
        "a write committed twice"
    );
    prop_assert_eq!(&committed_set, &accepted);
    prop_assert_eq!(
        stats,
        FenceStatsSnapshot {
            accepted: accepted.len() as u64,
            rejected_stale: rejected,
        }
    );
    // The highest token attempted can never be stale, so it ends up the fence's.
    let max = schedule.iter().flatten().map(|a| a.token).max().unwrap();
    prop_assert_eq!(highest, T(max));
    Ok(())
}

/// Runs the schedule, one thread per row, all released at once. Each thread makes its
/// writer with `make_writer(thread)` and calls it as `write(seq, attempt)`.
fn run_threads<W>(
    schedule: &[Vec<Attempt>],
    make_writer: impl Fn(usize) -> W + Sync,
) -> Vec<Vec<Outcome>>
where
    W: FnMut(usize, Attempt) -> Result<(), FenceError>,
{
    let barrier = Barrier::new(schedule.len());
    thread::scope(|s| {
        let handles: Vec<_> = schedule
            .iter()
            .enumerate()
            .map(|(thread, attempts)| {
                let (barrier, make_writer) = (&barrier, &make_writer);
                s.spawn(move || {
                    let mut write = make_writer(thread);
                    barrier.wait();
                    let mut seen = Vec::new();
                    for (seq, &attempt) in attempts.iter().enumerate() {
                        seen.push(match write(seq, attempt) {
                            Ok(()) => Outcome::Accepted,
                            Err(FenceError::Stale { presented, highest }) => {
                                assert_eq!(presented, T(attempt.token));
                                Outcome::Stale {
                                    highest: highest.term(),
                                }
                            }
                            Err(e) => panic!("thread {thread} attempt {seq} {attempt:?}: {e}"),
                        });
                        thread::yield_now();
                    }
                    seen
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn sqlite_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    conn
}

fn sqlite_concurrent_history(schedule: Vec<Vec<Attempt>>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resource.db");
    let conn = sqlite_connection(&path);
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch(
        "CREATE TABLE writes (
             id INTEGER PRIMARY KEY, thread INTEGER NOT NULL, seq INTEGER NOT NULL,
             token INTEGER NOT NULL)",
    )
    .unwrap();
    let fence = SqliteFence::install(&conn, "writes").unwrap();

    let outcomes = run_threads(&schedule, |thread| {
        // Each thread has its own connection, as separate processes would.
        let mut conn = sqlite_connection(&path);
        let fence = &fence;
        move |seq, attempt: Attempt| {
            fence.write(&mut conn, T(attempt.token), |tx| {
                // Writers are serialized, so the row id is the commit order.
                tx.execute(
                    "INSERT INTO writes (thread, seq, token) VALUES (?1, ?2, ?3)",
                    params![thread as i64, seq as i64, attempt.token as i64],
                )?;
                thread::sleep(Duration::from_micros(attempt.pause_us));
                Ok(())
            })
        }
    });

    let mut stmt = conn
        .prepare("SELECT thread, seq, token FROM writes ORDER BY id")
        .unwrap();
    let committed: Vec<(usize, usize, u64)> = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)? as usize,
                r.get::<_, i64>(1)? as usize,
                r.get::<_, i64>(2)? as u64,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    check_history(
        &schedule,
        &outcomes,
        &committed,
        fence.stats().snapshot(),
        fence.highest(&conn).unwrap(),
    )
}

fn rocks_concurrent_history(schedule: Vec<Vec<Attempt>>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let fence = Arc::new(RocksFence::open(dir.path().join("fence"), "writes").unwrap());
    // Incremented inside the batch closure, which runs under the fence's lock and only
    // for accepted tokens: the commit order.
    let commits = AtomicU64::new(0);

    let outcomes = run_threads(&schedule, |thread| {
        let (fence, commits) = (Arc::clone(&fence), &commits);
        move |seq, attempt: Attempt| {
            fence.apply(T(attempt.token), |batch| {
                let n = commits.fetch_add(1, Ordering::SeqCst);
                let record = format!("{thread} {seq} {}", attempt.token);
                batch.put(format!("w/{n:08}"), record);
                thread::sleep(Duration::from_micros(attempt.pause_us));
            })
        }
    });

    let n = commits.load(Ordering::SeqCst);
    let mut committed = Vec::new();
    for i in 0..n {
        let value = fence.get(format!("w/{i:08}")).unwrap();
        let value = String::from_utf8(value.expect("a counted write is missing")).unwrap();
        let f: Vec<u64> = value.split(' ').map(|x| x.parse().unwrap()).collect();
        committed.push((f[0] as usize, f[1] as usize, f[2]));
    }
    prop_assert_eq!(fence.get(format!("w/{n:08}")).unwrap(), None);
    check_history(
        &schedule,
        &outcomes,
        &committed,
        fence.stats().snapshot(),
        fence.highest().unwrap(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Threads with their own connections to one SQLite file (WAL, busy timeout).
    #[test]
    fn sqlite_concurrent_writers_commit_tokens_in_order(schedule in schedule()) {
        sqlite_concurrent_history(schedule)?;
    }

    /// Threads sharing one `RocksFence` through an `Arc`.
    #[test]
    fn rocks_concurrent_writers_commit_tokens_in_order(schedule in schedule()) {
        rocks_concurrent_history(schedule)?;
    }
}
