//! Disaster recovery (`docs/design.md`, section 6, "Disaster recovery"): every member
//! loses its data folder; the group is founded again from a backup taken through the
//! admin API, and a fence that accepted the old leaders' tokens accepts the new leaders'
//! at once (real QUIC on loopback, RocksDB, SQLite fences).

mod support;

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use support::cluster::{wait_for, Cluster};
use tenure::admin::{self, Client};
use tenure::election::election_of_term;
use tenure::transport::tls::{OperatorIdentity, TlsIdentity};
use tenure::{ElectionOptions, FencingToken, Lease, Node, NodeId, Role, SqliteFence};

const LONG: Duration = Duration::from_secs(30);
const SHARD: &str = "shard-0";

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

/// The lease of named election `name` from whichever node leads it.
async fn election_lease(c: &Cluster, name: &str) -> (NodeId, Lease) {
    let leader = wait_for("a leader of the named election", LONG, || {
        c.nodes.iter().find_map(|(id, n)| {
            let view = n.elections().borrow().clone();
            view.get(name)
                .is_some_and(|l| l.role == Role::Leader)
                .then_some(*id)
        })
    })
    .await;
    let lease = tokio::time::timeout(LONG, c.node(leader).election(name).lease())
        .await
        .expect("the named election's leader gets its lease")
        .expect("a lease");
    (leader, lease)
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
    // The file operators keep: it reads back as it was written.
    let backup = tenure::backup::Backup::from_json(&backup.to_json()).expect("reads back");

    // Every member loses its data folder.
    for id in [1, 2, 3] {
        c.kill(id).await;
        std::fs::remove_dir_all(c.dir.path().join(format!("data-{id}"))).unwrap();
    }
    // Founded again from the backup: the same group, every election above its terms.
    c.restore = Some(Arc::new(backup.clone()));
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
    assert_eq!(catalog.len(), 1);
    assert_eq!(catalog[0].name, SHARD);
    assert_eq!(catalog[0].id, backup.elections[SHARD].id);
    let (_, shard_lease) = election_lease(&c, SHARD).await;
    let new_shard = shard_lease.token();
    assert_eq!(
        election_of_term(new_shard.term()),
        election_of_term(old_shard.term())
    );
    fence_write(&shard_fence, &mut db, new_shard);
    assert!(new_shard > old_shard);
    // A new election gets a new id: ids are never reused.
    let created = c
        .node(new_leader)
        .create_election("shard-1", ElectionOptions::new())
        .await
        .expect("create another election");
    assert_eq!(created.id, backup.next_election_id);
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
    let mut c = Cluster::unstarted(3, support::cluster::test_timing(), tenure::ReadMode::Safe);
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
