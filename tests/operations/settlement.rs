//! Fenced settlement with real worker processes and a real SQLite ledger: a stalled or
//! cut-off old leader can write nothing once a newer token was accepted, and kills
//! mid-batch never settle anything twice.

use tenure_harness::ledger;

use std::path::Path;
use std::time::{Duration, Instant};

use tenure::fence::rusqlite::Connection;
use tenure_harness::procs::Group;

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

/// The ledger's report (`verify` reads it, on one connection opened before) once every
/// seeded batch is settled, or once `within` has passed: the caller's checks then say
/// what is missing.
fn report_once_settled(
    within: Duration,
    verify: impl Fn() -> ledger::LedgerReport,
) -> ledger::LedgerReport {
    let deadline = Instant::now() + within;
    loop {
        let r = verify();
        if r.settled_batches == r.seeded_batches || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A schema of the test server's for a PostgreSQL test (`TestDb`), and the runtime its
/// connections run on.
fn pg_test_schema(label: &str) -> (tokio::runtime::Runtime, tenure_harness::pg::TestDb) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = rt.block_on(tenure_harness::pg::TestDb::new(label));
    (rt, db)
}

/// The PostgreSQL ledger at `url`, seeded with `batches` batches of `rows` payments.
fn seeded_pg_ledger(url: &str, batches: u64, rows: u64) -> ledger::LedgerAt {
    let at = ledger::LedgerAt::parse(url).expect("the test server's URL");
    ledger::Ledger::open_at(&at, 0)
        .expect("the ledger in PostgreSQL")
        .seed(batches, rows)
        .expect("seed");
    at
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
    let l = ledger::Ledger::open(&path, 0).unwrap();
    let report = report_once_settled(Duration::from_secs(60), || l.verify().unwrap());
    g.stop();
    assert!(report.exactly_once(), "{report:?}");
    assert!(report.token_regressions.is_empty(), "{report:?}");
    eprintln!("{kills} kills mid-batch: {report:?}");
}

/// `worker --elections 4`: three workers run shard-0 … shard-3 beside the group's own
/// election; each shard of the ledger (batch B: shard-(B mod 4)) is settled by its
/// election's leader under a fence keyed by that election's name. A kill of a worker
/// that leads shards moves them; at the end every batch was settled once, under its own
/// shard's fence, with tokens of its own election only (one id per fence, no id shared).
#[test]
fn every_shard_is_settled_under_its_own_elections_tokens() {
    const SHARDS: u64 = 4;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    seed(&path, 24);
    let mut g = Group::start(
        3,
        Some(path.clone()),
        &["--elections", "4", "--settle-ms", "20"],
    );
    // Each shard settles a batch, under its own election.
    for i in 0..SHARDS {
        let name = ledger::shard_name(i);
        g.wait_event(&format!("a batch of {name} settled"), LONG, |e| {
            e.event == "settled" && e.election() == Some(name.as_str())
        });
    }
    // Kill a worker that leads a shard, mid-run, and bring it back.
    let victim = g
        .wait_event("a shard's lease", LONG, |e| {
            e.event == "lease_acquired" && e.election().is_some()
        })
        .node;
    g.kill(victim);
    g.spawn(victim);
    let l = ledger::Ledger::open(&path, 0).unwrap();
    let report = report_once_settled(Duration::from_secs(60), || l.verify_shards(SHARDS).unwrap());
    g.stop();
    assert!(report.exactly_once(), "{report:?}");
    assert!(report.token_regressions.is_empty(), "{report:?}");
    assert!(
        !report.fences.contains_key(ledger::FENCE),
        "the root settled while the shards have their own fences: {report:?}"
    );
    let mut ids = std::collections::BTreeMap::new();
    for i in 0..SHARDS {
        let name = ledger::shard_name(i);
        let f = &report.fences[&name];
        assert_eq!(f.settled_batches, 24 / SHARDS, "{name}: {report:?}");
        let id: Vec<u64> = f.election_ids.iter().copied().collect();
        assert!(id.len() == 1 && id[0] > 0, "{name}'s tokens: {f:?}");
        assert!(
            ids.insert(id[0], name.clone()).is_none(),
            "two shards' fences took tokens of election {}: {report:?}",
            id[0]
        );
    }
    // The events agree: each settled batch is its shard's, with its election's tokens;
    // the root's events say `"election": null`.
    let events = g.events();
    for e in events.iter().filter(|e| e.event == "settled") {
        let name = e.election().expect("with --elections only shards settle");
        let batch = e.u64("batch").unwrap();
        assert_eq!(ledger::shard_name(batch % SHARDS), name, "{}", e.raw);
        let token = e.term().unwrap();
        assert_eq!(
            ids.get(&(token >> tenure::election::TERM_BITS)),
            Some(&name.to_string()),
            "{}",
            e.raw
        );
    }
    let root = events
        .iter()
        .find(|e| e.event == "lease_acquired" && e.is_root())
        .expect("the root election's lease");
    assert!(
        root.v
            .get("election")
            .is_some_and(serde_json::Value::is_null),
        "{}",
        root.raw
    );
    assert!(root.term().unwrap() < 1 << tenure::election::TERM_BITS);
    eprintln!("{SHARDS} shards: {report:?}");
}

/// The same settlement on PostgreSQL (`tenure-worker --ledger postgres://…`): five workers
/// settle a ledger in a schema of the test server's (`TENURE_PG_URL`; skipped without
/// one, unless `TENURE_PG_REQUIRE=1`). The leader is stopped (SIGSTOP) right after it
/// started a batch, a new leader settles with a higher token, and the old one, woken,
/// has its writes refused by the fence; then leaders are killed mid-batch. At the end
/// every batch was settled once, and no fence accepted a token below one it had
/// accepted before.
#[test]
fn settlement_in_postgres_survives_a_stale_leader_and_kills_mid_batch() {
    use tenure_harness::pg;
    if pg::skip_test().is_some() {
        return;
    }
    let (rt, db) = pg_test_schema("settlement");
    let url = db.url();
    let at = seeded_pg_ledger(&url, 40, 5);
    let mut g = Group::start(
        5,
        None,
        &["--ledger", &url, "--row-ms", "40", "--settle-ms", "20"],
    );
    let (old, old_token) = g.leaseholder(LONG);
    let since = Instant::now();
    g.wait_event("the leader starts a batch", LONG, |e| {
        e.event == "batch_started" && e.node == old && e.at >= since
    });
    std::thread::sleep(Duration::from_millis(30));
    g.signal(old, libc::SIGSTOP);
    let new = g.wait_event("a new leader settles", LONG, |e| {
        e.event == "settled" && e.node != old && e.term().unwrap_or(0) > old_token
    });
    g.signal(old, libc::SIGCONT);
    let rejection = g.wait_event("the old leader's stale write is refused", LONG, |e| {
        e.event == "fence_rejected" && e.node == old && e.term() == Some(old_token)
    });
    assert!(rejection.u64("highest").unwrap() >= new.term().unwrap());
    for round in 0..3u64 {
        let since = Instant::now();
        let started = g.wait_event("a batch in progress", LONG, |e| {
            e.event == "batch_started" && e.at >= since
        });
        std::thread::sleep(Duration::from_millis(10 + 25 * round));
        g.kill(started.node);
        g.spawn(started.node);
    }
    let l = ledger::Ledger::open_at(&at, 0).unwrap();
    let report = report_once_settled(Duration::from_secs(90), || l.verify().unwrap());
    g.stop();
    assert!(report.exactly_once(), "{report:?}");
    assert!(report.token_regressions.is_empty(), "{report:?}");
    eprintln!(
        "PostgreSQL ledger: {} batches, {} payments settled once, {} writes, highest token {}",
        report.settled_batches, report.settled_payments, report.writes, report.highest_token
    );
    rt.block_on(db.drop_schema());
}

/// Workers whose ledger sessions the server ends (an operator's `pg_terminate_backend`,
/// as a restarted server would) open them again and settle on: after every session of
/// the group was ended mid-run, batches are settled again, each once.
#[test]
fn the_postgres_ledger_connects_again_after_the_server_ends_its_sessions() {
    use tenure_harness::pg;
    if pg::skip_test().is_some() {
        return;
    }
    let (rt, db) = pg_test_schema("reconnect");
    // Its own application_name, so that only this test's sessions are ended.
    let url = format!("{}&application_name={}", db.url(), db.schema());
    let at = seeded_pg_ledger(&url, 30, 3);
    let mut g = Group::start(
        3,
        None,
        &["--ledger", &url, "--row-ms", "20", "--settle-ms", "20"],
    );
    g.wait_event("a first batch settled", LONG, |e| e.event == "settled");
    let admin = rt.block_on(db.connect());
    let ended: i64 = rt
        .block_on(admin.client.query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_backend_pid()) AS t",
            &[&db.schema()],
        ))
        .expect("ending the workers' sessions")
        .get(0);
    assert!(ended >= 3, "one session per worker at least, {ended} ended");
    let since = Instant::now();
    g.wait_event("a batch settled on a session opened again", LONG, |e| {
        e.event == "settled" && e.at >= since
    });
    let l = ledger::Ledger::open_at(&at, 0).unwrap();
    let report = report_once_settled(Duration::from_secs(60), || l.verify().unwrap());
    g.stop();
    assert_eq!(report.settled_batches, report.seeded_batches, "{report:?}");
    assert!(report.exactly_once(), "{report:?}");
    assert!(report.token_regressions.is_empty(), "{report:?}");
    eprintln!("PostgreSQL ledger: {ended} sessions ended mid-run; {report:?}");
    drop(admin);
    rt.block_on(db.drop_schema());
}

