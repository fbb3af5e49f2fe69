//! `LeaderTask::for_elections`: one task per named election a node leads, with that
//! election's lease, cancelled the moment the lease is lost; real nodes over QUIC with
//! RocksDB (as `tests/named/elections.rs` starts them). Every task of every node writes into
//! one shared log, which is judged at the end: never two tasks of one name at once, and
//! none begins before the previous holder's lease of that name stopped protecting.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::election::election_of_term;
use tenure::runner::{LeaderTask, LeaderTaskHandle};
use tenure::{ElectionOptions, Lease, LostReason, NodeId};
use tenure_harness::cluster::{wait_for, Cluster};
use tokio::time::Instant;

const T: Duration = Duration::from_secs(20);

/// One task run as the shared log saw it.
#[derive(Debug, Clone)]
struct Run {
    node: NodeId,
    name: String,
    token: u64,
    /// When the driver granted the lease, and when the task's future began.
    granted: Instant,
    started: Instant,
    /// When the task's future was dropped (cancelled).
    ended: Option<Instant>,
    /// Why its lease ended, and until when it protected: the revocation for a handover,
    /// its validity otherwise (a killed node's lease protects until it runs out).
    reason: Option<LostReason>,
    protected_until: Option<Instant>,
}

type Log = Arc<Mutex<Vec<Run>>>;

/// Records the end of a run when the task's future is dropped.
struct Ends {
    log: Log,
    idx: usize,
    lease: Lease,
}

impl Drop for Ends {
    fn drop(&mut self) {
        let mut log = self.log.lock().unwrap();
        let r = &mut log[self.idx];
        r.ended = Some(Instant::now());
        r.reason = self.lease.lost_reason();
        r.protected_until = match r.reason {
            Some(LostReason::HandedOver | LostReason::Removed) => self.lease.ended_at(),
            _ => Some(self.lease.valid_until()),
        };
    }
}

