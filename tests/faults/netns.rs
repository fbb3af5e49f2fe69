//! Real processes, real network (root only): five worker processes, each in its own
//! network namespace on a bridge, settle a fenced SQLite ledger while a seeded random
//! schedule partitions them with nftables rules (majority/minority, isolated leader,
//! one-way, a bridge node, a partial partition), drops a share of their packets, pauses
//! them with SIGSTOP and kills them with SIGKILL (restarting them on the same data
//! folder, at once or at the end of the fault). Among the faults an operator drives the
//! group with `ctl` (the `ctl` example, that is `tenure-ctl`; from a namespace of its
//! own, through the workers' admin endpoints): in three steps of five it hands leadership over (to the most
//! up-to-date follower, to a follower, or to the node the step's faults stall: paused,
//! killed, cut off) or drains a node (the leader or a follower; undrained after the
//! heal), in two schedules of five it hands over to a follower it paused, which wakes
//! with its packets to the old leader dropped (docs/design.md, section 4), and in one
//! schedule of three it replaces a machine: spare node 6 starts on an empty folder with
//! `--join`, `ctl members add 6 ...` then `ctl members replace OLD 6` (OLD the leader or
//! the node the step's faults stall), and OLD is stopped for good (later faults land on
//! node 6 in its place). Every worker runs four named elections (`--elections 4`: batch B
//! is settled by the leader of `shard-(B mod 4)` under that shard's fence), and in half
//! the steps the operator hands one of them over (`ctl elections transfer shard-K`, to
//! its best follower, a follower, or the node the step's faults stall; drawn from an RNG
//! of its own, so each seed keeps the faults and ops it had). After the last fault heals,
//! a lease of the root and of every named election must be confirmed within a bound, and
//! every batch must be settled exactly once, under its own shard's fence. The history checker
//! (harness/src/checker.rs) judges every run; each op's command and answer are on its
//! timeline and in the report, and each schedule's line and the summary count the ops by
//! kind as drawn / asked / carried out (`transfers 3/3/2, to stalled nodes ...`).
//!
//! The workers' data folders are on fault filesystems (`tenure_harness::faultfs`, one per
//! worker, mounted by this process before the worker starts), and beside each step's
//! faults about half the steps draw a power loss (SIGKILL, then what the worker's disk
//! had not synced is lost, or a random prefix of it kept; the worker restarts on its
//! folder when the step heals) and three in ten a stall of the worker's disk for 1 to
//! 6 s (every write and sync held), of the leader or another node, from an RNG of their
//! own. Every run also checks that each `lease_lost` a worker printed came within 5 ms of
//! its lease's end (`ended_ns`), outside the worker's pauses. Without FUSE (and without
//! `TENURE_FUSE_REQUIRE`) the power losses are plain kills and the stalls do nothing.
//!
//! Without root, `ip` or `nft` every test here prints why it skipped and passes.
//!
//! | variable | meaning (default) |
//! |---|---|
//! | `TENURE_NETNS_SCHEDULES` | schedules to run (6; `.ci/run` runs 20) |
//! | `TENURE_NETNS_SEED` | the first seed; schedule k uses seed + k (1) |
//! | `TENURE_NETNS_LANES` | labs run side by side (2) |
//! | `TENURE_NETNS_STOP_AT_FIRST` | stop at the first failing schedule (off) |
//! | `TENURE_NETNS_SKIP` | skip the suite even as root |
//! | `TENURE_NETNS_REQUIRE` | fail instead of skipping when it cannot run (`.ci/run`) |
//! | `TENURE_FUSE_REQUIRE` | fail instead of running without fault filesystems (`.ci/run`) |
//! | `TENURE_MUTATION` | run a deliberately broken worker (builds it with `--features mutations`) |
//! | `TENURE_NETNS_WORKER` | run this worker binary instead of building one |
//! | `TENURE_NETNS_CTL` | run this ctl binary (default: the one beside `TENURE_NETNS_WORKER`, else built) |
//!
//! A failure prints the seed, the schedule as generated and as applied (who the leader
//! was), and the checker's timeline. `TENURE_NETNS_SEED=S TENURE_NETNS_SCHEDULES=1`
//! replays the schedule; which node is "the leader" when a fault lands depends on the run.

use tenure_harness::ledger;

use std::fmt;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tenure::clock::monotonic_ns;
use tenure_harness::checker::{self, Event, Kind, Write};
use tenure_harness::faultfs::{self, Loss};
use tenure_harness::netns::{self, CtlRun, Lab, NetState};

const N: u64 = 5;
/// Schedules a plain `cargo test` runs (about 8 s each, two at a time, on two cores);
/// `.ci/run` sets `TENURE_NETNS_SCHEDULES=20`.
const DEFAULT_SCHEDULES: u64 = 6;
/// After the final heal, a lease must be acquired or confirmed within this.
const LIVENESS_BOUND: Duration = Duration::from_secs(10);
/// After the final heal, every batch must be settled within this.
const SETTLE_BOUND: Duration = Duration::from_secs(30);
/// The first lease of a fresh group.
const FIRST_LEASE: Duration = Duration::from_secs(20);
/// Worker options. A batch takes ~1.4 s, row by row with random delays (20–100 ms): a
/// leader cut off mid-batch keeps writing while its successor settles the same batch, the
/// two overtaking each other row by row, so only the fence keeps the older token out.
const WORKER_ARGS: &[&str] = &[
    "--elections",
    "4",
    "--row-ms",
    "20",
    "--row-jitter-ms",
    "80",
    "--settle-ms",
    "50",
];
/// Payments per batch.
const ROWS: u64 = 20;
/// Named elections every worker runs (`shard-0` … `shard-3`): batch B is settled by the
/// leader of `shard-(B mod 4)` under that shard's fence (the root settles nothing).
const ELECTIONS: u64 = 4;
/// The harness adds a batch this often while faults run (about half the group's pace).
const FEED_EVERY: Duration = Duration::from_millis(2400);

/// Writes to stderr past the test harness's capture: progress of a long suite and skip
/// messages should be seen without `--nocapture`.
fn say(msg: impl AsRef<str>) {
    let _ = writeln!(std::io::stderr().lock(), "{}", msg.as_ref());
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        _ => default,
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// True (after saying why) when the suite cannot run here.
fn skipped() -> bool {
    let Some(reason) = netns::skip_reason() else {
        return false;
    };
    if env_flag("TENURE_NETNS_REQUIRE") && !env_flag("TENURE_NETNS_SKIP") {
        panic!("netns suite required (TENURE_NETNS_REQUIRE) but cannot run: {reason}");
    }
    say(format!(
        "netns suite skipped ({reason}): it needs root, ip and nftables; run .ci/run or sudo"
    ));
    true
}

// ---------------------------------------------------------------------------------
// Schedules

/// A fault as generated. Who it hits is resolved when it lands: "the leader" is whoever
/// holds the lease then; other nodes come from the step's shuffled order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fault {
    /// Symmetric partition: `size` nodes (with the leader among them or not) against
    /// the rest.
    Split { size: usize, with_leader: bool },
    /// The leader cut off from everyone, both ways.
    IsolateLeader,
    /// One node's traffic dropped in one direction only: all it sends, or all it
    /// receives.
    OneWay { leader: bool, outbound: bool },
    /// Two pairs that cannot reach each other, and a fifth node that reaches both.
    Bridge { leader_is_bridge: bool },
    /// `pct` % of the packets of `count` nodes dropped, in and out (nft `numgen`).
    Loss { count: usize, pct: u32 },
    /// SIGSTOP, SIGCONT at the end of the step.
    Pause { leader: bool },
    /// SIGKILL, restarted on the same data folder at the end of the step.
    Kill { leader: bool },
    /// The node cut off (both ways) from two others only; the remaining two reach
    /// everyone.
    Partial { leader: bool },
    /// SIGKILL and an immediate restart, `after_ms` into the step: a voter that forgets
    /// what it acknowledged (a non-leader is taken from the end of the step's order, so
    /// with a partial partition it is one that still reaches both sides). With
    /// `cut_from_leader` it comes back unable to hear the leader, so nothing but its
    /// restart quiet period stops it voting at once.
    Restart {
        leader: bool,
        after_ms: u64,
        cut_from_leader: bool,
    },
    /// SIGKILL, a new address for the node's namespace under the same name (its veth's
    /// address changed, every hosts file rewritten), and a restart there at once: the
    /// others must reach it at its new address, by asking its name again. Never drawn by
    /// [`Schedule::generate`] (the seeds keep their schedules); the move test puts it in
    /// its own schedule.
    Move { leader: bool },
}

impl Fault {
    /// Whether [`stalled_by`] can find a follower this fault stalls, whoever leads (a
    /// fault on the leader alone, or a bridge, stalls none; a one-node loss may land on
    /// the leader).
    fn may_stall_a_follower(&self) -> bool {
        match *self {
            Fault::Split { size, with_leader } => size >= 2 || !with_leader,
            Fault::Loss { count, .. } => count >= 2,
            Fault::IsolateLeader | Fault::Bridge { .. } => false,
            Fault::OneWay { leader, .. }
            | Fault::Partial { leader }
            | Fault::Pause { leader }
            | Fault::Kill { leader }
            | Fault::Move { leader }
            | Fault::Restart { leader, .. } => !leader,
        }
    }

    fn is_process(&self) -> bool {
        matches!(
            self,
            Fault::Pause { .. } | Fault::Kill { .. } | Fault::Restart { .. } | Fault::Move { .. }
        )
    }

    fn random(rng: &mut StdRng) -> Fault {
        match rng.gen_range(0..9) {
            0 => Fault::Split {
                size: rng.gen_range(1..=2),
                with_leader: rng.gen_bool(0.5),
            },
            1 => Fault::IsolateLeader,
            2 => Fault::OneWay {
                leader: rng.gen_bool(0.7),
                outbound: rng.gen_bool(0.5),
            },
            3 => Fault::Bridge {
                leader_is_bridge: rng.gen_bool(0.5),
            },
            4 => Fault::Loss {
                count: rng.gen_range(1..=5),
                pct: rng.gen_range(10..=40),
            },
            5 => Fault::Pause {
                leader: rng.gen_bool(0.7),
            },
            6 => Fault::Kill {
                leader: rng.gen_bool(0.7),
            },
            7 => Fault::Partial {
                leader: rng.gen_bool(0.7),
            },
            _ => Fault::Restart {
                leader: rng.gen_bool(0.5),
                after_ms: rng.gen_range(0..=300),
                cut_from_leader: false,
            },
        }
    }

