//! The transactional outbox under a fence ([`tenure::fence::outbox`]): a stale leader's
//! message is refused with its state change, a relay publishes in commit order with the
//! token attached, a stale relay's mark is refused, and a consumer applies each message
//! once and drops what an older token sent. The example (`examples/outbox.rs`) runs the
//! whole story with a file for a broker.

use std::convert::Infallible;

use tenure::fence::outbox::{Consumer, OutboxMessage, RelayError, SqliteOutbox, Verdict};
use tenure::fence::rusqlite::Connection;
use tenure::fence::{FenceError, SqliteFence};
use tenure::FencingToken;

const T: fn(u64) -> FencingToken = FencingToken::new;

fn setup() -> (Connection, SqliteFence, SqliteOutbox) {
    let conn = Connection::open_in_memory().expect("sqlite");
    conn.execute_batch("CREATE TABLE payments (id TEXT PRIMARY KEY, token INTEGER NOT NULL)")
        .expect("payments");
    let fence = SqliteFence::install(&conn, "settlement").expect("fence");
    let outbox = SqliteOutbox::install(&conn, &fence).expect("outbox");
    (conn, fence, outbox)
}

fn pay(
    conn: &mut Connection,
    fence: &SqliteFence,
    outbox: &SqliteOutbox,
    token: u64,
    id: &str,
) -> Result<(), FenceError> {
    fence.write(conn, T(token), |tx| {
        tx.execute(
            "INSERT INTO payments (id, token) VALUES (?1, ?2)",
            (id, token as i64),
        )?;
        outbox.push(tx, T(token), "payouts", id.as_bytes())?;
        Ok(())
    })
}

fn payloads(ms: &[OutboxMessage]) -> Vec<(String, u64)> {
    ms.iter()
        .map(|m| {
            (
                String::from_utf8_lossy(&m.payload).into_owned(),
                m.token.term(),
            )
        })
        .collect()
}

#[test]
fn outbox_stale_leaders_message_is_refused_with_its_state_change() {
    let (mut conn, fence, outbox) = setup();
    pay(&mut conn, &fence, &outbox, 41, "p1").expect("41 pays");
    pay(&mut conn, &fence, &outbox, 42, "p2").expect("42 pays");
    let e = pay(&mut conn, &fence, &outbox, 41, "p3").expect_err("41 is stale now");
    assert!(
        matches!(e, FenceError::Stale { presented, highest } if presented == T(41) && highest == T(42)),
        "{e}"
    );
    let pending = outbox.pending(&conn, 10).expect("pending");
    assert_eq!(
        payloads(&pending),
        vec![("p1".into(), 41), ("p2".into(), 42)],
        "the stale leader's message is not in the outbox"
    );
    assert!(
        pending.windows(2).all(|w| w[0].seq < w[1].seq),
        "sequence numbers grow in commit order"
    );
    // A failing state change takes its message with it.
    let e = pay(&mut conn, &fence, &outbox, 42, "p1").expect_err("p1 exists: the insert fails");
    assert!(matches!(e, FenceError::Write { .. }), "{e}");
    assert_eq!(outbox.pending(&conn, 10).expect("pending").len(), 2);
}

#[test]
fn outbox_relay_publishes_in_order_and_a_stale_relays_mark_is_refused() {
    let (mut conn, fence, outbox) = setup();
    pay(&mut conn, &fence, &outbox, 41, "p1").expect("41 pays");
    let stalled = outbox.pending(&conn, 10).expect("the old relay reads");
    pay(&mut conn, &fence, &outbox, 42, "p2").expect("42 pays");
    let mut sent = Vec::new();
    let n = outbox
        .relay(&mut conn, T(42), 10, |m| {
            sent.push(m.clone());
            Ok::<(), Infallible>(())
        })
        .expect("the new relay");
    assert_eq!(n, 2);
    assert_eq!(payloads(&sent), vec![("p1".into(), 41), ("p2".into(), 42)]);
    assert!(outbox.pending(&conn, 10).expect("pending").is_empty());
    // The old relay wakes: what it publishes the broker takes (no fence there), but its
    // mark is refused, and it must stop.
    let e = outbox
        .relay(&mut conn, T(41), 10, |_| Ok::<(), Infallible>(()))
        .map(|_| ())
        .err();
    assert!(e.is_none(), "nothing is pending, so nothing to mark: {e:?}");
    let e = outbox
        .mark_published(&mut conn, T(41), stalled[0].seq)
        .expect_err("the stale relay's mark");
    assert!(e.is_stale(), "{e}");
    // A publisher that fails stops the relay; what it published before is marked.
    pay(&mut conn, &fence, &outbox, 42, "p3").expect("pays");
    pay(&mut conn, &fence, &outbox, 42, "p4").expect("pays");
    let r = outbox.relay(&mut conn, T(42), 10, |m| {
        if m.payload == b"p4" {
            Err(std::io::Error::other("the broker is down"))
        } else {
            Ok(())
        }
    });
    match r {
        Err(RelayError::Publish { seq, source }) => {
            assert!(source.to_string().contains("broker is down"));
            let left = outbox.pending(&conn, 10).expect("pending");
            assert_eq!(payloads(&left), vec![("p4".into(), 42)]);
            assert_eq!(left[0].seq, seq);
        }
        other => panic!("a failed publish must stop the relay, got {other:?}"),
    }
}

#[test]
fn outbox_consumer_applies_each_message_once_and_drops_older_tokens() {
    let m = |token: u64, seq: u64| OutboxMessage {
        seq,
        fence: "settlement".into(),
        token: T(token),
        topic: "payouts".into(),
        payload: Vec::new(),
    };
    let mut c = Consumer::new();
    assert_eq!(c.accept(&m(41, 1)), Verdict::Apply);
    assert_eq!(c.accept(&m(42, 2)), Verdict::Apply);
    assert_eq!(
        c.accept(&m(41, 1)),
        Verdict::Stale {
            presented: T(41),
            highest: T(42)
        },
        "a stalled relay's late copy"
    );
    assert_eq!(c.accept(&m(42, 2)), Verdict::Duplicate { applied: 2 });
    assert_eq!(c.accept(&m(42, 3)), Verdict::Apply);
    // Fences are judged apart: shard-1's tokens do not mix with settlement's.
    assert_eq!(c.judge("shard-1", T(7), 1), Verdict::Apply);
    // A consumer that restarts resumes from what its store says it applied.
    let applied: Vec<(String, FencingToken, u64)> =
        c.applied().map(|(f, t, s)| (f.to_owned(), t, s)).collect();
    let mut again = Consumer::resume(applied);
    assert_eq!(again.accept(&m(42, 3)), Verdict::Duplicate { applied: 3 });
    assert_eq!(again.accept(&m(43, 4)), Verdict::Apply);
}

#[test]
fn outbox_example_runs_the_whole_story() {
    use tenure_harness::kit::binary::{build, Target};
    let exe = build(Target::Example, "outbox");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let out = std::process::Command::new(&exe)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "applied [\"p1 paid\", \"p2 paid\", \"p4 paid\"], dropped 1 stale copy and 1 duplicate"
        ),
        "{stdout}"
    );
    let published =
        std::fs::read_to_string(dir.path().join("published.jsonl")).expect("the broker's file");
    assert_eq!(published.lines().count(), 5, "{published}");
}
