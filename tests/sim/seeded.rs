//! Deterministic simulation of a tenure group under faults.
//!
//! Every run is a turmoil simulation seeded with one number: 3 or 5 simulated hosts,
//! each running the real driver (`Node::start_with`) over the real QUIC transport (on
//! turmoil's UDP through `sim/udp.rs`), with a memory store whose disk survives crashes.
//! A seeded schedule injects partitions (symmetric majority/minority, isolated leader,
//! one-way, a bridge node that sees both sides), crashes and restarts, pauses (held
//! links), packet loss and delay; among them, an operator hands leadership over (to the
//! best follower, to a named node, to a node a fault stalls, and the stalled handover of
//! docs/design.md section 4: the target stalls, the transfer times out, the target wakes
//! with its packets to the old leader lost), drains and undrains nodes, and in half of
//! the seeds changes the membership: a voter (the leader, one a fault has crashed, paused
//! or cut off, or any) is replaced by a spare host that joins under a new id, or removed
//! and added back under a new id, while partitions, crashes (the leader's, in the middle
//! of the change) and a paused learner go on (all drawn from an RNG of their own, so each
//! seed keeps the faults it always had). The workload on every node confirms its lease
//! and writes to a fenced resource with its token, sometimes stalling between the two.
//! Beside the root election, every seed runs sixteen named elections (`docs/design.md`,
//! section 11), created through the root leader at the start (asked again of the node a
//! `NotLeader` names); on every node each one has a workload of its own, as the root's
//! (wait for its lease, confirm, write to that election's fence, one fence per name, with
//! the token, sometimes stalling between the two), and the ops add creates and removes
//! (names from a pool of twenty, so a removed name comes back as a new incarnation, its
//! fence retired to `Removed::retired_above` as the remove returns) and per-election
//! transfers (to the best follower, a named node, or a node a fault stalls), drawn from an
//! RNG of their own again, under the same faults. The checker judges rules (a)–(f) per
//! election and (g)–(i) across them; liveness at the end, per live election.
//! The history checker (`support/checker.rs`) judges every run, liveness after the last
//! heal included, and every node's applied leadership history (sampled every 10 ms of
//! simulated time, recorded when it changed) against every other's (rule (f): no
//! committed record is lost); with membership changes, rule (c) counts the quorum of the
//! voter configurations each node reported (sampled with the history), and the healed
//! group must have carried every change out by the end of the run.
//!
//! * `TENURE_SIM_SEEDS=N` runs N seeds (default 40; `.ci/run` runs 500), from
//!   `TENURE_SIM_SEED_START=S` (default 0). A failing seed is printed with its
//!   timeline; run it alone with `TENURE_SIM_SEEDS=1 TENURE_SIM_SEED_START=<seed>`.
//! * `TENURE_SIM_VERBOSE=1` prints a line per seed: its wall and simulated time, its
//!   faults, its ops and what each call returned; `TENURE_SIM_TIMELINE=1`, each seed's
//!   whole timeline (lease confirms and writes left out).
//! * `TENURE_SIM_EXPECT_VIOLATION=1` (for mutation testing, with `--features mutations`
//!   and `TENURE_MUTATION=...`) stops at the first violating seed and reports it
//!   instead of failing; it fails if no seed violates.
//!
//! # What is simulated, and how
//!
//! * **Pauses** hold every link of a node (turmoil's `hold`): its messages both ways
//!   arrive in one burst when the pause ends. turmoil cannot stop one host's runtime, so
//!   the paused node's own timers keep running; the "woken stale writer" is modelled by
//!   the workload instead: now and then a write stalls up to 400 ms between the confirm
//!   and the resource, and only the fence can stop it.
//! * **Crashes** drop the host's runtime (every task, socket and in-memory state); the
//!   restart is a new `Node` on the same `MemDisk`. Half of them are quick (back within
//!   60 ms). A crash *mid-write* makes the node's next hard-state write fail without
//!   reaching the disk, which stops the driver there, as a process killed during its
//!   fsync. A crash *mid-append* does the same to its next write of entries carrying a
//!   leadership record (what a follower writes right after a new leader's first
//!   append): what the node sent before the write still leaves (2 ms of "fsync").
//! * **Clock faults** go through each node's hidden `ClockControl`: a *jump* steps its
//!   clock forward by half an election timeout to three, at once; a *stall* makes it
//!   stand still (ticks, timers, the quiet period and the lease checks with it) while
//!   the process and network run on, then resume without counting the stalled span,
//!   either as a suspend that `CLOCK_BOOTTIME` counts or as a pause neither clock
//!   counts. Safe confirms, one holder per term, fencing and the applied histories are
//!   judged under every one; rule (d) and `LeaseBased` confirms only while each fault
//!   stayed inside what the lease assumes (see `support/checker.rs`, "Clock faults").
//! * **QUIC** uses LAN-like settings (100 ms keep-alive, 500 ms idle timeout) so that a
//!   connection the fault killed is noticed quickly.
//!
//! # Determinism
//!
//! Everything the simulation decides is drawn from the seed: the schedule, turmoil's
//! latencies, the adapter's packet loss, each host's start offset and clock rate, the
//! workload. The code under test draws from elsewhere in a few places, handled so:
//!
//! * raft-rs draws its randomized election timeouts from `rand::thread_rng()`. The
//!   `testing` feature's `Config::hooks_mut().election_seed` makes the driver replace
//!   every such draw with one from a seeded RNG (each host incarnation has its own seed),
//!   and the node's other draws come from the same seed: the support stream's
//!   incarnation, the named elections' first proposal nonce, the founding nonce.
//! * quinn draws per-connection choices (skipped packet numbers, key-update intervals,
//!   the greased transport parameter) from its endpoint RNG, the transport draws
//!   connection ids and its reconnect jitter: the hidden `QuicConfig::rng_seed` seeds
//!   all three.
//! * tokio draws from its runtime's RNG to pick which of eight lists a `watch` receiver
//!   waits on (so the order in which a `send` wakes them) and an unbiased `select!`'s
//!   first branch. turmoil seeds each host's runtime from the seed when tokio is built
//!   with `--cfg tokio_unstable`, which `.cargo/config.toml` sets.
//! * Wall-clock time: the leadership history's `began_unix_ms` comes from the node's
//!   clock, which under the simulation's clock control counts from a fixed epoch.
//! * Iteration order: the driver's maps whose order reaches the outside (callers
//!   answered, peers dropped on close) are ordered maps, not hash maps.
//! * The handshakes' bytes: a stray Initial packet that a node opens with the wrong keys
//!   is dropped or taken for a connection attempt by its garbage bits, so bytes reach
//!   decisions. The run's thread gets a rustls provider whose randoms, X25519 shares and
//!   ECDSA nonces come from the seed (`det_tls`), quinn's first destination ids come
//!   from `rng_seed`, and the certificates are the same bytes in every process.
//!
//! `every_seed_replays` checks it: each seed run twice, compared trace line by trace line
//! (every event with all its fields, every accepted write, every operator call's result);
//! `.ci/run` runs it over 21 seeds (78 among them) with the second run in another process.

