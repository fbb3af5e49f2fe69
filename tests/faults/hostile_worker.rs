//! A real worker process under a member that abuses the support stream (issue 35;
//! `docs/design.md`, section 12, "A member cannot grow a book", and section 9): its
//! memory stays within a wide bound, measured the way `tests/transport/limits_measure.rs` does
//! (VmRSS from /proc, sampled every 20 ms), and the root's leaseholder keeps its lease.
//!
//! Workers 1 and 2 run from the `worker` example with twenty named elections; node 3 is
//! killed once the group stands and this process takes its place with node 3's
//! certificate, as a stolen or misused one would. It then sends both workers offers of
//! 5.2 million elections nobody runs (the finding that took a node from 21 to 108 MB),
//! a sequence number at the end of the range, heartbeats in term 0 of every quiet
//! election, and a flood of refused frames. The turn times and RSS figures are printed,
//! not asserted; only the wide memory bound and the lease are.
//!
//! Under the mutation that takes the book's bounds out, the workers are built with it
//! too (`harness/src/kit/binary.rs`), and the test fails: in a debug build the books
//! grew to 5.2 million entries, RSS from 30 to about 235 MB, and the root's lease was
//! lost 19 times (CI catches the mutation with `tests/transport/peer_input.rs` and the simulation,
//! which take seconds where this takes a minute):
//!
//! ```text
//! TENURE_MUTATION=support-book-unbounded cargo test --features mutations --test faults hostile_worker:: -- --nocapture
//! ```

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use raft::eraftpb::{Message, MessageType};
use tenure::testing::forged_support_request;
use tenure::transport::quic::QuicTransport;
use tenure::transport::{NodeId, Transport};
use tenure_harness::procs::Group;

const WAIT: Duration = Duration::from_secs(30);
/// How long twenty elections may take to go quiet: with this test's elections of
/// 600-900 ms, a clean-clone CI run needed more than [`WAIT`] once.
const QUIET_WAIT: Duration = Duration::from_secs(90);

/// How far a worker's RSS may rise above where it stood before the attacks. Wide: the
/// decoding of a few 3.8 MB frames at once, and what the allocator keeps of it. The
/// book the attacks would grow without its bounds (support-book-unbounded) takes about
/// 20 bytes per offer, over 100 MB for the 5.2 million sent.
const RSS_BOUND_MB: f64 = 48.0;

/// VmRSS of `pid` in MB (0 once it is gone).
fn rss_mb(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0.0, |kb| kb as f64 / 1024.0)
}

