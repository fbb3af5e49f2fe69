//! A transactional outbox under a fence (`tenure::fence::outbox`), end to end, with a
//! file for a broker:
//!
//! ```text
//! cargo run --example outbox                 # in a temporary folder
//! cargo run --example outbox -- --dir /tmp/outbox-demo
//! ```
//!
//! Leader A (token 41) pays p1 and its relay reads the message, then A stalls. Leader B
//! (token 42) pays p2; B's relay publishes p1 and p2. A, stale, tries to pay p3: refused,
//! and no message. A's relay wakes and publishes its late copy of p1; its mark is
//! refused. B pays p4, and its relay crashes after publishing and before marking, so the
//! next relay publishes p4 again. The consumer reads the file: it applies p1, p2 and p4
//! once each and drops the late copy (stale token) and the repeat (duplicate).
//!
//! Exit status 0 when all of that happened, 1 when anything else did (the output says
//! what).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use tenure::fence::outbox::{Consumer, OutboxMessage, SqliteOutbox, Verdict};
use tenure::fence::rusqlite::Connection;
use tenure::fence::{FenceError, SqliteFence};
use tenure::FencingToken;

/// Appends a message to the "broker" (a JSON line per message, its fence, token and
/// sequence number beside the payload).
fn publish(file: &Path, m: &OutboxMessage) -> std::io::Result<()> {
    let line = serde_json::json!({
        "fence": m.fence, "token": m.token.term(), "seq": m.seq, "topic": m.topic,
        "payload": String::from_utf8_lossy(&m.payload),
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    writeln!(f, "{line}")
}

/// Pays `payment` under `token`: the state change and its message in one transaction.
fn pay(
    conn: &mut Connection,
    fence: &SqliteFence,
    outbox: &SqliteOutbox,
    token: u64,
    payment: &str,
) -> Result<(), FenceError> {
    let token = FencingToken::new(token);
    fence.write(conn, token, |tx| {
        tx.execute(
            "INSERT INTO payments (id, token) VALUES (?1, ?2)",
            (payment, token.term() as i64),
        )?;
        outbox.push(tx, token, "payouts", format!("{payment} paid").as_bytes())?;
        Ok(())
    })
}

fn main() {
    let mut dir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--dir", Some(d)) => dir = Some(PathBuf::from(d)),
            _ => {
                eprintln!("usage: cargo run --example outbox -- [--dir DIR]");
                std::process::exit(2);
            }
        }
    }
    let tmp;
    let dir = match dir {
        Some(d) => d,
        None => {
            tmp = std::env::temp_dir().join(format!("tenure-outbox-{}", std::process::id()));
            tmp.clone()
        }
    };
    if let Err(e) = run(&dir) {
        eprintln!("outbox example: {e}");
        std::process::exit(1);
    }
}

fn run(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let db = dir.join("outbox.db");
    let broker = dir.join("published.jsonl");
    let _ = std::fs::remove_file(&db);
    let _ = std::fs::remove_file(&broker);
    let mut conn = Connection::open(&db)?;
    conn.execute_batch("CREATE TABLE payments (id TEXT PRIMARY KEY, token INTEGER NOT NULL)")?;
    let fence = SqliteFence::install(&conn, "settlement")?;
    let outbox = SqliteOutbox::install(&conn, &fence)?;
    let mut problems = Vec::new();

    pay(&mut conn, &fence, &outbox, 41, "p1")?;
    let stalled_read = outbox.pending(&conn, 100)?;
    println!(
        "A (41) paid p1; A's relay read {} message(s), then A stalls",
        stalled_read.len()
    );

    pay(&mut conn, &fence, &outbox, 42, "p2")?;
    let n = outbox.relay(&mut conn, FencingToken::new(42), 100, |m| {
        publish(&broker, m)
    })?;
    println!("B (42) paid p2; B's relay published {n} message(s)");

    match pay(&mut conn, &fence, &outbox, 41, "p3") {
        Err(FenceError::Stale { presented, highest }) => println!(
            "A (41) woke and tried to pay p3: refused, token {} below {}; no message",
            presented.term(),
            highest.term()
        ),
        other => problems.push(format!("the stale payment p3 was not refused: {other:?}")),
    }
    for m in &stalled_read {
        publish(&broker, m)?;
    }
    match outbox.mark_published(
        &mut conn,
        FencingToken::new(41),
        stalled_read.last().map_or(0, |m| m.seq),
    ) {
        Err(FenceError::Stale { .. }) => {
            println!("A's relay published its late copy of p1; its mark was refused as stale");
        }
        other => problems.push(format!("the stale relay's mark was not refused: {other:?}")),
    }

    pay(&mut conn, &fence, &outbox, 42, "p4")?;
    for m in outbox.pending(&conn, 100)? {
        publish(&broker, &m)?; // ... and the relay crashes before it marks them
    }
    let n = outbox.relay(&mut conn, FencingToken::new(42), 100, |m| {
        publish(&broker, m)
    })?;
    println!("B paid p4; its relay crashed after publishing and before marking; the next published {n} again");

    let mut consumer = Consumer::new();
    let (mut applied, mut stale, mut duplicate) = (Vec::new(), 0, 0);
    for line in std::io::BufReader::new(std::fs::File::open(&broker)?).lines() {
        let v: serde_json::Value = serde_json::from_str(&line?)?;
        let (fence, token, seq) = (
            v["fence"].as_str().unwrap_or(""),
            FencingToken::new(v["token"].as_u64().unwrap_or(0)),
            v["seq"].as_u64().unwrap_or(0),
        );
        let verdict = consumer.judge(fence, token, seq);
        println!("  consumer: {v} -> {verdict:?}");
        match verdict {
            Verdict::Apply => applied.push(v["payload"].as_str().unwrap_or("").to_owned()),
            Verdict::Stale { .. } => stale += 1,
            Verdict::Duplicate { .. } => duplicate += 1,
        }
    }
    let paid: Vec<String> = {
        let mut st = conn.prepare("SELECT id FROM payments ORDER BY id")?;
        let rows = st.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    println!(
        "summary: paid {paid:?}; the consumer applied {applied:?}, dropped {stale} stale copy \
         and {duplicate} duplicate; files in {}",
        dir.display()
    );
    if paid != ["p1", "p2", "p4"] {
        problems.push(format!("the payments are {paid:?}, not p1, p2 and p4"));
    }
    if applied != ["p1 paid", "p2 paid", "p4 paid"] || (stale, duplicate) != (1, 1) {
        problems.push("the consumer did not apply p1, p2 and p4 once each and drop one stale copy and one duplicate".into());
    }
    if problems.is_empty() {
        println!("ok: every payment announced once, nothing from the stale leader");
        Ok(())
    } else {
        Err(problems.join("; ").into())
    }
}