use tenure_harness::checker;
use tenure_harness::sim::{schedule, world};

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::{ReadMode, Timing};

use checker::{check, Options};
use schedule::{
    random_election_ops, random_hostile, random_member_ops, random_ops, random_suspend_ops, Op,
    Schedule, ScheduleShape, ELECTION_NAMES, INITIAL_ELECTIONS,
};
use world::{run_with_elections, NamedConfig, RunConfig};

fn timing() -> Timing {
    // The cluster tests' timing: 10 ms ticks, 30 ms heartbeats, elections 150–250 ms.
    Timing::from_millis(10, 30, 150, 250)
}

/// After the last heal, a lease must be acquired or confirmed within this. The QUIC idle
/// timeout the simulation uses (500 ms: a connection the fault cut may first have to
/// time out before it is dialed again) plus ten minimum election timeouts (1500 ms: the
/// old leader's lease runs out, a node restarted just before the heal stays quiet for
/// one, then an election with a split vote or two, the commit and the first round).
const LIVENESS_BOUND: Duration = Duration::from_millis(2000);

/// Every node's clock runs at its own rate, 1 ± this, as real clocks do. ±1.5 % keeps
/// any two clocks within 3 % of each other, inside `Timing::max_clock_drift` (5 %).
const CLOCK_SPREAD: f64 = 0.015;

