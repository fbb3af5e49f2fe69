//! The QUIC transport over real sockets on 127.0.0.1: delivery, identity checks, bad
//! input, restarts and back-pressure.
//!
//! Set `TENURE_TEST_LOG=1` to see the transports' logs on stderr.

use tenure_harness::quic_kit;
use tenure_harness::shared_log;

use quic_kit::{identity, logger, msg, wait_for};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft::eraftpb::Message;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use shared_log::SharedLog;
use slog::o;
use tenure::transport::frame;
use tenure::transport::quic::{close_code, QuicConfig, QuicTransport};
use tenure::transport::tls::{node_server_name, ClusterCa, TlsIdentity};
use tenure::transport::{Hello, Inbound, NodeId, Standing, Transport};
use tenure::GroupId;

const TIMEOUT: Duration = Duration::from_secs(20);

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn config(identity: TlsIdentity, listen: SocketAddr) -> QuicConfig {
    let mut cfg = QuicConfig::new(identity.id(), listen, HashMap::new(), identity);
    cfg.logger = logger().new(o!("test_node" => cfg.id));
    cfg
}

/// What one node received so far.
struct Inbox {
    rx: tenure::transport::Inbox,
    messages: Vec<Message>,
    /// Messages of named elections, with their election id.
    elections: Vec<(u32, Message)>,
    /// Every message in arrival order, with its election (0: the root).
    all: Vec<(u32, Message)>,
    unreachable: Vec<NodeId>,
    hellos: Vec<(NodeId, Hello)>,
}

impl Inbox {
    fn new(rx: tenure::transport::Inbox) -> Self {
        Inbox {
            rx,
            messages: Vec::new(),
            elections: Vec::new(),
            all: Vec::new(),
            unreachable: Vec::new(),
            hellos: Vec::new(),
        }
    }

    /// Moves everything that arrived into the lists.
    fn pump(&mut self) -> &mut Self {
        while let Some(item) = self.rx.try_recv() {
            match item {
                Inbound::Message(m) => {
                    self.all.push((0, m.clone()));
                    self.messages.push(m);
                }
                Inbound::Election { election, message } => {
                    self.all.push((election, message.clone()));
                    self.elections.push((election, message));
                }
                Inbound::Unreachable(id) => self.unreachable.push(id),
                Inbound::Hello { from, hello } => self.hellos.push((from, hello)),
            }
        }
        self
    }

    fn has(&mut self, from: NodeId, term: u64) -> bool {
        self.pump()
            .messages
            .iter()
            .any(|m| m.from == from && m.term == term)
    }

    fn has_election(&mut self, election: u32, from: NodeId, term: u64) -> bool {
        self.pump()
            .elections
            .iter()
            .any(|(e, m)| *e == election && m.from == from && m.term == term)
    }

    fn any_from(&mut self, from: NodeId) -> bool {
        self.pump().messages.iter().any(|m| m.from == from)
    }
}

/// Starts one node per identity on 127.0.0.1, each configured with all the others
/// (the sockets are bound first, so every node knows every port before any starts).
fn start_all(ids: Vec<TlsIdentity>) -> Vec<(QuicTransport, Inbox)> {
    start_all_with(ids, Some(Hello::default()))
}

/// As [`start_all`], with each transport's first hello `hello` (`None`: no connection
/// opens before `set_hello`).
fn start_all_with(ids: Vec<TlsIdentity>, hello: Option<Hello>) -> Vec<(QuicTransport, Inbox)> {
    let sockets: Vec<std::net::UdpSocket> = ids
        .iter()
        .map(|_| std::net::UdpSocket::bind(loopback()).unwrap())
        .collect();
    let addrs: HashMap<NodeId, SocketAddr> = ids
        .iter()
        .zip(&sockets)
        .map(|(id, s)| (id.id(), s.local_addr().unwrap()))
        .collect();
    ids.into_iter()
        .zip(sockets)
        .map(|(identity, socket)| {
            let me = identity.id();
            let mut cfg = config(identity, socket.local_addr().unwrap());
            cfg.hello = hello;
            cfg.peers = addrs
                .iter()
                .filter(|(id, _)| **id != me)
                .map(|(id, a)| (*id, (*a).into()))
                .collect();
            let (t, rx) = QuicTransport::start_on(cfg, socket).unwrap();
            (t, Inbox::new(rx))
        })
        .collect()
}

/// A bare quinn client endpoint on 127.0.0.1.
fn raw_endpoint() -> quinn::Endpoint {
    quinn::Endpoint::client(loopback()).unwrap()
}

/// Connects the bare `endpoint` with `identity` to node `server_id` at `server`.
async fn raw_connect(
    endpoint: &quinn::Endpoint,
    identity: &TlsIdentity,
    server: SocketAddr,
    server_id: NodeId,
) -> quinn::Connection {
    endpoint
        .connect_with(
            identity.client_config().unwrap(),
            server,
            &node_server_name(server_id),
        )
        .unwrap()
        .await
        .unwrap()
}

