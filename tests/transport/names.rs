//! Peers reached by name over the QUIC transport: names that the system resolves
//! (`localhost`), a name that moves to another address while its node restarts (a
//! resolver of the test's own, since a test cannot change DNS), and names that do not
//! resolve or resolve slowly.
//!
//! `a_peer_that_moves_under_its_name_is_reached_again` prints how long the others took
//! to reach the moved node (p50 and max over its trials; `--nocapture` shows them).
//! Set `TENURE_TEST_LOG=1` to see the transports' logs on stderr.

use tenure_harness::quic_kit;
use tenure_harness::shared_log;

use quic_kit::{identity, logger, msg, wait_for};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared_log::SharedLog;
use slog::{o, Logger};
use tenure::transport::quic::{QuicConfig, QuicTransport};
use tenure::transport::tls::{ClusterCa, TlsIdentity};
use tenure::transport::{Inbound, NodeId, PeerAddr, Resolve, Resolving, Transport};

const TIMEOUT: Duration = Duration::from_secs(20);
/// Restarts of the moving node: the figures are over these.
const TRIALS: usize = 12;

fn name(host: &str, port: u16) -> PeerAddr {
    PeerAddr::Name {
        host: host.into(),
        port,
    }
}

/// What one node received so far.
struct Inbox {
    rx: tenure::transport::Inbox,
    /// `(from, term)` of every message.
    got: Vec<(NodeId, u64)>,
}

impl Inbox {
    fn new(rx: tenure::transport::Inbox) -> Self {
        Inbox {
            rx,
            got: Vec::new(),
        }
    }

    fn pump(&mut self) -> &mut Self {
        while let Some(item) = self.rx.try_recv() {
            if let Inbound::Message(m) = item {
                self.got.push((m.from, m.term));
            }
        }
        self
    }

    /// Whether a message from `from` with a term of at least `term` arrived.
    fn has_from(&mut self, from: NodeId, term: u64) -> bool {
        self.pump()
            .got
            .iter()
            .any(|(f, t)| *f == from && *t >= term)
    }
}

/// A resolver the test controls: name → addresses (a name it does not know fails, as
/// an unknown name does), and names it never answers for.
#[derive(Default)]
struct TestResolver {
    names: Mutex<HashMap<String, Vec<SocketAddr>>>,
    hang: Mutex<Vec<String>>,
    asked: AtomicU64,
}

impl TestResolver {
    fn set(&self, host: &str, to: SocketAddr) {
        self.names
            .lock()
            .unwrap()
            .insert(host.to_string(), vec![to]);
    }
}

