//! What a group of five worker processes costs at rest: CPU (% of one core) and memory
//! of each worker, and what each sends, over a window of 30 s.
//!
//! ```text
//! cargo bench --bench idle                  # 30 s window, tenure's default timing
//! cargo bench --bench idle -- --secs 60
//! cargo bench --bench idle -- --quick       # 3 s window (CI)
//! ```
//!
//! "At rest": a leader holds its lease and renews it (a ReadIndex round every
//! heartbeat), raft-rs heartbeats, QUIC keep-alives; the workers' own confirm loop is
//! off (`--confirm-ms` of an hour), so the figure is tenure's own cost. Extra worker
//! arguments (another timing, say) can follow `--worker-args`.
//!
//! * CPU: `utime + stime` of `/proc/<pid>/stat` (all threads) over the window.
//! * Memory: `VmRSS` (and the peak, `VmHWM`) of `/proc/<pid>/status` at the end.
//! * Sent: tenure's transport counters (`--stats-ms`: messages and frame bytes handed to
//!   QUIC). When the bench may create a network namespace (root and `unshare`), it runs
//!   the group inside one of its own, so the loopback counters of `/proc/net/dev` count
//!   only this group's packets: the bytes on the wire, with QUIC, UDP and IP headers,
//!   acknowledgements and keep-alives.
//!
//! Results: `<target dir>/tenure-bench/idle.txt`.

mod support;

use std::fmt::Write as _;
use std::time::Duration;

use support::{table, Group};

const NETNS_ENV: &str = "TENURE_BENCH_IN_NETNS";

const USAGE: &str = "\
usage: cargo bench --bench idle -- [--secs N] [--quick] [--no-netns] [--worker-args ARGS..]

  --secs N          length of the measured window (default 30)
  --quick           a 3 s window (CI)
  --no-netns        do not run the group in a network namespace of its own
  --worker-args ..  every argument after this goes to each worker";

fn main() {
    let args = support::args();
    let mut secs = 30.0f64;
    let mut netns = true;
    let mut worker_args: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--secs" => {
                i += 1;
                secs = args
                    .get(i)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage("--secs needs a number of seconds"));
            }
            "--quick" => secs = 3.0,
            "--no-netns" => netns = false,
            "--worker-args" => {
                worker_args = args[i + 1..].to_vec();
                break;
            }
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other:?}")),
        }
        i += 1;
    }
    let worker = support::worker_binary();
    let inside = std::env::var_os(NETNS_ENV).is_some();
    if netns && !inside && can_unshare() {
        // Run this same bench again inside a fresh network namespace with its own
        // loopback, so the loopback counters are this group's alone.
        let exe = std::env::current_exe().expect("bench executable");
        let status = std::process::Command::new("unshare")
            .args([
                "--net",
                "--",
                "sh",
                "-c",
                "ip link set lo up && exec \"$0\" \"$@\"",
            ])
            .arg(exe)
            .args(&args)
            .env(NETNS_ENV, "1")
            .env(support::WORKER_ENV, &worker)
            .status()
            .expect("run unshare");
        std::process::exit(status.code().unwrap_or(1));
    }
    run(secs, &worker_args, inside);
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("idle: {msg}\n");
    }
    eprintln!("{USAGE}");
    std::process::exit(if msg.is_empty() { 0 } else { 2 })
}