/// Opens a stream on `conn` and writes the hello every stream begins with (a node that
/// is starting: no group).
async fn open_stream(conn: &quinn::Connection) -> quinn::SendStream {
    let mut s = conn.open_uni().await.unwrap();
    s.write_all(&Hello::default().encode()).await.unwrap();
    s
}

/// Waits until the server closes `conn` and returns its application error code.
async fn closed_with_code(conn: &quinn::Connection) -> Option<u64> {
    let err = tokio::time::timeout(TIMEOUT, conn.closed())
        .await
        .expect("server did not close the connection");
    match err {
        quinn::ConnectionError::ApplicationClosed(close) => Some(close.error_code.into_inner()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_exchange_messages_in_every_direction() {
    let ca = ClusterCa::generate().unwrap();
    let mut nodes = start_all((1..=3).map(|id| identity(&ca, id)).collect());
    let ids: Vec<NodeId> = vec![1, 2, 3];
    for (t, _) in &nodes {
        for &to in &ids {
            if to != t.id() {
                t.send(msg(t.id(), to, 10 * t.id() + to));
            }
        }
    }
    for (t, inbox) in &mut nodes {
        let me = t.id();
        for &from in &ids {
            if from != me {
                let term = 10 * from + me;
                wait_for(
                    || inbox.has(from, term),
                    &format!("node {me} receives term {term} from node {from}"),
                    TIMEOUT,
                )
                .await;
            }
        }
    }
    for (t, inbox) in &mut nodes {
        let s = t.stats();
        assert_eq!(s.received, 2, "node {}: {s:?}", t.id());
        assert_eq!(s.sent, 2, "node {}: {s:?}", t.id());
        assert_eq!(
            s.from_mismatch + s.frames_malformed + s.connections_refused,
            0
        );
        assert!(inbox.pump().messages.iter().all(|m| m.to == t.id()));
    }

    // Unknown destination and blocked links drop and count.
    let (t1, _) = &nodes[0];
    t1.send(msg(1, 9, 1));
    assert_eq!(t1.stats().dropped_unknown_peer, 1);
    t1.faults().block_outbound(2);
    t1.send(msg(1, 2, 500));
    assert_eq!(t1.stats().dropped_fault, 1);
    t1.faults().heal();
    nodes[2].0.faults().block_inbound(1);
    nodes[0].0.send(msg(1, 3, 501));
    wait_for(
        || nodes[2].0.stats().dropped_fault == 1,
        "node 3 drops the message from blocked node 1",
        TIMEOUT,
    )
    .await;
    assert!(!nodes[2].1.has(1, 501));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_with_certificate_from_another_ca_is_refused() {
    let ca = ClusterCa::generate().unwrap();
    let rogue_ca = ClusterCa::generate().unwrap();
    // The rogue knows the cluster's (public) CA certificate, so it accepts node 1 as a
    // server; but its own certificate, "node 2", comes from its own CA.
    let rogue_cert = rogue_ca.issue_node(2).unwrap();
    let both_cas = format!("{}{}", ca.cert_pem(), rogue_ca.cert_pem());
    let rogue =
        TlsIdentity::from_pem(&both_cas, &rogue_cert.cert_pem, &rogue_cert.key_pem).unwrap();
    let mut nodes = start_all(vec![identity(&ca, 1), rogue]);
    let (t2, _inbox2) = nodes.pop().unwrap();
    let (t1, mut inbox1) = nodes.pop().unwrap();

    t2.send(msg(2, 1, 7));
    t1.send(msg(1, 2, 8));
    wait_for(
        || {
            t2.send(msg(2, 1, 7));
            t1.stats().connections_refused >= 1
                && t1.stats().connect_failures >= 1
                && inbox1.pump().unreachable.contains(&2)
        },
        "node 1 refuses the rogue's connection and cannot connect to it",
        TIMEOUT,
    )
    .await;
    assert!(!inbox1.any_from(2), "a message of the rogue arrived");
    assert_eq!(t1.stats().received, 0);
    assert_eq!(
        t1.stats().connects,
        0,
        "node 1 accepted the rogue as server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_certificate_cannot_connect_as_a_node() {
    let ca = ClusterCa::generate().unwrap();
    let log = SharedLog::default();
    let mut cfg1 = config(identity(&ca, 1), loopback());
    cfg1.logger = log.logger();
    let (t1, rx1) = QuicTransport::start(cfg1).unwrap();
    let mut inbox1 = Inbox::new(rx1);
    let client = raw_endpoint();
    // Even where the operator's address is that of a known peer, its certificate names
    // no node.
    t1.set_peer_addr(2, client.local_addr().unwrap());

    // The operator speaks the raft transport's ALPN and trusts the cluster CA: the
    // handshake itself passes (its certificate is from this CA, for client use).
    let op = ca.issue_operator().unwrap();
    let mut crypto = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates({
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert_der().clone()).unwrap();
        roots
    })
    .with_client_auth_cert(
        vec![CertificateDer::from_pem_slice(op.cert_pem.as_bytes()).unwrap()],
        PrivateKeyDer::from_pem_slice(op.key_pem.as_bytes()).unwrap(),
    )
    .unwrap();
    crypto.alpn_protocols = vec![tenure::transport::tls::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
    let conn = client
        .connect_with(
            quinn::ClientConfig::new(Arc::new(quic)),
            t1.local_addr(),
            &node_server_name(1),
        )
        .unwrap()
        .await
        .unwrap();
    // Whatever it sends goes nowhere.
    if let Ok(mut stream) = conn.open_uni().await {
        let frame = frame::encode(&msg(2, 1, 5), frame::DEFAULT_MAX_FRAME).unwrap();
        let _ = stream.write_all(&frame).await;
    }

    let closed = tokio::time::timeout(TIMEOUT, conn.closed())
        .await
        .expect("node 1 did not close the operator's connection");
    match closed {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(
                close.error_code.into_inner(),
                u64::from(close_code::REFUSED)
            );
            let reason = String::from_utf8_lossy(&close.reason);
            assert!(
                reason.contains("operator certificate"),
                "close reason: {reason}"
            );
        }
        other => panic!("expected an application close, got {other}"),
    }
    wait_for(
        || t1.stats().connections_refused == 1,
        "node 1 counts the refused connection",
        TIMEOUT,
    )
    .await;
    let text = log.text();
    assert!(
        text.contains("refused incoming connection")
            && text.contains("an operator cannot act as a node"),
        "log does not say why: {text}"
    );
    assert!(!inbox1.any_from(2));
    assert_eq!(t1.stats().received, 0);
    t1.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_whose_sender_differs_from_the_certificate_is_dropped_and_counted() {
    let ca = ClusterCa::generate().unwrap();
    let id2 = identity(&ca, 2);
    let (t1, rx1) = QuicTransport::start(config(identity(&ca, 1), loopback())).unwrap();
    let mut inbox1 = Inbox::new(rx1);
    // Node 1 knows nodes 2 and 3 (both "at" the raw client, which never answers).
    let client = raw_endpoint();
    t1.set_peer_addr(2, client.local_addr().unwrap());
    t1.set_peer_addr(3, client.local_addr().unwrap());
    let conn = raw_connect(&client, &id2, t1.local_addr(), 1).await;

    let mut stream = open_stream(&conn).await;
    let forged = frame::encode(&msg(3, 1, 66), frame::DEFAULT_MAX_FRAME).unwrap();
    let honest = frame::encode(&msg(2, 1, 77), frame::DEFAULT_MAX_FRAME).unwrap();
    stream.write_all(&forged).await.unwrap();
    stream.write_all(&honest).await.unwrap();

    wait_for(
        || inbox1.has(2, 77),
        "node 1 receives node 2's honest message",
        TIMEOUT,
    )
    .await;
    assert_eq!(t1.stats().from_mismatch, 1);
    assert!(
        !inbox1.any_from(3),
        "a message claiming to be from node 3 arrived"
    );
    assert_eq!(t1.stats().received, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_garbage_frames_close_the_connection_and_the_endpoint_keeps_working() {
    let ca = ClusterCa::generate().unwrap();
    let id2 = identity(&ca, 2);
    let mut cfg1 = config(identity(&ca, 1), loopback());
    cfg1.max_frame = 1024;
    let (t1, rx1) = QuicTransport::start(cfg1).unwrap();
    let mut inbox1 = Inbox::new(rx1);
    let addr1 = t1.local_addr();
    let client = raw_endpoint();
    // Node 2 is a known peer, for now "at" the raw client (which never answers).
    t1.set_peer_addr(2, client.local_addr().unwrap());

    // 1. A frame announcing 1 MiB against a 1 KiB limit.
    let conn = raw_connect(&client, &id2, addr1, 1).await;
    let mut s = open_stream(&conn).await;
    s.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
    // The node may close the connection as soon as it read the length: the rest of the
    // frame need not get through (the close code below is what is checked).
    let _ = s.write_all(&[0u8; 64]).await;
    assert_eq!(
        closed_with_code(&conn).await,
        Some(close_code::FRAME_TOO_LARGE.into())
    );
    assert_eq!(t1.stats().frames_oversized, 1);

    // 2. A frame within the limit that is not a raft message (an unterminated varint).
    let conn = raw_connect(&client, &id2, addr1, 1).await;
    let mut s = open_stream(&conn).await;
    s.write_all(&[0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    assert_eq!(
        closed_with_code(&conn).await,
        Some(close_code::MALFORMED.into())
    );
    assert_eq!(t1.stats().frames_malformed, 1);

    // 3. Random bytes: whatever the first four say, the connection is closed and counted.
    let conn = raw_connect(&client, &id2, addr1, 1).await;
    let mut s = open_stream(&conn).await;
    let mut x: u32 = 0x1234_5678;
    let garbage: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    let _ = s.write_all(&garbage).await;
    let _ = s.finish();
    let code = closed_with_code(&conn).await;
    assert!(
        code == Some(close_code::FRAME_TOO_LARGE.into())
            || code == Some(close_code::MALFORMED.into()),
        "closed with {code:?}"
    );
    let s1 = t1.stats();
    assert_eq!(s1.frames_oversized + s1.frames_malformed, 3, "{s1:?}");
    assert_eq!(s1.received, 0);

    // 4. A well-formed peer still gets through, both ways.
    let (t2, rx2) = QuicTransport::start(config(id2, loopback())).unwrap();
    let mut inbox2 = Inbox::new(rx2);
    t2.set_peer_addr(1, addr1);
    t1.set_peer_addr(2, t2.local_addr());
    wait_for(
        || {
            t2.send(msg(2, 1, 5));
            t1.send(msg(1, 2, 6));
            inbox1.has(2, 5) && inbox2.has(1, 6)
        },
        "nodes 1 and 2 exchange messages after the bad input",
        TIMEOUT,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_peer_is_reconnected_and_reported_unreachable_while_down() {
    let ca = ClusterCa::generate().unwrap();
    let id2 = identity(&ca, 2);
    let mut nodes = start_all(vec![identity(&ca, 1), id2.clone()]);
    let (t2, mut inbox2) = nodes.pop().unwrap();
    let (t1, mut inbox1) = nodes.pop().unwrap();
    let addr1 = t1.local_addr();
    let addr2 = t2.local_addr();

    let mut term = 1;
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 2, term));
            inbox2.any_from(1)
        },
        "node 2 hears from node 1 before the restart",
        TIMEOUT,
    )
    .await;

    // Node 2 goes down.
    inbox1.pump().unreachable.clear();
    t2.shutdown().await;
    drop(t2);
    drop(inbox2);
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 2, term));
            inbox1.pump().unreachable.contains(&2)
        },
        "node 1 reports node 2 unreachable while it is down",
        TIMEOUT,
    )
    .await;
    let connects_before = t1.stats().connects;

    // Node 2 comes back on the same address with the same identity. The old socket may
    // take a moment to be released.
    let mut restarted = None;
    wait_for(
        || match QuicTransport::start(config(id2.clone(), addr2)) {
            Ok(started) => {
                restarted = Some(started);
                true
            }
            Err(_) => false,
        },
        "node 2 binds its old address again",
        TIMEOUT,
    )
    .await;
    let (t2, rx2) = restarted.unwrap();
    let mut inbox2 = Inbox::new(rx2);
    t2.set_peer_addr(1, addr1);
    let restart = Instant::now();
    let first_term_after = term + 1;
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 2, term));
            t2.send(msg(2, 1, 1000 + term));
            inbox2
                .pump()
                .messages
                .iter()
                .any(|m| m.from == 1 && m.term >= first_term_after)
                && inbox1.any_from(2)
        },
        "delivery resumes both ways after node 2 restarts",
        TIMEOUT,
    )
    .await;
    assert!(t1.stats().connects > connects_before);
    eprintln!("delivery resumed {:?} after the restart", restart.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_peer_is_noticed_by_stateless_reset_after_it_restarts() {
    // Node 2 runs on its own runtime; shutting that runtime down stops it dead, without a
    // CONNECTION_CLOSE: a crash. Idle timeouts are 60 s, so only the stateless reset of
    // the restarted node 2 (same key, derived from its identity) can end node 1's stale
    // connection within the 15 s this test waits.
    let ca = ClusterCa::generate().unwrap();
    let id2 = identity(&ca, 2);
    let s1 = std::net::UdpSocket::bind(loopback()).unwrap();
    let s2 = std::net::UdpSocket::bind(loopback()).unwrap();
    let (addr1, addr2) = (s1.local_addr().unwrap(), s2.local_addr().unwrap());
    let mut cfg1 = config(identity(&ca, 1), addr1);
    cfg1.idle_timeout = Duration::from_secs(60);
    cfg1.peers.insert(2, addr2.into());
    let (t1, rx1) = QuicTransport::start_on(cfg1, s1).unwrap();
    let mut inbox1 = Inbox::new(rx1);
    let mut cfg2 = config(id2.clone(), addr2);
    cfg2.idle_timeout = Duration::from_secs(60);
    cfg2.peers.insert(1, addr1.into());

    let rt2 = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (t2, rx2) = {
        let _in_rt2 = rt2.enter();
        QuicTransport::start_on(cfg2.clone(), s2).unwrap()
    };
    let mut inbox2 = Inbox::new(rx2);
    let mut term = 0;
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 2, term));
            inbox2.any_from(1)
        },
        "node 2 hears from node 1 before the crash",
        TIMEOUT,
    )
    .await;

    // Stop every task of node 2 (no packet leaves after this), then release its socket.
    tokio::task::spawn_blocking(move || rt2.shutdown_timeout(Duration::from_secs(10)))
        .await
        .unwrap();
    drop(t2);
    drop(inbox2);
    let mut restarted = None;
    wait_for(
        || match QuicTransport::start(cfg2.clone()) {
            Ok(started) => {
                restarted = Some(started);
                true
            }
            Err(_) => false,
        },
        "node 2 binds its old address again",
        TIMEOUT,
    )
    .await;
    let (_t2, rx2) = restarted.unwrap();
    let mut inbox2 = Inbox::new(rx2);
    let restart = Instant::now();
    let first_term_after = term + 1;
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 2, term));
            inbox2
                .pump()
                .messages
                .iter()
                .any(|m| m.from == 1 && m.term >= first_term_after)
        },
        "node 1's messages reach the restarted node 2",
        Duration::from_secs(15),
    )
    .await;
    assert!(inbox1.pump().unreachable.contains(&2));
    eprintln!(
        "stale connection replaced {:?} after the restart",
        restart.elapsed()
    );
}

