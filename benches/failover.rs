//! Failover time of a group of worker processes (five; `--nodes 3|7`) on loopback (QUIC + mutual TLS,
//! RocksDB with fsync), measured the way the Raft paper's Figure 14 was: crash the
//! leader, time how long the group is without a confirmed leader.
//!
//! ```text
//! cargo bench --bench failover                            # 100 trials, every config, both scenarios
//! cargo bench --bench failover -- --trials 20 --config paper-12-24,default --scenario kill
//! cargo bench --bench failover -- --quick                 # a few trials each (CI)
//! cargo bench --bench failover -- --nodes 7 --config default --scenario kill
//! ```
//!
//! A **kill** trial waits for a steady leader (it holds a lease, every worker sees it,
//! and every worker is past the one-election-timeout vote quiet period of a restart),
//! sleeps a random part of a heartbeat interval (the crash falls anywhere in it, as in
//! the paper), SIGKILLs the leader, and measures *downtime* = kill → the first
//! `lease_acquired` of another worker in a higher term (a ReadIndex-confirmed lease,
//! both times `CLOCK_MONOTONIC`). Then the killed worker restarts on the same data folder
//! and the next trial waits for steady state again. A **handover** trial SIGTERMs the
//! leader instead: the worker revokes its lease and hands leadership to the most
//! up-to-date follower before it exits.
//!
//! Results go to `<target dir>/tenure-bench/`: `failover.csv` (every trial),
//! `failover.txt` (the tables) and `failover-cdf.svg` (cumulative distribution per
//! configuration, in the style of the paper's Figure 14).

mod support;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use plotters::prelude::*;
use rand::Rng;

use support::{plot, summarize, table, Event, Group, Progress, Summary, WorkerCommand};

const USAGE: &str = "\
usage: cargo bench --bench failover -- [--trials N] [--config NAME[,NAME..]]
                                       [--scenario kill|handover|all] [--nodes N] [--quick]

  --trials N      trials per configuration and scenario (default 100)
  --config NAMES  paper-150-300, paper-150-155, paper-12-24, etcd-10-100, default
                  (repeatable or comma-separated; default: all)
  --scenario S    kill (SIGKILL the leader), handover (SIGTERM: graceful handover), all
  --nodes N       workers in the group: 3, 5 (default) or 7
  --quick         5 kill and 3 handover trials per configuration (CI)";

/// One election timing, as worker arguments.
#[derive(Debug, Clone, Copy)]
struct Conf {
    name: &'static str,
    /// Worker timing options in ms: tick, heartbeat, election, election max (exclusive);
    /// `None`: the worker's default (`Timing::lan()`).
    timing: Option<[u64; 4]>,
    /// The election timeout range as the paper or etcd states it, in ms.
    label: &'static str,
}

impl Conf {
    fn ms(&self) -> [u64; 4] {
        self.timing.unwrap_or([10, 50, 200, 300])
    }
    fn tick(&self) -> f64 {
        self.ms()[0] as f64
    }
    fn heartbeat(&self) -> f64 {
        self.ms()[1] as f64
    }
    /// The timer floor: a follower's election timer fires on the T-th tick after the
    /// last message from the leader, T ≥ `election_ticks`, so at least
    /// (election_ticks − 1) ticks after it; the crash lies on average half a heartbeat
    /// after that message.
    fn timer_floor(&self) -> f64 {
        self.ms()[2] as f64 - self.tick() - self.heartbeat() / 2.0
    }
    /// The worker's timing options for this configuration.
    fn timing(&self, worker: WorkerCommand) -> WorkerCommand {
        match self.timing {
            None => worker,
            Some([t, h, e, m]) => worker.timing_ms(t, h, e, m),
        }
    }
}

