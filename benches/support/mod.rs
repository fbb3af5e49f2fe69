//! What the process benchmarks share: a group of real worker processes
//! (`tenure-worker`, release build), their JSON events, statistics, and where the
//! results go (`<target dir>/tenure-bench/`). The workers' command lines and events are
//! the test kit's (`harness/src/kit/`).
//!
//! Every worker is a child process tracked by PID; its certificates and RocksDB folder
//! live in a temporary folder removed when the [`Group`] is dropped. Nothing is ever
//! killed by name.

#![allow(dead_code)] // each bench uses a different part of this module

pub(crate) use tenure_harness::kit;
pub(crate) mod plot;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) use kit::binary::target_dir;
use kit::children::Children;
pub(crate) use kit::command::WorkerCommand;
pub(crate) use kit::event::Event;
use tenure::clock::monotonic_ns;

/// `<target>/tenure-bench/`, created if needed: CSVs, tables and plots go here.
pub(crate) fn out_dir() -> PathBuf {
    let d = target_dir().join("tenure-bench");
    std::fs::create_dir_all(&d).expect("create target/tenure-bench");
    d
}

/// An environment variable naming a worker binary to use instead of building one.
pub(crate) const WORKER_ENV: &str = "TENURE_BENCH_WORKER";

/// The worker, `tenure-worker`, of the same profile as this bench (release under `cargo
/// bench`, which builds it for the bench), unless [`WORKER_ENV`] names one.
pub(crate) fn worker_binary() -> PathBuf {
    match std::env::var_os(WORKER_ENV) {
        Some(bin) => PathBuf::from(bin),
        None => kit::binary::worker(),
    }
}

/// What the harness knows about the group, kept up to date by the reader threads.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Every event so far, in arrival order.
    pub events: Vec<Event>,
    /// Each worker's latest view: (term, leader) from its last `leader_changed`.
    pub view: BTreeMap<u64, (u64, Option<u64>)>,
    /// Each worker's latest lease event: (term, held).
    pub lease: BTreeMap<u64, (u64, bool)>,
    /// When each worker's current incarnation printed `started`.
    pub started: BTreeMap<u64, u64>,
    /// Named elections (events with `"election": NAME`): each worker's latest lease event
    /// per name, (term, held).
    pub named: BTreeMap<String, BTreeMap<u64, (u64, bool)>>,
}

impl State {
    /// The steady leader, if there is one: a node whose latest lease event is an
    /// acquisition in term T, while every one of `ids` sees (T, that node) and started
    /// at least `quiet` before now (a restarted node ignores vote requests for one
    /// election timeout after it starts; a trial must not begin inside that window).
    pub(crate) fn steady(&self, ids: &[u64], quiet: Duration) -> Option<(u64, u64)> {
        let now = monotonic_ns();
        let (leader, term) = self
            .lease
            .iter()
            .filter(|(_, (_, held))| *held)
            .map(|(n, (t, _))| (*n, *t))
            .max_by_key(|(_, t)| *t)?;
        let all = ids.iter().all(|id| {
            self.view.get(id) == Some(&(term, Some(leader)))
                && self
                    .started
                    .get(id)
                    .is_some_and(|s| now >= s + quiet.as_nanos() as u64)
        });
        all.then_some((leader, term))
    }
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// A group of worker processes on 127.0.0.1.
pub(crate) struct Group {
    /// Certificates, data folders and worker stderr logs.
    pub dir: tempfile::TempDir,
    /// Member ids, 1..=n.
    pub ids: Vec<u64>,
    addrs: BTreeMap<u64, String>,
    children: Children,
    shared: Shared,
    /// Every worker's command line but for its id, address and data folder: the group's
    /// peers, certificates and id (`--found` on every start, as a unit file would), and
    /// what the bench asked for.
    template: WorkerCommand,
    /// Each worker's metrics endpoint, if the bench asked for them ([`Group::with_metrics`]).
    metrics: BTreeMap<u64, String>,
}

impl Group {
    /// Starts `n` workers, each with what `configure` adds to the group's command line
    /// (timing, read mode, …).
    pub(crate) fn start(n: u64, configure: impl FnOnce(WorkerCommand) -> WorkerCommand) -> Group {
        Group::start_with(n, false, configure)
    }

