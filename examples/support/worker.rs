//! The worker: a process that embeds tenure and prints one JSON event per line.
//!
//! Shared by `examples/worker.rs` (the worker binary) and `examples/local_group.rs`
//! (which runs copies of itself in worker mode).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant as StdInstant};

use clap::Parser;
use serde_json::{json, Value};
use tenure::clock::{instant_to_monotonic_ns, monotonic_ns};
use tenure::error::StopCause;
use tenure::fence::FenceError;
use tenure::runner::{LeaderTask, LeaderTaskHandle};
use tenure::{Config, FencingToken, Lease, Node, ReadMode, Role, Timing};

use super::ledger::{shard_name, Ledger};

/// The worker's long help after its flags: founding, exit codes and events.
const AFTER_HELP: &str = "\
Founding, restarting, replacing (README: Founding a group):
  once:             GROUP=$(worker --new-group-id)
  every start of each first member, the same command each time (a unit file may keep it):
                    worker --id I --peers 1=A1,2=A2,3=A3 ... --found $GROUP
  A node founds only when its data folder is empty and every first member has said hello
  and is founding too (or is pristine); once the group exists --found only checks the
  stored group id. A node whose folder was lost does not come back as a voter: it stops
  with exit code 3, whatever its command line.
  replacement machine: a new id, its own certificate, an empty folder:
                    worker --id 6 --peers 6=A6,1=A1,2=A2,3=A3 ... --join
                    ctl members add 6 A6; ctl members replace OLD 6

Exit codes: 0 stopped on request; 1 failed (see stderr and the start_failed or stopped
event, whose `cause` names it); 2 bad arguments; 3 the data folder was refused (empty
where a store must be, another node's or group's, not a whole store, or this node lost
data the group counted on): restarting with the same folder will not help; 4 a write to
the data folder failed (a failed fsync, a full disk): the node stopped for good, never
retrying it, and a restart recovers from what the disk holds once the disk is checked.

Prints one JSON object per line on stdout: started, leader_changed, membership (this
node became founding, joining, learner, removed or a voter), lease_acquired, lease_confirmed,
lease_lost, stopped, history (the applied leadership history as [[term, leader], ...],
when it changed), disk_stalled (a synced write took longer than --disk-stall-ms: the node
leads nothing until probe writes are fast), disk_recovered; with --ledger also batch_started, settled,
fence_rejected. Each election event carries \"election\": null for the group's own
election, or the name of a named election (--elections N runs shard-0 ... shard-N-1, whose
leader_changed, lease_*, history and settlement events name them). SIGTERM or SIGINT stops it gracefully (handing leadership over first
when it leads). SIGUSR1 cuts it off from every peer (a partition drill through the
transport's fault hooks, no root needed) and SIGUSR2 heals it. SIGHUP reloads the TLS files
of --certs at once (tls_reloaded, tls_unchanged or tls_reload_failed with the error: the
certificate in use stays); the worker also looks at them every 5 s by itself.";

// The worker's command line (`examples/worker.rs`, and `local_group __worker`). Every
// flag, value, default and exit code is what the hand-written parser before it took:
// other tools script against them. The test kit's `WorkerCommand`
// (tests/support/kit/command.rs) builds this command line.
/// A tenure worker: elects a leader with its peers and prints its events as JSON lines.
#[derive(Debug, Parser)]
#[command(
    name = "worker",
    bin_name = "worker",
    override_usage = "worker --id N --listen ADDR --peers 1=ADDR,2=ADDR,... --data-dir DIR --certs DIR\n              \
                      (--found GROUP | --join | an existing store) [OPTIONS]\n       \
                      worker --new-group-id",
    after_help = AFTER_HELP,
    // As before clap: a flag given twice takes its last value.
    args_override_self = true
)]
pub(crate) struct WorkerCli {
    /// This node's id
    #[arg(long, value_name = "N", required_unless_present = "new_group_id")]
    id: Option<u64>,

    /// The UDP address to bind (default: this node's address in --peers; for a name,
    /// 0.0.0.0 on its port)
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    listen: Option<SocketAddr>,

