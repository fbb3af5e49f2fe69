//! Disaster recovery (`docs/design.md`, section 6, "Disaster recovery"): every member
//! loses its data folder; the group is founded again from a backup taken through the
//! admin API, and a fence that accepted the old leaders' tokens accepts the new leaders'
//! at once (real QUIC on loopback, RocksDB, SQLite fences).

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use tenure::admin::{self, Client};
use tenure::backup::{Backup, RestorePlan};
use tenure::election::{election_of_term, term_floor};
use tenure::transport::tls::{OperatorIdentity, TlsIdentity};
use tenure::{ElectionOptions, FencingToken, Lease, Node, NodeId, Role, SqliteFence};
use tenure_harness::cluster::{wait_for, Cluster};

const LONG: Duration = Duration::from_secs(30);
const SHARD: &str = "shard-0";
/// A named election suspended when the backup is taken.
const PAUSED: &str = "paused";

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

/// The lease of named election `name` from whichever node leads it (asked again if the
/// leadership moves meanwhile, as a resumed election's does).
async fn election_lease(c: &Cluster, name: &str) -> (NodeId, Lease) {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let leader = wait_for("a leader of the named election", LONG, || {
            c.nodes.iter().find_map(|(id, n)| {
                let l = n.election(name).leadership();
                (l.role == Role::Leader).then_some(*id)
            })
        })
        .await;
        let election = c.node(leader).election(name);
        if let Ok(lease) = tokio::time::timeout(Duration::from_secs(1), election.lease()).await {
            return (leader, lease.expect("a lease"));
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader of {name} got its lease within {LONG:?}"
        );
    }
}

async fn root_lease(node: &Node) -> Lease {
    tokio::time::timeout(LONG, node.lease())
        .await
        .expect("the leader gets its lease")
        .expect("a lease")
}

