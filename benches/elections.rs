//! Named elections on a group of worker processes (five; `--nodes 3|7`) on loopback:
//! how evenly the leaderships spread, and how fast a dead worker's share fails over.
//!
//! ```text
//! cargo bench --bench elections                       # 20 trials, 16 elections
//! cargo bench --bench elections -- --elections 64 --trials 50
//! cargo bench --bench elections -- --quick            # 3 trials (CI)
//! ```
//!
//! Each **trial** waits until the spread settled (every worker leads `⌊N/k⌋` or `⌈N/k⌉`
//! of the `N` elections, as the workers' `lease_acquired`/`lease_lost` events with an
//! `"election"` say), SIGKILLs the worker that leads the most, and measures for each of
//! its elections the time from the kill to the first `lease_acquired` of that election
//! by another worker in a higher term (`CLOCK_MONOTONIC` on both sides). The trial's
//! figure is the *last* of them: when every election of the dead worker has a lease
//! elsewhere. Then the worker restarts on its folder, and the time until the spread is
//! even again (`⌊N/k⌋`/`⌈N/k⌉` over all five) is the trial's *respread*. Between trials the
//! min and max leaderships per worker are sampled every 50 ms.
//!
//! Results go to `<target dir>/tenure-bench/`: `elections.csv` and `elections.txt`.

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use support::{summarize, table, Group, Progress, State};

const USAGE: &str = "\
usage: cargo bench --bench elections -- [--trials N] [--elections N] [--nodes N] [--quick]

  --trials N     kill trials (default 20)
  --elections N  named elections in the group (default 16)
  --nodes N      workers in the group: 3, 5 (default) or 7
  --quick        3 trials (CI)";

struct Options {
    trials: usize,
    elections: usize,
    nodes: u64,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        trials: 20,
        elections: 16,
        nodes: 5,
    };
    let mut args = support::args().into_iter();
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{what} needs a number"))
        };
        match a.as_str() {
            "--trials" => o.trials = num("--trials")?.max(1),
            "--elections" => o.elections = num("--elections")?.max(1),
            "--nodes" => {
                o.nodes = num("--nodes")? as u64;
                if ![3, 5, 7].contains(&o.nodes) {
                    return Err("--nodes must be 3, 5 or 7".into());
                }
            }
            "--quick" => o.trials = 3,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(o)
}

/// One kill trial.
struct Trial {
    victim: u64,
    share: usize,
    /// Kill → a lease elsewhere, per election of the victim, ms.
    each_ms: Vec<f64>,
    /// Kill → the last of them, ms.
    last_ms: f64,
    /// Restart → the spread even again, ms.
    respread_ms: f64,
}

/// Who holds each election's lease now: name → (node, term).
fn holders(s: &State) -> BTreeMap<String, (u64, u64)> {
    s.named
        .iter()
        .filter_map(|(name, per)| {
            per.iter()
                .filter(|(_, (_, held))| *held)
                .max_by_key(|(_, (term, _))| *term)
                .map(|(node, (term, _))| (name.clone(), (*node, *term)))
        })
        .collect()
}

/// Leaderships per node of `ids` (every node listed, zero included).
fn counts(s: &State, ids: &[u64]) -> BTreeMap<u64, usize> {
    let mut c: BTreeMap<u64, usize> = ids.iter().map(|id| (*id, 0)).collect();
    for (node, _) in holders(s).values() {
        if let Some(n) = c.get_mut(node) {
            *n += 1;
        }
    }
    c
}

