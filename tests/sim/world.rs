//! One simulated run: N turmoil hosts, each running the real driver ([`Node::start_with`])
//! on a [`MemStore`] whose [`MemDisk`] survives crashes, over the real QUIC transport on
//! turmoil's UDP network ([`SimUdp`]). A workload on every node acquires leases,
//! confirms them and writes to a fenced resource (tenure's [`SqliteFence`] on an
//! in-memory SQLite database) with the token; a recorder turns all of it into checker
//! [`Event`]s stamped with simulated time.
//!
//! Faults come from a [`Schedule`] and are applied between simulation steps: partitions
//! through turmoil's link states, pauses as held links (the messages arrive late, in one
//! burst), crashes as turmoil host crashes (the runtime and everything on it is dropped;
//! the disk is not) and restarts as a fresh node on the same disk, loss in the socket
//! adapter (seeded), delay as turmoil link latency, clock faults through each node's
//! hidden [`ClockControl`] (one per node, kept across its restarts: a restarted process
//! on a host whose clock stalls reads the stalled clock).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::clock::ClockControl;
use tenure::fence::SqliteFence;
use tenure::storage::{MemDisk, MemStore};
use tenure::transport::quic::{QuicConfig, QuicTransport};
use tenure::transport::tls::{ClusterCa, TlsIdentity};
use tenure::{Config, FencingToken, Node, NodeId, ReadMode, Role, Timing};
use tokio::time::Instant;

use super::checker::{ClockFault, ClockFaultKind, Event, Kind, Write};
use super::schedule::{FaultKind, Op, OpKind, Schedule, Target, TransferTo};
use super::torn_store::{tear, TornStore};
use super::udp::{NetCtl, SimUdp};

/// The UDP port every node listens on (each host has its own address).
const PORT: u16 = 7000;

/// How often each node's applied history is sampled (simulated time).
const HISTORY_EVERY: Duration = Duration::from_millis(10);

/// Everything one run needs.
#[derive(Clone)]
pub struct RunConfig {
    /// The seed of everything random in the run.
    pub seed: u64,
    /// Group size.
    pub nodes: u64,
    /// Election timing.
    pub timing: Timing,
    /// How confirms are answered.
    pub read_mode: ReadMode,
    /// Nodes whose clock runs at another rate.
    pub clock_rates: BTreeMap<NodeId, f64>,
    /// The faults.
    pub schedule: Schedule,
    /// After the last heal, how long a lease may take (the liveness bound).
    pub liveness_bound: Duration,
    /// After the first lease that follows the last heal, how much longer to run.
    pub tail: Duration,
    /// Chance that a write stalls (a GC pause between confirm and write) before it
    /// reaches the resource, and how long the stall may be.
    pub stall_chance: f64,
    /// Longest writer stall.
    pub stall_max: Duration,
    /// Pause between two confirms of the workload.
    pub confirm_every: (Duration, Duration),
    /// Until this time, any other leader hands leadership to this node (the clock tests
    /// put their skewed clock on the leader this way).
    pub prefer_leader: Option<(NodeId, Duration)>,
}

/// What a run produced.
pub struct Outcome {
    /// Every recorded event, including the faults.
    pub events: Vec<Event>,
    /// The resource's accepted writes in commit order.
    pub writes: Vec<Write>,
    /// When the last fault was healed.
    pub healed_at_ns: u64,
    /// Simulated time at the end.
    pub end_ns: u64,
    /// Drivers that panicked (raft-rs asserts its invariants by panicking) or stopped
    /// because they lost entries they had acknowledged: node, time and message. Never
    /// expected: a run with any fails.
    pub panics: Vec<(NodeId, u64, String)>,
    /// The clock faults as applied (node, real start and end), for the checker.
    pub clock_faults: Vec<ClockFault>,
    /// The operator calls the ops made ("transfer", "drain", "undrain", or "skipped"
    /// when no leader was known), and whether each succeeded.
    pub op_results: Vec<(&'static str, bool)>,
    /// Peer messages the nodes refused (`tenure::peer_input`), by reason, summed over
    /// every node and incarnation. Every peer here is correct.
    pub refused: BTreeMap<&'static str, u64>,
}

/// The record all hosts write to (they all run on this thread; tasks need `Send`).
#[derive(Default)]
struct Record {
    events: Vec<Event>,
    writes: Vec<Write>,
    /// Latest view per node: (term, role, leader).
    views: BTreeMap<NodeId, (u64, Role, Option<NodeId>)>,
    incarnations: BTreeMap<NodeId, u64>,
    panics: Vec<(NodeId, u64, String)>,
    op_results: Vec<(&'static str, bool)>,
    /// Every incarnation's metrics (they outlive a crash).
    metrics: Vec<Arc<tenure::metrics::Metrics>>,
    /// Nodes whose undrain a leader applied (pending undrains are retried until then).
    undrained: BTreeSet<NodeId>,
}

type Rec = Arc<Mutex<Record>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fenced resource: a SQLite database in memory, guarded by tenure's own fence
/// (which honours the `fence-accepts-any` mutation).
struct Resource {
    conn: rusqlite::Connection,
    fence: SqliteFence,
    seq: u64,
}

impl Resource {
    fn new() -> Resource {
        let conn = rusqlite::Connection::open_in_memory().expect("in-memory SQLite");
        conn.execute_batch(
            "CREATE TABLE writes (seq INTEGER PRIMARY KEY, token INTEGER, node INTEGER)",
        )
        .expect("create table");
        let fence = SqliteFence::install(&conn, "sim").expect("install fence");
        Resource {
            conn,
            fence,
            seq: 0,
        }
    }