/// Runs `LeaderTask::for_elections` on node `id`: every task logs itself, confirms its
/// lease in a loop and waits to be cancelled.
fn spawn_tasks(c: &Cluster, id: NodeId, log: &Log) -> LeaderTaskHandle {
    let log = log.clone();
    LeaderTask::for_elections(c.node(id).clone()).spawn(move |name, lease| {
        let log = log.clone();
        async move {
            let idx = {
                let mut l = log.lock().unwrap();
                l.push(Run {
                    node: id,
                    name: name.to_string(),
                    token: lease.token().term(),
                    granted: lease.granted_at(),
                    started: Instant::now(),
                    ended: None,
                    reason: None,
                    protected_until: None,
                });
                l.len() - 1
            };
            let _ends = Ends {
                log,
                idx,
                lease: lease.clone(),
            };
            // Work with the token until cancelled; the runner, not the task, notices
            // the loss.
            loop {
                let _ = lease.confirm().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    })
}

/// The running task of `name` (not yet ended), if exactly one runs.
fn running(log: &Log, name: &str) -> Option<Run> {
    let l = log.lock().unwrap();
    let r: Vec<&Run> = l
        .iter()
        .filter(|r| r.name == name && r.ended.is_none())
        .collect();
    (r.len() == 1).then(|| r[0].clone())
}

/// Waits until `name` has a leased leader among `ids` and a task runs there with its
/// token; the task's run.
async fn task_of_leader(c: &Cluster, ids: &[NodeId], log: &Log, name: &str) -> Run {
    wait_for(&format!("a task of {name} on its leader"), T, || {
        let (leader, term) = c.named_leader(ids, name)?;
        running(log, name).filter(|r| r.node == leader && r.token == term)
    })
    .await
}

/// No two runs of one name overlap, and no run began before the previous run's lease
/// stopped protecting (or was granted before it).
fn assert_never_two_at_once(log: &Log) {
    let runs = log.lock().unwrap().clone();
    let mut by_name: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for r in &runs {
        by_name.entry(&r.name).or_default().push(r);
    }
    for (name, mut rs) in by_name {
        rs.sort_by_key(|r| r.started);
        for w in rs.windows(2) {
            let (a, b) = (w[0], w[1]);
            let ended = a.ended.unwrap_or_else(|| {
                panic!(
                    "{name}: a run of node {} still runs while node {} started one: {a:?} {b:?}",
                    a.node, b.node
                )
            });
            assert!(
                ended <= b.started,
                "{name}: two tasks at once: {a:?} ended after {b:?} started"
            );
            assert!(
                b.token > a.token,
                "{name}: tokens go back: {a:?} then {b:?}"
            );
            if a.node != b.node {
                let until = a.protected_until.expect("an ended run's lease end");
                assert!(
                    until <= b.granted,
                    "{name}: node {}'s lease was granted while node {}'s still protected: {a:?} {b:?}",
                    b.node,
                    a.node
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_task_per_led_election_stopped_on_transfer_kill_and_remove() {
    let mut c = Cluster::start(3).await;
    let mut ids: Vec<NodeId> = vec![1, 2, 3];
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let mut handles: BTreeMap<NodeId, LeaderTaskHandle> = ids
        .iter()
        .map(|id| (*id, spawn_tasks(&c, *id, &log)))
        .collect();
    let names = ["a", "b", "c", "d"];
    let mut infos = BTreeMap::new();
    for name in names {
        let (root, _) = c.steady_leader(T).await;
        let info = c
            .node(root)
            .create_election(name, ElectionOptions::new())
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        infos.insert(name, info);
    }
    // A task per election on its leader, with the election's token.
    for name in names {
        let run = task_of_leader(&c, &ids, &log, name).await;
        assert_eq!(election_of_term(run.token), infos[name].id, "{run:?}");
    }

    // A transfer: the old leader's task ends (handed over), the new one's starts.
    let before = task_of_leader(&c, &ids, &log, "a").await;
    let to = ids.iter().copied().find(|i| *i != before.node).unwrap();
    let moved = c
        .node(before.node)
        .election("a")
        .transfer_leadership(Some(to))
        .await
        .expect("transfer a");
    assert_eq!(moved, to);
    let after = wait_for("a's task on the new leader", T, || {
        running(&log, "a").filter(|r| r.node == to && r.token > before.token)
    })
    .await;
    let old = log.lock().unwrap()[..]
        .iter()
        .find(|r| r.name == "a" && r.token == before.token && r.node == before.node)
        .cloned()
        .unwrap();
    assert_eq!(old.reason, Some(LostReason::HandedOver), "{old:?}");
    assert!(old.ended.unwrap() <= after.started);

    // A kill: the victim's tasks end with its leases, and each of its elections gets a
    // task on a live node.
    let b_run = task_of_leader(&c, &ids, &log, "b").await;
    let victim = b_run.node;
    let held: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.node == victim && r.ended.is_none())
        .map(|r| r.name.clone())
        .collect();
    assert!(held.contains(&"b".to_string()));
    c.kill(victim).await;
    ids.retain(|i| *i != victim);
    let h = handles.remove(&victim).unwrap();
    tokio::time::timeout(T, h.stop())
        .await
        .expect("the killed node's runner stops");
    wait_for("the killed node's tasks ended", T, || {
        let l = log.lock().unwrap();
        (!l.iter().any(|r| r.node == victim && r.ended.is_none())).then_some(())
    })
    .await;
    for name in &held {
        let run = task_of_leader(&c, &ids, &log, name).await;
        assert_ne!(run.node, victim);
    }

    // A removal: the holder's task ends (removed) and no node starts one again.
    let c_run = task_of_leader(&c, &ids, &log, "c").await;
    let (root, _) = c.steady_leader(T).await;
    c.node(root).remove_election("c").await.expect("remove c");
    wait_for("c's task ended as removed", T, || {
        let l = log.lock().unwrap();
        l.iter()
            .find(|r| r.name == "c" && r.token == c_run.token)
            .filter(|r| r.ended.is_some())
            .map(|r| r.reason)
    })
    .await
    .filter(|r| *r == LostReason::Removed)
    .expect("c's lease was lost as removed");
    // Elections created later are picked up: a new one, and the removed name again
    // (a new incarnation, with tokens above the old one's).
    for name in ["e", "c"] {
        let (root, _) = c.steady_leader(T).await;
        let info = c
            .node(root)
            .create_election(name, ElectionOptions::new())
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        let run = task_of_leader(&c, &ids, &log, name).await;
        assert_eq!(election_of_term(run.token), info.id, "{run:?}");
        if name == "c" {
            assert!(run.token > c_run.token);
        }
    }
    // d and b still run once each.
    for name in ["b", "d"] {
        task_of_leader(&c, &ids, &log, name).await;
    }
    // Stopping the runners ends every task.
    for (_, h) in std::mem::take(&mut handles) {
        tokio::time::timeout(T, h.stop())
            .await
            .expect("runner stops");
    }
    assert!(
        !log.lock().unwrap().iter().any(|r| r.ended.is_none()),
        "a task outlived its runner"
    );
    assert_never_two_at_once(&log);
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_election_ends_its_runner_and_the_root_runner_is_unaffected() {
    let c = Cluster::start(3).await;
    let ids = [1, 2, 3];
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = ids.iter().map(|id| spawn_tasks(&c, *id, &log)).collect();
    // The root's own runner, as before: it sees root tokens only.
    let root_tokens = Arc::new(Mutex::new(Vec::new()));
    let rt = root_tokens.clone();
    let (root, root_term) = c.steady_leader(T).await;
    let root_task = LeaderTask::new(c.node(root).clone()).spawn(move |lease| {
        let rt = rt.clone();
        async move {
            rt.lock().unwrap().push(lease.token().term());
        }
    });
    c.node(root)
        .create_election("only", ElectionOptions::new())
        .await
        .unwrap();
    let run = task_of_leader(&c, &ids, &log, "only").await;
    c.node(root).remove_election("only").await.unwrap();
    wait_for("the task of the removed election ended", T, || {
        let l = log.lock().unwrap();
        (!l.iter().any(|r| r.ended.is_none())).then_some(())
    })
    .await;
    // Nothing starts again for the removed name while the group runs on.
    let (root2, _) = c.steady_leader(T).await;
    c.node(root2)
        .create_election("other", ElectionOptions::new())
        .await
        .unwrap();
    task_of_leader(&c, &ids, &log, "other").await;
    assert_eq!(
        log.lock()
            .unwrap()
            .iter()
            .filter(|r| r.name == "only")
            .count(),
        1,
        "{run:?}"
    );
    wait_for("the root runner ran with the root's token", T, || {
        root_tokens.lock().unwrap().first().copied()
    })
    .await;
    let first = root_tokens.lock().unwrap()[0];
    assert_eq!(election_of_term(first), 0, "the root's token {first}");
    assert!(first >= root_term);
    root_task.stop().await;
    for h in handles {
        h.stop().await;
    }
    assert_never_two_at_once(&log);
    c.shutdown().await;
}
