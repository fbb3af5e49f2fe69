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

use support::{plot, summarize, table, Group, Progress, State};

const USAGE: &str = "\
usage: cargo bench --bench elections -- [--scale N,N,...] [--elections N] [--trials N]
                                        [--idle SECS] [--nodes N] [--quick]

  --scale N,...  numbers of named elections to measure, one group each
                 (default 1,100,1000,10000)
  --elections N  measure N elections only (the same as --scale N)
  --trials N     kill trials per number (default 5)
  --idle SECS    length of the idle phase per number (default 30)
  --nodes N      workers in the group: 3, 5 (default) or 7
  --quick        --scale 1,100 --trials 2 --idle 10 (CI)";

struct Options {
    scale: Vec<usize>,
    trials: usize,
    idle: Duration,
    nodes: u64,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        scale: vec![1, 100, 1000, 10_000],
        trials: 5,
        idle: Duration::from_secs(30),
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
            "--elections" => o.scale = vec![num("--elections")?.max(1)],
            "--idle" => o.idle = Duration::from_secs(num("--idle")?.max(1) as u64),
            "--scale" => {
                let v = args.next().ok_or("--scale needs a list")?;
                o.scale = v
                    .split(',')
                    .map(|n| n.trim().parse::<usize>().map(|n| n.max(1)))
                    .collect::<Result<_, _>>()
                    .map_err(|_| format!("--scale {v:?}: not a list of numbers"))?;
            }
            "--nodes" => {
                o.nodes = num("--nodes")? as u64;
                if ![3, 5, 7].contains(&o.nodes) {
                    return Err("--nodes must be 3, 5 or 7".into());
                }
            }
            "--quick" => {
                o.scale = vec![1, 100];
                o.trials = 2;
                o.idle = Duration::from_secs(10);
            }
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

/// What one number of elections measured.
struct Row {
    n: usize,
    /// Start → first even spread, s.
    first_spread_s: f64,
    /// Idle phase, per worker: CPU share of one core (%), RSS (MiB), messages sent per
    /// second, frames' bytes sent per second.
    cpu: Vec<f64>,
    rss_mib: Vec<f64>,
    msgs_per_s: Vec<f64>,
    /// Idle phase, per worker: store writes of Ready passes per second (each a trip to the
    /// store's writer thread; synced unless it only moves commit indexes).
    writes_per_s: Vec<f64>,
    /// Quiet elections per worker at the end of the idle phase (over all workers).
    quiet: u64,
    /// Data folders, all workers, at the start and end of the idle phase (bytes).
    disk: (u64, u64),
    trials: Vec<Trial>,
    failures: Vec<String>,
    spread: Vec<(usize, usize)>,
    /// Store writes of Ready passes, and the elections they carried.
    writes: (f64, f64),
    /// `Safe` confirms with one busy caller per name, per worker: (count, p50 µs, p99 µs).
    confirms: Vec<(f64, f64, f64)>,
}

/// Seconds of CPU (user + system) a process used so far, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) closing with ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / hz.max(1.0))
}

/// Resident set size of a process, MiB, from `/proc/<pid>/status`.
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The sum of a metric's samples in a scrape.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// How long the confirm load runs.
const CONFIRM_LOAD: Duration = Duration::from_secs(5);

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
    let mut rows = Vec::new();
    for &n in &o.scale {
        eprintln!("elections: {n} named elections on {} workers", o.nodes);
        rows.push(measure(&o, n));
    }
    let report = report(&o, &rows, &machine, started.elapsed());
    print!("{report}");
    support::save("elections.txt", &report);
    let mut csv = String::from(
        "elections,trial,victim,share,last_ms,respread_ms,cpu_mean_pct,cpu_max_pct,rss_max_mib,msgs_per_s_mean,disk_start,disk_end\n",
    );
    for r in &rows {
        let s = |v: &[f64]| summarize(v);
        for (i, t) in r.trials.iter().enumerate() {
            let _ = writeln!(
                csv,
                "{},{i},{},{},{:.3},{:.1},{:.2},{:.2},{:.1},{:.1},{},{}",
                r.n,
                t.victim,
                t.share,
                t.last_ms,
                t.respread_ms,
                s(&r.cpu).mean,
                s(&r.cpu).max,
                s(&r.rss_mib).max,
                s(&r.msgs_per_s).mean,
                r.disk.0,
                r.disk.1
            );
        }
    }
    support::save("elections.csv", &csv);
    if let Err(e) = plot_rows(&rows) {
        eprintln!("elections: no plot: {e}");
    }
    if rows.iter().any(|r| !r.failures.is_empty()) {
        std::process::exit(1);
    }
}