fn shape() -> ScheduleShape {
    ScheduleShape {
        warmup: Duration::from_millis(600),
        window: Duration::from_millis(1600),
        faults: (2, 5),
        length: (Duration::from_millis(100), Duration::from_millis(900)),
        // Half an election timeout to three.
        clock_jump: (Duration::from_millis(75), Duration::from_millis(450)),
    }
}

/// The share of seeds with a membership change among their faults.
const MEMBERSHIP_CHANCE: f64 = 0.5;

/// The share of seeds with a hostile member (`FaultKind::Hostile`).
const HOSTILE_CHANCE: f64 = 0.2;

/// The share of seeds in which an operator suspends an election and resumes it.
const SUSPEND_CHANCE: f64 = 0.5;

/// The operator's part of seed `seed`'s run: 0 to 3 transfers and drains among the
/// faults, half of the transfers to a node a fault stalls; then, in half of the seeds, a
/// membership change (a voter replaced by a spare, or removed and added back under a
/// new id). Drawn from an RNG of their own, so the faults of a seed are those it always
/// had (and the membership change after the others, so its transfers and drains too).
fn ops_for(seed: u64, cfg: &RunConfig) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0be7_a70e);
    let ids: Vec<u64> = (1..=cfg.nodes).collect();
    let mut ops = random_ops(&mut rng, &ids, &cfg.schedule, shape(), (0, 3));
    ops.extend(random_member_ops(
        &mut rng,
        &ids,
        &cfg.schedule,
        shape(),
        MEMBERSHIP_CHANCE,
    ));
    // The named elections' ops, from an RNG of their own again: the root's ops and the
    // membership changes of a seed stay what they were.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0e1e_c710);
    ops.extend(random_election_ops(
        &mut rng,
        &ids,
        &cfg.schedule,
        shape(),
        (2, 6),
    ));
    // Suspensions, from an RNG of their own: the other ops of a seed stay what they were.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5e5b_e4d0);
    ops.extend(random_suspend_ops(&mut rng, shape(), SUSPEND_CHANCE));
    ops.sort_by_key(|o| o.at);
    ops
}

/// A named election's liveness bound: [`LIVENESS_BOUND`], counted from the later of the
/// last heal and the election's creation, plus one root heartbeat (30 ms) and a message
/// latency. Each named election is a raft group of its own with the root's timing, over
/// the same QUIC connections, so after the heal it recovers as the root does; one created
/// after the heal is first seen applied on one node, and the others apply the create
/// with the root leader's next heartbeat (which carries the commit index), so its group
/// has a quorum founded one heartbeat later at most.
const NAMED_LIVENESS_BOUND: Duration = Duration::from_millis(2050);

/// The named elections of every seed: [`INITIAL_ELECTIONS`] created at the start through
/// the root leader; each node confirms each one it leads every 100–300 ms (the root's
/// workload confirms every 20–60 ms: sixteen times that would be most of the run's cost)
/// and samples each one's applied history every 100 ms.
fn named_config() -> NamedConfig {
    NamedConfig {
        initial: ELECTION_NAMES[..INITIAL_ELECTIONS].to_vec(),
        confirm_every: (Duration::from_millis(100), Duration::from_millis(300)),
        history_every: Duration::from_millis(100),
        liveness_bound: NAMED_LIVENESS_BOUND,
    }
}

fn config_for(seed: u64) -> RunConfig {
    let mut rng = StdRng::seed_from_u64(seed);
    let nodes = if seed % 4 == 3 { 3 } else { 5 };
    let ids: Vec<u64> = (1..=nodes).collect();
    let shape = shape();
    RunConfig {
        seed,
        nodes,
        timing: timing(),
        // A third of the seeds answer confirms from the lease (clock rates stay within the
        // drift bound; for the clock faults, see the checker's "Clock faults").
        read_mode: if seed % 3 == 1 {
            ReadMode::LeaseBased
        } else {
            ReadMode::Safe
        },
        clock_rates: {
            let mut rng = StdRng::seed_from_u64(seed ^ 0xc10c);
            ids.iter()
                .map(|id| (*id, 1.0 + rng.gen_range(-CLOCK_SPREAD..=CLOCK_SPREAD)))
                .collect()
        },
        schedule: {
            let mut schedule = Schedule::random(&mut rng, &ids, shape);
            // A hostile member, from an RNG of its own: the other faults and ops of a
            // seed stay what they were.
            let mut rng = StdRng::seed_from_u64(seed ^ 0x0005_ba0d);
            if let Some(f) = random_hostile(&mut rng, &ids, shape, HOSTILE_CHANCE) {
                schedule.faults.push(f);
                schedule.faults.sort_by_key(|f| f.at);
            }
            schedule
        },
        liveness_bound: LIVENESS_BOUND,
        tail: Duration::from_millis(300),
        stall_chance: 0.05,
        stall_max: Duration::from_millis(400),
        confirm_every: (Duration::from_millis(20), Duration::from_millis(60)),
        prefer_leader: None,
    }
}

