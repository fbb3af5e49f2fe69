//! Deliberately broken builds, to prove the fault suites catch what they claim to.
//!
//! Compiled in only with the `mutations` cargo feature; then `TENURE_MUTATION` (a comma
//! list) switches them on at run time:
//!
//! | name | what breaks |
//! |---|---|
//! | `no-check-quorum` | raft-rs check-quorum off (a partitioned leader never steps down; followers grant votes while they hear from a leader) |
//! | `persist-after-send` | votes and append responses leave before the state they promise is on disk |
//! | `lease-before-read-index` | the lease is granted and renewed without waiting for a quorum-acknowledged round (an isolated leader keeps it until raft-rs steps it down) |
//! | `no-restart-quiet` | a restarted node votes at once |
//! | `lease-ignores-boottime` | the lease's period is counted on `CLOCK_MONOTONIC` alone: time suspended (or stalled but counted by `CLOCK_BOOTTIME`) does not end it |
//! | `lease-after-failed-transfer` | a leader whose handover failed keeps leading and takes a lease again in the term it sent `MsgTimeoutNow` in (a delayed `MsgTimeoutNow` then starts a forced election under that lease) |
//! | `lease-at-election` | a new leader's first lease counts from its election, not from the commit of its term's first entry (voters that voted but have not heard its append do not refuse a pre-vote yet) |
//! | `lease-one-tick-long` | the lease as long as before the voters' refusal window was shortened by a tick: `(election_ticks − 1)` ticks |
//! | `fence-accepts-any` | the SQLite and PostgreSQL fences accept every token |
//! | `fence-rollback-on-drop` | `PgFence::write` leaves a refused or failed write's transaction to the rollback that dropping it queues (sent when the connection task next runs), not rolling back before it returns |
//! | `lease-from-other-election` | a confirm is answered by any election's lease this node holds, not by its own election's (a leader of one name confirms a lease of another it lost) |
//! | `support-after-vote` | a quiet follower that woke (and may vote once its window closed) keeps acknowledging the election to its leader, which keeps crediting that support (`docs/design.md`, section 12) |
//! | `lease-ends-with-the-driver` | no lease clock: only the driver ends a lease that ran out, so while it is stuck (a write it waits for, on a stalled disk) `Lease::lost` and the cancellation token stay silent past the lease's end |
//! | `driver-waits-for-the-disk` | the driver waits for each Ready batch it hands to the writer (as before `docs/design.md` section 15's asynchronous Ready): while the disk stalls it neither ticks nor names the stall, and stands down only once the write is back |
//! | `held-writes-keep-the-first` | the writes a Ready pass holds while a batch is on the disk keep only a group's first write: what later passes held for that group is lost (`docs/design.md`, section 15) |
//! | `stalled-disk-keeps-leading` | a node notices that its disk stalled (it reports it) but hands nothing over and campaigns as before (`docs/design.md`, section 15) |
//! | `stalled-peer-takes-over` | a node hears that a peer's disk is stalled (its status says so) but its balancer and its handovers pick that peer as before, which refuses (`docs/design.md`, section 15) |
//! | `plan-margin-ignores-the-clock` | a restore plan's margin is the fixed 2^20, not growing with the time since the backup: two plans of one backup start every election at the same term (`docs/design.md`, section 6, "Disaster recovery") |
//! | `catalog-ignores-its-byte-limit` | a `create_election` past [`MAX_CATALOG_BYTES`](crate::election::MAX_CATALOG_BYTES) is applied: the root's snapshot outgrows the frame, the sender drops it, and a new member never catches up (`docs/design.md`, section 9) |
//! | `suspend-keeps-leasing` | a suspended election's leader is revoked once but grants, renews and hands out leases as before (`docs/design.md`, section 11, "Suspending an election") |
//! | `support-book-unbounded` | a peer's support book keeps every refusal until the peer confirms it, however many and however long, and a request may offer any number of elections not run here (the behaviour before issue 35: `docs/design.md`, section 12, "A member cannot grow a book") |
//! | `incarnation-switch-keeps-acks` | a follower whose book of a peer was emptied by a request of another incarnation acks the incarnation switched back to as before, so that stream credits support for elections the follower no longer holds (the behaviour before issue 35: `docs/design.md`, section 12, "A member cannot grow a book") |
//! | `wake-before-judging` | a message of a quiet election wakes it before `peer_input::admit` judges it, so a refused one wakes it too (the behaviour before issue 35: `docs/design.md`, section 12, "Judged before waking") |
//! | `mass-wake-at-once` | the elections a leader's new incarnation, a lost book, a withdrawal, a refusal or a lapse ends wake at once, bypassing the paced wake queue (the behaviour before issue 35: `docs/design.md`, section 12, "One queue for mass wakes") |
//! | `inbound-lane-unshared` | the QUIC transport's channels to the driver take any peer's messages while there is room, first come first served, so one member's flood fills them and the other peers' messages are dropped (the behaviour before issue 35: `docs/design.md`, section 9, "A fair share of the driver's channels") |
//! | `resume-keeps-the-term` | a resumed election's leader holds a lease again in the term it was suspended in: the first token after a resume may equal the last one before |
//! | `hard-state-unsynced` | a write that changes the term or the vote (and whatever else it carries) returns before it is synced: a kill keeps it in the page cache, a power loss takes it (issue 37) |
//! | `ledger-keeps-a-closed-connection` | `tenure-worker`'s PostgreSQL ledger keeps a connection the server closed instead of opening it again: after a restart of the server (or `pg_terminate_backend`) its calls fail until the worker restarts |
//! | `quiet-misses-dead-leader` | a quiet follower never notices that its leader's support stream went silent (its quiet elections stay leaderless) |
//!
//! Without the feature, [`active`] is a constant `false` and the checks compile away.

/// Whether this build has the `mutations` feature (the test harness, a crate of its own,
/// builds workers with it when the tests have it).
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub const COMPILED: bool = cfg!(feature = "mutations");

/// Whether mutation `name` is on.
#[cfg(feature = "mutations")]
pub fn active(name: &str) -> bool {
    static ON: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ON.get_or_init(|| {
        std::env::var("TENURE_MUTATION")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
    .iter()
    .any(|m| m == name)
}

/// Whether mutation `name` is on (never, without the `mutations` feature).
#[cfg(not(feature = "mutations"))]
#[inline(always)]
pub fn active(_name: &str) -> bool {
    false
}