    /// A process fault to go with network fault `with`.
    fn random_process(rng: &mut StdRng, with: &Fault) -> Fault {
        let leader = rng.gen_bool(0.5);
        if matches!(with, Fault::Partial { .. }) {
            // A voter the leader's lease counts on restarts, deaf to the leader, while
            // the cut-off nodes campaign (their first try comes 200-300 ms after the cut):
            // its restart quiet period keeps it from electing one of them before the old
            // lease ran out. (Over QUIC the first message a peer sends to a restarted node
            // is often lost as well: it draws the stateless reset that reveals the
            // restart, and raft-rs resends no vote request within an election timeout.
            // That hides a missing quiet period in most such steps, not all.)
            return Fault::Restart {
                leader: false,
                after_ms: rng.gen_range(50..=250),
                cut_from_leader: true,
            };
        }
        match rng.gen_range(0..3) {
            0 => Fault::Pause { leader },
            1 => Fault::Kill { leader },
            _ => Fault::Restart {
                leader,
                after_ms: rng.gen_range(0..=300),
                cut_from_leader: false,
            },
        }
    }
}

/// What the operator does during a step, with `ctl` from its own namespace (the workers'
/// admin endpoints, operator certificate).
#[derive(Debug, Clone, PartialEq, Eq)]
enum NetOp {
    /// `ctl transfer [--to X]`, `after_ms` into the step's hold, while its faults are on.
    Transfer { to: OpTo, after_ms: u64 },
    /// `ctl drain X` `after_ms` into the hold (the leader, which hands over at once, or a
    /// follower); `ctl undrain X` once the step healed, asked again until it is done.
    Drain { leader: bool, after_ms: u64 },
    /// The handover of docs/design.md section 4 on real processes, in a step of its own
    /// (no other fault): a follower is paused (SIGSTOP), `ctl transfer --to` it (it
    /// cannot take over: the transfer times out), and `stall_ms` after the pause it is
    /// resumed (it handles the `MsgTimeoutNow` it was sent) with its packets to the old
    /// leader dropped for `cut_ms`.
    StalledHandover { stall_ms: u64, cut_ms: u64 },
    /// A replacement machine: the spare (node 6, on an empty folder, `--join`) starts as
    /// the step begins; `after_ms` into the hold, `ctl members add 6 ...`, then
    /// `ctl members replace OLD 6`, each asked again until carried out (refusals while the
    /// faults hold are expected: no quorum, the learner behind, a change in flight).
    /// OLD, the leader or the node the step's faults stall, is then stopped for good.
    Replace { old: OldVoter, after_ms: u64 },
}

/// Who a replacement machine replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OldVoter {
    /// The leader (it hands over once the change is applied).
    Leader,
    /// The follower the step's faults stall (down, paused, cut off): a dead machine.
    Stalled,
}

/// Whom a transfer goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpTo {
    /// `ctl transfer`: the most up-to-date follower.
    Best,
    /// The first follower of the step's order.
    Follower,
    /// The follower the step's faults stall (paused, killed, restarting, cut off, lossy):
    /// a handover to a node that cannot take over now (the most up-to-date follower if
    /// the faults stall none but the leader).
    Stalled,
}

/// How many ops of one kind a schedule drew, asked (the `ctl` command was run as drawn:
/// a transfer to a stalled node only when the step's faults stalled one) and saw carried
/// out (the answer was `ok`; a drain and its undrain both; a stalled handover's node woke
/// cut from the old leader; a replacement's old node retired).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    drawn: usize,
    asked: usize,
    done: usize,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.drawn += o.drawn;
        self.asked += o.asked;
        self.done += o.done;
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}/{}/{}", self.drawn, self.asked, self.done)
    }
}

/// The operator's ops of a run (or of the suite), by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct OpCounts {
    /// `ctl transfer` and `ctl transfer --to FOLLOWER`.
    transfers: Tally,
    /// `ctl transfer --to X`, X a node the step's faults stall.
    to_stalled: Tally,
    stalled_handovers: Tally,
    drains: Tally,
    replacements: Tally,
    /// `ctl elections transfer shard-K [--to X]`.
    election_transfers: Tally,
}

/// The kinds [`OpCounts`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Transfer,
    ToStalled,
    StalledHandover,
    Drain,
    Replace,
}

impl OpKind {
    fn of(op: &NetOp) -> OpKind {
        match op {
            NetOp::Transfer {
                to: OpTo::Stalled, ..
            } => OpKind::ToStalled,
            NetOp::Transfer { .. } => OpKind::Transfer,
            NetOp::Drain { .. } => OpKind::Drain,
            NetOp::StalledHandover { .. } => OpKind::StalledHandover,
            NetOp::Replace { .. } => OpKind::Replace,
        }
    }
}

impl OpCounts {
    /// What `schedule` drew.
    fn drawn(schedule: &Schedule) -> OpCounts {
        let mut c = OpCounts::default();
        for op in schedule.steps.iter().filter_map(|s| s.op.as_ref()) {
            c.of(OpKind::of(op)).drawn += 1;
        }
        c.election_transfers.drawn = schedule
            .steps
            .iter()
            .filter(|s| s.election_op.is_some())
            .count();
        c
    }

    fn of(&mut self, kind: OpKind) -> &mut Tally {
        match kind {
            OpKind::Transfer => &mut self.transfers,
            OpKind::ToStalled => &mut self.to_stalled,
            OpKind::StalledHandover => &mut self.stalled_handovers,
            OpKind::Drain => &mut self.drains,
            OpKind::Replace => &mut self.replacements,
        }
    }
}

impl std::ops::AddAssign for OpCounts {
    fn add_assign(&mut self, o: OpCounts) {
        self.transfers += o.transfers;
        self.to_stalled += o.to_stalled;
        self.stalled_handovers += o.stalled_handovers;
        self.drains += o.drains;
        self.replacements += o.replacements;
        self.election_transfers += o.election_transfers;
    }
}

impl fmt::Display for OpCounts {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "transfers {}, to stalled nodes {}, stalled handovers {}, drains {}, \
             replacements {}, named election transfers {} (drawn/asked/carried out)",
            self.transfers,
            self.to_stalled,
            self.stalled_handovers,
            self.drains,
            self.replacements,
            self.election_transfers
        )
    }
}

/// Faults that start together and heal together.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    /// Quiet time before the faults land.
    gap_ms: u64,
    /// How long they last.
    hold_ms: u64,
    faults: Vec<Fault>,
    /// The nodes in random order, to pick "some node" from.
    order: Vec<u64>,
    /// What the operator does meanwhile.
    op: Option<NetOp>,
    /// And a transfer of one named election, drawn apart (`draw_election_ops`).
    election_op: Option<ElectionOp>,
    /// And a disk fault, drawn apart (`draw_disk_faults`).
    disk: Option<DiskFault>,
}

/// A fault of one worker's disk, on the workers' fault filesystems
/// (`tenure_harness::faultfs`), beside a step's other faults. Without a fault
/// filesystem (no FUSE here, and not required) a power loss is a plain kill and a stall
/// does nothing; the run says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DiskFault {
    /// SIGKILL, then what the node's disk had not synced is lost (or, `torn`, a random
    /// prefix of it kept); it restarts on the same folder when the step heals.
    PowerLoss { leader: bool, torn: bool },
    /// Every write and sync of the node's disk held for `ms` (it may outlast the step).
    Stall { leader: bool, ms: u64 },
}

/// `ctl elections transfer shard-K [--to X]`, `after_ms` into the step's hold, while its
/// faults are on: to the election's most up-to-date follower, a follower, or a node the
/// faults stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ElectionOp {
    shard: u64,
    to: OpTo,
    after_ms: u64,
}

/// 3–6 faults in steps of one network fault or one process fault, or both at once.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Schedule {
    seed: u64,
    steps: Vec<Step>,
}

impl Schedule {
    fn generate(seed: u64) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let total = rng.gen_range(3..=6);
        let mut steps = Vec::new();
        let mut count = 0;
        while count < total {
            let mut faults = vec![Fault::random(&mut rng)];
            let pair = if matches!(faults[0], Fault::Partial { .. }) {
                0.7
            } else {
                0.3
            };
            if count + 1 < total && !faults[0].is_process() && rng.gen_bool(pair) {
                let p = Fault::random_process(&mut rng, &faults[0]);
                faults.push(p);
            }
            count += faults.len();
            let mut order: Vec<u64> = (1..=N).collect();
            order.shuffle(&mut rng);
            steps.push(Step {
                gap_ms: rng.gen_range(300..=1500),
                hold_ms: rng.gen_range(1000..=3000),
                faults,
                order,
                op: None,
                election_op: None,
                disk: None,
            });
        }
        draw_ops(seed, &mut steps);
        draw_election_ops(seed, &mut steps);
        draw_disk_faults(seed, &mut steps);
        Schedule { seed, steps }
    }

    fn faults(&self) -> usize {
        self.steps.iter().map(|s| s.faults.len()).sum()
    }

    fn duration(&self) -> Duration {
        Duration::from_millis(self.steps.iter().map(|s| s.gap_ms + s.hold_ms).sum())
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {} faults over {:.1} s",
            self.seed,
            self.faults(),
            self.duration().as_secs_f64()
        )?;
        for s in &self.steps {
            writeln!(
                f,
                "  after {} ms, for {} ms: {:?} (order {:?}){}{}{}",
                s.gap_ms,
                s.hold_ms,
                s.faults,
                s.order,
                s.op.as_ref()
                    .map_or(String::new(), |o| format!(", operator: {o:?}")),
                s.election_op
                    .map_or(String::new(), |o| format!(", named election: {o:?}")),
                s.disk.map_or(String::new(), |d| format!(", disk: {d:?}"))
            )?;
        }
        Ok(())
    }
}

/// The disk faults of schedule `seed`, from an RNG of their own (each seed keeps the
/// faults and ops it had): in about half the steps a power loss (torn in half of them)
/// and in about three in ten a stall of 1 to 6 s, of the leader or of another node;
/// none in a stalled handover's step (it has no other fault) nor beside a move.
fn draw_disk_faults(seed: u64, steps: &mut [Step]) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xd15c_fa17);
    for s in steps.iter_mut() {
        let r: f64 = rng.gen();
        let leader = rng.gen_bool(0.5);
        let (torn, ms) = (rng.gen_bool(0.5), rng.gen_range(1000..=6000));
        if matches!(s.op, Some(NetOp::StalledHandover { .. }))
            || s.faults.iter().any(|f| matches!(f, Fault::Move { .. }))
        {
            continue;
        }
        s.disk = if r < 0.5 {
            Some(DiskFault::PowerLoss { leader, torn })
        } else if r < 0.8 {
            Some(DiskFault::Stall { leader, ms })
        } else {
            None
        };
    }
}