    /// Every first member (or, with --join, this node and the members to reach) as
    /// ID=HOST:PORT, comma-separated; HOST an IP address (IPv6 in brackets) or a DNS
    /// name, resolved again on every reconnect
    #[arg(long, value_name = "1=ADDR,2=ADDR,...", required_unless_present = "new_group_id",
          value_parser = parse_peers)]
    peers: Option<String>,

    /// This node's data folder (its RocksDB store)
    #[arg(long, value_name = "DIR", required_unless_present = "new_group_id")]
    data_dir: Option<PathBuf>,

    /// This node's folder: ca.pem, node-N.pem, node-N-key.pem (mode 0600)
    ///
    /// `cargo run --example certs -- --nodes 3 --out C --per-node` writes one per node
    /// (C/node-N) and keeps the CA key apart in C/ca: do not copy ca-key.pem to a worker
    /// (it mints node ids). A key file others can read is logged.
    #[arg(long, value_name = "DIR", required_unless_present = "new_group_id")]
    certs: Option<PathBuf>,

    /// Found group GROUP (32 hex digits) with --peers as its first voters, if --data-dir
    /// holds no store; safe to keep
    #[arg(long, value_name = "GROUP")]
    found: Option<tenure::GroupId>,

    /// Refuse a data folder or peers of another group (default: the --found group)
    #[arg(long, value_name = "GROUP")]
    group: Option<tenure::GroupId>,

    /// Join an existing group: start with no membership and wait for a member to add
    /// this node (ctl members add); --peers lists this node and the members to reach
    #[arg(long)]
    join: bool,

    /// With --found: found the group's election at term N or above, so that its tokens
    /// stay above what resources remember (disaster recovery); every first member the same
    #[arg(long, value_name = "N", default_value = "0")]
    term_floor: u64,

    /// Found the group again after every member lost its data, from a restore plan (ctl
    /// restore-plan --backup BACKUP --out FILE): the plan's new group (no --found needed),
    /// the backup's drains, history and elections, every election above its recorded
    /// term; every first member the same plan
    #[arg(long, value_name = "FILE")]
    restore: Option<PathBuf>,

    /// Timing preset
    #[arg(long, value_name = "PRESET", default_value = "lan")]
    timing: TimingPreset,

    /// Explicit tick length in ms (overrides the preset's)
    #[arg(long, value_name = "N")]
    tick_ms: Option<u64>,

    /// Explicit heartbeat interval in ms (overrides the preset's)
    #[arg(long, value_name = "N")]
    heartbeat_ms: Option<u64>,

    /// Explicit election timeout in ms (overrides the preset's)
    #[arg(long, value_name = "N")]
    election_ms: Option<u64>,

    /// Explicit upper bound of the randomized election timeout in ms (overrides the
    /// preset's)
    #[arg(long, value_name = "N")]
    election_max_ms: Option<u64>,

    /// A synced write slower than this many ms is a disk stall: the node hands over what
    /// it leads and campaigns in nothing until probe writes are fast again (default:
    /// half the election timeout, at least 50)
    #[arg(long, value_name = "N")]
    disk_stall_ms: Option<u64>,

    /// How confirms are answered
    #[arg(long, value_name = "MODE", default_value = "safe")]
    read_mode: ReadModeArg,

    /// Confirm the lease every N ms while leading
    #[arg(long, value_name = "N", default_value_t = 100)]
    confirm_ms: u64,

    /// Confirm each named election's lease every N ms while leading (default: as
    /// --confirm-ms; with thousands of elections each confirm is an event on stdout)
    #[arg(long, value_name = "N")]
    named_confirm_ms: Option<u64>,

    /// Benchmark: on the first lease, time N confirms one by one, then N from 64 tasks;
    /// print confirm_stats
    #[arg(long, value_name = "N", default_value_t = 0)]
    bench_confirms: usize,

    /// Benchmark: once FILE exists, every named election leased here confirms back to
    /// back (one caller per name) for --confirm-load-secs, then print
    /// named_confirm_stats (the latencies' percentiles)
    #[arg(long, value_name = "FILE")]
    confirm_load_file: Option<PathBuf>,

    /// How long the --confirm-load-file load runs, in seconds
    #[arg(long, value_name = "N", default_value_t = 10)]
    confirm_load_secs: u64,

    /// Print transport_stats (messages, bytes sent) every N ms
    #[arg(long, value_name = "N")]
    stats_ms: Option<u64>,

    /// tenure's log on stderr
    #[arg(long, value_name = "LEVEL", default_value = "warn")]
    log_level: LogLevel,

    /// Settle pending payments in this SQLite ledger while leading
    #[arg(long, value_name = "PATH")]
    ledger: Option<PathBuf>,

    /// Pause between batches, in ms
    #[arg(long, value_name = "N", default_value_t = 150)]
    settle_ms: u64,

    /// Time one payment takes to settle, in ms
    #[arg(long, value_name = "N", default_value_t = 20)]
    row_ms: u64,

    /// Plus a random 0..=N ms per payment, so a stale writer and a new one overtake each
    /// other
    #[arg(long, value_name = "N", default_value_t = 0)]
    row_jitter_ms: u64,

    /// Run N named elections, shard-0 ... shard-N-1 (created by the group's leader if
    /// missing); with --ledger, batch B belongs to shard-(B mod N), settled by that
    /// election's leader under that election's own fence
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=65_536))]
    elections: u64,

    /// Serve Prometheus metrics on http://ADDR/metrics
    ///
    /// Port 0: any; the bound address is in the `started` event. At most 32 connections,
    /// each closed if it sends no request in 5 s.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    metrics: Option<SocketAddr>,

    /// Open the admin endpoint (UDP, operator certificates only) for `cargo run --example
    /// ctl`
    ///
    /// Port 0: any; the bound address is in the `started` event as `admin`.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    admin: Option<SocketAddr>,

    /// Print a fresh group id and exit
    #[arg(long, exclusive = true)]
    new_group_id: bool,
}

/// `--timing`: the worker's timing presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TimingPreset {
    /// 10 ms ticks, elections 200-300 ms
    Lan,
    /// 2 ms ticks, elections 12-24 ms
    Fast,
    /// 50 ms ticks, elections 1-2 s
    Wan,
}

impl TimingPreset {
    /// The preset's name on the command line.
    #[allow(dead_code)] // local_group passes it on to its workers; the worker does not
    pub(crate) fn name(self) -> &'static str {
        match self {
            TimingPreset::Lan => "lan",
            TimingPreset::Fast => "fast",
            TimingPreset::Wan => "wan",
        }
    }

    /// The preset's timing.
    pub(crate) fn timing(self) -> Timing {
        match self {
            TimingPreset::Lan => Timing::lan(),
            TimingPreset::Fast => Timing::fast(),
            TimingPreset::Wan => Timing::wan(),
        }
    }
}

/// `--read-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReadModeArg {
    /// One quorum round per confirm
    Safe,
    /// Answered locally inside the lease (clock-drift caveat)
    #[value(alias = "lease-based")]
    Lease,
}

/// `--log-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| format!("{s:?} is not IP:PORT"))
}