#[tokio::test]
async fn full_queue_drops_and_counts_instead_of_blocking() {
    // A current-thread runtime: the peer's task cannot run while this test sends, so the
    // queue fills deterministically. The peer address is a bound socket nobody answers.
    let ca = ClusterCa::generate().unwrap();
    let black_hole = std::net::UdpSocket::bind(loopback()).unwrap();
    let mut cfg = config(identity(&ca, 1), loopback());
    cfg.queue_depth = 4;
    cfg.peers.insert(2, black_hole.local_addr().unwrap().into());
    let (t1, _rx1) = QuicTransport::start(cfg).unwrap();

    let start = Instant::now();
    for term in 0..100 {
        t1.send(msg(1, 2, term));
    }
    let elapsed = start.elapsed();
    let s = t1.stats();
    assert_eq!(s.dropped_queue_full, 96, "{s:?}");
    assert!(
        elapsed < Duration::from_secs(1),
        "send blocked for {elapsed:?}"
    );

    // Once the task runs it drains the queue while disconnected, keeping only the most
    // recent few: sending no longer fills up.
    wait_for(
        || {
            t1.send(msg(1, 2, 1000));
            t1.stats().dropped_disconnected > 0
        },
        "the disconnected peer's queue is drained, old messages discarded",
        TIMEOUT,
    )
    .await;
    t1.close();
    t1.close(); // idempotent
    t1.send(msg(1, 2, 2000)); // after close: ignored, no panic
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_connections_and_frees_the_address_at_once() {
    // At shutdown node 1 has: connections both ways with node 3, whose link is cut by the
    // fault hooks (the connections stay up); a connection from a raw client holding node
    // 2's certificate; and its own connect attempt to "node 2" (the raw client, which
    // never answers) in handshake. Quinn drains a closed connection for three probe
    // timeouts; the attempt never got a round-trip sample, so that is about 3 s. Shutdown
    // must not wait for that: within 2 s of calling it (expected: milliseconds), it has
    // returned and the address can be bound again.
    let ca = ClusterCa::generate().unwrap();
    let id1 = identity(&ca, 1);
    let id2 = identity(&ca, 2);
    let mut nodes = start_all(vec![id1.clone(), identity(&ca, 3)]);
    let (t3, mut inbox3) = nodes.pop().unwrap();
    let (t1, mut inbox1) = nodes.pop().unwrap();
    let (addr1, addr3) = (t1.local_addr(), t3.local_addr());
    let client = raw_endpoint();
    t1.set_peer_addr(2, client.local_addr().unwrap());
    let conn2 = raw_connect(&client, &id2, addr1, 1).await;
    let mut stream = open_stream(&conn2).await;
    let hello = frame::encode(&msg(2, 1, 7), frame::DEFAULT_MAX_FRAME).unwrap();
    stream.write_all(&hello).await.unwrap();
    let mut term = 0;
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 3, term));
            t3.send(msg(3, 1, term));
            inbox1.has(2, 7) && inbox1.any_from(3) && inbox3.any_from(1)
        },
        "node 1 hears from the raw client and exchanges messages with node 3",
        TIMEOUT,
    )
    .await;
    t1.faults().isolate_from(3);
    t3.faults().isolate_from(1);

    let bound = Duration::from_secs(2);
    let started = Instant::now();
    tokio::time::timeout(bound, t1.shutdown())
        .await
        .expect("shutdown did not return within 2 s: does it wait out the draining period?");
    let shutdown_took = started.elapsed();
    drop(t1);
    drop(inbox1);

    let mut restarted = None;
    wait_for(
        || {
            let mut cfg = config(id1.clone(), addr1);
            cfg.peers.insert(3, addr3.into());
            match QuicTransport::start(cfg) {
                Ok(started) => {
                    restarted = Some(started);
                    true
                }
                Err(_) => false,
            }
        },
        "node 1 binds its address again right after shutdown",
        bound.saturating_sub(started.elapsed()),
    )
    .await;
    let bound_again = started.elapsed();
    eprintln!(
        "shutdown returned after {shutdown_took:?}; address bound again {bound_again:?} \
         after shutdown began"
    );
    let (t1, rx1) = restarted.unwrap();
    let mut inbox1 = Inbox::new(rx1);

    // The connections were closed, not abandoned: the raw client got node 1's
    // CONNECTION_CLOSE. (Usually it ends the connection with code SHUTDOWN; if an ACK of
    // the client's crossed the close and reached the restarted node 1, that node's
    // stateless reset, processed after the close, is what quinn reports.)
    let ended = tokio::time::timeout(TIMEOUT, conn2.closed())
        .await
        .expect("the raw client's connection did not end");
    if let quinn::ConnectionError::ApplicationClosed(close) = &ended {
        assert_eq!(close.error_code, close_code::SHUTDOWN.into());
    }
    assert!(
        conn2.stats().frame_rx.connection_close >= 1,
        "the raw client's connection ended without node 1's CONNECTION_CLOSE: {ended:?}"
    );

    // The restarted node 1 works: delivery resumes both ways once the link is healed.
    t3.faults().heal();
    let first_term_after = term + 1;
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 3, term));
            t3.send(msg(3, 1, term));
            inbox3
                .pump()
                .messages
                .iter()
                .any(|m| m.from == 1 && m.term >= first_term_after)
                && inbox1.any_from(3)
        },
        "delivery resumes both ways between the restarted node 1 and node 3",
        TIMEOUT,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_begins_with_the_senders_hello() {
    let ca = ClusterCa::generate().unwrap();
    let group = GroupId::random();
    let said = Hello::member(Some(group), 4, 2, 9);
    // Set before the first connect: the hello goes out when a connection opens.
    let ids = vec![identity(&ca, 1), identity(&ca, 2)];
    let mut nodes = start_all(ids);
    nodes[0].0.set_hello(said);
    nodes[1].0.set_hello(Hello {
        group: Some(group),
        standing: Standing::Founding,
        ..Hello::default()
    });
    // Node 1 may have connected before its hello was set: reconnect it by restarting 2.
    nodes[0].0.send(msg(1, 2, 1));
    nodes[1].0.send(msg(2, 1, 1));
    let (t1, inbox1) = &mut nodes[0];
    let _ = t1;
    wait_for(
        || !inbox1.pump().hellos.is_empty(),
        "node 1 hears node 2's hello",
        TIMEOUT,
    )
    .await;
    assert!(inbox1.hellos.iter().all(|(from, _)| *from == 2));
    let (_, inbox2) = &mut nodes[1];
    wait_for(
        || !inbox2.pump().hellos.is_empty(),
        "node 2 hears node 1's hello",
        TIMEOUT,
    )
    .await;
    assert!(inbox2.hellos.iter().all(|(from, _)| *from == 1));
}

