//! Founding a group once, and data folders that are not what they seem (real QUIC on
//! loopback, RocksDB in temporary folders). `docs/design.md`, section 6, has the
//! argument; each test names the rule it checks.
//!
//! The rule that matters most: a node whose data folder was lost, restarted with the
//! very configuration it always runs with (a unit file keeps `--found`), must not come
//! back as a voter that forgot its vote and log.

mod support;

use std::path::Path;
use std::time::Duration;

use support::cluster::{wait_for, Cluster};
use tenure::error::StopCause;
use tenure::error::StorageError;
use tenure::{Node, Role, StartError};

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
    let mut c = Cluster::unstarted(3, support::cluster::test_timing(), tenure::ReadMode::Safe);
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