fn parse_peers(s: &str) -> Result<String, String> {
    tenure::config::parse_peers(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// What a worker command line asks for.
pub(crate) enum Mode {
    /// `--new-group-id`: print a fresh group id.
    NewGroupId,
    /// Run a worker.
    Run(Box<WorkerArgs>),
}

impl WorkerCli {
    /// What the parsed command line asks for.
    pub(crate) fn mode(self) -> Mode {
        if self.new_group_id {
            return Mode::NewGroupId;
        }
        let preset = self.timing.timing();
        let explicit = [
            self.tick_ms,
            self.heartbeat_ms,
            self.election_ms,
            self.election_max_ms,
        ];
        let timing = if explicit.iter().any(Option::is_some) {
            let tick = explicit[0].unwrap_or(preset.tick.as_millis() as u64);
            let ms = |ticks: usize| ticks as u64 * preset.tick.as_millis() as u64;
            Timing::from_millis(
                tick,
                explicit[1].unwrap_or(ms(preset.heartbeat_ticks)),
                explicit[2].unwrap_or(ms(preset.election_ticks)),
                explicit[3].unwrap_or(ms(preset.election_ticks_max)),
            )
        } else {
            preset
        };
        // Clap requires these unless --new-group-id, which is exclusive.
        let required = "clap enforces the required flags";
        Mode::Run(Box::new(WorkerArgs {
            id: self.id.expect(required),
            listen: self.listen,
            peers: self.peers.expect(required),
            data_dir: self.data_dir.expect(required),
            certs: self.certs.expect(required),
            timing,
            disk_stall_bound: self
                .disk_stall_ms
                .map(|ms| Duration::from_millis(ms.max(1))),
            read_mode: match self.read_mode {
                ReadModeArg::Safe => ReadMode::Safe,
                ReadModeArg::Lease => ReadMode::LeaseBased,
            },
            confirm_every: Duration::from_millis(self.confirm_ms.max(1)),
            named_confirm_every: Duration::from_millis(
                self.named_confirm_ms.unwrap_or(self.confirm_ms).max(1),
            ),
            bench_confirms: self.bench_confirms,
            confirm_load: self
                .confirm_load_file
                .map(|f| (f, Duration::from_secs(self.confirm_load_secs.max(1)))),
            stats_every: self.stats_ms.map(|ms| Duration::from_millis(ms.max(1))),
            log_level: match self.log_level {
                LogLevel::Off => None,
                LogLevel::Error => Some(slog::Level::Error),
                LogLevel::Warn => Some(slog::Level::Warning),
                LogLevel::Info => Some(slog::Level::Info),
                LogLevel::Debug => Some(slog::Level::Debug),
            },
            ledger: self.ledger,
            settle_every: Duration::from_millis(self.settle_ms),
            row_delay: RowDelay {
                base: Duration::from_millis(self.row_ms),
                jitter: Duration::from_millis(self.row_jitter_ms),
            },
            elections: self.elections,
            metrics: self.metrics,
            admin: self.admin,
            join: self.join,
            found: self.found,
            group: self.group,
            term_floor: self.term_floor,
            restore: self.restore,
        }))
    }
}

/// Parsed command line.
#[derive(Debug, Clone)]
pub(crate) struct WorkerArgs {
    pub id: u64,
    pub listen: Option<SocketAddr>,
    pub peers: String,
    pub data_dir: PathBuf,
    pub certs: PathBuf,
    pub timing: Timing,
    pub disk_stall_bound: Option<Duration>,
    pub read_mode: ReadMode,
    pub confirm_every: Duration,
    /// How often a named election's lease is confirmed while leading.
    pub named_confirm_every: Duration,
    pub bench_confirms: usize,
    /// The confirm load's trigger file and length.
    pub confirm_load: Option<(PathBuf, Duration)>,
    pub stats_every: Option<Duration>,
    pub log_level: Option<slog::Level>,
    pub ledger: Option<PathBuf>,
    pub settle_every: Duration,
    pub row_delay: RowDelay,
    pub elections: u64,
    pub metrics: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub join: bool,
    pub found: Option<tenure::GroupId>,
    pub group: Option<tenure::GroupId>,
    pub term_floor: u64,
    pub restore: Option<PathBuf>,
}

/// How long settling one payment takes: `base` plus a uniformly random `0..=jitter`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowDelay {
    pub base: Duration,
    pub jitter: Duration,
}

impl RowDelay {
    fn sample(&self) -> Duration {
        use rand::Rng;
        let j = self.jitter.as_micros() as u64;
        self.base + Duration::from_micros(rand::thread_rng().gen_range(0..=j))
    }
}

/// Exit code: the data folder was refused, and starting again on it will not help.
pub(crate) const EXIT_STORE_REFUSED: i32 = 3;

/// Exit code: a write to the data folder failed (`StopCause::WriteFailed`): the node
/// stopped for good; restarting it recovers from what the disk holds.
pub(crate) const EXIT_WRITE_FAILED: i32 = 4;

/// Whether a start error is about the data folder (exit code 3) rather than the rest.
fn store_refused(e: &tenure::StartError) -> Option<&'static str> {
    use tenure::error::StorageError;
    use tenure::StartError as E;
    match e {
        E::NoStore { .. } => Some("no_store"),
        E::NotFounded { .. } => Some("not_founded"),
        E::WrongNode { .. } => Some("wrong_node"),
        E::WrongGroup { .. } => Some("wrong_group"),
        E::NotAMember { .. } => Some("not_a_member"),
        E::Storage(StorageError::Corrupt { .. }) => Some("corrupt"),
        E::Storage(StorageError::AlreadyInitialized { .. }) => Some("already_initialized"),
        _ => None,
    }
}