/// What one seed did.
struct SeedResult {
    seed: u64,
    nodes: u64,
    read_mode: ReadMode,
    faults: Vec<&'static str>,
    /// The operator ops drawn, by name.
    ops: Vec<&'static str>,
    /// The operator calls made, each with what it returned ("ok" or the error's name),
    /// and each membership op's end.
    op_results: Vec<(&'static str, String)>,
    /// Peer messages refused, by reason.
    refused: BTreeMap<&'static str, u64>,
    recovery_ns: Option<u64>,
    /// Named elections judged live at the end (rule (e)), the longest one took to a
    /// lease, and removals judged by rule (h).
    named_live: usize,
    named_recovery_ns: Option<u64>,
    removals: usize,
    /// History samples judged by rule (f).
    histories: usize,
    /// Why the rules that trust the clocks were not judged (a clock fault outside what
    /// the lease assumes), if they were not.
    clock_rules_skipped: Option<String>,
    simulated_ns: u64,
    /// The checker's verdict, or the panic of the run.
    failure: Option<String>,
}

/// Runs seed `seed` and checks it.
fn run_seed(seed: u64) -> SeedResult {
    let cfg = config_for(seed);
    let ops = ops_for(seed, &cfg);
    let faults = cfg.schedule.faults.iter().map(|f| f.kind.name()).collect();
    let op_names = ops.iter().map(|o| o.kind.name()).collect();
    let result = std::panic::catch_unwind(|| {
        let out = run_with_elections(&cfg, &ops, Some(&named_config()));
        if std::env::var("TENURE_SIM_TIMELINE").is_ok_and(|v| v == "1") {
            eprintln!(
                "seed {seed}'s timeline:\n{}",
                checker::timeline(&out.events)
            );
        }
        let mut opts = Options::new(cfg.nodes as usize)
            .liveness(out.healed_at_ns, cfg.liveness_bound.as_nanos() as u64)
            .fences(out.named_writes.clone());
        for (id, from) in &out.election_liveness {
            opts = opts.election_liveness(*id, *from, NAMED_LIVENESS_BOUND.as_nanos() as u64);
        }
        let opts = opts.clock_faults(
            out.clock_faults.clone(),
            cfg.read_mode == ReadMode::LeaseBased,
        );
        let verdict = check(&out.events, &out.writes, &opts);
        // A driver that panicked (raft-rs found its invariants broken) or found it had
        // lost entries it acknowledged fails the run too, after whatever the checker
        // found.
        let mut panics: String = out
            .panics
            .iter()
            .map(|(node, at, why)| format!("\nn{node}'s driver stopped at {at} ns: {why}"))
            .collect();
        // A membership change the healed group did not carry out (liveness, for the
        // membership the ops asked for).
        for f in &out.op_failures {
            panics.push_str(&format!("\n{f}"));
        }
        // A peer's support book stays within its cap (section 12, "A member cannot grow
        // a book"), whatever a hostile member sent.
        let cap = tenure::election::MAX_ELECTIONS as u64 + INITIAL_ELECTIONS as u64;
        if out.book_max > cap {
            panics.push_str(&format!(
                "\na support book grew to {} entries, past {cap} (the catalog's limit and the elections run)",
                out.book_max
            ));
        }
        // Every peer but a hostile one is correct here: no message may be refused, except
        // a MsgTimeoutNow that arrives after its receiver stopped following the leader
        // that sent it (a handover to a node that stalled or restarted meanwhile), and a
        // response from a node the receiver no longer (or does not yet) count as a
        // member, which only a membership change makes: from a voter that left, or from
        // a spare. A hostile member's messages may be refused for any reason.
        let logged: usize = out.refusals.len();
        let counted: u64 = out.refused.values().sum();
        let mut wrongly: BTreeMap<String, u64> = BTreeMap::new();
        for (_, _, reason, from) in &out.refusals {
            let legit = reason == "timeout_now_not_from_leader"
                || from.is_some_and(|f| out.hostile.contains(&f))
                || (reason == "unknown_peer"
                    && from.is_some_and(|f| out.changed_members.contains(&f)));
            if !legit {
                let from = from.map_or("?".into(), |f| format!("n{f}"));
                *wrongly.entry(format!("{reason} from {from}")).or_default() += 1;
            }
        }
        if logged as u64 != counted {
            *wrongly
                .entry(format!("{counted} counted but {logged} logged"))
                .or_default() += 1;
        }
        let wrongly: Vec<String> = wrongly.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        if !wrongly.is_empty() {
            panics.push_str(&format!(
                "\nmessages of correct peers were refused: {}",
                wrongly.join(", ")
            ));
        }
        let verdict = match verdict {
            Ok(s) if panics.is_empty() => Ok(s),
            Ok(_) => Err(format!("the checker passed, but{panics}")),
            Err(f) => Err(format!("{f}{panics}")),
        };
        (verdict, out.end_ns, out.op_results, out.refused)
    });
    let (verdict, simulated_ns, op_results, refused) = match result {
        Ok((verdict, end, op_results, refused)) => (verdict, end, op_results, refused),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| {
                    panic
                        .downcast_ref::<&str>()
                        .map(std::string::ToString::to_string)
                })
                .unwrap_or_default();
            (
                Err(format!("the run panicked: {msg}")),
                0,
                Vec::new(),
                BTreeMap::new(),
            )
        }
    };
    SeedResult {
        seed,
        nodes: cfg.nodes,
        read_mode: cfg.read_mode,
        faults,
        ops: op_names,
        op_results,
        refused,
        recovery_ns: verdict.as_ref().ok().and_then(|s| s.recovery_ns),
        named_live: verdict.as_ref().map_or(0, |s| s.elections_live),
        named_recovery_ns: verdict
            .as_ref()
            .ok()
            .and_then(|s| s.slowest_election.map(|(ns, _)| ns)),
        removals: verdict.as_ref().map_or(0, |s| s.removals),
        histories: verdict.as_ref().map_or(0, |s| s.histories),
        clock_rules_skipped: verdict
            .as_ref()
            .ok()
            .and_then(|s| s.clock_rules_skipped.clone()),
        simulated_ns,
        failure: verdict.err(),
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// Runs seeds `start..start + count` on every core; with `stop_at_violation`, stops
/// handing out seeds once one violates.
fn run_seeds(start: u64, count: u64, stop_at_violation: bool) -> Vec<SeedResult> {
    let threads = std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .min(count.max(1) as usize);
    let next = AtomicU64::new(start);
    let stop = AtomicBool::new(false);
    let results = Mutex::new(Vec::new());
    let verbose = std::env::var("TENURE_SIM_VERBOSE").is_ok_and(|v| v == "1");
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= start + count || stop.load(Ordering::SeqCst) {
                    break;
                }
                let t0 = Instant::now();
                let r = run_seed(seed);
                if verbose {
                    eprintln!(
                        "seed {seed}: {:.1?}, {:.1} s simulated, faults {:?}, ops {:?}: {:?}{}",
                        t0.elapsed(),
                        r.simulated_ns as f64 / 1e9,
                        r.faults,
                        r.ops,
                        r.op_results,
                        if r.failure.is_some() { " FAILED" } else { "" }
                    );
                }
                if r.failure.is_some() && stop_at_violation {
                    stop.store(true, Ordering::SeqCst);
                }
                results.lock().unwrap().push(r);
            });
        }
    });
    let mut v = results.into_inner().unwrap();
    v.sort_by_key(|r| r.seed);
    v
}

