//! The disk (`docs/design.md`, sections 2 and 15): three nodes in one process over the
//! in-process network, on real RocksDB stores under a wrapper that holds or fails writes
//! on command (`harness/src/stall_store.rs`, `harness/src/stall_group.rs`).
//!
//! * A leader whose disk stalls, twice: in a Ready batch (which its driver hands to the
//!   writer and waits for at most half the stall bound) and in a write its driver waits for (the store of an
//!   election it creates). What must hold, as orderings of events (no timing bounds):
//!   while the write is still blocked, every lease it holds (the root's, and those of the
//!   named elections it leads: all 16 name it first in their affinity, and the balancer
//!   gives it its share of them plus one at most) reports its loss (`Lease::lost`, the
//!   cancellation token, its published leadership), and another node holds the lease of
//!   the root and of all 16 elections; in a Ready batch, the node also reports its disk
//!   stalled before the write comes back. The mutation `lease-ends-with-the-driver` (no
//!   lease clock) fails the held driver's first check; `.ci/run` requires it to.
//! * A leader whose writes turn slow (each over the disk stall bound, under the election
//!   timeout, so that its followers never time out): it reports a disk stall, hands
//!   over the root and every named election it leads, leads nothing while its probe
//!   writes stay slow (its peers hear of the stall and hand it nothing: it refuses no
//!   handover), and leads again once they are fast. The mutation
//!   `stalled-disk-keeps-leading` (the stall noticed, nothing handed over) fails the
//!   handover check, `stalled-peer-takes-over` (peers hand it elections anyway) the
//!   refusal check; `.ci/run` requires both.
//! * A follower whose Ready batch is blocked while six appends reach it one by one: the
//!   passes it makes meanwhile hold their writes, merged per group, and once the batch
//!   is back its log on disk is its leader's, before and after a restart. The mutation
//!   `held-writes-keep-the-first` (a group's later held writes lost) makes it stop with
//!   `LostAcknowledgedData` at the next append; `.ci/run` requires it to.
//! * A failed sync on the leader and on a follower: the node stops with
//!   `StopCause::WriteFailed` naming the write, the others go on, and it restarts on its
//!   folder and catches up.
//!
//! The stalled leader in a Ready batch and both failed syncs run once more with each
//! node's store on a fault filesystem of its own (`tenure_harness::faultfs`, root): the
//! stall holds RocksDB's own writes and syncs, and the failed sync is RocksDB's
//! `fdatasync` answered EIO. The mutation `driver-waits-for-the-disk` fails that stalled
//! leader too; `.ci/run` requires it to.

use tenure_harness::stall_group;

use std::sync::Arc;
use std::time::Duration;

use stall_group::{Group, IDS};
use tenure::error::StorageError;
use tenure::{DiskHealth, ElectionOptions, Lease, LostReason, NodeId, Role, StopCause};
use tenure_harness::faultfs::{self, FaultFs};
use tenure_harness::stall_store::Gate;
use tokio::time::{timeout, Instant};

/// The longest any condition below is waited for.
const WAIT: Duration = Duration::from_secs(20);
/// The longest a lease's end is waited for while the write is blocked: fifty times the
/// lease's length with this timing, so that a lease clock that is not there (the mutation)
/// fails the test in seconds.
const LOST_WAIT: Duration = Duration::from_secs(5);
/// The named elections the stalled leader leads.
const NAMED: usize = 16;
/// How long the balancer waits before an election moved moves again (`spread.rs`).
const BALANCER_COOLDOWN: Duration = Duration::from_secs(2);

/// Polls `f` until it gives a value, for at most [`WAIT`].
async fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_within(WAIT, what, f).await
}