/// Writes one event line to stdout and flushes it (so a SIGKILL loses nothing printed).
pub(crate) fn emit(node: u64, event: &str, mut fields: Value) {
    let mut obj = json!({"event": event, "node": node, "mono_ns": monotonic_ns()});
    if let (Some(o), Some(f)) = (obj.as_object_mut(), fields.as_object_mut()) {
        o.append(f);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{obj}");
    let _ = out.flush();
}

/// Runs a worker until SIGTERM/SIGINT; returns the process exit code.
pub(crate) async fn run(args: WorkerArgs) -> i32 {
    let id = args.id;
    let peers = match tenure::config::parse_peers(&args.peers) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("worker {id}: --peers: {e}");
            return 2;
        }
    };
    let mut b = Config::builder(id)
        .peers(peers)
        .data_dir(&args.data_dir)
        .tls_dir(&args.certs)
        .timing(args.timing)
        .read_mode(args.read_mode)
        .join(args.join);
    if let Some(bound) = args.disk_stall_bound {
        b = b.disk_stall_bound(bound);
    }
    if let Some(g) = args.found {
        b = b.found(g);
    }
    b = b.term_floor(args.term_floor);
    if let Some(path) = &args.restore {
        let plan = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| tenure::backup::RestorePlan::from_json(&text))
            .and_then(|plan| match args.found {
                // A unit file pins the group: it must be the plan's.
                Some(g) if g != plan.group => Err(format!(
                    "the plan founds group {}, but --found gives {g}: set the group to the \
                     plan's (ctl restore-plan printed it)",
                    plan.group
                )),
                _ => Ok(plan),
            });
        match plan {
            Ok(plan) => b = b.restore_from(plan),
            Err(e) => {
                eprintln!("worker {id}: --restore {}: {e}", path.display());
                return 2;
            }
        }
    }
    if let Some(g) = args.group {
        b = b.group(g);
    }
    if let Some(l) = args.listen {
        b = b.listen(l);
    }
    for i in 0..args.elections {
        b = b.election(&shard_name(i), tenure::ElectionOptions::new());
    }
    if let Some(level) = args.log_level {
        b = b.logger(tenure::terminal_logger(level));
    }
    let node = match Node::start(b.build()).await {
        Ok(n) => n,
        Err(e) => {
            eprintln!("worker {id}: cannot start: {e}");
            let kind = store_refused(&e);
            emit(
                id,
                "start_failed",
                json!({"error": e.to_string(), "store_refused": kind}),
            );
            return if kind.is_some() {
                EXIT_STORE_REFUSED
            } else {
                1
            };
        }
    };
    let metrics_addr = match args.metrics {
        Some(addr) => {
            let n = node.clone();
            let options = tenure::metrics::ServeOptions {
                logger: match args.log_level {
                    Some(level) => tenure::terminal_logger(level),
                    None => slog::Logger::root(slog::Discard, slog::o!()),
                },
                // GET /ready and /live for process supervisors (deploy/kubernetes).
                health: Some(tenure::metrics::HealthCheck::node(node.clone())),
                ..Default::default()
            };
            match tenure::metrics::serve_with(addr, move || n.metrics_text(), options).await {
                Ok(server) => Some(server.local_addr().to_string()),
                Err(e) => {
                    eprintln!("worker {id}: --metrics {addr}: {e}");
                    emit(
                        id,
                        "start_failed",
                        json!({"error": format!("--metrics {addr}: {e}")}),
                    );
                    let _ = node.shutdown().await;
                    return 1;
                }
            }
        }
        None => None,
    };
    let admin = match args.admin {
        Some(addr) => {
            let logger = match args.log_level {
                Some(level) => tenure::terminal_logger(level),
                None => slog::Logger::root(slog::Discard, slog::o!()),
            };
            let served = tenure::transport::tls::TlsIdentity::from_dir(&args.certs, id)
                .map_err(|e| e.to_string())
                .and_then(|identity| {
                    tenure::admin::serve(node.clone(), addr, &identity, logger)
                        .map_err(|e| e.to_string())
                });
            match served {
                Ok(server) => Some(server),
                Err(e) => {
                    eprintln!("worker {id}: --admin {addr}: {e}");
                    emit(
                        id,
                        "start_failed",
                        json!({"error": format!("--admin {addr}: {e}")}),
                    );
                    let _ = node.shutdown().await;
                    return 1;
                }
            }
        }
        None => None,
    };
    let t = args.timing;
    emit(
        id,
        "started",
        json!({
            "pid": std::process::id(),
            "tick_ms": t.tick.as_secs_f64() * 1e3,
            "election_ms": t.election_timeout().as_secs_f64() * 1e3,
            "heartbeat_ms": t.heartbeat_interval().as_secs_f64() * 1e3,
            "read_mode": format!("{:?}", args.read_mode),
            "metrics": metrics_addr,
            "admin": admin.as_ref().map(|a| a.local_addr().to_string()),
        }),
    );

    // leader_changed: this node's view of (term, leader).
    let mut watch = node.watch();
    tokio::spawn(async move {
        let mut last: Option<(u64, Option<u64>)> = None;
        let mut last_kind = None;
        loop {
            let l = watch.borrow_and_update().clone();
            // Whether this node is in the group, and how.
            let kind = match l.role {
                Role::Joining | Role::Learner | Role::Removed | Role::Founding => {
                    Some(l.role.as_str())
                }
                Role::Stopped => last_kind.flatten(),
                _ => Some("voter"),
            };
            if last_kind != Some(kind) && kind.is_some() {
                last_kind = Some(kind);
                emit(
                    id,
                    "membership",
                    json!({"term": l.term, "membership": kind}),
                );
            }
            if l.role != Role::Stopped && last != Some((l.term, l.leader)) {
                last = Some((l.term, l.leader));
                emit(
                    id,
                    "leader_changed",
                    json!({"term": l.term, "leader": l.leader, "role": l.role.as_str(),
                           "election": null}),
                );
            }
            if watch.changed().await.is_err() {
                break;
            }
        }
    });

    // history: the leadership history this node has applied, whenever it changed (the
    // fault suites check that no node's applied history loses a record another had).
    let n = node.clone();
    tokio::spawn(async move {
        let mut last = None;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tick.tick().await;
            let Ok(h) = n.history().await else { break };
            let records: Vec<[u64; 2]> = h.iter().map(|r| [r.term, r.leader]).collect();
            if last.as_ref() != Some(&records) {
                emit(
                    id,
                    "history",
                    json!({ "records": records, "election": null }),
                );
                last = Some(records);
            }
        }
    });
    if args.elections > 0 {
        spawn_named_views(&node, args.elections);
    }

    if let Some(every) = args.stats_every {
        let n = node.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let s = n.transport_stats();
                emit(
                    id,
                    "transport_stats",
                    json!({"sent": s.sent, "received": s.received,
                    "bytes_sent": s.bytes_sent, "connects": s.connects}),
                );
            }
        });
    }

    // The lease loops: acquire, confirm periodically, report loss; the root's, and one
    // per named election.
    let lease_node = node.clone();
    let confirm_every = args.confirm_every;
    let mut bench_confirms = args.bench_confirms;
    let lease_task = tokio::spawn(async move {
        while let Ok(lease) = lease_node.lease().await {
            let bench = std::mem::take(&mut bench_confirms);
            tenure_events(id, None, &lease, confirm_every, bench).await;
        }
    });
    let mut named_lease_tasks = Vec::new();
    let load = ConfirmLoad::spawn(id, args.confirm_load.clone());
    let confirm_every = args.named_confirm_every;
    for i in 0..args.elections {
        let election = node.election(&shard_name(i));
        let load = load.clone();
        named_lease_tasks.push(tokio::spawn(async move {
            let name = election.name().to_string();
            loop {
                match election.lease().await {
                    Ok(lease) => {
                        named_lease_events(id, &name, &lease, confirm_every, &load).await;
                    }
                    // Removed (by an operator): a later incarnation may lead again.
                    Err(tenure::ElectionError::Removed(_)) => continue,
                    Err(_) => break,
                }
            }
        }));
    }

    let settlement = match &args.ledger {
        Some(path) if args.elections > 0 => match open_shards(path, id, args.elections, &node) {
            Ok(shards) => Some(spawn_shard_settlement(
                node.clone(),
                shards,
                args.settle_every,
                args.row_delay,
            )),
            Err(e) => {
                eprintln!("worker {id}: {e}");
                emit(id, "start_failed", json!({"error": e}));
                let _ = node.shutdown().await;
                return 1;
            }
        },
        Some(path) => match Ledger::open(path, id) {
            Ok(ledger) => Some({
                node.metrics()
                    .register_fence(super::ledger::FENCE, ledger.fence_stats());
                ledger
            })
            .map(|ledger| {
                spawn_settlement(node.clone(), ledger, args.settle_every, args.row_delay)
            }),
            Err(e) => {
                eprintln!("worker {id}: {e}");
                emit(id, "start_failed", json!({"error": e}));
                let _ = node.shutdown().await;
                return 1;
            }
        },
        None => None,
    };

    // Partition drills without root: SIGUSR1 isolates, SIGUSR2 heals.
    {
        use tokio::signal::unix::{signal, SignalKind};
        let peer_ids: Vec<u64> = tenure::config::parse_peers(&args.peers)
            .map(|p| p.keys().copied().filter(|p| *p != id).collect())
            .unwrap_or_default();
        if let (Ok(mut cut), Ok(mut heal)) = (
            signal(SignalKind::user_defined1()),
            signal(SignalKind::user_defined2()),
        ) {
            let n = node.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        Some(()) = cut.recv() => {
                            for p in &peer_ids {
                                n.faults().isolate_from(*p);
                            }
                            emit(id, "isolated", json!({}));
                        }
                        Some(()) = heal.recv() => {
                            n.faults().heal();
                            emit(id, "healed", json!({}));
                        }
                        else => break,
                    }
                }
            });
        }
    }

    // Disk stalls (docs/design.md, section 15): disk_stalled when the node steps aside,
    // disk_recovered when its probes are fast again. The watch keeps only the latest
    // value: a stall that began and ended between two looks is counted by the metrics,
    // and reported from them.
    {
        let mut disk = node.disk();
        let metrics = node.metrics();
        tokio::spawn(async move {
            let mut reported = 0;
            let mut stalled = false;
            while disk.changed().await.is_ok() {
                let health = disk.borrow_and_update().clone();
                let (stalls, _) = metrics.disk_stalls();
                if stalls > reported {
                    reported = stalls;
                    let detail = match &health {
                        tenure::DiskHealth::Stalled {
                            operation,
                            took,
                            bound,
                            ..
                        } => json!({"operation": operation, "took_ms": took.as_millis() as u64,
                                    "bound_ms": bound.as_millis() as u64}),
                        _ => json!({"operation": null}),
                    };
                    if !stalled {
                        emit(id, "disk_stalled", detail);
                    }
                    stalled = true;
                }
                if stalled && !health.is_stalled() {
                    stalled = false;
                    emit(id, "disk_recovered", json!({}));
                }
            }
        });
    }

    // SIGHUP: read the TLS files again now (README, "Rotating certificates").
    if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        let n = node.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match n.reload_tls() {
                    Ok(tenure::transport::tls::TlsReload::Reloaded { not_after }) => {
                        let left = not_after
                            .duration_since(std::time::SystemTime::now())
                            .map_or(0, |d| d.as_secs());
                        emit(id, "tls_reloaded", json!({"expires_in_seconds": left}));
                    }
                    Ok(_) => emit(id, "tls_unchanged", json!({})),
                    Err(e) => {
                        eprintln!("worker {id}: TLS files not reloaded: {e}");
                        emit(id, "tls_reload_failed", json!({"error": e.to_string()}));
                    }
                }
            }
        });
    }

    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("worker {id}: cannot install SIGTERM handler: {e}");
            return 1;
        }
    };
    // A fatal stop is reported by the first join only: keep it for the stopped event.
    let failure = tokio::select! {
        _ = term.recv() => None,
        _ = tokio::signal::ctrl_c() => None,
        r = node.join() => r.err(),
    };
    let code = match &failure {
        None => 0,
        Some(e) => {
            eprintln!("worker {id}: {e}");
            match e.cause {
                // This node lost its data: starting it again on this folder will not help.
                StopCause::LostData { .. } | StopCause::LostAcknowledgedData { .. } => {
                    EXIT_STORE_REFUSED
                }
                StopCause::WriteFailed { .. } => EXIT_WRITE_FAILED,
                _ => 1,
            }
        }
    };
    if let Some(s) = settlement {
        s.stop().await;
    }
    if let Some(a) = admin {
        a.close().await;
    }
    let result = node.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(1), async move {
        let _ = lease_task.await;
        for t in named_lease_tasks {
            let _ = t.await;
        }
    })
    .await;
    let error = failure.or(result.err());
    emit(
        id,
        "stopped",
        json!({
            "error": error.as_ref().map(std::string::ToString::to_string),
            "cause": error.as_ref().map(|e| stop_cause_name(&e.cause)),
            // The write that failed, when a store write stopped the node (cause "storage").
            "operation": error.as_ref().and_then(|e| match &e.cause {
                StopCause::WriteFailed { operation, .. } => Some(operation.clone()),
                _ => None,
            }),
        }),
    );
    code
}