fn fence_write(fence: &SqliteFence, conn: &mut Connection, token: FencingToken) {
    fence
        .write(conn, token, |_| Ok(()))
        .unwrap_or_else(|e| panic!("the fence refuses token {token:?}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_founded_again_from_a_backup_hands_out_tokens_above_every_old_one() {
    let mut c = Cluster::start(3).await;
    let (mut leader, mut term) = c.steady_leader(LONG).await;
    c.node(leader)
        .create_election(SHARD, ElectionOptions::new())
        .await
        .expect("create a named election");
    // Lead to term 40 and beyond: hand over again and again.
    while term < 40 {
        let _ = c.node(leader).transfer_leadership(None).await;
        let (l, t) = c.steady_leader(LONG).await;
        (leader, term) = (l, t);
    }
    // The resources: one fence for the group's own election, one for the named one.
    let mut db = Connection::open_in_memory().unwrap();
    let root_fence = SqliteFence::install(&db, "root").unwrap();
    let shard_fence = SqliteFence::install(&db, SHARD).unwrap();
    let old_root = root_lease(c.node(leader)).await.token();
    assert!(old_root.term() >= 40, "{old_root:?}");
    fence_write(&root_fence, &mut db, old_root);
    let (_, shard_lease) = election_lease(&c, SHARD).await;
    let old_shard = shard_lease.token();
    drop(shard_lease);
    fence_write(&shard_fence, &mut db, old_shard);
    // An election an operator suspended: the restored group keeps it suspended.
    c.node(leader)
        .create_election(PAUSED, ElectionOptions::new())
        .await
        .expect("create a named election");
    let (_, paused_lease) = election_lease(&c, PAUSED).await;
    let old_paused = paused_lease.token();
    drop(paused_lease);
    let paused = c.node(leader).suspend_election(PAUSED).await.unwrap();
    assert!(paused.suspended);

    // The backup, through the admin API of the leader.
    let identity = TlsIdentity::from_dir(c.dir.path().join("certs"), leader).unwrap();
    let server = admin::serve(
        c.node(leader).clone(),
        "127.0.0.1:0".parse().unwrap(),
        &identity,
        logger(),
    )
    .unwrap();
    let operator = OperatorIdentity::from_dir(c.dir.path().join("certs")).unwrap();
    let client = Client::connect(server.local_addr(), &operator, Some(leader))
        .await
        .expect("connect to the admin endpoint");
    let backup = client.backup().await.expect("a backup");
    server.close().await;
    assert_eq!(backup.group, c.group);
    assert!(backup.taken_from_leader);
    assert!(backup.term >= old_root.term(), "{backup:?}");
    assert_eq!(backup.members.voters, vec![1, 2, 3]);
    assert!(
        backup.elections[SHARD].term >= old_shard.term(),
        "{backup:?}"
    );
    assert!(!backup.history.is_empty());
    assert!(backup.elections[PAUSED].suspended && !backup.elections[SHARD].suspended);
    // The file operators keep: it reads back as it was written.
    let backup = Backup::from_json(&backup.to_json()).expect("reads back");
    assert!(backup.taken_unix_ms > 0);

    // An election created after the backup: the backup does not know its id or tokens.
    let late = c
        .node(leader)
        .create_election("late", ElectionOptions::new())
        .await
        .expect("create an election after the backup");
    assert_eq!(late.id, backup.next_election_id);
    let (_, late_lease) = election_lease(&c, "late").await;
    let late_token = late_lease.token();
    drop(late_lease);

    // Every member loses its data folder.
    for id in [1, 2, 3] {
        c.kill(id).await;
        std::fs::remove_dir_all(c.dir.path().join(format!("data-{id}"))).unwrap();
    }
    // Founded again from a plan of the backup: a new group, every election above its
    // terms.
    let plan = RestorePlan::make(backup.clone()).expect("a plan");
    let plan = RestorePlan::from_json(&plan.to_json()).expect("the plan reads back");
    assert_ne!(plan.group, backup.group);
    assert_eq!(plan.origin, backup.group);
    c.restore = Some(Arc::new(plan.clone()));
    for id in [1, 2, 3] {
        c.start_node(id).await;
    }
    let (new_leader, new_term) = c.steady_leader(LONG).await;
    assert!(new_term > backup.term, "{new_term} after {}", backup.term);
    let new_root = root_lease(c.node(new_leader)).await.token();
    fence_write(&root_fence, &mut db, new_root);
    assert_eq!(root_fence.highest(&db).unwrap(), new_root);

    // The catalog came back with its ids, and the named election hands out tokens above
    // its old ones, in its own range.
    let catalog = c.node(new_leader).list_elections().await.unwrap();
    assert_eq!(catalog.len(), 2);
    assert_eq!(catalog[1].name, SHARD);
    assert_eq!(catalog[1].id, backup.elections[SHARD].id);
    assert!(catalog[0].suspended && !catalog[1].suspended, "{catalog:?}");
    for id in [1, 2, 3] {
        let paused = c.node(id).election(PAUSED);
        tenure_harness::cluster::wait_for("the restored election is suspended", LONG, || {
            let l = paused.leadership();
            (l.suspended && !l.leased).then_some(())
        })
        .await;
    }
    let resumed = c.node(new_leader).resume_election(PAUSED).await.unwrap();
    assert!(!resumed.suspended);
    let (_, paused_lease) = election_lease(&c, PAUSED).await;
    assert!(paused_lease.token() > old_paused);
    drop(paused_lease);
    let (_, shard_lease) = election_lease(&c, SHARD).await;
    let new_shard = shard_lease.token();
    assert_eq!(
        election_of_term(new_shard.term()),
        election_of_term(old_shard.term())
    );
    fence_write(&shard_fence, &mut db, new_shard);
    assert!(new_shard > old_shard);
    // A new election gets a new id, above those the lost group may have given after the
    // backup: ids are never reused, and its tokens are above the late election's.
    let created = c
        .node(new_leader)
        .create_election("shard-1", ElectionOptions::new())
        .await
        .expect("create another election");
    assert_eq!(created.id, plan.next_election_id());
    assert!(created.id > late.id);
    let (_, created_lease) = election_lease(&c, "shard-1").await;
    assert!(created_lease.token() > late_token);
    assert_eq!(
        election_of_term(created_lease.token().term()),
        created.id,
        "in its own range"
    );
    assert!(created_lease.token().term() > term_floor(created.id) + plan.margin);
    drop(created_lease);
    // The unit file keeps `--restore`: a restart opens the store, it restores nothing.
    let follower = [1, 2, 3].into_iter().find(|id| *id != new_leader).unwrap();
    c.restart(follower).await;
    let (_, t) = c.steady_leader(LONG).await;
    assert!(t >= new_term);
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

/// Founders must agree on the floor: a first member started without the backup does
/// not found with those that have it (none founds), and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn founders_that_disagree_on_the_floor_do_not_found() {
    let mut c = Cluster::unstarted(
        3,
        tenure_harness::cluster::test_timing(),
        tenure::ReadMode::Safe,
    );
    for id in [1, 2] {
        let mut config = c.config(id);
        config.term_floor = 1000;
        let node = Node::start(config).await.expect("start");
        c.nodes.insert(id, node);
    }
    c.start_node(3).await; // no floor
    let waited = tokio::time::timeout(Duration::from_millis(1500), async {
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
        "a node founded although the floors differ: {:?}",
        c.nodes.values().map(Node::leadership).collect::<Vec<_>>()
    );
    // Given the same floor, they found, at it.
    c.kill(3).await;
    let mut config = c.config(3);
    config.term_floor = 1000;
    c.nodes.insert(3, Node::start(config).await.expect("start"));
    let (_, term) = c.steady_leader(LONG).await;
    assert!(term > 1000, "{term}");
    c.shutdown().await;
}

/// The terms of every lease the cluster's nodes held.
fn lease_terms(c: &Cluster) -> std::collections::BTreeSet<u64> {
    c.leases.lock().unwrap().iter().map(|l| l.term).collect()
}

/// Founds nodes 1 to 3 of `c` from `plan`; the leader, and the tokens of its root lease
/// and of the first lease of election [`SHARD`].
async fn found_from(c: &mut Cluster, plan: &RestorePlan) -> (NodeId, FencingToken, FencingToken) {
    c.restore = Some(Arc::new(plan.clone()));
    for id in [1, 2, 3] {
        c.start_node(id).await;
    }
    let (leader, _) = c.steady_leader(LONG).await;
    let root = root_lease(c.node(leader)).await.token();
    let (_, shard) = election_lease(c, SHARD).await;
    (leader, root, shard.token())
}

/// One backup restored twice (a retried restore, a staging copy): each restore made its
/// own plan, so they are two groups whose nodes refuse each other, and no token is handed
/// out in both: the later plan starts above every token the earlier group handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_restores_of_one_backup_are_two_groups_that_share_no_token() {
    let mut a = Cluster::start(3).await;
    let (leader, _) = a.steady_leader(LONG).await;
    a.node(leader)
        .create_election(SHARD, ElectionOptions::new())
        .await
        .expect("create a named election");
    let _ = election_lease(&a, SHARD).await;
    let backup = a.node(leader).backup().await.expect("a backup");
    for id in [1, 2, 3] {
        a.kill(id).await;
        std::fs::remove_dir_all(a.dir.path().join(format!("data-{id}"))).unwrap();
    }
    a.leases.lock().unwrap().clear();

    // The first restore, on the same machines.
    let first = RestorePlan::make(backup.clone()).expect("a plan");
    let (_, a_root, a_shard) = found_from(&mut a, &first).await;

    // The second, elsewhere, with the same certificates, from a plan made later.
    let mut b = Cluster::unstarted(
        3,
        tenure_harness::cluster::test_timing(),
        tenure::ReadMode::Safe,
    );
    let certs = b.dir.path().join("certs");
    std::fs::remove_dir_all(&certs).unwrap();
    std::fs::create_dir(&certs).unwrap();
    for f in std::fs::read_dir(a.dir.path().join("certs")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), certs.join(f.file_name())).unwrap();
    }
    let second = RestorePlan::make(backup.clone()).expect("a plan");
    assert!(second.planned_unix_ms > first.planned_unix_ms);
    let (b_leader, b_root, b_shard) = found_from(&mut b, &second).await;

    // Three groups: the lost one and two restored ones.
    assert_ne!(first.group, second.group);
    assert!(first.group != backup.group && second.group != backup.group);
    // The later plan's tokens are above the earlier group's, in every election.
    assert!(
        b_root > a_root,
        "the later restore's token {b_root} is not above the earlier's {a_root}"
    );
    assert!(
        b_shard > a_shard,
        "the later restore's token {b_shard} is not above the earlier's {a_shard}"
    );
    assert_eq!(
        election_of_term(b_shard.term()),
        election_of_term(a_shard.term())
    );
    let (a_terms, b_terms) = (lease_terms(&a), lease_terms(&b));
    assert!(
        a_terms.is_disjoint(&b_terms),
        "a token handed out in both: {a_terms:?} and {b_terms:?}"
    );

    // A node of the second group given the first group's addresses (a staging copy
    // pointed at production): the first group's nodes refuse it, naming both groups.
    let refused_before: u64 = [1, 2, 3]
        .iter()
        .map(|id| a.node(*id).transport_stats().connections_refused)
        .sum();
    let stray = if b_leader == 1 { 2 } else { 1 };
    b.kill(stray).await;
    for id in [1, 2, 3] {
        if id != stray {
            b.addrs.insert(id, a.addrs[&id]);
        }
    }
    b.start_node(stray).await;
    wait_for("the first group refuses the second's node", LONG, || {
        let refused: u64 = [1, 2, 3]
            .iter()
            .map(|id| a.node(*id).transport_stats().connections_refused)
            .sum();
        (refused > refused_before).then_some(())
    })
    .await;
    let (_, a_term) = a.steady_leader(LONG).await;
    assert!(
        a_term < b_root.term(),
        "the first group went on below the second"
    );
    a.assert_leases_never_overlap();
    a.shutdown().await;
    b.shutdown().await;
}

