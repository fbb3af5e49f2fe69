//! Runs a local group of tenure workers (5 by default) and shows who leads, live.
//!
//! ```text
//! cargo run --release --example local_group                       # until Ctrl-C
//! cargo run --release --example local_group -- --chaos kill --duration 60 --events /tmp/ev.jsonl
//! cargo run --release --example local_group -- --elections 16 --chaos kill --duration 60
//! ```
//!
//! With `--elections N` every worker also runs the named elections `shard-0` …
//! `shard-<N-1>`; the live view shows how many each worker leads and the last failover of
//! each name, and the summary judges each election by itself (with `--ledger`, each shard
//! of the ledger is settled by its election's leader under its own fence).
//!
//! Every worker also opens an admin endpoint; the command line for driving the running
//! group with `cargo run --bin tenure-ctl` (certificates folder and admin addresses; with
//! `--release` when this program was built so) is printed at start and shown in the live
//! view.
//!
//! The workers are `tenure-worker` processes, the crate's worker binary: cargo does not
//! build a package's binaries for an example, so this program builds it beside itself
//! (`cargo build [--release] --bin tenure-worker`, a no-op when it is fresh) before it
//! starts the group.
//!
//! Certificates and data directories live in a temporary folder that is removed at exit.
//! Children are tracked by PID and stopped on exit (SIGTERM, then SIGKILL); nothing is
//! ever killed by name.

use tenure_harness::kit;
use tenure_harness::kit::judge;
use tenure_harness::ledger;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser};
use kit::children::Children;
use kit::command::WorkerCommand;
use kit::event::Event;
use serde_json::json;
use tenure::clock::monotonic_ns;
use tokio::sync::mpsc;

/// Runs a local group of tenure workers and shows who leads, live.
///
/// Spawns N tenure workers (default 5) on 127.0.0.1 with their certificates and data in
/// a temporary folder, and shows a live status view. Each worker opens an admin endpoint;
/// the `cargo run --bin tenure-ctl -- ...` command line to drive the group from another
/// terminal is printed at start. Ctrl-C (or --duration) stops them all and removes the
/// folder.
#[derive(Debug, Parser)]
#[command(
    name = "local_group",
    bin_name = "local_group",
    after_help = "Exit codes: 0 done, every check passed; 1 the group could not be started; \
                  2 bad arguments; 3 a check failed (leases, or the ledger's exactly-once).",
    // As before clap: a flag given twice takes its last value.
    args_override_self = true
)]
struct Options {
    /// Group size
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=9))]
    nodes: u64,

    /// Also start N workers (ids after the group's) that wait to join (--join)
    ///
    /// Add them with `ctl members add ID ADDR`, then `members promote ID`.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=4))]
    spares: u64,

    /// Stop by itself after SECS seconds
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    duration: Option<Duration>,

    /// What to do to the leader, again and again
    #[arg(long, value_name = "MODE", default_value = "none")]
    chaos: Chaos,

    /// Append every worker event and every chaos event (JSON lines) to FILE
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,

    /// The workers' timing preset
    #[arg(long, value_name = "PRESET", default_value = "lan")]
    timing: TimingPreset,

    /// Raft ports P, P+1, ...; admin ports P+100, P+101, ... (default: free ports)
    #[arg(long, value_name = "P")]
    base_port: Option<u16>,

    /// Create an SQLite ledger at FILE (or use the PostgreSQL database at
    /// postgres://USER@HOST/DB, which the workers must reach), seed payments to settle,
    /// and have the leader settle them with fenced, idempotent writes; the summary checks
    /// that every seeded batch was settled exactly once
    #[arg(long, value_name = "FILE|URL")]
    ledger: Option<String>,

    /// Run N named elections, shard-0 ... shard-N-1, on every worker beside the group's
    /// own; with --ledger each settles its own shard (batch B: shard-(B mod N)) under its
    /// own fence, and the summary checks every shard and every election by itself
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=65_536))]
    elections: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, clap::ValueEnum)]
enum Chaos {
    /// No faults
    None,
    /// SIGKILL the leader every few seconds, restart it a little later
    Kill,
    /// SIGSTOP the leader, SIGCONT it a few seconds later
    Pause,
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs.is_finite() => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("local_group: cannot start the tokio runtime: {e}");
            std::process::exit(1)
        });
    // Help goes to stdout with exit code 0; a usage error to stderr with exit code 2.
    let opts = Options::parse();
    if opts.nodes + opts.spares > 9 {
        Options::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--nodes {} and --spares {}: at most 9 workers in all",
                    opts.nodes, opts.spares
                ),
            )
            .exit()
    }
    // The workers are `tenure-worker`, the crate's binary: cargo builds it for tests but
    // not for examples, so this builds it (a no-op when it is fresh).
    let worker = match kit::binary::try_worker() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("local_group: cannot build the worker: {e}");
            std::process::exit(1)
        }
    };
    let code = rt.block_on(run(opts, worker));
    std::process::exit(code);
}

/// `--timing`: the workers' timing presets, passed on as the worker's own `--timing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TimingPreset {
    /// 10 ms ticks, elections 200-300 ms
    Lan,
    /// 2 ms ticks, elections 12-24 ms
    Fast,
    /// 50 ms ticks, elections 1-2 s
    Wan,
}