/// The counts if every one of `n` elections is held and the spread is even over `ids`.
fn even(s: &State, ids: &[u64], n: usize) -> Option<BTreeMap<u64, usize>> {
    let c = counts(s, ids);
    let k = ids.len();
    let total: usize = c.values().sum();
    (holders(s).len() == n && total == n && c.values().all(|v| *v == n / k || *v == n.div_ceil(k)))
        .then_some(c)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("elections: {msg}\n");
            }
            eprintln!("{USAGE}");
            std::process::exit(if msg.is_empty() { 0 } else { 2 });
        }
    };
    support::worker_binary();
    let machine = support::machine();
    eprintln!("elections: {machine}");
    let started = Instant::now();
    let n = o.elections;
    let mut group = Group::start_with(o.nodes, true, |w| {
        w.args(["--elections", &n.to_string(), "--confirm-ms", "3600000"])
    });
    let ids = group.ids.clone();
    let settle = Duration::from_secs(60);
    let mut trials = Vec::new();
    let mut failures = Vec::new();
    let mut spread_samples: Vec<(usize, usize)> = Vec::new();
    let mut progress = Progress::new(1);
    let first = group.wait(settle, |s| even(s, &ids, n));
    eprintln!(
        "elections: first spread after {:.1} s: {first:?}",
        started.elapsed().as_secs_f64()
    );
    if first.is_none() {
        failures.push(format!("no even spread of {n} elections within {settle:?}"));
    }
    for t in 0..o.trials {
        if first.is_none() {
            break;
        }
        progress.update(t, o.trials, "kill the busiest worker");
        // Sample the spread for a second before the kill.
        for _ in 0..20 {
            let c = counts(&group.state(), &ids);
            let (min, max) = (c.values().min().copied(), c.values().max().copied());
            spread_samples.push((min.unwrap_or(0), max.unwrap_or(0)));
            std::thread::sleep(Duration::from_millis(50));
        }
        let (victim, share): (u64, Vec<(String, u64)>) = {
            let s = group.state();
            let h = holders(&s);
            let c = counts(&s, &ids);
            let victim = *c.iter().max_by_key(|(id, k)| (**k, **id)).expect("nodes").0;
            let share = h
                .into_iter()
                .filter(|(_, (node, _))| *node == victim)
                .map(|(name, (_, term))| (name, term))
                .collect();
            (victim, share)
        };
        let from = group.cursor();
        let killed = group.kill(victim);
        let alive: Vec<u64> = ids.iter().copied().filter(|i| *i != victim).collect();
        let mut each = BTreeMap::new();
        let done = group.wait(settle, |s| {
            for ev in &s.events[from.min(s.events.len())..] {
                let Some(name) = ev.v.get("election").and_then(|v| v.as_str()) else {
                    continue;
                };
                if ev.event != "lease_acquired" || ev.node == victim {
                    continue;
                }
                if let Some((_, old)) = share.iter().find(|(n, _)| n == name) {
                    if ev.term().unwrap_or(0) > *old {
                        each.entry(name.to_string())
                            .or_insert(ev.mono_ns.saturating_sub(killed));
                    }
                }
            }
            (each.len() == share.len()).then_some(())
        });
        if done.is_none() {
            failures.push(format!(
                "trial {t}: {} of {} elections of worker {victim} had no lease elsewhere after {settle:?}",
                share.len() - each.len(),
                share.len()
            ));
            break;
        }
        let each_ms: Vec<f64> = each.values().map(|ns| *ns as f64 / 1e6).collect();
        let last_ms = each_ms.iter().copied().fold(0.0, f64::max);
        let _ = group.wait(settle, |s| even(s, &alive, n));
        group.spawn(victim);
        let back = Instant::now();
        let respread = group.wait(settle, |s| even(s, &ids, n));
        if respread.is_none() {
            failures.push(format!(
                "trial {t}: no even spread after worker {victim} returned"
            ));
            break;
        }
        trials.push(Trial {
            victim,
            share: share.len(),
            each_ms,
            last_ms,
            respread_ms: back.elapsed().as_secs_f64() * 1e3,
        });
    }
    progress.finish();
    // Store writes of the workers' Ready passes (one synced write each, for every
    // election with something to persist in that pass) and the elections they carried.
    let mut writes = (0.0, 0.0);
    for id in &ids {
        let text = group.scrape(*id).unwrap_or_default();
        let metric = |name: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        writes.0 += metric("tenure_store_turn_writes_total");
        writes.1 += metric("tenure_store_turn_write_parts_total");
    }
    group.stop();
    let mut report = report(
        &o,
        &trials,
        &failures,
        &spread_samples,
        &machine,
        started.elapsed(),
    );
    let _ = writeln!(
        report,
        "store writes of Ready passes (one fsync each at most), all workers since their last start: \
         {:.0}, carrying {:.0} elections' state: {:.2} elections per write",
        writes.0,
        writes.1,
        if writes.0 > 0.0 { writes.1 / writes.0 } else { 0.0 }
    );
    print!("{report}");
    support::save("elections.txt", &report);
    let mut csv = String::from("trial,victim,share,last_ms,respread_ms\n");
    for (i, t) in trials.iter().enumerate() {
        let _ = writeln!(
            csv,
            "{i},{},{},{:.3},{:.1}",
            t.victim, t.share, t.last_ms, t.respread_ms
        );
    }
    support::save("elections.csv", &csv);
    if !failures.is_empty() {
        std::process::exit(1);
    }
}

fn report(
    o: &Options,
    trials: &[Trial],
    failures: &[String],
    spread: &[(usize, usize)],
    machine: &str,
    took: Duration,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "elections: {} named elections on {} workers, {} kill trials, {:.0} s\n{machine}\n{}\n",
        o.elections,
        o.nodes,
        trials.len(),
        took.as_secs_f64(),
        support::load()
    );
    let last: Vec<f64> = trials.iter().map(|t| t.last_ms).collect();
    let each: Vec<f64> = trials
        .iter()
        .flat_map(|t| t.each_ms.iter().copied())
        .collect();
    let respread: Vec<f64> = trials.iter().map(|t| t.respread_ms).collect();
    let row = |what: &str, v: &[f64]| {
        let s = summarize(v);
        vec![
            what.to_string(),
            v.len().to_string(),
            format!("{:.1}", s.p50),
            format!("{:.1}", s.p99),
            format!("{:.1}", s.max),
        ]
    };
    out.push_str(&table(
        &["ms", "n", "p50", "p99", "max"],
        &[
            row("kill → last of the share leased elsewhere", &last),
            row("kill → each election leased elsewhere", &each),
            row("restart → spread even again", &respread),
        ],
    ));
    let (min, max) = spread
        .iter()
        .fold((usize::MAX, 0), |(lo, hi), (a, b)| (lo.min(*a), hi.max(*b)));
    let _ = writeln!(
        out,
        "\nleaderships per worker while settled (sampled every 50 ms, {} samples): min {} max {} (target {}–{})",
        spread.len(),
        if spread.is_empty() { 0 } else { min },
        max,
        o.elections / o.nodes as usize,
        o.elections.div_ceil(o.nodes as usize)
    );
    for f in failures {
        let _ = writeln!(out, "FAILED: {f}");
    }
    out
}