    /// [`Group::start`], every worker with a metrics endpoint if `metrics` ([`Group::scrape`]).
    pub(crate) fn start_with(
        n: u64,
        metrics: bool,
        configure: impl FnOnce(WorkerCommand) -> WorkerCommand,
    ) -> Group {
        let dir = tempfile::Builder::new()
            .prefix("tenure-bench-")
            .tempdir()
            .expect("temp dir");
        let ids: Vec<u64> = (1..=n).collect();
        tenure::transport::tls::write_cluster_certs(dir.path().join("certs"), ids.iter().copied())
            .expect("write certificates");
        // Bind them all at once so no two get the same port, then release them.
        let socks: Vec<std::net::UdpSocket> = ids
            .iter()
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").expect("free UDP port"))
            .collect();
        let addrs: BTreeMap<u64, String> = ids
            .iter()
            .zip(&socks)
            .map(|(id, s)| (*id, s.local_addr().expect("local addr").to_string()))
            .collect();
        drop(socks);
        let template = configure(
            WorkerCommand::new(worker_binary())
                .peers(&addrs)
                .certs(dir.path().join("certs"))
                .log_level("off")
                .found(tenure::GroupId::random()),
        );
        let mut g = Group {
            dir,
            ids: ids.clone(),
            addrs,
            children: Children::new(),
            shared: Arc::new((Mutex::new(State::default()), Condvar::new())),
            template,
            metrics: BTreeMap::new(),
        };
        if metrics {
            g.with_metrics();
        }
        for id in ids {
            g.spawn(id);
        }
        g
    }

    /// Gives every worker a metrics endpoint (from its next start on): the free TCP ports
    /// are chosen now and kept across restarts.
    fn with_metrics(&mut self) {
        for id in self.ids.clone() {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free TCP port");
            self.metrics
                .insert(id, l.local_addr().expect("local addr").to_string());
        }
    }

    /// Worker `id`'s metrics, as text (`None` if it has no endpoint or does not answer).
    pub(crate) fn scrape(&self, id: u64) -> Option<String> {
        use std::io::{Read, Write};
        let addr = self.metrics.get(&id)?;
        let mut c = std::net::TcpStream::connect(addr).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(c, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
        let mut body = String::new();
        c.read_to_string(&mut body).ok()?;
        Some(body)
    }

    /// Starts (or restarts, on the same data folder and port) worker `id`.
    pub(crate) fn spawn(&mut self, id: u64) {
        {
            // Forget the previous incarnation's view: the new one reports its own.
            let mut s = self.state();
            s.view.remove(&id);
            s.lease.remove(&id);
            s.started.remove(&id);
            for per in s.named.values_mut() {
                per.remove(&id);
            }
        }
        let stderr = File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("worker-{id}.stderr")))
            .expect("worker stderr log");
        let mut template = self.template.clone();
        if let Some(m) = self.metrics.get(&id) {
            template = template.metrics(m);
        }
        let mut child = template
            .id(id)
            .listen(&self.addrs[&id])
            .data_dir(self.dir.path().join(format!("data-{id}")))
            .command()
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn worker");
        let out = child.stdout.take().expect("worker stdout");
        let shared = self.shared.clone();
        kit::event::read_events(out, move |ev| {
            let (lock, cv) = &*shared;
            let mut s = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let term = ev.term().unwrap_or(0);
            if let Some(name) = ev.v.get("election").and_then(|v| v.as_str()) {
                // A named election's event: its own lease table, never the root's.
                let held = match ev.event.as_str() {
                    "lease_acquired" => Some(true),
                    "lease_lost" => Some(false),
                    _ => None,
                };
                if let Some(held) = held {
                    s.named
                        .entry(name.to_string())
                        .or_default()
                        .insert(ev.node, (term, held));
                }
                s.events.push(ev);
                cv.notify_all();
                return;
            }
            if ev.event == "stopped" {
                for per in s.named.values_mut() {
                    if let Some(e) = per.get_mut(&ev.node) {
                        e.1 = false;
                    }
                }
            }
            match ev.event.as_str() {
                "started" => {
                    s.started.insert(ev.node, ev.mono_ns);
                }
                "leader_changed" => {
                    let leader = ev.u64("leader");
                    s.view.insert(ev.node, (term, leader));
                }
                "lease_acquired" => {
                    s.lease.insert(ev.node, (term, true));
                }
                "lease_lost" | "stopped" => {
                    s.lease.insert(ev.node, (term, false));
                }
                _ => {}
            }
            s.events.push(ev);
            cv.notify_all();
        });
        self.children.insert(id, child);
    }

    /// The shared state (locked).
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many events have arrived so far (an index for [`Group::wait`]).
    pub(crate) fn cursor(&self) -> usize {
        self.state().events.len()
    }