impl TimingPreset {
    /// The preset's name on the worker's command line.
    fn name(self) -> &'static str {
        match self {
            TimingPreset::Lan => "lan",
            TimingPreset::Fast => "fast",
            TimingPreset::Wan => "wan",
        }
    }
}

/// What the status view knows of one worker.
#[derive(Default, Clone)]
struct WorkerView {
    pid: Option<u32>,
    alive: bool,
    paused: bool,
    role: String,
    term: u64,
    leader: Option<u64>,
    leased: Option<u64>,
    /// The named elections whose lease it holds, with their tokens.
    named: BTreeMap<String, u64>,
    confirms: u64,
    last_event: String,
}

/// The named elections as the live view follows them.
#[derive(Default)]
struct Named {
    /// Per name: the last failover (ms, when, to which node, its token).
    last_failover: BTreeMap<String, (f64, Instant, u64, u64)>,
    /// Names whose leader a chaos event hit, waiting for a new holder: (victim, when on
    /// the monotonic clock, the victim's token).
    pending: BTreeMap<String, (u64, u64, u64)>,
    /// Fewest and most leaderships a live worker held, sampled at each redraw once every
    /// election had a holder: (elapsed s, min, max).
    spread: Vec<(f64, usize, usize)>,
    /// How many named elections the workers run (0: none).
    total: usize,
    /// Fewest and most leaderships per worker just before each chaos kill or pause, every
    /// worker up: the spread "between kills".
    before_chaos: Vec<(usize, usize)>,
}

/// A line a worker printed.
enum Line {
    /// On stdout: an event.
    Out(String),
    /// On stderr.
    Err(String),
}

struct Group {
    dir: tempfile::TempDir,
    /// Every worker's command line but for its id, addresses, peers, data folder and
    /// whether it founds or joins: `tenure-worker`, the certificates,
    /// timing, log level and ledger.
    template: WorkerCommand,
    addrs: BTreeMap<u64, String>,
    /// Workers started with `--join` (their `--peers`: the founders and themselves).
    spares: Vec<u64>,
    /// Each worker's admin endpoint (`--admin`), for `cargo run --bin tenure-ctl`.
    admin_addrs: BTreeMap<u64, String>,
    /// The running workers (killed when the group is dropped).
    children: Children,
    ledger: Option<String>,
    tx: mpsc::UnboundedSender<(u64, Line)>,
    /// The group the first workers found (`--found` on every start, also after a chaos
    /// kill: once the group exists it only checks the stored id).
    group_id: String,
}

impl Group {
    fn spawn(&mut self, id: u64) -> std::io::Result<u32> {
        let spare = self.spares.contains(&id);
        // The founders' list; a spare also names itself.
        let peers = self
            .addrs
            .iter()
            .filter(|(p, _)| !self.spares.contains(p) || (spare && **p == id));
        let cmd = self
            .template
            .clone()
            .id(id)
            .listen(&self.addrs[&id])
            .admin(&self.admin_addrs[&id])
            .peers(peers)
            .data_dir(self.dir.path().join(format!("data-{id}")));
        let cmd = if spare {
            cmd.join()
        } else {
            cmd.found(&self.group_id)
        };
        let mut child = cmd
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let pid = child.id();
        if let Some(out) = child.stdout.take() {
            forward(out, id, self.tx.clone(), Line::Out);
        }
        if let Some(err) = child.stderr.take() {
            forward(err, id, self.tx.clone(), Line::Err);
        }
        self.children.insert(id, child);
        Ok(pid)
    }

    fn signal(&self, id: u64, sig: i32) -> bool {
        self.children.signal(id, sig)
    }

    /// Stops every worker (SIGCONT, SIGTERM; SIGKILL after 3 s).
    fn stop_all(&mut self) {
        tokio::task::block_in_place(|| self.children.stop_all(Duration::from_secs(3)));
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Before the temporary folder (a field) goes.
        self.children.kill_all();
    }
}

/// Sends each line a worker writes to `pipe` on, as `line`, from a thread of its own.
fn forward(
    pipe: impl std::io::Read + Send + 'static,
    id: u64,
    tx: mpsc::UnboundedSender<(u64, Line)>,
    line: fn(String) -> Line,
) {
    std::thread::spawn(move || {
        for l in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send((id, line(l))).is_err() {
                break;
            }
        }
    });
}

/// `n` raft ports, then `n` admin ports.
fn free_ports(n: u64, base: Option<u16>) -> std::io::Result<Vec<u16>> {
    if let Some(b) = base {
        let raft = (0..n).map(|i| b.checked_add(i as u16));
        let admin = (0..n).map(|i| b.checked_add(100 + i as u16));
        return raft
            .chain(admin)
            .collect::<Option<Vec<u16>>>()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("--base-port {b}: the admin ports (+100) pass 65535"),
                )
            });
    }
    let n = 2 * n;
    let socks: Vec<std::net::UdpSocket> = (0..n)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    socks
        .iter()
        .map(|s| s.local_addr().map(|a| a.port()))
        .collect()
}

struct EventLog {
    file: Option<std::fs::File>,
    all: Vec<Event>,
}