/// One group of `o.nodes` workers with `n` named elections: the first spread, an idle
/// phase, kill trials.
fn measure(o: &Options, n: usize) -> Row {
    let started = Instant::now();
    // The confirm load starts when this file appears (after the idle phase).
    let load_file = std::env::temp_dir().join(format!(
        "tenure-bench-confirm-load-{}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&load_file);
    let mut group = Group::start_with(o.nodes, true, |w| {
        w.args(["--elections", &n.to_string(), "--confirm-ms", "3600000"])
            .args(["--confirm-load-secs", &CONFIRM_LOAD.as_secs().to_string()])
            .args([
                std::ffi::OsStr::new("--confirm-load-file"),
                load_file.as_os_str(),
            ])
    });
    let ids = group.ids.clone();
    // Founding thousands of elections takes a while (one synced store write each).
    let settle = Duration::from_secs(60).max(Duration::from_millis(n as u64 * 30));
    let mut row = Row {
        n,
        first_spread_s: 0.0,
        cpu: Vec::new(),
        rss_mib: Vec::new(),
        msgs_per_s: Vec::new(),
        writes_per_s: Vec::new(),
        quiet: 0,
        disk: (0, 0),
        trials: Vec::new(),
        failures: Vec::new(),
        spread: Vec::new(),
        writes: (0.0, 0.0),
        confirms: Vec::new(),
    };
    let first = group.wait(settle, |s| even(s, &ids, n));
    row.first_spread_s = started.elapsed().as_secs_f64();
    eprintln!(
        "elections: first spread after {:.1} s: {first:?}",
        row.first_spread_s
    );
    if first.is_none() {
        let (held, c) = {
            let s = group.state();
            (holders(&s).len(), counts(&s, &ids))
        };
        row.failures.push(format!(
            "no even spread of {n} elections within {settle:?}: {held} held, per worker {c:?}"
        ));
        group.stop();
        return row;
    }
    // Idle: every election quiet (as far as the workers' metrics say), then CPU, RSS,
    // messages and the data folders over the phase.
    let quiet_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let quiet: f64 = ids
            .iter()
            .map(|id| {
                metric(
                    &group.scrape(*id).unwrap_or_default(),
                    "tenure_named_elections_quiet",
                )
            })
            .sum();
        row.quiet = quiet as u64;
        if quiet as usize >= n * ids.len() || Instant::now() >= quiet_deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let data = |g: &Group| -> u64 {
        ids.iter()
            .map(|id| dir_bytes(&g.dir.path().join(format!("data-{id}"))))
            .sum()
    };
    let sent = |g: &Group, id: u64| {
        metric(
            &g.scrape(id).unwrap_or_default(),
            "tenure_transport_sent_total",
        )
    };
    let writes = |g: &Group, id: u64| {
        metric(
            &g.scrape(id).unwrap_or_default(),
            "tenure_store_turn_writes_total",
        )
    };
    let before: Vec<(Option<f64>, f64, f64)> = ids
        .iter()
        .map(|id| {
            let cpu = group.pid(*id).and_then(cpu_seconds);
            (cpu, sent(&group, *id), writes(&group, *id))
        })
        .collect();
    row.disk.0 = data(&group);
    let t0 = Instant::now();
    let mut progress = Progress::new(1);
    let secs = o.idle.as_secs() as usize;
    for k in 0..secs {
        progress.update(k, secs, "idle");
        std::thread::sleep(Duration::from_secs(1));
    }
    progress.finish();
    let dt = t0.elapsed().as_secs_f64();
    for (id, (cpu0, sent0, writes0)) in ids.iter().zip(before) {
        let pid = group.pid(*id);
        if let (Some(c0), Some(c1)) = (cpu0, pid.and_then(cpu_seconds)) {
            row.cpu.push((c1 - c0) / dt * 100.0);
        }
        if let Some(r) = pid.and_then(rss_mib) {
            row.rss_mib.push(r);
        }
        row.msgs_per_s.push((sent(&group, *id) - sent0) / dt);
        row.writes_per_s.push((writes(&group, *id) - writes0) / dt);
    }
    row.disk.1 = data(&group);
    let mut progress = Progress::new(1);
    for t in 0..o.trials {
        progress.update(t, o.trials, "kill the busiest worker");
        // Sample the spread for a second before the kill.
        for _ in 0..20 {
            let c = counts(&group.state(), &ids);
            let (min, max) = (c.values().min().copied(), c.values().max().copied());
            row.spread.push((min.unwrap_or(0), max.unwrap_or(0)));
            std::thread::sleep(Duration::from_millis(50));
        }
        match kill_trial(&mut group, &ids, n, settle) {
            Ok(trial) => row.trials.push(trial),
            Err(e) => {
                row.failures.push(format!("trial {t}: {e}"));
                break;
            }
        }
    }
    progress.finish();
    // `Safe` confirms, one busy caller per election on its leader, for CONFIRM_LOAD:
    // last, as it can saturate the machine (at 10,000 elections on two cores, it did).
    eprintln!("elections: Safe confirms, one caller per name, for {CONFIRM_LOAD:?}");
    let from = group.cursor();
    let _ = std::fs::write(&load_file, b"");
    let stats = group.wait(CONFIRM_LOAD + Duration::from_secs(30), |s| {
        let got: Vec<(f64, f64, f64)> = s.events[from.min(s.events.len())..]
            .iter()
            .filter(|e| e.event == "named_confirm_stats")
            .map(|e| {
                let f = |k: &str| {
                    e.v.get(k)
                        .and_then(serde_json::Value::as_f64)
                        .unwrap_or(0.0)
                };
                (f("count"), f("p50_us"), f("p99_us"))
            })
            .collect();
        (got.len() == ids.len()).then_some(got)
    });
    let _ = std::fs::remove_file(&load_file);
    match stats {
        Some(v) => row.confirms = v,
        None => row
            .failures
            .push("the confirm load's statistics did not come from every worker".into()),
    }
    // Store writes of the workers' Ready passes (one synced write each, for every
    // election with something to persist in that pass) and the elections they carried.
    for id in &ids {
        let text = group.scrape(*id).unwrap_or_default();
        row.writes.0 += metric(&text, "tenure_store_turn_writes_total");
        row.writes.1 += metric(&text, "tenure_store_turn_write_parts_total");
    }
    group.stop();
    row
}

/// SIGKILLs the worker leading the most elections, times until each of them has a lease
/// elsewhere, restarts it, and times until the spread is even again.
fn kill_trial(group: &mut Group, ids: &[u64], n: usize, settle: Duration) -> Result<Trial, String> {
    let (victim, share): (u64, Vec<(String, u64)>) = {
        let s = group.state();
        let h = holders(&s);
        let c = counts(&s, ids);
        let victim = *c.iter().max_by_key(|(id, k)| (**k, **id)).expect("nodes").0;
        let share = h
            .into_iter()
            .filter(|(_, (node, _))| *node == victim)
            .map(|(name, (_, term))| (name, term))
            .collect();
        (victim, share)
    };
    let share: BTreeMap<String, u64> = share.into_iter().collect();
    let from = group.cursor();
    let killed = group.kill(victim);
    let alive: Vec<u64> = ids.iter().copied().filter(|i| *i != victim).collect();
    let mut each = BTreeMap::new();
    let mut seen = from;
    let done = group.wait(settle, |s| {
        for ev in &s.events[seen.min(s.events.len())..] {
            let Some(name) = ev.v.get("election").and_then(|v| v.as_str()) else {
                continue;
            };
            if ev.event != "lease_acquired" || ev.node == victim {
                continue;
            }
            if let Some(old) = share.get(name) {
                if ev.term().unwrap_or(0) > *old {
                    each.entry(name.to_string())
                        .or_insert(ev.mono_ns.saturating_sub(killed));
                }
            }
        }
        seen = s.events.len();
        (each.len() == share.len()).then_some(())
    });
    if done.is_none() {
        return Err(format!(
            "{} of {} elections of worker {victim} had no lease elsewhere after {settle:?}",
            share.len() - each.len(),
            share.len()
        ));
    }
    let each_ms: Vec<f64> = each.values().map(|ns| *ns as f64 / 1e6).collect();
    let last_ms = each_ms.iter().copied().fold(0.0, f64::max);
    let _ = group.wait(settle, |s| even(s, &alive, n));
    group.spawn(victim);
    let back = Instant::now();
    if group.wait(settle, |s| even(s, ids, n)).is_none() {
        let s = group.state();
        let held = holders(&s).len();
        let c = counts(&s, ids);
        return Err(format!(
            "no even spread after worker {victim} returned, within {settle:?}: {held} of {n} \
             held, per worker {c:?}"
        ));
    }
    Ok(Trial {
        victim,
        share: share.len(),
        each_ms,
        last_ms,
        respread_ms: back.elapsed().as_secs_f64() * 1e3,
    })
}

fn report(o: &Options, rows: &[Row], machine: &str, took: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "elections: {} workers, {:?} named elections, {} kill trials and {} s idle each, {:.0} s\n{machine}\n{}\n",
        o.nodes,
        o.scale,
        o.trials,
        o.idle.as_secs(),
        took.as_secs_f64(),
        support::load()
    );
    let f1 = |v: f64| format!("{v:.1}");
    let mut table_rows = Vec::new();
    for r in rows {
        let last: Vec<f64> = r.trials.iter().map(|t| t.last_ms).collect();
        let each: Vec<f64> = r
            .trials
            .iter()
            .flat_map(|t| t.each_ms.iter().copied())
            .collect();
        let respread: Vec<f64> = r.trials.iter().map(|t| t.respread_ms / 1e3).collect();
        let (cpu, rss, msgs) = (
            summarize(&r.cpu),
            summarize(&r.rss_mib),
            summarize(&r.msgs_per_s),
        );
        let (l, e, rs) = (summarize(&last), summarize(&each), summarize(&respread));
        table_rows.push(vec![
            r.n.to_string(),
            format!("{} / {}", f1(cpu.mean), f1(cpu.max)),
            f1(rss.max),
            format!("{:.0}", msgs.mean),
            format!("{}/{}", r.quiet, r.n * o.nodes as usize),
            format!("{} / {}", f1(l.p50), f1(l.max)),
            format!("{} / {}", f1(e.p50), f1(e.p99)),
            format!("{:.1} / {:.1}", rs.p50, rs.max),
            format!(
                "{:.1} → {:.1}",
                r.disk.0 as f64 / 1048576.0,
                r.disk.1 as f64 / 1048576.0
            ),
            format!("{:.1}", r.first_spread_s),
            confirm_cell(&r.confirms),
        ]);
    }
    out.push_str(&table(
        &[
            "elections",
            "idle CPU % of a core, mean / max worker",
            "RSS MiB, max",
            "msgs/s per worker",
            "quiet (all workers)",
            "kill → last of share, ms p50 / max",
            "kill → each, ms p50 / p99",
            "respread s p50 / max",
            "data MiB, idle start → end",
            "first spread s",
            "Safe confirm µs p50 / p99 (busiest worker), confirms/s",
        ],
        &table_rows,
    ));
    for r in rows {
        let (min, max) = r
            .spread
            .iter()
            .fold((usize::MAX, 0), |(lo, hi), (a, b)| (lo.min(*a), hi.max(*b)));
        let _ = writeln!(
            out,
            "\n{} elections: {} trials (shares of {}); leaderships per worker while settled, {} samples: min {} max {} (target {}–{}); \
             store writes of Ready passes: {:.0} carrying {:.0} elections' state ({:.2} per write), \
             {:.1} per second per worker at rest (mean)",
            r.n,
            r.trials.len(),
            r.trials.iter().map(|t| t.share.to_string()).collect::<Vec<_>>().join(","),
            r.spread.len(),
            if r.spread.is_empty() { 0 } else { min },
            max,
            r.n / o.nodes as usize,
            r.n.div_ceil(o.nodes as usize),
            r.writes.0,
            r.writes.1,
            if r.writes.0 > 0.0 { r.writes.1 / r.writes.0 } else { 0.0 },
            summarize(&r.writes_per_s).mean
        );
        for f in &r.failures {
            let _ = writeln!(out, "FAILED ({} elections): {f}", r.n);
        }
    }
    out
}

/// The confirm load's cell: the highest p50 and p99 of the workers, and confirms per
/// second over all of them.
fn confirm_cell(c: &[(f64, f64, f64)]) -> String {
    if c.is_empty() {
        return "-".into();
    }
    let p50 = c.iter().map(|x| x.1).fold(0.0, f64::max);
    let p99 = c.iter().map(|x| x.2).fold(0.0, f64::max);
    let count: f64 = c.iter().map(|x| x.0).sum();
    format!(
        "{p50:.0} / {p99:.0}, {:.0}",
        count / CONFIRM_LOAD.as_secs_f64()
    )
}

/// `elections.svg`: idle CPU and failover time against the number of elections.
fn plot_rows(rows: &[Row]) -> Result<(), String> {
    use plotters::prelude::*;
    let path = support::out_dir().join("elections.svg");
    let root = SVGBackend::new(&path, (900, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((2, 1));
    // log10 of the number of elections on x (1 → 0, 10 000 → 4).
    let x = |n: usize| (n as f64).log10();
    let x_max = rows.iter().map(|r| x(r.n)).fold(1.0, f64::max);
    let cpu: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (x(r.n), summarize(&r.cpu).mean))
        .collect();
    let cpu_max: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (x(r.n), summarize(&r.cpu).max))
        .collect();
    let y1 = cpu_max.iter().map(|p| p.1).fold(1.0, f64::max);
    plot::lines(
        &panels[0],
        &plot::Frame {
            title: "Idle CPU per worker against the number of named elections",
            x_desc: "log10(named elections)",
            y_desc: "% of one core",
            x_max,
            y_max: plot::nice_max(y1),
            legend: SeriesLabelPosition::UpperLeft,
        },
        &[
            plot::Series {
                label: "mean worker".into(),
                color: plot::COLORS[0],
                points: cpu,
            },
            plot::Series {
                label: "busiest worker".into(),
                color: plot::COLORS[1],
                points: cpu_max,
            },
        ],
    )?;
    let p50: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| {
            (
                x(r.n),
                summarize(&r.trials.iter().map(|t| t.last_ms).collect::<Vec<_>>()).p50,
            )
        })
        .collect();
    let mx: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| {
            (
                x(r.n),
                summarize(&r.trials.iter().map(|t| t.last_ms).collect::<Vec<_>>()).max,
            )
        })
        .collect();
    let y2 = mx.iter().map(|p| p.1).fold(1.0, f64::max);
    plot::lines(
        &panels[1],
        &plot::Frame {
            title: "SIGKILL of the busiest worker → its last election leased elsewhere",
            x_desc: "log10(named elections)",
            y_desc: "ms",
            x_max,
            y_max: plot::nice_max(y2),
            legend: SeriesLabelPosition::UpperLeft,
        },
        &[
            plot::Series {
                label: "p50".into(),
                color: plot::COLORS[0],
                points: p50,
            },
            plot::Series {
                label: "max".into(),
                color: plot::COLORS[1],
                points: mx,
            },
        ],
    )?;
    root.present().map_err(|e| e.to_string())?;
    eprintln!("elections: plot in {}", path.display());
    Ok(())
}