/// The operator's part of schedule `seed`, from an RNG of its own (each seed keeps the
/// faults it had): in three steps of five a transfer (to the most up-to-date follower, to
/// a follower, or, half of them, to the node the step's faults stall, where they may
/// stall a follower; else to a follower) or a drain, and in
/// one schedule of three a replacement machine (a step's op replaced by it), in two
/// schedules of five a stalled handover in a step of its own.
fn draw_ops(seed: u64, steps: &mut Vec<Step>) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0be7_a70e);
    for s in steps.iter_mut() {
        if !rng.gen_bool(0.6) {
            continue;
        }
        let after_ms = rng.gen_range(0..=s.hold_ms / 2);
        s.op = Some(if rng.gen_bool(0.7) {
            let to = match rng.gen_range(0..4) {
                0 => OpTo::Best,
                1 => OpTo::Follower,
                // Only where a fault stalls a follower: with faults on the leader alone
                // (or a bridge) half of these became plain transfers at run time.
                _ if s.faults.iter().any(Fault::may_stall_a_follower) => OpTo::Stalled,
                _ => OpTo::Follower,
            };
            NetOp::Transfer { to, after_ms }
        } else {
            NetOp::Drain {
                leader: rng.gen_bool(0.5),
                after_ms,
            }
        });
    }
    // A replacement machine in one schedule of three, in a step with faults (drawn before
    // the stalled handover, which may be inserted before it).
    if rng.gen_bool(1.0 / 3.0) {
        let i = rng.gen_range(0..steps.len());
        let old = if rng.gen_bool(1.0 / 3.0) {
            OldVoter::Leader
        } else {
            OldVoter::Stalled
        };
        let after_ms = rng.gen_range(0..=steps[i].hold_ms / 2);
        steps[i].op = Some(NetOp::Replace { old, after_ms });
    }
    if rng.gen_bool(0.4) {
        let at = rng.gen_range(0..=steps.len());
        let mut order: Vec<u64> = (1..=N).collect();
        order.shuffle(&mut rng);
        // Longer than the transfer's timeout (an election timeout, 200-300 ms) with a
        // heartbeat before it.
        let stall_ms = rng.gen_range(500..=900);
        let cut_ms = rng.gen_range(500..=1500);
        steps.insert(
            at,
            Step {
                gap_ms: rng.gen_range(300..=1000),
                hold_ms: stall_ms + cut_ms,
                faults: Vec::new(),
                order,
                op: Some(NetOp::StalledHandover { stall_ms, cut_ms }),
                election_op: None,
                disk: None,
            },
        );
    }
}

/// Transfers of named elections, in half the steps (not a stalled handover's), from an RNG
/// of their own: every seed keeps the faults and ops it drew before named elections.
fn draw_election_ops(seed: u64, steps: &mut [Step]) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5ead_e1ec);
    for s in steps.iter_mut() {
        if matches!(s.op, Some(NetOp::StalledHandover { .. })) || !rng.gen_bool(0.5) {
            continue;
        }
        let to = match rng.gen_range(0..3) {
            0 => OpTo::Best,
            1 => OpTo::Follower,
            _ => OpTo::Stalled,
        };
        s.election_op = Some(ElectionOp {
            shard: rng.gen_range(0..ELECTIONS),
            to,
            after_ms: rng.gen_range(0..=s.hold_ms / 2),
        });
    }
}

/// The nodes of `order`, the leader first (`leader_first`) or left out (else).
fn pick(order: &[u64], leader: Option<u64>, leader_first: bool) -> Vec<u64> {
    let others: Vec<u64> = order
        .iter()
        .copied()
        .filter(|n| Some(*n) != leader)
        .collect();
    match leader {
        Some(l) if leader_first => std::iter::once(l).chain(others).collect(),
        _ => others,
    }
}