impl EventLog {
    /// Appends `line` to the events file and, if it is an event, to the history; the
    /// event.
    fn record(&mut self, line: &str) -> Option<Event> {
        if let Some(f) = &mut self.file {
            let _ = writeln!(f, "{line}");
        }
        let e = Event::parse(line)?;
        self.all.push(e.clone());
        Some(e)
    }
    fn chaos(&mut self, event: &str, node: u64, term: u64) -> u64 {
        let now = monotonic_ns();
        let line = json!({"event": event, "node": node, "mono_ns": now, "term": term}).to_string();
        self.record(&line);
        now
    }
}

async fn run(o: Options, worker: PathBuf) -> i32 {
    let dir = match tempfile::Builder::new()
        .prefix("tenure-local-group-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("local_group: cannot create a temporary folder: {e}");
            return 1;
        }
    };
    // The group's founders, then the spares that wait to join.
    let ids: Vec<u64> = (1..=o.nodes + o.spares).collect();
    let spares: Vec<u64> = ids[o.nodes as usize..].to_vec();
    if let Err(e) =
        tenure::transport::tls::write_cluster_certs(dir.path().join("certs"), ids.iter().copied())
    {
        eprintln!("local_group: cannot write certificates: {e}");
        return 1;
    }
    let ports = match free_ports(ids.len() as u64, o.base_port) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("local_group: cannot find free UDP ports: {e}");
            return 1;
        }
    };
    let addrs: BTreeMap<u64, String> = ids
        .iter()
        .zip(&ports)
        .map(|(id, p)| (*id, format!("127.0.0.1:{p}")))
        .collect();
    let admin_addrs: BTreeMap<u64, String> = ids
        .iter()
        .zip(&ports[ids.len()..])
        .map(|(id, p)| (*id, format!("127.0.0.1:{p}")))
        .collect();
    // The profile this program was built with: a release group's ctl builds in seconds
    // from what its build left, a debug ctl would build RocksDB again.
    let profile = if cfg!(debug_assertions) {
        ""
    } else {
        "--release "
    };
    let ctl = format!(
        "cargo run {profile}--bin tenure-ctl -- --certs {} --addr {} status",
        dir.path().join("certs").display(),
        admin_addrs.values().cloned().collect::<Vec<_>>().join(",")
    );
    let mut template = WorkerCommand::new(worker)
        .certs(dir.path().join("certs"))
        .timing(o.timing.name())
        .log_level("off");
    if let Some(l) = &o.ledger {
        template = template.ledger(l);
    }
    if o.elections > 0 {
        // Each led election confirms its lease every 100 ms, or once per 1 ms × the
        // number of elections when that is longer: a confirm is an event this process
        // reads, and 10,000 elections at 100 ms would be 100,000 a second.
        let every = o.elections.max(100);
        template = template
            .elections(o.elections)
            .args(["--named-confirm-ms".to_string(), every.to_string()]);
    }
    let events_file = match &o.events {
        Some(p) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("local_group: cannot open --events {}: {e}", p.display());
                return 1;
            }
        },
        None => None,
    };
    let ledger = match &o.ledger {
        Some(path) => {
            let opened = ledger::LedgerAt::parse(path)
                .and_then(|at| at.with_password(None))
                .and_then(|at| ledger::Ledger::open_at(&at, 0))
                .and_then(|mut l| l.seed(20, 5).map(|_| l));
            match opened {
                Ok(l) => Some(std::sync::Arc::new(std::sync::Mutex::new(l))),
                Err(e) => {
                    eprintln!("local_group: --ledger: {e}");
                    return 1;
                }
            }
        }
        None => None,
    };
    // SQLite calls block (a paused worker may hold the file lock): keep them off this loop.
    let ledger_call = |f: Box<dyn FnOnce(&mut ledger::Ledger) + Send>| {
        if let Some(l) = ledger.clone() {
            tokio::task::spawn_blocking(move || {
                f(&mut l.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
            });
        }
    };
    let seeding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut group = Group {
        dir,
        template,
        addrs,
        admin_addrs,
        spares: spares.clone(),
        children: Children::new(),
        ledger: o.ledger.clone(),
        tx,
        group_id: tenure::GroupId::random().to_string(),
    };
    let mut views: BTreeMap<u64, WorkerView> = BTreeMap::new();
    for id in &ids {
        match group.spawn(*id) {
            Ok(pid) => {
                views.insert(
                    *id,
                    WorkerView {
                        pid: Some(pid),
                        alive: true,
                        role: "starting".into(),
                        ..Default::default()
                    },
                );
            }
            Err(e) => {
                eprintln!("local_group: cannot start worker {id}: {e}");
                group.stop_all();
                return 1;
            }
        }
    }
    let tty = std::io::stdout().is_terminal();
    let mut log = EventLog {
        file: events_file,
        all: Vec::new(),
    };
    let started = Instant::now();
    let deadline = o.duration.map(|d| started + d);
    let mut redraw = tokio::time::interval(Duration::from_millis(if tty { 250 } else { 5000 }));
    let mut chaos_tick = tokio::time::interval(Duration::from_millis(100));
    let mut chaos = ChaosState::Steady {
        since: Instant::now(),
    };
    let mut last_failover: Option<(f64, Instant)> = None;
    let mut notes: Vec<String> = Vec::new();
    let mut seed_tick = tokio::time::interval(Duration::from_millis(500));
    let mut stats = SettleStats::default();
    let mut named = Named {
        total: o.elections as usize,
        ..Named::default()
    };
    println!(
        "tenure local group: {} workers in {} (chaos: {:?}); Ctrl-C stops",
        o.nodes,
        group.dir.path().display(),
        o.chaos
    );
    println!("drive it from another terminal (history, transfer, drain, members ...):\n  {ctl}");
    for id in &spares {
        println!(
            "node {id} waits to join at {}: ... members add {id} {}, then ... members promote {id}",
            group.addrs[id], group.addrs[id]
        );
    }
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut ctrl_c => break,
            _ = until_deadline => break,
            Some((id, line)) = rx.recv() => {
                let line = match line {
                    Line::Err(s) => {
                        notes.push(format!("worker {id}: {s}"));
                        continue;
                    }
                    Line::Out(line) => line,
                };
                let Some(e) = log.record(&line) else { continue };
                let view = views.entry(id).or_default();
                let ev = e.event.clone();
                let term = e.term();
                if let Some(name) = e.election() {
                    match ev.as_str() {
                        "lease_acquired" => {
                            view.named.insert(name.to_string(), term.unwrap_or(0));
                            if let Some((victim, at_ns, _)) = named.pending.get(name).copied() {
                                if id != victim {
                                    named.pending.remove(name);
                                    let ms = e.mono_ns.saturating_sub(at_ns) as f64 / 1e6;
                                    named.last_failover.insert(name.to_string(), (ms, Instant::now(), id, term.unwrap_or(0)));
                                }
                            }
                        }
                        "lease_lost" if view.named.get(name).copied() == term => {
                            view.named.remove(name);
                        }
                        "lease_confirmed" => view.confirms += 1,
                        "batch_started" => stats.batch_started = Some((id, Instant::now())),
                        "settled" => stats.settled += 1,
                        "fence_rejected" => stats.rejected += 1,
                        _ => {}
                    }
                    if ev != "lease_confirmed" && ev != "history" && ev != "leader_changed" {
                        view.last_event = format!("{ev} {name}");
                    }
                    continue;
                }
                match ev.as_str() {
                    "started" => { view.alive = true; view.role = "follower".into(); }
                    "leader_changed" => {
                        view.term = term.unwrap_or(view.term);
                        view.leader = e.u64("leader");
                        view.role = e.str("role").unwrap_or("?").to_string();
                    }
                    "lease_acquired" => {
                        view.leased = term;
                        if let ChaosState::Waiting { victim, at_ns, .. } = &chaos {
                            if id != *victim {
                                let ms = e.mono_ns.saturating_sub(*at_ns) as f64 / 1e6;
                                last_failover = Some((ms, Instant::now()));
                                if !tty {
                                    println!("[{:>6.1}s] failover: node {} leads term {} after {:.1} ms", started.elapsed().as_secs_f64(), id, term.unwrap_or(0), ms);
                                }
                                chaos = chaos.on_new_leader();
                            }
                        }
                    }
                    "lease_confirmed" => view.confirms += 1,
                    "batch_started" => stats.batch_started = Some((id, Instant::now())),
                    "settled" => stats.settled += 1,
                    "fence_rejected" => {
                        stats.rejected += 1;
                        if !tty {
                            println!("[{:>6.1}s] fence_rejected: node {id} token {} < highest {}", started.elapsed().as_secs_f64(), term.unwrap_or(0), e.u64("highest").unwrap_or(0));
                        }
                    }
                    "lease_lost" => view.leased = None,
                    "stopped" => { view.alive = false; view.role = "stopped".into(); view.leased = None; view.named.clear(); }
                    _ => {}
                }
                view.last_event = ev;
            }
            _ = chaos_tick.tick(), if o.chaos != Chaos::None => {
                chaos = step_chaos(chaos, o.chaos, &mut group, &mut views, &mut log, Out { tty, started }, &stats, &mut named);
            }
            _ = seed_tick.tick(), if ledger.is_some() => {
                // Keep work flowing, but stop seeding near the end so it can all settle.
                let near_end = deadline.is_some_and(|d| Instant::now() + Duration::from_secs(5) > d);
                if !near_end && !seeding.swap(true, std::sync::atomic::Ordering::AcqRel) {
                    let flag = seeding.clone();
                    ledger_call(Box::new(move |l| {
                        if let Err(e) = l.seed(1, 5) {
                            eprintln!("local_group: seeding skipped: {e}");
                        }
                        flag.store(false, std::sync::atomic::Ordering::Release);
                    }));
                }
            }
            _ = redraw.tick() => {
                sample_spread(&views, &o, started, &mut named);
                render(&views, &o, started, last_failover, tty, &stats, &ctl, &named);
            }
        }
    }
    // Let the group finish the seeded work (bounded), then shut down: resume paused
    // workers, stop everyone, and drain their last events.
    let shards = o.elections;
    if let Some(l) = &ledger {
        let l = l.clone();
        let verify = move || {
            let l = l.clone();
            async move {
                tokio::task::spawn_blocking(move || {
                    l.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .verify_shards(shards)
                })
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
            }
        };
        let ids: Vec<u64> = views
            .iter()
            .filter(|(_, v)| v.paused)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            group.signal(id, libc::SIGCONT);
        }
        let until = Instant::now() + Duration::from_secs(20);
        println!("waiting for the seeded work to be settled …");
        while Instant::now() < until {
            if let Ok(r) = verify().await {
                if r.settled_batches >= r.seeded_batches {
                    break;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                Some((_, Line::Out(line))) = rx.recv() => {
                    log.record(&line);
                }
            }
        }
    }
    group.stop_all();
    let drain_until = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Some((_, line))) = tokio::time::timeout_at(drain_until, rx.recv()).await {
        if let Line::Out(line) = line {
            log.record(&line);
        }
    }
    let report = judge::check(&log.all);
    println!();
    println!("== summary ==");
    println!(
        "workers: {}, terms with a lease: {}",
        o.nodes, report.terms_with_leases
    );
    if !report.failovers.is_empty() {
        let ms: Vec<f64> = report.failovers.iter().map(|f| f.millis).collect();
        if let Some((min, med, max)) = judge::summary(&ms) {
            println!(
                "failovers: {} (min {:.1} ms, median {:.1} ms, max {:.1} ms)",
                ms.len(),
                min,
                med,
                max
            );
        }
    } else if o.chaos != Chaos::None {
        println!("failovers: 0");
    }
    if o.elections > 0 {
        print_elections(&report, &named, &o);
    }
    // Worker stderr: show panics and errors in full, at most a few lines otherwise.
    let important: Vec<&String> = notes
        .iter()
        .filter(|n| n.contains("panicked") || n.contains("error") || n.contains("cannot"))
        .collect();
    for n in important.iter().take(20) {
        println!("{n}");
    }
    if important.is_empty() {
        for n in notes.iter().rev().take(3).rev() {
            println!("{n}");
        }
    }
    let mut ok = report.violations.is_empty();
    if let Some(l) = &ledger {
        let verified = l
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .verify_shards(o.elections);
        match verified {
            Ok(r) => {
                let rejected = log
                    .all
                    .iter()
                    .filter(|e| e.event == "fence_rejected")
                    .count();
                println!(
                    "ledger: {} of {} seeded batches settled, {} of {} payments; {} accepted writes, highest token {}",
                    r.settled_batches, r.seeded_batches, r.settled_payments, r.payments, r.writes, r.highest_token
                );
                println!("fence rejections: {rejected}");
                if r.exactly_once() {
                    println!("exactly once: OK (every seeded batch settled once, no payment settled twice)");
                } else {
                    ok = false;
                    println!("exactly once: FAILED");
                    for d in r.duplicates.iter().chain(&r.misplaced) {
                        println!("  duplicate or misplaced: {d}");
                    }
                }
                if o.elections > 0 {
                    ok &= print_shards(&r, &report, o.elections);
                }
                if r.token_regressions.is_empty() {
                    println!("token order: OK (no accepted write below an earlier accepted token of its fence)");
                } else {
                    ok = false;
                    for t in &r.token_regressions {
                        println!("  VIOLATION: {t}");
                    }
                }
            }
            Err(e) => {
                ok = false;
                println!("ledger: cannot verify: {e}");
            }
        }
    }
    let dir_path: PathBuf = group.dir.path().to_path_buf();
    drop(group);
    if Path::new(&dir_path).exists() {
        println!("warning: could not remove {}", dir_path.display());
    }
    if report.violations.is_empty() {
        println!("leases: OK (the history checker: one lease holder per term, no lease began before another node's ended, no confirm after a majority moved on, applied histories agree){}",
            if o.elections > 0 { format!("; judged per election: the root and {} named", report.elections.len()) } else { String::new() });
    } else {
        for v in &report.violations {
            println!("VIOLATION: {v}");
        }
    }
    if ok {
        0
    } else {
        3
    }
}

