//! Clocks: `ReadMode::LeaseBased` under a leader whose clock runs slow, in the
//! deterministic simulation (`sim/`), judged by the history checker's rule (c).
//!
//! The setup, 3 nodes: node 1 leads (the others hand leadership to it) with its clock
//! running at `rate` × real time, confirming every 5–10 ms. At 1 s it is cut off from
//! both others. The others stop hearing its heartbeats, time out after one election
//! timeout (150 ms) and elect a new leader; node 1, alone, answers `LeaseBased`
//! confirms from its lease until that runs out by its own clock.
//!
//! The theory (`Timing::lease_duration`, `ReadMode::LeaseBased`): the lease lasts
//! `(election_ticks − 1) × tick × (1 − max_clock_drift)` = 14 × 10 ms × 0.95 = 133 ms of
//! the leader's clock after its last acknowledged round was sent, i.e. `133 / rate` ms of
//! real time; every follower that acknowledged that round refuses votes for at least
//! `(election_ticks − 1) × tick` = 140 ms of *its* clock after receiving it. So:
//!
//! * `rate ≥ 1 − max_clock_drift` (0.95): `133 / rate ≤ 140` ms, the lease ends before
//!   any follower can vote: no stale confirm, whatever else happens (asserted);
//! * a slower clock eats the margin; in this setup the new leader needs one election
//!   timeout plus a few round trips (about 150–155 ms after the last heartbeat), so stale
//!   confirms start near `rate ≈ 133 / 152 ≈ 0.87`, and at 0.6 (222 ms of real time) the
//!   old leader confirms for tens of milliseconds after a majority moved on (asserted);
//! * `Safe` confirms are a quorum round each: an isolated node cannot confirm at all,
//!   whatever its clock (asserted at 0.5).
//!
//! The lease's *validity* is clock-based in both modes (it decides when `Lease::lost`
//! fires): with a slow clock, the old lease outlives the moment the new leader acquires
//! its own, in `Safe` mode too (rule (d) shows it); fencing tokens are what protects
//! the resources then. The test prints the figures for a range of rates.

#[path = "support/checker.rs"]
mod checker;
#[path = "sim/schedule.rs"]
#[allow(dead_code)]
mod schedule;
#[path = "support/torn_store.rs"]
mod torn_store;
#[path = "sim/udp.rs"]
mod udp;
#[path = "sim/world.rs"]
#[allow(dead_code)]
mod world;

use std::collections::BTreeMap;
use std::time::Duration;

use checker::{check, Event, Kind, Options, Rule};
use schedule::{Fault, FaultKind, Schedule, Target};
use tenure::{ReadMode, Timing};
use world::{run, Outcome, RunConfig};

const CUT_AT: Duration = Duration::from_millis(1000);

fn config(seed: u64, rate: f64, read_mode: ReadMode) -> RunConfig {
    let mut rates = BTreeMap::new();
    rates.insert(1, rate);
    rates.insert(2, 1.0);
    rates.insert(3, 1.01);
    RunConfig {
        seed,
        nodes: 3,
        timing: Timing::from_millis(10, 30, 150, 160),
        read_mode,
        clock_rates: rates,
        schedule: Schedule {
            faults: vec![Fault {
                at: CUT_AT,
                duration: Duration::from_millis(800),
                kind: FaultKind::Isolate(Target::Node(1)),
            }],
            heal_at: CUT_AT + Duration::from_millis(800),
        },
        liveness_bound: Duration::from_millis(2000),
        tail: Duration::from_millis(200),
        stall_chance: 0.0,
        stall_max: Duration::from_millis(1),
        confirm_every: (Duration::from_millis(5), Duration::from_millis(10)),
        prefer_leader: Some((1, CUT_AT - Duration::from_millis(200))),
    }
}

/// What one run showed about node 1's lease after the cut.
#[derive(Debug)]
struct Figures {
    /// The term node 1 led in when it was cut off.
    term: u64,
    /// How long after a majority moved past that term node 1's last confirm began
    /// (negative: before).
    stale_ms: f64,
    /// How long node 1's lease still ran after another node acquired a lease.
    overlap_ms: f64,
    verdict: Result<(), Vec<Rule>>,
}

