//! Membership changes (raft-rs ConfChangeV2, joint consensus) and drains on real nodes:
//! QUIC on loopback, RocksDB in a temporary folder, all in this process.
//!
//! Every test also checks the lease safety properties of the whole run: one lease holder
//! per term, and no lease acquired before the previous one ended.

use std::time::Duration;

use tenure::{Membership, MembershipError, NodeId, ReadMode, Role, Timing, TransferError};
use tenure_harness::checker::{check, Event, Options};
use tenure_harness::cluster::{wait_for, Cluster};

const WAIT: Duration = Duration::from_secs(20);

/// Every running node's applied history, as checker events (rule (f): the histories of
/// all nodes are windows of one sequence, whatever the membership did).
async fn sample_histories(c: &Cluster, events: &mut Vec<Event>) {
    for (id, n) in &c.nodes {
        if let Ok(h) = n.history().await {
            let records = h.iter().map(|r| (r.term, r.leader)).collect();
            events.push(Event::history(*id, tenure::clock::monotonic_ns(), records));
        }
    }
}

/// Samples once more and judges every sample with the history checker.
async fn assert_histories_agree(c: &Cluster, mut events: Vec<Event>) {
    sample_histories(c, &mut events).await;
    if let Err(f) = check(&events, &[], &Options::new(5)) {
        panic!("{f}");
    }
}

/// The end of every test: the whole run's leases never overlapped, the nodes' applied
/// histories agree; then stop the group.
async fn finish(c: Cluster, hist: Vec<Event>) {
    c.assert_leases_never_overlap();
    assert_histories_agree(&c, hist).await;
    c.shutdown().await;
}

/// The membership node `id` has applied.
async fn members(c: &Cluster, id: NodeId) -> Membership {
    c.node(id).status().await.expect("status").members
}