/// A stable name of a stop cause, for the `stopped` event.
fn stop_cause_name(cause: &StopCause) -> &'static str {
    match cause {
        StopCause::Shutdown => "shutdown",
        StopCause::Storage(_) | StopCause::WriteFailed { .. } => "storage",
        StopCause::TransportClosed => "transport_closed",
        StopCause::LostData { .. } => "lost_data",
        StopCause::LostAcknowledgedData { .. } => "lost_acknowledged_data",
        StopCause::RaftPanicked { .. } => "raft_panicked",
        StopCause::DriverTask(_) => "driver_task",
        _ => "other",
    }
}

/// One tenure's events, until its lease is lost: `lease_acquired`, a `lease_confirmed`
/// every `confirm_every`, `lease_lost`; `election` is `None` for the root election.
async fn tenure_events(
    id: u64,
    election: Option<&str>,
    lease: &Lease,
    confirm_every: Duration,
    bench_confirms: usize,
) {
    acquired(id, election, lease);
    if bench_confirms > 0 {
        confirm_bench(id, lease, bench_confirms).await;
    }
    confirm_loop(id, election, lease, confirm_every).await;
}

/// The `lease_acquired` event of `lease`.
fn acquired(id: u64, election: Option<&str>, lease: &Lease) {
    let token = lease.token().term();
    emit(
        id,
        "lease_acquired",
        json!({"term": token, "token": token,
               "valid_until_ns": instant_to_monotonic_ns(lease.valid_until()),
               "election": election}),
    );
}