    /// Writes with `token`; `Ok(seq)` if accepted, `Err(highest)` if fenced off.
    fn write(&mut self, token: u64, node: NodeId) -> Result<u64, u64> {
        let seq = self.seq + 1;
        let r = self.fence.write(&mut self.conn, FencingToken(token), |tx| {
            tx.execute(
                "INSERT INTO writes (seq, token, node) VALUES (?1, ?2, ?3)",
                rusqlite::params![seq as i64, token as i64, node as i64],
            )?;
            Ok(())
        });
        match r {
            Ok(()) => {
                self.seq = seq;
                Ok(seq)
            }
            Err(tenure::FenceError::Stale { highest, .. }) => Err(highest.0),
            Err(e) => panic!("fence backend failed: {e}"),
        }
    }
}

/// The CA and node identities, made once per process (key generation is not part of
/// what a run varies).
fn identities() -> &'static Vec<TlsIdentity> {
    static IDS: OnceLock<Vec<TlsIdentity>> = OnceLock::new();
    IDS.get_or_init(|| {
        let ca = ClusterCa::generate().expect("CA");
        (1..=7)
            .map(|id| {
                let n = ca.issue_node(id).expect("node certificate");
                TlsIdentity::from_pem(ca.cert_pem(), &n.cert_pem, &n.key_pem).expect("identity")
            })
            .collect()
    })
}

fn host_name(id: NodeId) -> String {
    format!("n{id}")
}

/// turmoil gives the hosts 192.168.0.1, .2, … in the order they are registered.
fn host_ip(id: NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, id as u8))
}

/// Simulated time now, in nanoseconds (inside a host).
fn sim_ns() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_nanos() as u64)
}

/// Simulated time of a tokio instant of the current host.
fn sim_ns_of(at: Instant) -> u64 {
    let now = Instant::now();
    let base = sim_ns();
    if at >= now {
        base + (at - now).as_nanos() as u64
    } else {
        base.saturating_sub((now - at).as_nanos() as u64)
    }
}

/// How long a dying node's transport keeps sending after its store died: the fsync it
/// died in took this long, and meanwhile the transport's tasks (other threads, in a real
/// process) sent what was already queued. What the driver queued *before* the write
/// leaves; what it would have queued after does not.
const FSYNC_TIME: Duration = Duration::from_millis(2);

/// The QUIC transport, except that closing it after the store died waits
/// [`FSYNC_TIME`], and that its peers are added once the node says its first hello (or
/// sends its first message, if that comes first).
///
/// Why the peers wait: a peer's task waits for the hello on a tokio `watch` channel, and
/// a `watch` puts each waiter in one of eight wait lists drawn from tokio's thread RNG,
/// which the OS seeds (turmoil seeds it only under `--cfg tokio_unstable`): the peers'
/// tasks would wake, and dial, in a random order. Added after the hello, they dial in id
/// order, as they were added.
struct SimTransport {
    inner: Arc<QuicTransport>,
    dying: Arc<AtomicBool>,
    /// The peers to add, in id order; taken when they are added.
    peers: Mutex<Option<Vec<(NodeId, SocketAddr)>>>,
}

impl SimTransport {
    fn add_peers(&self) {
        if let Some(peers) = lock(&self.peers).take() {
            for (p, a) in peers {
                self.inner.set_peer_addr(p, a);
            }
        }
    }
}

impl tenure::transport::Transport for SimTransport {
    fn send(&self, msg: raft::eraftpb::Message) {
        self.add_peers();
        self.inner.send(msg)
    }
    fn stats(&self) -> tenure::transport::TransportStatsSnapshot {
        self.inner.stats()
    }
    fn faults(&self) -> &tenure::transport::Faults {
        self.inner.faults()
    }
    fn set_hello(&self, hello: tenure::transport::Hello) {
        tenure::transport::Transport::set_hello(&*self.inner, hello);
        self.add_peers();
    }
    fn close(&self) {
        if self.dying.load(Ordering::SeqCst) {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                tokio::time::sleep(FSYNC_TIME).await;
                tenure::transport::Transport::close(&*inner);
            });
        } else {
            tenure::transport::Transport::close(&*self.inner);
        }
    }
}

struct HostCtx {
    id: NodeId,
    cfg: RunConfig,
    disk: MemDisk,
    tear: Arc<AtomicU8>,
    rec: Rec,
    resource: Arc<Mutex<Resource>>,
    net: Arc<Mutex<NetCtl>>,
    peers: BTreeMap<NodeId, SocketAddr>,
    /// This node's clock faults.
    clock: ClockControl,
    /// Where the run loop sends this host's operator calls (set by each incarnation).
    ops: OpSender,
}

/// An operator call the run loop asks a host's node to make.
#[derive(Debug, Clone, Copy)]
enum HostOp {
    /// `transfer_leadership(to)`.
    Transfer(Option<NodeId>),
    /// `set_drained(node, drained)`.
    Drain(NodeId, bool),
}

type OpSender = Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<HostOp>>>>;