fn summary(results: &[SeedResult], wall: Duration) -> String {
    let n = results.len().max(1);
    let faults: usize = results.iter().map(|r| r.faults.len()).sum();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for r in results {
        for k in &r.faults {
            *kinds.entry(k).or_default() += 1;
        }
    }
    let slowest = results
        .iter()
        .filter_map(|r| r.recovery_ns.map(|ns| (ns, r.seed)))
        .max();
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for r in results {
        for k in &r.ops {
            *ops.entry(k).or_default() += 1;
        }
    }
    let mut calls: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for r in results {
        for (k, said) in &r.op_results {
            *calls.entry(k).or_default().entry(said).or_default() += 1;
        }
    }
    let calls: Vec<String> = calls
        .iter()
        .map(|(k, said)| {
            let said: Vec<String> = said.iter().map(|(s, n)| format!("{n} {s}")).collect();
            format!("{k}: {}", said.join(", "))
        })
        .collect();
    let mut refused: BTreeMap<&str, u64> = BTreeMap::new();
    for r in results {
        for (k, n) in &r.refused {
            *refused.entry(k).or_default() += n;
        }
    }
    let simulated: u64 = results.iter().map(|r| r.simulated_ns).sum();
    let histories: usize = results.iter().map(|r| r.histories).sum();
    let with_clock_faults = results
        .iter()
        .filter(|r| r.faults.iter().any(|k| k.starts_with("clock")))
        .count();
    let skipped = |what: &str| {
        results
            .iter()
            .filter(|r| {
                r.clock_rules_skipped
                    .as_deref()
                    .is_some_and(|s| s.contains(what))
            })
            .count()
    };
    let (stepped, stood) = (skipped("stepped forward"), skipped("stood still"));
    let mut text = format!(
        "{} seeds ({} of 5 nodes, {} LeaseBased) in {wall:.1?}, {:.0} s simulated; \
         {faults} faults, {:.1} per schedule: {kinds:?}; operator ops {ops:?}, calls: {}; \
         peer messages refused {refused:?}; {histories} applied-history samples",
        results.len(),
        results.iter().filter(|r| r.nodes == 5).count(),
        results
            .iter()
            .filter(|r| r.read_mode == ReadMode::LeaseBased)
            .count(),
        simulated as f64 / 1e9,
        faults as f64 / n as f64,
        calls.join("; "),
    );
    text.push_str(&format!(
        "; {with_clock_faults} seeds with clock faults, {} of them outside what the lease \
         assumes (rule (d), and (c) for LeaseBased confirms, not judged there): {stepped} \
         with a step of a node holding no lease, {stood} with a stall no clock counted of a \
         lease holder",
        stepped + stood
    ));
    let named: usize = results.iter().map(|r| r.named_live).sum();
    let removals: usize = results.iter().map(|r| r.removals).sum();
    text.push_str(&format!(
        "; {named} named elections judged live at the end, {removals} removals judged by rule (h)"
    ));
    if let Some((ns, seed)) = results
        .iter()
        .filter_map(|r| r.named_recovery_ns.map(|ns| (ns, r.seed)))
        .max()
    {
        text.push_str(&format!(
            "; longest time from the last heal (or its creation) to a named election's lease: \
             {:.0} ms (seed {seed})",
            ns as f64 / 1e6
        ));
    }
    if let Some((ns, seed)) = slowest {
        text.push_str(&format!(
            "; longest time from the last heal to a lease: {:.0} ms (seed {seed})",
            ns as f64 / 1e6
        ));
    }
    text
}

