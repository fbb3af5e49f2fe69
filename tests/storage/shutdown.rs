//! Stopping a node: `Node::shutdown` and `Node::join` return only once the driver has
//! let go of its store. A worker exits right after `shutdown` returns; if the store
//! (RocksDB) were still closing on another thread then, the process would abort in the
//! middle of it (the netns suite saw workers end with SIGABRT and "pthread lock: Invalid
//! argument" in about 1 stop of 20).
//!
//! Three nodes on memory stores and the in-process network; each store takes 300 ms to
//! close (`CloseProbe`), so a `shutdown` that returns before the close shows on every run.

use tenure_harness::torn_store;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure::storage::{MemDisk, MemStore};
use tenure::transport::mem::MemNetwork;
use tenure::{Config, Node, NodeId, Role, Timing};
use torn_store::{CloseProbe, TornStore};

const IDS: [NodeId; 3] = [1, 2, 3];
const CLOSE: Duration = Duration::from_millis(300);

async fn start(net: &MemNetwork, id: NodeId, closed: Arc<AtomicBool>) -> Node {
    let peers = IDS.map(|p| (p, SocketAddr::from(([127, 0, 0, 1], 7000 + p as u16))));
    let group = tenure::GroupId::from_u128(0x5107).expect("not 0");
    let config = Config::builder(id)
        .peers(peers)
        .timing(Timing::from_millis(10, 30, 150, 250))
        .found(group)
        .build();
    let store = TornStore {
        inner: MemStore::open(MemDisk::for_node(id)),
        tear: Arc::default(),
        died: Arc::default(),
        closing: Arc::new(CloseProbe {
            delay: CLOSE,
            closed,
        }),
    };
    let (transport, inbound) = net.endpoint(id);
    Node::start_with(config, store, Arc::new(transport), inbound)
        .await
        .unwrap_or_else(|e| panic!("n{id} does not start: {e}"))
}

/// The worker example's shape: `select!` on a signal and `join`, the signal wins (the
/// `join` is cancelled), then `shutdown`. Before the fix the cancelled `join` took the
/// driver's task with it, and `shutdown` returned when the driver said "stopped", before
/// it dropped its store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_after_a_cancelled_join_returns_once_the_store_is_closed() {
    let net = MemNetwork::new();
    let closed: Vec<Arc<AtomicBool>> = IDS.iter().map(|_| Arc::default()).collect();
    let mut nodes = Vec::new();
    for (id, c) in IDS.iter().zip(&closed) {
        nodes.push(start(&net, *id, c.clone()).await);
    }
    let mut led = nodes[0].watch();
    tokio::time::timeout(
        Duration::from_secs(10),
        led.wait_for(|l| l.leader.is_some()),
    )
    .await
    .expect("a leader within 10 s")
    .expect("node 1 running");
    for (i, node) in nodes.into_iter().enumerate() {
        let id = IDS[i];
        tokio::select! {
            biased;
            _ = node.join() => panic!("n{id}'s driver ended on its own"),
            () = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
        node.shutdown().await.expect("a clean shutdown");
        assert!(
            closed[i].load(Ordering::SeqCst),
            "n{id}: shutdown returned before the store was closed"
        );
        assert_eq!(node.leadership().role, Role::Stopped);
        // A second join, after the driver is gone, returns at once.
        tokio::time::timeout(Duration::from_secs(1), node.join())
            .await
            .expect("join after shutdown returns at once")
            .expect("clean");
    }
}