/// Confirms `lease` every `confirm_every` (a `lease_confirmed` event each) until it is
/// lost (a `lease_lost` event).
async fn confirm_loop(id: u64, election: Option<&str>, lease: &Lease, confirm_every: Duration) {
    loop {
        tokio::select! {
            reason = lease.lost() => {
                lost(id, election, lease, reason);
                break;
            }
            _ = tokio::time::sleep(confirm_every) => {
                let t0 = StdInstant::now();
                // When the call began, exactly: a process stopped between the
                // confirm's return and this event must not look like it began late.
                let began_ns = monotonic_ns();
                match lease.confirm().await {
                    Ok(tok) => emit(id, "lease_confirmed", json!({
                        "term": tok.term(), "token": tok.term(),
                        "began_ns": began_ns,
                        "latency_us": t0.elapsed().as_secs_f64() * 1e6,
                        "valid_until_ns": instant_to_monotonic_ns(lease.valid_until()),
                        "election": election,
                    })),
                    Err(e) => {
                        lost(id, election, lease, e.reason);
                        break;
                    }
                }
            }
        }
    }
}

/// `leader_changed` and `history` of every named election (with `election` naming it):
/// the first from the node's view of all elections (one update per driver turn that
/// changed any), the second polled as the root's is.
fn spawn_named_views(node: &Node, elections: u64) {
    let id = node.id();
    let mut view = node.elections();
    tokio::spawn(async move {
        let mut last: std::collections::BTreeMap<String, (u64, Option<u64>)> = Default::default();
        loop {
            let v = view.borrow_and_update().clone();
            for (name, l) in v.iter() {
                if l.role == Role::Stopped || last.get(name) == Some(&(l.term, l.leader)) {
                    continue;
                }
                last.insert(name.clone(), (l.term, l.leader));
                emit(
                    id,
                    "leader_changed",
                    json!({"term": l.term, "leader": l.leader, "role": l.role.as_str(),
                           "election": name}),
                );
            }
            if view.changed().await.is_err() {
                break;
            }
        }
    });
    let handles: Vec<tenure::Election> = (0..elections)
        .map(|i| node.election(&shard_name(i)))
        .collect();
    tokio::spawn(async move {
        let mut last: Vec<Option<Vec<[u64; 2]>>> = vec![None; handles.len()];
        // As often as the root's for a few elections; less often for many (a round asks
        // each election's history once).
        let every = Duration::from_millis(50.max(3 * handles.len() as u64));
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            // A chunk's questions at once: the driver answers them in one turn (one at a
            // time, 10,000 elections would cost 10,000 turns per round).
            for (k, (chunk, lasts)) in handles.chunks(512).zip(last.chunks_mut(512)).enumerate() {
                if k > 0 {
                    // Spread over the round: a round of 10,000 is about half a second of
                    // chunks, not one burst of commands every worker sends at once.
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                let mut asks = tokio::task::JoinSet::new();
                for (i, e) in chunk.iter().enumerate() {
                    let e = e.clone();
                    asks.spawn(async move { (i, e.history().await) });
                }
                while let Some(done) = asks.join_next().await {
                    let Ok((i, h)) = done else { continue };
                    let h = match h {
                        Ok(h) => h,
                        Err(tenure::ElectionError::Stopped(_)) => return,
                        // Not created yet (the root leader creates it) or removed.
                        Err(_) => continue,
                    };
                    let records: Vec<[u64; 2]> = h.iter().map(|r| [r.term, r.leader]).collect();
                    if lasts[i].as_ref() != Some(&records) {
                        emit(
                            id,
                            "history",
                            json!({ "records": records, "election": chunk[i].name() }),
                        );
                        lasts[i] = Some(records);
                    }
                }
            }
        }
    });
}