/// Seeds a plain `cargo test` runs (a debug build: about 3 s of one core each); `.ci/run`
/// sets `TENURE_SIM_SEEDS` for its larger runs.
const DEFAULT_SEEDS: u64 = 40;

/// Every seed's history passes the checker: one holder per term, fencing, no stale
/// confirm, no overlapping leases, a lease within the bound after the last heal, and
/// applied histories that agree.
#[test]
fn every_seeded_fault_schedule_keeps_safety_and_recovers() {
    let count = env_u64("TENURE_SIM_SEEDS", DEFAULT_SEEDS);
    if std::env::var_os("TENURE_SIM_SEEDS").is_none() {
        // Past the harness's capture: `cargo test` shows it.
        let postgres = if tenure_harness::pg::skip_reason().is_some() {
            ", the PostgreSQL tests (no server here: `scripts/pg.sh run cargo test` starts one)"
        } else {
            ""
        };
        let _ = writeln!(
            std::io::stderr().lock(),
            "note: left to .ci/run (`bash .ci/run` runs it all): 500 simulation seeds (here \
             {DEFAULT_SEEDS}; `TENURE_SIM_SEEDS=500 cargo test --test sim`), the replay gate across \
             two processes, 20 netns schedules as root (here 6; `TENURE_NETNS_SCHEDULES=20`){postgres}, \
             the mutation checks and the benchmarks in quick mode"
        );
    }
    let start = env_u64("TENURE_SIM_SEED_START", 0);
    let expect_violation = std::env::var("TENURE_SIM_EXPECT_VIOLATION").is_ok_and(|v| v == "1");
    let t0 = Instant::now();
    let results = run_seeds(start, count, expect_violation);
    let wall = t0.elapsed();
    eprintln!("{}", summary(&results, wall));
    let failed: Vec<&SeedResult> = results.iter().filter(|r| r.failure.is_some()).collect();
    if expect_violation {
        let mutation = std::env::var("TENURE_MUTATION").unwrap_or_default();
        match failed.first() {
            Some(r) => eprintln!(
                "TENURE_MUTATION={mutation}: first violation at seed {} ({} seeds from {start}):\n{}",
                r.seed,
                r.seed - start + 1,
                r.failure.as_deref().unwrap_or_default()
            ),
            None => panic!(
                "TENURE_MUTATION={mutation}: no violation in {} seeds from {start}",
                results.len()
            ),
        }
        return;
    }
    if let Some(first) = failed.first() {
        let seeds: Vec<u64> = failed.iter().map(|r| r.seed).collect();
        panic!(
            "{} of {} seeds failed: {seeds:?}\n\nseed {} (replay: TENURE_SIM_SEEDS=1 \
             TENURE_SIM_SEED_START={}):\n{}",
            failed.len(),
            results.len(),
            first.seed,
            first.seed,
            first.failure.as_deref().unwrap_or_default()
        );
    }
}

