//! Persist before send, shown on the one schedule where breaking it loses a committed
//! record: a follower acknowledges an append and dies before the entry reaches its disk.
//!
//! Three nodes on the in-process transport and memory stores, driven step by step:
//!
//! 1. a leader `L` is elected and its record is applied everywhere; `C` is cut off;
//! 2. `L` hands over to `F`; `L`'s store is armed to die in its next write of a
//!    leadership record, which is `F`'s "tenure began" entry: `L` dies receiving it;
//! 3. once `L` is down and `F` has stepped down (it has no quorum), `F`'s applied
//!    history is sampled and `F` is killed;
//! 4. `L` restarts from its disk, `C` is reconnected, and the two elect a new leader,
//!    whose record is applied on both.
//!
//! With the driver as it is, `L` never acknowledged the entry it had not written, so
//! `F` could not commit its record and no history ever shows it. With the
//! `persist-after-send` mutation (`cargo test --features mutations --test storage lost_ack::`
//! with `TENURE_MUTATION=persist-after-send`), `L`'s acknowledgement leaves before its
//! write: `F` commits and applies its record on the strength of it, and the new leader,
//! elected by `L` (without the entry) and `C`, replaces it. The history checker's rule
//! (f) reports the committed record that was lost, and the test fails.

use tenure_harness::checker;
use tenure_harness::torn_store;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure::storage::{MemDisk, MemStore};
use tenure::transport::mem::MemNetwork;
use tenure::{Config, Node, NodeId, Role, Timing};
use tokio::time::Instant;

use checker::{check, Event, Kind, Options};
use torn_store::{tear, TornStore};

const IDS: [NodeId; 3] = [1, 2, 3];
const WAIT: Duration = Duration::from_secs(20);

fn timing() -> Timing {
    Timing::from_millis(10, 30, 150, 250)
}

/// The group: one disk per node that outlives its node, one in-process network.
struct Group {
    net: MemNetwork,
    disks: Vec<MemDisk>,
    nodes: Vec<Option<Node>>,
    /// Per node, which write of its store dies (`torn_store::tear`).
    armed: Vec<Arc<AtomicU8>>,
    t0: Instant,
    /// What happened, for the checker's timeline: steps and history samples.
    events: Vec<Event>,
}