fn names(nodes: &[u64]) -> String {
    nodes
        .iter()
        .map(|n| format!("n{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Adds a network fault to `net`; returns what it did, in words.
fn apply_net(fault: &Fault, order: &[u64], leader: Option<u64>, net: &mut NetState) -> String {
    let lead = |n: u64| if Some(n) == leader { " (leader)" } else { "" };
    match *fault {
        Fault::Split { size, with_leader } => {
            let nodes = pick(order, leader, with_leader);
            let mut rest: Vec<u64> = order
                .iter()
                .copied()
                .filter(|n| !nodes[..size].contains(n))
                .collect();
            rest.sort_unstable();
            let mut minority = nodes[..size].to_vec();
            minority.sort_unstable();
            net.cut_between(&minority, &rest);
            format!(
                "split {} | {} (leader n{})",
                names(&minority),
                names(&rest),
                leader.map_or("?".into(), |l| l.to_string())
            )
        }
        Fault::IsolateLeader => {
            let nodes = pick(order, leader, true);
            net.cut_between(&nodes[..1], &nodes[1..]);
            format!("isolate n{}{}", nodes[0], lead(nodes[0]))
        }
        Fault::OneWay {
            leader: l,
            outbound,
        } => {
            let nodes = pick(order, leader, l);
            let x = nodes[0];
            let others: Vec<u64> = order.iter().copied().filter(|n| *n != x).collect();
            if outbound {
                net.cut_one_way(x, &others);
                format!("n{x}{} cannot send (one way)", lead(x))
            } else {
                for o in &others {
                    net.cut_one_way(*o, &[x]);
                }
                format!("n{x}{} cannot receive (one way)", lead(x))
            }
        }
        Fault::Bridge { leader_is_bridge } => {
            let nodes = pick(order, leader, leader_is_bridge);
            let b = nodes[0];
            let rest: Vec<u64> = order.iter().copied().filter(|n| *n != b).collect();
            net.cut_between(&rest[..2], &rest[2..]);
            format!(
                "bridge n{b}{} between {} and {}",
                lead(b),
                names(&rest[..2]),
                names(&rest[2..])
            )
        }
        Fault::Partial { leader: l } => {
            let nodes = pick(order, leader, l);
            let x = nodes[0];
            let rest: Vec<u64> = order.iter().copied().filter(|n| *n != x).collect();
            net.cut_between(&[x], &rest[..2]);
            format!(
                "n{x}{} cut from {} only (partial)",
                lead(x),
                names(&rest[..2])
            )
        }
        Fault::Loss { count, pct } => {
            let nodes = &order[..count];
            for n in nodes {
                net.loss.insert(*n, pct);
            }
            format!("{pct}% loss on {}", names(nodes))
        }
        Fault::Pause { .. } | Fault::Kill { .. } | Fault::Restart { .. } | Fault::Move { .. } => {
            unreachable!("not a network fault")
        }
    }
}

// ---------------------------------------------------------------------------------
// One run

/// How one schedule went.
struct Outcome {
    schedule: Schedule,
    /// The faults as applied.
    applied: Vec<String>,
    /// Final heal → first lease acquired or confirmed.
    recovery: Option<Duration>,
    writes: usize,
    /// Stale writes the fence turned away.
    rejected: usize,
    terms: usize,
    /// Applied-history samples (the workers' `history` events) judged by rule (f).
    histories: usize,
    /// Each restart after a kill: spawn → the worker's `started` event.
    restarts: Vec<Duration>,
    /// Each time the leader was cut from the majority, paused or killed: how long until
    /// another node acquired a lease.
    failovers: Vec<Duration>,
    /// The operator's `ctl` commands and what each returned.
    ops: Vec<CtlRun>,
    /// The operator's ops by kind: drawn, asked, carried out.
    counts: OpCounts,
    /// Workers that did not exit with 0 at the final graceful stop: (node, signal).
    unclean_stops: Vec<(u64, Option<i32>)>,
    /// Power losses on the fault filesystems, and the unsynced bytes they took.
    power_losses: usize,
    unsynced_lost: u64,
    /// Disk stalls on the fault filesystems.
    disk_stalls: usize,
    /// Whether the ledger was PostgreSQL's (else SQLite's).
    postgres: bool,
    /// How late each `lease_lost` was heard after its lease ended (`mono_ns −
    /// ended_ns`), outside the node's pauses: (node, lateness, election).
    lease_ends: Vec<(u64, Duration, String)>,
    /// Everything wrong, with timelines; empty when the run passed.
    problems: Vec<String>,
    took: Duration,
}

impl Outcome {
    /// Nothing happened yet (or nothing could be measured).
    fn new(schedule: Schedule) -> Outcome {
        Outcome {
            counts: OpCounts::drawn(&schedule),
            schedule,
            applied: Vec::new(),
            recovery: None,
            writes: 0,
            rejected: 0,
            terms: 0,
            histories: 0,
            restarts: Vec::new(),
            failovers: Vec::new(),
            ops: Vec::new(),
            unclean_stops: Vec::new(),
            power_losses: 0,
            unsynced_lost: 0,
            disk_stalls: 0,
            postgres: false,
            lease_ends: Vec::new(),
            problems: Vec::new(),
            took: Duration::ZERO,
        }
    }
}

/// The harness's own events (faults, heals, kills), for the checker's timeline.
fn harness_events(lab: &Lab) -> Vec<Event> {
    lab.actions
        .lock()
        .unwrap()
        .iter()
        .filter_map(|a| {
            let kind = match a.kind {
                netns::ActionKind::Fault => Kind::Fault,
                netns::ActionKind::Heal => Kind::Heal,
                netns::ActionKind::Crash => Kind::Crashed,
                netns::ActionKind::Op => Kind::Other("op".into()),
                netns::ActionKind::Start | netns::ActionKind::Stop => return None,
            };
            Some(Event::new(a.node, a.mono_ns, kind).note(a.what.clone()))
        })
        .collect()
}

/// The ledger's accepted writes, in commit order, by the fence that accepted them
/// (`settlement`: the root election's; `shard-K`: named election `shard-K`'s).
fn ledger_writes(
    at: &ledger::LedgerAt,
) -> Result<std::collections::BTreeMap<String, Vec<Write>>, String> {
    let mut by_fence: std::collections::BTreeMap<String, Vec<Write>> = Default::default();
    for w in ledger::Ledger::open_at(at, 0)?.accepted_writes()? {
        by_fence.entry(w.fence).or_default().push(Write {
            seq: w.seq,
            token: w.token,
            node: w.node,
            at_ns: Some(w.mono_ns),
        });
    }
    Ok(by_fence)
}

/// Every [`POSTGRES_EVERY`]th seed (3, 7, 11, …) settles into PostgreSQL instead of
/// SQLite when there is a server (`TENURE_PG_URL`; required with `TENURE_PG_REQUIRE=1`):
/// a schema of the test server's, reached by the workers in their namespaces over its
/// Unix socket. The checks are the same.
const POSTGRES_EVERY: u64 = 4;

/// The schedule's ledger: SQLite at `path`, or a schema of the PostgreSQL test server's
/// (then also returned, to drop after a passing run). An error is a problem of the run.
fn schedule_ledger(
    tag: &str,
    seed: u64,
    path: &Path,
) -> Result<(ledger::LedgerAt, Option<tenure_harness::pg::TestDb>), String> {
    use tenure_harness::pg;
    let file = || (ledger::LedgerAt::File(path.to_path_buf()), None);
    if seed % POSTGRES_EVERY != POSTGRES_EVERY - 1 {
        return Ok(file());
    }
    if let Some(why) = pg::skip_reason() {
        if pg::required() {
            return Err(format!(
                "a PostgreSQL server is required (TENURE_PG_REQUIRE) but {why}"
            ));
        }
        return Ok(file());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let db = rt.block_on(pg::TestDb::new(&format!("netns_{tag}_{seed}")));
    let at = ledger::LedgerAt::parse(&db.url())?;
    Ok((at, Some(db)))
}

/// Adds a batch every [`FEED_EVERY`] until stopped, so the leader has work during the
/// faults.
fn feeder(at: ledger::LedgerAt, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Ok(mut l) = ledger::Ledger::open_at(&at, 0) else {
            return;
        };
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(FEED_EVERY);
            // A paused writer can hold the file lock: then this waits or fails, harmless.
            let _ = l.seed(1, ROWS);
        }
    })
}

fn run_schedule(tag: &str, schedule: Schedule, worker: &Path, ctl: &Path) -> Outcome {
    let started = Instant::now();
    let mut out = Outcome::new(schedule.clone());
    // (when, leader, until the step healed) each time a fault took the leader out.
    let mut leader_out: Vec<(u64, u64, u64)> = Vec::new();
    let mut args: Vec<String> = WORKER_ARGS
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    let ledger_dir = tempfile::tempdir().expect("temp dir");
    let ledger_path = ledger_dir.path().join("ledger.db");
    let (ledger_at, pg_db) = match schedule_ledger(tag, schedule.seed, &ledger_path) {
        Ok(l) => l,
        Err(e) => {
            out.problems.push(e);
            return out;
        }
    };
    out.postgres = pg_db.is_some();
    args.push("--ledger".into());
    args.push(match &pg_db {
        Some(db) => db.url(),
        None => ledger_path.display().to_string(),
    });
    let mut lab = match Lab::new(tag, N, worker.to_path_buf(), &args) {
        Ok(l) => l,
        Err(e) => {
            out.problems.push(format!("lab setup failed: {e}"));
            return out;
        }
    };
    // The workers' folders on fault filesystems, mounted before they start.
    match faultfs::skip_reason() {
        None => {
            if let Err(e) = lab.use_fault_fs() {
                out.problems.push(format!("fault filesystem: {e}"));
                return out;
            }
        }
        Some(why) if faultfs::required() => {
            out.problems.push(format!(
                "the fault filesystem is required (TENURE_FUSE_REQUIRE) but cannot run: {why}"
            ));
            return out;
        }
        Some(_) => {}
    }
    ledger::Ledger::open_at(&ledger_at, 0)
        .and_then(|mut l| l.seed(3, ROWS))
        .expect("seed the ledger");
    lab.start_all();
    if lab
        .wait_line(FIRST_LEASE, |l| l.event == "lease_acquired" && l.is_root())
        .is_none()
    {
        out.problems.push(format!(
            "no lease within {FIRST_LEASE:?} of starting\n{}",
            lab.timeline().join("\n")
        ));
        return out;
    }
    let operator = lab.operator(ctl);
    // (spare, old) for each replacement carried out.
    let mut replaced_by: Vec<(u64, u64)> = Vec::new();
    let stop_feeding = Arc::new(AtomicBool::new(false));
    let feeding = feeder(ledger_at.clone(), stop_feeding.clone());

    for step in &schedule.steps {
        // A replaced node's place in the order is its replacement's: later faults land on
        // the machine that now does its job (the retired one is never started again).
        let mut step = step.clone();
        for x in &mut step.order {
            if let Some((spare, _)) = replaced_by.iter().find(|(_, old)| old == x) {
                *x = *spare;
            }
        }
        match run_step(
            &mut lab,
            &step,
            &operator,
            &mut leader_out,
            (&mut out.ops, &mut out.counts),
            &mut replaced_by,
        ) {
            Ok(words) => out.applied.push(words),
            Err(e) => {
                out.problems.push(e);
                break;
            }
        }
    }

    // The final heal: links up, nobody paused, everybody running.
    stop_feeding.store(true, Ordering::Relaxed);
    if let Err(e) = lab.heal_all() {
        out.problems.push(format!("nft failed: {e}"));
    }
    let healed = monotonic_ns();
    lab.note(netns::ActionKind::Heal, 0, "final heal");
    let _ = feeding.join();
    // Work after the heal, so settling must resume.
    let _ = ledger::Ledger::open_at(&ledger_at, 0).and_then(|mut l| l.seed(2, ROWS));
    lab.wait_line(LIVENESS_BOUND, |l| {
        (l.event == "lease_acquired" || l.event == "lease_confirmed")
            && l.is_root()
            && l.mono_ns >= healed
    });
    let deadline = Instant::now() + SETTLE_BOUND;
    let report = loop {
        let r = ledger::Ledger::open_at(&ledger_at, 0).and_then(|l| l.verify_shards(ELECTIONS));
        match r {
            Ok(r) if r.exactly_once() || Instant::now() >= deadline => break Ok(r),
            Err(e) if Instant::now() >= deadline => break Err(e),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    // A little more history, then a graceful stop.
    std::thread::sleep(Duration::from_millis(300));
    // Every worker must stop cleanly on SIGTERM (exit code 0). Workers used to abort here
    // now and then: `shutdown` returned while the driver still closed the RocksDB store,
    // and `process::exit` aborted it (tests/storage/shutdown.rs).
    out.unclean_stops = lab.stop_all(Duration::from_secs(5));
    disk_figures(&lab, &mut out);
    // A worker hears of its lease's end from the lease clock, whatever its disk does:
    // outside its pauses, never as late as a stalled disk or driver would make it. Issue
    // 2/8's target (within 5 ms) is a speed figure, reported in the summary and measured
    // by `cargo bench --bench stall`; a run fails only past LEASE_END_HEARD_BOUND, which
    // no scheduling delay on this machine came near and a lease end left to the driver
    // (stalled 1-6 s here) exceeds by far.
    for (node, late, election) in &out.lease_ends {
        if *late > LEASE_END_HEARD_BOUND {
            out.problems.push(format!(
                "n{node} heard that its lease of {election} ended {:.1} ms after it ended \
                 (more than {LEASE_END_HEARD_BOUND:?}, and the process was not paused)\n{}",
                late.as_secs_f64() * 1e3,
                tail(&lab.timeline(), 40)
            ));
        }
    }
    for (n, sig) in &out.unclean_stops {
        out.problems.push(format!(
            "n{n} did not stop cleanly on SIGTERM at the end of the schedule ({})",
            sig.map_or("exit code != 0 or killed".to_string(), |s| format!(
                "signal {s}"
            ))
        ));
    }

    // Judge.
    let mut events: Vec<Event> = lab
        .lines()
        .iter()
        .filter_map(|l| Event::from_json(&l.v))
        // A named election's event that carries no token (an empty history sample, a
        // joiner's term 0) names no incarnation: it says nothing the checker can judge.
        .filter(|e| e.election.is_none() || e.election_id != 0)
        .collect();
    events.extend(harness_events(&lab));
    // The voter configurations a replacement may bring, from its first `members replace`
    // on (rule (c) counts the quorum of each configuration a leader may have used).
    let mut voters: Vec<u64> = (1..=N).collect();
    for (spare, old) in &replaced_by {
        let asked = out
            .ops
            .iter()
            .find(|r| r.command == format!("members replace {old} {spare}"))
            .map_or(0, |r| r.asked_ns);
        let mut new: Vec<u64> = voters.iter().copied().filter(|v| v != old).collect();
        new.push(*spare);
        events.push(Event::members(0, asked, new.clone(), voters.clone()));
        events.push(Event::members(0, asked, new.clone(), Vec::new()));
        voters = new;
    }
    let mut fences = match ledger_writes(&ledger_at) {
        Ok(w) => w,
        Err(e) => {
            out.problems
                .push(format!("cannot read the ledger's writes: {e}"));
            Default::default()
        }
    };
    out.writes = fences.values().map(Vec::len).sum();
    let writes = fences.remove("settlement").unwrap_or_default();
    out.rejected = events
        .iter()
        .filter(|e| e.kind == Kind::FenceRejected)
        .count();
    out.restarts = restart_times(&lab);
    let lines = lab.lines();
    out.failovers = leader_out
        .iter()
        .filter_map(|(at, old, until)| {
            lines
                .iter()
                .filter(|l| l.event == "lease_acquired" && l.is_root() && l.node != *old)
                .filter(|l| l.mono_ns > *at && l.mono_ns < *until)
                .map(|l| l.mono_ns - at)
                .min()
                .map(Duration::from_nanos)
        })
        .collect();
    // Every election is judged by itself: the root's writes are the `settlement` fence's,
    // each named election's are its own fence's; each must have a lease again after the
    // final heal (the root's, and shard-0 … shard-3's: ids 1 to 4, created in that order
    // by the first root leader from the workers' declared list).
    let bound = LIVENESS_BOUND.as_nanos() as u64;
    let mut opts = checker::Options::new(N as usize)
        .liveness(healed, bound)
        .fences(fences);
    for id in 1..=ELECTIONS as u32 {
        opts = opts.election_liveness(id, healed, bound);
    }
    match checker::check(&events, &writes, &opts) {
        Ok(s) => {
            out.recovery = s.recovery_ns.map(Duration::from_nanos);
            out.terms = s.terms_with_leases;
            out.histories = s.histories;
        }
        Err(f) => {
            out.recovery = f.summary.recovery_ns.map(Duration::from_nanos);
            out.terms = f.summary.terms_with_leases;
            out.histories = f.summary.histories;
            out.problems.push(format!("checker: {f}"));
        }
    }
    match report {
        Ok(r) if r.exactly_once() && r.token_regressions.is_empty() => {}
        Ok(r) => out.problems.push(format!(
            "ledger: not exactly once within {SETTLE_BOUND:?} of the final heal, or tokens \
             went back: {r:?}\nlast events:\n{}",
            tail(&lab.timeline(), 60)
        )),
        Err(e) => out.problems.push(format!("ledger: {e}")),
    }
    // A failing run's whole timeline goes to a file (the report carries only its tail).
    if !out.problems.is_empty() {
        let file = std::env::temp_dir().join(format!(
            "tenure-netns-seed{}-{}.timeline",
            out.schedule.seed,
            std::process::id()
        ));
        match std::fs::write(&file, lab.timeline().join("\n")) {
            Ok(()) => out
                .problems
                .push(format!("the whole timeline: {}", file.display())),
            Err(e) => out.problems.push(format!(
                "the timeline not written to {}: {e}",
                file.display()
            )),
        }
    }
    // A passing run's PostgreSQL schema goes; a failing one's stays, to look at.
    if let Some(db) = pg_db.filter(|_| out.problems.is_empty()) {
        drop(lab);
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(db.drop_schema());
        }
    }
    out.took = started.elapsed();
    out
}

/// The node a fault stalls, as [`apply_net`] and [`run_step`] resolve it: cut off,
/// one-way, partially cut, on the minority side, lossy (`None` for a bridge).
fn stalled_by(fault: &Fault, order: &[u64], leader: Option<u64>) -> Option<u64> {
    let not_leader = |v: &[u64]| v.iter().copied().find(|n| Some(*n) != leader);
    match *fault {
        Fault::IsolateLeader => pick(order, leader, true).first().copied(),
        Fault::OneWay { leader: l, .. } | Fault::Partial { leader: l } => {
            pick(order, leader, l).first().copied()
        }
        Fault::Split { size, with_leader } => not_leader(&pick(order, leader, with_leader)[..size]),
        Fault::Loss { count, .. } => not_leader(&order[..count]),
        Fault::Bridge { .. } => None,
        Fault::Pause { leader: l } | Fault::Kill { leader: l } | Fault::Move { leader: l } => {
            pick(order, leader, l).first().copied()
        }
        Fault::Restart { leader: l, .. } => {
            if l {
                pick(order, leader, true).first().copied()
            } else {
                pick(order, leader, false).last().copied()
            }
        }
    }
}

/// Runs one step: waits its gap, lands its faults on whoever they resolve to, holds,
/// heals; the step's operator op runs among its faults (its answers go to `ops`).
/// Returns what it did, in words. Each time the leader is cut from the majority, paused
/// or killed, or handed over to a stalled node, `(when, leader, when the step healed)`
/// goes into `leader_out`.
fn run_step(
    lab: &mut Lab,
    step: &Step,
    operator: &netns::Operator,
    leader_out: &mut Vec<(u64, u64, u64)>,
    (ops, counts): (&mut Vec<CtlRun>, &mut OpCounts),
    configs: &mut Vec<(u64, u64)>,
) -> Result<String, String> {
    std::thread::sleep(Duration::from_millis(step.gap_ms));
    if let Some(NetOp::StalledHandover { stall_ms, cut_ms }) = step.op {
        return stalled_handover(
            lab,
            step,
            operator,
            (stall_ms, cut_ms),
            leader_out,
            (ops, counts),
        );
    }
    let leader = lab.current_leader();
    let tag = |x: u64| if Some(x) == leader { " (leader)" } else { "" };
    let mut net = NetState::default();
    let mut words = Vec::new();
    if let Some(NetOp::Replace { .. }) = step.op {
        let spare = lab.spawn_spare()?;
        words.push(format!("spare n{spare} starts, joining"));
    }
    let mut paused = Vec::new();
    let mut killed = Vec::new();
    let mut restart = None;
    // (node, when it restarted at its new address)
    let mut moved: Vec<(u64, u64)> = Vec::new();
    for f in &step.faults {
        match *f {
            Fault::Move { leader: l } => {
                let x = pick(&step.order, leader, l)[0];
                lab.kill(x);
                let new = lab
                    .move_to_new_address(x)
                    .map_err(|e| format!("moving n{x} failed: {e}"))?;
                moved.push((x, monotonic_ns()));
                lab.spawn(x);
                words.push(format!(
                    "move n{x}{} to {new} as {}",
                    tag(x),
                    netns::host_of(x)
                ));
            }
            Fault::Pause { leader: l } => {
                let x = pick(&step.order, leader, l)[0];
                lab.pause(x);
                paused.push(x);
                words.push(format!("pause n{x}{}", tag(x)));
            }
            Fault::Kill { leader: l } => {
                let x = pick(&step.order, leader, l)[0];
                lab.kill(x);
                killed.push(x);
                words.push(format!("kill n{x}{}", tag(x)));
            }
            Fault::Restart {
                leader: l,
                after_ms,
                cut_from_leader,
            } => {
                let x = if l {
                    pick(&step.order, leader, true)[0]
                } else {
                    *pick(&step.order, leader, false)
                        .last()
                        .expect("a non-leader")
                };
                let cut = leader.filter(|l| cut_from_leader && *l != x);
                restart = Some((x, after_ms.min(step.hold_ms), cut));
                words.push(format!(
                    "restart n{x}{} at +{after_ms} ms{}",
                    tag(x),
                    cut.map_or(String::new(), |l| format!(", cut from n{l}"))
                ));
            }
            _ => words.push(apply_net(f, &step.order, leader, &mut net)),
        }
    }
    if let Some(d) = step.disk {
        // Nodes another fault of the step took: paused, restarting, moved (killed ones
        // are in `killed`).
        let taken: Vec<u64> = paused
            .iter()
            .copied()
            .chain(restart.map(|(r, _, _)| r))
            .chain(moved.iter().map(|(m, _)| *m))
            .collect();
        let words_of = disk_fault(lab, step, leader, d, &taken, &mut killed);
        if let Some((x, w)) = words_of {
            if matches!(d, DiskFault::Stall { .. }) && Some(x) == leader {
                leader_out.push((monotonic_ns(), x, u64::MAX));
            }
            words.push(w);
        }
    }
    if let Some(l) = leader {
        if paused.contains(&l)
            || killed.contains(&l)
            || moved.iter().any(|(x, _)| *x == l)
            || !net.reaches_majority(l, &lab.ids)
        {
            leader_out.push((monotonic_ns(), l, u64::MAX));
        }
    }
    if net != NetState::default() {
        lab.set_net(net.clone(), &words.join("; "))
            .map_err(|e| format!("nft failed: {e}"))?;
    }
    // The operator's op, in a thread of its own: it asks while the faults hold.
    let follower = pick(&step.order, leader, false).first().copied();
    let stalled = step
        .faults
        .iter()
        .filter_map(|f| stalled_by(f, &step.order, leader))
        .find(|x| Some(*x) != leader);
    let mut undrain = None;
    // The kind of op asked as drawn, to count its answer.
    let mut asked = None;
    let command: Option<(u64, Vec<String>)> = match step.op {
        Some(NetOp::Transfer { to, after_ms }) => {
            let target = match to {
                OpTo::Best => None,
                OpTo::Follower => follower,
                OpTo::Stalled => stalled,
            };
            let mut c = vec!["transfer".to_string()];
            if let Some(t) = target {
                c.extend(["--to".to_string(), t.to_string()]);
            }
            words.push(format!(
                "at +{after_ms} ms ctl {}{}",
                c.join(" "),
                if target.is_some() && target == stalled {
                    " (a node the faults stall)"
                } else if to == OpTo::Stalled {
                    " (the faults stall no follower)"
                } else {
                    ""
                }
            ));
            if to == OpTo::Stalled && target.is_none() {
                // Not as drawn: a plain transfer, uncounted.
            } else if to == OpTo::Stalled {
                asked = Some(OpKind::ToStalled);
            } else {
                asked = Some(OpKind::Transfer);
            }
            Some((after_ms, c))
        }
        Some(NetOp::Drain {
            leader: l,
            after_ms,
        }) => {
            let x = if l { leader.or(follower) } else { follower };
            x.map(|x| {
                undrain = Some(x);
                asked = Some(OpKind::Drain);
                words.push(format!("at +{after_ms} ms ctl drain {x}{}", tag(x)));
                (after_ms, vec!["drain".to_string(), x.to_string()])
            })
        }
        _ => None,
    };
    let asking = command.map(|(after, c)| {
        let operator = operator.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(after));
            vec![operator.run(&c, CTL_TIMEOUT_SECS)]
        })
    });
    let election_asking = step.election_op.map(|e| {
        let target = match e.to {
            OpTo::Best => None,
            OpTo::Follower => follower,
            OpTo::Stalled => stalled.or(follower),
        };
        let mut c = vec![
            "elections".to_string(),
            "transfer".to_string(),
            format!("shard-{}", e.shard),
        ];
        if let Some(t) = target {
            c.extend(["--to".to_string(), t.to_string()]);
        }
        words.push(format!("at +{} ms ctl {}", e.after_ms, c.join(" ")));
        let operator = operator.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(e.after_ms));
            operator.run(&c, CTL_TIMEOUT_SECS)
        })
    });
    let mut replacing = None;
    let asking = match step.op {
        Some(NetOp::Replace { old, after_ms }) => {
            let x = match old {
                OldVoter::Leader => leader,
                OldVoter::Stalled => stalled.or(follower),
            };
            x.map(|x| {
                let spare = lab.spare;
                replacing = Some((x, spare));
                asked = Some(OpKind::Replace);
                words.push(format!(
                    "at +{after_ms} ms replace n{x}{} by n{spare}",
                    tag(x)
                ));
                let operator = operator.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(after_ms));
                    replace_until_done(&operator, x, spare)
                })
            })
        }
        _ => asking,
    };
    let mut hold = Duration::from_millis(step.hold_ms);
    if let Some((x, after, cut)) = restart {
        let after = Duration::from_millis(after);
        std::thread::sleep(after);
        hold -= after;
        if Some(x) == leader {
            leader_out.push((monotonic_ns(), x, u64::MAX));
        }
        lab.kill(x);
        if let Some(l) = cut {
            net.cut_between(&[x], &[l]);
            lab.set_net(net, &format!("n{x} restarts cut from n{l}"))
                .map_err(|e| format!("nft failed: {e}"))?;
        }
        lab.spawn(x);
    }
    std::thread::sleep(hold);
    for (x, at) in &moved {
        // Reached again: it names a leader of the root after its restart, which takes
        // messages from the others (a leader's heartbeats, or votes for it) sent to its
        // new address.
        let heard = lab.wait_line(MOVE_REACHED_WITHIN, |l| {
            l.node == *x
                && l.mono_ns >= *at
                && l.event == "leader_changed"
                && l.is_root()
                && l.v
                    .get("leader")
                    .and_then(serde_json::Value::as_u64)
                    .is_some()
        });
        match heard {
            Some(l) => words.push(format!(
                "n{x} reached at its new address {} ms after its restart",
                (l.mono_ns - at) / 1_000_000
            )),
            None => {
                return Err(format!(
                    "n{x} was not reached at its new address within {MOVE_REACHED_WITHIN:?} \
                     of its restart (it named no leader)\n{}",
                    tail(&lab.timeline(), 60)
                ))
            }
        }
    }
    let healing = monotonic_ns();
    for o in leader_out.iter_mut().filter(|o| o.2 == u64::MAX) {
        o.2 = healing;
    }
    lab.set_net(NetState::default(), "heal links")
        .map_err(|e| format!("nft failed: {e}"))?;
    for x in paused {
        lab.resume(x);
    }
    let mut answered = Vec::new();
    if let Some(t) = asking {
        answered = t.join().map_err(|_| "the operator's thread panicked")?;
    }
    let ok = answered.last().is_some_and(|r| r.outcome == "ok");
    // The named election's transfer first: the replacement below reads the step's op's
    // answer as the last one.
    if let Some(t) = election_asking {
        let r = t.join().map_err(|_| "the operator's thread panicked")?;
        counts.election_transfers.asked += 1;
        if r.outcome == "ok" {
            counts.election_transfers.done += 1;
        }
        ops.push(r);
    }
    ops.extend(answered);
    if let Some(kind) = asked {
        counts.of(kind).asked += 1;
        if ok && matches!(kind, OpKind::Transfer | OpKind::ToStalled) {
            counts.of(kind).done += 1;
        }
    }
    if let Some((x, spare)) = replacing {
        // Carried out (the last answer says so): the replaced machine is stopped for
        // good, and a killed one is not started again.
        if ops
            .last()
            .is_some_and(|r| r.command.contains("replace") && replaced(r))
        {
            lab.retire(x);
            configs.push((spare, x));
            counts.replacements.done += 1;
        } else {
            return Err(format!(
                "the group did not carry out the replace of n{x} by n{spare} within \
                 {REPLACE_WITHIN:?} ({} ops asked); last answer: {:?}",
                ops.len(),
                ops.last().map(|r| (&r.outcome, &r.said))
            ));
        }
    }
    for x in killed {
        lab.spawn(x);
    }
    if let Some(x) = undrain {
        let runs = undrain_until_done(operator, x);
        if ok && runs.last().is_some_and(|r| r.outcome == "ok") {
            counts.drains.done += 1;
        }
        ops.extend(runs);
    }
    Ok(format!("{} for {} ms", words.join(" + "), step.hold_ms))
}