/// A run's trace, one line per recorded thing in the order recorded: every event (all
/// its fields), every accepted write (of the root's fence and of each named one), every
/// operator call's result, every refusal. Two runs of a seed replay identically when
/// their traces are equal.
fn trace(o: &world::Outcome) -> Vec<String> {
    let mut t: Vec<String> = o.events.iter().map(|e| format!("{e:?}")).collect();
    t.extend(o.writes.iter().map(|w| format!("write {w:?}")));
    for (name, ws) in &o.named_writes {
        t.extend(ws.iter().map(|w| format!("write {name} {w:?}")));
    }
    t.extend(o.op_results.iter().map(|r| format!("op {r:?}")));
    t.extend(o.refusals.iter().map(|r| format!("refused {r:?}")));
    t.push(format!("end {} healed {}", o.end_ns, o.healed_at_ns));
    t
}

/// Where two traces of a seed part: `None` if they are equal, else the first line that
/// differs with the simulated time it came at and a few lines before it from both.
fn parting(a: &[String], b: &[String]) -> Option<String> {
    let i = match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => i,
        None if a.len() == b.len() => return None,
        None => a.len().min(b.len()),
    };
    // Every event's Debug text carries `at_ns: N`.
    let at_ms = |l: &str| -> Option<f64> {
        let rest = &l[l.find("at_ns: ")? + 7..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok().map(|ns| ns as f64 / 1e6)
    };
    let when = a
        .get(i)
        .or(b.get(i))
        .and_then(|l| at_ms(l))
        .map_or(String::new(), |ms| format!(" (+{ms:.3} ms simulated)"));
    let mut text = format!(
        "the traces part at line {i} of {} and {}{when}:",
        a.len(),
        b.len()
    );
    for j in i.saturating_sub(2)..=i {
        let cut =
            |l: Option<&String>| l.map_or("(none)".to_string(), |l| l.chars().take(400).collect());
        text.push_str(&format!(
            "\n  first  {j}: {}\n  second {j}: {}",
            cut(a.get(j)),
            cut(b.get(j))
        ));
    }
    Some(text)
}

