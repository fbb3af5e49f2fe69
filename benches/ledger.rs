//! Settlement throughput on PostgreSQL against SQLite: the worker's own ledger code
//! (`src/bin/tenure-worker/ledger.rs`), each payment a fenced write, on one machine in
//! one run.
//!
//! ```text
//! scripts/pg.sh run cargo bench --bench ledger            # 100 batches of 10 payments
//! scripts/pg.sh run cargo bench --bench ledger -- --batches 200
//! cargo bench --bench ledger -- --quick                   # 8 batches (CI); SQLite only
//!                                                          # without TENURE_PG_URL
//! ```
//!
//! For each database, twice: **one writer** settles every batch (payment by payment,
//! then the batch closed), as the root election's leader does; **four shards** settle
//! at once, each its own quarter of the batches under a fence of its own on its own
//! connection, as the leaders of four named elections do. The SQLite ledger is a file
//! in a temporary folder (WAL, `synchronous = FULL`, `BEGIN IMMEDIATE`: one writer at a
//! time), the PostgreSQL ledger a schema of the server at `TENURE_PG_URL` (the
//! server's settings: `scripts/pg.sh` keeps Debian's, `fsync` and
//! `synchronous_commit` on). There is no row delay: this is the ledger's own cost.
//!
//! Per setup: fenced writes per second, and each `settle_payment`'s latency (p50, p99,
//! max). Results: `<target dir>/tenure-bench/ledger.txt`.

use tenure_harness::ledger::{Ledger, LedgerAt};
use tenure_harness::pg;
mod support;

use std::time::Instant;

use support::{summarize, table};
use tenure::FencingToken;

const USAGE: &str = "\
usage: cargo bench --bench ledger -- [--batches N] [--quick]

  --batches N  batches of 10 payments to settle per setup (default 100)
  --quick      8 batches (CI)";

const ROWS: u64 = 10;
const SHARDS: u64 = 4;

fn main() {
    let mut batches = 100u64;
    let mut args = support::args().into_iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--batches" => {
                batches = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n: &u64| *n >= SHARDS)
                    .unwrap_or_else(|| usage("--batches needs a number of at least 4"));
            }
            "--quick" => batches = 8,
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut rows = Vec::new();
    let sqlite = |name: &str| LedgerAt::File(dir.path().join(format!("{name}.db")));
    rows.push(run("SQLite", "one writer", &sqlite("one"), batches, 1));
    rows.push(run(
        "SQLite",
        "four shards",
        &sqlite("four"),
        batches,
        SHARDS,
    ));
    let mut note = String::new();
    match pg::skip_reason() {
        None => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            for (what, shards) in [("one writer", 1), ("four shards", SHARDS)] {
                let db = rt.block_on(pg::TestDb::new("bench_ledger"));
                let at = LedgerAt::parse(&db.url()).expect("the server's URL");
                rows.push(run("PostgreSQL", what, &at, batches, shards));
                rt.block_on(db.drop_schema());
            }
        }
        Some(why) => note = format!("PostgreSQL: not measured, {why}\n"),
    }
    let text = format!(
        "settlement: {batches} batches of {ROWS} payments per setup, every payment a fenced \
         write, no row delay\n{}{note}",
        table(
            &[
                "database",
                "writers",
                "fenced writes",
                "writes/s",
                "p50 ms",
                "p99 ms",
                "max ms",
            ],
            &rows
        )
    );
    print!("{text}");
    let path = support::save("ledger.txt", &text);
    println!("saved {}", path.display());
}

fn usage(why: &str) -> ! {
    eprintln!("{why}\n{USAGE}");
    std::process::exit(2);
}

/// Seeds `batches` batches at `at` and settles them with `shards` writers at once (one
/// per shard, each on its own connection and fence); one table row.
fn run(db: &str, what: &str, at: &LedgerAt, batches: u64, shards: u64) -> Vec<String> {
    Ledger::open_at(at, 0)
        .and_then(|mut l| l.seed(batches, ROWS))
        .unwrap_or_else(|e| panic!("{db}: seeding: {e}"));
    let t0 = Instant::now();
    let writers: Vec<_> = (0..shards)
        .map(|i| {
            let at = at.clone();
            let db = db.to_string();
            std::thread::spawn(move || {
                let mut l = if shards == 1 {
                    Ledger::open_at(&at, 1)
                } else {
                    Ledger::open_shard(&at, 1, i, shards)
                }
                .unwrap_or_else(|e| panic!("{db}: opening: {e}"));
                let token = FencingToken::new(1);
                let mut latencies = Vec::new();
                let mut writes = 0u64;
                while let Some((batch, payments)) =
                    l.next_batch().unwrap_or_else(|e| panic!("{db}: {e}"))
                {
                    for p in payments {
                        let t = Instant::now();
                        l.settle_payment(token, batch, p)
                            .unwrap_or_else(|e| panic!("{db}: settling: {e}"));
                        latencies.push(t.elapsed().as_secs_f64() * 1e3);
                        writes += 1;
                    }
                    l.close_batch(token, batch)
                        .unwrap_or_else(|e| panic!("{db}: closing: {e}"));
                    writes += 1;
                }
                (writes, latencies)
            })
        })
        .collect();
    let mut writes = 0;
    let mut latencies = Vec::new();
    for w in writers {
        let (n, l) = w.join().expect("a writer");
        writes += n;
        latencies.extend(l);
    }
    let took = t0.elapsed().as_secs_f64();
    let report = Ledger::open_at(at, 0)
        .and_then(|l| l.verify())
        .unwrap_or_else(|e| panic!("{db}: verifying: {e}"));
    assert!(
        report.exactly_once(),
        "{db}, {what}: not settled exactly once: {report:?}"
    );
    let s = summarize(&latencies);
    vec![
        db.to_string(),
        what.to_string(),
        writes.to_string(),
        format!("{:.0}", writes as f64 / took),
        format!("{:.2}", s.p50),
        format!("{:.2}", s.p99),
        format!("{:.2}", s.max),
    ]
}