/// Lands disk fault `d` on a node no other fault of the step took (`taken`, `killed`):
/// the leader, or another, as drawn; a power loss joins the step's `killed`. Returns the node and what
/// was done, in words.
fn disk_fault(
    lab: &mut Lab,
    step: &Step,
    leader: Option<u64>,
    d: DiskFault,
    taken: &[u64],
    killed: &mut Vec<u64>,
) -> Option<(u64, String)> {
    let on_leader = match d {
        DiskFault::PowerLoss { leader, .. } | DiskFault::Stall { leader, .. } => leader,
    };
    let taken = |x: &u64| taken.contains(x) || killed.contains(x);
    let x = pick(&step.order, leader, on_leader)
        .into_iter()
        .find(|x| !taken(x))?;
    let tag = if Some(x) == leader { " (leader)" } else { "" };
    let words = match d {
        DiskFault::PowerLoss { torn, .. } => {
            // Torn from a seed the schedule fixes.
            let loss = if torn {
                Loss::Torn(step.gap_ms << 8 | x)
            } else {
                Loss::Drop
            };
            killed.push(x);
            match lab.power_loss(x, loss) {
                Some(r) => format!(
                    "power loss on n{x}{tag}{} ({} unsynced bytes lost)",
                    if torn { ", torn" } else { "" },
                    r.bytes_dropped
                ),
                None => format!("kill n{x}{tag} (a power loss, without a fault filesystem)"),
            }
        }
        DiskFault::Stall { ms, .. } => {
            if lab.stall_disk(x, Duration::from_millis(ms)) {
                format!("n{x}{tag}'s disk stalls for {ms} ms")
            } else {
                format!("no disk stall on n{x}{tag} (no fault filesystem)")
            }
        }
    };
    Some((x, words))
}