/// The founding nonces cross the wire (`docs/design.md`, section 6): a founding hello
/// carries its incarnation's nonce, and a member's hello to a peer quotes the nonce it
/// recorded for that peer (`Transport::set_quotes`), not another peer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hellos_carry_founding_nonces_and_each_peer_its_own_quote() {
    let ca = ClusterCa::generate().unwrap();
    let group = GroupId::random();
    let mut nodes = start_all_with(
        vec![identity(&ca, 1), identity(&ca, 2), identity(&ca, 3)],
        None,
    );
    // Node 1 is a member that founded with 2 and 3; 2 and 3 are still founding.
    nodes[0]
        .0
        .set_quotes(std::collections::BTreeMap::from([(2, 0x22), (3, 0x33)]));
    nodes[0].0.set_hello(Hello::member(Some(group), 2, 1, 3));
    for (i, nonce) in [(1, 0x2222), (2, 0x3333)] {
        nodes[i].0.set_hello(Hello {
            group: Some(group),
            standing: Standing::Founding,
            nonce: Some(nonce),
            ..Hello::default()
        });
    }
    for (i, (transport, _)) in nodes.iter().enumerate() {
        let from = i as NodeId + 1;
        for to in (1..=3).filter(|to| *to != from) {
            transport.send(msg(from, to, 1));
        }
    }
    for (i, quote) in [(1, 0x22), (2, 0x33)] {
        let inbox = &mut nodes[i].1;
        wait_for(
            || inbox.pump().hellos.iter().any(|(from, _)| *from == 1),
            "a founding node hears the member's hello",
            TIMEOUT,
        )
        .await;
        let heard: Vec<Hello> = inbox
            .hellos
            .iter()
            .filter(|(from, _)| *from == 1)
            .map(|(_, h)| *h)
            .collect();
        let expected = Hello {
            nonce: Some(quote),
            ..Hello::member(Some(group), 2, 1, 3)
        };
        assert!(
            heard.iter().all(|h| *h == expected),
            "node {} hears its own quote: {heard:?}",
            i + 1
        );
    }
    let inbox = &mut nodes[0].1;
    wait_for(
        || inbox.pump().hellos.len() >= 2,
        "the member hears both founding hellos",
        TIMEOUT,
    )
    .await;
    let mut nonces: Vec<(NodeId, Option<u128>)> = inbox
        .hellos
        .iter()
        .map(|(from, h)| (*from, h.nonce))
        .collect();
    nonces.sort_unstable();
    nonces.dedup();
    assert_eq!(nonces, vec![(2, Some(0x2222)), (3, Some(0x3333))]);
}