/// Hands `op` to host `id`'s node; false if the host is down.
fn send_op(senders: &BTreeMap<NodeId, OpSender>, id: NodeId, op: HostOp) -> bool {
    senders
        .get(&id)
        .and_then(|s| lock(s).as_ref().map(|tx| tx.send(op).is_ok()))
        .unwrap_or(false)
}

/// Makes the operator calls the run loop sends this incarnation, each in its own task,
/// and records what they returned.
fn serve_ops(ctx: &HostCtx, node: &Node) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<HostOp>();
    *lock(&ctx.ops) = Some(tx);
    let (id, node, rec) = (ctx.id, node.clone(), ctx.rec.clone());
    tokio::spawn(async move {
        while let Some(op) = rx.recv().await {
            let (node, rec) = (node.clone(), rec.clone());
            tokio::spawn(async move {
                let (what, note, ok) = match op {
                    HostOp::Transfer(to) => {
                        let r = node.transfer_leadership(to).await;
                        ("transfer", format!("transfer to {to:?}: {r:?}"), r.is_ok())
                    }
                    HostOp::Drain(x, drained) => {
                        let what = if drained { "drain" } else { "undrain" };
                        let r = node.set_drained(x, drained).await;
                        let said = r.as_ref().map_or_else(|e| e.to_string(), |_| "ok".into());
                        (what, format!("{what} n{x}: {said}"), r.is_ok())
                    }
                };
                let mut r = lock(&rec);
                if let (HostOp::Drain(x, false), true) = (op, ok) {
                    r.undrained.insert(x);
                }
                r.op_results.push((what, ok));
                let e = Event::new(id, sim_ns(), Kind::Other("op_result".into())).note(note);
                r.events.push(e);
            });
        }
    });
}

/// The software of one host: a node and its workload, until the host crashes.
async fn host(ctx: Arc<HostCtx>) -> turmoil::Result {
    let id = ctx.id;
    let inc = {
        let mut r = lock(&ctx.rec);
        let inc = r.incarnations.entry(id).or_insert(0);
        *inc += 1;
        let inc = *inc;
        r.events
            .push(Event::new(id, sim_ns(), Kind::Started).note(format!("incarnation {inc}")));
        inc
    };
    let host_seed = ctx.cfg.seed ^ (id << 40) ^ (inc << 52);
    let mut rng = StdRng::seed_from_u64(host_seed);
    // Start the node somewhere inside its first tick, so the hosts' tickers are not in
    // lockstep (real processes never are).
    let offset = rng.gen_range(0..ctx.cfg.timing.tick.as_micros() as u64);
    tokio::time::sleep(Duration::from_micros(offset)).await;

    let addr = ctx.peers[&id];
    let socket = SimUdp::bind(
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT),
        addr,
        ctx.net.clone(),
    )
    .await?;
    let mut qc = QuicConfig::new(
        id,
        addr,
        HashMap::new(),
        identities()[id as usize - 1].clone(),
    );
    // LAN-like QUIC settings so that a link that was cut is noticed within a few
    // election timeouts (the defaults are 1 s / 5 s, for real networks).
    qc.keep_alive = Duration::from_millis(100);
    qc.idle_timeout = Duration::from_millis(500);
    // The transport draws its reconnect jitter from the OS-seeded thread RNG; a backoff
    // of 1 µs leaves it nothing to draw (see the determinism notes in tests/sim.rs).
    qc.backoff_min = Duration::from_micros(1);
    qc.backoff_max = Duration::from_micros(1);
    // quinn's per-connection randomness and the connection ids, from the seed.
    qc.rng_seed = Some(host_seed ^ 0x0091_c5eed);
    // As `Node::start` does: connect once the node has said what its store holds.
    qc.hello = None;
    let (transport, inbound) =
        QuicTransport::start_on_socket(qc, socket, Arc::new(quinn::TokioRuntime))?;
    // Peers in id order (a HashMap in the config would start their tasks in a random
    // order, and the order of tasks is the order of packets), added with the first hello
    // (see `SimTransport`).
    let peers: Vec<(NodeId, SocketAddr)> = ctx
        .peers
        .iter()
        .filter(|(p, _)| **p != id)
        .map(|(p, a)| (*p, *a))
        .collect();
    // Every start founds the group explicitly, as a worker's unit file would: a restart
    // on a disk that holds the group ignores it.
    let group = tenure::GroupId::from_u128(u128::from(ctx.cfg.seed) | 1 << 64).expect("not 0");
    let mut config = Config::builder(id)
        .peers(ctx.peers.clone())
        .timing(ctx.cfg.timing)
        .read_mode(ctx.cfg.read_mode)
        .found(group)
        .build();
    if let Some(rate) = ctx.cfg.clock_rates.get(&id) {
        config.clock_rate = *rate;
    }
    config.clock_control = Some(ctx.clock.clone());
    // raft-rs's election timeouts, from the seed.
    config.election_seed = Some(host_seed ^ 0xe1ec);
    let dying = Arc::new(AtomicBool::new(false));
    // The node's store can be told to die in the middle of its next hard-state write, or
    // of its next write of a leadership record.
    let store = TornStore {
        inner: MemStore::open(ctx.disk.clone()),
        tear: ctx.tear.clone(),
        died: dying.clone(),
    };
    let transport = SimTransport {
        inner: Arc::new(transport),
        dying,
        peers: Mutex::new(Some(peers)),
    };
    let node = Node::start_with(config, store, Arc::new(transport), inbound).await?;

    // leader_changed, as the worker prints it.
    let mut watch = node.watch();
    let rec = ctx.rec.clone();
    tokio::spawn(async move {
        let mut last = None;
        loop {
            let l = watch.borrow_and_update().clone();
            if l.role != Role::Stopped && last != Some((l.term, l.leader, l.role)) {
                last = Some((l.term, l.leader, l.role));
                let mut r = lock(&rec);
                r.views.insert(id, (l.term, l.role, l.leader));
                r.events.push(Event::term_changed(
                    id,
                    sim_ns(),
                    l.term,
                    l.leader,
                    l.role.as_str(),
                ));
            }
            if watch.changed().await.is_err() {
                break;
            }
        }
    });

    // The applied leadership history, for rule (f): sampled, recorded when it changed.
    // A crash stops the sampler with the host, so its last sample stands for what the
    // node had applied when it died (up to one period old).
    let n = node.clone();
    let rec = ctx.rec.clone();
    tokio::spawn(async move {
        let mut last = None;
        while let Ok(h) = n.history().await {
            let records: Vec<(u64, u64)> = h.iter().map(|r| (r.term, r.leader)).collect();
            if last.as_ref() != Some(&records) {
                lock(&rec)
                    .events
                    .push(Event::history(id, sim_ns(), records.clone()));
                last = Some(records);
            }
            tokio::time::sleep(HISTORY_EVERY).await;
        }
    });

    serve_ops(&ctx, &node);
    lock(&ctx.rec).metrics.push(node.metrics());

    workload(ctx.clone(), node.clone(), rng).await;
    // The node stopped: it died at a torn write (the host restarts when the fault ends).
    if let Err(e) = node.join().await {
        let mut r = lock(&ctx.rec);
        // A panic, or a node that finds it lost what it acknowledged: never expected.
        let lost = matches!(e.cause, tenure::StopCause::LostAcknowledgedData { .. });
        if e.reason.contains("panicked") || lost {
            r.panics.push((id, sim_ns(), e.reason.clone()));
        }
        r.events
            .push(Event::new(id, sim_ns(), Kind::Crashed).note(e.reason));
    }
    Ok(())
}