impl Group {
    fn new() -> Group {
        Group {
            net: MemNetwork::new(),
            disks: IDS.iter().map(|id| MemDisk::for_node(*id)).collect(),
            nodes: IDS.iter().map(|_| None).collect(),
            armed: IDS.iter().map(|_| Arc::default()).collect(),
            t0: Instant::now(),
            events: Vec::new(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    fn step(&mut self, what: &str) {
        let e = Event::new(0, self.now_ns(), Kind::Fault).note(what);
        self.events.push(e);
    }

    async fn start(&mut self, id: NodeId) {
        let i = id as usize - 1;
        // The peers' addresses are not used by the in-process transport.
        let peers = IDS.map(|p| (p, SocketAddr::from(([127, 0, 0, 1], 7000 + p as u16))));
        let group = tenure::GroupId::from_u128(0x0105_7ac4).expect("not 0");
        let config = Config::builder(id)
            .peers(peers)
            .timing(timing())
            .found(group)
            .build();
        let store = TornStore {
            inner: MemStore::open(self.disks[i].clone()),
            tear: self.armed[i].clone(),
            died: Arc::default(),
            closing: Arc::default(),
        };
        let (transport, inbound) = self.net.endpoint(id);
        let node = Node::start_with(config, store, Arc::new(transport), inbound)
            .await
            .unwrap_or_else(|e| panic!("n{id} does not start: {e}"));
        self.events
            .push(Event::new(id, self.now_ns(), Kind::Started));
        self.nodes[i] = Some(node);
    }

    fn node(&self, id: NodeId) -> &Node {
        self.nodes[id as usize - 1].as_ref().expect("node is up")
    }

    /// Records the history `id` has applied (rule (f) of the checker).
    async fn sample(&mut self, id: NodeId) -> Vec<(u64, u64)> {
        let h = self.node(id).history().await.expect("node is up");
        let records: Vec<(u64, u64)> = h.iter().map(|r| (r.term, r.leader)).collect();
        let e = Event::history(id, self.now_ns(), records.clone());
        self.events.push(e);
        records
    }

    /// Cuts `id` off from every other running node, both ways.
    fn isolate(&self, id: NodeId) {
        for (i, n) in self.nodes.iter().enumerate() {
            let other = i as NodeId + 1;
            if let Some(n) = n.as_ref().filter(|_| other != id) {
                n.faults().isolate_from(id);
                self.node(id).faults().isolate_from(other);
            }
        }
    }
}

/// Polls `f` until it returns `Some`, or gives up after [`WAIT`] with `None`.
async fn poll<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The last term in a node's applied history, without waiting on its driver.
async fn last_recorded(node: &Node) -> u64 {
    node.history()
        .await
        .ok()
        .and_then(|h| h.last().map(|r| r.term))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_dying_in_its_append_write_never_loses_a_committed_record() {
    let mut g = Group::new();
    for id in IDS {
        g.start(id).await;
    }

    // 1. A leader whose record every node has applied.
    let (l, term) = poll(|| {
        IDS.iter().find_map(|id| {
            let v = g.node(*id).leadership();
            (v.role == Role::Leader && v.leased).then_some((*id, v.term))
        })
    })
    .await
    .expect("a leader with a lease");
    for id in IDS {
        let deadline = Instant::now() + WAIT;
        while last_recorded(g.node(id)).await != term {
            assert!(Instant::now() < deadline, "n{id} never applied term {term}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        g.sample(id).await;
    }
    let f = IDS.into_iter().find(|id| *id != l).expect("a follower");
    let c = IDS
        .into_iter()
        .find(|id| *id != l && *id != f)
        .expect("a third");
    // L must be past its own restart quiet period to vote for F: one election timeout
    // after its start (setup, not an assertion).
    tokio::time::sleep(timing().election_timeout()).await;

    // 2. C is cut off; L hands over to F and dies writing F's record.
    g.step(&format!("isolate n{c}"));
    g.isolate(c);
    g.armed[l as usize - 1].store(tear::RECORD, Ordering::SeqCst);
    g.step(&format!(
        "n{l} hands over to n{f}; n{l} dies in its write of the next leadership record"
    ));
    let _ = g.node(l).transfer_leadership(Some(f)).await;
    let died = tokio::time::timeout(WAIT, g.node(l).join()).await;
    match died {
        Ok(Err(e)) => {
            let e = Event::new(l, g.now_ns(), Kind::Crashed).note(e.reason);
            g.events.push(e);
        }
        other => panic!("n{l} should have died in its write, got {other:?}"),
    }
    g.nodes[l as usize - 1] = None;

    // 3. F, left without a quorum, steps down (check-quorum). Whatever it committed by
    //    then is in its history; then it dies too.
    poll(|| (g.node(f).leadership().role != Role::Leader).then_some(()))
        .await
        .expect("the new leader steps down without a quorum");
    let f_history = g.sample(f).await;
    g.step(&format!("kill n{f}"));
    g.node(f).kill().await;
    g.nodes[f as usize - 1] = None;

    // 4. L comes back from its disk, C is reconnected; they elect a leader, whose record
    //    both apply.
    g.step(&format!("restart n{l}; heal n{c}"));
    g.start(l).await;
    g.node(c).faults().heal();
    let f_term = f_history.last().map_or(0, |r| r.0).max(term + 1);
    let elected = poll(|| {
        [l, c].into_iter().find_map(|id| {
            let v = g.node(id).leadership();
            (v.role == Role::Leader && v.term > f_term).then_some(v.term)
        })
    })
    .await;
    let mut applied = true;
    if let Some(new_term) = elected {
        for id in [l, c] {
            let deadline = Instant::now() + WAIT;
            while last_recorded(g.node(id)).await < new_term && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            applied &= last_recorded(g.node(id)).await >= new_term;
        }
    }
    for id in [l, c] {
        g.sample(id).await;
    }

    // What happened, as a transcript (shown with --nocapture or on failure).
    for e in &g.events {
        let who = if e.node == 0 {
            String::new()
        } else {
            format!("n{} ", e.node)
        };
        let what = match e.kind {
            Kind::History => format!("applied history {:?}", e.records),
            _ => format!("{:?} {}", e.kind, e.note),
        };
        eprintln!("{:>10.3} ms  {who}{what}", e.at_ns as f64 / 1e6);
    }

    // The checker first: a lost committed record is rule (f).
    if let Err(failure) = check(&g.events, &[], &Options::new(IDS.len())) {
        panic!("{failure}");
    }
    let new_term = elected.unwrap_or_else(|| panic!("n{l} and n{c} elect a leader after the heal"));
    assert!(
        applied,
        "the leader of term {new_term} has its record applied on both"
    );
    for id in [l, c] {
        g.node(id).kill().await;
    }
}
