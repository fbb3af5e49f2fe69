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
//!
//! Operator ops ([`Op`]) run among the faults (`OpRunner`): transfers and drains are
//! calls to whoever leads; a membership change is a sequence of calls (remove, add a
//! learner, promote or replace, then a look at the leader's membership), each asked
//! again of whoever leads until it is carried out. A spare is a new turmoil host (ids
//! after the first members, registered in id order, so its address is
//! `192.168.0.<id>`), started with `Config::join` on an empty disk once the group knows it;
//! partitions in force cut it off as they cut off "the rest". A machine the operator
//! takes out (the removed voter of a rejoin at once, a replaced one a little after the
//! change) is retired: its host never runs again, also when a fault would restart it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::clock::ClockControl;
use tenure::election::election_of_term;
use tenure::fence::SqliteFence;
use tenure::storage::{MemDisk, MemStore, RaftStore, ReadyWrite, StorageError};
use tenure::transport::quic::{QuicConfig, QuicTransport};
use tenure::transport::tls::TlsIdentity;
use tenure::{
    Config, ElectionError, ElectionOptions, FencingToken, LostReason, Membership, MembershipError,
    Node, NodeId, ReadMode, Role, Timing,
};
use tokio::time::Instant;

use super::checker::{ClockFault, ClockFaultKind, Event, Kind, Write};
use super::schedule::{FaultKind, Op, OpFaults, OpKind, Schedule, Target, TransferTo, Voter};

/// Named elections in a run (`docs/design.md`, section 11): created through the root
/// leader at the start, each with a workload of its own on every node.
#[derive(Clone, Debug)]
pub struct NamedConfig {
    /// Names created at the start (each asked of the root leader until created).
    pub initial: Vec<&'static str>,
    /// Pause between two confirms of a named election's workload (longer than the
    /// root's: there are many of them).
    pub confirm_every: (Duration, Duration),
    /// How often each node samples each named election's applied history (rule (f)).
    pub history_every: Duration,
    /// After the last heal (or the election's creation, if later), how long a live named
    /// election may take to a lease.
    pub liveness_bound: Duration,
}

/// How often each node reads its catalog (and starts the workload of a new election).
const CATALOG_EVERY: Duration = Duration::from_millis(50);
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
    /// The operator calls the ops made ("transfer", "drain", "undrain", "add learner",
    /// "promote", "remove", "replace", "status"), each with what it returned: "ok", the
    /// error's variant name, or "no leader known" when it was skipped; and each
    /// membership op's end ("replace op", "rejoin op": "done" or "unfinished").
    pub op_results: Vec<(&'static str, String)>,
    /// Membership ops the group had not carried out by the end of the run (the leader's
    /// membership the one asked for), which comes `liveness_bound` after the last heal
    /// at the latest: the run fails.
    pub op_failures: Vec<String>,
    /// Peer messages the nodes refused (`tenure::peer_input`), by reason, summed over
    /// every node and incarnation. Every peer here is correct.
    pub refused: BTreeMap<&'static str, u64>,
    /// Each refusal as the refusing driver logged it: (node, time, reason, sender).
    pub refusals: Vec<(NodeId, u64, String, Option<NodeId>)>,
    /// The nodes whose membership an op changed: the voters that left, the spares.
    pub changed_members: BTreeSet<NodeId>,
    /// Each named fence's accepted writes, by election name, in its commit order.
    pub named_writes: BTreeMap<String, Vec<Write>>,
    /// The named elections live at the end whose liveness the run claims, by id, each
    /// with when its bound ([`NamedConfig::liveness_bound`]) starts: the later of the
    /// last heal and its creation.
    pub election_liveness: BTreeMap<u32, u64>,
    /// The nodes a [`FaultKind::Hostile`] made misbehave: their messages may be refused.
    pub hostile: BTreeSet<NodeId>,
    /// The most entries one peer's support book reached on any node
    /// (`Metrics::support_book_max`).
    pub book_max: u64,
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
    op_results: Vec<(&'static str, String)>,
    /// The answers to membership calls, by the tag the call was sent with.
    changes: BTreeMap<u64, Result<Membership, MembershipError>>,
    /// Refused peer messages: (node, time, reason, sender).
    refusals: Vec<(NodeId, u64, String, Option<NodeId>)>,
    /// Every incarnation's metrics (they outlive a crash).
    metrics: Vec<Arc<tenure::metrics::Metrics>>,
    /// Nodes whose undrain a leader applied (pending undrains are retried until then).
    undrained: BTreeSet<NodeId>,
    /// Each node's latest view of each named election: (term, role, leader), by name.
    named_views: BTreeMap<(NodeId, String), (u64, Role, Option<NodeId>)>,
    /// Each node's catalog as it last read it: name → id.
    catalogs: BTreeMap<NodeId, BTreeMap<String, u32>>,
    /// When some node first saw each election id in its catalog.
    first_seen: BTreeMap<u32, u64>,
    /// When `resume_election` last returned for each election (it is live from then).
    resumed: BTreeMap<u32, u64>,
    /// When a resumption was first asked, by name (any attempt may take effect, the
    /// one that answers may be a later one): rule (j) counts from there.
    resume_asked: BTreeMap<&'static str, u64>,
    /// The last lease event (acquired or confirmed) of each named election, by id.
    last_named_lease: BTreeMap<u32, u64>,
    /// The answers to catalog calls, by the tag the call was sent with.
    catalog_answers: BTreeMap<u64, CatalogAnswer>,
    /// Each named fence's accepted writes, in its commit order.
    named_writes: BTreeMap<String, Vec<Write>>,
}

/// What a catalog call (create, remove) returned, as the op runner needs it.
#[derive(Debug, Clone)]
struct CatalogAnswer {
    /// Carried out, or nothing left to do (`Exists` for a create, `NotFound` for a
    /// remove: an earlier attempt took effect, or another op did it).
    done: bool,
    /// `NotLeader`: the leader the node named, if any.
    not_leader: Option<Option<NodeId>>,
}

type Rec = Arc<Mutex<Record>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The fenced resource: a SQLite database in memory, guarded by tenure's own fence
/// (which honours the `fence-accepts-any` mutation).
struct Resource {
    conn: rusqlite::Connection,
    fence: SqliteFence,
    seq: u64,
    /// One fence per named election, keyed by its name (shared by its incarnations, as
    /// the fence docs advise), with its commit counter.
    named: BTreeMap<String, (SqliteFence, u64)>,
}

impl Resource {
    fn new() -> Resource {
        let conn = rusqlite::Connection::open_in_memory().expect("in-memory SQLite");
        conn.execute_batch(
            "CREATE TABLE writes (seq INTEGER PRIMARY KEY, token INTEGER, node INTEGER)",
        )
        .expect("create table");
        conn.execute_batch(
            "CREATE TABLE named_writes (name TEXT, seq INTEGER, token INTEGER, node INTEGER)",
        )
        .expect("create table");
        // Installed before any named one: its name cannot clash with theirs (names have no
        // '/').
        let fence = SqliteFence::install(&conn, "sim").expect("install fence");
        Resource {
            conn,
            fence,
            seq: 0,
            named: BTreeMap::new(),
        }
    }

    /// Writes with `token` through the fence of election `name`; `Ok(seq)` (its fence's
    /// commit order) if accepted, `Err(highest)` if fenced off.
    fn write_named(&mut self, name: &str, token: u64, node: NodeId) -> Result<u64, u64> {
        let conn = &mut self.conn;
        let (fence, seq) = self.named.entry(name.to_string()).or_insert_with(|| {
            let f = SqliteFence::install(conn, &format!("e/{name}")).expect("install fence");
            (f, 0)
        });
        let next = *seq + 1;
        let r = fence.write(conn, FencingToken::new(token), |tx| {
            tx.execute(
                "INSERT INTO named_writes (name, seq, token, node) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![name, next as i64, token as i64, node as i64],
            )?;
            Ok(())
        });
        match r {
            Ok(()) => {
                *seq = next;
                Ok(next)
            }
            Err(tenure::FenceError::Stale { highest, .. }) => Err(highest.term()),
            Err(e) => panic!("fence backend failed: {e}"),
        }
    }

    /// Advances election `name`'s fence to `token` (`Removed::retired_above`): what an
    /// application that wants no write of a removed incarnation does.
    fn retire(&mut self, name: &str, token: u64) {
        let conn = &mut self.conn;
        let (fence, _) = self.named.entry(name.to_string()).or_insert_with(|| {
            let f = SqliteFence::install(conn, &format!("e/{name}")).expect("install fence");
            (f, 0)
        });
        // Refused only if the fence is already above it.
        let _ = fence.write(conn, FencingToken::new(token), |_| Ok(()));
    }

    /// Writes with `token`; `Ok(seq)` if accepted, `Err(highest)` if fenced off.
    fn write(&mut self, token: u64, node: NodeId) -> Result<u64, u64> {
        let seq = self.seq + 1;
        let r = self
            .fence
            .write(&mut self.conn, FencingToken::new(token), |tx| {
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
            Err(tenure::FenceError::Stale { highest, .. }) => Err(highest.term()),
            Err(e) => panic!("fence backend failed: {e}"),
        }
    }
}

/// Keeps what a node's driver logs about each peer message it refused: the reason and the
/// sender (the metrics count only the reason). Everything else it logs is dropped.
struct RefusalDrain {
    id: NodeId,
    rec: Rec,
}

impl slog::Drain for RefusalDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(
        &self,
        record: &slog::Record<'_>,
        values: &slog::OwnedKVList,
    ) -> Result<(), slog::Never> {
        if let Some(filter) = sim_log_filter() {
            print_record(self.id, filter, record, values);
        }
        if record.msg().as_str() != Some("refused a message from a peer") {
            return Ok(());
        }
        #[derive(Default)]
        struct Kv {
            reason: String,
            from: Option<NodeId>,
        }
        impl slog::Serializer for Kv {
            fn emit_arguments(
                &mut self,
                key: slog::Key,
                val: &std::fmt::Arguments<'_>,
            ) -> slog::Result {
                if key == "reason" {
                    self.reason = val.to_string();
                }
                Ok(())
            }
            fn emit_str(&mut self, key: slog::Key, val: &str) -> slog::Result {
                if key == "reason" {
                    self.reason = val.to_string();
                }
                Ok(())
            }
            fn emit_u64(&mut self, key: slog::Key, val: u64) -> slog::Result {
                if key == "from" {
                    self.from = Some(val);
                }
                Ok(())
            }
        }
        let mut kv = Kv::default();
        let _ = slog::KV::serialize(&record.kv(), record, &mut kv);
        lock(&self.rec)
            .refusals
            .push((self.id, sim_ns(), kv.reason, kv.from));
        Ok(())
    }
}

/// `TENURE_SIM_LOG=<text>`: every driver and raft-rs log record (debug and up) whose line
/// contains `<text>` (an election's name, say; empty for all) is printed with its
/// simulated time and node, for reading a failing seed's replay.
fn sim_log_filter() -> Option<&'static str> {
    static FILTER: OnceLock<Option<String>> = OnceLock::new();
    FILTER
        .get_or_init(|| std::env::var("TENURE_SIM_LOG").ok())
        .as_deref()
}