/// Acquire, confirm, write with the token; forever.
async fn workload(ctx: Arc<HostCtx>, node: Node, mut rng: StdRng) {
    let id = ctx.id;
    let ev = |e: Event| lock(&ctx.rec).events.push(e);
    while let Ok(lease) = node.lease().await {
        let token = lease.token().0;
        ev(Event::acquired(
            id,
            sim_ns(),
            token,
            sim_ns_of(lease.valid_until()),
        ));
        let hand_over = ctx.cfg.prefer_leader.filter(|(p, until)| {
            *p != id && turmoil::sim_elapsed().is_some_and(|now| now < *until)
        });
        // The loss is recorded by its own task, the moment it happens.
        let watcher = lease.clone();
        let rec = ctx.rec.clone();
        if let Some((to, _)) = hand_over {
            let _ = node.transfer_leadership(Some(to)).await;
        }
        tokio::spawn(async move {
            let reason = watcher.lost().await;
            let now = sim_ns();
            // In real time, as the node knew it when it revoked the lease (its clock may
            // have stepped or stalled since the lease's end was last reported).
            let ended = watcher.ended_at().map_or(now, |at| now.min(sim_ns_of(at)));
            lock(&rec)
                .events
                .push(Event::lost(id, now, token, ended, reason.as_str()));
        });
        loop {
            let (lo, hi) = ctx.cfg.confirm_every;
            let pause = rng.gen_range(lo..=hi);
            tokio::select! {
                biased;
                _ = lease.lost() => break,
                _ = tokio::time::sleep(pause) => {}
            }
            let began = sim_ns();
            let Ok(tok) = lease.confirm().await else {
                break;
            };
            ev(Event::confirmed(
                id,
                began,
                sim_ns(),
                tok.0,
                sim_ns_of(lease.valid_until()),
            ));
            if rng.gen_bool(ctx.cfg.stall_chance) {
                // A stall between the confirm and the write: the write reaches the
                // resource late, maybe after a new leader wrote. Only the fence stops it.
                let max = ctx.cfg.stall_max.as_millis() as u64;
                tokio::time::sleep(Duration::from_millis(rng.gen_range(1..=max))).await;
            }
            let r = lock(&ctx.resource).write(tok.0, id);
            let now = sim_ns();
            match r {
                Ok(seq) => {
                    let mut rec = lock(&ctx.rec);
                    rec.writes.push(Write {
                        seq,
                        token: tok.0,
                        node: id,
                        at_ns: Some(now),
                    });
                    let mut e = Event::new(id, now, Kind::Write).term(tok.0);
                    e.note = format!("seq {seq}");
                    rec.events.push(e);
                }
                Err(highest) => {
                    let mut e = Event::new(id, now, Kind::FenceRejected).term(tok.0);
                    e.highest = Some(highest);
                    ev(e);
                }
            }
        }
    }
}