/// The confirm load of `--confirm-load-file` (a benchmark): while it runs, every named
/// election leased here confirms back to back, and the latencies are kept here, not
/// printed one by one.
#[derive(Clone)]
struct ConfirmLoad {
    on: tokio::sync::watch::Receiver<bool>,
    latencies_us: std::sync::Arc<std::sync::Mutex<Vec<f64>>>,
}

impl ConfirmLoad {
    /// Waits for the trigger file (if any), runs the load for its length, then prints
    /// `named_confirm_stats`.
    fn spawn(id: u64, trigger: Option<(PathBuf, Duration)>) -> ConfirmLoad {
        let (tx, on) = tokio::sync::watch::channel(false);
        let load = ConfirmLoad {
            on,
            latencies_us: Default::default(),
        };
        let Some((file, length)) = trigger else {
            return load;
        };
        let latencies = load.latencies_us.clone();
        tokio::spawn(async move {
            while !file.exists() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let t0 = StdInstant::now();
            let _ = tx.send(true);
            tokio::time::sleep(length).await;
            let _ = tx.send(false);
            let secs = t0.elapsed().as_secs_f64();
            let mut v = std::mem::take(
                &mut *latencies
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            v.sort_by(f64::total_cmp);
            let q = |p: f64| {
                if v.is_empty() {
                    0.0
                } else {
                    v[((v.len() - 1) as f64 * p).round() as usize]
                }
            };
            emit(
                id,
                "named_confirm_stats",
                json!({"count": v.len(), "secs": secs, "per_s": v.len() as f64 / secs,
                       "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99),
                       "max_us": v.last().copied().unwrap_or(0.0)}),
            );
        });
        load
    }
}

/// A named election's lease loop: as [`tenure_events`], and while the confirm load runs,
/// confirms back to back, keeping the latencies.
async fn named_lease_events(
    id: u64,
    name: &str,
    lease: &Lease,
    confirm_every: Duration,
    load: &ConfirmLoad,
) {
    acquired(id, Some(name), lease);
    let mut on = load.on.clone();
    loop {
        if *on.borrow_and_update() {
            loop {
                let t0 = StdInstant::now();
                tokio::select! {
                    biased;
                    r = lease.confirm() => match r {
                        Ok(_) => load
                            .latencies_us
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(t0.elapsed().as_secs_f64() * 1e6),
                        Err(e) => {
                            lost(id, Some(name), lease, e.reason);
                            return;
                        }
                    },
                    // A change, or the load's end (its sender gone).
                    _ = on.changed() => break,
                }
                if !*on.borrow() {
                    break;
                }
            }
            continue;
        }
        tokio::select! {
            biased;
            changed = on.changed() => {
                if changed.is_err() {
                    // No load any more (its sender is gone): only the confirm loop.
                    confirm_loop(id, Some(name), lease, confirm_every).await;
                    return;
                }
            }
            () = confirm_loop(id, Some(name), lease, confirm_every) => return,
        }
    }
}

/// `lease_lost`, with `ended_ns`: when the lease really ended (its revocation or the end of
/// its validity, whichever came first), which can be earlier than the event's `mono_ns`.
fn lost(id: u64, election: Option<&str>, lease: &tenure::Lease, reason: tenure::LostReason) {
    let token = lease.token().term();
    let ended = lease.ended_at().map(instant_to_monotonic_ns);
    emit(
        id,
        "lease_lost",
        json!({"term": token, "token": token, "reason": reason.as_str(), "ended_ns": ended,
               "election": election}),
    );
}

type Shards = std::collections::BTreeMap<String, std::sync::Arc<std::sync::Mutex<Ledger>>>;

/// Opens shard `i` of the ledger for each election `shard-<i>`: its own connection and
/// its own fence, keyed by the election's name, registered in the metrics by that name.
fn open_shards(path: &std::path::Path, id: u64, n: u64, node: &Node) -> Result<Shards, String> {
    (0..n)
        .map(|i| {
            let l = Ledger::open_shard(path, id, i, n)?;
            node.metrics()
                .register_fence(l.fence_name(), l.fence_stats());
            Ok((
                l.fence_name().to_string(),
                std::sync::Arc::new(std::sync::Mutex::new(l)),
            ))
        })
        .collect()
}

/// Settles each shard while this node leads its election: one task per led election
/// ([`LeaderTask::for_elections`]), each under that election's lease and fence.
fn spawn_shard_settlement(
    node: Node,
    shards: Shards,
    every: Duration,
    row_delay: RowDelay,
) -> LeaderTaskHandle {
    let id = node.id();
    let shards = std::sync::Arc::new(shards);
    LeaderTask::for_elections(node).spawn(move |name, lease| {
        let ledger = shards.get(&*name).cloned();
        async move {
            // An election this worker was not told of (created with ctl): not a shard.
            let Some(ledger) = ledger else { return };
            settle(id, Some(name), lease, ledger, every, row_delay).await;
        }
    })
}

/// Settles the ledger while this node holds a lease: batch by batch, every write fenced
/// with the lease's token. The task is cancelled the moment the lease is lost, but a
/// write already under way (a stalled process that wakes up) still reaches the ledger,
/// where the fence rejects it.
fn spawn_settlement(
    node: Node,
    ledger: Ledger,
    every: Duration,
    row_delay: RowDelay,
) -> LeaderTaskHandle {
    let id = node.id();
    let ledger = std::sync::Arc::new(std::sync::Mutex::new(ledger));
    LeaderTask::new(node).spawn(move |lease| {
        let ledger = ledger.clone();
        async move { settle(id, None, lease, ledger, every, row_delay).await }
    })
}

fn rejected(id: u64, election: Option<&str>, err: &FenceError) -> bool {
    match err {
        FenceError::Stale { presented, highest } => {
            emit(
                id,
                "fence_rejected",
                json!({"term": presented.term(), "token": presented.term(), "highest": highest.term(),
                       "election": election}),
            );
            true
        }
        other => {
            emit(id, "ledger_error", json!({"error": other.to_string()}));
            false
        }
    }
}

async fn settle(
    id: u64,
    election: Option<std::sync::Arc<str>>,
    lease: Lease,
    ledger: std::sync::Arc<std::sync::Mutex<Ledger>>,
    every: Duration,
    row_delay: RowDelay,
) {
    loop {
        let Ok(token): Result<FencingToken, _> = lease.confirm().await else {
            return;
        };
        // A batch runs on a blocking thread, the way a worker thread calls a bank API row
        // by row with the token it started with. Cancelling this task does not stop it:
        // a worker that stalls mid-batch and wakes up keeps writing with its old token,
        // and only the fence stops it. (SQLite calls block, too: a stalled writer holds
        // the file lock, and the election must never wait for the database.)
        let l = ledger.clone();
        let e = election.clone();
        let batch = tokio::task::spawn_blocking(move || {
            settle_batch(id, e.as_deref(), token, &l, row_delay)
        });
        match batch.await {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
        tokio::time::sleep(every).await;
    }
}

/// Settles the oldest open batch with `token`; false when the fence rejected the token.
fn settle_batch(
    id: u64,
    election: Option<&str>,
    token: FencingToken,
    ledger: &std::sync::Mutex<Ledger>,
    row_delay: RowDelay,
) -> bool {
    let lock = || {
        ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let next = lock().next_batch();
    let (batch, payments) = match next {
        Ok(Some(b)) => b,
        Ok(None) => return true,
        Err(e) => {
            emit(id, "ledger_error", json!({"error": e}));
            return true;
        }
    };
    emit(
        id,
        "batch_started",
        json!({"term": token.term(), "token": token.term(), "batch": batch, "rows": payments.len(),
               "election": election}),
    );
    for p in payments {
        std::thread::sleep(row_delay.sample()); // the external call
        let r = lock().settle_payment(token, batch, p);
        if let Err(e) = r {
            return !rejected(id, election, &e);
        }
    }
    let r = lock().close_batch(token, batch);
    match r {
        Ok(Some(rows)) => emit(
            id,
            "settled",
            json!({"term": token.term(), "token": token.term(), "batch": batch, "rows": rows,
                   "election": election}),
        ),
        Ok(None) => {}
        Err(e) => return !rejected(id, election, &e),
    }
    true
}

/// `--bench-confirms N`: times N confirms one after another (after a warm-up), then N
/// from 64 concurrent tasks, and prints `confirm_stats` with every sequential latency.
async fn confirm_bench(id: u64, lease: &Lease, n: usize) {
    const TASKS: usize = 64;
    let run = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..n / 10 {
            lease.confirm().await.map_err(|e| e.to_string())?;
        }
        let mut latencies = Vec::with_capacity(n);
        let t0 = StdInstant::now();
        for _ in 0..n {
            let t = StdInstant::now();
            lease.confirm().await.map_err(|e| e.to_string())?;
            latencies.push(t.elapsed().as_nanos() as u64);
        }
        let sequential = n as f64 / t0.elapsed().as_secs_f64();
        let per_task = n.div_ceil(TASKS);
        let t1 = StdInstant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let l = lease.clone();
                tokio::spawn(async move {
                    for _ in 0..per_task {
                        l.confirm().await?;
                    }
                    Ok::<_, tenure::LeaseLost>(())
                })
            })
            .collect();
        for t in tasks {
            t.await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        }
        let concurrent = (per_task * TASKS) as f64 / t1.elapsed().as_secs_f64();
        Ok::<_, String>(json!({"n": n,
            "latencies_ns": latencies, "sequential_per_s": sequential,
            "concurrent_tasks": TASKS, "concurrent_per_s": concurrent}))
    };
    match run.await {
        Ok(v) => emit(id, "confirm_stats", v),
        Err(e) => emit(id, "confirm_stats", json!({"error": e})),
    }
}