/// The configurations. raft-rs draws the timeout T uniformly from
/// [election, max) ticks and fires on the T-th tick after the last message from the
/// leader, that is (T − 1, T] ticks after it. To express the paper's continuous ranges
/// exactly, the paper configurations use election = low + 1 tick and max = high + 1 tick:
/// the timer then runs out uniformly within (low, high]. etcd-10-100 is etcd's own rule
/// (10 ms ticks, election 10 ticks, randomized in [10, 20) ticks) and `default` is
/// tenure's `Timing::lan()`, both as they are.
const CONFS: [Conf; 5] = [
    Conf {
        name: "paper-150-300",
        timing: Some([5, 30, 155, 305]),
        label: "150–300 ms",
    },
    Conf {
        name: "paper-150-155",
        timing: Some([1, 30, 151, 156]),
        label: "150–155 ms",
    },
    Conf {
        name: "paper-12-24",
        timing: Some([1, 3, 13, 25]),
        label: "12–24 ms",
    },
    Conf {
        name: "etcd-10-100",
        timing: Some([10, 10, 100, 200]),
        label: "etcd 10/100 ms",
    },
    Conf {
        name: "default",
        timing: None,
        label: "lan 200–300 ms",
    },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Kill,
    Handover,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Kill => "kill",
            Scenario::Handover => "handover",
        }
    }
}

/// One measured failover.
#[derive(Debug, Clone)]
struct Trial {
    conf: &'static str,
    scenario: Scenario,
    trial: usize,
    downtime_ms: f64,
    old_leader: u64,
    new_leader: u64,
    old_term: u64,
    new_term: u64,
    /// The first worker that left "follower" (pre-candidate or candidate).
    first_campaigner: Option<u64>,
    /// How many workers campaigned before the new lease.
    campaigners: usize,
    /// Signal → the first worker that left "follower" (pre-candidate or candidate).
    detect_ms: Option<f64>,
    /// That moment → the new leader reports itself leader.
    elect_ms: Option<f64>,
    /// Leader → its first confirmed lease (commit of its first entry + a ReadIndex round).
    lease_ms: Option<f64>,
}

impl Trial {
    /// Extra terms: elections that failed (split votes) before the one that won.
    fn terms_skipped(&self) -> u64 {
        self.new_term.saturating_sub(self.old_term + 1)
    }
}

struct Options {
    trials: usize,
    handover_trials: usize,
    confs: Vec<Conf>,
    scenarios: Vec<Scenario>,
    /// Workers in the group.
    nodes: u64,
}

fn parse() -> Result<Options, String> {
    let mut trials = None;
    let mut quick = false;
    let mut names: Vec<String> = Vec::new();
    let mut scenarios = vec![Scenario::Kill, Scenario::Handover];
    let mut nodes = 5;
    let args = support::args();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--trials" => {
                let v = val()?;
                trials = Some(
                    v.parse::<usize>()
                        .map_err(|_| format!("--trials: {v:?} is not a number"))?
                        .max(1),
                );
            }
            "--config" => names.extend(val()?.split(',').map(|s| s.trim().to_string())),
            "--scenario" => {
                scenarios = match val()?.as_str() {
                    "kill" => vec![Scenario::Kill],
                    "handover" => vec![Scenario::Handover],
                    "all" => vec![Scenario::Kill, Scenario::Handover],
                    other => return Err(format!("--scenario: {other:?} (kill, handover, all)")),
                }
            }
            "--nodes" => {
                let v = val()?;
                nodes = match v.parse::<u64>() {
                    Ok(n @ (3 | 5 | 7)) => n,
                    _ => return Err(format!("--nodes: {v:?} (3, 5 or 7 workers)")),
                };
            }
            "--quick" => quick = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let confs = if names.is_empty() {
        CONFS.to_vec()
    } else {
        names
            .iter()
            .filter(|n| !n.is_empty())
            .map(|n| {
                CONFS
                    .iter()
                    .find(|c| c.name == n)
                    .copied()
                    .ok_or(format!("--config: unknown configuration {n:?}"))
            })
            .collect::<Result<_, _>>()?
    };
    let (trials, handover_trials) = match (trials, quick) {
        (Some(n), _) => (n, n),
        (None, true) => (5, 3),
        (None, false) => (100, 100),
    };
    Ok(Options {
        trials,
        handover_trials,
        confs,
        scenarios,
        nodes,
    })
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("failover: {msg}\n");
            }
            eprintln!("{USAGE}");
            std::process::exit(if msg.is_empty() { 0 } else { 2 });
        }
    };
    support::worker_binary();
    let started = Instant::now();
    let machine = support::machine();
    eprintln!("failover: {machine}");
    let mut all: Vec<Trial> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for conf in &o.confs {
        for &scenario in &o.scenarios {
            let n = match scenario {
                Scenario::Kill => o.trials,
                Scenario::Handover => o.handover_trials,
            };
            let (trials, failed) = run(conf, scenario, n, o.nodes);
            all.extend(trials);
            failures.extend(failed);
        }
    }
    let report = report(&o, &all, &failures, &machine, started.elapsed());
    print!("{report}");
    let dir = support::out_dir();
    support::save("failover.txt", &report);
    support::save("failover.csv", &csv(&all));
    let svg = dir.join("failover-cdf.svg");
    match plot(&o, &all, &svg) {
        Ok(()) => eprintln!("failover: wrote {}", svg.display()),
        Err(e) => eprintln!("failover: plot failed: {e}"),
    }
    eprintln!(
        "failover: wrote {} and {}",
        dir.join("failover.csv").display(),
        dir.join("failover.txt").display()
    );
    if !failures.is_empty() {
        // No new leader within many election timeouts is a liveness failure, not a
        // slow figure.
        std::process::exit(1);
    }
}