/// Whether `unshare --net` works here (root, or a kernel that allows it).
fn can_unshare() -> bool {
    std::process::Command::new("unshare")
        .args(["--net", "--", "sh", "-c", "ip link set lo up"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `utime + stime` of `pid` in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at field 3 (state);
    // utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// A `kB` field of `/proc/<pid>/status`, in MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Bytes and packets the loopback device sent (this process's network namespace).
fn loopback_tx() -> Option<(u64, u64)> {
    let dev = std::fs::read_to_string("/proc/self/net/dev").ok()?;
    let line = dev.lines().find(|l| l.trim_start().starts_with("lo:"))?;
    let f: Vec<u64> = line
        .split(':')
        .nth(1)?
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    Some((*f.get(8)?, *f.get(9)?))
}

/// The latest `transport_stats` of each worker: (mono_ns, messages sent, bytes sent).
fn latest_stats(group: &Group) -> std::collections::BTreeMap<u64, (u64, u64, u64)> {
    let s = group.state();
    let mut m = std::collections::BTreeMap::new();
    for e in s.events.iter().filter(|e| e.event == "transport_stats") {
        m.insert(
            e.node,
            (
                e.mono_ns,
                e.u64("sent").unwrap_or(0),
                e.u64("bytes_sent").unwrap_or(0),
            ),
        );
    }
    m
}

fn run(secs: f64, worker_args: &[String], in_netns: bool) {
    let machine = support::machine();
    eprintln!("idle: {machine}");
    let mut extra: Vec<String> = ["--confirm-ms", "3600000", "--stats-ms", "500"]
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    extra.extend(worker_args.iter().cloned());
    let mut group = Group::start(5, |w| w.args(&extra));
    let Some((leader, term)) = group.wait_steady(Duration::from_secs(1), Duration::from_secs(30))
    else {
        eprintln!(
            "idle: no steady leader within 30 s; recent events:\n{}",
            group.recent_events(20)
        );
        std::process::exit(1);
    };
    // Let the connections and the first catch-up settle before measuring.
    std::thread::sleep(Duration::from_secs_f64((secs / 10.0).clamp(1.0, 3.0)));
    let ids = group.ids.clone();
    let pids: Vec<u32> = ids.iter().filter_map(|id| group.pid(*id)).collect();
    let t0 = std::time::Instant::now();
    let cpu0: Vec<Option<f64>> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let stats0 = latest_stats(&group);
    let lo0 = loopback_tx();
    eprintln!("idle: leader {leader} (term {term}); measuring {secs} s …");
    std::thread::sleep(Duration::from_secs_f64(secs));
    let wall = t0.elapsed().as_secs_f64();
    let cpu1: Vec<Option<f64>> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let lo1 = loopback_tx();
    let stats1 = latest_stats(&group);
    let rss: Vec<(Option<f64>, Option<f64>)> = pids
        .iter()
        .map(|p| (status_mib(*p, "VmRSS:"), status_mib(*p, "VmHWM:")))
        .collect();
    let still = group.state().steady(&ids, Duration::ZERO);
    group.stop();

    let mut rows = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let cpu = match (cpu0[i], cpu1[i]) {
            (Some(a), Some(b)) => format!("{:.2}", 100.0 * (b - a) / wall),
            _ => "-".into(),
        };
        let (msgs, bytes) = match (stats0.get(id), stats1.get(id)) {
            (Some(a), Some(b)) if b.0 > a.0 => {
                let dt = (b.0 - a.0) as f64 / 1e9;
                (
                    format!("{:.0}", (b.1 - a.1) as f64 / dt),
                    format!("{:.0}", (b.2 - a.2) as f64 / dt),
                )
            }
            _ => ("-".into(), "-".into()),
        };
        let mib = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1}"));
        rows.push(vec![
            id.to_string(),
            if *id == leader { "leader" } else { "follower" }.to_string(),
            cpu,
            mib(rss[i].0),
            mib(rss[i].1),
            msgs,
            bytes,
        ]);
    }
    let mut out = String::new();
    let _ = writeln!(out, "\n# idle: 5 workers at rest, {wall:.1} s window");
    let _ = writeln!(out, "machine: {machine}");
    let _ = writeln!(out, "worker args: {}\n", extra.join(" "));
    out.push_str(&table(
        &[
            "node",
            "role",
            "CPU % of a core",
            "RSS MiB",
            "peak RSS MiB",
            "msgs sent/s",
            "frame bytes sent/s",
        ],
        &rows,
    ));
    match (in_netns, lo0, lo1) {
        (true, Some(a), Some(b)) => {
            let _ = writeln!(
                out,
                "\nloopback of the group's own network namespace, all 5 workers: {:.0} bytes/s \
                 in {:.0} packets/s (QUIC, UDP and IP headers, ACKs and keep-alives included): \
                 {:.0} bytes/s per worker on average",
                (b.0 - a.0) as f64 / wall,
                (b.1 - a.1) as f64 / wall,
                (b.0 - a.0) as f64 / wall / ids.len() as f64
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "\n(no network namespace: wire bytes not measured, frame bytes only)"
            );
        }
    }
    if still.is_none() {
        let _ = writeln!(out, "WARNING: the leader changed during the window");
    }
    let _ = writeln!(out, "load at end: {}", support::load());
    print!("{out}");
    let path = support::save("idle.txt", &out);
    eprintln!("idle: wrote {}", path.display());
}
