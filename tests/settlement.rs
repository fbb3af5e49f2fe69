//! Fenced settlement with real worker processes and a real SQLite ledger: a stalled or
//! cut-off old leader can write nothing once a newer token was accepted, and kills
//! mid-batch never settle anything twice.

mod support;

#[path = "../examples/support/ledger.rs"]
mod ledger;

use std::path::Path;
use std::time::{Duration, Instant};

use support::procs::Group;
use tenure::fence::rusqlite::Connection;

const LONG: Duration = Duration::from_secs(20);

fn seed(path: &Path, batches: u64) {
    let mut l = ledger::Ledger::open(path, 0).expect("ledger");
    l.seed(batches, 5).expect("seed");
}

/// (seq, token, node) of every accepted write, in commit order.
fn writes(path: &Path) -> Vec<(i64, u64, u64)> {
    let c = Connection::open(path).unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    let mut s = c
        .prepare("SELECT seq, token, node FROM writes ORDER BY seq")
        .unwrap();
    s.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)? as u64,
            r.get::<_, i64>(2)? as u64,
        ))
    })
    .unwrap()
    .collect::<Result<Vec<_>, _>>()
    .unwrap()
}

/// Nothing written with an older token after the first write with a newer one.
fn assert_tokens_never_go_back(path: &Path) {
    let mut highest = 0;
    for (seq, token, node) in writes(path) {
        assert!(
            token >= highest,
            "write {seq} by node {node} with token {token} after token {highest}"
        );
        highest = token;
    }
}

fn wait_settled_by(g: &Group, path: &Path, min_token: u64) {
    let deadline = Instant::now() + LONG;
    while !writes(path).iter().any(|(_, t, _)| *t >= min_token) {
        assert!(
            Instant::now() < deadline,
            "no write with token >= {min_token}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = g;
}

/// Pauses or isolates the leader just after it started a batch, and checks the
/// aftermath. Returns (old leader, old token, new token).
fn stale_leader_scenario(fault: i32, resume: i32) -> (u64, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    seed(&path, 200);
    // Slow rows (150 ms each): the old leader is still mid-batch when the new leader
    // writes, whichever way it was stopped.
    let mut g = Group::start(5, Some(path.clone()), &["--row-ms", "150"]);
    let (old, old_token) = g.leaseholder(LONG);
    // Mid-batch: right after the leader starts one.
    let since = Instant::now();
    let started = g.wait_event("the leader starts a batch", LONG, |e| {
        e.event == "batch_started" && e.node == old && e.at >= since
    });
    assert_eq!(started.term(), Some(old_token));
    std::thread::sleep(Duration::from_millis(30));
    g.signal(old, fault);
    // A new leader is confirmed with a higher token and settles with it.
    let new = g.wait_event("a new leader's lease", LONG, |e| {
        e.event == "lease_acquired" && e.node != old && e.term().unwrap_or(0) > old_token
    });
    let new_token = new.term().unwrap();
    wait_settled_by(&g, &path, new_token);
    // Wake / reconnect the old leader.
    let woke = Instant::now();
    g.signal(old, resume);
    g.wait_event("the old leader reports lease_lost", LONG, |e| {
        e.event == "lease_lost" && e.node == old && e.term() == Some(old_token)
    });
    // The batch it was in the middle of goes on with the old token (cancelling the task
    // does not stop a thread already calling out), and the fence rejects it.
    let rejection = g.wait_event("the old leader's stale write is rejected", LONG, |e| {
        e.event == "fence_rejected" && e.node == old && e.term() == Some(old_token)
    });
    assert!(rejection.u64("highest").unwrap() >= new_token);
    std::thread::sleep(Duration::from_millis(300));
    // Every write it tried after waking was rejected: the ledger never accepted its
    // token after the first write with the new one.
    assert_tokens_never_go_back(&path);
    let first_new = writes(&path)
        .iter()
        .find(|(_, t, _)| *t >= new_token)
        .map(|w| w.0)
        .unwrap();
    assert!(
        !writes(&path)
            .iter()
            .any(|(seq, t, _)| *seq > first_new && *t < new_token),
        "old token accepted after the new one"
    );
    // It stopped its task: no batch started with the old token after it woke.
    assert!(
        !g.events().iter().any(|e| e.node == old
            && e.event == "batch_started"
            && e.term() == Some(old_token)
            && e.at > woke + Duration::from_millis(100)),
        "old leader kept working after losing its lease"
    );
    // Any attempt it made was reported as a fence rejection with the new highest token,
    // and the fence never went back.
    for e in g.events().iter().filter(|e| e.event == "fence_rejected") {
        assert!(e.u64("highest").unwrap() > e.term().unwrap());
    }
    let highest = ledger::Ledger::open(&path, 0)
        .unwrap()
        .highest_token()
        .unwrap();
    assert!(
        highest.term() >= new_token,
        "fence at {highest} after token {new_token} was accepted"
    );
    g.stop();
    (old, old_token, new_token)
}

#[test]
fn stale_leader_write_is_rejected_after_pause() {
    let (_, old, new) = stale_leader_scenario(libc::SIGSTOP, libc::SIGCONT);
    assert!(new > old);
}

#[test]
fn stale_leader_write_is_rejected_after_partition() {
    // SIGUSR1 makes the worker cut every link through its transport's fault hooks;
    // SIGUSR2 heals them.
    let (_, old, new) = stale_leader_scenario(libc::SIGUSR1, libc::SIGUSR2);
    assert!(new > old);
}

#[test]
fn killing_the_leader_mid_batch_never_settles_a_batch_twice() {
    let kills: usize = std::env::var("TENURE_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    seed(&path, 30);
    let mut g = Group::start(5, Some(path.clone()), &["--settle-ms", "20"]);
    for round in 0..kills {
        let since = Instant::now();
        let started = g.wait_event("a batch in progress", LONG, |e| {
            e.event == "batch_started" && e.at >= since
        });
        std::thread::sleep(Duration::from_millis(10 + 15 * (round as u64 % 5)));
        g.kill(started.node);
        g.spawn(started.node);
    }
    // Let the group finish all the work.
    let deadline = Instant::now() + Duration::from_secs(60);
    let report = loop {
        let r = ledger::Ledger::open(&path, 0).unwrap().verify().unwrap();
        if r.settled_batches == r.seeded_batches || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    g.stop();
    assert!(report.exactly_once(), "{report:?}");
    assert!(report.token_regressions.is_empty(), "{report:?}");
    eprintln!("{kills} kills mid-batch: {report:?}");
}