/// The ledger as the worker connects to a real database: over TCP with a password (from
/// a file, then from `PGPASSWORD`) and TLS verified against the server's CA
/// (`sslrootcert`), on the test server's 127.0.0.1 (`TENURE_PG_TCP`, `TENURE_PG_TLS_ROOT`,
/// which `scripts/pg.sh` prints). A wrong password, a missing CA and a CA that did not
/// sign the server's certificate are refused, each naming the problem, and no error or
/// description carries the password.
#[test]
fn the_ledger_connects_with_a_password_and_verified_tls_and_never_prints_the_password() {
    use tenure_harness::pg;
    if pg::skip_test().is_some() {
        return;
    }
    let (Ok(tcp), Ok(ca)) = (
        std::env::var("TENURE_PG_TCP"),
        std::env::var("TENURE_PG_TLS_ROOT"),
    ) else {
        assert!(
            !pg::required(),
            "TENURE_PG_REQUIRE is set but TENURE_PG_TCP or TENURE_PG_TLS_ROOT is not \
             (scripts/pg.sh start prints them)"
        );
        eprintln!("skipped: TENURE_PG_TCP or TENURE_PG_TLS_ROOT is not set");
        return;
    };
    let (rt, db) = pg_test_schema("tls");
    let role = format!("ledger_{}", std::process::id());
    let secret = format!(
        "pw-{}-{}",
        std::process::id(),
        tenure::clock::monotonic_ns()
    );
    rt.block_on(async {
        let c = db.client().await;
        c.batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD '{secret}'; \
             GRANT ALL ON SCHEMA {schema} TO {role}",
            schema = db.schema()
        ))
        .await
        .expect("a role with a password");
    });
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, format!("{secret}\n")).unwrap();
    let url = |extra: &str| {
        format!(
            "postgresql://{role}@{tcp}/tenure?options=-c%20search_path%3D{}{extra}",
            db.schema()
        )
    };
    let no_secret = |text: &str| {
        assert!(!text.contains(&secret), "the password was printed: {text}");
    };
    // A password from a file, over TLS verified against the server's CA.
    let at = ledger::LedgerAt::parse(&url(&format!("&sslmode=require&sslrootcert={ca}")))
        .and_then(|at| at.with_password(Some(&password_file)))
        .expect("the URL");
    no_secret(&format!("{at:?}"));
    let mut l = ledger::Ledger::open_at(&at, 1).expect("a ledger over TLS with a password");
    l.seed(1, 2).expect("seed");
    let (batch, payments) = l.next_batch().unwrap().expect("a batch");
    for p in payments {
        assert!(l
            .settle_payment(tenure::FencingToken::new(3), batch, p)
            .unwrap());
    }
    assert_eq!(
        l.close_batch(tenure::FencingToken::new(3), batch).unwrap(),
        Some(2)
    );
    assert!(l.verify().unwrap().exactly_once());
    drop(l);
    // The password from PGPASSWORD, as libpq takes it (read when the URL and the command
    // line give none; given here, not set in this process's environment).
    let from_env = ledger::LedgerAt::parse(&url(&format!("&sslmode=require&sslrootcert={ca}")))
        .and_then(|at| at.with_password_from(None, Some(secret.clone().into())));
    ledger::Ledger::open_at(&from_env.expect("the URL"), 1).expect("PGPASSWORD");
    // A wrong password: the server's refusal, without the password tried.
    let wrong = format!("{secret}-wrong");
    let wrong_file = dir.path().join("wrong");
    std::fs::write(&wrong_file, &wrong).unwrap();
    let err = ledger::LedgerAt::parse(&url(&format!("&sslmode=require&sslrootcert={ca}")))
        .and_then(|at| at.with_password(Some(&wrong_file)))
        .and_then(|at| ledger::Ledger::open_at(&at, 1).map(|_| ()))
        .expect_err("a wrong password is refused");
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(!err.contains(&wrong), "the password was printed: {err}");
    // sslmode=require without the CA: refused before connecting, not left unverified.
    let err = ledger::LedgerAt::parse(&url("&sslmode=require"))
        .and_then(|at| at.with_password(Some(&password_file)))
        .and_then(|at| ledger::Ledger::open_at(&at, 1).map(|_| ()))
        .expect_err("no CA");
    assert!(err.contains("sslrootcert"), "{err}");
    no_secret(&err);
    // A CA that did not sign the server's certificate.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let other_ca = dir.path().join("other-ca.crt");
    std::fs::write(&other_ca, other.cert.pem()).unwrap();
    let err = ledger::LedgerAt::parse(&url(&format!(
        "&sslmode=require&sslrootcert={}",
        other_ca.display()
    )))
    .and_then(|at| at.with_password(Some(&password_file)))
    .and_then(|at| ledger::Ledger::open_at(&at, 1).map(|_| ()))
    .expect_err("a server signed by another CA is refused");
    assert!(err.contains("TLS") || err.contains("certificate"), "{err}");
    no_secret(&err);
    eprintln!("refused as it must: {err}");
    rt.block_on(async {
        let c = db.client().await;
        let _ = c
            .batch_execute(&format!(
                "REASSIGN OWNED BY {role} TO CURRENT_USER; DROP OWNED BY {role}; DROP ROLE {role}"
            ))
            .await;
    });
    rt.block_on(db.drop_schema());
}