/// The desired state of the network, recomputed from the active faults.
#[derive(Default)]
struct Active {
    /// Directed links cut: (from, to) → count of faults cutting it.
    cut: BTreeMap<(NodeId, NodeId), u32>,
    /// Nodes whose links are held (a pause).
    held: BTreeMap<NodeId, u32>,
    /// Loss per directed link (max of the active faults).
    loss: BTreeMap<(NodeId, NodeId), Vec<f64>>,
    /// Extra latency per link.
    delay: BTreeMap<(NodeId, NodeId), Vec<Duration>>,
    /// Crash count per node.
    crashed: BTreeMap<NodeId, u32>,
    /// What was last pushed to turmoil per link (a < b): only changes are pushed, so
    /// held messages stay held until their pause ends.
    applied: BTreeMap<(NodeId, NodeId), LinkState>,
}

#[derive(Clone, Copy, PartialEq, Default)]
struct LinkState {
    cut_ab: bool,
    cut_ba: bool,
    held: bool,
    latency: Duration,
}

/// Runs one simulation to the end and returns what happened.
#[allow(dead_code)] // the clock tests' entry; the seeded runs add ops
pub fn run(cfg: &RunConfig) -> Outcome {
    run_with_ops(cfg, &[])
}

/// [`run`], with operator ops (transfers, drains) among the faults.
pub fn run_with_ops(cfg: &RunConfig, ops: &[Op]) -> Outcome {
    let n = cfg.nodes;
    let ids: Vec<NodeId> = (1..=n).collect();
    let base_latency = Duration::from_millis(2);
    let mut sim = turmoil::Builder::new()
        .tick_duration(Duration::from_micros(
            std::env::var("SIM_TICK_US")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1000),
        ))
        .simulation_duration(Duration::from_secs(3600))
        .min_message_latency(Duration::from_micros(100))
        .max_message_latency(base_latency)
        .rng_seed(cfg.seed)
        .build();
    let rec: Rec = Arc::default();
    let resource = Arc::new(Mutex::new(Resource::new()));
    let net = Arc::new(Mutex::new(NetCtl::new(cfg.seed)));
    let peers: BTreeMap<NodeId, SocketAddr> = ids
        .iter()
        .map(|id| (*id, SocketAddr::new(host_ip(*id), PORT)))
        .collect();
    let tears: BTreeMap<NodeId, Arc<AtomicU8>> =
        ids.iter().map(|id| (*id, Arc::default())).collect();
    let clocks: BTreeMap<NodeId, ClockControl> =
        ids.iter().map(|id| (*id, ClockControl::new())).collect();
    let mut clock_faults: Vec<ClockFault> = Vec::new();
    let op_senders: BTreeMap<NodeId, OpSender> =
        ids.iter().map(|id| (*id, Arc::default())).collect();
    for id in &ids {
        let ctx = Arc::new(HostCtx {
            id: *id,
            cfg: cfg.clone(),
            disk: MemDisk::for_node(*id),
            tear: tears[id].clone(),
            rec: rec.clone(),
            resource: resource.clone(),
            net: net.clone(),
            peers: peers.clone(),
            clock: clocks[id].clone(),
            ops: op_senders[id].clone(),
        });
        sim.host(host_name(*id), move || host(ctx.clone()));
        assert_eq!(sim.lookup(host_name(*id)), host_ip(*id), "host address");
    }

    // Fault starts and ends, in time order.
    let mut actions: Vec<(Duration, bool, usize)> = Vec::new();
    for (i, f) in cfg.schedule.faults.iter().enumerate() {
        actions.push((f.at, true, i));
        actions.push((f.at + f.duration, false, i));
    }
    actions.sort_by_key(|(t, start, i)| (*t, !*start, *i));
    let healed_at = cfg.schedule.heal_at;
    let mut resolved: Vec<Vec<NodeId>> = vec![Vec::new(); cfg.schedule.faults.len()];
    let mut active = Active::default();
    let mut next = 0;
    let mut stop_at = healed_at + cfg.liveness_bound;
    let mut recovered = false;
    let mut opr = OpRunner::new(ops);
    loop {
        let now = sim.elapsed();
        while next < actions.len() && actions[next].0 <= now {
            let (_, start, i) = actions[next];
            next += 1;
            let fault = &cfg.schedule.faults[i];
            if start {
                let leader = current_leader(&rec, &active);
                resolved[i] = fault.kind.nodes(&ids, leader);
            }
            let note = fault.kind.describe(&resolved[i], start);
            let kind = if start { Kind::Fault } else { Kind::Heal };
            lock(&rec)
                .events
                .push(Event::new(0, now.as_nanos() as u64, kind).note(note));
            if let FaultKind::Crash(_)
            | FaultKind::CrashMidWrite(_)
            | FaultKind::CrashMidAppend(_) = fault.kind
            {
                for id in &resolved[i] {
                    let crash = matches!(fault.kind, FaultKind::Crash(_)) == start;
                    if crash {
                        // Down from now (or, mid-write, from the end at the latest).
                        lock(&rec).events.push(Event::new(
                            *id,
                            now.as_nanos() as u64,
                            Kind::Crashed,
                        ));
                    }
                    let armed = match fault.kind {
                        FaultKind::CrashMidWrite(_) if start => tear::HARD_STATE,
                        FaultKind::CrashMidAppend(_) if start => tear::RECORD,
                        _ => tear::NONE,
                    };
                    tears[id].store(armed, Ordering::SeqCst);
                }
            }
            if fault.kind.is_clock() {
                apply_clock(
                    &clocks,
                    &mut clock_faults,
                    &fault.kind,
                    &resolved[i],
                    start,
                    now,
                );
                continue;
            }
            apply(
                &mut sim,
                &net,
                &ids,
                &mut active,
                &fault.kind,
                &resolved[i],
                start,
                base_latency,
            );
        }
        for (kind, start) in opr.step(now, &rec, &active, &resolved, &ids, &op_senders) {
            let nodes = kind.nodes(&ids, None);
            let note = kind.describe(&nodes, start);
            let e = Event::new(
                0,
                now.as_nanos() as u64,
                if start { Kind::Fault } else { Kind::Heal },
            );
            lock(&rec).events.push(e.note(note));
            apply(
                &mut sim,
                &net,
                &ids,
                &mut active,
                &kind,
                &nodes,
                start,
                base_latency,
            );
        }
        if now >= stop_at {
            break;
        }
        if !recovered && now >= healed_at {
            let h = healed_at.as_nanos() as u64;
            let first = lock(&rec)
                .events
                .iter()
                .filter(|e| {
                    e.at_ns >= h && matches!(e.kind, Kind::LeaseAcquired | Kind::LeaseConfirmed)
                })
                .map(|e| e.at_ns)
                .min();
            if let Some(t) = first {
                recovered = true;
                stop_at = stop_at.min(Duration::from_nanos(t) + cfg.tail);
            }
        }
        if let Err(e) = sim.step() {
            panic!("simulation step failed at {now:?}: {e}");
        }
    }
    let end_ns = sim.elapsed().as_nanos() as u64;
    drop(sim);
    let mut r = lock(&rec);
    Outcome {
        events: std::mem::take(&mut r.events),
        writes: std::mem::take(&mut r.writes),
        healed_at_ns: healed_at.as_nanos() as u64,
        end_ns,
        panics: std::mem::take(&mut r.panics),
        clock_faults,
        op_results: std::mem::take(&mut r.op_results),
        refused: tenure::peer_input::Refusal::ALL
            .iter()
            .map(|reason| {
                let n = r.metrics.iter().map(|m| m.peer_refused(*reason)).sum();
                (reason.as_str(), n)
            })
            .filter(|(_, n)| *n > 0)
            .collect(),
    }
}

