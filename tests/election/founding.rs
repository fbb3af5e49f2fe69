//! Founding a group once, and data folders that are not what they seem (real QUIC on
//! loopback, RocksDB in temporary folders). `docs/design.md`, section 6, has the
//! argument; each test names the rule it checks.
//!
//! The rule that matters most: a node whose data folder was lost, restarted with the
//! very configuration it always runs with (a unit file keeps `--found`), must not come
//! back as a voter that forgot its vote and log.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tenure::error::StopCause;
use tenure::error::StorageError;
use tenure::storage::{MemDisk, MemStore};
use tenure::transport::mem::MemNetwork;
use tenure::transport::{Hello, Inbound, Inbox, NodeId};
use tenure::{Config, GroupId, Node, Role, StartError};
use tenure_harness::cluster::{wait_for, Cluster};
use tokio::sync::watch;

const LONG: Duration = Duration::from_secs(15);

/// Waits until node `id`'s data folder holds at least `entries` applied entries beyond
/// the founding, so that losing it loses something the group counted on.
async fn wait_applied(c: &Cluster, id: u64, applied: u64) {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let status = c.node(id).status().await.expect("status");
        if status.applied >= applied {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {id} did not apply {applied} entries: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A steady group's follower that applied entries beyond the founding is killed and its
/// data folder deleted: `(leader, term, the follower)`.
async fn lose_a_followers_folder(c: &mut Cluster) -> (u64, u64, u64) {
    let (leader, term) = c.steady_leader(LONG).await;
    let victim = *c.nodes.keys().find(|id| **id != leader).unwrap();
    wait_applied(c, victim, 2).await;
    c.kill(victim).await;
    std::fs::remove_dir_all(c.dir.path().join(format!("data-{victim}"))).unwrap();
    (leader, term, victim)
}

/// Waits for `node` to stop by itself, with an error.
async fn stops_by_itself(node: &Node) -> tenure::error::NodeStopped {
    tokio::time::timeout(LONG, node.join())
        .await
        .expect("the node stops by itself")
        .expect_err("the node must stop with an error")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "LOCK" {
            continue;
        }
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn founding_waits_until_every_first_member_has_said_hello() {
    let mut c = Cluster::unstarted(
        3,
        tenure_harness::cluster::test_timing(),
        tenure::ReadMode::Safe,
    );
    c.start_node(1).await;
    c.start_node(2).await;
    // Without node 3 nobody founds: no term, no leader, the role says why.
    let waited = tokio::time::timeout(Duration::from_millis(800), async {
        loop {
            if c.nodes
                .values()
                .any(|n| n.leadership().role != Role::Founding)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        waited.is_err(),
        "a node left Founding before every first member said hello: {:?}",
        c.nodes
            .values()
            .map(tenure::Node::leadership)
            .collect::<Vec<_>>()
    );
    let status = c.node(1).status().await.unwrap();
    assert_eq!(status.role, Role::Founding);
    c.start_node(3).await;
    let (_, term) = c.steady_leader(LONG).await;
    assert!(term >= 2);
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

/// Calls made while a node waits to found are all answered once it has: more of them
/// than the command channel holds (1,024) were once put back into it and the rest
/// dropped, so a worker's 1,000 `Election::lease` calls made at start lost their tail
/// with "node stopped".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_made_while_founding_is_answered_after_it() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Waker};
    type Call = Pin<Box<dyn Future<Output = Result<usize, tenure::error::NodeStopped>> + Send>>;
    const CALLS: usize = 1_500;
    const ROUND: usize = 500;
    let mut c = Cluster::unstarted(
        3,
        tenure_harness::cluster::test_timing(),
        tenure::ReadMode::Safe,
    );
    c.start_node(1).await;
    let node = c.node(1).clone();
    let mut calls: Vec<Call> = Vec::with_capacity(CALLS);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..CALLS / ROUND {
        // One poll each sends its command (the channel has room for a round); a status
        // sent after them is answered only once the founding wait took every one
        // before it (one channel, in order).
        for _ in 0..ROUND {
            let n = node.clone();
            // Unconstrained: tokio's cooperative budget must not turn a send that has room
            // into a pending one here.
            let mut call: Call = Box::pin(tokio::task::unconstrained(async move {
                n.list_elections().await.map(|list| list.len())
            }));
            assert!(
                call.as_mut().poll(&mut cx).is_pending(),
                "answered before founding"
            );
            calls.push(call);
        }
        assert_eq!(node.status().await.unwrap().role, Role::Founding);
    }
    c.start_node(2).await;
    c.start_node(3).await;
    let answers = tokio::time::timeout(LONG, futures_all(calls))
        .await
        .expect("every call answered after founding");
    let failed: Vec<String> = answers
        .iter()
        .filter_map(|a| a.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {CALLS} calls made while founding failed, the first: {:?}",
        failed.len(),
        failed.first()
    );
    c.shutdown().await;
}

/// Awaits every future, in order.
async fn futures_all<T>(
    calls: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>>,
) -> Vec<T> {
    let mut out = Vec::with_capacity(calls.len());
    for call in calls {
        out.push(call.await);
    }
    out
}

/// The unit file keeps `--found`: a voter whose folder is lost and that restarts with
/// the same configuration finds that the group has moved on, and stops with an error
/// saying it lost its data, before it ever votes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_that_lost_its_folder_does_not_return_even_with_the_founding_flag() {
    let mut c = Cluster::start(3).await;
    let (leader, term, victim) = lose_a_followers_folder(&mut c).await;

    let node = Node::start(c.config(victim))
        .await
        .expect("the node starts (to found) on its empty folder");
    let stopped = stops_by_itself(&node).await;
    assert!(
        stopped.reason.contains("lost its data folder"),
        "the error must say what happened: {stopped}"
    );
    assert_eq!(node.leadership().role, Role::Stopped);
    // The group never heard a vote from it: same leader, same term.
    let (l2, t2) = c.steady_leader(LONG).await;
    assert_eq!((l2, t2), (leader, term));
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_that_lost_its_folder_without_flags_is_told_to_be_replaced() {
    let mut c = Cluster::start(3).await;
    let (leader, _) = c.steady_leader(LONG).await;
    let victim = *c.nodes.keys().find(|id| **id != leader).unwrap();
    c.kill(victim).await;
    let data = c.dir.path().join(format!("data-{victim}"));
    std::fs::remove_dir_all(&data).unwrap();
    let mut config = c.config(victim);
    config.found = None;
    let err = Node::start(config).await.expect_err("no store, no flag");
    assert!(
        matches!(err, StartError::NoStore { id, .. } if id == victim),
        "{err:?}"
    );
    assert!(err.to_string().contains("replace it"), "{err}");
    assert!(!data.exists(), "nothing may be created: {err}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_folder_of_another_node_is_refused() {
    let mut c = Cluster::start(3).await;
    c.steady_leader(LONG).await;
    c.kill(2).await;
    c.kill(3).await;
    let d2 = c.dir.path().join("data-2");
    let d3 = c.dir.path().join("data-3");
    std::fs::remove_dir_all(&d3).unwrap();
    copy_dir(&d2, &d3);
    let err = Node::start(c.config(3))
        .await
        .expect_err("node 3 on node 2's folder");
    assert!(
        matches!(
            err,
            StartError::WrongNode {
                stored: 2,
                id: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("belongs to node 2"), "{err}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_folder_of_another_group_is_refused() {
    let mut a = Cluster::start(3).await;
    a.steady_leader(LONG).await;
    let mut b = Cluster::start(3).await;
    b.steady_leader(LONG).await;
    a.kill(1).await;
    b.kill(1).await;
    let da = a.dir.path().join("data-1");
    std::fs::remove_dir_all(&da).unwrap();
    copy_dir(&b.dir.path().join("data-1"), &da);
    let err = Node::start(a.config(1))
        .await
        .expect_err("group b's folder in group a");
    assert!(matches!(err, StartError::WrongGroup { .. }), "{err:?}");
    assert!(err.to_string().contains(&a.group.to_string()), "{err}");
    assert!(err.to_string().contains(&b.group.to_string()), "{err}");
    a.shutdown().await;
    b.shutdown().await;
}

/// A folder copied without RocksDB's `CURRENT`: refused on the first start *and* the
/// second (the first must not have written a new `CURRENT` over the old files).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_that_lost_current_is_refused_on_every_start() {
    let mut c = Cluster::start(3).await;
    let (leader, _) = c.steady_leader(LONG).await;
    let victim = *c.nodes.keys().find(|id| **id != leader).unwrap();
    wait_applied(&c, victim, 2).await;
    c.kill(victim).await;
    let data = c.dir.path().join(format!("data-{victim}"));
    std::fs::remove_file(data.join("CURRENT")).unwrap();
    for attempt in 1..=2 {
        let err = Node::start(c.config(victim))
            .await
            .expect_err("a folder without CURRENT");
        assert!(
            matches!(err, StartError::Storage(StorageError::Corrupt { .. })),
            "attempt {attempt}: {err:?}"
        );
        assert!(err.to_string().contains("CURRENT"), "{err}");
        assert!(
            !data.join("CURRENT").exists(),
            "attempt {attempt} wrote CURRENT"
        );
    }
    c.shutdown().await;
}

/// A restart of a founded node passes the founding flag again (a unit file): it opens
/// its store and keeps its term, it does not found anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_with_the_founding_flag_keeps_the_store() {
    let mut c = Cluster::start(3).await;
    let (leader, term) = c.steady_leader(LONG).await;
    let follower = *c.nodes.keys().find(|id| **id != leader).unwrap();
    c.restart(follower).await;
    assert!(c.view(follower).term >= term);
    assert_ne!(c.view(follower).role, Role::Founding);
    wait_for("the restarted follower follows the leader", LONG, || {
        (c.view(follower).leader == Some(leader)).then_some(())
    })
    .await;
    c.shutdown().await;
}

/// The unit file says `--join` (the node once joined): its folder is lost and it starts
/// empty, joining. It grants no vote meanwhile, and it stops as soon as the group shows
/// that it counts on the data it lost (the leader's heartbeat commit, or a first snapshot
/// naming it a voter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_that_lost_its_folder_and_restarts_joining_stops_with_lost_data() {
    let mut c = Cluster::start(3).await;
    let (leader, term, victim) = lose_a_followers_folder(&mut c).await;
    let mut config = c.config(victim);
    config.found = None;
    config.join = true;
    let node = Node::start(config).await.expect("a joining start");
    let stopped = stops_by_itself(&node).await;
    assert!(
        matches!(
            stopped.cause,
            StopCause::LostAcknowledgedData { .. } | StopCause::LostData { .. }
        ),
        "{stopped:?}"
    );
    let (l2, t2) = c.steady_leader(LONG).await;
    assert_eq!((l2, t2), (leader, term), "the group was not disturbed");
    c.shutdown().await;
}

/// Delivers what `from` receives to a node's inbox, but holds back what `slow_from`
/// says until `open` turns true: their hellos are kept (the latest of each, delivered
/// when the gate opens), their raft messages dropped (raft-rs retransmits). A founder
/// behind it hears the others only once they have moved on.
fn gate(mut from: Inbox, slow_from: Vec<NodeId>, mut open: watch::Receiver<bool>) -> Inbox {
    let (tx, inbox) = Inbox::channel(1024);
    tokio::spawn(async move {
        let mut held: BTreeMap<NodeId, Hello> = BTreeMap::new();
        loop {
            let opened = *open.borrow_and_update();
            if opened {
                for (from, hello) in std::mem::take(&mut held) {
                    if !tx.deliver(Inbound::Hello { from, hello }).await {
                        return;
                    }
                }
            }
            let item = tokio::select! {
                item = from.recv() => item,
                changed = open.changed(), if !opened => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let Some(item) = item else { return };
            let sender = match &item {
                Inbound::Hello { from, .. } => Some(*from),
                Inbound::Message(m) => Some(m.from),
                Inbound::Election { message, .. } => Some(message.from),
                _ => None,
            };
            if !opened && sender.is_some_and(|s| slow_from.contains(&s)) {
                if let Inbound::Hello { from, hello } = item {
                    held.insert(from, hello);
                }
                continue;
            }
            if !tx.deliver(item).await {
                return;
            }
        }
    });
    inbox
}

/// The race of slow founders (`docs/design.md`, section 6), made deterministic. Nodes 1
/// to 3 hear every first member's founding hello, found and elect a leader; nodes 4 and
/// 5 hear nothing of them until the group has a leader at term 2 or later, so the first
/// thing they hear of 1 to 3 is members that moved on. Those members founded counting on
/// 4's and 5's very founding hellos (they quote their nonces): 4 and 5 found too and
/// join the running group as voters the leader replicates to, instead of stopping with
/// lost data (what they did before the nonces).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_founders_found_and_join_when_the_group_was_founded_on_their_hellos() {
    let ids: [NodeId; 5] = [1, 2, 3, 4, 5];
    let net = MemNetwork::new();
    let group = GroupId::random();
    // The in-process transport does not use the addresses.
    let peers = ids.map(|p| (p, SocketAddr::from(([127, 0, 0, 1], 7000 + p as u16))));
    let (open_tx, open_rx) = watch::channel(false);
    let mut nodes: BTreeMap<NodeId, Node> = BTreeMap::new();
    // The slow founders first, so that the others hear their hellos when they start.
    for id in [4, 5, 1, 2, 3] {
        let config = Config::builder(id)
            .peers(peers)
            .timing(tenure_harness::cluster::test_timing())
            .found(group)
            .build();
        let (transport, inbound) = net.endpoint(id);
        let inbound = if id >= 4 {
            gate(inbound, vec![1, 2, 3], open_rx.clone())
        } else {
            inbound
        };
        let store = MemStore::open(MemDisk::for_node(id));
        let node = Node::start_with(config, store, Arc::new(transport), inbound)
            .await
            .unwrap_or_else(|e| panic!("node {id} does not start: {e}"));
        nodes.insert(id, node);
    }
    let (leader, term) = wait_for(
        "nodes 1 to 3 elect a leader at term 2 or later",
        LONG,
        || {
            nodes.iter().find_map(|(id, n)| {
                let l = n.leadership();
                (l.role == Role::Leader && l.term >= 2).then_some((*id, l.term))
            })
        },
    )
    .await;
    assert!(
        leader <= 3,
        "node {leader} leads while 4 and 5 are held back"
    );
    for id in [4, 5] {
        assert_eq!(
            nodes[&id].leadership().role,
            Role::Founding,
            "node {id} must still wait for 1 to 3"
        );
    }

    open_tx.send_replace(true);
    for id in [4, 5] {
        let node = &nodes[&id];
        let stopped = wait_for(
            &format!("node {id} founds and follows the leader"),
            LONG,
            || {
                let l = node.leadership();
                if l.role == Role::Stopped {
                    return Some(true);
                }
                (l.role == Role::Follower && l.leader.is_some() && l.term >= term).then_some(false)
            },
        )
        .await;
        if stopped {
            panic!(
                "node {id} stopped instead of founding: {:?}",
                node.join().await
            );
        }
    }
    // The leader replicates to them: an entry it commits after they joined reaches both.
    let leader_now = wait_for("one leader", LONG, || {
        nodes
            .iter()
            .find(|(_, n)| n.leadership().role == Role::Leader)
            .map(|(id, _)| *id)
    })
    .await;
    let target = nodes[&leader_now].status().await.expect("status").commit;
    let deadline = tokio::time::Instant::now() + LONG;
    for id in [4, 5] {
        loop {
            let status = nodes[&id].status().await.expect("status");
            if status.applied >= target && status.members.is_voter(id) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {id} did not catch up to {target}: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let status = nodes[&leader_now].status().await.expect("status");
    assert_eq!(
        status.peers_reachable, 5,
        "the leader reaches every voter: {status:?}"
    );
    for n in nodes.values() {
        n.kill().await;
    }
}
