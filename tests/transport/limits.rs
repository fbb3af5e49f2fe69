//! Resource limits of the QUIC transport against a peer that holds a valid node
//! certificate (issue 1/6, finding 4): the entries limit, the frame deadline, the
//! per-peer connection cap, the shared inbound byte budget, and rate-limited handshake
//! warnings. Each test fails when its limit is taken out. The numbers they guard are
//! measured on a real worker by `tests/transport/limits_measure.rs`.
//!
//! The attacker is a bare quinn client with a node's identity; the tests wait on
//! conditions with generous timeouts, never on sleeps.

use tenure_harness::shared_log;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use raft::eraftpb::{Entry, Message, MessageType};
use shared_log::SharedLog;
use slog::{o, Drain, Logger};
use tenure::transport::frame::{self, decode_bound};
use tenure::transport::quic::{close_code, QuicConfig, QuicTransport};
use tenure::transport::tls::{node_server_name, ClusterCa, TlsIdentity};
use tenure::transport::{Hello, Inbound, NodeId, Transport};

const TIMEOUT: Duration = Duration::from_secs(20);

/// Polls `cond` every 10 ms until it holds; panics naming `what` after `timeout`.
async fn wait_for(mut cond: impl FnMut() -> bool, what: &str, timeout: Duration) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn identity(ca: &ClusterCa, id: NodeId) -> TlsIdentity {
    let node = ca.issue_node(id).unwrap();
    TlsIdentity::from_pem(ca.cert_pem(), &node.cert_pem, &node.key_pem).unwrap()
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Node 1 on 127.0.0.1, knowing peers `peers` (all "at" `client`'s address, which
/// never answers), with `adjust` applied to its configuration.
fn node1(
    ca: &ClusterCa,
    peers: &[NodeId],
    client: &quinn::Endpoint,
    adjust: impl FnOnce(&mut QuicConfig),
) -> (QuicTransport, tenure::transport::Inbox) {
    let at = client.local_addr().unwrap();
    let peers: HashMap<NodeId, SocketAddr> = peers.iter().map(|id| (*id, at)).collect();
    let mut cfg = QuicConfig::new(1, loopback(), peers, identity(ca, 1));
    if std::env::var_os("TENURE_TEST_LOG").is_some() {
        let decorator = slog_term::PlainSyncDecorator::new(std::io::stderr());
        cfg.logger = Logger::root(slog_term::FullFormat::new(decorator).build().fuse(), o!());
    }
    adjust(&mut cfg);
    QuicTransport::start(cfg).unwrap()
}

async fn connect(ep: &quinn::Endpoint, id: &TlsIdentity, to: SocketAddr) -> quinn::Connection {
    ep.connect_with(id.client_config().unwrap(), to, &node_server_name(1))
        .unwrap()
        .await
        .unwrap()
}

/// Opens a stream on `conn` and writes the hello every stream begins with.
async fn open(conn: &quinn::Connection) -> quinn::SendStream {
    let mut s = conn.open_uni().await.unwrap();
    s.write_all(&Hello::default().encode()).await.unwrap();
    s
}

/// Waits until the server closes `conn`; returns its application error code.
async fn closed_with_code(conn: &quinn::Connection) -> Option<u64> {
    match tokio::time::timeout(TIMEOUT, conn.closed())
        .await
        .expect("the server did not close the connection")
    {
        quinn::ConnectionError::ApplicationClosed(c) => Some(c.error_code.into_inner()),
        _ => None,
    }
}

fn heartbeat(from: NodeId, term: u64) -> Vec<u8> {
    let mut m = Message {
        from,
        to: 1,
        term,
        ..Default::default()
    };
    m.set_msg_type(MessageType::MsgHeartbeat);
    frame::encode(&m, frame::DEFAULT_MAX_FRAME)
        .unwrap()
        .to_vec()
}

/// A frame from node `from` (< 128) of `n` empty entries: 2 bytes each on the wire.
fn empty_entries(from: u8, n: usize) -> Vec<u8> {
    let mut payload = vec![0x18, from]; // field 3 (from), varint
    payload.extend_from_slice(&[0x3au8, 0x00].repeat(n));
    let mut f = (payload.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&payload);
    f
}

/// A frame of an append from `from` carrying `data_len` bytes in one entry.
fn append(from: NodeId, term: u64, data_len: usize) -> Vec<u8> {
    let mut m = Message {
        from,
        to: 1,
        term,
        ..Default::default()
    };
    m.set_msg_type(MessageType::MsgAppend);
    m.entries.push(Entry {
        term,
        index: 1,
        data: vec![7u8; data_len].into(),
        ..Default::default()
    });
    frame::encode(&m, frame::DEFAULT_MAX_FRAME)
        .unwrap()
        .to_vec()
}

/// Messages that reached the driver's channel so far.
fn drain(rx: &mut tenure::transport::Inbox, into: &mut Vec<Message>) {
    while let Some(item) = rx.try_recv() {
        if let Inbound::Message(m) = item {
            into.push(m);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_with_more_entries_than_the_limit_is_refused_before_it_is_decoded() {
    let ca = ClusterCa::generate().unwrap();
    let client = quinn::Endpoint::client(loopback()).unwrap();
    let (t1, mut rx1) = node1(&ca, &[2], &client, |c| c.max_entries = 100);
    let id2 = identity(&ca, 2);

    // At the limit: delivered, all 100 entries.
    let conn = connect(&client, &id2, t1.local_addr()).await;
    let mut s = open(&conn).await;
    s.write_all(&empty_entries(2, 100)).await.unwrap();
    let mut got = Vec::new();
    wait_for(
        || {
            drain(&mut rx1, &mut got);
            !got.is_empty()
        },
        "the frame of 100 entries arrives",
        TIMEOUT,
    )
    .await;
    assert_eq!(got[0].entries.len(), 100);

    // One over: refused on the wire count, nothing decoded or delivered.
    s.write_all(&empty_entries(2, 101)).await.unwrap();
    assert_eq!(
        closed_with_code(&conn).await,
        Some(close_code::TOO_MANY_ENTRIES.into())
    );
    let st = t1.stats();
    assert_eq!(st.frames_too_many_entries, 1, "{st:?}");
    assert_eq!(st.received, 1, "{st:?}");
    assert_eq!(st.frames_malformed + st.frames_oversized, 0, "{st:?}");

    // The finding's shape at the default limit: a whole 4 MiB frame of empty entries
    // (2 M of them, 200 MB and more decoded) is refused. What it was ever allowed to
    // take is its reservation, not its decoded size.
    let (t2, mut rx2) = node1(&ca, &[2], &client, |_| {});
    let conn = connect(&client, &id2, t2.local_addr()).await;
    let mut s = open(&conn).await;
    let n = (frame::DEFAULT_MAX_FRAME - 2) / 2;
    let big = empty_entries(2, n);
    let _ = s.write_all(&big).await;
    assert_eq!(
        closed_with_code(&conn).await,
        Some(close_code::TOO_MANY_ENTRIES.into())
    );
    let st = t2.stats();
    assert_eq!(st.frames_too_many_entries, 1, "{st:?}");
    assert_eq!(st.received, 0, "{st:?}");
    let reserved = decode_bound(big.len() - 4, frame::DEFAULT_MAX_ENTRIES) as u64;
    assert!(
        st.budget_peak_bytes <= reserved,
        "reserved {} bytes, more than the frame's bound {reserved}",
        st.budget_peak_bytes
    );
    assert!(
        (n * std::mem::size_of::<Entry>()) as u64 > 4 * reserved,
        "the test's frame would decode to far more than its reservation"
    );
    drain(&mut rx2, &mut got);
    assert_eq!(got.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_half_frame_is_cut_after_the_frame_deadline() {
    let ca = ClusterCa::generate().unwrap();
    let client = quinn::Endpoint::client(loopback()).unwrap();
    let (t1, mut rx1) = node1(&ca, &[2], &client, |c| {
        c.frame_timeout = Duration::from_millis(500);
    });
    let id2 = identity(&ca, 2);
    let conn = connect(&client, &id2, t1.local_addr()).await;
    let mut s = open(&conn).await;
    // Half of a 1 MiB frame, then nothing: the sender holds the stream open.
    let half = append(2, 3, 1 << 20);
    s.write_all(&half[..half.len() / 2]).await.unwrap();
    assert_eq!(
        closed_with_code(&conn).await,
        Some(close_code::FRAME_TIMEOUT.into())
    );
    let st = t1.stats();
    assert_eq!(st.frames_timed_out, 1, "{st:?}");
    assert_eq!(st.received, 0);

    // A peer that sends whole frames is not affected.
    let conn = connect(&client, &id2, t1.local_addr()).await;
    let mut s = open(&conn).await;
    s.write_all(&append(2, 4, 1 << 20)).await.unwrap();
    let mut got = Vec::new();
    wait_for(
        || {
            drain(&mut rx1, &mut got);
            got.iter().any(|m| m.term == 4)
        },
        "a whole 1 MiB frame arrives after the stalled one was cut",
        TIMEOUT,
    )
    .await;
    assert_eq!(t1.stats().frames_timed_out, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_per_peer_cap_are_refused_and_counted() {
    let ca = ClusterCa::generate().unwrap();
    let client = quinn::Endpoint::client(loopback()).unwrap();
    let (t1, mut rx1) = node1(&ca, &[2, 3], &client, |c| c.max_connections_per_peer = 2);
    let (id2, id3) = (identity(&ca, 2), identity(&ca, 3));
    let addr = t1.local_addr();

    let a = connect(&client, &id2, addr).await;
    let b = connect(&client, &id2, addr).await;
    // The first two are served: a frame on each arrives.
    for (c, term) in [(&a, 10), (&b, 11)] {
        let mut s = open(c).await;
        s.write_all(&heartbeat(2, term)).await.unwrap();
    }
    let mut got = Vec::new();
    wait_for(
        || {
            drain(&mut rx1, &mut got);
            got.len() == 2
        },
        "node 1 reads a frame from each of node 2's two connections",
        TIMEOUT,
    )
    .await;

    // The third is refused with its own code and counted.
    let c = connect(&client, &id2, addr).await;
    assert_eq!(
        closed_with_code(&c).await,
        Some(close_code::TOO_MANY_CONNECTIONS.into())
    );
    let st = t1.stats();
    assert_eq!(st.connections_over_limit, 1, "{st:?}");
    assert_eq!(st.connections_refused, 1, "{st:?}");
    assert!(a.close_reason().is_none() && b.close_reason().is_none());

    // Another peer has its own slots.
    let d = connect(&client, &id3, addr).await;
    let mut s = open(&d).await;
    s.write_all(&heartbeat(3, 12)).await.unwrap();
    wait_for(
        || {
            drain(&mut rx1, &mut got);
            got.iter().any(|m| m.from == 3)
        },
        "node 3 is served while node 2 is at its cap",
        TIMEOUT,
    )
    .await;

    // A slot is given back when a connection ends.
    a.close(0u32.into(), b"done");
    wait_for(
        || t1.stats().connections_over_limit >= 1,
        "counted",
        TIMEOUT,
    )
    .await;
    let mut accepted = None;
    let start = Instant::now();
    while accepted.is_none() {
        assert!(start.elapsed() < TIMEOUT, "no slot came back after a close");
        let e = connect(&client, &id2, addr).await;
        // Until the server has seen the close, a new connection is still over the cap
        // and refused (close code 9) before its stream opens: try again.
        let Ok(mut s) = e.open_uni().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if s.write_all(&Hello::default().encode()).await.is_err()
            || s.write_all(&heartbeat(2, 13)).await.is_err()
        {
            continue;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && e.close_reason().is_none() {
            drain(&mut rx1, &mut got);
            if got.iter().any(|m| m.term == 13) {
                accepted = Some(e.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A frame of exactly `payload` bytes from `from` (an append whose one entry fills it).
fn append_of(from: NodeId, term: u64, payload: usize) -> Vec<u8> {
    let mut data = payload;
    loop {
        let f = append(from, term, data);
        match (f.len() - 4).cmp(&payload) {
            std::cmp::Ordering::Equal => return f,
            std::cmp::Ordering::Greater => data -= 1,
            std::cmp::Ordering::Less => data += 1,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_wait_for_the_shared_budget_instead_of_allocating() {
    // Frames of at most 64 KiB with at most 16 entries; the budget is the least the
    // transport accepts: two such frames' reservations, one per peer.
    let (max_frame, max_entries) = (64 * 1024, 16);
    let budget = 2 * decode_bound(max_frame, max_entries);
    let ca = ClusterCa::generate().unwrap();
    let client = quinn::Endpoint::client(loopback()).unwrap();
    let (t1, mut rx1) = node1(&ca, &[2, 3, 4], &client, |c| {
        c.max_frame = max_frame;
        c.max_entries = max_entries;
        c.inbound_budget = budget;
        c.frame_timeout = Duration::from_secs(60);
    });
    let addr = t1.local_addr();
    let stall = |id: NodeId| {
        let (client, ident) = (client.clone(), identity(&ca, id));
        async move {
            let conn = connect(&client, &ident, addr).await;
            let mut s = open(&conn).await;
            let f = append_of(id, 5, max_frame);
            s.write_all(&f[..f.len() / 2]).await.unwrap();
            (conn, s)
        }
    };
    // Nodes 2 and 3 each start a largest frame and stall: between them they hold the
    // whole budget.
    let (held2, _s2) = stall(2).await;
    wait_for(
        || t1.stats().budget_peak_bytes >= decode_bound(max_frame, max_entries) as u64,
        "node 2's stalled frame holds its reservation",
        TIMEOUT,
    )
    .await;
    let _held3 = stall(3).await;
    wait_for(
        || t1.stats().budget_peak_bytes >= budget as u64,
        "both stalled frames hold the whole budget",
        TIMEOUT,
    )
    .await;
    // Node 4's heartbeat waits for budget (it is not read, let alone decoded), and gets
    // it once node 2 gives up its stalled frame.
    let id4 = identity(&ca, 4);
    let conn4 = connect(&client, &id4, addr).await;
    let mut s4 = open(&conn4).await;
    s4.write_all(&heartbeat(4, 9)).await.unwrap();
    wait_for(
        || t1.stats().frames_waited_for_budget >= 1,
        "node 4's frame waits for budget",
        TIMEOUT,
    )
    .await;
    let mut got = Vec::new();
    drain(&mut rx1, &mut got);
    assert!(got.is_empty(), "a frame was read past the budget: {got:?}");
    held2.close(0u32.into(), b"giving up");
    wait_for(
        || {
            drain(&mut rx1, &mut got);
            got.iter().any(|m| m.from == 4)
        },
        "node 4's heartbeat arrives once node 2's stalled frame is given up",
        TIMEOUT,
    )
    .await;
    let st = t1.stats();
    assert!(
        st.budget_peak_bytes <= budget as u64,
        "{} bytes reserved at once, over the budget of {budget}",
        st.budget_peak_bytes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_is_held_until_the_driver_takes_the_message() {
    // The driver (here: this test) does not read its channel. Delivered messages keep
    // their budget while they wait there, so after a few the next frame waits; once the
    // channel is read, the rest arrive.
    let (max_frame, max_entries) = (64 * 1024, 16);
    let budget = 2 * decode_bound(max_frame, max_entries);
    let ca = ClusterCa::generate().unwrap();
    let client = quinn::Endpoint::client(loopback()).unwrap();
    let (t1, mut rx1) = node1(&ca, &[2], &client, |c| {
        c.max_frame = max_frame;
        c.max_entries = max_entries;
        c.inbound_budget = budget;
    });
    let conn = connect(&client, &identity(&ca, 2), t1.local_addr()).await;
    let mut s = open(&conn).await;
    let frames = 12; // of 60 kB each: 720 kB, over node 2's half of the budget
    let sender = tokio::spawn(async move {
        for term in 1..=frames {
            s.write_all(&append_of(2, term, 60_000)).await.unwrap();
        }
        s
    });
    wait_for(
        || t1.stats().frames_waited_for_budget >= 1,
        "a frame waits while the earlier messages sit in the driver's channel",
        TIMEOUT,
    )
    .await;
    let before = t1.stats().received;
    assert!(before < frames, "all {before} delivered without waiting");
    let mut got = Vec::new();
    wait_for(
        || {
            drain(&mut rx1, &mut got);
            got.len() as u64 == frames
        },
        "every frame arrives once the driver reads its channel",
        TIMEOUT,
    )
    .await;
    let _ = sender.await;
    assert!(t1.stats().budget_peak_bytes <= (budget / 2) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_warn_once_per_remote_per_minute_with_a_count() {
    let ca = ClusterCa::generate().unwrap();
    let rogue_ca = ClusterCa::generate().unwrap();
    let rogue = rogue_ca.issue_node(2).unwrap();
    let both = format!("{}{}", ca.cert_pem(), rogue_ca.cert_pem());
    let rogue = TlsIdentity::from_pem(&both, &rogue.cert_pem, &rogue.key_pem).unwrap();
    let log = SharedLog::default();
    let client = quinn::Endpoint::client(loopback()).unwrap();
    let (t1, _rx1) = node1(&ca, &[2], &client, |c| c.logger = log.logger());
    let tries = 5;
    for i in 1..=tries {
        // Each from a new port: the limit is per IP address.
        let client = quinn::Endpoint::client(loopback()).unwrap();
        let attempt = client
            .connect_with(
                rogue.client_config().unwrap(),
                t1.local_addr(),
                &node_server_name(1),
            )
            .unwrap();
        let _ = tokio::time::timeout(TIMEOUT, attempt).await;
        wait_for(
            || t1.stats().connections_refused >= i,
            "node 1 refuses the rogue's handshake",
            TIMEOUT,
        )
        .await;
    }
    let text = log.text();
    let warns = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("handshake failed"))
        .count();
    assert_eq!(
        warns, 1,
        "one warning for {tries} failed handshakes:\n{text}"
    );
    assert!(text.contains("suppressed_in_last_minute: 0"), "{text}");
}