fn print_record(id: NodeId, filter: &str, record: &slog::Record<'_>, values: &slog::OwnedKVList) {
    struct Line(String);
    impl slog::Serializer for Line {
        fn emit_arguments(
            &mut self,
            key: slog::Key,
            val: &std::fmt::Arguments<'_>,
        ) -> slog::Result {
            use std::fmt::Write as _;
            let _ = write!(self.0, " {key}={val}");
            Ok(())
        }
    }
    let mut line = Line(format!("{}", record.msg()));
    let _ = slog::KV::serialize(&record.kv(), record, &mut line);
    let _ = slog::KV::serialize(values, record, &mut line);
    if line.0.contains(filter) {
        println!(
            "+{:.3}ms n{id} {} {}",
            sim_ns() as f64 / 1e6,
            record.level().as_short_str(),
            line.0
        );
    }
}

/// The CA and node identities, made once per process and the same bytes in every
/// process ([`super::det_tls::identities`]): a handshake's bytes reach decisions.
fn identities() -> &'static Vec<TlsIdentity> {
    static IDS: OnceLock<Vec<TlsIdentity>> = OnceLock::new();
    IDS.get_or_init(|| {
        let (ca, nodes) = super::det_tls::identities(1..=MAX_ID);
        nodes
            .iter()
            .map(|(cert, key)| TlsIdentity::from_pem(&ca, cert, key).expect("identity"))
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

/// This thread's TLS configurations draw from a seed ([`super::det_tls`]) until dropped.
struct SeededTls;

impl SeededTls {
    fn install(seed: u64) -> SeededTls {
        tenure::tls::set_thread_crypto_provider(Some(super::det_tls::provider(seed)));
        SeededTls
    }
}

impl Drop for SeededTls {
    fn drop(&mut self) {
        tenure::tls::set_thread_crypto_provider(None);
    }
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

/// The node's store: a [`TornStore`] whose named elections' handles (`docs/design.md`,
/// section 11: one store, one fate) die with it. A write of the armed kind in any group,
/// or in any part of a turn's batch, is the write the process dies in: nothing of the
/// batch reaches the disk.
#[derive(Clone)]
struct SimStore(TornStore);

impl SimStore {
    fn wrap(&self, inner: MemStore) -> SimStore {
        SimStore(TornStore {
            inner,
            tear: self.0.tear.clone(),
            died: self.0.died.clone(),
            closing: self.0.closing.clone(),
        })
    }
}

impl raft::Storage for SimStore {
    fn initial_state(&self) -> raft::Result<raft::RaftState> {
        self.0.initial_state()
    }
    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: raft::GetEntriesContext,
    ) -> raft::Result<Vec<raft::eraftpb::Entry>> {
        self.0.entries(low, high, max_size, context)
    }
    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.0.term(idx)
    }
    fn first_index(&self) -> raft::Result<u64> {
        self.0.first_index()
    }
    fn last_index(&self) -> raft::Result<u64> {
        self.0.last_index()
    }
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<raft::eraftpb::Snapshot> {
        self.0.snapshot(request_index, to)
    }
}

impl RaftStore for SimStore {
    /// In memory: the driver writes in place and hears of the batch's end in its next
    /// turn (a writer thread's timing would not replay).
    fn blocks_on_io(&self) -> bool {
        self.0.blocks_on_io()
    }
    fn write(&self, write: ReadyWrite) -> Result<(), StorageError> {
        self.0.write(write)
    }
    fn compact(
        &self,
        index: u64,
        conf_state: raft::eraftpb::ConfState,
        data: Vec<u8>,
    ) -> Result<(), StorageError> {
        self.0.compact(index, conf_state, data)
    }
    fn hard_state(&self) -> raft::eraftpb::HardState {
        self.0.hard_state()
    }
    fn conf_state(&self) -> raft::eraftpb::ConfState {
        self.0.conf_state()
    }
    fn node_id(&self) -> Option<NodeId> {
        self.0.node_id()
    }
    fn election(&self, id: u32) -> Result<Option<Self>, StorageError> {
        Ok(self.0.inner.election(id)?.map(|m| self.wrap(m)))
    }
    fn election_ids(&self) -> Result<tenure::storage::ElectionIds, StorageError> {
        self.0.inner.election_ids()
    }
    fn found_election(
        &self,
        id: u32,
        term: u64,
        conf_state: raft::eraftpb::ConfState,
        data: Vec<u8>,
    ) -> Result<Self, StorageError> {
        let m = self.0.inner.found_election(id, term, conf_state, data)?;
        Ok(self.wrap(m))
    }
    fn join_election(
        &self,
        id: u32,
        initial: raft::eraftpb::ConfState,
    ) -> Result<Self, StorageError> {
        let m = self.0.inner.join_election(id, initial)?;
        Ok(self.wrap(m))
    }
    fn remove_election(&self, id: u32) -> Result<(), StorageError> {
        self.0.inner.remove_election(id)
    }
    fn write_all(parts: Vec<(Self, ReadyWrite)>) -> Result<(), StorageError> {
        let Some(first) = parts.first().map(|(s, _)| s.0.clone()) else {
            return Ok(());
        };
        let dies = parts
            .iter()
            .any(|(_, w)| match first.tear.load(Ordering::SeqCst) {
                tear::HARD_STATE => w.hard_state.is_some(),
                tear::RECORD => w.entries.iter().any(super::torn_store::is_record),
                _ => false,
            });
        if dies && first.tear.swap(tear::NONE, Ordering::SeqCst) != tear::NONE {
            first.died.store(true, Ordering::SeqCst);
            return Err(StorageError::Io {
                path: "memory disk".into(),
                detail: "the process died during this write (simulated)".into(),
            });
        }
        MemStore::write_all(parts.into_iter().map(|(s, w)| (s.0.inner, w)).collect())
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
        self.inner.send(msg);
    }
    fn send_election(&self, election: u32, msg: raft::eraftpb::Message) {
        self.add_peers();
        self.inner.send_election(election, msg);
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
    fn set_peer(&self, id: NodeId, addr: Option<tenure::PeerAddr>) {
        tenure::transport::Transport::set_peer(&*self.inner, id, addr);
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
    /// A spare host: it joins the group (`Config::join`) instead of founding it.
    join: bool,
    /// Report the applied voter configuration (runs with membership changes).
    sample_members: bool,
    /// Set when the operator took the machine out of the group for good: it never runs
    /// again (a fault that would restart it finds nothing to start).
    retired: Arc<AtomicBool>,
    /// Named elections, if the run has any.
    named: Option<NamedConfig>,
    /// Set while a [`FaultKind::Hostile`] makes this node misbehave.
    hostile: Arc<AtomicBool>,
}

/// An operator call the run loop asks a host's node to make.
#[derive(Debug, Clone, Copy)]
enum HostOp {
    /// `transfer_leadership(to)`.
    Transfer(Option<NodeId>),
    /// `set_drained(node, drained)`.
    Drain(NodeId, bool),
    /// A membership call; its answer is kept under the tag for the run loop.
    Change(u64, Change),
    /// A catalog call; its answer is kept under the tag for the run loop.
    Catalog(u64, CatalogCall),
    /// `election(name).transfer_leadership(to)`.
    ElectionTransfer(&'static str, Option<NodeId>),
}

/// A change of the catalog of named elections.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CatalogCall {
    Create(&'static str),
    Remove(&'static str),
    Suspend(&'static str),
    Resume(&'static str),
}

impl CatalogCall {
    fn name(&self) -> &'static str {
        match self {
            CatalogCall::Create(_) => "create election",
            CatalogCall::Remove(_) => "remove election",
            CatalogCall::Suspend(_) => "suspend election",
            CatalogCall::Resume(_) => "resume election",
        }
    }
}

/// A membership call (or a look at the membership: `Status`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Change {
    AddLearner(NodeId, SocketAddr),
    Promote(NodeId),
    Remove(NodeId),
    Replace(NodeId, NodeId),
    Status,
}

impl Change {
    fn name(&self) -> &'static str {
        match self {
            Change::AddLearner(..) => "add learner",
            Change::Promote(_) => "promote",
            Change::Remove(_) => "remove",
            Change::Replace(..) => "replace",
            Change::Status => "status",
        }
    }

    fn describe(&self) -> String {
        match self {
            Change::AddLearner(id, _) => format!("add n{id} as a learner"),
            Change::Promote(id) => format!("promote n{id}"),
            Change::Remove(id) => format!("remove n{id}"),
            Change::Replace(old, new) => format!("replace n{old} by n{new}"),
            Change::Status => "status".into(),
        }
    }
}

/// "ok", or the name of the error's variant (`NotLeader`, `TimedOut`, ...).
fn outcome<T, E: std::fmt::Debug>(r: &Result<T, E>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{e:?}")
            .chars()
            .take_while(|c| c.is_alphanumeric())
            .collect(),
    }
}

fn show_members(m: &Membership) -> String {
    let list = |v: &[NodeId]| {
        v.iter()
            .map(|n| format!("n{n}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut s = format!("voters {{{}}}", list(&m.voters));
    if !m.outgoing.is_empty() {
        s.push_str(&format!(" outgoing {{{}}}", list(&m.outgoing)));
    }
    if !m.learners.is_empty() {
        s.push_str(&format!(" learners {{{}}}", list(&m.learners)));
    }
    s
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
    let resource = ctx.resource.clone();
    tokio::spawn(async move {
        while let Some(op) = rx.recv().await {
            let (node, rec, resource) = (node.clone(), rec.clone(), resource.clone());
            tokio::spawn(async move {
                let (what, note, said) = match op {
                    HostOp::Transfer(to) => {
                        let r = node.transfer_leadership(to).await;
                        (
                            "transfer",
                            format!("transfer to {to:?}: {r:?}"),
                            outcome(&r),
                        )
                    }
                    HostOp::Drain(x, drained) => {
                        let what = if drained { "drain" } else { "undrain" };
                        let r = node.set_drained(x, drained).await;
                        let said = r
                            .as_ref()
                            .map_or_else(std::string::ToString::to_string, |_| "ok".into());
                        // An undrain of a node that left the group has nothing left to do.
                        let done = r.is_ok() || matches!(r, Err(MembershipError::UnknownNode(_)));
                        if !drained && done {
                            lock(&rec).undrained.insert(x);
                        }
                        (what, format!("{what} n{x}: {said}"), outcome(&r))
                    }
                    HostOp::Change(tag, change) => {
                        let r = match change {
                            Change::AddLearner(x, addr) => node.add_learner(x, addr).await,
                            Change::Promote(x) => node.promote(x).await,
                            Change::Remove(x) => node.remove_member(x).await,
                            Change::Replace(old, new) => node.replace_member(old, new).await,
                            Change::Status => node
                                .status()
                                .await
                                .map(|s| s.members)
                                .map_err(MembershipError::Stopped),
                        };
                        let said = match &r {
                            Ok(m) => format!("ok: {}", show_members(m)),
                            Err(e) => e.to_string(),
                        };
                        let out = outcome(&r);
                        lock(&rec).changes.insert(tag, r);
                        (change.name(), format!("{}: {said}", change.describe()), out)
                    }
                    HostOp::Catalog(tag, call) => {
                        let called = sim_ns();
                        let r = match call {
                            CatalogCall::Create(name) => node
                                .create_election(name, ElectionOptions::new())
                                .await
                                .map(|i| (name, i.id, None)),
                            CatalogCall::Remove(name) => node
                                .remove_election(name)
                                .await
                                .map(|r| (name, r.id, Some(r.retired_above.term()))),
                            CatalogCall::Suspend(name) => node
                                .suspend_election(name)
                                .await
                                .map(|i| (name, i.id, None)),
                            CatalogCall::Resume(name) => {
                                node.resume_election(name).await.map(|i| (name, i.id, None))
                            }
                        };
                        let now = sim_ns();
                        if let (
                            Ok((name, eid, _)),
                            CatalogCall::Suspend(_) | CatalogCall::Resume(_),
                        ) = (&r, call)
                        {
                            // Rule (j): no lease used from the suspension's return to the
                            // resumption's call; a resumed election is live from the
                            // resumption's return.
                            let (kind, at) = if matches!(call, CatalogCall::Suspend(_)) {
                                (Kind::ElectionSuspended, now)
                            } else {
                                let mut r = lock(&rec);
                                r.resumed.insert(*eid, now);
                                let asked = r.resume_asked.remove(name).unwrap_or(called);
                                (Kind::ElectionResumed, asked.min(called))
                            };
                            let e = Event::new(0, at, kind)
                                .in_election(name, *eid)
                                .note(format!("n{id}: {} {name:?} (id {eid})", call.name()));
                            lock(&rec).events.push(e);
                        } else if let Ok((name, eid, retired)) = r {
                            // As the call returns: an application that wants no write of the
                            // removed incarnation retires its fence (rule (h) then expects
                            // none).
                            if let Some(t) = retired {
                                lock(&resource).retire(name, t);
                            }
                            let kind = if retired.is_some() {
                                Kind::ElectionRemoved
                            } else {
                                Kind::ElectionCreated
                            };
                            let e = Event::new(0, now, kind)
                                .in_election(name, eid)
                                .note(format!("n{id}: {} {name:?} (id {eid})", call.name()));
                            lock(&rec).events.push(e);
                        }
                        let answer = CatalogAnswer {
                            done: matches!(
                                r,
                                Ok(_)
                                    | Err(ElectionError::Exists(_)
                                        | ElectionError::NotFound(_)
                                        | ElectionError::InvalidName { .. }
                                        | ElectionError::Full(_))
                            ),
                            not_leader: match r {
                                Err(ElectionError::NotLeader { leader_hint }) => Some(leader_hint),
                                _ => None,
                            },
                        };
                        lock(&rec).catalog_answers.insert(tag, answer);
                        let said = match &r {
                            Ok((_, eid, _)) => format!("ok: id {eid}"),
                            Err(e) => e.to_string(),
                        };
                        (call.name(), format!("{call:?}: {said}"), outcome(&r))
                    }
                    HostOp::ElectionTransfer(name, to) => {
                        let r = node.election(name).transfer_leadership(to).await;
                        (
                            "transfer an election",
                            format!("transfer {name:?} to {to:?}: {r:?}"),
                            outcome(&r),
                        )
                    }
                };
                let mut r = lock(&rec);
                r.op_results.push((what, said));
                let e = Event::new(id, sim_ns(), Kind::Other("op_result".into())).note(note);
                r.events.push(e);
            });
        }
    });
}

/// The software of one host: a node and its workload, until the host crashes.
async fn host(ctx: Arc<HostCtx>) -> turmoil::Result {
    let id = ctx.id;
    if ctx.retired.load(Ordering::SeqCst) {
        return Ok(());
    }
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
    // of 1 µs leaves it nothing to draw (see the determinism notes in tests/sim/seeded.rs).
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
    // A spare joins instead (its peers are itself and the first members, to reach).
    let builder = Config::builder(id)
        .peers(ctx.peers.clone())
        .timing(ctx.cfg.timing)
        .read_mode(ctx.cfg.read_mode);
    let mut config = if ctx.join {
        builder.join(true).group(group).build()
    } else {
        builder.found(group).build()
    };
    if let Some(rate) = ctx.cfg.clock_rates.get(&id) {
        config.hooks_mut().clock_rate = *rate;
    }
    config.hooks_mut().clock_control = Some(ctx.clock.clone());
    config.logger = Some(slog::Logger::root(
        RefusalDrain {
            id,
            rec: ctx.rec.clone(),
        },
        slog::o!(),
    ));
    // raft-rs's election timeouts, from the seed.
    config.hooks_mut().election_seed = Some(host_seed ^ 0xe1ec);
    let dying = Arc::new(AtomicBool::new(false));
    // The node's store can be told to die in the middle of its next hard-state write, or
    // of its next write of a leadership record.
    let store = SimStore(TornStore {
        inner: MemStore::open(ctx.disk.clone()),
        tear: ctx.tear.clone(),
        died: dying.clone(),
        closing: Arc::default(),
    });
    let quic = Arc::new(transport);
    let transport = SimTransport {
        inner: quic.clone(),
        dying,
        peers: Mutex::new(Some(peers)),
    };
    let node = match Node::start_with(config, store, Arc::new(transport), inbound).await {
        Ok(node) => node,
        // A node that was removed while it was down, restarted on its folder: refused, as
        // it must be.
        Err(e @ tenure::StartError::NotAMember { .. }) => {
            lock(&ctx.rec)
                .events
                .push(Event::new(id, sim_ns(), Kind::Stopped).note(format!("start refused: {e}")));
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };

    // leader_changed, as the worker prints it.
    let mut watch = node.watch();
    let rec = ctx.rec.clone();
    tokio::spawn(async move {
        let mut last = None;
        loop {
            let l = watch.borrow_and_update().clone();
            if l.role == Role::Stopped {
                // Its driver stopped (a torn write, a panic): ops go elsewhere.
                lock(&rec).views.insert(id, (l.term, l.role, l.leader));
            } else if last != Some((l.term, l.leader, l.role)) {
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
    // With it, in runs that change the membership, the voter configuration the node has
    // applied, for rule (c) (a quorum of which configuration a confirm needed; without
    // reports the checker counts the founding group).
    let n = node.clone();
    let rec = ctx.rec.clone();
    let sample_members = ctx.sample_members;
    tokio::spawn(async move {
        let mut last = None;
        let mut last_conf = None;
        while let Ok(h) = n.history().await {
            let records: Vec<(u64, u64)> = h.iter().map(|r| (r.term, r.leader)).collect();
            if last.as_ref() != Some(&records) {
                lock(&rec)
                    .events
                    .push(Event::history(id, sim_ns(), records.clone()));
                last = Some(records);
            }
            if !sample_members {
                tokio::time::sleep(HISTORY_EVERY).await;
                continue;
            }
            let Ok(s) = n.status().await else { break };
            let conf = (s.members.voters, s.members.outgoing);
            if last_conf.as_ref() != Some(&conf) {
                let e = Event::members(id, sim_ns(), conf.0.clone(), conf.1.clone());
                lock(&rec).events.push(e);
                last_conf = Some(conf);
            }
            tokio::time::sleep(HISTORY_EVERY).await;
        }
    });

    serve_ops(&ctx, &node);
    misbehave(&ctx, quic);
    lock(&ctx.rec).metrics.push(node.metrics());
    if ctx.named.is_some() {
        watch_elections(&ctx, &node);
        tokio::spawn(run_elections(ctx.clone(), node.clone(), host_seed));
    }

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

/// While a [`FaultKind::Hostile`] holds this node: every 100 ms, to each peer, what a
/// member with a valid certificate may send and a correct one never does, beside its
/// node's own stream (`docs/design.md`, section 12, "A member cannot grow a book"). In
/// one round of four, a support request of another incarnation offering 70,000
/// elections nobody runs, never confirmed (it costs the peer its book, and ends whatever
/// the node's real stream had held), and one whose sequence number is past 2^62; in the
/// other three, one of a third incarnation offering nothing, which is answered (it too
/// empties the book of the real stream, which must learn so from its next ack; a
/// dropped book would tell it anyway, so these rounds come without one); and every
/// round, term-0
/// heartbeats of the first twenty named elections (refused, they may wake nothing). The
/// checker then judges the run as any other: the node's own stream and elections go on.
fn misbehave(ctx: &Arc<HostCtx>, transport: Arc<QuicTransport>) {
    use tenure::testing::forged_support_request as forged;
    use tenure::transport::Transport;
    let (me, flag) = (ctx.id, ctx.hostile.clone());
    let peers: Vec<NodeId> = ctx.peers.keys().copied().filter(|p| *p != me).collect();
    let fake: Vec<u32> = (1_000_000..1_070_000).collect();
    tokio::spawn(async move {
        let mut seq = 0u64;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if !flag.load(Ordering::SeqCst) {
                continue;
            }
            seq += 1;
            for to in &peers {
                let forgeries = if seq % 4 == 1 {
                    vec![
                        forged(me, *to, 0x5eed_0001, seq, &fake),
                        forged(me, *to, 0x5eed_0001, u64::MAX, &[]),
                    ]
                } else {
                    vec![forged(me, *to, 0x5eed_0003, seq, &[])]
                };
                for (stream, m) in forgeries {
                    transport.send_election(stream, m);
                }
                for election in 1..=20u32 {
                    let mut m = raft::eraftpb::Message::default();
                    m.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
                    m.from = me;
                    m.to = *to;
                    transport.send_election(election, m);
                }
            }
        }
    });
}

/// Acquire, confirm, write with the token; forever.
async fn workload(ctx: Arc<HostCtx>, node: Node, mut rng: StdRng) {
    let id = ctx.id;
    let ev = |e: Event| lock(&ctx.rec).events.push(e);
    while let Ok(lease) = node.lease().await {
        let token = lease.token().term();
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
                tok.term(),
                sim_ns_of(lease.valid_until()),
            ));
            if rng.gen_bool(ctx.cfg.stall_chance) {
                // A stall between the confirm and the write: the write reaches the
                // resource late, maybe after a new leader wrote. Only the fence stops it.
                let max = ctx.cfg.stall_max.as_millis() as u64;
                tokio::time::sleep(Duration::from_millis(rng.gen_range(1..=max))).await;
            }
            let r = lock(&ctx.resource).write(tok.term(), id);
            let now = sim_ns();
            match r {
                Ok(seq) => {
                    let mut rec = lock(&ctx.rec);
                    rec.writes.push(Write {
                        seq,
                        token: tok.term(),
                        node: id,
                        at_ns: Some(now),
                    });
                    let mut e = Event::new(id, now, Kind::Write).term(tok.term());
                    e.note = format!("seq {seq}");
                    rec.events.push(e);
                }
                Err(highest) => {
                    let mut e = Event::new(id, now, Kind::FenceRejected).term(tok.term());
                    e.highest = Some(highest);
                    ev(e);
                }
            }
        }
    }
}

/// Every named election's `leader_changed`, as the node's `elections()` watch shows it,
/// with the election its term belongs to; and each node's view, for the ops.
fn watch_elections(ctx: &HostCtx, node: &Node) {
    let (id, rec) = (ctx.id, ctx.rec.clone());
    let mut watch = node.elections();
    tokio::spawn(async move {
        let mut last: BTreeMap<String, (u64, Option<NodeId>, Role)> = BTreeMap::new();
        loop {
            let view = watch.borrow_and_update().clone();
            let now = sim_ns();
            {
                let mut r = lock(&rec);
                last.retain(|name, _| {
                    let live = view.get(name).is_some_and(|l| l.role != Role::Stopped);
                    if !live {
                        r.named_views.remove(&(id, name.clone()));
                    }
                    live
                });
                for (name, l) in view.iter() {
                    let cur = (l.term, l.leader, l.role);
                    // A joiner's empty store of an election it is no member of (yet) has
                    // term 0: no term of the election at all.
                    let empty = election_of_term(l.term) == 0;
                    if l.role == Role::Stopped || empty || last.get(name) == Some(&cur) {
                        continue;
                    }
                    last.insert(name.clone(), cur);
                    r.named_views
                        .insert((id, name.clone()), (l.term, l.role, l.leader));
                    let e = Event::term_changed(id, now, l.term, l.leader, l.role.as_str())
                        .in_election(name, election_of_term(l.term));
                    r.events.push(e);
                }
            }
            if watch.changed().await.is_err() {
                break;
            }
        }
    });
}

/// Reads the node's catalog every [`CATALOG_EVERY`]: starts the workload of each election
/// it has not seen yet (each incarnation its own), and samples every election's applied
/// history every `history_every` (rule (f), per election).
async fn run_elections(ctx: Arc<HostCtx>, node: Node, host_seed: u64) {
    let Some(cfg) = ctx.named.clone() else { return };
    let id = ctx.id;
    let mut started: BTreeSet<u32> = BTreeSet::new();
    let mut histories: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    let mut sampled = Duration::ZERO;
    loop {
        let Ok(catalog) = node.list_elections().await else {
            return;
        };
        let now = sim_ns();
        {
            let mut r = lock(&ctx.rec);
            r.catalogs
                .insert(id, catalog.iter().map(|i| (i.name.clone(), i.id)).collect());
            for i in &catalog {
                r.first_seen.entry(i.id).or_insert(now);
            }
        }
        for i in &catalog {
            if started.insert(i.id) {
                let rng = StdRng::seed_from_u64(host_seed ^ (u64::from(i.id) << 8) ^ 0x0e1e);
                tokio::spawn(named_workload(
                    ctx.clone(),
                    node.clone(),
                    i.name.clone(),
                    i.id,
                    rng,
                ));
            }
        }
        sampled += CATALOG_EVERY;
        if sampled >= cfg.history_every {
            sampled = Duration::ZERO;
            histories.retain(|eid, _| catalog.iter().any(|i| i.id == *eid));
            for i in &catalog {
                let Ok(h) = node.election(&i.name).history().await else {
                    continue;
                };
                let records: Vec<(u64, u64)> = h.iter().map(|r| (r.term, r.leader)).collect();
                if histories.get(&i.id) != Some(&records) {
                    let e =
                        Event::history(id, sim_ns(), records.clone()).in_election(&i.name, i.id);
                    lock(&ctx.rec).events.push(e);
                    histories.insert(i.id, records);
                }
            }
        }
        tokio::time::sleep(CATALOG_EVERY).await;
    }
}

/// The workload of named election `name`, incarnation `eid`, on one node: wait for its
/// lease, confirm, write to its fence with the token (sometimes stalling between the
/// two), as the root's workload does; ends when the incarnation is removed.
async fn named_workload(ctx: Arc<HostCtx>, node: Node, name: String, eid: u32, mut rng: StdRng) {
    let Some(cfg) = ctx.named.clone() else { return };
    let id = ctx.id;
    let election = node.election(&name);
    let ev = |e: Event| lock(&ctx.rec).events.push(e.in_election(&name, eid));
    loop {
        let Ok(lease) = election.lease().await else {
            return;
        };
        // Which incarnation the lease is of, by the node's catalog (not by its token, so
        // that rule (g) has something to check): a lease of an incarnation this node
        // removed meanwhile was revoked before the catalog could name another one.
        let Ok(catalog) = node.list_elections().await else {
            return;
        };
        if lease.lost_reason() == Some(LostReason::Removed) {
            continue;
        }
        if catalog.iter().find(|i| i.name == name).map(|i| i.id) != Some(eid) {
            return; // a later incarnation's lease: its own workload records it
        }
        let token = lease.token().term();
        let now = sim_ns();
        ev(Event::acquired(
            id,
            now,
            token,
            sim_ns_of(lease.valid_until()),
        ));
        lock(&ctx.rec).last_named_lease.insert(eid, now);
        let watcher = lease.clone();
        let (rec, lost_name) = (ctx.rec.clone(), name.clone());
        tokio::spawn(async move {
            let reason = watcher.lost().await;
            let now = sim_ns();
            let ended = watcher.ended_at().map_or(now, |at| now.min(sim_ns_of(at)));
            let e =
                Event::lost(id, now, token, ended, reason.as_str()).in_election(&lost_name, eid);
            lock(&rec).events.push(e);
        });
        loop {
            let (lo, hi) = cfg.confirm_every;
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
            let now = sim_ns();
            ev(Event::confirmed(
                id,
                began,
                now,
                tok.term(),
                sim_ns_of(lease.valid_until()),
            ));
            lock(&ctx.rec).last_named_lease.insert(eid, now);
            if rng.gen_bool(ctx.cfg.stall_chance) {
                let max = ctx.cfg.stall_max.as_millis() as u64;
                tokio::time::sleep(Duration::from_millis(rng.gen_range(1..=max))).await;
            }
            let r = lock(&ctx.resource).write_named(&name, tok.term(), id);
            let now = sim_ns();
            match r {
                Ok(seq) => {
                    let mut rec = lock(&ctx.rec);
                    rec.named_writes
                        .entry(name.clone())
                        .or_default()
                        .push(Write {
                            seq,
                            token: tok.term(),
                            node: id,
                            at_ns: Some(now),
                        });
                    let mut e = Event::new(id, now, Kind::Write)
                        .term(tok.term())
                        .in_election(&name, eid);
                    e.note = format!("seq {seq}");
                    rec.events.push(e);
                }
                Err(highest) => {
                    let mut e = Event::new(id, now, Kind::FenceRejected).term(tok.term());
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
    /// Machines the operator took out of the group for good.
    retired: BTreeSet<NodeId>,
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
pub fn run(cfg: &RunConfig) -> Outcome {
    run_with_ops(cfg, &[])
}

/// The highest node id a run may use (the simulation has certificates for 1..=7): the
/// group's first members, then the spares membership ops bring in.
const MAX_ID: NodeId = 7;

/// [`run`], with operator ops (transfers, drains, membership changes) among the faults.
pub fn run_with_ops(cfg: &RunConfig, ops: &[Op]) -> Outcome {
    run_with_elections(cfg, ops, None)
}

/// [`run_with_ops`], with named elections (created at the start, each with its own
/// workload, and the ops' creates, removes and transfers of them).
pub fn run_with_elections(cfg: &RunConfig, ops: &[Op], named: Option<&NamedConfig>) -> Outcome {
    // The handshakes' randomness comes from the seed too (the hosts share this thread).
    let _tls = SeededTls::install(cfg.seed);
    let n = cfg.nodes;
    // Every host of the run so far: the first members, then each spare once started.
    let mut ids: Vec<NodeId> = (1..=n).collect();
    let all: Vec<NodeId> = (1..=MAX_ID).collect();
    let spares = ops.iter().filter(|o| o.kind.is_membership()).count() as u64;
    assert!(
        n + spares <= MAX_ID,
        "{spares} spares for a group of {n}: ids beyond {MAX_ID}"
    );
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
        all.iter().map(|id| (*id, Arc::default())).collect();
    let clocks: BTreeMap<NodeId, ClockControl> =
        all.iter().map(|id| (*id, ClockControl::new())).collect();
    let mut clock_faults: Vec<ClockFault> = Vec::new();
    let op_senders: BTreeMap<NodeId, OpSender> =
        all.iter().map(|id| (*id, Arc::default())).collect();
    let retired: BTreeMap<NodeId, Arc<AtomicBool>> =
        all.iter().map(|id| (*id, Arc::default())).collect();
    let hostile: BTreeMap<NodeId, Arc<AtomicBool>> =
        all.iter().map(|id| (*id, Arc::default())).collect();
    // A first member founds; a spare joins, its peers being itself and the first members.
    let host_ctx = |id: NodeId| {
        let join = id > n;
        let mut peers = peers.clone();
        if join {
            peers.insert(id, SocketAddr::new(host_ip(id), PORT));
        }
        Arc::new(HostCtx {
            id,
            cfg: cfg.clone(),
            disk: MemDisk::for_node(id),
            tear: tears[&id].clone(),
            rec: rec.clone(),
            resource: resource.clone(),
            net: net.clone(),
            peers,
            clock: clocks[&id].clone(),
            ops: op_senders[&id].clone(),
            join,
            sample_members: spares > 0,
            retired: retired[&id].clone(),
            named: named.cloned(),
            hostile: hostile[&id].clone(),
        })
    };
    for id in &ids {
        let ctx = host_ctx(*id);
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
    // The schedule's faults in force now.
    let mut in_force: BTreeSet<usize> = BTreeSet::new();
    let mut active = Active::default();
    let mut next = 0;
    let base_stop = healed_at + cfg.liveness_bound;
    let mut stop_at = base_stop;
    let mut recovered: Option<u64> = None;
    let mut named_recovered: BTreeMap<u32, u64> = BTreeMap::new();
    let initial: &[&'static str] = named.map_or(&[], |c| c.initial.as_slice());
    let mut opr = OpRunner::new(ops, n + 1, healed_at, initial);
    // TEMPORARY, until named elections follow the root's membership changes (the driver
    // does not do that yet): an election's voters are the root's members when it was
    // created, so in a run that changes the membership only elections created before the
    // first change are judged for liveness, and only while a quorum of those voters (the
    // founding group) is still running, which one change (one voter retired) keeps.
    let member_from = ops
        .iter()
        .filter(|o| o.kind.is_membership())
        .map(|o| o.at)
        .min();
    let named_bound = named.map_or(Duration::ZERO, |c| c.liveness_bound);
    let named_live = |rec: &Rec, active: &Active| -> BTreeMap<u32, u64> {
        if named.is_none() {
            return BTreeMap::new();
        }
        let founders_left = (1..=n).filter(|i| !active.retired.contains(i)).count() as u64;
        if member_from.is_some() && founders_left < n / 2 + 1 {
            return BTreeMap::new();
        }
        let leader = current_leader(rec, active);
        let r = lock(rec);
        let catalog = leader.and_then(|l| r.catalogs.get(&l)).or_else(|| {
            r.catalogs
                .values()
                .max_by_key(|c| c.values().max().copied())
        });
        let heal = healed_at.as_nanos() as u64;
        catalog
            .into_iter()
            .flat_map(|c| c.values())
            .filter_map(|eid| {
                let seen = *r.first_seen.get(eid)?;
                let before_change = member_from.is_none_or(|m| seen < m.as_nanos() as u64);
                let resumed = r.resumed.get(eid).copied().unwrap_or(0);
                before_change.then_some((*eid, heal.max(seen).max(resumed)))
            })
            .collect()
    };
    let mut hostile_nodes: BTreeSet<NodeId> = BTreeSet::new();
    loop {
        let now = sim.elapsed();
        // A fault starts or ends: the schedule's, then the ops' own, by the same code.
        macro_rules! land {
            ($kind:expr, $nodes:expr, $start:expr) => {{
                let (kind, nodes, start): (&FaultKind, &[NodeId], bool) = ($kind, $nodes, $start);
                let note = kind.describe(nodes, start);
                let what = if start { Kind::Fault } else { Kind::Heal };
                lock(&rec)
                    .events
                    .push(Event::new(0, now.as_nanos() as u64, what).note(note));
                if let FaultKind::Crash(_)
                | FaultKind::CrashMidWrite(_)
                | FaultKind::CrashMidAppend(_) = kind
                {
                    for id in nodes {
                        let crash = matches!(kind, FaultKind::Crash(_)) == start;
                        if crash && !active.retired.contains(id) {
                            // Down from now (or, mid-write, from the end at the latest).
                            lock(&rec).events.push(Event::new(
                                *id,
                                now.as_nanos() as u64,
                                Kind::Crashed,
                            ));
                        }
                        let armed = match kind {
                            FaultKind::CrashMidWrite(_) if start => tear::HARD_STATE,
                            FaultKind::CrashMidAppend(_) if start => tear::RECORD,
                            _ => tear::NONE,
                        };
                        tears[id].store(armed, Ordering::SeqCst);
                    }
                }
                if let FaultKind::Hostile(_) = kind {
                    for id in nodes {
                        hostile[id].store(start, Ordering::SeqCst);
                        hostile_nodes.insert(*id);
                    }
                } else if kind.is_clock() {
                    apply_clock(&clocks, &mut clock_faults, kind, nodes, start, now);
                } else {
                    apply(
                        &mut sim,
                        &net,
                        &ids,
                        &mut active,
                        kind,
                        nodes,
                        start,
                        base_latency,
                    );
                }
            }};
        }
        while next < actions.len() && actions[next].0 <= now {
            let (_, start, i) = actions[next];
            next += 1;
            let fault = &cfg.schedule.faults[i];
            if start {
                let leader = current_leader(&rec, &active);
                resolved[i] = fault.kind.nodes(&ids, leader);
                in_force.insert(i);
            } else {
                in_force.remove(&i);
            }
            land!(&fault.kind, &resolved[i], start);
        }
        for action in opr.step(now, &rec, &active, &resolved, &ids, &op_senders) {
            match action {
                Action::Fault(kind, start) => {
                    let nodes = kind.nodes(&ids, None);
                    land!(&kind, &nodes, start);
                }
                Action::StartSpare(id) => {
                    let ctx = host_ctx(id);
                    sim.host(host_name(id), move || host(ctx.clone()));
                    assert_eq!(sim.lookup(host_name(id)), host_ip(id), "host address");
                    // A partition in force cuts the new host off as it cuts off "the
                    // rest" (it ends with the fault, which then counts every host).
                    let before = ids.clone();
                    ids.push(id);
                    for i in &in_force {
                        let kind = &cfg.schedule.faults[*i].kind;
                        let had = kind.cut_links(&before, &resolved[*i]);
                        for link in kind.cut_links(&ids, &resolved[*i]) {
                            if !had.contains(&link) {
                                *active.cut.entry(link).or_insert(0) += 1;
                            }
                        }
                    }
                    let e = Event::new(0, now.as_nanos() as u64, Kind::Other("op".into()))
                        .note(format!("spare n{id} starts on an empty disk, joining"));
                    lock(&rec).events.push(e);
                    // Its links as the faults in force want them (a node held, cut).
                    push(&mut sim, &net, &ids, &mut active, base_latency);
                }
                Action::Retire(id) => {
                    retired[&id].store(true, Ordering::SeqCst);
                    active.retired.insert(id);
                    sim.crash(host_name(id));
                    lock(&rec).events.push(
                        Event::new(id, now.as_nanos() as u64, Kind::Crashed)
                            .note("stopped for good (removed from the group)"),
                    );
                }
            }
        }
        if now >= stop_at {
            break;
        }
        if recovered.is_none() && now >= healed_at {
            let h = healed_at.as_nanos() as u64;
            recovered = lock(&rec)
                .events
                .iter()
                .filter(|e| {
                    e.at_ns >= h
                        && e.election.is_none()
                        && matches!(e.kind, Kind::LeaseAcquired | Kind::LeaseConfirmed)
                })
                .map(|e| e.at_ns)
                .min();
        }
        // Once a lease followed the heal, in the root and in every live named election
        // (each after its creation, if later), and every membership op has ended, a little
        // longer, then stop; until then, up to the latest of their bounds.
        if now >= healed_at {
            let live = named_live(&rec, &active);
            let last_lease = lock(&rec).last_named_lease.clone();
            let deadline = live
                .values()
                .map(|from| *from + named_bound.as_nanos() as u64)
                .max();
            // The first lease of each after its start (seen within a step of it); a start
            // that moved (a resumption returned) forgets a lease seen before it.
            named_recovered.retain(|eid, t| live.get(eid).is_some_and(|from| *t >= *from));
            for (eid, from) in &live {
                if let Some(t) = last_lease.get(eid).filter(|t| *t >= from) {
                    named_recovered.entry(*eid).or_insert(*t);
                }
            }
            let named_done = live
                .keys()
                .map(|eid| named_recovered.get(eid).copied())
                .try_fold(0u64, |acc, t| t.map(|t| acc.max(t)));
            stop_at = base_stop.max(deadline.map_or(Duration::ZERO, Duration::from_nanos));

            if let (Some(t), Some(tn), (false, ended)) =
                (recovered, named_done, opr.members_pending())
            {
                stop_at = stop_at.min(Duration::from_nanos(t.max(tn)).max(ended) + cfg.tail);
            }
            if opr.catalog_pending() {
                // A resumption still to carry out: run on, up to 10 s past the bound (its
                // election is judged live from the resumption's return).
                let cap = base_stop + Duration::from_secs(10);
                stop_at = stop_at.max((now + Duration::from_millis(10)).min(cap));
            }
        }
        if let Err(e) = sim.step() {
            panic!("simulation step failed at {now:?}: {e}");
        }
    }
    let end_ns = sim.elapsed().as_nanos() as u64;
    let election_liveness = named_live(&rec, &active).into_iter().collect();
    drop(sim);
    let (member_results, mut op_failures) = opr.member_outcomes();
    op_failures.extend(opr.catalog_failures());
    let changed_members = opr
        .members
        .iter()
        .flat_map(|m| [m.old, m.spare])
        .filter(|n| *n != 0)
        .collect();
    let mut r = lock(&rec);
    let mut op_results = std::mem::take(&mut r.op_results);
    op_results.extend(member_results);
    Outcome {
        events: std::mem::take(&mut r.events),
        writes: std::mem::take(&mut r.writes),
        healed_at_ns: healed_at.as_nanos() as u64,
        end_ns,
        panics: std::mem::take(&mut r.panics),
        clock_faults,
        op_results,
        op_failures,
        refusals: std::mem::take(&mut r.refusals),
        changed_members,
        named_writes: std::mem::take(&mut r.named_writes),
        election_liveness,
        hostile: hostile_nodes,
        book_max: r
            .metrics
            .iter()
            .map(|m| m.support_book_max())
            .max()
            .unwrap_or(0),
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

/// What the run loop does for an op, besides asking a node.
#[derive(Debug, Clone)]
enum Action {
    /// A fault the op places starts (`true`) or ends.
    Fault(FaultKind, bool),
    /// Spare host `id` is registered (an empty disk, joining) and started.
    StartSpare(NodeId),
    /// Host `id` stops for good: the operator took the machine out of the group.
    Retire(NodeId),
}

/// Where a membership op is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// Waiting for a leader, to resolve who leaves.
    Start,
    /// Removing the voter that leaves (a rejoin).
    Remove,
    /// Starting the spare.
    Spare,
    AddLearner,
    Promote,
    /// Swapping the learner in for the voter that leaves, in one joint change.
    Replace,
    /// Reading the leader's membership until it is the one asked for.
    Verify,
    Done,
}

/// A membership call in flight.
#[derive(Debug, Clone, Copy)]
struct Call {
    tag: u64,
    change: Change,
    leader: NodeId,
    /// The leader's incarnation when asked: a crash loses the answer.
    incarnation: u64,
    at: Duration,
}

/// One membership op as it runs (see [`OpKind::Replace`], [`OpKind::Rejoin`]).
struct MemberRun {
    op: usize,
    stage: Stage,
    /// The voter that leaves (0 until resolved).
    old: NodeId,
    /// The new node.
    spare: NodeId,
    call: Option<Call>,
    /// No call before this.
    next_at: Duration,
    /// The op's own leader crash has been placed.
    crash_placed: bool,
    /// The last membership read while verifying.
    seen: Option<Membership>,
    /// When it ended.
    ended: Option<Duration>,
    /// The last refusal it got, for the report of an op that did not finish.
    last_refusal: Option<String>,
}

/// How long a replaced voter stays up (removed) before the operator stops it for good.
/// Not for ever: a removed node dials the members that refuse it, at once again each
/// time (the simulation's backoff is 1 µs), which costs a TLS handshake per millisecond.
const RETIRE_AFTER: Duration = Duration::from_millis(200);

/// How long a membership call may go unanswered before it is asked again (of whoever
/// leads then). A change normally answers within milliseconds; one that cannot commit
/// answers only at the driver's 2 s deadline, and asking again meanwhile is refused
/// while it is in flight, or finds it carried out. A crash of the node asked loses the
/// answer, which is noticed at once.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// Carries out the operator ops of a run as simulated time passes: at most one drain at
/// a time, and an undrain retried every 100 ms until a leader has applied it (a drained
/// node never campaigns, so a lost undrain could leave the group short of candidates).
/// The network side of a stalled handover (the pause, the cut link) is handed back to
/// the run loop to apply like a fault. Membership ops run as a sequence of calls to
/// whoever leads, each retried until it is carried out (see [`MemberRun`]).
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
    members: Vec<MemberRun>,
    /// Faults the membership ops placed, due at their time.
    timers: Vec<(Duration, Action)>,
    next_tag: u64,
    /// Every fault an op places ends by then.
    heal_at: Duration,
    /// The catalog calls (the creates of the start, the ops' creates and removes).
    catalog: Vec<CatalogRun>,
}

/// A catalog call as the op runner carries it out: asked of the root leader, again of
/// the node a `NotLeader` names, again of whoever leads if the answer is lost.
struct CatalogRun {
    call: CatalogCall,
    /// One of the creates of the start: the run fails if it is never carried out. Op
    /// calls are given up at the heal.
    initial: bool,
    /// A resumption: asked until it is carried out, at the heal too (the run fails if it
    /// never is), once the suspension it follows (`after`, in the list) is done.
    must: bool,
    after: Option<usize>,
    /// A suspension: not asked again from then on (its resumption is due).
    give_up_at: Option<Duration>,
    /// Ask this node next (a `NotLeader`'s hint), else whoever leads.
    ask: Option<NodeId>,
    /// In flight: tag, node, its incarnation, since when.
    inflight: Option<(u64, NodeId, u64, Duration)>,
    next_at: Duration,
    done: bool,
    /// The last error it got.
    last: Option<&'static str>,
}

/// How long a catalog call may go unanswered before it is asked again: the driver answers
/// `TimedOut` after four election timeouts (1 s).
const CATALOG_TIMEOUT: Duration = Duration::from_millis(1500);

impl<'a> OpRunner<'a> {
    /// `first_spare`: the id of the first new node a membership op brings in.
    fn new(
        ops: &'a [Op],
        first_spare: NodeId,
        heal_at: Duration,
        initial: &[&'static str],
    ) -> OpRunner<'a> {
        let mut actions: Vec<(Duration, u8, usize)> = Vec::new();
        let mut members = Vec::new();
        let mut catalog: Vec<CatalogRun> = initial
            .iter()
            .map(|name| CatalogRun {
                call: CatalogCall::Create(name),
                initial: true,
                must: false,
                after: None,
                give_up_at: None,
                ask: None,
                inflight: None,
                next_at: Duration::ZERO,
                done: false,
                last: None,
            })
            .collect();
        for (i, o) in ops.iter().enumerate() {
            match o.kind {
                OpKind::Drain(_) => {
                    actions.push((o.at, 0, i));
                    actions.push((o.at + o.duration, 3, i));
                }
                OpKind::StalledHandover { after, stall, .. } => {
                    actions.push((o.at, 0, i));
                    let stall = stall.min(o.duration);
                    actions.push((o.at + after.min(stall), 1, i));
                    actions.push((o.at + stall, 2, i));
                    actions.push((o.at + o.duration, 3, i));
                }
                OpKind::Transfer { .. } | OpKind::ElectionTransfer { .. } => {
                    actions.push((o.at, 0, i));
                }
                OpKind::CreateElection(name) | OpKind::RemoveElection(name) => {
                    catalog.push(CatalogRun {
                        call: if matches!(o.kind, OpKind::CreateElection(_)) {
                            CatalogCall::Create(name)
                        } else {
                            CatalogCall::Remove(name)
                        },
                        initial: false,
                        must: false,
                        after: None,
                        give_up_at: None,
                        ask: None,
                        inflight: None,
                        next_at: o.at,
                        done: false,
                        last: None,
                    });
                }
                OpKind::Suspend { name, hold } => {
                    let run = |call, must, after, give_up_at, next_at| CatalogRun {
                        call,
                        initial: false,
                        must,
                        after,
                        give_up_at,
                        ask: None,
                        inflight: None,
                        next_at,
                        done: false,
                        last: None,
                    };
                    let resume_at = o.at + hold;
                    let suspend = catalog.len();
                    catalog.push(run(
                        CatalogCall::Suspend(name),
                        false,
                        None,
                        Some(resume_at),
                        o.at,
                    ));
                    catalog.push(run(
                        CatalogCall::Resume(name),
                        true,
                        Some(suspend),
                        None,
                        resume_at,
                    ));
                }
                OpKind::Replace { .. } | OpKind::Rejoin { .. } => members.push(MemberRun {
                    op: i,
                    stage: Stage::Start,
                    old: 0,
                    spare: first_spare + members.len() as u64,
                    call: None,
                    next_at: o.at,
                    crash_placed: false,
                    seen: None,
                    ended: None,
                    last_refusal: None,
                }),
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
            members,
            timers: Vec::new(),
            next_tag: 1,
            heal_at,
            catalog,
        }
    }

    /// The creates of the start that were never carried out (the run fails).
    fn catalog_failures(&self) -> Vec<String> {
        let missing: Vec<String> = self
            .catalog
            .iter()
            .filter(|c| (c.initial || c.must) && !c.done)
            .map(|c| format!("{:?} (last answer: {})", c.call, c.last.unwrap_or("-")))
            .collect();
        if missing.is_empty() {
            return Vec::new();
        }
        vec![format!(
            "the named elections of the start were not all created, or a resumption was never carried out: {}",
            missing.join(", ")
        )]
    }

    /// Moves every catalog call on by at most one step.
    fn step_catalog(
        &mut self,
        now: Duration,
        rec: &Rec,
        active: &Active,
        senders: &BTreeMap<NodeId, OpSender>,
    ) {
        let done: Vec<bool> = self.catalog.iter().map(|c| c.done).collect();
        for c in &mut self.catalog {
            if c.done || now < c.next_at || c.after.is_some_and(|a| !done[a]) {
                continue;
            }
            if let Some((tag, node, incarnation, at)) = c.inflight {
                let answer = lock(rec).catalog_answers.remove(&tag);
                match answer {
                    Some(a) => {
                        c.inflight = None;
                        if a.done {
                            c.done = true;
                        } else if let Some(hint) = a.not_leader {
                            c.last = Some("NotLeader");
                            c.ask = hint;
                            c.next_at = now + Duration::from_millis(5);
                        } else {
                            c.last = Some("error");
                            c.next_at = now + Duration::from_millis(20);
                        }
                    }
                    None => {
                        let now_inc = lock(rec).incarnations.get(&node).copied();
                        let down = active.crashed.get(&node).copied().unwrap_or(0) > 0;
                        if now_inc != Some(incarnation) || down || now >= at + CATALOG_TIMEOUT {
                            c.inflight = None;
                            c.last = Some("no answer");
                            c.next_at = now + Duration::from_millis(20);
                        }
                    }
                }
                continue;
            }
            if c.give_up_at.is_some_and(|t| now >= t) {
                // A suspension not carried out by the time its resumption is due.
                c.done = true;
                continue;
            }
            if !c.initial && !c.must && now >= self.heal_at {
                // An op's call still refused at the heal is given up (so that every
                // election is created before the liveness bound starts).
                c.done = true;
                continue;
            }
            let Some(to) = c.ask.take().or_else(|| current_leader(rec, active)) else {
                c.next_at = now + Duration::from_millis(20);
                continue;
            };
            let tag = self.next_tag;
            self.next_tag += 1;
            if !send_op(senders, to, HostOp::Catalog(tag, c.call)) {
                c.next_at = now + Duration::from_millis(20);
                continue;
            }
            let incarnation = lock(rec).incarnations.get(&to).copied().unwrap_or(0);
            c.inflight = Some((tag, to, incarnation, now));
            if let CatalogCall::Resume(name) = c.call {
                let at = now.as_nanos() as u64;
                lock(rec).resume_asked.entry(name).or_insert(at);
            }
        }
    }

    /// Whether a catalog call that must be carried out (a resumption) is not yet.
    fn catalog_pending(&self) -> bool {
        self.catalog.iter().any(|c| c.must && !c.done)
    }

    /// Whether a membership op is still running, and when the last one ended.
    fn members_pending(&self) -> (bool, Duration) {
        let pending = self.members.iter().any(|m| m.ended.is_none());
        let last = self
            .members
            .iter()
            .filter_map(|m| m.ended)
            .max()
            .unwrap_or_default();
        (pending, last)
    }

    /// Each membership op's end, by name: "done", or "unfinished: <stage>"; and the
    /// ops that did not finish, described (the run ends `liveness_bound` after the last
    /// heal at the latest: a healed group that has not carried a change out by then
    /// fails the run).
    fn member_outcomes(&self) -> (Vec<(&'static str, String)>, Vec<String>) {
        let mut results = Vec::new();
        let mut failures = Vec::new();
        for m in &self.members {
            let name = match self.ops[m.op].kind {
                OpKind::Replace { .. } => "replace op",
                _ => "rejoin op",
            };
            let said = if m.ended.is_some() {
                "done".to_string()
            } else {
                failures.push(format!(
                    "op {} ({}: n{} out, n{} in) did not finish: still at {:?}, last refused \
                     with {:?}, last membership read {}",
                    m.op,
                    self.ops[m.op].kind.name(),
                    m.old,
                    m.spare,
                    m.stage,
                    m.last_refusal.as_deref().unwrap_or("-"),
                    m.seen.as_ref().map_or("-".into(), show_members),
                ));
                format!("unfinished: {:?}", m.stage)
            };
            results.push((name, said));
        }
        (results, failures)
    }

    /// Runs what is due at `now`; returns what the run loop must do (faults the ops
    /// place, spares to start, machines to retire).
    fn step(
        &mut self,
        now: Duration,
        rec: &Rec,
        active: &Active,
        resolved: &[Vec<NodeId>],
        ids: &[NodeId],
        senders: &BTreeMap<NodeId, OpSender>,
    ) -> Vec<Action> {
        let mut network = Vec::new();
        let note = |what: String| {
            let e = Event::new(0, now.as_nanos() as u64, Kind::Other("op".into())).note(what);
            lock(rec).events.push(e);
        };
        let skipped = |what: &'static str| {
            lock(rec)
                .op_results
                .push((what, "no leader known".to_string()));
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
                        skipped("transfer");
                        continue;
                    };
                    let c = if *to == l { other(*to) } else { *to };
                    note(format!("n{c} stalls"));
                    self.stalled.insert(i, (c, l));
                    network.push(Action::Fault(FaultKind::Pause(Target::Node(c)), true));
                }
                (OpKind::StalledHandover { .. }, 1) => {
                    if let Some((c, l)) = self.stalled.get(&i).copied() {
                        note(format!("n{l} hands leadership over to the stalled n{c}"));
                        if !send_op(senders, l, HostOp::Transfer(Some(c))) {
                            skipped("transfer");
                        }
                    }
                }
                (OpKind::StalledHandover { .. }, 2) => {
                    if let Some((c, l)) = self.stalled.get(&i).copied() {
                        note(format!("n{c} wakes; its packets to n{l} are lost"));
                        network.push(Action::Fault(FaultKind::CutLink { from: c, to: l }, true));
                        network.push(Action::Fault(FaultKind::Pause(Target::Node(c)), false));
                    }
                }
                (OpKind::StalledHandover { .. }, _) => {
                    if let Some((c, l)) = self.stalled.remove(&i) {
                        network.push(Action::Fault(FaultKind::CutLink { from: c, to: l }, false));
                    }
                }
                (OpKind::Transfer { to }, _) => {
                    let Some(l) = leader else {
                        note("transfer: no leader known; skipped".into());
                        skipped("transfer");
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
                        skipped("transfer");
                    }
                }
                (OpKind::Drain(target), 0) => {
                    let Some(l) = leader else {
                        note("drain: no leader known; skipped".into());
                        skipped("drain");
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
                (OpKind::ElectionTransfer { name, to }, _) => {
                    let Some(l) = current_named_leader(rec, active, name) else {
                        note(format!("transfer {name:?}: no leader known; skipped"));
                        skipped("transfer an election");
                        continue;
                    };
                    let to = match to {
                        TransferTo::Best => None,
                        TransferTo::Node(n) => Some(if *n == l { other(*n) } else { *n }),
                        TransferTo::VictimOf(f) => {
                            resolved[*f].first().copied().filter(|v| *v != l)
                        }
                    };
                    let shown = to.map_or("the best follower".into(), |t| format!("n{t}"));
                    note(format!("n{l} hands election {name:?} over to {shown}"));
                    if !send_op(senders, l, HostOp::ElectionTransfer(name, to)) {
                        skipped("transfer an election");
                    }
                }
                (
                    OpKind::Replace { .. }
                    | OpKind::Rejoin { .. }
                    | OpKind::CreateElection(_)
                    | OpKind::RemoveElection(_)
                    | OpKind::Suspend { .. },
                    _,
                ) => {}
            }
        }
        self.step_catalog(now, rec, active, senders);
        for m in 0..self.members.len() {
            self.step_member(m, now, rec, active, resolved, senders, &mut network);
        }
        self.timers.sort_by_key(|(t, _)| *t);
        while self.timers.first().is_some_and(|(t, _)| *t <= now) {
            network.push(self.timers.remove(0).1);
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

    /// Moves membership op `m` on by at most one call.
    #[allow(clippy::too_many_arguments)]
    fn step_member(
        &mut self,
        m: usize,
        now: Duration,
        rec: &Rec,
        active: &Active,
        resolved: &[Vec<NodeId>],
        senders: &BTreeMap<NodeId, OpSender>,
        out: &mut Vec<Action>,
    ) {
        let note = |what: String| {
            let e = Event::new(0, now.as_nanos() as u64, Kind::Other("op".into())).note(what);
            lock(rec).events.push(e);
        };
        let OpRunner {
            ops,
            members,
            timers,
            next_tag,
            heal_at,
            ..
        } = self;
        let heal_at = *heal_at;
        let (replace, who, faults): (bool, Voter, OpFaults) = match ops[members[m].op].kind {
            OpKind::Replace { old, faults } => (true, old, faults),
            OpKind::Rejoin { who, faults } => (false, who, faults),
            _ => unreachable!("not a membership op"),
        };
        let run = &mut members[m];
        if run.stage == Stage::Done || now < run.next_at {
            return;
        }
        let retry = |run: &mut MemberRun, after_ms: u64| {
            run.next_at = now + Duration::from_millis(after_ms);
        };
        // An answer, or a call lost with its node?
        if let Some(call) = run.call {
            let answer = lock(rec).changes.remove(&call.tag);
            let Some(answer) = answer else {
                let incarnation = lock(rec).incarnations.get(&call.leader).copied();
                let down = active.crashed.get(&call.leader).copied().unwrap_or(0) > 0;
                if incarnation != Some(call.incarnation) || down || now >= call.at + CALL_TIMEOUT {
                    note(format!(
                        "{}: no answer from n{} (it crashed, or too late); asking again",
                        call.change.describe(),
                        call.leader
                    ));
                    lock(rec)
                        .op_results
                        .push((call.change.name(), "no answer".to_string()));
                    run.call = None;
                    retry(run, 20);
                }
                return;
            };
            run.call = None;
            let (old, spare) = (run.old, run.spare);
            use MembershipError as E;
            // Carried out: Ok, or a refusal that says an earlier attempt took effect.
            let carried = match (&answer, run.stage) {
                (Ok(_), _) => true,
                (Err(E::UnknownNode(x)), Stage::Remove | Stage::Replace) => *x == old,
                (Err(E::AlreadyMember(x)), Stage::AddLearner) => *x == spare,
                (Err(E::NotALearner(x)), Stage::Promote | Stage::Replace) => *x == spare,
                _ => false,
            };
            if run.stage == Stage::Verify {
                match answer {
                    Ok(ms) => {
                        let settled = ms.outgoing.is_empty()
                            && ms.voters.contains(&spare)
                            && !ms.contains(old);
                        run.seen = Some(ms);
                        if settled {
                            note(format!("op {}: done", run.op));
                            run.stage = Stage::Done;
                            run.ended = Some(now);
                        } else {
                            // The leader may not have applied the change yet (a new
                            // leader applies it after its first commit).
                            retry(run, 50);
                        }
                    }
                    Err(_) => retry(run, 20),
                }
                return;
            }
            if carried {
                run.stage = match run.stage {
                    Stage::Remove => {
                        // The operator stops the removed machine; it comes back as a new
                        // node, on an empty disk.
                        note(format!(
                            "n{old} is stopped for good; it comes back as n{spare}"
                        ));
                        out.push(Action::Retire(old));
                        Stage::AddLearner
                    }
                    Stage::Replace => {
                        // The replaced machine stays up a little, removed (it must stay
                        // quiet), then the operator stops it for good; one that was down
                        // is not started again.
                        timers.push((now + RETIRE_AFTER, Action::Retire(old)));
                        Stage::Verify
                    }
                    Stage::AddLearner => {
                        if let Some((after, len)) = faults.pause_learner {
                            let from = now + after;
                            if from < heal_at {
                                let pause = FaultKind::Pause(Target::Node(spare));
                                timers.push((from, Action::Fault(pause.clone(), true)));
                                let to = (from + len).min(heal_at);
                                timers.push((to, Action::Fault(pause, false)));
                            }
                        }
                        Stage::Spare
                    }
                    _ => Stage::Verify,
                };
                retry(run, 10);
            } else {
                // Refused: in flight, behind, no quorum, not the leader, or asked of a
                // stale leader (one cut off in an older term answers from its older
                // membership). A correct group carries the change out once healed: the
                // run fails if it has not by the end (see `member_outcomes`).
                if let Err(e) = &answer {
                    run.last_refusal = Some(e.to_string());
                }
                retry(run, 30);
            }
            return;
        }
        let Some(leader) = current_leader(rec, active) else {
            retry(run, 20);
            return;
        };
        let change = match run.stage {
            Stage::Start => {
                run.old = match who {
                    Voter::Leader => leader,
                    Voter::Node(n) => n,
                    Voter::VictimOf(f) => resolved[f].first().copied().unwrap_or(leader),
                };
                note(format!(
                    "op {}: {} n{} (the leader is n{leader}); the new node is n{}",
                    run.op,
                    if replace {
                        "replace"
                    } else {
                        "remove, then add back under a new id,"
                    },
                    run.old,
                    run.spare
                ));
                run.stage = if replace {
                    Stage::AddLearner
                } else {
                    Stage::Remove
                };
                return;
            }
            Stage::Spare => {
                // Started once the group knows it: a node that dials a group that does
                // not know it yet is refused, and redials at once here (the simulation's
                // backoff is 1 µs), a TLS handshake every millisecond.
                out.push(Action::StartSpare(run.spare));
                run.stage = if replace {
                    Stage::Replace
                } else {
                    Stage::Promote
                };
                retry(run, 5);
                return;
            }
            Stage::Remove => Change::Remove(run.old),
            Stage::AddLearner => {
                Change::AddLearner(run.spare, SocketAddr::new(host_ip(run.spare), PORT))
            }
            Stage::Promote => Change::Promote(run.spare),
            Stage::Replace => Change::Replace(run.old, run.spare),
            Stage::Verify => Change::Status,
            Stage::Done => return,
        };
        let tag = *next_tag;
        *next_tag += 1;
        if !send_op(senders, leader, HostOp::Change(tag, change)) {
            retry(run, 20);
            return;
        }
        let incarnation = lock(rec).incarnations.get(&leader).copied().unwrap_or(0);
        run.call = Some(Call {
            tag,
            change,
            leader,
            incarnation,
            at: now,
        });
        if change != Change::Status {
            note(format!("n{leader} is asked to {}", change.describe()));
        }
        // The op's own crash of the leader, in the middle of the decisive change.
        let decisive = matches!(change, Change::Replace(..))
            || (!replace && change == Change::Remove(run.old));
        if decisive && !run.crash_placed {
            run.crash_placed = true;
            if let Some((after, down)) = faults.crash_leader {
                let from = now + after;
                if from < heal_at {
                    let crash = FaultKind::Crash(Target::Node(leader));
                    timers.push((from, Action::Fault(crash.clone(), true)));
                    timers.push(((from + down).min(heal_at), Action::Fault(crash, false)));
                }
            }
        }
    }
}

/// The node that leads named election `name` in the highest term, as the running nodes
/// last reported.
fn current_named_leader(rec: &Rec, active: &Active, name: &str) -> Option<NodeId> {
    let r = lock(rec);
    r.named_views
        .iter()
        .filter(|((id, n), (_, role, _))| {
            n == name
                && *role == Role::Leader
                && active.crashed.get(id).copied().unwrap_or(0) == 0
                && !active.retired.contains(id)
        })
        .max_by_key(|(_, (term, _, _))| *term)
        .map(|((id, _), _)| *id)
}

/// The node that leads in the highest term, as the running nodes last reported.
fn current_leader(rec: &Rec, active: &Active) -> Option<NodeId> {
    let r = lock(rec);
    r.views
        .iter()
        .filter(|(id, (_, role, _))| {
            *role == Role::Leader
                && active.crashed.get(*id).copied().unwrap_or(0) == 0
                && !active.retired.contains(*id)
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
    push(sim, net, ids, active, base_latency);
}

/// Pushes the whole desired state of the network to turmoil and the socket adapter.
fn push(
    sim: &mut turmoil::Sim<'_>,
    net: &Arc<Mutex<NetCtl>>,
    ids: &[NodeId],
    active: &mut Active,
    base_latency: Duration,
) {
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