/// The worker's metrics as name (with labels) → value.
fn scrape(addr: &str) -> BTreeMap<String, f64> {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return BTreeMap::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines()
        .filter(|l| l.starts_with("tenure_"))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The sum of every series of `name` (all its labels).
fn total(m: &BTreeMap<String, f64>, name: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| *k == name || k.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .sum()
}

/// Sends `m` on `stream` until `counted` of worker `to`'s metrics rises (resent
/// meanwhile: the impostor's connection may still be coming up).
async fn sent_until(
    fake: &QuicTransport,
    metrics: &str,
    stream: u32,
    m: Message,
    what: &str,
    counted: impl Fn(&BTreeMap<String, f64>) -> f64,
) {
    let before = counted(&scrape(metrics));
    let deadline = Instant::now() + WAIT;
    loop {
        fake.send_election(stream, m.clone());
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            if counted(&scrape(metrics)) > before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
    }
}

/// Samples both workers' RSS every 20 ms until stopped; the peak of each.
fn sample_rss(
    pids: Vec<(NodeId, u32)>,
    stop: Arc<AtomicBool>,
) -> Arc<Mutex<BTreeMap<NodeId, f64>>> {
    let peaks = Arc::new(Mutex::new(BTreeMap::new()));
    let out = peaks.clone();
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            for (id, pid) in &pids {
                let r = rss_mb(*pid);
                let mut p = peaks.lock().unwrap();
                let e = p.entry(*id).or_insert(0.0);
                *e = f64::max(*e, r);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    out
}

/// Waits until the twenty elections exist, have leaders and are quiet on both workers.
async fn all_quiet(metrics: &BTreeMap<NodeId, String>) {
    let started = Instant::now();
    for (id, addr) in metrics {
        let deadline = Instant::now() + QUIET_WAIT;
        while total(&scrape(addr), "tenure_named_elections_quiet") < 20.0 {
            assert!(
                Instant::now() < deadline,
                "worker {id}'s twenty elections did not go quiet within {QUIET_WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!(
        "twenty elections quiet on both workers after {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_attacked_on_its_support_stream_stays_within_a_memory_bound() {
    let _machine = crate::WHOLE_MACHINE.write().await;
    // Elections of 600-900 ms, so root leases of about 580 ms: the attack saturates both
    // cores with three debug-built processes, and under the default timing (leases of
    // about 180 ms) a scheduling gap alone expired the root's lease in most runs of
    // unchanged code (six of eight runs failed one day, on main and on the branch alike, where every CI run had passed before). What this test
    // judges is the support stream's defences, not the scheduler's latency.
    let mut g = Group::start(
        3,
        None,
        &[
            "--elections",
            "20",
            "--metrics",
            "127.0.0.1:0",
            "--election-ms",
            "600",
            "--election-max-ms",
            "900",
        ],
    );
    let addrs: BTreeMap<NodeId, SocketAddr> = g
        .addrs
        .iter()
        .map(|(id, a)| (*id, a.parse().expect("a socket address")))
        .collect();
    let mut metrics: BTreeMap<NodeId, String> = BTreeMap::new();
    for id in [1, 2] {
        let e = g.wait_event("a worker started", WAIT, |e| {
            e.node == id && e.event == "started"
        });
        let addr = e.v["metrics"].as_str().expect("the metrics address");
        metrics.insert(id, addr.to_string());
    }
    all_quiet(&metrics).await;
    g.kill(3);
    let fake = tenure_harness::impostor(&g.dir.path().join("certs"), 3, &addrs, WAIT).await;
    // A leaseholder other than node 3, and every election quiet again under 1 or 2.
    let deadline = Instant::now() + WAIT;
    let (leader, term) = loop {
        let (l, t) = g.leaseholder(WAIT);
        if l != 3 {
            break (l, t);
        }
        assert!(
            Instant::now() < deadline,
            "no lease after node 3 was killed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    all_quiet(&metrics).await;
    let pids: Vec<(NodeId, u32)> = [1, 2]
        .iter()
        .map(|id| (*id, g.children.pid(*id).expect("a running worker")))
        .collect();
    // Where RSS stands before the attacks, once the group has settled without node 3.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before: BTreeMap<NodeId, f64> = pids.iter().map(|(id, pid)| (*id, rss_mb(*pid))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let peaks = sample_rss(pids.clone(), stop.clone());
    let attack_start = Instant::now();
    let judged = |m: &BTreeMap<String, f64>| {
        total(m, "tenure_support_acks_total") + total(m, "tenure_support_books_dropped_total")
    };

    // 1. Forty requests of 130,000 offers of elections nobody runs each, never
    //    confirmed: 5.2 million refusals to keep, were the book unbounded.
    const FRAME: u32 = 130_000;
    let mut seq = 0;
    for k in 0..40u32 {
        seq += 1;
        let ids: Vec<u32> = (1_000 + k * FRAME..1_000 + (k + 1) * FRAME).collect();
        for to in [1, 2] {
            let (stream, m) = forged_support_request(3, to, 0x5eed_0001, seq, &ids);
            let what = format!("offers of request {seq} judged by worker {to}");
            sent_until(&fake, &metrics[&to], stream, m, &what, judged).await;
        }
    }
    let step1 = attack_start.elapsed();
    // 2. The last sequence number: malformed, and the stream goes on after it.
    for to in [1, 2] {
        let (stream, m) = forged_support_request(3, to, 0x5eed_0001, u64::MAX, &[5]);
        sent_until(
            &fake,
            &metrics[&to],
            stream,
            m,
            "seq u64::MAX refused",
            |m| total(m, "tenure_support_messages_malformed_total"),
        )
        .await;
        let (stream, m) = forged_support_request(3, to, 0x5eed_0001, seq + 1, &[5]);
        sent_until(
            &fake,
            &metrics[&to],
            stream,
            m,
            "the next request judged",
            judged,
        )
        .await;
    }
    // 3. Heartbeats in term 0 of every named election, refused, three rounds; then a
    //    flood of them, 400 every 2 ms for two seconds.
    let heartbeat = |to: NodeId| {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = 3;
        m.to = to;
        m
    };
    let refused = |m: &BTreeMap<String, f64>| total(m, "tenure_peer_messages_refused_total");
    for _ in 0..3 {
        for to in [1, 2] {
            for election in 1..=20u32 {
                let what = format!("a term-0 heartbeat of election {election} refused by {to}");
                sent_until(
                    &fake,
                    &metrics[&to],
                    election,
                    heartbeat(to),
                    &what,
                    refused,
                )
                .await;
            }
        }
    }
    let flood_end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < flood_end {
        for k in 0..400u32 {
            let to = 1 + u64::from(k % 2);
            fake.send_election(1 + k % 20, heartbeat(to));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let attacked = attack_start.elapsed();
    // Settle, then read what it cost.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let peaks = peaks.lock().unwrap().clone();
    let events = g.events();
    let during = |e: &&tenure_harness::procs::Ev| e.at >= attack_start;
    let lost: Vec<&tenure_harness::procs::Ev> = events
        .iter()
        .filter(during)
        .filter(|e| e.event == "lease_lost")
        .collect();
    let root_lost: Vec<String> = lost
        .iter()
        .filter(|e| e.is_root())
        .map(|e| format!("worker {}: {}", e.node, e.raw))
        .collect();
    // The longest the leader went without a confirmed root lease while attacked: the
    // longest driver stall the workload saw (its confirms are 50 ms apart at rest).
    let confirms: Vec<Instant> = events
        .iter()
        .filter(during)
        .filter(|e| e.node == leader && e.event == "lease_confirmed" && e.is_root())
        .map(|e| e.at)
        .collect();
    let longest_gap = confirms
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    eprintln!(
        "attacked for {:.1} s (offers {:.1} s); leader {leader}, term {term}; {} root confirms, \
         longest gap {:.0} ms; leases lost: {} of the root, {} of named elections",
        attacked.as_secs_f64(),
        step1.as_secs_f64(),
        confirms.len(),
        longest_gap.as_secs_f64() * 1e3,
        root_lost.len(),
        lost.len() - root_lost.len()
    );
    for e in &lost {
        // Where the election went: the next leader its old leader saw.
        let next = events
            .iter()
            .filter(|n| n.at >= e.at && n.node == e.node && n.event == "leader_changed")
            .find(|n| n.election() == e.election() && n.v["leader"] != e.node)
            .map_or("?".to_string(), |n| n.v["leader"].to_string());
        eprintln!(
            "  +{:.0} ms: worker {} lost {}: {}, to {next}",
            (e.at - attack_start).as_secs_f64() * 1e3,
            e.node,
            e.election().unwrap_or("the root"),
            e.str("reason").unwrap_or("?")
        );
    }
    for (id, addr) in &metrics {
        let m = scrape(addr);
        eprintln!(
            "worker {id}: RSS {:.1} MB before, peak {:.1} MB (bound: +{RSS_BOUND_MB} MB); largest \
             book {} entries, {} books dropped, {} refused, {} dropped over its share",
            before[id],
            peaks.get(id).copied().unwrap_or(0.0),
            total(&m, "tenure_support_book_entries_max"),
            total(&m, "tenure_support_books_dropped_total"),
            total(&m, "tenure_peer_messages_refused_total"),
            total(&m, "tenure_transport_dropped_inbound_share_total"),
        );
    }
    for (id, peak) in &peaks {
        assert!(
            *peak <= before[id] + RSS_BOUND_MB,
            "worker {id}'s RSS rose from {:.1} MB to {peak:.1} MB while attacked, past the \
             bound of +{RSS_BOUND_MB} MB",
            before[id]
        );
    }
    assert!(
        root_lost.is_empty(),
        "the root's lease was lost while attacked: {root_lost:?}"
    );
    fake.shutdown().await;
    g.stop();
}
