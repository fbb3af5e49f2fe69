//! Named elections end to end (`docs/design.md`, section 11): real nodes over QUIC with
//! RocksDB, one worker group running the root election and named ones.

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

use tenure::election::{election_of_term, term_floor};
use tenure::{ElectionError, ElectionOptions, LostReason, NodeId, Role};
use tenure_harness::cluster::{wait_for, Cluster};

const T: Duration = Duration::from_secs(20);

async fn create_on_leader(c: &Cluster, name: &str) -> tenure::ElectionInfo {
    let (root, _) = c.steady_leader(T).await;
    c.node(root)
        .create_election(name, ElectionOptions::new())
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_named_election_elects_its_own_leader_with_tokens_in_its_range() {
    let c = Cluster::start(3).await;
    let ids = [1, 2, 3];
    let mut infos = Vec::new();
    for name in ["shard-0", "shard-1", "shard-2", "shard-3"] {
        infos.push(create_on_leader(&c, name).await);
    }
    // Ids count up from 1 in creation order, and every node applied the same catalog.
    assert_eq!(
        infos.iter().map(|i| i.id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    for id in ids {
        let listed = wait_for("every node applied the catalog", T, || {
            let n = c.node(id).clone();
            let l = futures_now(async move { n.list_elections().await.ok() })??;
            (l.len() == 4).then_some(l)
        })
        .await;
        assert_eq!(
            listed.iter().map(|i| i.id).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
    }
    for info in &infos {
        let (leader, term) = wait_for(&format!("a leased leader of {}", info.name), T, || {
            c.named_leader(&ids, &info.name)
        })
        .await;
        assert_eq!(
            election_of_term(term),
            info.id,
            "{}'s term {term}",
            info.name
        );
        assert!(term > term_floor(info.id));
        let lease = c.node(leader).election(&info.name).lease().await.unwrap();
        assert_eq!(lease.token().term(), term);
        assert_eq!(lease.confirm().await.unwrap().term(), term);
        // The record is a log entry of its own, proposed after the leader's empty
        // entry: the lease can be confirmed before it applies, so wait for it.
        let e = c.node(leader).election(&info.name);
        wait_for(
            &format!("{}'s tenure {term} recorded", info.name),
            T,
            || {
                history_now(&e)?
                    .into_iter()
                    .find(|r| r.term == term && r.leader == leader)
            },
        )
        .await;
    }
    // The root's own lease is unaffected: its token stays below every named range.
    let (root, root_term) = c.steady_leader(T).await;
    assert!(root_term < term_floor(1));
    assert_eq!(
        c.node(root).lease().await.unwrap().token().term(),
        root_term
    );
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

/// Polls a future once (the node's answers come from its driver within a turn; the
/// caller's `wait_for` retries).
fn futures_now<F: std::future::Future>(f: F) -> Option<F::Output> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        handle.block_on(async {
            tokio::time::timeout(Duration::from_millis(500), f)
                .await
                .ok()
        })
    })
}

/// Election `e`'s history as its node has applied it now (`None` if it did not answer:
/// the caller's `wait_for` asks again).
fn history_now(e: &tenure::Election) -> Option<Vec<tenure::TenureRecord>> {
    let e = e.clone();
    futures_now(async move { e.history().await.ok() })?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_is_changed_by_the_leader_and_names_are_checked() {
    let c = Cluster::start(3).await;
    let (root, _) = c.steady_leader(T).await;
    let follower = [1, 2, 3].into_iter().find(|i| *i != root).unwrap();
    match c
        .node(follower)
        .create_election("x", ElectionOptions::new())
        .await
    {
        Err(ElectionError::NotLeader { leader_hint }) => assert_eq!(leader_hint, Some(root)),
        other => panic!("a follower created an election: {other:?}"),
    }
    match c
        .node(root)
        .create_election("not a name", ElectionOptions::new())
        .await
    {
        Err(ElectionError::InvalidName { why, .. }) => assert!(why.contains("' '"), "{why}"),
        other => panic!("{other:?}"),
    }
    c.node(root)
        .create_election("x", ElectionOptions::new())
        .await
        .unwrap();
    assert!(matches!(
        c.node(root)
            .create_election("x", ElectionOptions::new())
            .await,
        Err(ElectionError::Exists(_))
    ));
    assert!(matches!(
        c.node(root).remove_election("nope").await,
        Err(ElectionError::NotFound(_))
    ));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_revokes_the_lease_and_a_name_created_again_hands_out_higher_tokens() {
    let c = Cluster::start(3).await;
    let ids = [1, 2, 3];
    let first = create_on_leader(&c, "ledger").await;
    let (leader, term) = wait_for("a leased leader of ledger", T, || {
        c.named_leader(&ids, "ledger")
    })
    .await;
    let old = c.node(leader).election("ledger").lease().await.unwrap();
    assert_eq!(old.token().term(), term);
    let (root, _) = c.steady_leader(T).await;
    let removed = c.node(root).remove_election("ledger").await.unwrap();
    assert_eq!(removed.id, first.id);
    assert!(removed.retired_above.term() > term);
    // The holder revoked its lease as it applied the removal.
    let reason = tokio::time::timeout(T, old.lost())
        .await
        .expect("lease lost");
    assert_eq!(reason, LostReason::Removed);
    assert!(old.confirm().await.is_err());
    for id in ids {
        wait_for("every node stopped running the removed election", T, || {
            (c.node(id).election("ledger").leadership().role == Role::Stopped).then_some(())
        })
        .await;
    }
    // Created again: a new id, so every token is above the old incarnation's.
    let again = create_on_leader(&c, "ledger").await;
    assert!(again.id > first.id);
    let (leader2, term2) = wait_for("a leased leader of the new ledger", T, || {
        c.named_leader(&ids, "ledger")
            .filter(|(_, t)| election_of_term(*t) == again.id)
    })
    .await;
    assert!(term2 > removed.retired_above.term());
    // A fence keyed by the name accepts the new incarnation and refuses the old token.
    let dir = tempfile::tempdir().unwrap();
    let mut conn = rusqlite::Connection::open(dir.path().join("fence.db")).unwrap();
    let fence = tenure::SqliteFence::install(&conn, "ledger").unwrap();
    fence.write(&mut conn, old.token(), |_| Ok(())).unwrap();
    let new = c.node(leader2).election("ledger").lease().await.unwrap();
    fence.write(&mut conn, new.token(), |_| Ok(())).unwrap();
    assert!(fence.write(&mut conn, old.token(), |_| Ok(())).is_err());
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_election_fails_over_when_its_leader_dies_and_survives_restarts() {
    let mut c = Cluster::start(3).await;
    let mut ids = vec![1, 2, 3];
    for name in ["a", "b", "c"] {
        create_on_leader(&c, name).await;
    }
    let mut before = BTreeMap::new();
    for name in ["a", "b", "c"] {
        let l = wait_for(&format!("a leased leader of {name}"), T, || {
            c.named_leader(&ids, name)
        })
        .await;
        before.insert(name, l);
    }
    let (victim, _) = before["a"];
    c.kill(victim).await;
    ids.retain(|i| *i != victim);
    for name in ["a", "b", "c"] {
        let (leader, term) = wait_for(&format!("{name} led by a live node"), T, || {
            c.named_leader(&ids, name)
        })
        .await;
        assert_ne!(leader, victim);
        if before[name].0 == victim {
            assert!(
                term > before[name].1,
                "{name}: a new term after the failover"
            );
        }
    }
    // The killed node comes back with every election it ran.
    c.restart(victim).await;
    ids.push(victim);
    for name in ["a", "b", "c"] {
        wait_for(&format!("{name} followed by the restarted node"), T, || {
            c.named_leader(&ids, name)
        })
        .await;
    }
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

/// How many named elections each running node leads with a lease, by its own view.
fn leaderships(c: &Cluster, ids: &[NodeId]) -> BTreeMap<NodeId, usize> {
    ids.iter()
        .map(|id| {
            let view = c.node(*id).elections().borrow().clone();
            let led = view
                .values()
                .filter(|l| l.role == Role::Leader && l.leased)
                .count();
            (*id, led)
        })
        .collect()
}

/// Waits until the running nodes lead `n` elections between them, each ⌊n/k⌋ or ⌈n/k⌉.
async fn spread_evenly(
    c: &Cluster,
    ids: &[NodeId],
    n: usize,
    what: &str,
) -> BTreeMap<NodeId, usize> {
    let k = ids.len();
    wait_for(what, Duration::from_secs(30), || {
        let counts = leaderships(c, ids);
        let total: usize = counts.values().sum();
        (total == n && counts.values().all(|c| *c == n / k || *c == n.div_ceil(k)))
            .then_some(counts)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaderships_spread_evenly_and_again_after_a_worker_returns() {
    let mut c = Cluster::start(5).await;
    let mut ids = vec![1, 2, 3, 4, 5];
    let (root, _) = c.steady_leader(T).await;
    for i in 0..16 {
        c.node(root)
            .create_election(&format!("shard-{i}"), ElectionOptions::new())
            .await
            .unwrap();
    }
    let counts = spread_evenly(&c, &ids, 16, "16 elections spread 3 or 4 per node").await;
    eprintln!("after start: {counts:?}");
    // A worker dies: its elections fail over to the others, and the spread follows.
    let victim = *counts.iter().max_by_key(|(_, n)| **n).unwrap().0;
    c.kill(victim).await;
    ids.retain(|i| *i != victim);
    let counts = spread_evenly(&c, &ids, 16, "16 elections over the 4 live nodes, 4 each").await;
    eprintln!("after killing node {victim}: {counts:?}");
    c.restart(victim).await;
    ids.push(victim);
    ids.sort_unstable();
    let counts = spread_evenly(&c, &ids, 16, "the returned node got its share back").await;
    assert!(counts[&victim] >= 3, "{counts:?}");
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_places_an_election_on_its_preferred_node() {
    let c = Cluster::start(3).await;
    let ids = [1, 2, 3];
    let (root, _) = c.steady_leader(T).await;
    let want = [1, 2, 3].into_iter().find(|i| *i != root).unwrap();
    c.node(root)
        .create_election("pinned", ElectionOptions::new().affinity([want]))
        .await
        .unwrap();
    for i in 0..5 {
        c.node(root)
            .create_election(&format!("free-{i}"), ElectionOptions::new())
            .await
            .unwrap();
    }
    wait_for(
        "pinned led by its preferred node",
        Duration::from_secs(30),
        || c.named_leader(&ids, "pinned").filter(|(l, _)| *l == want),
    )
    .await;
    spread_evenly(&c, &ids, 6, "6 elections, 2 per node").await;
    wait_for("pinned still on its preferred node", T, || {
        c.named_leader(&ids, "pinned").filter(|(l, _)| *l == want)
    })
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_elections_follow_a_replaced_member() {
    let mut c = Cluster::start(3).await;
    let (root, _) = c.steady_leader(T).await;
    for i in 0..6 {
        c.node(root)
            .create_election(&format!("e-{i}"), ElectionOptions::new())
            .await
            .unwrap();
    }
    spread_evenly(&c, &[1, 2, 3], 6, "6 elections over 3 nodes").await;
    // Node 3 is replaced by node 4, which joins: every election takes 4 in and drops 3.
    let old = if root == 3 { 2 } else { 3 };
    let addr = c.start_joining(4).await;
    let (root, _) = c.steady_leader(T).await;
    c.node(root).add_learner(4, addr).await.unwrap();
    wait_for("node 4 caught up as a learner", T, || {
        (c.node(4).leadership().role == Role::Learner).then_some(())
    })
    .await;
    let deadline = tokio::time::Instant::now() + T;
    loop {
        match c.node(root).replace_member(old, 4).await {
            Ok(_) => break,
            Err(tenure::MembershipError::LearnerBehind { .. })
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await; // the learner catches up
            }
            Err(e) => panic!("replace {old} by 4: {e}"),
        }
    }
    c.kill(old).await;
    let ids: Vec<NodeId> = [1, 2, 3, 4].into_iter().filter(|i| *i != old).collect();
    let counts = spread_evenly(
        &c,
        &ids,
        6,
        "6 elections over the new membership, node 4 included",
    )
    .await;
    assert_eq!(counts[&4], 2, "{counts:?}");
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_unknown_and_removed_elections_are_counted_and_dropped() {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use tenure::storage::{MemDisk, MemStore};
    use tenure::transport::mem::MemNetwork;
    use tenure::transport::Transport;

    let net = MemNetwork::new();
    let group = tenure::GroupId::random();
    let ids: [NodeId; 3] = [1, 2, 3];
    let mut nodes = Vec::new();
    for id in ids {
        let peers = ids.map(|p| (p, SocketAddr::from(([127, 0, 0, 1], 7000 + p as u16))));
        let config = tenure::Config::builder(id)
            .peers(peers)
            .timing(tenure_harness::cluster::test_timing())
            .found(group)
            .build();
        let (transport, inbound) = net.endpoint(id);
        let node = tenure::Node::start_with(
            config,
            MemStore::open(MemDisk::for_node(id)),
            Arc::new(transport),
            inbound,
        )
        .await
        .unwrap();
        nodes.push(node);
    }
    let root = wait_for("a root leader", T, || {
        nodes
            .iter()
            .position(|n| n.leadership().leased)
            .map(|i| i as NodeId + 1)
    })
    .await;
    let leader = &nodes[root as usize - 1];
    leader
        .create_election("kept", ElectionOptions::new())
        .await
        .unwrap();
    let gone = leader
        .create_election("gone", ElectionOptions::new())
        .await
        .unwrap();
    leader.remove_election("gone").await.unwrap();
    let target = ids.into_iter().find(|i| *i != root).unwrap();
    let t = &nodes[target as usize - 1];
    // The target applied the removal and its retirement: it runs "kept" alone.
    wait_for("the removed election retired at the target", T, || {
        let running = t
            .metrics_text()
            .lines()
            .find(|l| l.starts_with("tenure_named_elections{"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
        (t.election("gone").leadership().role == Role::Stopped && running == Some(1)).then_some(())
    })
    .await;
    // Another endpoint sends messages of an id nobody created yet and of the removed one:
    // both are counted and dropped before anything else looks at them.
    let (stranger, _inbox) = net.endpoint(99);
    let hb = |term: u64| {
        let mut m = raft::eraftpb::Message::default();
        m.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
        m.from = 99;
        m.to = target;
        m.term = term;
        m
    };
    let text = || t.metrics_text();
    let count = |name: &str| -> u64 {
        text()
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    stranger.send_election(1000, hb(term_floor(1000) + 1));
    stranger.send_election(gone.id, hb(term_floor(gone.id) + 1));
    wait_for("both counted", T, || {
        (count("tenure_named_election_messages_unknown_total") >= 1
            && count("tenure_named_election_messages_removed_total") >= 1)
            .then_some(())
    })
    .await;
    // The node is unharmed: the kept election still has a leased leader.
    wait_for("kept still led", T, || {
        ids.iter()
            .any(|i| {
                let l = nodes[*i as usize - 1].election("kept").leadership();
                l.leased && l.role == Role::Leader
            })
            .then_some(())
    })
    .await;
    assert!(t.leadership().role != Role::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_hands_every_led_election_over_and_transfers_work_per_name() {
    let c = Cluster::start(3).await;
    let ids = [1, 2, 3];
    let (root, _) = c.steady_leader(T).await;
    for i in 0..6 {
        c.node(root)
            .create_election(&format!("s-{i}"), ElectionOptions::new())
            .await
            .unwrap();
    }
    spread_evenly(&c, &ids, 6, "6 elections, 2 per node").await;
    // A transfer of one name, to a named node.
    // (Every node's view agrees on the leader a moment after the spread settled.)
    let (from, term) = wait_for("s-0 led, every node agreeing", T, || {
        c.named_leader(&ids, "s-0")
    })
    .await;
    let to = ids.into_iter().find(|i| *i != from).unwrap();
    assert_eq!(
        c.node(from)
            .election("s-0")
            .transfer_leadership(Some(to))
            .await
            .unwrap(),
        to
    );
    let (now, term2) = wait_for("s-0 led by the target", T, || {
        c.named_leader(&ids, "s-0").filter(|(l, _)| *l == to)
    })
    .await;
    assert!(term2 > term && now == to);
    // A follower of s-0 cannot hand it over.
    let other = ids.into_iter().find(|i| *i != to).unwrap();
    assert!(matches!(
        c.node(other).election("s-0").transfer_leadership(None).await,
        Err(tenure::TransferError::NotLeader { leader_hint: Some(l) }) if l == to
    ));
    // Shutting a node down hands over what it leads: every one of its elections begins a
    // tenure by handover elsewhere.
    let victim = *leaderships(&c, &ids)
        .iter()
        .max_by_key(|(_, n)| **n)
        .unwrap()
        .0;
    let names: Vec<String> = c
        .node(victim)
        .elections()
        .borrow()
        .iter()
        .filter(|(_, l)| l.role == Role::Leader)
        .map(|(n, _)| n.clone())
        .collect();
    assert!(!names.is_empty());
    c.node(victim).shutdown().await.unwrap();
    let alive: Vec<NodeId> = ids.into_iter().filter(|i| *i != victim).collect();
    for name in &names {
        let (leader, term) = wait_for(&format!("{name} led elsewhere"), T, || {
            c.named_leader(&alive, name)
        })
        .await;
        let e = c.node(leader).election(name);
        let rec = wait_for(&format!("{name}'s tenure {term} recorded"), T, || {
            history_now(&e)?.into_iter().find(|r| r.term == term)
        })
        .await;
        assert_eq!(
            rec.started_by,
            tenure::TenureStart::Handover,
            "{name}: {rec:?}"
        );
    }
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

/// Creates `name` on whichever node leads the root, again after a change of leader.
async fn create_anywhere(c: &Cluster, name: &str) -> Result<tenure::ElectionInfo, ElectionError> {
    loop {
        let (root, _) = c.steady_leader(T).await;
        match c
            .node(root)
            .create_election(name, ElectionOptions::new())
            .await
        {
            Err(ElectionError::NotLeader { .. }) => continue,
            other => return other,
        }
    }
}

/// The catalog's byte limit keeps the root's snapshot inside one frame (`docs/design.md`,
/// section 9): a group whose catalog is full of 128-byte names still takes a new member,
/// which catches up from a snapshot. Scaled down (a 64 KiB frame, a catalog of three
/// quarters of it, as `MAX_CATALOG_BYTES` is of `DEFAULT_MAX_FRAME`) so that a few hundred
/// elections fill it. Mutation `catalog-ignores-its-byte-limit` lets the catalog grow past
/// the frame: the learner never catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_joins_a_group_whose_catalog_is_at_its_limit() {
    const FRAME: usize = 64 * 1024;
    let mut c = Cluster::unstarted(
        3,
        tenure_harness::cluster::test_timing(),
        tenure::ReadMode::Safe,
    );
    c.compact_after = 32; // the learner needs the snapshot: the log below it is gone
    c.tweak = Some(|config| {
        let hooks = config.hooks_mut();
        hooks.max_frame = Some(FRAME);
        hooks.catalog_limit = FRAME as u64 / 4 * 3;
    });
    for id in 1..=3 {
        c.start_node(id).await;
    }
    // 400 elections of 128-byte names would take 87 kB of catalog: more than a frame.
    let (mut created, mut refused) = (Vec::new(), None);
    for i in 0..400 {
        let name = format!("{i:0>128}");
        match create_anywhere(&c, &name).await {
            Ok(_) => created.push(name),
            Err(ElectionError::Full(why)) => {
                refused.get_or_insert(why);
            }
            Err(e) => panic!("create {name}: {e}"),
        }
    }
    eprintln!("created {} elections; refused: {refused:?}", created.len());
    let addr = c.start_joining(4).await;
    let (root, _) = c.steady_leader(T).await;
    c.node(root).add_learner(4, addr).await.unwrap();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let has = c.node(4).list_elections().await.unwrap().len();
        if has == created.len() && c.node(4).leadership().role == Role::Learner {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node 4 holds {has} of the catalog's {} elections after {T:?}; the root's \
             outbound messages dropped as too large: {}",
            created.len(),
            c.node(root).transport_stats().dropped_too_large
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let why = refused.expect("the catalog refused no creation: it has no byte limit");
    assert!(why.contains("must fit one frame"), "{why}");
    let dropped: u64 = (1..=3)
        .map(|id| c.node(id).transport_stats().dropped_too_large)
        .sum();
    assert_eq!(dropped, 0, "messages dropped as larger than a frame");
    c.shutdown().await;
}

/// Every lease of election `name` that a leader-only task ran under, by node.
type Tenures = std::sync::Arc<std::sync::Mutex<Vec<(NodeId, tenure::Lease)>>>;

/// Runs a leader-only task for every named election on node `id`, recording its leases
/// in `tenures`.
fn leader_task(c: &Cluster, id: NodeId, tenures: &Tenures) -> tenure::runner::LeaderTaskHandle {
    let t = tenures.clone();
    tenure::runner::LeaderTask::for_elections(c.node(id).clone()).spawn(move |_, lease| {
        t.lock().unwrap().push((id, lease));
        std::future::pending::<()>()
    })
}

/// The Raft leader of `name` and its term, if nodes `ids` agree on one (leased or not).
fn raft_leader(c: &Cluster, ids: &[NodeId], name: &str) -> Option<(NodeId, u64)> {
    let views: Vec<_> = ids
        .iter()
        .map(|id| c.node(*id).election(name).leadership())
        .collect();
    let first = views.first()?;
    let leader = first.leader?;
    let agree = views
        .iter()
        .all(|l| l.leader == Some(leader) && l.term == first.term);
    (agree && ids.contains(&leader)).then_some((leader, first.term))
}

/// Suspends `name` on the root leader and checks what must hold once that returns: no
/// lease of it anywhere (each ended before), the last one lost as `Suspended`, every
/// node's watch and the catalog showing it. Returns when it returned, and how many
/// tenures there were.
async fn suspend_and_check(c: &Cluster, tenures: &Tenures, ids: &[NodeId]) -> (Instant, usize) {
    let (root, _) = c.steady_leader(T).await;
    let info = c.node(root).suspend_election("settle").await.unwrap();
    let returned = Instant::now();
    assert!(info.suspended, "{info:?}");
    let held = {
        let t = tenures.lock().unwrap();
        for (node, lease) in t.iter() {
            let ended = lease
                .ended_at()
                .expect("a lease still held after the suspension");
            assert!(
                ended <= returned,
                "node {node}'s lease ended after suspend returned"
            );
        }
        let reason = t.last().map(|(_, l)| l.lost_reason());
        assert_eq!(reason, Some(Some(LostReason::Suspended)));
        t.len()
    };
    for &id in ids {
        let settle = c.node(id).election("settle");
        wait_for("every node shows the suspension", T, || {
            settle.leadership().suspended.then_some(())
        })
        .await;
    }
    let listed = c.node(root).list_elections().await.unwrap();
    assert!(listed.iter().all(|e| e.suspended), "{listed:?}");
    wait_for("every node's gauge counts the suspension", T, || {
        let text: Vec<String> = ids.iter().map(|id| c.node(*id).metrics_text()).collect();
        let on = |t: &String| t.contains("tenure_named_elections_suspended{node=");
        (ids.iter()
            .all(|id| c.node(*id).metrics().named_suspended() == 1)
            && text.iter().all(on))
        .then_some(())
    })
    .await;
    (returned, held)
}

/// Resumes `name` on the root leader; waits for a task to run under a new lease, whose
/// token must be above every earlier one. Returns that token.
async fn resume_and_check(c: &Cluster, tenures: &Tenures, held: usize) -> u64 {
    {
        let t = tenures.lock().unwrap();
        let last = t.last().map(|(n, l)| (*n, l.token().term()));
        assert_eq!(
            t.len(),
            held,
            "a lease was granted while suspended: {last:?}"
        );
    }
    let (root, _) = c.steady_leader(T).await;
    let info = c.node(root).resume_election("settle").await.unwrap();
    assert!(!info.suspended, "{info:?}");
    let before = tenures
        .lock()
        .unwrap()
        .iter()
        .map(|(_, l)| l.token().term())
        .max();
    let (node, token) = wait_for("a task runs under a lease of settle again", T, || {
        let t = tenures.lock().unwrap();
        t[held..]
            .iter()
            .find(|(_, l)| l.is_valid())
            .map(|(n, l)| (*n, l.token().term()))
    })
    .await;
    assert!(
        Some(token) > before,
        "resumed token {token} (node {node}) is not above the earlier {before:?}"
    );
    // The history names it: the tenure of that token is the first after a resumption,
    // the one before it fell in the suspension.
    let e = c.node(node).election("settle");
    let h = wait_for(&format!("settle's tenure {token} recorded"), T, || {
        let h = history_now(&e)?;
        h.iter().any(|r| r.term == token).then_some(h)
    })
    .await;
    let at = h.iter().position(|r| r.term == token).unwrap();
    assert!(
        h[at].resumed && !h[at].suspended && at > 0 && h[at - 1].suspended,
        "settle's history does not show the suspension before tenure {token}: {h:?}"
    );
    token
}

/// Suspension stops leases, not Raft (`docs/design.md`, section 11, "Suspending an
/// election"): once `suspend_election` returns no lease of the election is held anywhere
/// and the leader-only task stopped; while suspended, no lease is granted, not even by a
/// Raft leader elected meanwhile, and a lease request waits; resume's first lease is in a
/// new term, above every earlier token, also when the Raft leader never changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_election_holds_no_lease_and_resumes_above_every_earlier_token() {
    let mut c = Cluster::start(3).await;
    create_on_leader(&c, "settle").await;
    let tenures = Tenures::default();
    let mut tasks: Vec<_> = (1..=3).map(|id| leader_task(&c, id, &tenures)).collect();
    wait_for("a task runs under a lease of settle", T, || {
        let t = tenures.lock().unwrap();
        t.iter().any(|(_, l)| l.is_valid()).then_some(())
    })
    .await;
    // Suspended and resumed under one Raft leader: its term goes up all the same.
    let (_, held) = suspend_and_check(&c, &tenures, &[1, 2, 3]).await;
    resume_and_check(&c, &tenures, held).await;
    // Suspended again; its Raft leader dies and another is elected, which takes no
    // lease either; a lease request there waits.
    let (suspended_at, held) = suspend_and_check(&c, &tenures, &[1, 2, 3]).await;
    let (leader, term) = wait_for("settle has a Raft leader", T, || {
        raft_leader(&c, &[1, 2, 3], "settle")
    })
    .await;
    c.kill(leader).await;
    let alive: Vec<NodeId> = [1, 2, 3].into_iter().filter(|i| *i != leader).collect();
    let (next, _) = wait_for("a new Raft leader of settle while suspended", T, || {
        raft_leader(&c, &alive, "settle").filter(|(_, t)| *t > term)
    })
    .await;
    let waiting = tokio::spawn({
        let node = c.node(next).clone();
        async move { node.election("settle").lease().await }
    });
    c.restart(leader).await;
    tasks.push(leader_task(&c, leader, &tenures));
    // Until here (a restart later), nothing was granted.
    assert!(
        !waiting.is_finished(),
        "a lease was granted while suspended"
    );
    {
        let t = tenures.lock().unwrap();
        assert_eq!(t.len(), held, "a task ran while suspended: {:?}", t.last());
        assert!(t
            .iter()
            .all(|(_, l)| l.ended_at().is_some_and(|e| e <= suspended_at)));
    }
    resume_and_check(&c, &tenures, held).await;
    waiting.abort();
    c.shutdown().await;
}