    /// Waits until `f` returns `Some` (called on the state after each event and every
    /// 5 ms), or `timeout`; `None` on timeout.
    pub(crate) fn wait<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&State) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.shared;
        let mut s = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(t) = f(&s) {
                return Some(t);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let wait = (deadline - now).min(Duration::from_millis(5));
            s = cv
                .wait_timeout(s, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Waits for the first event at or after index `from` that matches `f`.
    pub(crate) fn wait_event(
        &self,
        from: usize,
        timeout: Duration,
        f: impl Fn(&Event) -> bool,
    ) -> Option<Event> {
        let mut seen = from;
        self.wait(timeout, |s| {
            let hit = s.events[seen.min(s.events.len())..].iter().find(|e| f(e));
            seen = s.events.len();
            hit.cloned()
        })
    }

    /// Waits for a steady leader (see [`State::steady`]); `(leader, term)`.
    pub(crate) fn wait_steady(&self, quiet: Duration, timeout: Duration) -> Option<(u64, u64)> {
        let ids = self.ids.clone();
        self.wait(timeout, |s| s.steady(&ids, quiet))
    }

    /// The PID of worker `id`, if it runs.
    pub(crate) fn pid(&self, id: u64) -> Option<u32> {
        self.children.pid(id)
    }

    /// Sends `sig` to worker `id`; returns `CLOCK_MONOTONIC` just before the signal.
    pub(crate) fn signal(&self, id: u64, sig: i32) -> u64 {
        let pid = self.pid(id).expect("worker is running");
        let at = monotonic_ns();
        assert!(self.children.signal(id, sig), "kill({pid}, {sig})");
        at
    }

    /// SIGKILLs worker `id` and reaps it; returns `CLOCK_MONOTONIC` just before the kill.
    pub(crate) fn kill(&mut self, id: u64) -> u64 {
        let at = self.signal(id, libc::SIGKILL);
        self.children.kill(id);
        at
    }

    /// Waits up to `timeout` for worker `id` to exit by itself, then SIGKILLs it. True
    /// when it exited by itself.
    pub(crate) fn reap(&mut self, id: u64, timeout: Duration) -> bool {
        self.children.reap(id, timeout)
    }

    /// The last lines a worker wrote on stderr (for failure reports).
    pub(crate) fn stderr_tail(&self, id: u64, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.path().join(format!("worker-{id}.stderr")))
            .unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// A short account of the latest events, for failure reports.
    pub(crate) fn recent_events(&self, n: usize) -> String {
        let s = self.state();
        s.events[s.events.len().saturating_sub(n)..]
            .iter()
            .map(|e| format!("  node {} {} {}", e.node, e.event, e.v))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERMs every worker and waits for them (SIGKILL after 3 s).
    pub(crate) fn stop(&mut self) {
        self.children.stop_all(Duration::from_secs(3));
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Before the temporary folder (a field) goes.
        self.children.kill_all();
    }
}

/// Summary statistics of a sample.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Summary {
    /// Sample size.
    pub n: usize,
    /// Smallest value.
    pub min: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 90th percentile (nearest rank).
    pub p90: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// 99.9th percentile (nearest rank).
    pub p999: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

/// The `p`-th percentile of sorted `v` by nearest rank (the smallest value with at least
/// `p` % of the sample at or below it).
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summarizes `v` (any order).
pub(crate) fn summarize(v: &[f64]) -> Summary {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return Summary::default();
    }
    Summary {
        n: s.len(),
        min: s[0],
        p50: percentile(&s, 50.0),
        p90: percentile(&s, 90.0),
        p99: percentile(&s, 99.0),
        p999: percentile(&s, 99.9),
        max: s[s.len() - 1],
        mean: s.iter().sum::<f64>() / s.len() as f64,
    }
}

/// A text table with right-aligned columns after the first.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = width[i])
                } else {
                    format!("{c:>w$}", w = width[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&line(rule.iter().map(String::as_str).collect()));
    for r in rows {
        out.push('\n');
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out.push('\n');
    out
}

/// A one-line progress display on stderr: rewritten in place on a terminal, one line
/// every `every` updates otherwise (CI logs).
pub(crate) struct Progress {
    tty: bool,
    every: usize,
    width: usize,
}

impl Progress {
    /// A progress display that prints every `every`-th update when not on a terminal.
    pub(crate) fn new(every: usize) -> Self {
        Progress {
            tty: std::io::stderr().is_terminal(),
            every: every.max(1),
            width: 0,
        }
    }

    /// Shows update `k` of `n` with `text`.
    pub(crate) fn update(&mut self, k: usize, n: usize, text: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let line = format!("{k}/{n} {text}");
            let pad = self.width.saturating_sub(line.len());
            self.width = line.len();
            let _ = write!(err, "\r{line}{}", " ".repeat(pad));
            let _ = err.flush();
        } else if k.is_multiple_of(self.every) || k == n {
            let _ = writeln!(err, "{k}/{n} {text}");
        }
    }

    /// Ends the line (on a terminal).
    pub(crate) fn finish(&mut self) {
        if self.tty && self.width > 0 {
            let _ = writeln!(std::io::stderr());
        }
        self.width = 0;
    }
}

/// The machine, for the record: CPU model, cores, kernel and load average.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, Linux {kernel}, load {}", load())
}

/// The 1-, 5- and 15-minute load averages.
pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Arguments after `--`, minus the `--bench` flag cargo adds for `harness = false`.
pub(crate) fn args() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect()
}

/// Writes `text` to `<out dir>/name` and says where.
pub(crate) fn save(name: &str, text: &str) -> PathBuf {
    let path = out_dir().join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}
