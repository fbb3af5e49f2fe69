//! A handover to a stalled node (docs/design.md, section 4), driven step by step.
//!
//! Three nodes on the in-process transport and memory stores:
//!
//! 1. `L` leads term `t` with a lease; `C` stalls (as under SIGSTOP: what reaches it is
//!    held, to be delivered when it wakes; it sends nothing);
//! 2. `L` hands over to `C`: it revokes its lease and sends `MsgTimeoutNow`, which `C`
//!    does not handle; the transfer times out;
//! 3. `C` wakes and handles what it was sent, `MsgTimeoutNow` included, while `L` hears
//!    nothing any more: `C`'s packets to `L` are dropped (as in the report of this case),
//!    and so are `V`'s (so that `L` cannot learn of a newer term before its lease would
//!    run out: the overlap, if any, is not a race with `L`'s next heartbeat).
//!
//! `C` campaigns at `t + 1` with forced votes, which skip `V`'s in-lease refusal, and
//! wins. Before the fix, `L` had gone on leading in `t` after the failed transfer and
//! taken a new lease, still valid when `C` took its lease of `t + 1`: the history checker
//! reports the overlap (rule (d)). With the fix, a leader that sent `MsgTimeoutNow` in
//! `t` holds no lease in `t` again and steps down into `t + 1` when the transfer fails.
//! The mutation `lease-after-failed-transfer` (`cargo test --features mutations --test
//! handover` with `TENURE_MUTATION=lease-after-failed-transfer`) removes the fix, and
//! this test fails by rule (d).

use tenure_harness::checker;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::storage::{MemDisk, MemStore};
use tenure::transport::mem::MemNetwork;
use tenure::transport::{Inbound, Inbox, NodeId};
use tenure::{Config, Node, Role, Timing};
use tokio::time::Instant;

use checker::{check, Event, Kind, Options};

const IDS: [NodeId; 3] = [1, 2, 3];
const WAIT: Duration = Duration::from_secs(20);

fn timing() -> Timing {
    Timing::from_millis(10, 30, 150, 250)
}

/// What reaches a node, delivered or held (a stalled process reads nothing).
#[derive(Clone, Default)]
struct Valve {
    state: Arc<Mutex<(bool, VecDeque<Inbound>)>>,
    wake: Arc<tokio::sync::Notify>,
}

impl Valve {
    /// Forwards from `from` to the returned receiver while open; holds while closed.
    fn fit(&self, mut from: Inbox) -> Inbox {
        let (tx, rx) = Inbox::channel(4096);
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                // Deliver whatever the valve lets through, in arrival order.
                loop {
                    let next = {
                        let mut s = me.state.lock().unwrap();
                        if s.0 {
                            s.1.pop_front()
                        } else {
                            None
                        }
                    };
                    match next {
                        Some(item) => {
                            if !tx.deliver(item).await {
                                return;
                            }
                        }
                        None => break,
                    }
                }
                tokio::select! {
                    item = from.recv() => match item {
                        Some(item) => me.state.lock().unwrap().1.push_back(item),
                        None => return,
                    },
                    _ = me.wake.notified() => {}
                }
            }
        });
        rx
    }

    fn set_open(&self, open: bool) {
        self.state.lock().unwrap().0 = open;
        self.wake.notify_one();
    }

    fn held(&self) -> usize {
        self.state.lock().unwrap().1.len()
    }
}

struct Group {
    nodes: Vec<Node>,
    valves: Vec<Valve>,
    t0: Instant,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Group {
    async fn start() -> Group {
        let net = MemNetwork::new();
        let group = tenure::GroupId::random();
        let t0 = Instant::now();
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let mut nodes = Vec::new();
        let mut valves = Vec::new();
        for id in IDS {
            let peers = IDS.map(|p| (p, SocketAddr::from(([127, 0, 0, 1], 7000 + p as u16))));
            let config = Config::builder(id)
                .peers(peers)
                .timing(timing())
                .found(group)
                .build();
            let (transport, inbound) = net.endpoint(id);
            let valve = Valve::default();
            valve.set_open(true);
            let inbound = valve.fit(inbound);
            let node = Node::start_with(
                config,
                MemStore::open(MemDisk::for_node(id)),
                Arc::new(transport),
                inbound,
            )
            .await
            .unwrap_or_else(|e| panic!("n{id} does not start: {e}"));
            record_leases(&node, id, t0, events.clone());
            nodes.push(node);
            valves.push(valve);
        }
        Group {
            nodes,
            valves,
            t0,
            events,
        }
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize - 1]
    }

