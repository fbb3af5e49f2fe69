//! A cluster test fixture: N real nodes (QUIC on loopback, RocksDB in a temporary
//! folder) in this process; kill, restart, cut and heal links; wait for conditions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::checker::{self, Event, Kind, Options};
use tenure::error::TransportError;
use tenure::{Config, Leadership, LostReason, Node, NodeId, ReadMode, Role, Timing};
use tokio::time::Instant;

/// Waits until `f` returns `Some`, polling; panics with `what` after `timeout`.
pub async fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One lease as a node saw it.
#[derive(Debug, Clone)]
pub struct LeaseRecord {
    /// The node that held it.
    pub node: NodeId,
    /// Its term: the fencing token.
    pub term: u64,
    /// When the node reported it acquired.
    pub acquired: Instant,
    /// The lease's validity when it ended (what it would have been had the node died).
    pub valid_until: Option<Instant>,
    /// When it was revoked.
    pub ended: Option<Instant>,
    /// Why it ended, once it did.
    pub reason: Option<LostReason>,
    /// When the node reported it lost.
    pub lost_at: Option<Instant>,
}

impl LeaseRecord {
    /// When this lease stopped protecting anything: a handover ends it at revocation; a
    /// kill or a partition ends it when its validity runs out.
    pub fn effective_end(&self) -> Option<Instant> {
        match self.reason {
            Some(LostReason::HandedOver) => self.ended,
            Some(_) => self.valid_until.or(self.ended),
            None => None,
        }
    }
}

/// Every lease of a cluster, in the order they were acquired, shared with the tasks that record them.
pub type Leases = Arc<Mutex<Vec<LeaseRecord>>>;

/// N real nodes in this process, each with its RocksDB folder and a QUIC endpoint on
/// loopback, and the leases they reported.
pub struct Cluster {
    /// The temporary folder holding every node's certificates and data.
    pub dir: tempfile::TempDir,
    /// Each node's address.
    pub addrs: BTreeMap<NodeId, SocketAddr>,
    /// The running nodes.
    pub nodes: BTreeMap<NodeId, Node>,
    /// The timing every node runs with.
    pub timing: Timing,
    /// The read mode every node runs with.
    pub read_mode: ReadMode,
    /// Every lease a node reported, for [`Cluster::assert_leases_never_overlap`].
    pub leases: Leases,
    /// `Config::compact_after` for every node.
    pub compact_after: u64,
    /// Nodes started with `Config::join` (new members).
    pub joining: std::collections::BTreeSet<NodeId>,
    /// The group the first members found (`Config::found`; every start passes it, as a
    /// unit file would).
    pub group: tenure::GroupId,
    /// A restore plan every founding start founds (`Config::restore`, its group instead of
    /// `group`): a group founded again after every member lost its data.
    pub restore: Option<Arc<tenure::backup::RestorePlan>>,
    /// Changes every node's configuration before it starts (test hooks, limits).
    pub tweak: Option<fn(&mut Config)>,
}

/// `TENURE_TEST_LOG=debug|info|warn`: the nodes' (and raft-rs's) log on stderr, each line
/// with its node, for reading a failing test.
fn test_logger(id: NodeId) -> Option<slog::Logger> {
    use slog::Drain;
    let level = match std::env::var("TENURE_TEST_LOG").ok()?.as_str() {
        "debug" => slog::Level::Debug,
        "info" => slog::Level::Info,
        _ => slog::Level::Warning,
    };
    let decorator = slog_term::PlainSyncDecorator::new(std::io::stderr());
    let drain = slog_term::FullFormat::new(decorator).build().fuse();
    let drain = slog::LevelFilter::new(drain, level).fuse();
    Some(slog::Logger::root(drain, slog::o!("test_node" => id)))
}

/// The tests' timing: 10 ms ticks, 30 ms heartbeats, election timeouts 150–250 ms.
pub fn test_timing() -> Timing {
    // 10 ms ticks, 30 ms heartbeats, elections 150–250 ms: fast, with room for a
    // loaded 2-core CI machine.
    Timing::from_millis(10, 30, 150, 250)
}

/// Who holds UDP port `port` (for a restart that finds its port taken): a socket of
/// this test process (a killed node's endpoint not yet closed) or another.
fn port_holder(port: u16) -> String {
    let Ok(table) = std::fs::read_to_string("/proc/net/udp") else {
        return "no /proc/net/udp to tell who holds the port".into();
    };
    let want = format!(":{port:04X}");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && f[1].ends_with(&want)).then(|| f[9].to_string())
        })
        .collect();
    let ours = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|t| {
                inodes
                    .iter()
                    .any(|i| t.to_string_lossy() == format!("socket:[{i}]"))
            })
        });
    match (inodes.is_empty(), ours) {
        (true, _) => "the port shows free now".into(),
        (false, true) => "held by a socket of this test process".into(),
        (false, false) => "held by another process".into(),
    }
}