/// Starts or ends a clock fault on `nodes`, and records it for the checker (a stall's
/// end is filled in when it ends).
fn apply_clock(
    clocks: &BTreeMap<NodeId, ClockControl>,
    record: &mut Vec<ClockFault>,
    kind: &FaultKind,
    nodes: &[NodeId],
    start: bool,
    now: Duration,
) {
    let now_ns = now.as_nanos() as u64;
    for id in nodes {
        let clock = &clocks[id];
        match kind {
            FaultKind::ClockJump { by, .. } if start => {
                clock.jump(*by);
                record.push(ClockFault {
                    node: *id,
                    from_ns: now_ns,
                    to_ns: now_ns,
                    kind: ClockFaultKind::Jump,
                });
            }
            FaultKind::ClockStall {
                counted_by_boottime,
                ..
            } => {
                let kind = ClockFaultKind::Stall {
                    counted_by_boottime: *counted_by_boottime,
                };
                if start {
                    clock.stall(*counted_by_boottime);
                    record.push(ClockFault {
                        node: *id,
                        from_ns: now_ns,
                        to_ns: u64::MAX,
                        kind,
                    });
                } else {
                    clock.resume(*counted_by_boottime);
                    if let Some(f) = record
                        .iter_mut()
                        .find(|f| f.node == *id && f.kind == kind && f.to_ns == u64::MAX)
                    {
                        f.to_ns = now_ns;
                    }
                }
            }
            _ => {}
        }
    }
}

/// Carries out the operator ops of a run as simulated time passes: at most one drain at
/// a time, and an undrain retried every 100 ms until a leader has applied it (a drained
/// node never campaigns, so a lost undrain could leave the group short of candidates).
/// The network side of a stalled handover (the pause, the cut link) is handed back to
/// the run loop to apply like a fault.
struct OpRunner<'a> {
    ops: &'a [Op],
    /// Phases in time order: (time, phase, op); phase 0 starts an op, 1 is a stalled
    /// handover's transfer, 2 wakes its target, 3 ends a drain or a stalled handover's
    /// cut.
    actions: Vec<(Duration, u8, usize)>,
    next: usize,
    /// The drain in force: (op, node).
    drain: Option<(usize, NodeId)>,
    undrain: BTreeSet<NodeId>,
    undrain_tried: Option<Duration>,
    /// Per stalled handover: (target, old leader), once started.
    stalled: BTreeMap<usize, (NodeId, NodeId)>,
}