    fn step(&self, what: &str) {
        let e = Event::new(0, self.t0.elapsed().as_nanos() as u64, Kind::Fault).note(what);
        eprintln!("{:>9.3} ms  {what}", self.t0.elapsed().as_secs_f64() * 1e3);
        self.events.lock().unwrap().push(e);
    }
}

/// Every lease `node` acquires, and how it ends, as checker events.
fn record_leases(node: &Node, id: NodeId, t0: Instant, events: Arc<Mutex<Vec<Event>>>) {
    let node = node.clone();
    let ns = move |at: Instant| at.saturating_duration_since(t0).as_nanos() as u64;
    tokio::spawn(async move {
        while let Ok(lease) = node.lease().await {
            let term = lease.token().term();
            let now = ns(Instant::now());
            eprintln!(
                "{:>9.3} ms  n{id} acquired a lease of term {term}",
                now as f64 / 1e6
            );
            events
                .lock()
                .unwrap()
                .push(Event::acquired(id, now, term, ns(lease.valid_until())));
            let reason = lease.lost().await;
            let now = ns(Instant::now());
            let ended = lease.ended_at().map_or(now, ns).min(now);
            eprintln!(
                "{:>9.3} ms  n{id} lost its lease of term {term} ({reason}), which ended at {:.3} ms",
                now as f64 / 1e6,
                ended as f64 / 1e6
            );
            events
                .lock()
                .unwrap()
                .push(Event::lost(id, now, term, ended, reason.as_str()));
        }
    });
}

async fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_timeout_now_after_a_failed_handover_never_overlaps_the_old_leaders_lease() {
    let g = Group::start().await;

    // 1. A leader with a lease, whose log every node has.
    let (l, t) = wait_for("a leader with a lease", || {
        IDS.iter().find_map(|id| {
            let v = g.node(*id).leadership();
            (v.role == Role::Leader && v.leased).then_some((*id, v.term))
        })
    })
    .await;
    let c = IDS.into_iter().find(|id| *id != l).unwrap();
    let v = IDS.into_iter().find(|id| *id != l && *id != c).unwrap();
    let commit = g.node(l).status().await.unwrap().commit;
    let deadline = Instant::now() + WAIT;
    while !g.node(c).status().await.is_ok_and(|s| s.commit >= commit) {
        assert!(Instant::now() < deadline, "n{c} never caught up");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    g.step(&format!("n{l} leads term {t}; n{c} stalls"));
    g.valves[c as usize - 1].set_open(false);
    for p in [l, v] {
        g.node(c).faults().block_outbound(p);
    }
    // What C finds when it wakes starts with a heartbeat of L's (a stalled process has
    // unread messages of its leader queued), then the MsgTimeoutNow.
    wait_for("a heartbeat held for the stalled node", || {
        (g.valves[c as usize - 1].held() > 0).then_some(())
    })
    .await;

    // 2. The handover to the stalled node fails.
    g.step(&format!("n{l} hands over to n{c}"));
    let r = g.node(l).transfer_leadership(Some(c)).await;
    g.step(&format!("the transfer returned {r:?}"));
    assert!(r.is_err(), "a stalled node cannot take over: {r:?}");
    // Before the fix L leases again in term t; with it, L has left term t.
    wait_for("n{l} leases again in its term, or leaves it", || {
        let view = g.node(l).leadership();
        (view.term > t || (view.role == Role::Leader && view.leased)).then_some(())
    })
    .await;
    g.step(&format!("n{l}: {:?}", g.node(l).leadership()));

    // 3. C wakes; L hears nothing any more.
    g.step(&format!("n{c} wakes; n{l} hears from nobody"));
    for p in [c, v] {
        g.node(l).faults().block_inbound(p);
    }
    g.node(c).faults().heal();
    g.valves[c as usize - 1].set_open(true);
    let (winner, term) = wait_for("a lease in a later term", || {
        IDS.iter().filter(|id| **id != l).find_map(|id| {
            let view = g.node(*id).leadership();
            (view.leased && view.term > t).then_some((*id, view.term))
        })
    })
    .await;
    g.step(&format!("n{winner} holds a lease of term {term}"));
    // Until L's lease of term t, if it took one, has run out.
    tokio::time::sleep(timing().election_timeout()).await;
    g.step("heal");
    g.node(l).faults().heal();

    let events = g.events.lock().unwrap().clone();
    if let Err(failure) = check(&events, &[], &Options::new(IDS.len())) {
        panic!("{failure}");
    }
    for n in &g.nodes {
        n.kill().await;
    }
}