/// Polls `f` until it gives a value, for at most `limit`.
async fn wait_within<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until every node but `s` says, in its status's `peers_disk_stalled`, what
/// `heard` looks for: that `s`'s disk `what`.
async fn peers_hear(g: &Group, s: NodeId, what: &str, heard: impl Fn(&[NodeId]) -> bool) {
    for n in g.up().filter(|n| n.id() != s) {
        let deadline = Instant::now() + WAIT;
        while !heard(&n.status().await.expect("a status").peers_disk_stalled) {
            assert!(
                Instant::now() < deadline,
                "n{} did not hear within {WAIT:?} that n{s}'s disk {what}",
                n.id()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn names() -> Vec<String> {
    (0..NAMED).map(|i| format!("shard-{i}")).collect()
}

/// Where a stall meets the leader's driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meets {
    /// In a Ready batch, which the driver hands to the writer and does not wait for: it
    /// goes on, names the stall while the batch is out and hands every election over.
    ReadyBatch,
    /// In a write the driver waits for (the store of an election it creates): its turn
    /// is held, and only the lease clock ends its leases.
    WaitedWrite,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_stalls_in_a_ready_batch_names_the_stall_and_hands_over_while_it_is_blocked(
) {
    let _machine = crate::WHOLE_MACHINE.read().await;
    stalled_leader(Meets::ReadyBatch, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_stalls_in_a_write_it_waits_for_announces_every_lease_end_while_it_is_blocked(
) {
    let _machine = crate::WHOLE_MACHINE.read().await;
    stalled_leader(Meets::WaitedWrite, false).await;
}

/// The same over the fault filesystem (root): the stall holds RocksDB's own writes and
/// syncs, in the file system, not at a wrapper of the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_stalls_under_rocksdb_names_the_stall_and_hands_over_while_it_is_blocked(
) {
    let _machine = crate::WHOLE_MACHINE.read().await;
    stalled_leader(Meets::ReadyBatch, true).await;
}

/// `s`'s lease of the root. The root may have left `s` since the group formed: a loaded
/// machine can delay a heartbeat past an election timeout, or one of `s`'s real syncs
/// past the stall bound, after which `s` hands everything over until its probe writes
/// are fast (a CI run's mutation check once failed here, waiting for a lease `s` no
/// longer sought). Each try hands the root back to `s`, as the affinity does the named
/// elections.
async fn root_lease_of(g: &Group, s: NodeId) -> Lease {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(lease) = timeout(Duration::from_secs(1), g.node(s).lease()).await {
            return lease.expect("the root's lease");
        }
        assert!(
            Instant::now() < deadline,
            "n{s} did not hold the root's lease again within {WAIT:?}"
        );
        if let Some(h) = g.root_holder().filter(|h| *h != s) {
            // Refused while n{s}'s disk is stalled, or timed out: the next try asks again.
            let _ = timeout(WAIT, g.node(h).transfer_leadership(Some(s))).await;
        }
    }
}

/// Where a stall holds the stalled node's writes.
enum Held {
    /// At the store wrapper's gate.
    Gate(Arc<Gate>),
    /// On the fault filesystem, under RocksDB.
    Disk(Arc<FaultFs>),
}

impl Held {
    /// Writes (or file system requests) held now.
    fn waiting(&self) -> usize {
        match self {
            Held::Gate(gate) => gate.waiting(),
            Held::Disk(disk) => disk.held(),
        }
    }

    /// The disk comes back.
    fn open(&self) {
        match self {
            Held::Gate(gate) => gate.open(),
            Held::Disk(disk) => disk.end_stall(),
        }
    }
}

/// The group, on fault filesystems or not; `None` if they cannot run here (skipped).
async fn group(on_fault_fs: bool) -> Option<Group> {
    if !on_fault_fs {
        return Some(Group::start().await);
    }
    if faultfs::skip_test().is_some() {
        return None;
    }
    Some(Group::start_on_fault_fs().await)
}

async fn stalled_leader(meets: Meets, on_fault_fs: bool) {
    let Some(g) = group(on_fault_fs).await else {
        return;
    };
    // The root's leader leads its share of the named elections (their affinity names
    // it), and holds all their leases.
    let (s, led) = g.leader_with_share(&names()).await;
    let mut leases: Vec<(String, Lease)> = Vec::new();
    let root = root_lease_of(&g, s).await;
    leases.push(("the root".into(), root));
    for name in led {
        let lease = timeout(WAIT, g.node(s).election(&name).lease())
            .await
            .expect("the lease in time")
            .unwrap_or_else(|e| panic!("{name}'s lease: {e}"));
        leases.push((name, lease));
    }
    assert!(
        leases.iter().all(|(_, l)| l.is_valid()),
        "every lease holds before the stall"
    );
    let tokens: Vec<_> = leases.iter().map(|(_, l)| l.cancellation_token()).collect();

    // The stall: n{s}'s writes (or only those its driver waits for) wait at the gate
    // from now on; an election created makes its driver write: its Ready batch (the
    // catalog entry), then the new election's store once the entry is applied.
    let gate = match &g.disks[s as usize - 1] {
        // Every write and sync of its RocksDB (a Ready batch first).
        Some(disk) => {
            disk.stall(faultfs::MAX_STALL);
            Held::Disk(Arc::clone(disk))
        }
        None => {
            let gate = Arc::clone(&g.gates[s as usize - 1]);
            match meets {
                Meets::ReadyBatch => gate.shut(),
                Meets::WaitedWrite => gate.shut_waited(),
            }
            Held::Gate(gate)
        }
    };
    let proposer = g.node(s).clone();
    let trigger = tokio::spawn(async move {
        proposer
            .create_election("written-during-the-stall", ElectionOptions::new())
            .await
    });
    wait_for(&format!("a write of n{s} blocked"), || {
        (gate.waiting() > 0).then_some(())
    })
    .await;

    // Every lease reports its end while the write is still blocked.
    for ((name, lease), token) in leases.iter().zip(&tokens) {
        let Ok(reason) = timeout(LOST_WAIT, lease.lost()).await else {
            panic!(
                "{name}'s lease: lost() did not fire while the write was blocked \
                 (valid: {}, writes held: {})",
                lease.is_valid(),
                gate.waiting()
            );
        };
        assert!(
            gate.waiting() > 0,
            "{name}'s lease: lost() fired only after the write came back"
        );
        match meets {
            // The driver is held: the lease clock ends the lease when it runs out.
            Meets::WaitedWrite => assert_eq!(reason, LostReason::Expired, "{name}'s lease"),
            // The driver goes on: it hands the election over (or a new leader's term
            // reaches it first).
            Meets::ReadyBatch => assert!(
                matches!(
                    reason,
                    LostReason::Expired
                        | LostReason::HandedOver
                        | LostReason::SteppedDown
                        | LostReason::TermChanged
                ),
                "{name}'s lease: {reason:?}"
            ),
        }
        assert!(token.is_cancelled(), "{name}'s cancellation token");
        assert!(!lease.is_valid(), "{name}'s lease");
    }

    // The stalled node says so too: its published leaderships are no longer leased
    // (while its driver is held, by the lease clock). A driver that goes on publishes
    // them at the end of its turn, which may come a moment after a lease's `lost()`.
    for (name, _) in &leases {
        let leased = || match name.as_str() {
            "the root" => g.node(s).leadership().leased,
            _ => g.node(s).election(name).leadership().leased,
        };
        wait_within(
            LOST_WAIT,
            &format!("n{s}'s published leadership of {name} not leased"),
            || (!leased()).then_some(()),
        )
        .await;
    }
    assert!(
        gate.waiting() > 0,
        "n{s}'s leaderships were published unleased only after the write came back"
    );

    if meets == Meets::ReadyBatch {
        // The driver named the stall while the batch was out: it did not wait for it
        // (the mutation `driver-waits-for-the-disk` does, and names it only after).
        wait_within(
            LOST_WAIT,
            &format!("n{s} reports its disk stalled while its batch is out"),
            || g.node(s).disk().borrow().is_stalled().then_some(()),
        )
        .await;
        assert!(
            gate.waiting() > 0,
            "the stall was reported only after the write came back"
        );
    }

    // Another node holds every election's lease before the stall ends.
    wait_for("another node holds the root's lease", || {
        g.root_holder_besides(s)
    })
    .await;
    for name in names() {
        wait_for(&format!("another node holds {name}'s lease"), || {
            g.holder_besides(&name, s)
        })
        .await;
    }
    assert!(
        gate.waiting() > 0,
        "the stall lasted until every election was leased elsewhere"
    );

    // The disk comes back: the stalled node's write returns and it follows the group.
    gate.open();
    let created = timeout(WAIT, trigger).await.expect("the proposal ends");
    drop(created); // committed, or refused because n{s} no longer leads: either is fine
    wait_for(&format!("n{s} knows another leader"), || {
        let l = g.node(s).leadership();
        (l.leader.is_some_and(|l| l != s) && !l.leased).then_some(())
    })
    .await;
    for n in g.up() {
        let _ = timeout(WAIT, n.shutdown()).await;
    }
}

/// A follower whose disk stalls while its leader goes on: the Ready passes it makes
/// meanwhile hold their writes (one batch is on the disk at a time), merged per group,
/// and write them as the next batch once the disk is back. A merge that loses a write
/// (the mutation `held-writes-keep-the-first`) leaves a gap in its log: it stops, or
/// never applies what came after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_disk_stalls_writes_what_it_held_meanwhile_and_catches_up() {
    let _machine = crate::WHOLE_MACHINE.read().await;
    const CREATED: usize = 6;
    let mut g = Group::start().await;
    let leader = wait_for("a root leader with its lease", || g.root_holder()).await;
    let f = IDS
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    // n{f} acknowledged an append: its leader sends it the next ones without waiting
    // for an answer (raft-rs's replicate state).
    g.node(leader)
        .create_election("before", ElectionOptions::new())
        .await
        .expect("create an election");
    lists(&g, f, &["before".to_string()]).await;
    let gate = Arc::clone(&g.gates[f as usize - 1]);
    let held = g.node(f).metrics().passes_held();
    gate.shut();
    // The leader and the other follower commit the catalog entries, one at a time;
    // each reaches n{f} too, whose first batch waits at the gate, and n{f} takes it in
    // a Ready pass of its own, which holds its writes.
    for i in 0..CREATED {
        let before = g.node(f).metrics().passes_held();
        timeout(
            WAIT,
            g.node(leader)
                .create_election(&format!("held-{i}"), ElectionOptions::new()),
        )
        .await
        .expect("in time")
        .expect("the others create it");
        wait_for(&format!("n{f}'s Ready pass held behind its batch"), || {
            (g.node(f).metrics().passes_held() > before).then_some(())
        })
        .await;
    }
    assert!(gate.waiting() > 0, "n{f}'s first batch is still out");
    assert!(g.node(f).metrics().passes_held() >= held + CREATED as u64);
    gate.open();
    let mut names: Vec<String> = (0..CREATED).map(|i| format!("held-{i}")).collect();
    lists(&g, f, &names).await;
    // Its log on disk is the leader's (it acknowledged all of it), and the next append
    // follows it.
    g.node(leader)
        .create_election("after", ElectionOptions::new())
        .await
        .expect("create an election");
    names.push("after".into());
    lists(&g, f, &names).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let ours = g.node(f).log_span().await.expect("a log span");
        let theirs = g.node(leader).log_span().await.expect("a log span");
        if ours.1 == theirs.1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "n{f}'s log on disk ends at {} and its leader's at {}",
            ours.1,
            theirs.1
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // What it held is on its disk: it restarts on its folder with all of it.
    timeout(WAIT, g.node(f).shutdown())
        .await
        .expect("in time")
        .expect("a clean shutdown");
    g.start_node(f).await;
    lists(&g, f, &names).await;
    for n in g.up() {
        let _ = timeout(WAIT, n.shutdown()).await;
    }
}

/// Waits until node `n` lists every election of `names`; fails if it stopped.
async fn lists(g: &Group, n: NodeId, names: &[String]) {
    let deadline = Instant::now() + WAIT;
    loop {
        match g.node(n).list_elections().await {
            Ok(listed)
                if names
                    .iter()
                    .all(|name| listed.iter().any(|e| e.name.as_str() == name)) =>
            {
                return;
            }
            Ok(_) => {}
            Err(_) => panic!("n{n} stopped: {:?}", g.node(n).join().await),
        }
        assert!(
            Instant::now() < deadline,
            "n{n} did not list {names:?} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How long each write and probe of the slow disk takes: over the stall bound (50 ms),
/// and twice it (a write held behind a probe) under the 150 ms election timeout, so
/// that the followers keep hearing from the stalled leader.
const SLOW: Duration = Duration::from_millis(60);
/// The longest the handovers of a stalled leader are waited for: a node that does not
/// hand over (the mutation) fails the test in seconds.
const HANDOVER_WAIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_writes_turn_slow_reports_a_stall_and_leads_nothing_until_its_probes_are_fast(
) {
    let _machine = crate::WHOLE_MACHINE.read().await;
    let g = Group::start().await;
    let (s, _) = g.leader_with_share(&names()).await;
    let disk = g.node(s).disk();
    assert_eq!(*disk.borrow(), DiskHealth::Healthy);

    // The disk turns slow; a proposal makes n{s} write.
    let gate = Arc::clone(&g.gates[s as usize - 1]);
    gate.slow(SLOW);
    let proposer = g.node(s).clone();
    tokio::spawn(async move {
        let _ = proposer
            .create_election("written-slowly", ElectionOptions::new())
            .await;
    });
    wait_for(&format!("n{s} reports a disk stall"), || {
        disk.borrow().is_stalled().then_some(())
    })
    .await;
    match &*disk.borrow() {
        DiskHealth::Stalled {
            operation,
            took,
            bound,
            ..
        } => {
            assert!(!operation.is_empty(), "the slow write is named");
            assert_eq!(*bound, stall_group::STALL_BOUND);
            assert!(took > bound, "{took:?} over {bound:?}");
        }
        other => panic!("{other:?}"),
    }
    let (stalls, now) = g.node(s).metrics().disk_stalls();
    assert!(
        stalls >= 1 && now,
        "the metrics say so: {stalls} stalls, stalled: {now}"
    );
    let status = g.node(s).status().await.expect("a status");
    assert!(status.disk_stalled, "the status says so");

    // It hands everything over: another node holds the root's lease and every
    // election's. Its followers still hear it (each write holds it for less than an
    // election timeout): only its handovers move the leaderships.
    let deadline = Instant::now() + HANDOVER_WAIT;
    let mut pending: Vec<String> = names();
    loop {
        pending.retain(|name| g.holder_besides(name, s).is_none());
        let root_moved = g.root_holder_besides(s).is_some();
        if root_moved && pending.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "n{s}'s disk stalled, but it did not hand over within {HANDOVER_WAIT:?} \
             (the root moved: {root_moved}; still its: {pending:?})"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // While its probes stay slow it leads nothing: it holds no lease, and leads in no
    // term the others have reached (its own view may lag a slow write behind), not even
    // in the elections whose affinity names it (their leaders may hand them back; it
    // refuses).
    let leads_nothing = || {
        let newest = |view: &dyn Fn(&tenure::Node) -> tenure::Leadership| {
            g.up()
                .filter(|n| n.id() != s)
                .map(|n| view(n).term)
                .max()
                .unwrap_or(0)
        };
        let root = g.node(s).leadership();
        let root_term = newest(&|n| n.leadership());
        assert!(
            !(root.leased || root.role == Role::Leader && root.term >= root_term),
            "n{s} leads the root while its disk is stalled: {root:?} (others at term {root_term})"
        );
        for name in names() {
            let l = g.node(s).election(&name).leadership();
            let term = newest(&|n| n.election(&name).leadership());
            assert!(
                !(l.leased || l.role == Role::Leader && l.term >= term),
                "n{s} leads {name} while its disk is stalled: {l:?} (others at term {term})"
            );
        }
    };
    // Its peers hear of the stall and hand it nothing. The elections whose affinity names
    // it would go back to it once their balancer cool-down (2 s) ran out on the node they
    // reached; through twice that it refuses no handover, because none is asked of it.
    // (An absence needs a span to be watched over; this one is the balancer's.)
    peers_hear(&g, s, "stalled", |stalled| stalled.contains(&s)).await;
    let refused = g.node(s).metrics().takeovers_refused();
    let watched_until = Instant::now() + BALANCER_COOLDOWN * 2;
    while Instant::now() < watched_until {
        leads_nothing();
        let now_refused = g.node(s).metrics().takeovers_refused();
        assert_eq!(
            now_refused,
            refused,
            "its peers handed n{s} elections while they knew its disk was stalled \
             ({} handovers refused)",
            now_refused - refused
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let probes = gate.probes();
    wait_for("five more slow probes", || {
        leads_nothing();
        (gate.probes() >= probes + 5).then_some(())
    })
    .await;
    assert!(disk.borrow().is_stalled(), "slow probes keep it stalled");

    // The disk is fast again: a few fast probes in a row, and it leads again (the
    // elections whose affinity names it come back).
    gate.slow(Duration::ZERO);
    wait_for(&format!("n{s} reports its disk healthy"), || {
        (*disk.borrow() == DiskHealth::Healthy).then_some(())
    })
    .await;
    assert!(!g.node(s).metrics().disk_stalls().1, "the gauge is down");
    peers_hear(&g, s, "recovered", <[NodeId]>::is_empty).await;
    wait_for(&format!("n{s} leads one of its elections again"), || {
        names()
            .iter()
            .any(|name| g.holder(name) == Some(s))
            .then_some(())
    })
    .await;
    for n in g.up() {
        let _ = timeout(WAIT, n.shutdown()).await;
    }
}

/// A failed sync on `victim` (the root's leader, or a follower): the node stops with
/// `StopCause::WriteFailed` naming the write, the others go on (a new leader, a new
/// election created), and the stopped node restarts on its folder and catches up.
async fn a_failed_sync_stops_the_node_for_good(on_leader: bool, on_fault_fs: bool) {
    let Some(mut g) = group(on_fault_fs).await else {
        return;
    };
    let leader = wait_for("a root leader with its lease", || g.root_holder()).await;
    g.node(leader)
        .create_election("before", ElectionOptions::new())
        .await
        .expect("create an election");
    let victim = if on_leader {
        leader
    } else {
        IDS.into_iter()
            .find(|id| *id != leader)
            .expect("a follower")
    };
    let gate = Arc::clone(&g.gates[victim as usize - 1]);
    let disk = g.disks[victim as usize - 1].clone();
    match &disk {
        // RocksDB's next fsync (or fdatasync) answers EIO.
        Some(disk) => disk.fail_syncs(1),
        None => gate.fail_next_write(),
    }
    // The leader appends, every voter writes: the victim's write fails.
    let proposer = g.node(leader).clone();
    tokio::spawn(async move {
        let _ = proposer
            .create_election("during", ElectionOptions::new())
            .await;
    });
    let stopped = timeout(WAIT, g.node(victim).join())
        .await
        .expect("the node stops in time")
        .expect_err("it stops with an error");
    match &disk {
        Some(disk) => assert_eq!(disk.syncs_failed(), 1, "one sync failed"),
        None => assert_eq!(gate.failed(), 1, "one write failed"),
    }
    match &stopped.cause {
        // RocksDB's own failure, through the file system: whichever synced write met it
        // (a Ready batch, or a disk probe).
        StopCause::WriteFailed { operation, error } if disk.is_some() => {
            assert!(
                matches!(error, StorageError::Io { detail, .. } if detail.contains("sync")),
                "the error of {operation}: {error:?}"
            );
        }
        StopCause::WriteFailed { operation, error } => {
            assert!(operation.contains("Ready"), "the operation: {operation}");
            assert!(
                matches!(error, StorageError::Io { detail, .. } if detail.contains("fsync")),
                "the error: {error:?}"
            );
        }
        other => panic!("n{victim} stopped with {other:?}, not WriteFailed"),
    }
    let text = stopped.to_string();
    assert!(text.contains("never retried"), "{text}");
    // The others go on without it.
    g.nodes[victim as usize - 1] = None;
    let others: Vec<NodeId> = IDS.into_iter().filter(|id| *id != victim).collect();
    let now = wait_for("a leader among the others", || {
        g.root_holder().filter(|h| others.contains(h))
    })
    .await;
    timeout(
        WAIT,
        g.node(now).create_election("after", ElectionOptions::new()),
    )
    .await
    .expect("in time")
    .expect("the group creates an election without the stopped node");
    // It restarts on its folder and catches up.
    g.start_node(victim).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let listed = g.node(victim).list_elections().await;
        if listed.is_ok_and(|l| l.iter().any(|e| e.name.as_str() == "after")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "n{victim} restarted but did not catch up within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for n in g.up() {
        let _ = timeout(WAIT, n.shutdown()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_on_the_leader_stops_it_for_good_and_it_restarts_on_its_folder() {
    let _machine = crate::WHOLE_MACHINE.read().await;
    a_failed_sync_stops_the_node_for_good(true, false).await;
}

/// The same with RocksDB's own fsync failing on the fault filesystem (root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_under_rocksdb_stops_the_leader_for_good_and_it_restarts_on_its_folder() {
    let _machine = crate::WHOLE_MACHINE.read().await;
    a_failed_sync_stops_the_node_for_good(true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_under_rocksdb_stops_a_follower_for_good_and_it_restarts_on_its_folder() {
    let _machine = crate::WHOLE_MACHINE.read().await;
    a_failed_sync_stops_the_node_for_good(false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_on_a_follower_stops_it_for_good_and_it_restarts_on_its_folder() {
    let _machine = crate::WHOLE_MACHINE.read().await;
    a_failed_sync_stops_the_node_for_good(false, false).await;
}