/// A node of another group that holds this group's certificates (a data folder copied
/// from another deployment sharing the CA): refused at the connection, with both ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_group_is_refused_with_both_ids() {
    let ca = ClusterCa::generate().unwrap();
    let (ours, theirs) = (GroupId::random(), GroupId::random());
    let mut nodes = start_all(vec![identity(&ca, 1)]);
    let (t1, mut inbox1) = nodes.pop().unwrap();
    t1.set_hello(Hello::member(Some(ours), 3, 1, 7));
    let client = raw_endpoint();
    let id2 = identity(&ca, 2);
    t1.set_peer_addr(2, client.local_addr().unwrap());
    let conn = raw_connect(&client, &id2, t1.local_addr(), 1).await;
    let mut s = conn.open_uni().await.unwrap();
    s.write_all(&Hello::member(Some(theirs), 3, 1, 7).encode())
        .await
        .unwrap();
    let frame = frame::encode(&msg(2, 1, 5), frame::DEFAULT_MAX_FRAME).unwrap();
    let _ = s.write_all(&frame).await;
    let closed = tokio::time::timeout(TIMEOUT, conn.closed())
        .await
        .expect("node 1 did not close the connection of another group");
    let quinn::ConnectionError::ApplicationClosed(close) = closed else {
        panic!("expected an application close, got {closed:?}");
    };
    assert_eq!(
        close.error_code.into_inner(),
        u64::from(close_code::WRONG_GROUP)
    );
    let reason = String::from_utf8_lossy(&close.reason);
    assert!(
        reason.contains(&ours.to_string()) && reason.contains(&theirs.to_string()),
        "{reason}"
    );
    assert_eq!(t1.stats().connections_refused, 1);
    assert!(
        !inbox1.any_from(2),
        "no message of another group may reach the driver"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_a_hello_is_refused() {
    let ca = ClusterCa::generate().unwrap();
    let mut nodes = start_all(vec![identity(&ca, 1)]);
    let (t1, mut inbox1) = nodes.pop().unwrap();
    let client = raw_endpoint();
    let id2 = identity(&ca, 2);
    t1.set_peer_addr(2, client.local_addr().unwrap());
    let conn = raw_connect(&client, &id2, t1.local_addr(), 1).await;
    let mut s = conn.open_uni().await.unwrap();
    // A frame where the hello belongs (an older tenure): 30 bytes of something else.
    let frame = frame::encode(&msg(2, 1, 5), frame::DEFAULT_MAX_FRAME).unwrap();
    let mut bytes = frame.to_vec();
    bytes.resize(64, 0);
    let _ = s.write_all(&bytes).await;
    assert_eq!(
        closed_with_code(&conn).await,
        Some(close_code::WRONG_GROUP.into())
    );
    assert_eq!(t1.stats().frames_malformed, 1);
    assert!(!inbox1.any_from(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_and_election_messages_share_the_connection_and_keep_their_ids() {
    let ca = ClusterCa::generate().unwrap();
    let mut nodes = start_all((1..=2).map(|id| identity(&ca, id)).collect());
    let (b, mut inbox_b) = nodes.pop().unwrap();
    let (a, _inbox_a) = nodes.pop().unwrap();
    // Connected first, so that nothing below waits in the (short) disconnected backlog.
    // Sent once (kept for the connection while it is made), so the counts below are exact.
    a.send(msg(1, 2, 1));
    wait_for(
        || inbox_b.has(1, 1),
        "node 2 hears node 1 on the root",
        TIMEOUT,
    )
    .await;
    let before = (a.stats(), b.stats());
    inbox_b.all.clear();

    // Sent back to back, so they leave in shared batches of writes.
    let elections = [0, 1, 7, 0, u32::MAX, 2, 7, 0, 1, u32::MAX];
    let sent: Vec<(u32, u64)> = (0..40)
        .map(|i| (elections[i % elections.len()], 1000 + i as u64))
        .collect();
    for &(e, term) in &sent {
        if e == 0 && term % 2 == 0 {
            a.send(msg(1, 2, term));
        } else {
            a.send_election(e, msg(1, 2, term));
        }
    }
    wait_for(
        || inbox_b.pump().all.len() >= sent.len(),
        "node 2 receives all 40 messages",
        TIMEOUT,
    )
    .await;
    let got: Vec<(u32, u64)> = inbox_b.all.iter().map(|(e, m)| (*e, m.term)).collect();
    // Two lanes, each in order: the root's and the support stream's (urgent, sent first
    // when both wait), and the named elections'.
    let urgent = |e: u32| e == 0 || e == u32::MAX;
    let lane = |v: &[(u32, u64)], u: bool| -> Vec<(u32, u64)> {
        v.iter().copied().filter(|(e, _)| urgent(*e) == u).collect()
    };
    assert_eq!(got.len(), sent.len(), "every message, once");
    assert_eq!(
        lane(&got, true),
        lane(&sent, true),
        "the urgent lane in order"
    );
    assert_eq!(
        lane(&got, false),
        lane(&sent, false),
        "the elections' lane in order"
    );
    assert!(inbox_b.all.iter().all(|(_, m)| m.from == 1 && m.to == 2));
    for &(e, term) in &sent {
        if e == 0 {
            assert!(
                inbox_b.has(1, term),
                "root message {term} as Inbound::Message"
            );
        } else {
            assert!(
                inbox_b.has_election(e, 1, term),
                "election {e}, term {term}"
            );
        }
    }
    assert!(
        inbox_b.elections.iter().all(|(e, _)| *e != 0),
        "the root never arrives as Inbound::Election"
    );
    let of_elections = sent.iter().filter(|(e, _)| *e != 0).count() as u64;
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.sent - before.0.sent, sent.len() as u64, "{sa:?}");
    assert_eq!(sa.election_sent - before.0.election_sent, of_elections);
    assert_eq!(sb.received - before.1.received, sent.len() as u64, "{sb:?}");
    assert_eq!(
        sb.election_received - before.1.election_received,
        of_elections
    );
    assert_eq!(sb.frames_malformed + sb.from_mismatch, 0, "{sb:?}");

    // The fault hooks apply to elections too, both ways.
    a.faults().block_outbound(2);
    a.send_election(5, msg(1, 2, 2000));
    assert_eq!(a.stats().dropped_fault, 1);
    a.faults().heal();
    b.faults().block_inbound(1);
    a.send_election(5, msg(1, 2, 2001));
    wait_for(
        || b.stats().dropped_fault == 1,
        "node 2 drops the election message of blocked node 1",
        TIMEOUT,
    )
    .await;
    b.faults().heal();
    a.send_election(5, msg(1, 2, 2002));
    wait_for(
        || inbox_b.has_election(5, 1, 2002),
        "node 2 receives election 5 once healed",
        TIMEOUT,
    )
    .await;
    assert!(!inbox_b.has_election(5, 1, 2000) && !inbox_b.has_election(5, 1, 2001));
    // An unknown destination drops and counts, as for the root.
    a.send_election(5, msg(1, 9, 1));
    assert_eq!(a.stats().dropped_unknown_peer, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_frames_meet_the_certificate_check_and_election_zero_is_malformed() {
    let ca = ClusterCa::generate().unwrap();
    let id2 = identity(&ca, 2);
    let (t1, rx1) = QuicTransport::start(config(identity(&ca, 1), loopback())).unwrap();
    let mut inbox1 = Inbox::new(rx1);
    let client = raw_endpoint();
    t1.set_peer_addr(2, client.local_addr().unwrap());
    t1.set_peer_addr(3, client.local_addr().unwrap());
    let conn = raw_connect(&client, &id2, t1.local_addr(), 1).await;
    let mut stream = open_stream(&conn).await;
    let max = frame::DEFAULT_MAX_FRAME;
    let forged = frame::encode_election(4, &msg(3, 1, 66), max).unwrap();
    let honest = frame::encode_election(4, &msg(2, 1, 77), max).unwrap();
    let root = frame::encode(&msg(2, 1, 78), max).unwrap();
    stream.write_all(&forged).await.unwrap();
    stream.write_all(&honest).await.unwrap();
    stream.write_all(&root).await.unwrap();
    wait_for(
        || inbox1.has_election(4, 2, 77) && inbox1.has(2, 78),
        "node 1 receives node 2's honest election and root messages",
        TIMEOUT,
    )
    .await;
    let s = t1.stats();
    assert_eq!(
        (s.from_mismatch, s.received, s.election_received),
        (1, 2, 1)
    );
    assert!(!inbox1.any_from(3) && inbox1.elections.iter().all(|(_, m)| m.from == 2));

    // An envelope naming election 0 (the root travels without one) closes the connection.
    let mut zero = 5u32.to_be_bytes().to_vec();
    zero.extend_from_slice(&[0x00, 0, 0, 0, 0]);
    stream.write_all(&zero).await.unwrap();
    assert_eq!(
        closed_with_code(&conn).await,
        Some(close_code::MALFORMED.into())
    );
    assert_eq!(t1.stats().frames_malformed, 1);

    // So does a header cut off by the end of its frame.
    let conn = raw_connect(&client, &id2, t1.local_addr(), 1).await;
    let mut stream = open_stream(&conn).await;
    stream.write_all(&[0, 0, 0, 2, 0x00, 0x01]).await.unwrap();
    assert_eq!(
        closed_with_code(&conn).await,
        Some(close_code::MALFORMED.into())
    );
    assert_eq!(t1.stats().frames_malformed, 2);
}