impl Resolve for TestResolver {
    fn resolve(&self, host: &str, port: u16) -> Resolving {
        self.asked.fetch_add(1, Ordering::Relaxed);
        if self.hang.lock().unwrap().iter().any(|h| h == host) {
            return Box::pin(std::future::pending());
        }
        let found = self.names.lock().unwrap().get(host).cloned();
        Box::pin(async move {
            match found {
                Some(addrs) => Ok(addrs
                    .into_iter()
                    .map(|a| SocketAddr::new(a.ip(), port))
                    .collect()),
                None => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no such name (test resolver)",
                )),
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_named_localhost_connect_and_exchange_messages() {
    // The system resolver: `localhost` may come back as ::1 and 127.0.0.1; these
    // sockets are IPv4, so the IPv6 address is skipped.
    let ca = ClusterCa::generate().unwrap();
    let sockets: Vec<std::net::UdpSocket> = (0..3)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = sockets
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    let mut nodes = Vec::new();
    for (i, socket) in sockets.into_iter().enumerate() {
        let me = i as NodeId + 1;
        let mut cfg = QuicConfig::new(
            me,
            socket.local_addr().unwrap(),
            HashMap::new(),
            identity(&ca, me),
        );
        cfg.logger = logger().new(o!("test_node" => me));
        for (j, port) in ports.iter().enumerate() {
            let id = j as NodeId + 1;
            if id != me {
                cfg.peers
                    .insert(id, format!("localhost:{port}").parse().unwrap());
            }
        }
        let (t, rx) = QuicTransport::start_on(cfg, socket).unwrap();
        nodes.push((t, Inbox::new(rx)));
    }
    let mut term = 0;
    for round in 0.. {
        term += 1;
        for (t, _) in &nodes {
            for to in 1..=3 {
                if to != t.id() {
                    t.send(msg(t.id(), to, term));
                }
            }
        }
        let all = nodes.iter_mut().all(|(t, inbox)| {
            let me = t.id();
            (1..=3).filter(|f| *f != me).all(|f| inbox.has_from(f, 1))
        });
        if all {
            break;
        }
        assert!(round < 2000, "every node hears from both others, by name");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for (t, _) in &nodes {
        let s = t.stats();
        assert!(s.connects >= 2, "node {}: {s:?}", t.id());
        assert_eq!(s.connections_refused, 0, "node {}: {s:?}", t.id());
    }
    for (t, _) in &nodes {
        t.shutdown().await;
    }
}

/// Starts node `id` on `socket`, reaching the others by their `n<id>.test` names.
fn start_named(
    ca_identity: TlsIdentity,
    socket: std::net::UdpSocket,
    resolver: &Arc<TestResolver>,
    ports: &HashMap<NodeId, u16>,
    log: &Logger,
) -> (QuicTransport, Inbox) {
    let me = ca_identity.id();
    let mut cfg = QuicConfig::new(
        me,
        socket.local_addr().unwrap(),
        HashMap::new(),
        ca_identity,
    );
    cfg.logger = log.new(o!("test_node" => me));
    cfg.resolver = resolver.clone();
    // Quick retries, so that the figures show the mechanism rather than the backoff.
    cfg.backoff_min = Duration::from_millis(10);
    cfg.backoff_max = Duration::from_millis(200);
    // A connection to a crashed node's old address is never ended by the idle timeout
    // within the test: only asking the name again ends it.
    cfg.idle_timeout = Duration::from_secs(60);
    // Each crashed incarnation's connection to the others lingers (until that idle
    // timeout): room for all of them, so that no restart is refused for want of a slot.
    cfg.max_connections_per_peer = 2 * TRIALS;
    for (id, port) in ports {
        if *id != me {
            cfg.peers.insert(*id, name(&format!("n{id}.test"), *port));
        }
    }
    let (t, rx) = QuicTransport::start_on(cfg, socket).unwrap();
    (t, Inbox::new(rx))
}

/// Node 2 on a runtime of its own: shutting that runtime down is a crash.
struct Mover {
    rt: tokio::runtime::Runtime,
    t: QuicTransport,
    inbox: Inbox,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_moves_under_its_name_is_reached_again() {
    // Nodes 1 and 3 stay; node 2 restarts again and again, each time on a new address
    // (127.0.0.2, then .3, .4, ...; on its port), and its name `n2.test` follows it. Half the
    // trials stop it gracefully (its CONNECTION_CLOSE ends the others' connections), half
    // crash it (nothing tells the others: their connections go on to an address where
    // nothing answers, not even with a stateless reset). The idle timeout is 60 s, so
    // after a crash only the name, asked again when the moved node connects, brings the
    // others to it within the wait.
    let ca = ClusterCa::generate().unwrap();
    let resolver = Arc::new(TestResolver::default());
    let log = logger();
    let s1 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let s2 = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    let s3 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut ports: HashMap<NodeId, u16> = HashMap::new();
    for (id, s) in [(1, &s1), (2, &s2), (3, &s3)] {
        let a = s.local_addr().unwrap();
        ports.insert(id, a.port());
        resolver.set(&format!("n{id}.test"), a);
    }
    let (t1, mut inbox1) = start_named(identity(&ca, 1), s1, &resolver, &ports, &log);
    let (t3, mut inbox3) = start_named(identity(&ca, 3), s3, &resolver, &ports, &log);
    let id2 = identity(&ca, 2);
    let start_mover = |socket: std::net::UdpSocket, ports: &HashMap<NodeId, u16>| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (t, inbox) = {
            let _in = rt.enter();
            start_named(id2.clone(), socket, &resolver, ports, &log)
        };
        Mover { rt, t, inbox }
    };
    let mut mover = start_mover(s2, &ports);

    let mut term: u64 = 0;
    // (graceful, time until both others reached node 2, until all four links carried)
    let mut figures: Vec<(bool, Duration, Duration)> = Vec::new();
    let mut first = 1;
    for trial in 0..=TRIALS {
        // Everyone hears everyone again (trial 0: the first start), with messages sent
        // since node 2 (re)started.
        let started = Instant::now();
        let mut reached: Option<Duration> = None;
        loop {
            term += 1;
            t1.send(msg(1, 2, term));
            t3.send(msg(3, 2, term));
            mover.t.send(msg(2, 1, term));
            mover.t.send(msg(2, 3, term));
            let to2 = mover.inbox.has_from(1, first) && mover.inbox.has_from(3, first);
            if to2 && reached.is_none() {
                reached = Some(started.elapsed());
            }
            if to2 && inbox1.has_from(2, first) && inbox3.has_from(2, first) {
                break;
            }
            assert!(
                started.elapsed() < TIMEOUT,
                "trial {trial}: nodes 1 and 3 reach node 2 at its new address, and it them, \
                 within {TIMEOUT:?} (node 2 got {:?}; the resolver was asked {} times)",
                mover
                    .inbox
                    .pump()
                    .got
                    .iter()
                    .rev()
                    .take(4)
                    .collect::<Vec<_>>(),
                resolver.asked.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let graceful = trial % 2 == 1;
        if trial > 0 {
            figures.push((graceful, reached.expect("set"), started.elapsed()));
        }
        if trial == TRIALS {
            break;
        }
        // Node 2 goes (odd trials come after a graceful stop, even ones after a crash),
        // and comes back elsewhere under its name.
        let Mover { rt, t, inbox } = mover;
        if trial % 2 == 0 {
            t.shutdown().await;
        }
        // Stop every task of node 2 (no packet leaves after this).
        tokio::task::spawn_blocking(move || rt.shutdown_timeout(Duration::from_secs(10)))
            .await
            .unwrap();
        drop(t);
        drop(inbox);
        // A new address on the same port (the port is part of the configured peer
        // address; a name gives only the IP): 127.0.0.3, .4, ... (any 127/8 address is
        // this host's on Linux), the next one if that port is taken there.
        let port = ports[&2];
        let socket = (0..50)
            .find_map(|k| {
                let ip = std::net::Ipv4Addr::new(
                    127,
                    0,
                    ((3 + trial + k) / 250) as u8,
                    ((3 + trial + k) % 250) as u8,
                );
                std::net::UdpSocket::bind((ip, port)).ok()
            })
            .expect("a free address for node 2 on its port");
        resolver.set("n2.test", socket.local_addr().unwrap());
        first = term + 1;
        mover = start_mover(socket, &ports);
    }
    let show = |pick: &dyn Fn(&(bool, Duration, Duration)) -> bool,
                of: &dyn Fn(&(bool, Duration, Duration)) -> Duration| {
        let mut v: Vec<Duration> = figures.iter().filter(|f| pick(f)).map(of).collect();
        v.sort();
        format!(
            "p50 {:.1} ms, max {:.1} ms over {}",
            percentile(&v, 0.5).as_secs_f64() * 1e3,
            v.last().expect("trials").as_secs_f64() * 1e3,
            v.len()
        )
    };
    eprintln!(
        "moved node reached again by both others: {} (after graceful stops: {}; after \
         crashes: {}); all four links again: {}  [backoff 10-200 ms, idle timeout 60 s]",
        show(&|_| true, &|f| f.1),
        show(&|f| f.0, &|f| f.1),
        show(&|f| !f.0, &|f| f.1),
        show(&|_| true, &|f| f.2),
    );
    t1.shutdown().await;
    t3.shutdown().await;
    let Mover { rt, t, .. } = mover;
    t.shutdown().await;
    tokio::task::spawn_blocking(move || rt.shutdown_timeout(Duration::from_secs(10)))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_fails_or_hangs_is_a_failed_attempt_and_holds_up_no_other_peer() {
    // Node 1 reaches node 2 by a name the resolver does not know, node 4 by one it never
    // answers for, and node 3 by one that resolves: node 3 hears from node 1 all the
    // same, node 2's attempts fail with the reason logged, and once node 2's name
    // resolves it is reached too.
    let ca = ClusterCa::generate().unwrap();
    let resolver = Arc::new(TestResolver::default());
    resolver.hang.lock().unwrap().push("n4.test".into());
    let log = SharedLog::default();
    let s1 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let s2 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let s3 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (a1, a2, a3) = (
        s1.local_addr().unwrap(),
        s2.local_addr().unwrap(),
        s3.local_addr().unwrap(),
    );
    resolver.set("n1.test", a1);
    resolver.set("n3.test", a3);
    let ports: HashMap<NodeId, u16> =
        [(1, a1.port()), (2, a2.port()), (3, a3.port()), (4, 9)].into();
    let (t1, _inbox1) = start_named(identity(&ca, 1), s1, &resolver, &ports, &log.logger());
    let (_t2, mut inbox2) = start_named(identity(&ca, 2), s2, &resolver, &ports, &logger());
    let (_t3, mut inbox3) = start_named(identity(&ca, 3), s3, &resolver, &ports, &logger());
    let mut term = 0;
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 3, term));
            t1.send(msg(1, 2, term));
            t1.send(msg(1, 4, term));
            inbox3.has_from(1, 1) && t1.stats().connect_failures >= 3
        },
        "node 3 hears from node 1 while node 2's name fails and node 4's hangs",
        TIMEOUT,
    )
    .await;
    assert!(!inbox2.has_from(1, 1));
    let text = log.text();
    assert!(
        text.contains("peer unreachable")
            && text.contains("cannot resolve n2.test:")
            && text.contains("no such name"),
        "the reason is logged:\n{text}"
    );
    resolver.set("n2.test", a2);
    wait_for(
        || {
            term += 1;
            t1.send(msg(1, 2, term));
            inbox2.has_from(1, 1)
        },
        "node 2 is reached once its name resolves",
        TIMEOUT,
    )
    .await;
}