/// A hand-edited backup or plan is refused where the worker reads it, naming the field:
/// an id above the largest (its term floor would drop the high bits), a plan that reuses
/// the backup's group, a backup given where a plan belongs.
#[test]
fn hand_edited_backups_and_plans_are_refused_naming_the_field() {
    let group = tenure::GroupId::random();
    let mut backup = tenure_harness::backup_taken_now(group, 7, vec![1, 2, 3]);
    backup.next_election_id = 16_777_217;
    backup.elections = [(
        "shard-0".to_string(),
        tenure::backup::BackupElection {
            id: 16_777_216,
            options: ElectionOptions::new(),
            term: 0,
            suspended: false,
        },
    )]
    .into();
    let text = backup.to_json();
    let e = Backup::from_json(&text).unwrap_err();
    assert!(e.starts_with("next_election_id"), "{e}");
    let text = text.replace("16777217", "8388608");
    let e = Backup::from_json(&text).unwrap_err();
    assert!(e.starts_with("elections.shard-0.id"), "{e}");
    let backup = Backup::from_json(&text.replace("16777216", "5").replace("8388608", "6"))
        .expect("a valid backup");
    let e = RestorePlan::from_json(&backup.to_json()).unwrap_err();
    assert!(e.contains("restore-plan"), "{e}");
    let mut plan = RestorePlan::make(backup.clone()).unwrap();
    plan.group = group;
    let e = RestorePlan::from_json(&plan.to_json()).unwrap_err();
    assert!(e.starts_with("group"), "{e}");
    // A backup taken more than 34 years before its plan: one term per millisecond since
    // would take the root past its range.
    let mut old = backup.clone();
    old.taken_unix_ms = 1;
    let e = RestorePlan::make(old).unwrap_err();
    assert!(e.starts_with("margin"), "{e}");
}