/// A free UDP port on loopback, below the kernel's ephemeral range (32768 and up on
/// Linux), and never the same twice in one process. From the ephemeral range, a port a
/// killed node had just released could be handed to a test starting beside it, and
/// the node's restart then found its port taken for that whole test.
fn free_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    // Each test process starts at its own place in the span.
    let start = (std::process::id().wrapping_mul(7_919)) % SPAN;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..SPAN {
        let port = FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN;
        let addr = SocketAddr::from(([127, 0, 0, 1], port as u16));
        if std::net::UdpSocket::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no free UDP port in {FIRST}..{}", FIRST + SPAN);
}

impl Cluster {
    /// Starts nodes 1 to `n`, founding a group, with [`test_timing`] and safe reads.
    pub async fn start(n: u64) -> Cluster {
        Cluster::start_with(n, test_timing(), ReadMode::Safe).await
    }

    /// Starts nodes 1 to `n`, founding a group, with `timing` and `read_mode`.
    pub async fn start_with(n: u64, timing: Timing, read_mode: ReadMode) -> Cluster {
        let mut c = Cluster::unstarted(n, timing, read_mode);
        for id in 1..=n {
            c.start_node(id).await;
        }
        c
    }

    /// The folders, certificates and addresses of `n` nodes, none started.
    pub fn unstarted(n: u64, timing: Timing, read_mode: ReadMode) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let ids: Vec<NodeId> = (1..=n).collect();
        tenure::transport::tls::write_cluster_certs(dir.path().join("certs"), ids.iter().copied())
            .expect("write certs");
        let addrs = ids.iter().map(|id| (*id, free_addr())).collect();
        Cluster {
            dir,
            addrs,
            nodes: BTreeMap::new(),
            timing,
            read_mode,
            leases: Arc::new(Mutex::new(Vec::new())),
            compact_after: 1024,
            joining: Default::default(),
            group: tenure::GroupId::random(),
            restore: None,
            tweak: None,
        }
    }

    /// Node `id`'s configuration: its folder, address, peers, timing and logger.
    pub fn config(&self, id: NodeId) -> Config {
        let b = Config::builder(id)
            .peers(self.addrs.iter().map(|(i, a)| (*i, *a)))
            .data_dir(self.dir.path().join(format!("data-{id}")))
            .tls_dir(self.dir.path().join("certs"))
            .timing(self.timing)
            .read_mode(self.read_mode)
            .compact_after(self.compact_after);
        let mut config = if self.joining.contains(&id) {
            b.join(true).build()
        } else {
            let group = self.restore.as_ref().map_or(self.group, |p| p.group);
            let mut config = b.found(group).build();
            config.restore = self.restore.clone();
            config
        };
        config.logger = test_logger(id);
        if let Some(tweak) = self.tweak {
            tweak(&mut config);
        }
        config
    }

    /// Starts a new node `id` that joins the group (certificate issued now, empty data
    /// directory, `Config::join`); returns its address for `Node::add_learner`.
    pub async fn start_joining(&mut self, id: NodeId) -> SocketAddr {
        tenure::transport::tls::write_node_cert(self.dir.path().join("certs"), id)
            .expect("issue a node certificate");
        let addr = free_addr();
        self.addrs.insert(id, addr);
        self.joining.insert(id);
        self.start_node(id).await;
        addr
    }

    /// Starts node `id` on its folder (again, after a kill), recording its leases.
    pub async fn start_node(&mut self, id: NodeId) {
        // A node killed in this process releases its UDP port when its endpoint's last
        // task ends, a moment after `kill` returns: retry while the port is busy.
        let deadline = Instant::now() + Duration::from_secs(10);
        let node = loop {
            match Node::start(self.config(id)).await {
                Ok(n) => break n,
                Err(tenure::StartError::Transport(TransportError::Bind { source, .. }))
                    if source.kind() == std::io::ErrorKind::AddrInUse
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!(
                    "node {id} does not start: {e} ({})",
                    port_holder(self.addrs[&id].port())
                ),
            }
        };
        // Record every lease this node acquires and how it ends.
        let leases = self.leases.clone();
        let n = node.clone();
        tokio::spawn(async move {
            while let Ok(lease) = n.lease().await {
                let idx = {
                    let mut l = leases.lock().unwrap();
                    l.push(LeaseRecord {
                        node: id,
                        term: lease.token().term(),
                        acquired: Instant::now(),
                        valid_until: None,
                        ended: None,
                        reason: None,
                        lost_at: None,
                    });
                    l.len() - 1
                };
                let reason = lease.lost().await;
                let mut l = leases.lock().unwrap();
                let r = &mut l[idx];
                r.reason = Some(reason);
                r.lost_at = Some(Instant::now());
                r.valid_until = Some(lease.valid_until());
                r.ended = lease.ended_at();
            }
        });
        self.nodes.insert(id, node);
    }

    /// Stops a node at once, without handover, as if its process died.
    pub async fn kill(&mut self, id: NodeId) {
        if let Some(n) = self.nodes.remove(&id) {
            n.kill().await;
        }
    }

    /// Kills node `id` and starts it again on the same folder.
    pub async fn restart(&mut self, id: NodeId) {
        let t0 = Instant::now();
        self.kill(id).await;
        let killed = t0.elapsed();
        self.start_node(id).await;
        eprintln!(
            "restart of node {id}: killed in {killed:?}, running again after {:?}",
            t0.elapsed()
        );
    }

    /// Running node `id` (panics if it is not running).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id]
    }

    /// Node `id`'s current view of the root election.
    pub fn view(&self, id: NodeId) -> Leadership {
        self.nodes[&id].leadership()
    }

    /// Cuts every link between `a` and `b`, both directions.
    pub fn cut(&self, a: NodeId, b: NodeId) {
        if let Some(n) = self.nodes.get(&a) {
            n.faults().isolate_from(b);
        }
        if let Some(n) = self.nodes.get(&b) {
            n.faults().isolate_from(a);
        }
    }

    /// Cuts `id` off from every other node.
    pub fn isolate(&self, id: NodeId) {
        for other in self.addrs.keys().copied().filter(|o| *o != id) {
            self.cut(id, other);
        }
    }

    /// Splits the group into two sides that cannot talk.
    pub fn partition(&self, side_a: &[NodeId]) {
        for a in side_a {
            for b in self.addrs.keys().filter(|b| !side_a.contains(b)) {
                self.cut(*a, *b);
            }
        }
    }

    /// Heals every cut link.
    pub fn heal(&self) {
        for n in self.nodes.values() {
            n.faults().heal();
        }
    }

    /// Nodes that consider themselves leader, with their term.
    pub fn leaders(&self) -> Vec<(NodeId, u64)> {
        self.nodes
            .iter()
            .map(|(id, n)| (*id, n.leadership()))
            .filter(|(_, l)| l.role == Role::Leader)
            .map(|(id, l)| (id, l.term))
            .collect()
    }

    /// The node holding a lease, if exactly one running node does.
    pub fn leased_leader(&self) -> Option<(NodeId, u64)> {
        let leased: Vec<(NodeId, u64)> = self
            .nodes
            .iter()
            .map(|(id, n)| (*id, n.leadership()))
            .filter(|(_, l)| l.leased && l.role == Role::Leader)
            .map(|(id, l)| (id, l.term))
            .collect();
        (leased.len() == 1).then(|| leased[0])
    }

    /// The node and term of named election `name`'s leased leader, if exactly one node
    /// among `ids` holds its lease and every one of them follows it.
    pub fn named_leader(&self, ids: &[NodeId], name: &str) -> Option<(NodeId, u64)> {
        let views: Vec<(NodeId, Leadership)> = ids
            .iter()
            .map(|id| (*id, self.node(*id).election(name).leadership()))
            .collect();
        let leased: Vec<_> = views
            .iter()
            .filter(|(_, l)| l.leased && l.role == Role::Leader)
            .collect();
        if leased.len() != 1 {
            return None;
        }
        let (leader, term) = (leased[0].0, leased[0].1.term);
        views
            .iter()
            .all(|(_, l)| l.leader == Some(leader) && l.term == term)
            .then_some((leader, term))
    }

    /// Waits until one node holds a lease and every running node agrees on it.
    pub async fn steady_leader(&self, timeout: Duration) -> (NodeId, u64) {
        wait_for("one leased leader that every node follows", timeout, || {
            let (leader, term) = self.leased_leader()?;
            self.nodes
                .values()
                // Nodes outside the group (joining, removed) follow nobody.
                .filter(|n| !matches!(n.leadership().role, Role::Joining | Role::Removed))
                .all(|n| {
                    let l = n.leadership();
                    l.leader == Some(leader) && l.term == term
                })
                .then_some((leader, term))
        })
        .await
    }

    /// Checks that no term had two lease holders and no lease began before another
    /// node's lease of an earlier term ended: the history checker's rules (a) and (d),
    /// with each lease ending at its [`LeaseRecord::effective_end`] (a lease lost other
    /// than by a handover protected until its validity ran out).
    pub fn assert_leases_never_overlap(&self) {
        let leases = self.leases.lock().unwrap().clone();
        // One reading of both clocks, so that the leases keep their exact order.
        let (base, base_ns) = (Instant::now(), tenure::clock::monotonic_ns());
        let ns = |at: Instant| match at.checked_duration_since(base) {
            Some(after) => base_ns + after.as_nanos() as u64,
            None => base_ns.saturating_sub((base - at).as_nanos() as u64),
        };
        let mut events = Vec::new();
        for l in &leases {
            events.push(Event::new(l.node, ns(l.acquired), Kind::LeaseAcquired).term(l.term));
            if let (Some(reason), Some(lost_at), Some(end)) =
                (l.reason, l.lost_at, l.effective_end())
            {
                events.push(Event::lost(
                    l.node,
                    ns(lost_at),
                    l.term,
                    ns(end),
                    reason.as_str(),
                ));
            }
        }
        if let Err(failure) = checker::check(&events, &[], &Options::new(self.addrs.len())) {
            panic!("{failure}\nleases: {leases:#?}");
        }
    }

    /// Shuts every node down gracefully.
    pub async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.kill(id).await;
        }
    }
}