/// Runs `n` trials of `scenario` on a fresh group of `nodes` workers with timing `conf`.
fn run(conf: &Conf, scenario: Scenario, n: usize, nodes: u64) -> (Vec<Trial>, Vec<String>) {
    // No periodic confirms from the worker's own lease loop: only tenure's lease renewal.
    let mut group = Group::start(nodes, |w| conf.timing(w).args(["--confirm-ms", "3600000"]));
    let [_, hb, el, el_max] = conf.ms();
    // A restarted worker drops vote requests for one election timeout after it starts.
    let quiet = Duration::from_millis(el + 5);
    // Anything far slower than an election is a failure to report, not a figure.
    let patience = Duration::from_millis((20 * el_max).max(5_000));
    let mut trials = Vec::new();
    let mut failures = Vec::new();
    let mut progress = Progress::new(10);
    let mut rng = rand::thread_rng();
    let label = format!("{} {}", conf.name, scenario.name());
    let mut k = 0;
    while k < n {
        let Some((leader, term)) = group.wait_steady(quiet, patience) else {
            let why = format!("{label}: no steady leader after {patience:?}");
            failures.push(why.clone());
            progress.finish();
            eprintln!("{why}; recent events:\n{}", group.recent_events(20));
            break;
        };
        // Crash at a uniformly random point of the heartbeat interval.
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..hb * 1000)));
        let cursor = group.cursor();
        let at = match scenario {
            Scenario::Kill => group.kill(leader),
            Scenario::Handover => group.signal(leader, libc::SIGTERM),
        };
        let hit = group.wait_event(cursor, patience, |e| {
            e.event == "lease_acquired" && e.node != leader && e.term().unwrap_or(0) > term
        });
        let Some(new) = hit else {
            let why = format!("{label} trial {}: no new lease after {patience:?}", k + 1);
            failures.push(why.clone());
            progress.finish();
            eprintln!("{why}; recent events:\n{}", group.recent_events(20));
            group.reap(leader, Duration::from_millis(0));
            group.spawn(leader);
            k += 1;
            continue;
        };
        let t = measure(
            conf,
            scenario,
            k + 1,
            leader,
            term,
            at,
            &new,
            &group,
            cursor,
        );
        progress.update(
            k + 1,
            n,
            &format!(
                "{label}: {:.1} ms (term {} → {}, node {} → {})",
                t.downtime_ms, t.old_term, t.new_term, t.old_leader, t.new_leader
            ),
        );
        trials.push(t);
        if scenario == Scenario::Handover && !group.reap(leader, Duration::from_secs(5)) {
            failures.push(format!(
                "{label} trial {}: the old leader did not exit within 5 s of SIGTERM",
                k + 1
            ));
        }
        group.spawn(leader);
        k += 1;
    }
    progress.finish();
    group.stop();
    (trials, failures)
}

