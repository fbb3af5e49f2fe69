//! The replicated leadership history and the bounded log: every tenure is recorded on
//! every node, survives restarts and compaction, and a node that fell behind the
//! compacted log catches up from a snapshot.

use std::time::Duration;

use tenure::{TenureEnd, TenureRecord, TenureStart};
use tenure_harness::cluster::{wait_for, Cluster};

const LONG: Duration = Duration::from_secs(20);

async fn histories(c: &Cluster) -> Vec<(u64, Vec<TenureRecord>)> {
    let mut out = Vec::new();
    for (id, n) in &c.nodes {
        out.push((*id, n.history().await.unwrap()));
    }
    out
}

/// Waits until every running node has applied the same history, with at least `min`
/// records, and returns it.
async fn converged(c: &Cluster, min: usize) -> Vec<TenureRecord> {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let all = histories(c).await;
        let first = all[0].1.clone();
        if first.len() >= min && all.iter().all(|(_, h)| *h == first) {
            return first;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "histories did not converge: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tenure_is_recorded_on_every_node_and_survives_a_restart() {
    let mut c = Cluster::start(3).await;
    let (first, t1) = c.steady_leader(LONG).await;
    let h = converged(&c, 1).await;
    let last = h.last().unwrap();
    assert_eq!(
        (last.term, last.leader, last.started_by),
        (t1, first, TenureStart::Election)
    );

    let target = *c.nodes.keys().find(|id| **id != first).unwrap();
    c.node(first)
        .transfer_leadership(Some(target))
        .await
        .unwrap();
    let (_, t2) = c.steady_leader(LONG).await;
    let h = converged(&c, 2).await;
    let n = h.len();
    assert_eq!((h[n - 1].term, h[n - 1].leader), (t2, target));
    if t2 == t1 + 1 {
        // The transfer election won at once: recorded as a handover.
        assert_eq!(h[n - 1].started_by, TenureStart::Handover, "{h:#?}");
        assert_eq!(h[n - 2].ended, Some(TenureEnd::HandedOver));
    } else {
        // The transfer's election did not finish (raft-rs aborted it) and the target
        // won a later, ordinary election: that is what the history must say.
        assert_eq!(h[n - 1].started_by, TenureStart::Election, "{h:#?}");
        assert_eq!(h[n - 2].ended, Some(TenureEnd::Lost));
    }
    // Terms increase: one leader per term, in order.
    assert!(h.windows(2).all(|w| w[0].term < w[1].term));

    // A restarted node rebuilds the same history from its disk.
    let other = *c.nodes.keys().find(|id| **id != target).unwrap();
    c.restart(other).await;
    let again = converged(&c, n).await;
    assert_eq!(again, h);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_stays_bounded_and_a_lagging_node_catches_up_from_a_snapshot() {
    let mut c = Cluster::start(3).await;
    c.compact_after = 8;
    // Restart everyone with the small compaction threshold.
    for id in [1, 2, 3] {
        c.restart(id).await;
    }
    c.steady_leader(LONG).await;
    // Node 3 falls behind: it is down while leadership moves 30 times.
    let (_, last3) = c.node(3).log_span().await.unwrap();
    c.kill(3).await;
    for _ in 0..30 {
        let (leader, _) = c.steady_leader(LONG).await;
        let to = if leader == 1 { 2 } else { 1 };
        c.node(leader).transfer_leadership(Some(to)).await.unwrap();
    }
    let (leader, _) = c.steady_leader(LONG).await;
    let h = converged(&c, 30).await;
    let (first, last) = c.node(leader).log_span().await.unwrap();
    assert!(
        first > last3 + 1,
        "the leader compacted past node 3's last entry {last3} (first index {first})"
    );
    assert!(
        last + 1 - first <= 3 * c.compact_after,
        "log span {first}..={last} stays bounded"
    );

    // Node 3's log ends far below the leader's first index: only a snapshot can bring it back.
    c.start_node(3).await;
    let caught_up = converged(&c, h.len()).await;
    assert_eq!(caught_up.len(), h.len().max(caught_up.len()));
    let (first3, _) = c.node(3).log_span().await.unwrap();
    assert!(
        first3 > last3 + 1,
        "node 3 installed a snapshot: its log starts at {first3}, above its old end {last3}"
    );
    wait_for("node 3 follows the leader", LONG, || {
        (c.view(3).leader == Some(leader)).then_some(())
    })
    .await;
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_entries_stay_bounded_and_a_lagging_node_rejoins_by_snapshot() {
    const ENTRIES: u64 = 2000;
    let mut c = Cluster::start(3).await;
    c.compact_after = 256;
    for id in [1, 2, 3] {
        c.restart(id).await;
    }
    let (leader, _) = c.steady_leader(LONG).await;
    let lagging = if leader == 3 { 2 } else { 3 };
    let (_, last_before) = c.node(lagging).log_span().await.unwrap();
    c.kill(lagging).await;
    // 2,000 replicated entries (drain and undrain of the absent node, ten at a time, so
    // they share fsyncs) while it is down.
    let node = c.node(leader).clone();
    let mut max_span = 0;
    for batch in 0..ENTRIES / 10 {
        let drained = batch % 2 == 0;
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let n = node.clone();
            calls.spawn(async move { n.set_drained(lagging, drained).await });
        }
        while let Some(r) = calls.join_next().await {
            r.expect("task").expect("drain entry");
        }
        let (first, last) = node.log_span().await.unwrap();
        max_span = max_span.max(last + 1 - first);
    }
    let (first, last) = node.log_span().await.unwrap();
    assert!(
        last >= last_before + ENTRIES,
        "{ENTRIES} entries appended ({first}..={last})"
    );
    assert!(
        max_span <= 2 * c.compact_after,
        "the log never held more than {} entries (max {max_span})",
        2 * c.compact_after
    );
    assert!(
        first > last_before + 1,
        "the lagging node's entries were compacted away"
    );
    // The lagging node comes back below the leader's first index: it must take a snapshot,
    // and the replicated drain state with it (the last batch undrained it).
    c.start_node(lagging).await;
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let s = c.node(lagging).status().await.unwrap();
        if s.applied >= last && s.members.drained.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {lagging} did not catch up: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (first_lag, _) = c.node(lagging).log_span().await.unwrap();
    assert!(
        first_lag > last_before + 1,
        "node {lagging} installed a snapshot: its log starts at {first_lag}, above its old end {last_before}"
    );
    c.assert_leases_never_overlap();
    c.shutdown().await;
}