/// Waits until every node in `ids` has applied voters `voters` (sorted) and no joint
/// configuration.
async fn wait_voters(c: &Cluster, ids: &[NodeId], voters: &[NodeId]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut all = true;
        for id in ids {
            let m = members(c, *id).await;
            if m.voters != voters || !m.outgoing.is_empty() {
                all = false;
            }
        }
        if all {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for voters {voters:?} on nodes {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Adds `id` as a learner through the leader, waits until it has caught up, promotes it.
async fn add_voter(c: &mut Cluster, id: NodeId) {
    let addr = c.start_joining(id).await;
    assert_eq!(c.view(id).role, Role::Joining);
    let (leader, _) = c.steady_leader(WAIT).await;
    let m = c
        .node(leader)
        .add_learner(id, addr)
        .await
        .expect("add learner");
    assert!(m.learners.contains(&id), "{m:?}");
    wait_for("the new node to become a learner", WAIT, || {
        (c.view(id).role == Role::Learner).then_some(())
    })
    .await;
    promote_when_caught_up(c, id).await;
}

/// Retries a change while the learner it needs is still catching up (or the previous
/// change is still in flight); any other refusal fails the test.
async fn until_caught_up<F, Fut>(what: &str, mut change: F) -> Membership
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Membership, MembershipError>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match change().await {
            Ok(m) => return m,
            Err(MembershipError::LearnerBehind { .. } | MembershipError::ChangeInFlight)
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

async fn promote_when_caught_up(c: &Cluster, id: NodeId) {
    let m = until_caught_up(&format!("promote {id}"), || async {
        let (leader, _) = c.steady_leader(WAIT).await;
        c.node(leader).promote(id).await
    })
    .await;
    assert!(m.voters.contains(&id), "{m:?}");
}

fn others(ids: &[NodeId], not: NodeId) -> Vec<NodeId> {
    ids.iter().copied().filter(|i| *i != not).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_from_three_to_five_then_lose_the_leader() {
    let mut c = Cluster::start(3).await;
    let mut hist = Vec::new();
    c.steady_leader(WAIT).await;
    add_voter(&mut c, 4).await;
    add_voter(&mut c, 5).await;
    wait_voters(&c, &[1, 2, 3, 4, 5], &[1, 2, 3, 4, 5]).await;
    // The new members learned the group's past from the snapshot they started from.
    let (leader, _) = c.steady_leader(WAIT).await;
    let past = c.node(leader).history().await.expect("history");
    assert!(!past.is_empty());
    for id in [4, 5] {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let h = c.node(id).history().await.expect("history");
            if h.len() >= past.len() && h[..past.len()] == past[..] {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {id} has history {h:?}, the leader {past:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Every node knows where the new members listen (replicated with the change).
    let m = members(&c, 1).await;
    assert_eq!(m.addrs.len(), 5, "{m:?}");

    // The grown group survives its leader: four of five elect (quorum 3).
    let (leader, term) = c.steady_leader(WAIT).await;
    sample_histories(&c, &mut hist).await;
    c.kill(leader).await;
    let (new, new_term) = c.steady_leader(WAIT).await;
    assert_ne!(new, leader);
    assert!(new_term > term);
    // A new member restarts into the same group.
    let restart = if new == 5 { 4 } else { 5 };
    c.restart(restart).await;
    wait_voters(&c, &[restart], &[1, 2, 3, 4, 5]).await;
    finish(c, hist).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_from_five_to_three_and_removed_nodes_stay_quiet() {
    let mut c = Cluster::start(5).await;
    let mut hist = Vec::new();
    let (leader, _) = c.steady_leader(WAIT).await;
    let gone: Vec<NodeId> = others(&[1, 2, 3, 4, 5], leader)
        .into_iter()
        .take(2)
        .collect();
    for id in &gone {
        let (leader, _) = c.steady_leader(WAIT).await;
        let m = c.node(leader).remove_member(*id).await.expect("remove");
        assert!(!m.contains(*id), "{m:?}");
        wait_for("the removed node to say it was removed", WAIT, || {
            (c.view(*id).role == Role::Removed).then_some(())
        })
        .await;
    }
    let rest = others(&others(&[1, 2, 3, 4, 5], gone[0]), gone[1]);
    // The removed nodes no longer count: stop following them in the fixture.
    let removed: Vec<_> = gone
        .iter()
        .map(|id| (*id, c.nodes.remove(id).unwrap()))
        .collect();
    wait_voters(&c, &rest, &rest).await;

    // Cut the removed nodes off from everyone: a member would campaign within an
    // election timeout; a removed node must not (its term stays, its role too).
    for (id, n) in &removed {
        for peer in [1, 2, 3, 4, 5] {
            if peer != *id {
                n.faults().isolate_from(peer);
            }
        }
    }
    let terms: Vec<u64> = removed.iter().map(|(_, n)| n.leadership().term).collect();
    let elections: Vec<String> = removed.iter().map(|(_, n)| n.metrics_text()).collect();
    // Several election timeouts of silence (a member would have campaigned by now).
    tokio::time::sleep(c.timing.election_timeout() * 8).await;
    for (i, (id, n)) in removed.iter().enumerate() {
        let l = n.leadership();
        assert_eq!(l.role, Role::Removed, "node {id}");
        assert_eq!(l.term, terms[i], "removed node {id} raised its term");
        assert_eq!(
            elections_started(&n.metrics_text()),
            elections_started(&elections[i]),
            "removed node {id} campaigned"
        );
    }
    // The smaller group still works: lose its leader, 2 of 3 elect.
    let (leader, _) = c.steady_leader(WAIT).await;
    sample_histories(&c, &mut hist).await;
    c.kill(leader).await;
    c.steady_leader(WAIT).await;
    // A removed node's data directory no longer admits it.
    for (id, n) in removed {
        n.kill().await;
        let err = tenure::Node::start(c.config(id))
            .await
            .expect_err("refused");
        assert!(
            matches!(err, tenure::StartError::NotAMember { .. }),
            "node {id}: {err}"
        );
    }
    finish(c, hist).await;
}

fn elections_started(text: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with("tenure_elections_started_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_a_dead_node_in_one_joint_change() {
    let mut c = Cluster::start(3).await;
    let mut hist = Vec::new();
    let (leader, _) = c.steady_leader(WAIT).await;
    let dead = others(&[1, 2, 3], leader)[0];
    sample_histories(&c, &mut hist).await;
    c.kill(dead).await;
    c.nodes.remove(&dead);
    let addr = c.start_joining(4).await;
    let (leader, _) = c.steady_leader(WAIT).await;
    c.node(leader)
        .add_learner(4, addr)
        .await
        .expect("add learner");
    // Replacing needs a caught-up learner.
    let n = c.node(leader).clone();
    let m = until_caught_up("replace", || n.replace_member(dead, 4)).await;
    // Answered only once the joint configuration was left.
    assert!(
        m.outgoing.is_empty() && m.voters.contains(&4) && !m.contains(dead),
        "{m:?}"
    );
    let mut voters = others(&[1, 2, 3], dead);
    voters.push(4);
    voters.sort_unstable();
    wait_voters(&c, &voters, &voters).await;
    // The new group elects without the dead node, and the membership survives restarts.
    let (leader, _) = c.steady_leader(WAIT).await;
    sample_histories(&c, &mut hist).await;
    c.kill(leader).await;
    let (_, _) = c.steady_leader(WAIT).await;
    c.restart(leader).await;
    wait_voters(&c, &voters, &voters).await;
    finish(c, hist).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_leader_hands_over() {
    let mut c = Cluster::start(3).await;
    let hist = Vec::new();
    let (leader, term) = c.steady_leader(WAIT).await;
    let m = c
        .node(leader)
        .remove_member(leader)
        .await
        .expect("remove leader");
    assert!(!m.is_voter(leader), "{m:?}");
    wait_for("the removed leader to say it was removed", WAIT, || {
        (c.view(leader).role == Role::Removed).then_some(())
    })
    .await;
    let old = c.nodes.remove(&leader).unwrap();
    let (new, new_term) = c.steady_leader(WAIT).await;
    assert_ne!(new, leader);
    assert!(new_term > term);
    let rest = others(&[1, 2, 3], leader);
    wait_voters(&c, &rest, &rest).await;
    old.kill().await;
    finish(c, hist).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_crash_in_the_middle_of_a_joint_change() {
    let mut c = Cluster::start(3).await;
    let mut hist = Vec::new();
    let addr = c.start_joining(4).await;
    let (leader, _) = c.steady_leader(WAIT).await;
    c.node(leader)
        .add_learner(4, addr)
        .await
        .expect("add learner");
    let out = others(&[1, 2, 3], leader)[0];
    // Enter a joint configuration that this leader will not leave by itself.
    let n = c.node(leader).clone();
    let m = until_caught_up("replace", || n.replace_member_explicit(out, 4)).await;
    assert!(!m.outgoing.is_empty(), "expected a joint config: {m:?}");
    // Another change is refused while the group is joint.
    let err = c.node(leader).remove_member(out).await.unwrap_err();
    assert_eq!(err, MembershipError::ChangeInFlight);
    // Crash the leader while joint: a new leader needs a quorum of both halves, and
    // must finish the change (leave the joint configuration).
    sample_histories(&c, &mut hist).await;
    c.kill(leader).await;
    c.nodes.remove(&leader);
    let (new, _) = c.steady_leader(WAIT).await;
    assert_ne!(new, leader);
    let mut voters = others(&[1, 2, 3], out);
    voters.push(4);
    voters.sort_unstable();
    let live: Vec<NodeId> = c.nodes.keys().copied().collect();
    wait_for("the removed node to say so", WAIT, || {
        (c.view(out).role == Role::Removed).then_some(())
    })
    .await;
    c.nodes.remove(&out);
    let live: Vec<NodeId> = live.into_iter().filter(|i| *i != out).collect();
    wait_voters(&c, &live, &voters).await;
    finish(c, hist).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_change_at_a_time_and_clear_refusals() {
    let mut c = Cluster::start(3).await;
    let hist = Vec::new();
    let a4 = c.start_joining(4).await;
    let a5 = c.start_joining(5).await;
    // Two changes at once: the second is refused while the first is in flight. The
    // leader is cut off before either is sent, so the first cannot commit before the
    // driver takes the second, however the test's thread is scheduled (on a loaded
    // machine the first once committed in between); the cut heals as soon as the second
    // is answered. One channel carries both, so the driver takes them in this order.
    // A leader whose lease lapsed before it took the first refuses both for want of a
    // quorum: that attempt proves nothing, and the next one waits for a steady leader.
    let (first, second) = loop {
        let (leader, _) = c.steady_leader(WAIT).await;
        let n = c.node(leader).clone();
        c.isolate(leader);
        let (first, second) = tokio::join!(n.add_learner(4, a4), async {
            let second = n.add_learner(5, a5).await;
            c.heal();
            second
        });
        if !matches!(first, Err(MembershipError::NoQuorum { .. })) {
            break (first, second);
        }
    };
    assert!(first.is_ok(), "{first:?}");
    assert_eq!(second.unwrap_err(), MembershipError::ChangeInFlight);
    let (leader, _) = c.steady_leader(WAIT).await;
    let follower = others(&[1, 2, 3], leader)[0];
    let n = c.node(leader).clone();
    // Refusals name the problem.
    assert_eq!(
        c.node(follower).remove_member(2).await.unwrap_err(),
        MembershipError::NotLeader {
            leader_hint: Some(leader)
        }
    );
    assert_eq!(
        n.remove_member(9).await.unwrap_err(),
        MembershipError::UnknownNode(9)
    );
    assert_eq!(
        n.promote(follower).await.unwrap_err(),
        MembershipError::NotALearner(follower)
    );
    assert_eq!(
        n.add_learner(4, a4).await.unwrap_err(),
        MembershipError::AlreadyMember(4)
    );
    assert_eq!(
        n.promote(5).await.unwrap_err(),
        MembershipError::UnknownNode(5)
    );
    let msg = MembershipError::NotLeader { leader_hint: None }.to_string();
    assert!(msg.contains("no leader is known"), "{msg}");
    finish(c, hist).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_hands_over_never_leads_and_stays_drained_across_restarts() {
    let mut c = Cluster::start(3).await;
    let mut hist = Vec::new();
    let (leader, term) = c.steady_leader(WAIT).await;
    let m = c
        .node(leader)
        .set_drained(leader, true)
        .await
        .expect("drain");
    assert_eq!(m.drained, vec![leader]);
    // It hands over at once.
    wait_for("another leader", WAIT, || {
        c.leased_leader().filter(|(l, _)| *l != leader)
    })
    .await;
    let (new, new_term) = c.steady_leader(WAIT).await;
    assert_ne!(new, leader);
    assert!(new_term > term);
    assert_eq!(
        c.node(new)
            .transfer_leadership(Some(leader))
            .await
            .unwrap_err(),
        TransferError::Drained(leader)
    );
    // Draining every voter is refused: someone must be able to lead.
    let third = others(&others(&[1, 2, 3], leader), new)[0];
    c.node(new)
        .set_drained(third, true)
        .await
        .expect("drain a second");
    assert!(matches!(
        c.node(new).set_drained(new, true).await.unwrap_err(),
        MembershipError::WouldLoseQuorum { .. }
    ));
    c.node(new)
        .set_drained(third, false)
        .await
        .expect("undrain");
    // Once every node has applied the undrain, kill the leader: of the two left, only
    // the undrained one may lead. (Killed before `third` applied its undrain, the group
    // would have no node willing to lead: a drained node never campaigns.)
    for id in [1, 2, 3] {
        let deadline = tokio::time::Instant::now() + WAIT;
        while members(&c, id).await.drained != vec![leader] {
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {id} did not apply the undrain"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    sample_histories(&c, &mut hist).await;
    c.kill(new).await;
    let (l, _) = c.steady_leader(WAIT).await;
    assert_eq!(l, third);
    // Every node, restarted, still knows the drain.
    for id in [1, 2, 3] {
        c.restart(id).await;
    }
    let (l, _) = c.steady_leader(WAIT).await;
    assert_ne!(l, leader);
    for id in [1, 2, 3] {
        assert_eq!(members(&c, id).await.drained, vec![leader], "node {id}");
    }
    // Undrained, it may lead again.
    c.node(l).set_drained(leader, false).await.expect("undrain");
    assert_eq!(
        c.node(l).transfer_leadership(Some(leader)).await,
        Ok(leader)
    );
    finish(c, hist).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_quorum_refuses_changes_at_once() {
    // Long election timeouts (2 s) against a 10 ms tick: between the moment the cut-off
    // leader's lease runs out and the moment check-quorum steps it down lies at least
    // about 80 ms, while it still leads but cannot commit anything.
    let timing = Timing::from_millis(10, 30, 2000, 2500);
    let c = Cluster::start_with(3, timing, ReadMode::Safe).await;
    let (leader, _) = c.steady_leader(WAIT).await;
    for peer in [1, 2, 3] {
        if peer != leader {
            c.node(leader).faults().isolate_from(peer);
        }
    }
    let node = c.node(leader).clone();
    let follower = others(&[1, 2, 3], leader)[0];
    wait_for("the cut-off leader's lease to run out", WAIT, || {
        (!node.leadership().leased).then_some(())
    })
    .await;
    let err = node.set_drained(follower, true).await.unwrap_err();
    match &err {
        MembershipError::NoQuorum { reachable, voters } => {
            assert_eq!((*reachable, voters.len()), (1, 3), "{err}");
        }
        other => panic!("expected NoQuorum from the cut-off leader, got {other}"),
    }
    assert!(err.to_string().starts_with("no quorum"), "{err}");
    c.shutdown().await;
}