/// The run's power losses, disk stalls and lost bytes, from the lab's timeline, and how
/// late each `lease_lost` was heard after its lease ended, outside its node's pauses.
fn disk_figures(lab: &Lab, out: &mut Outcome) {
    let actions = lab.actions.lock().unwrap().clone();
    for a in &actions {
        if a.what.starts_with("power loss on") {
            out.power_losses += 1;
            out.unsynced_lost += a
                .what
                .split(": ")
                .nth(1)
                .and_then(|w| w.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        } else if a.what.starts_with("disk stall:") {
            out.disk_stalls += 1;
        }
    }
    // Each node's pauses: SIGSTOP .. SIGCONT (or the end of the run).
    let mut pauses: Vec<(u64, u64, u64)> = Vec::new();
    for a in &actions {
        if a.what.starts_with("SIGSTOP") {
            pauses.push((a.node, a.mono_ns, u64::MAX));
        } else if a.what.starts_with("SIGCONT") {
            if let Some(p) = pauses
                .iter_mut()
                .rev()
                .find(|p| p.0 == a.node && p.2 == u64::MAX)
            {
                p.2 = a.mono_ns;
            }
        }
    }
    for l in lab.lines().iter().filter(|l| l.event == "lease_lost") {
        let Some(ended) = l.v.get("ended_ns").and_then(serde_json::Value::as_u64) else {
            continue;
        };
        let paused = pauses
            .iter()
            .any(|&(n, from, to)| n == l.node && from <= l.mono_ns && to >= ended);
        if !paused {
            let election =
                l.v.get("election")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("the root")
                    .to_string();
            out.lease_ends.push((
                l.node,
                Duration::from_nanos(l.mono_ns.saturating_sub(ended)),
                election,
            ));
        }
    }
}

/// The suite's disk faults, and how late the workers heard of their leases' ends.
fn disk_summary(outcomes: &[Outcome]) -> String {
    let mut late: Vec<&(u64, Duration, String)> =
        outcomes.iter().flat_map(|o| &o.lease_ends).collect();
    late.sort_by_key(|l| l.1);
    let at = |q: f64| {
        late.get(((late.len() as f64 - 1.0) * q).round() as usize)
            .map_or(0.0, |l| l.1.as_secs_f64() * 1e3)
    };
    let over = late.iter().filter(|l| l.1 > LEASE_END_HEARD_WITHIN).count();
    format!(
        "netns: disk: {} power losses ({} unsynced bytes lost), {} disk stalls; {} lease ends \
         heard (outside pauses) {:.2} ms late at the median, {:.2} ms at p99, {:.2} ms at most{}; \
         {over} later than {LEASE_END_HEARD_WITHIN:?}",
        outcomes.iter().map(|o| o.power_losses).sum::<usize>(),
        outcomes.iter().map(|o| o.unsynced_lost).sum::<u64>(),
        outcomes.iter().map(|o| o.disk_stalls).sum::<usize>(),
        late.len(),
        at(0.5),
        at(0.99),
        at(1.0),
        late.last()
            .map_or(String::new(), |l| format!(" (n{}, {})", l.0, l.2)),
    )
}

/// How late a worker should hear that its lease ended (`lease_lost`'s `mono_ns` against
/// its `ended_ns`), outside its process's pauses: issue 2/8's target, a speed figure the
/// summary reports (how many were later), not a check.
const LEASE_END_HEARD_WITHIN: Duration = Duration::from_millis(5);

/// Past this, a lease end heard late fails the run: not a slow scheduler (the most seen
/// in CI was 6.9 ms, once, with a PostgreSQL server and the disk stall tests beside the
/// suite) but a lease end that waited for something it must not wait for.
const LEASE_END_HEARD_BOUND: Duration = Duration::from_millis(50);

/// How long a moved worker may take to name a leader after its restart at its new
/// address.
const MOVE_REACHED_WITHIN: Duration = Duration::from_secs(15);

/// How long a replacement may take, from its first `ctl` command to its last.
const REPLACE_WITHIN: Duration = Duration::from_secs(20);

/// Whether a `members replace` answer says the change is carried out: done, or refused
/// because an earlier attempt took effect (the old node is no member, the new one is no
/// learner: it votes).
fn replaced(r: &CtlRun) -> bool {
    matches!(r.outcome.as_str(), "ok" | "unknown_node" | "not_a_learner")
}

/// `ctl members add SPARE ADDR`, then `ctl members replace OLD SPARE`, each asked again
/// (every 200 ms) until carried out, within [`REPLACE_WITHIN`].
fn replace_until_done(operator: &netns::Operator, old: u64, spare: u64) -> Vec<CtlRun> {
    let deadline = Instant::now() + REPLACE_WITHIN;
    let mut runs = Vec::new();
    let add = [
        "members".to_string(),
        "add".to_string(),
        spare.to_string(),
        format!("{}:{}", netns::host_of(spare), netns::PORT),
    ];
    while Instant::now() < deadline {
        let r = operator.run(&add, CTL_TIMEOUT_SECS);
        let done = matches!(r.outcome.as_str(), "ok" | "already_member");
        runs.push(r);
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let replace = [
        "members".to_string(),
        "replace".to_string(),
        old.to_string(),
        spare.to_string(),
    ];
    while Instant::now() < deadline {
        let r = operator.run(&replace, CTL_TIMEOUT_SECS);
        let done = replaced(&r);
        runs.push(r);
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    runs
}

/// How long one `ctl` command may take (`--timeout`).
const CTL_TIMEOUT_SECS: u64 = 5;

/// `ctl undrain X`, asked again (every 200 ms, 20 times at most) until it is done: a
/// drained node never campaigns, so the group must not be left with it by accident.
fn undrain_until_done(operator: &netns::Operator, x: u64) -> Vec<CtlRun> {
    let mut runs = Vec::new();
    for _ in 0..20 {
        let r = operator.run(&["undrain".to_string(), x.to_string()], CTL_TIMEOUT_SECS);
        let done = r.outcome == "ok";
        runs.push(r);
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    runs
}

/// A step of its own (see [`NetOp::StalledHandover`]): pause a follower, hand over to
/// it, resume it `stall_ms` after the pause with its packets to the old leader dropped
/// for `cut_ms`, heal.
#[allow(clippy::too_many_arguments)]
fn stalled_handover(
    lab: &mut Lab,
    step: &Step,
    operator: &netns::Operator,
    (stall_ms, cut_ms): (u64, u64),
    leader_out: &mut Vec<(u64, u64, u64)>,
    (ops, counts): (&mut Vec<CtlRun>, &mut OpCounts),
) -> Result<String, String> {
    let Some(l) = lab.current_leader() else {
        std::thread::sleep(Duration::from_millis(step.hold_ms));
        return Ok("stalled handover: no leader known; skipped".into());
    };
    let x = pick(&step.order, Some(l), false)[0];
    let paused_at = Instant::now();
    lab.pause(x);
    // A heartbeat held first: the paused node has something to handle before the
    // MsgTimeoutNow when it wakes.
    std::thread::sleep(Duration::from_millis(100));
    leader_out.push((monotonic_ns(), l, u64::MAX));
    let r = operator.run(
        &["transfer".into(), "--to".into(), x.to_string()],
        CTL_TIMEOUT_SECS,
    );
    let said = r.outcome.clone();
    ops.push(r);
    counts.stalled_handovers.asked += 1;
    let stall = Duration::from_millis(stall_ms);
    std::thread::sleep(stall.saturating_sub(paused_at.elapsed()));
    let mut net = NetState::default();
    net.cut_one_way(x, &[l]);
    lab.set_net(net, &format!("n{x}'s packets to n{l} dropped"))
        .map_err(|e| format!("nft failed: {e}"))?;
    lab.resume(x);
    std::thread::sleep(Duration::from_millis(cut_ms));
    let healing = monotonic_ns();
    for o in leader_out.iter_mut().filter(|o| o.2 == u64::MAX) {
        o.2 = healing;
    }
    lab.set_net(NetState::default(), "heal links")
        .map_err(|e| format!("nft failed: {e}"))?;
    counts.stalled_handovers.done += 1;
    Ok(format!(
        "stalled handover: pause n{x}, n{l} (leader) hands over to it ({said}), n{x} wakes \
         at +{stall_ms} ms with its packets to n{l} dropped for {cut_ms} ms"
    ))
}

/// How long each restart took: from spawning the process to its `started` event.
fn restart_times(lab: &Lab) -> Vec<Duration> {
    let lines = lab.lines();
    let actions = lab.actions.lock().unwrap().clone();
    actions
        .iter()
        .filter(|a| a.kind == netns::ActionKind::Start)
        .filter(|a| {
            // Only restarts: the node was killed before.
            actions.iter().any(|k| {
                k.kind == netns::ActionKind::Crash && k.node == a.node && k.mono_ns < a.mono_ns
            })
        })
        .filter_map(|a| {
            lines
                .iter()
                .find(|l| l.event == "started" && l.node == a.node && l.mono_ns > a.mono_ns)
                .map(|l| Duration::from_nanos(l.mono_ns - a.mono_ns))
        })
        .collect()
}

fn tail(lines: &[String], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------
// Tests

#[test]
fn schedules_replay_from_their_seed_and_cover_every_fault_kind() {
    // Pure: runs without root too.
    let a: Vec<Schedule> = (0..40).map(Schedule::generate).collect();
    let b: Vec<Schedule> = (0..40).map(Schedule::generate).collect();
    assert_eq!(a, b, "a seed must give the same schedule every time");
    let all: Vec<&Fault> = a
        .iter()
        .flat_map(|s| s.steps.iter())
        .flat_map(|s| &s.faults)
        .collect();
    for (name, present) in [
        (
            "split",
            all.iter().any(|f| matches!(f, Fault::Split { .. })),
        ),
        (
            "isolate leader",
            all.iter().any(|f| matches!(f, Fault::IsolateLeader)),
        ),
        (
            "one way",
            all.iter().any(|f| matches!(f, Fault::OneWay { .. })),
        ),
        (
            "bridge",
            all.iter().any(|f| matches!(f, Fault::Bridge { .. })),
        ),
        ("loss", all.iter().any(|f| matches!(f, Fault::Loss { .. }))),
        (
            "pause",
            all.iter().any(|f| matches!(f, Fault::Pause { .. })),
        ),
        ("kill", all.iter().any(|f| matches!(f, Fault::Kill { .. }))),
        (
            "partial",
            all.iter().any(|f| matches!(f, Fault::Partial { .. })),
        ),
        (
            "restart",
            all.iter().any(|f| matches!(f, Fault::Restart { .. })),
        ),
    ] {
        assert!(present, "no {name} fault in 40 schedules");
    }
    // The disk faults, drawn apart: power losses (whole and torn) and stalls, of the
    // leader and of other nodes; at least twenty power losses in the CI's twenty schedules.
    let disks: Vec<DiskFault> = a
        .iter()
        .flat_map(|s| s.steps.iter())
        .filter_map(|s| s.disk)
        .collect();
    for (name, present) in [
        (
            "power loss",
            disks
                .iter()
                .any(|d| matches!(d, DiskFault::PowerLoss { torn: false, .. })),
        ),
        (
            "torn power loss",
            disks
                .iter()
                .any(|d| matches!(d, DiskFault::PowerLoss { torn: true, .. })),
        ),
        (
            "leader's disk stall",
            disks
                .iter()
                .any(|d| matches!(d, DiskFault::Stall { leader: true, .. })),
        ),
        (
            "follower's disk stall",
            disks
                .iter()
                .any(|d| matches!(d, DiskFault::Stall { leader: false, .. })),
        ),
    ] {
        assert!(present, "no {name} in 40 schedules");
    }
    let power_losses_in_20 = a[1..=20]
        .iter()
        .flat_map(|s| s.steps.iter())
        .filter(|s| matches!(s.disk, Some(DiskFault::PowerLoss { .. })))
        .count();
    assert!(
        power_losses_in_20 >= 20,
        "only {power_losses_in_20} power losses drawn in the CI's 20 schedules (seeds 1 to 20)"
    );
    for s in &a {
        assert!((3..=6).contains(&s.faults()), "{s}");
    }
    // The operator's ops: transfers (to a node the faults stall among them), drains,
    // stalled handovers.
    let ops: Vec<&NetOp> = a
        .iter()
        .flat_map(|s| s.steps.iter())
        .filter_map(|s| s.op.as_ref())
        .collect();
    for (name, present) in [
        (
            "transfer to a stalled node",
            ops.iter().any(|o| {
                matches!(
                    o,
                    NetOp::Transfer {
                        to: OpTo::Stalled,
                        ..
                    }
                )
            }),
        ),
        (
            "transfer",
            ops.iter()
                .any(|o| matches!(o, NetOp::Transfer { to: OpTo::Best, .. })),
        ),
        (
            "drain",
            ops.iter().any(|o| matches!(o, NetOp::Drain { .. })),
        ),
        (
            "stalled handover",
            ops.iter()
                .any(|o| matches!(o, NetOp::StalledHandover { .. })),
        ),
        (
            "replacement of a stalled node",
            ops.iter().any(|o| {
                matches!(
                    o,
                    NetOp::Replace {
                        old: OldVoter::Stalled,
                        ..
                    }
                )
            }),
        ),
    ] {
        assert!(present, "no {name} op in 40 schedules");
    }
    // A stalled handover has a step of its own; the faults' resolution finds the node a
    // fault stalls, never the leader when another one is.
    assert!(a
        .iter()
        .flat_map(|s| &s.steps)
        .all(|s| { !matches!(s.op, Some(NetOp::StalledHandover { .. })) || s.faults.is_empty() }));
    let order = [3, 1, 5, 2, 4];
    assert_eq!(stalled_by(&Fault::IsolateLeader, &order, Some(5)), Some(5));
    assert_eq!(
        stalled_by(
            &Fault::Split {
                size: 2,
                with_leader: true
            },
            &order,
            Some(5)
        ),
        Some(3)
    );
    assert_eq!(
        stalled_by(&Fault::Pause { leader: false }, &order, Some(5)),
        Some(3)
    );
    // Resolution: a split puts the leader where it says, a bridge keeps two sides apart.
    let mut net = NetState::default();
    apply_net(
        &Fault::Split {
            size: 2,
            with_leader: true,
        },
        &[3, 1, 5, 2, 4],
        Some(5),
        &mut net,
    );
    assert!(net.cut.contains(&(5, 1)) && net.cut.contains(&(3, 2)));
    assert!(!net.cut.contains(&(5, 3)) && !net.cut.contains(&(1, 2)));
    let mut net = NetState::default();
    apply_net(
        &Fault::Bridge {
            leader_is_bridge: true,
        },
        &[3, 1, 5, 2, 4],
        Some(2),
        &mut net,
    );
    assert!(!net.cut.iter().any(|(a, b)| *a == 2 || *b == 2));
    assert!(net.cut.contains(&(3, 5)) && net.cut.contains(&(4, 1)));
    assert!(!net.cut.contains(&(3, 1)) && !net.cut.contains(&(5, 4)));
    let mut net = NetState::default();
    apply_net(
        &Fault::Partial { leader: true },
        &[3, 1, 5, 2, 4],
        Some(5),
        &mut net,
    );
    let cut: Vec<(u64, u64)> = net.cut.iter().copied().collect();
    assert_eq!(cut, vec![(1, 5), (3, 5), (5, 1), (5, 3)]);
}

#[test]
fn seeded_fault_schedules_keep_one_leaseholder_per_term_and_settle_exactly_once() {
    if skipped() {
        return;
    }
    let _machine = crate::WHOLE_MACHINE.blocking_read();
    let count = env_u64("TENURE_NETNS_SCHEDULES", DEFAULT_SCHEDULES) as usize;
    let first = env_u64("TENURE_NETNS_SEED", 1);
    let lanes = (env_u64("TENURE_NETNS_LANES", 2).max(1) as usize).min(count.max(1));
    let stop_at_first = env_flag("TENURE_NETNS_STOP_AT_FIRST");
    let mutation = std::env::var("TENURE_MUTATION").unwrap_or_default();
    say("netns: building the worker and ctl (cargo build --bin tenure-worker --bin tenure-ctl --features postgres)");
    let worker = netns::worker_for_run();
    let ctl = netns::ctl_binary();
    say(format!(
        "netns: {count} schedules from seed {first}, {lanes} labs at a time, worker {}{}",
        worker.display(),
        if mutation.is_empty() {
            String::new()
        } else {
            format!(", mutation {mutation}")
        }
    ));
    let t0 = Instant::now();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let outcomes: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for lane in 0..lanes {
            let (next, done, stop, outcomes, worker, ctl) =
                (&next, &done, &stop, &outcomes, &worker, &ctl);
            s.spawn(move || loop {
                let k = next.fetch_add(1, Ordering::SeqCst);
                if k >= count || stop.load(Ordering::SeqCst) {
                    break;
                }
                let seed = first + k as u64;
                let schedule = Schedule::generate(seed);
                let tag = format!("l{lane}-s{seed}");
                let o = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_schedule(&tag, schedule.clone(), worker, ctl)
                }))
                .unwrap_or_else(|p| Outcome {
                    problems: vec![format!(
                        "harness panicked: {}",
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p
                                .downcast_ref::<&str>()
                                .map(std::string::ToString::to_string))
                            .unwrap_or_default()
                    )],
                    ..Outcome::new(schedule.clone())
                });
                let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                let ops: Vec<String> = o
                    .ops
                    .iter()
                    .map(|r| {
                        format!(
                            "{} -> {} ({} ms)",
                            r.command,
                            r.outcome,
                            (r.answered_ns - r.asked_ns) / 1_000_000
                        )
                    })
                    .collect();
                say(format!(
                    "netns [{n}/{count}] seed {seed}: {} faults: {}; operator: {}; ops {}; \
                     recovered in {}; {} writes into {}, {} stale ones fenced off, {} terms \
                     with leases; disk: {} power losses ({} unsynced bytes lost), {} stalls: {} \
                     ({:.1} s)",
                    o.schedule.faults(),
                    o.applied.join(", "),
                    if ops.is_empty() {
                        "-".to_string()
                    } else {
                        ops.join(", ")
                    },
                    o.counts,
                    o.recovery
                        .map_or("-".into(), |r| format!("{} ms", r.as_millis())),
                    o.writes,
                    if o.postgres { "PostgreSQL" } else { "SQLite" },
                    o.rejected,
                    o.terms,
                    o.power_losses,
                    o.unsynced_lost,
                    o.disk_stalls,
                    if o.problems.is_empty() {
                        "ok"
                    } else {
                        "FAILED"
                    },
                    o.took.as_secs_f64()
                ));
                if !o.problems.is_empty() {
                    say(report_failure(&o));
                    if stop_at_first {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
                outcomes.lock().unwrap().push(o);
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by_key(|o| o.schedule.seed);
    let faults: Vec<usize> = outcomes.iter().map(|o| o.schedule.faults()).collect();
    let worst = outcomes.iter().filter_map(|o| o.recovery).max();
    let mut restarts: Vec<Duration> = outcomes.iter().flat_map(|o| o.restarts.clone()).collect();
    restarts.sort_unstable();
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.problems.is_empty()).collect();
    say(format!(
        "netns: {} schedules in {:.0} s, {} faults ({}–{} per schedule), longest recovery \
         after the final heal {}, {} applied-history samples, {} failed{}",
        outcomes.len(),
        t0.elapsed().as_secs_f64(),
        faults.iter().sum::<usize>(),
        faults.iter().min().unwrap_or(&0),
        faults.iter().max().unwrap_or(&0),
        worst.map_or("-".into(), |w| format!("{} ms", w.as_millis())),
        outcomes.iter().map(|o| o.histories).sum::<usize>(),
        failed.len(),
        failed
            .first()
            .map(|o| format!(
                " (first: schedule {} of the run, seed {})",
                o.schedule.seed - first + 1,
                o.schedule.seed
            ))
            .unwrap_or_default()
    ));
    say(disk_summary(&outcomes));
    let on_pg: Vec<String> = outcomes
        .iter()
        .filter(|o| o.postgres)
        .map(|o| o.schedule.seed.to_string())
        .collect();
    say(format!(
        "netns: ledger: {} schedules settled into PostgreSQL (seeds {}), {} into SQLite",
        on_pg.len(),
        if on_pg.is_empty() {
            "none".to_string()
        } else {
            on_pg.join(", ")
        },
        outcomes.len() - on_pg.len()
    ));
    let mut by_op: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for r in outcomes.iter().flat_map(|o| &o.ops) {
        // `transfer`, `drain`, `members add`, ...: the command's words before its ids.
        let verb = r
            .command
            .split(' ')
            .take_while(|w| w.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
            .collect::<Vec<_>>()
            .join(" ");
        let verb = if r.command.contains("--to") {
            format!("{verb} --to")
        } else {
            verb
        };
        *by_op.entry((verb, r.outcome.clone())).or_default() += 1;
    }
    let by_op: Vec<String> = by_op
        .iter()
        .map(|((verb, outcome), n)| format!("{verb} {outcome}: {n}"))
        .collect();
    say(format!(
        "netns: operator ops (ctl command, answer: count): {}",
        by_op.join(", ")
    ));
    let mut total = OpCounts::default();
    for o in &outcomes {
        total += o.counts;
    }
    say(format!("netns: operator ops by kind: {total}"));
    let mut failovers: Vec<Duration> = outcomes.iter().flat_map(|o| o.failovers.clone()).collect();
    failovers.sort_unstable();
    if let (Some(lo), Some(hi)) = (failovers.first(), failovers.last()) {
        say(format!(
            "netns: {} failovers (leader cut from the majority, paused or killed → another \
             node's lease): {}–{} ms, median {} ms",
            failovers.len(),
            lo.as_millis(),
            hi.as_millis(),
            failovers[failovers.len() / 2].as_millis()
        ));
    }
    let unclean: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.unclean_stops.iter().map(|(n, sig)| {
                let how = sig.map_or("exit code != 0 or killed".to_string(), |s| {
                    format!("signal {s}")
                });
                format!("seed {} n{n} ({how})", o.schedule.seed)
            })
        })
        .collect();
    say(format!(
        "netns: {} workers did not stop cleanly on SIGTERM at the end of a schedule{}",
        unclean.len(),
        if unclean.is_empty() {
            String::new()
        } else {
            format!(": {}", unclean.join(", "))
        }
    ));
    if let (Some(lo), Some(hi)) = (restarts.first(), restarts.last()) {
        say(format!(
            "netns: {} restarts after SIGKILL took {}–{} ms (median {} ms) from spawn to started",
            restarts.len(),
            lo.as_millis(),
            hi.as_millis(),
            restarts[restarts.len() / 2].as_millis()
        ));
    }
    // The reports above may scroll out of a CI log's tail: the panic names each failure's
    // problems in a line apiece too.
    let briefly: Vec<String> = failed
        .iter()
        .flat_map(|o| {
            o.problems.iter().map(move |p| {
                let first: String = p.lines().next().unwrap_or("").chars().take(400).collect();
                format!("  seed {}: {first}", o.schedule.seed)
            })
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} netns schedules failed (seeds {:?}); replay one with \
         TENURE_NETNS_SEED=<seed> TENURE_NETNS_SCHEDULES=1 (reports above)\n{}",
        failed.len(),
        outcomes.len(),
        failed.iter().map(|o| o.schedule.seed).collect::<Vec<_>>(),
        briefly.join("\n")
    );
}

#[test]
fn a_worker_that_moves_to_another_address_under_its_name_is_reached_again() {
    // The workers name each other (`n<id>.tenure.test`, in every namespace's hosts
    // file). A follower, then the leader, is killed, its namespace given a new address
    // under the same name (the hosts files rewritten), and restarted there; each time the
    // others must reach it again (it names a leader of the group), the group must settle
    // every batch exactly once and the history checker must find nothing wrong. A
    // partition after the moves checks that the cut rules follow the new addresses.
    if skipped() {
        return;
    }
    let _machine = crate::WHOLE_MACHINE.blocking_read();
    let worker = netns::worker_for_run();
    let ctl = netns::ctl_binary();
    let step = |faults: Vec<Fault>, order: [u64; 5]| Step {
        gap_ms: 800,
        hold_ms: 2000,
        faults,
        order: order.to_vec(),
        op: None,
        election_op: None,
        disk: None,
    };
    let schedule = Schedule {
        seed: 0,
        steps: vec![
            step(vec![Fault::Move { leader: false }], [3, 1, 2, 4, 5]),
            step(vec![Fault::Move { leader: true }], [1, 2, 3, 4, 5]),
            step(vec![Fault::Move { leader: false }], [5, 4, 3, 2, 1]),
            step(
                vec![Fault::Split {
                    size: 2,
                    with_leader: false,
                }],
                [3, 5, 1, 2, 4],
            ),
        ],
    };
    say(format!("netns moves: {schedule}"));
    let o = run_schedule("mv", schedule, &worker, &ctl);
    say(format!(
        "netns moves: {}; recovered in {}; {} writes, {} stale ones fenced off, {} terms \
         with leases: {} ({:.1} s)",
        o.applied.join(", "),
        o.recovery
            .map_or("-".into(), |r| format!("{} ms", r.as_millis())),
        o.writes,
        o.rejected,
        o.terms,
        if o.problems.is_empty() {
            "ok"
        } else {
            "FAILED"
        },
        o.took.as_secs_f64()
    ));
    assert!(o.problems.is_empty(), "{}", report_failure(&o));
}

fn report_failure(o: &Outcome) -> String {
    format!(
        "==== netns schedule FAILED, seed {} ====\n{}applied:\n  {}\n{}\n==== end of seed {} ====",
        o.schedule.seed,
        o.schedule,
        o.applied.join("\n  "),
        o.problems.join("\n\n"),
        o.schedule.seed
    )
}