fn figures(out: &Outcome) -> Figures {
    let cut = CUT_AT.as_nanos() as u64;
    let ev = &out.events;
    // Node 1's term at the cut: its last acquisition before it.
    let term = ev
        .iter()
        .rev()
        .filter(|e| e.node == 1 && e.kind == Kind::LeaseAcquired && e.at_ns < cut)
        .find_map(|e| e.term)
        .expect("node 1 led before the cut (the others hand over to it)");
    // M(term): the second of three nodes to report a higher term.
    let mut firsts: Vec<u64> = (1..=3)
        .filter_map(|n| {
            ev.iter()
                .find(|e| e.node == n && e.kind == Kind::LeaderChanged && e.term > Some(term))
                .map(|e| e.at_ns)
        })
        .collect();
    firsts.sort_unstable();
    let m = firsts.get(1).copied().expect("a majority moved on");
    let last_confirm = ev
        .iter()
        .filter(|e| e.node == 1 && e.kind == Kind::LeaseConfirmed && e.term == Some(term))
        .filter_map(|e| e.began_ns)
        .max()
        .unwrap_or(0);
    let lease_end = ev
        .iter()
        .filter(|e| e.node == 1 && e.kind == Kind::LeaseLost && e.term == Some(term))
        .filter_map(|e| e.ended_ns)
        .max()
        .unwrap_or(0);
    let next_acquired = ev
        .iter()
        .filter(|e| e.node != 1 && e.kind == Kind::LeaseAcquired && e.term > Some(term))
        .map(|e| e.at_ns)
        .min()
        .unwrap_or(u64::MAX);
    let opts = Options::new(3);
    let verdict = check(ev, &out.writes, &opts).map(|_| ()).map_err(|f| {
        let mut rules: Vec<Rule> = f.violations.iter().map(|v| v.rule).collect();
        rules.dedup();
        rules
    });
    Figures {
        term,
        stale_ms: (last_confirm as f64 - m as f64) / 1e6,
        overlap_ms: (lease_end as f64 - next_acquired as f64).max(0.0) / 1e6,
        verdict,
    }
}

fn run_rate(seed: u64, rate: f64, mode: ReadMode) -> (Figures, Vec<Event>) {
    let cfg = config(seed, rate, mode);
    let out = run(&cfg);
    (figures(&out), out.events)
}

const SEEDS: u64 = 4;

/// Within the documented drift bound the old leader never confirms after a majority
/// moved on.
#[test]
fn lease_based_confirms_stay_safe_while_the_leader_clock_is_within_the_drift_bound() {
    for rate in [1.0, 0.97, 0.95] {
        for seed in 0..SEEDS {
            let (f, events) = run_rate(seed, rate, ReadMode::LeaseBased);
            eprintln!("LeaseBased rate {rate}: seed {seed}: {f:?}");
            assert!(
                f.stale_ms < 0.0,
                "rate {rate} seed {seed}: stale confirm {f:?}\n{}",
                timeline(&events)
            );
            assert_eq!(f.verdict, Ok(()), "rate {rate} seed {seed}: {f:?}");
        }
    }
}

/// Far outside the bound the old leader confirms from its lease after a majority moved
/// on, and the checker's rule (c) sees it.
#[test]
fn lease_based_confirms_go_stale_when_the_leader_clock_runs_far_slower_than_the_bound() {
    for seed in 0..SEEDS {
        let (f, _) = run_rate(seed, 0.6, ReadMode::LeaseBased);
        eprintln!("LeaseBased rate 0.6: seed {seed}: {f:?}");
        assert!(
            f.stale_ms > 0.0,
            "seed {seed}: expected a stale confirm: {f:?}"
        );
        let rules = f.verdict.clone().expect_err("the checker must object");
        assert!(rules.contains(&Rule::StaleConfirm), "seed {seed}: {f:?}");
    }
}

/// `Safe` confirms need a quorum round: however slow the old leader's clock, it cannot
/// confirm once cut off.
#[test]
fn safe_confirms_are_unaffected_by_a_slow_leader_clock() {
    for seed in 0..SEEDS {
        let (f, _) = run_rate(seed, 0.5, ReadMode::Safe);
        eprintln!("Safe rate 0.5: seed {seed}: {f:?}");
        assert!(f.stale_ms < 0.0, "seed {seed}: {f:?}");
        if let Err(rules) = &f.verdict {
            assert!(
                !rules.contains(&Rule::StaleConfirm)
                    && !rules.contains(&Rule::OneHolderPerTerm)
                    && !rules.contains(&Rule::Fencing),
                "seed {seed}: {f:?}"
            );
        }
    }
}

/// The figures for a range of rates (printed; run with `--nocapture`). The asserting
/// tests above pin the two ends.
#[test]
fn figures_for_a_range_of_leader_clock_rates() {
    for mode in [ReadMode::LeaseBased, ReadMode::Safe] {
        for rate in [1.0, 0.95, 0.9, 0.87, 0.85, 0.8, 0.7, 0.5] {
            let runs: Vec<Figures> = (0..SEEDS).map(|s| run_rate(s, rate, mode).0).collect();
            let stale = runs
                .iter()
                .map(|f| f.stale_ms)
                .fold(f64::NEG_INFINITY, f64::max);
            let overlap = runs.iter().map(|f| f.overlap_ms).fold(0.0, f64::max);
            let flagged = runs
                .iter()
                .filter(|f| {
                    f.verdict
                        .as_ref()
                        .is_err_and(|r| r.contains(&Rule::StaleConfirm))
                })
                .count();
            eprintln!(
                "{mode:?} leader clock rate {rate:.2}: last confirm {stale:+.1} ms after a \
                 majority moved on (max over {SEEDS} seeds; rule (c) flagged {flagged}); \
                 old lease outlived the new leader's acquisition by up to {overlap:.1} ms; \
                 terms {:?}",
                runs.iter().map(|f| f.term).collect::<Vec<_>>()
            );
        }
    }
}

fn timeline(events: &[Event]) -> String {
    match check(events, &[], &Options::new(3)) {
        Ok(_) => String::new(),
        Err(f) => f.to_string(),
    }
}