/// Derives one trial's figures from the events after `cursor`.
#[allow(clippy::too_many_arguments)]
fn measure(
    conf: &Conf,
    scenario: Scenario,
    trial: usize,
    leader: u64,
    term: u64,
    at: u64,
    new: &Event,
    group: &Group,
    cursor: usize,
) -> Trial {
    let s = group.state();
    let after = &s.events[cursor.min(s.events.len())..];
    let ms = |ns: u64| ns.saturating_sub(at) as f64 / 1e6;
    let campaigns: Vec<&Event> = after
        .iter()
        .filter(|e| e.node != leader && e.event == "leader_changed" && e.mono_ns <= new.mono_ns)
        .filter(|e| matches!(e.str("role"), Some("pre_candidate" | "candidate")))
        .collect();
    let mut campaigners: Vec<u64> = campaigns.iter().map(|e| e.node).collect();
    campaigners.sort_unstable();
    campaigners.dedup();
    let campaign = campaigns.first().map(|e| e.mono_ns);
    let elected = after
        .iter()
        .find(|e| {
            e.node == new.node
                && e.event == "leader_changed"
                && e.str("role") == Some("leader")
                && e.term() == new.term()
        })
        .map(|e| e.mono_ns);
    Trial {
        conf: conf.name,
        scenario,
        trial,
        downtime_ms: ms(new.mono_ns),
        old_leader: leader,
        new_leader: new.node,
        old_term: term,
        new_term: new.term().unwrap_or(0),
        first_campaigner: campaigns.first().map(|e| e.node),
        campaigners: campaigners.len(),
        detect_ms: campaign.map(ms),
        elect_ms: campaign
            .zip(elected)
            .map(|(c, l)| l.saturating_sub(c) as f64 / 1e6),
        lease_ms: elected.map(|l| new.mono_ns.saturating_sub(l) as f64 / 1e6),
    }
}

fn f1(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{x:.1}")
    }
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    summarize(&v).p50
}

fn report(
    o: &Options,
    all: &[Trial],
    failures: &[String],
    machine: &str,
    took: Duration,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n# failover: downtime in ms, signal → new confirmed lease"
    );
    let _ = writeln!(out, "machine: {machine}");
    let _ = writeln!(out, "group: {} worker processes", o.nodes);
    let _ = writeln!(
        out,
        "run: {:.0} s, load at end {}\n",
        took.as_secs_f64(),
        support::load()
    );
    for &scenario in &o.scenarios {
        let _ = writeln!(out, "## {}", scenario.name());
        let mut rows = Vec::new();
        for conf in &o.confs {
            let t: Vec<&Trial> = all
                .iter()
                .filter(|t| t.conf == conf.name && t.scenario == scenario)
                .collect();
            if t.is_empty() {
                continue;
            }
            let d: Vec<f64> = t.iter().map(|t| t.downtime_ms).collect();
            let s: Summary = summarize(&d);
            let split = t.iter().filter(|t| t.terms_skipped() > 0).count();
            let [tick, hb, el, max] = conf.ms();
            let mut row = vec![
                conf.name.to_string(),
                format!("{tick}/{hb}/{el}-{max}"),
                s.n.to_string(),
                f1(s.min),
                f1(s.p50),
                f1(s.p90),
                f1(s.p99),
                f1(s.max),
                f1(s.mean),
                split.to_string(),
            ];
            row.extend([
                f1(median(t.iter().filter_map(|t| t.detect_ms))),
                f1(median(t.iter().filter_map(|t| t.elect_ms))),
                f1(median(t.iter().filter_map(|t| t.lease_ms))),
            ]);
            if scenario == Scenario::Kill {
                row.push(f1(conf.timer_floor()));
            }
            rows.push(row);
        }
        let mut header = vec![
            "config",
            "tick/hb/election ms",
            "N",
            "min",
            "p50",
            "p90",
            "p99",
            "max",
            "mean",
            "split",
            "detect p50",
            "elect p50",
            "lease p50",
        ];
        if scenario == Scenario::Kill {
            header.push("timer floor");
        }
        out.push_str(&table(&header, &rows));
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "split: trials whose new term skipped at least one term (a failed election).\n\
         detect: signal → first worker campaigning (pre-vote); elect: → new leader; \
         lease: → its first ReadIndex-confirmed lease.\n\
         timer floor: election_ticks − 1 tick − ½ heartbeat (the soonest a timer fires, on average)."
    );
    for f in failures {
        let _ = writeln!(out, "FAILED: {f}");
    }
    out
}