impl<'a> OpRunner<'a> {
    fn new(ops: &'a [Op]) -> OpRunner<'a> {
        let mut actions: Vec<(Duration, u8, usize)> = Vec::new();
        for (i, o) in ops.iter().enumerate() {
            actions.push((o.at, 0, i));
            match o.kind {
                OpKind::Drain(_) => actions.push((o.at + o.duration, 3, i)),
                OpKind::StalledHandover { after, stall, .. } => {
                    let stall = stall.min(o.duration);
                    actions.push((o.at + after.min(stall), 1, i));
                    actions.push((o.at + stall, 2, i));
                    actions.push((o.at + o.duration, 3, i));
                }
                OpKind::Transfer { .. } => {}
            }
        }
        actions.sort_by_key(|(t, phase, i)| (*t, *phase, *i));
        OpRunner {
            ops,
            actions,
            next: 0,
            drain: None,
            undrain: BTreeSet::new(),
            undrain_tried: None,
            stalled: BTreeMap::new(),
        }
    }

    /// Runs what is due at `now`; returns the network changes to apply (fault kinds,
    /// start or end).
    fn step(
        &mut self,
        now: Duration,
        rec: &Rec,
        active: &Active,
        resolved: &[Vec<NodeId>],
        ids: &[NodeId],
        senders: &BTreeMap<NodeId, OpSender>,
    ) -> Vec<(FaultKind, bool)> {
        let mut network = Vec::new();
        let note = |what: String| {
            let e = Event::new(0, now.as_nanos() as u64, Kind::Other("op".into())).note(what);
            lock(rec).events.push(e);
        };
        let other = |n: NodeId| {
            let at = ids.iter().position(|x| *x == n).unwrap_or(0);
            ids[(at + 1) % ids.len()]
        };
        while self.next < self.actions.len() && self.actions[self.next].0 <= now {
            let (_, phase, i) = self.actions[self.next];
            self.next += 1;
            let leader = current_leader(rec, active);
            match (&self.ops[i].kind, phase) {
                (OpKind::StalledHandover { to, .. }, 0) => {
                    let Some(l) = leader else {
                        note("stalled handover: no leader known; skipped".into());
                        lock(rec).op_results.push(("skipped", false));
                        continue;
                    };
                    let c = if *to == l { other(*to) } else { *to };
                    note(format!("n{c} stalls"));
                    self.stalled.insert(i, (c, l));
                    network.push((FaultKind::Pause(Target::Node(c)), true));
                }
                (OpKind::StalledHandover { .. }, 1) => {
                    if let Some((c, l)) = self.stalled.get(&i).copied() {
                        note(format!("n{l} hands leadership over to the stalled n{c}"));
                        if !send_op(senders, l, HostOp::Transfer(Some(c))) {
                            lock(rec).op_results.push(("skipped", false));
                        }
                    }
                }
                (OpKind::StalledHandover { .. }, 2) => {
                    if let Some((c, l)) = self.stalled.get(&i).copied() {
                        note(format!("n{c} wakes; its packets to n{l} are lost"));
                        network.push((FaultKind::CutLink { from: c, to: l }, true));
                        network.push((FaultKind::Pause(Target::Node(c)), false));
                    }
                }
                (OpKind::StalledHandover { .. }, _) => {
                    if let Some((c, l)) = self.stalled.remove(&i) {
                        network.push((FaultKind::CutLink { from: c, to: l }, false));
                    }
                }
                (OpKind::Transfer { to }, _) => {
                    let Some(l) = leader else {
                        note("transfer: no leader known; skipped".into());
                        lock(rec).op_results.push(("skipped", false));
                        continue;
                    };
                    let (to, why) = match to {
                        TransferTo::Best => (None, String::new()),
                        TransferTo::Node(n) => {
                            (Some(if *n == l { other(*n) } else { *n }), String::new())
                        }
                        TransferTo::VictimOf(f) => match resolved[*f].first() {
                            Some(v) if *v != l => (Some(*v), format!(" (stalled by fault {f})")),
                            _ => (None, String::new()),
                        },
                    };
                    let shown = to.map_or("the best follower".into(), |t| format!("n{t}"));
                    note(format!("n{l} hands leadership over to {shown}{why}"));
                    if !send_op(senders, l, HostOp::Transfer(to)) {
                        lock(rec).op_results.push(("skipped", false));
                    }
                }
                (OpKind::Drain(target), 0) => {
                    let Some(l) = leader else {
                        note("drain: no leader known; skipped".into());
                        lock(rec).op_results.push(("skipped", false));
                        continue;
                    };
                    if self.drain.is_some() || !self.undrain.is_empty() {
                        note("drain: another drain is in force; skipped".into());
                        continue;
                    }
                    let x = match *target {
                        Target::Node(n) => n,
                        Target::Leader { .. } => l,
                    };
                    lock(rec).undrained.remove(&x);
                    note(format!("n{l} drains n{x}"));
                    self.drain = Some((i, x));
                    send_op(senders, l, HostOp::Drain(x, true));
                }
                (OpKind::Drain(_), _) => {
                    if let Some((op, x)) = self.drain {
                        if op == i {
                            self.drain = None;
                            note(format!("undrain n{x}"));
                            self.undrain.insert(x);
                            self.undrain_tried = None;
                        }
                    }
                }
            }
        }
        if self.undrain.is_empty() {
            return network;
        }
        let done = lock(rec).undrained.clone();
        self.undrain.retain(|x| !done.contains(x));
        let due = self
            .undrain_tried
            .is_none_or(|t| now >= t + Duration::from_millis(100));
        if due && !self.undrain.is_empty() {
            self.undrain_tried = Some(now);
            if let Some(l) = current_leader(rec, active) {
                for x in &self.undrain {
                    send_op(senders, l, HostOp::Drain(*x, false));
                }
            }
        }
        network
    }
}

/// The node that leads in the highest term, as the running nodes last reported.
fn current_leader(rec: &Rec, active: &Active) -> Option<NodeId> {
    let r = lock(rec);
    r.views
        .iter()
        .filter(|(id, (_, role, _))| {
            *role == Role::Leader && active.crashed.get(*id).copied().unwrap_or(0) == 0
        })
        .max_by_key(|(_, (term, _, _))| *term)
        .map(|(id, _)| *id)
}

#[allow(clippy::too_many_arguments)]
fn apply(
    sim: &mut turmoil::Sim<'_>,
    net: &Arc<Mutex<NetCtl>>,
    ids: &[NodeId],
    active: &mut Active,
    kind: &FaultKind,
    nodes: &[NodeId],
    start: bool,
    base_latency: Duration,
) {
    let bump = |m: &mut BTreeMap<(NodeId, NodeId), u32>, k: (NodeId, NodeId)| {
        let c = m.entry(k).or_insert(0);
        if start {
            *c += 1;
        } else {
            *c = c.saturating_sub(1);
        }
    };
    match kind {
        FaultKind::CrashMidWrite(_) | FaultKind::CrashMidAppend(_) => {
            // Armed at the start (the store dies at its next hard-state write); the host
            // is crashed, if still up, and restarted at the end.
            if !start {
                for id in nodes {
                    if active.crashed.get(id).copied().unwrap_or(0) == 0 {
                        sim.crash(host_name(*id));
                        sim.bounce(host_name(*id));
                    }
                }
            }
            return;
        }
        FaultKind::Crash(_) => {
            for id in nodes {
                let c = active.crashed.entry(*id).or_insert(0);
                if start {
                    *c += 1;
                    if *c == 1 {
                        sim.crash(host_name(*id));
                    }
                } else {
                    *c = c.saturating_sub(1);
                    if *c == 0 {
                        sim.bounce(host_name(*id));
                    }
                }
            }
            return;
        }
        FaultKind::Pause(_) => {
            for id in nodes {
                let c = active.held.entry(*id).or_insert(0);
                if start {
                    *c += 1;
                } else {
                    *c = c.saturating_sub(1);
                }
            }
        }
        FaultKind::Loss { rate, .. } => {
            for a in nodes {
                for b in ids.iter().filter(|b| *b != a) {
                    for k in [(*a, *b), (*b, *a)] {
                        let v = active.loss.entry(k).or_default();
                        if start {
                            v.push(*rate);
                        } else if let Some(p) = v.iter().position(|x| x == rate) {
                            v.remove(p);
                        }
                    }
                }
            }
        }
        FaultKind::Delay { max, .. } => {
            for a in nodes {
                for b in ids.iter().filter(|b| *b != a) {
                    let k = ((*a).min(*b), (*a).max(*b));
                    let v = active.delay.entry(k).or_default();
                    if start {
                        v.push(*max);
                    } else if let Some(p) = v.iter().position(|x| x == max) {
                        v.remove(p);
                    }
                }
            }
        }
        _ => {
            for (from, to) in kind.cut_links(ids, nodes) {
                bump(&mut active.cut, (from, to));
            }
        }
    }
    // Push the whole desired state to turmoil and the socket adapter.
    {
        let mut n = lock(net);
        n.loss.clear();
        for ((a, b), v) in &active.loss {
            if let Some(p) = v.iter().copied().reduce(f64::max) {
                n.loss.insert((host_ip(*a), host_ip(*b)), p);
            }
        }
    }
    for (i, a) in ids.iter().enumerate() {
        for b in &ids[i + 1..] {
            let (ha, hb) = (host_name(*a), host_name(*b));
            let want = LinkState {
                cut_ab: active.cut.get(&(*a, *b)).copied().unwrap_or(0) > 0,
                cut_ba: active.cut.get(&(*b, *a)).copied().unwrap_or(0) > 0,
                held: active.held.get(a).copied().unwrap_or(0) > 0
                    || active.held.get(b).copied().unwrap_or(0) > 0,
                latency: active
                    .delay
                    .get(&(*a, *b))
                    .and_then(|v| v.iter().copied().max())
                    .unwrap_or(base_latency),
            };
            let had = active.applied.get(&(*a, *b)).copied().unwrap_or(LinkState {
                latency: base_latency,
                ..LinkState::default()
            });
            if want == had {
                continue;
            }
            active.applied.insert((*a, *b), want);
            if (want.cut_ab, want.cut_ba, want.held) != (had.cut_ab, had.cut_ba, had.held) {
                // Back to healthy (delivering anything held), then the desired state.
                sim.release(ha.as_str(), hb.as_str());
                sim.repair(ha.as_str(), hb.as_str());
                if want.cut_ab && want.cut_ba {
                    sim.partition(ha.as_str(), hb.as_str());
                } else if want.cut_ab {
                    sim.partition_oneway(ha.as_str(), hb.as_str());
                } else if want.cut_ba {
                    sim.partition_oneway(hb.as_str(), ha.as_str());
                } else if want.held {
                    sim.hold(ha.as_str(), hb.as_str());
                }
            }
            if want.latency != had.latency {
                sim.set_link_max_message_latency(ha.as_str(), hb.as_str(), want.latency);
            }
        }
    }
}