#[derive(Default)]
struct SettleStats {
    settled: u64,
    rejected: u64,
    batch_started: Option<(u64, Instant)>,
}

/// How and since when the status is printed.
#[derive(Clone, Copy)]
struct Out {
    tty: bool,
    started: Instant,
}

enum ChaosState {
    /// The group runs; next fault after a pause.
    Steady { since: Instant },
    /// A fault was injected; waiting for a new leader's lease.
    Waiting {
        victim: u64,
        at_ns: u64,
        since: Instant,
    },
    /// A new leader exists; the victim comes back at `resume_at`.
    Recovering { victim: u64, resume_at: Instant },
}

impl ChaosState {
    fn on_new_leader(self) -> ChaosState {
        match self {
            ChaosState::Waiting { victim, .. } => ChaosState::Recovering {
                victim,
                resume_at: Instant::now() + Duration::from_millis(1200),
            },
            s => s,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn step_chaos(
    state: ChaosState,
    mode: Chaos,
    group: &mut Group,
    views: &mut BTreeMap<u64, WorkerView>,
    log: &mut EventLog,
    out: Out,
    stats: &SettleStats,
    named: &mut Named,
) -> ChaosState {
    let Out { tty, started } = out;
    match state {
        ChaosState::Steady { since } => {
            if since.elapsed() < Duration::from_millis(2000) {
                return ChaosState::Steady { since };
            }
            // With a ledger, pause the leader mid-batch: just after it started one.
            if mode == Chaos::Pause && group.ledger.is_some() {
                let mid_batch = stats
                    .batch_started
                    .is_some_and(|(_, at)| at.elapsed() < Duration::from_millis(40));
                if !mid_batch && since.elapsed() < Duration::from_secs(6) {
                    return ChaosState::Steady { since };
                }
            }
            let leader = views
                .iter()
                .find(|(_, v)| v.alive && !v.paused && v.leased.is_some())
                .map(|(id, v)| (*id, v.leased.unwrap_or(0)));
            let all_up = views.values().all(|v| v.alive && !v.paused);
            let Some((victim, term)) = leader.filter(|_| all_up) else {
                return ChaosState::Steady { since };
            };
            if named.total > 0 {
                // With named elections, strike once the leaderships spread evenly again
                // (the balancer's work after the last return), or after 10 s regardless.
                let counts: Vec<usize> = views.values().map(|v| v.named.len()).collect();
                let (n, k) = (named.total, counts.len().max(1));
                let even = counts.iter().sum::<usize>() == n
                    && counts.iter().all(|c| *c == n / k || *c == n.div_ceil(k));
                if !even && since.elapsed() < Duration::from_secs(10) {
                    return ChaosState::Steady { since };
                }
                let lo = counts.iter().copied().min().unwrap_or(0);
                let hi = counts.iter().copied().max().unwrap_or(0);
                named.before_chaos.push((lo, hi));
            }
            let (event, sig) = match mode {
                Chaos::Kill => ("chaos_kill", libc::SIGKILL),
                _ => ("chaos_pause", libc::SIGSTOP),
            };
            let at_ns = log.chaos(event, victim, term);
            if !group.signal(victim, sig) {
                return ChaosState::Steady {
                    since: Instant::now(),
                };
            }
            if !tty {
                println!(
                    "[{:>6.1}s] {event}: node {victim} (term {term})",
                    started.elapsed().as_secs_f64()
                );
            }
            if let Some(v) = views.get_mut(&victim) {
                // Each named election the victim led fails over by itself.
                for (name, token) in std::mem::take(&mut v.named) {
                    named.pending.insert(name, (victim, at_ns, token));
                }
                v.leased = None;
                if mode == Chaos::Kill {
                    v.alive = false;
                    v.role = "killed".into();
                } else {
                    v.paused = true;
                    v.role = "paused".into();
                }
            }
            ChaosState::Waiting {
                victim,
                at_ns,
                since: Instant::now(),
            }
        }
        ChaosState::Waiting {
            victim,
            at_ns,
            since,
        } => {
            if since.elapsed() > Duration::from_secs(15) {
                // No new leader: bring the victim back anyway.
                return ChaosState::Recovering {
                    victim,
                    resume_at: Instant::now(),
                };
            }
            ChaosState::Waiting {
                victim,
                at_ns,
                since,
            }
        }
        ChaosState::Recovering { victim, resume_at } => {
            if Instant::now() < resume_at {
                return ChaosState::Recovering { victim, resume_at };
            }
            match mode {
                Chaos::Kill => {
                    // SIGKILLed already: reap it.
                    group.children.kill(victim);
                    let term = views.get(&victim).map_or(0, |v| v.term);
                    log.chaos("chaos_restart", victim, term);
                    match group.spawn(victim) {
                        Ok(pid) => {
                            let v = views.entry(victim).or_default();
                            v.pid = Some(pid);
                            v.role = "starting".into();
                        }
                        Err(e) => eprintln!("local_group: cannot restart worker {victim}: {e}"),
                    }
                }
                _ => {
                    let term = views.get(&victim).map_or(0, |v| v.term);
                    log.chaos("chaos_resume", victim, term);
                    group.signal(victim, libc::SIGCONT);
                    if let Some(v) = views.get_mut(&victim) {
                        v.paused = false;
                        v.role = "resumed".into();
                    }
                }
            }
            if !tty {
                println!(
                    "[{:>6.1}s] node {victim} back",
                    started.elapsed().as_secs_f64()
                );
            }
            ChaosState::Steady {
                since: Instant::now(),
            }
        }
    }
}

/// A name's sort key with its trailing number as a number: `shard-2` before `shard-10`.
fn natural(name: &str) -> (&str, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = name.split_at(name.len() - digits);
    (head, tail.parse().unwrap_or(0))
}

/// Samples the fewest and most named leaderships a live worker holds, once every
/// election has a holder (before that, the spread says only how far the start got).
fn sample_spread(
    views: &BTreeMap<u64, WorkerView>,
    o: &Options,
    started: Instant,
    named: &mut Named,
) {
    if o.elections == 0 {
        return;
    }
    let live: Vec<usize> = views
        .values()
        .filter(|v| v.alive && !v.paused)
        .map(|v| v.named.len())
        .collect();
    let held: usize = live.iter().sum();
    if held as u64 != o.elections || live.is_empty() {
        return;
    }
    let (min, max) = (
        live.iter().copied().min().unwrap_or(0),
        live.iter().copied().max().unwrap_or(0),
    );
    named
        .spread
        .push((started.elapsed().as_secs_f64(), min, max));
}

/// How many named leaderships each worker holds: `n1 4  n2 3 ...`.
fn leaderships_line(views: &BTreeMap<u64, WorkerView>, total: u64) -> String {
    let per = views
        .iter()
        .map(|(id, v)| {
            if v.alive && !v.paused {
                format!("n{id} {}", v.named.len())
            } else {
                format!("n{id} -")
            }
        })
        .collect::<Vec<_>>()
        .join("  ");
    // Names no running worker holds a lease of: a count, and the first few (never one
    // line per election: there may be thousands).
    let held: std::collections::HashSet<&str> = views
        .values()
        .filter(|v| v.alive && !v.paused)
        .flat_map(|v| v.named.keys().map(String::as_str))
        .collect();
    let missing: Vec<String> = (0..total)
        .map(|k| format!("shard-{k}"))
        .filter(|n| !held.contains(n.as_str()))
        .collect();
    let first: Vec<&str> = missing.iter().take(4).map(String::as_str).collect();
    format!(
        "{per}   without a lease: {}{}",
        missing.len(),
        if first.is_empty() {
            String::new()
        } else {
            format!(
                " ({}{})",
                first.join(", "),
                if missing.len() > first.len() {
                    ", …"
                } else {
                    ""
                }
            )
        }
    )
}

/// The last failover of each name: a grid of `name  ms  →node` cells when there are few
/// names, one line of totals when there are many.
fn failover_table(named: &Named, o: &Options, width: usize) -> String {
    let n = named.last_failover.len();
    let waiting = named.pending.len();
    if n == 0 {
        return format!(
            "named failovers: none yet{}\n",
            if waiting > 0 {
                format!(" ({waiting} waiting for a new leader)")
            } else {
                String::new()
            }
        );
    }
    let ms: Vec<f64> = named.last_failover.values().map(|f| f.0).collect();
    let (min, med, max) = judge::summary(&ms).unwrap_or_default();
    let mut out = format!(
        "named failovers (last per name): {n} of {} names, min {min:.0} ms, median {med:.0} ms, max {max:.0} ms{}\n",
        o.elections,
        if waiting > 0 {
            format!(", {waiting} waiting for a new leader")
        } else {
            String::new()
        }
    );
    if n > 32 {
        return out;
    }
    let mut last: Vec<_> = named.last_failover.iter().collect();
    last.sort_by_key(|(name, _)| natural(name));
    let cells: Vec<String> = last
        .into_iter()
        .map(|(name, (ms, at, to, _))| {
            format!(
                "{name:<9} {ms:>6.0} ms →n{to} {:>3.0}s ago",
                at.elapsed().as_secs_f64()
            )
        })
        .collect();
    for row in cells.chunks(width.max(1)) {
        out.push_str("  ");
        out.push_str(&row.join("   "));
        out.push('\n');
    }
    out
}

/// The summary's lines of the named elections: each election judged by itself.
fn print_elections(report: &judge::Report, named: &Named, o: &Options) {
    let seen = report.elections.len();
    let terms: Vec<usize> = report
        .elections
        .values()
        .map(|r| r.terms_with_leases)
        .collect();
    println!(
        "named elections: {seen} of {} seen; terms with a lease per election: min {}, max {}",
        o.elections,
        terms.iter().min().copied().unwrap_or(0),
        terms.iter().max().copied().unwrap_or(0)
    );
    let fo: Vec<f64> = report
        .elections
        .values()
        .flat_map(|r| r.failovers.iter().map(|f| f.millis))
        .collect();
    if let Some((min, med, max)) = judge::summary(&fo) {
        println!(
            "named failovers: {} (min {min:.1} ms, median {med:.1} ms, max {max:.1} ms)",
            fo.len()
        );
    }
    if seen <= 32 {
        println!(" election   id   terms  failovers  last failover");
        let mut elections: Vec<_> = report.elections.iter().collect();
        elections.sort_by_key(|(name, _)| natural(name));
        for (name, r) in elections {
            let ids: Vec<String> = r.ids.iter().map(u64::to_string).collect();
            println!(
                " {:<9}  {:<3}  {:<5}  {:<9}  {}{}",
                name,
                ids.join(","),
                r.terms_with_leases,
                r.failovers.len(),
                r.failovers.last().map_or_else(
                    || "-".into(),
                    |f| format!("{:.1} ms n{}→n{}", f.millis, f.from_node, f.to_node)
                ),
                if r.violations > 0 {
                    format!("   {} VIOLATIONS", r.violations)
                } else {
                    String::new()
                }
            );
        }
    }
    match (
        named.spread.iter().map(|s| s.1).min(),
        named.spread.iter().map(|s| s.2).max(),
        named.spread.last(),
    ) {
        (Some(lo), Some(hi), Some((at, min, max))) => println!(
            "leaderships per live worker ({} samples with every election led, kills and returns included): fewest {lo}, most {hi}; last sample at {at:.0} s: {min}..{max}",
            named.spread.len()
        ),
        _ => println!("leaderships per live worker: never sampled with every election led"),
    }
    if !named.before_chaos.is_empty() {
        let lo = named.before_chaos.iter().map(|s| s.0).min().unwrap_or(0);
        let hi = named.before_chaos.iter().map(|s| s.1).max().unwrap_or(0);
        let even = named
            .before_chaos
            .iter()
            .filter(|(a, b)| b - a <= 1)
            .count();
        println!(
            "leaderships per worker just before each of {} chaos strikes (every worker up): fewest {lo}, most {hi}; even (⌊N/k⌋ or ⌈N/k⌉) before {even} of them",
            named.before_chaos.len()
        );
    }
}

/// The ledger's checks per shard: every shard's batches settled under its own fence, each
/// fence's tokens of one election (the one the events name for that shard), and no two
/// fences sharing an election. False if one fails.
fn print_shards(r: &ledger::LedgerReport, report: &judge::Report, n: u64) -> bool {
    let mut ok = true;
    let mut by_id: BTreeMap<u64, String> = BTreeMap::new();
    let mut settled = Vec::new();
    for i in 0..n {
        let name = ledger::shard_name(i);
        let Some(f) = r.fences.get(&name) else {
            settled.push(0);
            continue;
        };
        settled.push(f.settled_batches);
        let ids: Vec<u64> = f.election_ids.iter().copied().collect();
        let expected = report.elections.get(&name).map(|e| &e.ids);
        let one_id = ids.len() == 1 && ids[0] > 0;
        let matches = expected.is_none_or(|e| ids.iter().all(|i| e.contains(i)));
        if !one_id || !matches {
            ok = false;
            println!(
                "  VIOLATION: fence {name} accepted tokens of election ids {ids:?} (its election's: {expected:?})"
            );
        }
        for id in ids {
            if let Some(other) = by_id.insert(id, name.clone()) {
                ok = false;
                println!(
                    "  VIOLATION: fences {other} and {name} both accepted tokens of election {id}"
                );
            }
        }
    }
    if let Some(root) = r.fences.get(ledger::FENCE) {
        ok = false;
        println!(
            "  VIOLATION: {} writes under the root's fence while the shards have their own",
            root.writes
        );
    }
    let (lo, hi) = (
        settled.iter().min().copied().unwrap_or(0),
        settled.iter().max().copied().unwrap_or(0),
    );
    println!(
        "shards: {n}, batches settled per shard: min {lo}, max {hi}; {}",
        if ok {
            "every shard under its own fence, each fence's tokens of its own election only: OK"
        } else {
            "FAILED"
        }
    );
    ok
}

#[allow(clippy::too_many_arguments)]
fn render(
    views: &BTreeMap<u64, WorkerView>,
    o: &Options,
    started: Instant,
    last_failover: Option<(f64, Instant)>,
    tty: bool,
    stats: &SettleStats,
    ctl: &str,
    named: &Named,
) {
    let settle = if o.ledger.is_some() {
        format!(
            "   settled batches: {}   fence rejections: {}",
            stats.settled, stats.rejected
        )
    } else {
        String::new()
    };
    let leader = views
        .iter()
        .find(|(_, v)| v.leased.is_some() && v.alive && !v.paused);
    let elapsed = started.elapsed().as_secs();
    let head = match leader {
        Some((id, v)) => format!(
            "leader: node {id}   term {}   lease token {}",
            v.term,
            v.leased.unwrap_or(0)
        ),
        None => "leader: none confirmed".to_string(),
    };
    let fo = match last_failover {
        Some((ms, at)) => format!(
            "last failover: {ms:.1} ms, {:.0} s ago",
            at.elapsed().as_secs_f64()
        ),
        None => "last failover: none yet".into(),
    };
    if !tty {
        println!(
            "[{:>6.1}s] {head}   {fo}{settle}",
            started.elapsed().as_secs_f64()
        );
        if o.elections > 0 {
            println!(
                "         named leaderships: {}",
                leaderships_line(views, o.elections)
            );
            print!("         {}", failover_table(named, o, 4));
        }
        return;
    }
    let mut out = String::new();
    out.push_str("\x1b[H\x1b[2J");
    out.push_str(&format!(
        "tenure local group: {} workers, {:02}:{:02} elapsed, chaos: {:?}   (Ctrl-C to stop)\n\n",
        o.nodes,
        elapsed / 60,
        elapsed % 60,
        o.chaos
    ));
    out.push_str(&format!("operator: {ctl}\n\n"));
    out.push_str(&format!("{head}\n{fo}{settle}\n\n"));
    out.push_str(
        " node  pid      state          term  leader  lease   leads  confirms  last event\n",
    );
    for (id, v) in views {
        out.push_str(&format!(
            " {:<4}  {:<7}  {:<13}  {:<4}  {:<6}  {:<6}  {:<5}  {:<8}  {}\n",
            id,
            v.pid.map_or_else(|| "-".into(), |p| p.to_string()),
            v.role,
            v.term,
            v.leader.map_or_else(|| "-".into(), |l| l.to_string()),
            v.leased.map_or_else(|| "-".into(), |t| t.to_string()),
            v.named.len(),
            v.confirms,
            v.last_event
        ));
    }
    if o.elections > 0 {
        out.push('\n');
        out.push_str(&format!(
            "named leaderships: {}\n",
            leaderships_line(views, o.elections)
        ));
        out.push_str(&failover_table(named, o, 3));
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
}