fn csv(all: &[Trial]) -> String {
    let mut out = String::from(
        "config,scenario,trial,downtime_ms,old_leader,new_leader,old_term,new_term,terms_skipped,\
         first_campaigner,campaigners,detect_ms,elect_ms,lease_ms\n",
    );
    let opt = |x: Option<f64>| x.map(|v| format!("{v:.3}")).unwrap_or_default();
    for t in all {
        let _ = writeln!(
            out,
            "{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{}",
            t.conf,
            t.scenario.name(),
            t.trial,
            t.downtime_ms,
            t.old_leader,
            t.new_leader,
            t.old_term,
            t.new_term,
            t.terms_skipped(),
            t.first_campaigner
                .map(|n| n.to_string())
                .unwrap_or_default(),
            t.campaigners,
            opt(t.detect_ms),
            opt(t.elect_ms),
            opt(t.lease_ms),
        );
    }
    out
}

/// The cumulative distribution of downtime, one line per configuration: crash
/// failovers on top (like the paper's Figure 14), graceful handovers below.
fn plot(o: &Options, all: &[Trial], path: &std::path::Path) -> Result<(), String> {
    let scenarios: Vec<Scenario> = o
        .scenarios
        .iter()
        .copied()
        .filter(|s| all.iter().any(|t| t.scenario == *s))
        .collect();
    if scenarios.is_empty() {
        return Ok(());
    }
    let height = 420 * scenarios.len() as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((scenarios.len(), 1));
    for (panel, scenario) in panels.iter().zip(&scenarios) {
        let of = |c: &Conf| -> Vec<f64> {
            let mut d: Vec<f64> = all
                .iter()
                .filter(|t| t.conf == c.name && t.scenario == *scenario)
                .map(|t| t.downtime_ms)
                .collect();
            d.sort_by(f64::total_cmp);
            d
        };
        let xmax = o
            .confs
            .iter()
            .filter_map(|c| of(c).last().copied())
            .fold(1.0_f64, f64::max);
        let mut series = Vec::new();
        for (i, c) in o.confs.iter().enumerate() {
            let d = of(c);
            if d.is_empty() {
                continue;
            }
            let n = d.len() as f64;
            // A step function: the share of trials at or below each value.
            let mut points = vec![(d[0], 0.0)];
            for (k, x) in d.iter().enumerate() {
                points.push((*x, 100.0 * k as f64 / n));
                points.push((*x, 100.0 * (k + 1) as f64 / n));
            }
            let s = summarize(&d);
            series.push(plot::Series {
                label: format!(
                    "{} ({}): p50 {:.0} ms, max {:.0} ms, N={}",
                    c.name, c.label, s.p50, s.max, s.n
                ),
                color: plot::COLORS[i % plot::COLORS.len()],
                points,
            });
        }
        let frame = plot::Frame {
            title: match scenario {
                Scenario::Kill => "Leader crash (SIGKILL): time without a confirmed leader",
                Scenario::Handover => {
                    "Graceful handover (SIGTERM): time without a confirmed leader"
                }
            },
            x_desc: "time without leader (ms)",
            y_desc: "cumulative percent",
            x_max: plot::nice_max(xmax),
            y_max: 100.0,
            legend: SeriesLabelPosition::LowerRight,
        };
        plot::lines(panel, &frame, &series)?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