/// The seeds to replay: `TENURE_SIM_REPLAY_SEEDS` ("0-9,777000-777009": ranges and
/// single seeds), else `TENURE_SIM_REPLAY=N` seeds from `TENURE_SIM_SEED_START`, else
/// seeds 0 and 777000.
fn replay_seeds() -> Vec<u64> {
    if let Ok(list) = std::env::var("TENURE_SIM_REPLAY_SEEDS") {
        let mut seeds = Vec::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || panic!("TENURE_SIM_REPLAY_SEEDS: {part:?} is not a seed or a range A-B");
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (
                        a.trim().parse::<u64>().unwrap_or_else(|_| bad()),
                        b.trim().parse::<u64>().unwrap_or_else(|_| bad()),
                    );
                    if b < a {
                        bad();
                    }
                    seeds.extend(a..=b);
                }
                None => seeds.push(part.parse().unwrap_or_else(|_| bad())),
            }
        }
        return seeds;
    }
    let n = env_u64("TENURE_SIM_REPLAY", 0);
    if n > 0 {
        let start = env_u64("TENURE_SIM_SEED_START", 0);
        return (start..start + n).collect();
    }
    vec![0, 777_000]
}

/// Every seed replays: run again, it records the same trace, event for event.
///
/// * Without `TENURE_SIM_REPLAY_DIR`, each seed ([`replay_seeds`]) runs twice in this
///   process and the two traces are compared.
/// * With `TENURE_SIM_REPLAY_DIR=D`, a seed whose trace `D/seed-S.trace` exists runs
///   once and is compared with it; one whose trace is not there yet runs twice as above
///   and its trace is written there. `.ci/run` runs this test twice over a fresh folder,
///   so the second process replays what the first recorded (other certificates, another
///   address-space layout, other thread ids and hash keys).
///
/// Fails naming each seed that did not replay and where its traces part.
#[test]
fn every_seed_replays() {
    let seeds = replay_seeds();
    let dir = std::env::var_os("TENURE_SIM_REPLAY_DIR").map(std::path::PathBuf::from);
    if let Some(d) = &dir {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    let threads = std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .min(seeds.len().max(1));
    let next = AtomicU64::new(0);
    let report = Mutex::new(Vec::<(u64, Option<String>, String)>::new());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::SeqCst) as usize;
                let Some(&seed) = seeds.get(k) else { break };
                let cfg = config_for(seed);
                let ops = ops_for(seed, &cfg);
                let run = || trace(&run_with_elections(&cfg, &ops, Some(&named_config())));
                let a = run();
                let recorded = dir.as_ref().and_then(|d| {
                    let path = d.join(format!("seed-{seed}.trace"));
                    match std::fs::read_to_string(&path) {
                        Ok(text) => {
                            Some((text.lines().map(str::to_string).collect::<Vec<_>>(), path))
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                        Err(e) => panic!("{}: {e}", path.display()),
                    }
                });
                let (parted, how) = match (recorded, &dir) {
                    // A second process: replay what the first recorded.
                    (Some((first, path)), _) => (
                        parting(&first, &a),
                        format!("compared with {}", path.display()),
                    ),
                    // The first (or only) process: run twice here, and record the trace.
                    (None, d) => {
                        let parted = parting(&a, &run());
                        let mut how = "run twice in one process".to_string();
                        if let Some(d) = d {
                            let path = d.join(format!("seed-{seed}.trace"));
                            std::fs::write(&path, a.join("\n") + "\n")
                                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                            how.push_str(&format!(", recorded in {}", path.display()));
                        }
                        (parted, how)
                    }
                };
                report
                    .lock()
                    .unwrap()
                    .push((seed, parted, format!("{} lines, {how}", a.len())));
            });
        }
    });
    let mut report = report.into_inner().unwrap();
    report.sort_by_key(|r| r.0);
    let failed: Vec<String> = report
        .iter()
        .filter_map(|(seed, parted, _)| {
            parted.as_ref().map(|p| {
                format!("seed {seed} did not replay (alone: TENURE_SIM_REPLAY_SEEDS={seed}): {p}")
            })
        })
        .collect();
    let same = report.len() - failed.len();
    let first = report.first().map_or(String::new(), |r| r.2.clone());
    eprintln!(
        "{same} of {} seeds replayed identically in {:.1?} (seed {}: {first})",
        report.len(),
        t0.elapsed(),
        report.first().map_or(0, |r| r.0)
    );
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
