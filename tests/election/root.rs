//! The election node end to end: real QUIC on loopback, RocksDB in temporary folders.
//! Each test names the invariant it checks.

use std::time::Duration;

use tenure::{LostReason, ReadMode, Role, TransferError};
use tenure_harness::cluster::{wait_for, Cluster};

const LONG: Duration = Duration::from_secs(15);

fn election_timeout(c: &Cluster) -> Duration {
    c.timing.election_timeout()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_node_group_elects_exactly_one_leader() {
    let c = Cluster::start(3).await;
    let (leader, term) = c.steady_leader(LONG).await;
    assert!(term >= 1);
    let leaders = c.leaders();
    assert_eq!(leaders, vec![(leader, term)], "exactly one leader");
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_node_group_elects_exactly_one_leader() {
    let c = Cluster::start(5).await;
    let (leader, term) = c.steady_leader(LONG).await;
    assert_eq!(c.leaders(), vec![(leader, term)]);
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_elects_a_new_leader_in_a_higher_term() {
    let mut c = Cluster::start(5).await;
    let (old, old_term) = c.steady_leader(LONG).await;
    c.kill(old).await;
    let (new, new_term) = c.steady_leader(LONG).await;
    assert_ne!(new, old);
    assert!(
        new_term > old_term,
        "term {new_term} must exceed {old_term}"
    );
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_follower_rejoins_with_its_persisted_term_without_disrupting_the_leader() {
    let mut c = Cluster::start(3).await;
    let (leader, term) = c.steady_leader(LONG).await;
    let follower = *c.nodes.keys().find(|id| **id != leader).unwrap();
    c.kill(follower).await;
    c.start_node(follower).await;
    // Right after start the node reports its persisted term, not 0.
    assert!(c.view(follower).term >= term, "persisted term restored");
    wait_for("restarted follower follows the same leader", LONG, || {
        let v = c.view(follower);
        (v.leader == Some(leader) && v.term == term).then_some(())
    })
    .await;
    // The leader was never disturbed: same term, still leased, nobody else led.
    tokio::time::sleep(election_timeout(&c) * 2).await;
    assert_eq!(c.leased_leader(), Some((leader, term)));
    assert_eq!(c.leaders(), vec![(leader, term)]);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_leader_loses_its_lease_within_an_election_timeout_while_the_majority_elects() {
    let c = Cluster::start(5).await;
    let (old, old_term) = c.steady_leader(LONG).await;
    let lease = c.node(old).lease().await.unwrap();
    let cut_at = tokio::time::Instant::now();
    c.isolate(old);
    let reason = tokio::time::timeout(LONG, lease.lost())
        .await
        .expect("lease lost");
    // When the lease ended (its validity, or its revocation if earlier) is computed from
    // the last acknowledged round, so this holds however loaded the machine is: the
    // last round that can count was sent before the cut.
    let ended = lease.ended_at().expect("a lost lease has an end");
    let lost_after = ended.saturating_duration_since(cut_at);
    assert!(
        lost_after <= c.timing.lease_duration() && lost_after < election_timeout(&c),
        "lease ended {lost_after:?} after the cut; lease {:?}, election timeout {:?}",
        c.timing.lease_duration(),
        election_timeout(&c)
    );
    assert!(matches!(
        reason,
        LostReason::Expired | LostReason::SteppedDown | LostReason::TermChanged
    ));
    let (new, new_term) = wait_for("the majority elects a new leased leader", LONG, || {
        c.nodes
            .iter()
            .filter(|(id, _)| **id != old)
            .map(|(id, n)| (*id, n.leadership()))
            .find(|(_, l)| l.role == Role::Leader && l.leased)
            .map(|(id, l)| (id, l.term))
    })
    .await;
    assert_ne!(new, old);
    assert!(new_term > old_term);
    c.heal();
    let (_, healed_term) = c.steady_leader(LONG).await;
    assert!(healed_term >= new_term);
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_never_confirms_a_lease() {
    let c = Cluster::start(5).await;
    let (leader, _) = c.steady_leader(LONG).await;
    // Put the leader on the minority side with one other node.
    let buddy = *c.nodes.keys().find(|id| **id != leader).unwrap();
    c.partition(&[leader, buddy]);
    // The majority elects; the minority side must never hold a lease after its old one ran out.
    wait_for("majority leader", LONG, || {
        c.nodes
            .iter()
            .filter(|(id, _)| **id != leader && **id != buddy)
            .find(|(_, n)| n.leadership().leased)
            .map(|_| ())
    })
    .await;
    let deadline = tokio::time::Instant::now() + election_timeout(&c) * 4;
    while tokio::time::Instant::now() < deadline {
        assert!(!c.view(leader).leased, "minority leader holds a lease");
        assert!(!c.view(buddy).leased, "minority node holds a lease");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.heal();
    c.steady_leader(LONG).await;
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_on_a_deposed_leader_returns_lease_lost() {
    let c = Cluster::start(3).await;
    let (old, _) = c.steady_leader(LONG).await;
    let lease = c.node(old).lease().await.unwrap();
    assert_eq!(lease.confirm().await.unwrap(), lease.token());
    c.isolate(old);
    wait_for("a new leader on the other side", LONG, || {
        c.nodes
            .iter()
            .filter(|(id, _)| **id != old)
            .find(|(_, n)| n.leadership().leased)
            .map(|_| ())
    })
    .await;
    let err = lease
        .confirm()
        .await
        .expect_err("deposed leader must not confirm");
    assert_eq!(err.token, lease.token());
    c.heal();
    // After healing, the old node learns the new term: still lost.
    wait_for("old leader steps down", LONG, || {
        (c.view(old).role == Role::Follower).then_some(())
    })
    .await;
    assert!(lease.confirm().await.is_err());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_based_confirms_answer_locally_and_still_stop_when_deposed() {
    let c = Cluster::start_with(
        3,
        tenure_harness::cluster::test_timing(),
        ReadMode::LeaseBased,
    )
    .await;
    let (old, _) = c.steady_leader(LONG).await;
    let lease = c.node(old).lease().await.unwrap();
    for _ in 0..100 {
        assert_eq!(lease.confirm().await.unwrap(), lease.token());
    }
    c.isolate(old);
    tokio::time::timeout(LONG, lease.lost())
        .await
        .expect("lease lost");
    assert!(lease.confirm().await.is_err());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_leadership_moves_leadership_to_the_named_node() {
    let c = Cluster::start(3).await;
    let (old, old_term) = c.steady_leader(LONG).await;
    let target = *c.nodes.keys().find(|id| **id != old).unwrap();
    let lease = c.node(old).lease().await.unwrap();
    // Only the leader can transfer.
    let err = c
        .node(target)
        .transfer_leadership(Some(old))
        .await
        .unwrap_err();
    assert!(
        matches!(err, TransferError::NotLeader { leader_hint: Some(l) } if l == old),
        "{err:?}"
    );
    assert_eq!(
        c.node(old).transfer_leadership(Some(99)).await.unwrap_err(),
        TransferError::UnknownNode(99)
    );
    let to = c.node(old).transfer_leadership(Some(target)).await.unwrap();
    assert_eq!(to, target);
    // The old lease was revoked before the handover.
    assert_eq!(lease.lost_reason(), Some(LostReason::HandedOver));
    let (leader, term) = c.steady_leader(LONG).await;
    assert_eq!(leader, target);
    assert!(term > old_term);
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_of_the_leader_yields_a_new_leader_well_before_an_election_timeout() {
    // A long election timeout (3 s): without a handover, no new leader could exist
    // before it, so seeing one earlier proves the handover happened (no timing
    // assertion on a noisy machine; the benchmark measures the real figure).
    let timing = tenure::Timing::from_millis(10, 50, 3000, 4000);
    let mut c = Cluster::start_with(5, timing, ReadMode::Safe).await;
    let (old, old_term) = c.steady_leader(LONG).await;
    let old_lease = c.node(old).lease().await.unwrap();
    let node = c.nodes.remove(&old).unwrap();
    let t0 = tokio::time::Instant::now();
    let stopping = tokio::spawn(async move { node.shutdown().await });
    let (new, new_term) = wait_for("a new leased leader", LONG, || {
        c.leased_leader().filter(|(id, _)| *id != old)
    })
    .await;
    let took = t0.elapsed();
    stopping.await.unwrap().unwrap();
    assert_ne!(new, old);
    assert_eq!(
        new_term,
        old_term + 1,
        "one transfer election, no split vote"
    );
    assert_eq!(old_lease.lost_reason(), Some(LostReason::HandedOver));
    assert!(
        took < election_timeout(&c),
        "handover took {took:?}; only a timeout election could take {:?}",
        election_timeout(&c)
    );
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_lease_begins_after_the_old_lease_ended_in_every_failover() {
    let mut c = Cluster::start(5).await;
    for _round in 0..3 {
        let (old, _) = c.steady_leader(LONG).await;
        c.kill(old).await;
        c.steady_leader(LONG).await;
        c.start_node(old).await;
    }
    c.steady_leader(LONG).await;
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_overlap_when_a_follower_that_acknowledged_the_old_leader_restarts_at_once() {
    // Two followers (c, d) lose the leader but still reach the other two (a, b): they
    // campaign, and a and b refuse while the leader's lease holds. Now a, which
    // acknowledged the leader's last round, crashes and restarts at once. Without the
    // restart quiet period a would vote for c right away, and c + d + a would elect a
    // new leader while the old lease is still valid. Long timeouts: the in-process
    // restart (RocksDB reopen, UDP port release) must fit well inside the lease.
    let timing = tenure::Timing::from_millis(10, 30, 600, 800);
    let mut c = Cluster::start_with(5, timing, ReadMode::Safe).await;
    for round in 0..3 {
        let (leader, _) = c.steady_leader(LONG).await;
        let others: Vec<u64> = c.nodes.keys().copied().filter(|id| *id != leader).collect();
        let (a, cc, d) = (others[0], others[2], others[3]);
        c.cut(leader, cc);
        c.cut(leader, d);
        // Let c and d time out and start asking for votes.
        tokio::time::sleep(election_timeout(&c) * 2).await;
        assert_eq!(
            c.leased_leader().map(|l| l.0),
            Some(leader),
            "round {round}: a, b keep the leader"
        );
        c.restart(a).await;
        c.cut(leader, cc);
        c.cut(leader, d);
        // Whoever leads next (the old leader keeps its quorum once a is back; a broken
        // build elects c early), leases must not overlap.
        tokio::time::sleep(election_timeout(&c) * 2).await;
        wait_for("a leased leader", LONG, || c.leased_leader()).await;
        c.heal();
    }
    c.steady_leader(LONG).await;
    c.assert_leases_never_overlap();
    c.shutdown().await;
}

/// The overlap check the tests above end with is the history checker's: a lease that
/// began before another node's lease of an earlier term ran out fails it, and so does a
/// second holder of one term; a lease handed over ends when it is revoked.
#[test]
fn the_lease_check_catches_an_overlap_and_two_holders_of_a_term() {
    use tenure_harness::cluster::LeaseRecord;
    use tokio::time::Instant;
    let check = |leases: Vec<LeaseRecord>| {
        let c = Cluster::unstarted(3, tenure_harness::cluster::test_timing(), ReadMode::Safe);
        *c.leases.lock().unwrap() = leases;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.assert_leases_never_overlap();
        }))
        .is_ok()
    };
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let lease = |node, term, acquired, reason, valid_until, ended| LeaseRecord {
        node,
        term,
        acquired: ms(acquired),
        valid_until: Some(ms(valid_until)),
        ended: Some(ms(ended)),
        reason: Some(reason),
        lost_at: Some(ms(ended)),
    };
    let held = |node, term, acquired| LeaseRecord {
        node,
        term,
        acquired: ms(acquired),
        valid_until: None,
        ended: None,
        reason: None,
        lost_at: None,
    };
    // Node 1's lease of term 2 stepped down at 100 ms but was valid until 300 ms.
    let stepped_down = lease(1, 2, 0, LostReason::TermChanged, 300, 100);
    assert!(check(vec![stepped_down.clone(), held(2, 3, 301)]));
    assert!(!check(vec![stepped_down.clone(), held(2, 3, 250)]));
    // A handover ends the lease at once.
    let handed_over = lease(1, 2, 0, LostReason::HandedOver, 300, 100);
    assert!(check(vec![handed_over, held(2, 3, 150)]));
    // Two holders of one term.
    assert!(!check(vec![stepped_down, held(2, 2, 400)]));
}
