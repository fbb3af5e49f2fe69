//! The worker's command line: every flag, value, default and exit code that other tools
//! script against (the deploy files, the netns suite, `local_group`, the benches).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tenure::{ReadMode, Timing};

/// The worker's long help after its flags: founding, exit codes and events.
const AFTER_HELP: &str = "\
Founding, restarting, replacing (README: Founding a group):
  once:             GROUP=$(tenure-worker --new-group-id)
  every start of each first member, the same command each time (a unit file may keep it):
                    tenure-worker --id I --peers 1=A1,2=A2,3=A3 ... --found $GROUP
  A node founds only when its data folder is empty and every first member has said hello
  and is founding too (or is pristine); once the group exists --found only checks the
  stored group id. A node whose folder was lost does not come back as a voter: it stops
  with exit code 3, whatever its command line.
  replacement machine: a new id, its own certificate, an empty folder:
                    tenure-worker --id 6 --peers 6=A6,1=A1,2=A2,3=A3 ... --join
                    tenure-ctl members add 6 A6; tenure-ctl members replace OLD 6

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

// Every flag, value, default and exit code is what the hand-written parser of the example
// worker before it took: other tools script against them. The test kit's `WorkerCommand`
// (harness/src/kit/command.rs) builds this command line.
/// A tenure worker: elects a leader with its peers and prints its events as JSON lines.
#[derive(Debug, Parser)]
#[command(
    name = "tenure-worker",
    bin_name = "tenure-worker",
    version,
    override_usage = "tenure-worker --id N --listen ADDR --peers 1=ADDR,2=ADDR,... --data-dir DIR --certs DIR\n                     \
                      (--found GROUP | --join | an existing store) [OPTIONS]\n       \
                      tenure-worker --new-group-id",
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
    /// this node (tenure-ctl members add); --peers lists this node and the members to reach
    #[arg(long)]
    join: bool,

    /// With --found: found the group's election at term N or above, so that its tokens
    /// stay above what resources remember (disaster recovery); every first member the same
    #[arg(long, value_name = "N", default_value = "0")]
    term_floor: u64,

    /// Found the group again after every member lost its data, from a restore plan
    /// (tenure-ctl restore-plan --backup BACKUP --out FILE): the plan's new group (no
    /// --found needed), the backup's drains, history and elections, every election above
    /// its recorded term; every first member the same plan
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

    /// Settle pending payments in this ledger while leading: an SQLite file, or (built
    /// with --features postgres) a PostgreSQL database, postgres://USER@HOST/DB (Unix
    /// socket: postgres://USER@%2Frun%2Fpostgresql/DB; TLS, verified:
    /// ?sslmode=require&sslrootcert=CA.pem)
    //
    // Taken as a string and parsed at start (run.rs): clap's own error would repeat the
    // value, password and all.
    #[arg(long, value_name = "PATH|URL")]
    ledger: Option<String>,

    /// The PostgreSQL ledger's password, the file's first line, when the URL has none
    /// (else PGPASSWORD, as libpq; never printed)
    #[arg(long, value_name = "FILE")]
    ledger_password_file: Option<PathBuf>,

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

    /// Open the admin endpoint (UDP, operator certificates only) for `tenure-ctl`
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
            ledger: self.ledger.map(LedgerArg),
            ledger_password_file: self.ledger_password_file,
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

/// `--ledger`'s value as given: parsed when the worker starts, with an error that does
/// not repeat it. Its `Debug` never shows a password.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LedgerArg(pub String);

impl std::fmt::Debug for LedgerArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match crate::ledger::LedgerAt::parse(&self.0) {
            Ok(at) => write!(f, "LedgerArg({})", at.describe()),
            Err(_) => write!(f, "LedgerArg(<does not parse>)"),
        }
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
    pub ledger: Option<LedgerArg>,
    /// `--ledger-password-file`.
    pub ledger_password_file: Option<PathBuf>,
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
    pub(crate) fn sample(&self) -> Duration {
        use rand::Rng;
        let j = self.jitter.as_micros() as u64;
        self.base + Duration::from_micros(rand::thread_rng().gen_range(0..=j))
    }
}

/// The test kit's worker command (`harness/src/kit/command.rs`), which the tests, the
/// benches and `local_group` start workers with, parsed by this parser.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;
    use tenure_harness::kit::command::WorkerCommand;

    /// Parses what `cmd` builds with the worker's own parser.
    fn parse(cmd: &WorkerCommand) -> Result<super::Mode, clap::Error> {
        let line = std::iter::once("tenure-worker".into()).chain(cmd.to_args());
        super::WorkerCli::try_parse_from(line).map(super::WorkerCli::mode)
    }

    #[test]
    fn the_kits_worker_command_is_the_command_line_the_worker_parses() {
        let group = tenure::GroupId::random();
        let cmd = WorkerCommand::new("worker")
            .id(3)
            .listen("127.0.0.1:7003")
            .peers([
                (1, "127.0.0.1:7001"),
                (2, "127.0.0.1:7002"),
                (3, "127.0.0.1:7003"),
            ])
            .data_dir("/var/lib/tenure")
            .certs("/etc/tenure/node-3")
            .found(group)
            .timing("fast")
            .timing_ms(1, 3, 13, 25)
            .log_level("off")
            .ledger("/tmp/ledger.db")
            .admin("127.0.0.1:0")
            .metrics("127.0.0.1:9100")
            .elections(16)
            .args(["--confirm-ms", "7", "--read-mode", "lease"]);
        let super::Mode::Run(a) = parse(&cmd).expect("the worker takes it") else {
            panic!("not a worker run");
        };
        assert_eq!(a.id, 3);
        assert_eq!(a.listen, Some("127.0.0.1:7003".parse().unwrap()));
        assert_eq!(
            a.peers,
            "1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003"
        );
        assert_eq!(a.data_dir, std::path::Path::new("/var/lib/tenure"));
        assert_eq!(a.certs, std::path::Path::new("/etc/tenure/node-3"));
        assert_eq!(a.found, Some(group));
        assert!(!a.join);
        assert_eq!(a.timing, tenure::Timing::from_millis(1, 3, 13, 25));
        assert_eq!(a.log_level, None);
        assert_eq!(a.ledger, Some(super::LedgerArg("/tmp/ledger.db".into())));
        assert_eq!(a.admin, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(a.metrics, Some("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(a.confirm_every, Duration::from_millis(7));
        assert_eq!(a.read_mode, tenure::ReadMode::LeaseBased);
        assert_eq!(a.elections, 16);

        // Joining, with the defaults the worker has always had.
        let join = WorkerCommand::new("worker")
            .id(6)
            .peers([(6, "10.0.0.6:7001"), (1, "10.0.0.1:7001")])
            .data_dir("d")
            .certs("c")
            .join();
        let super::Mode::Run(a) = parse(&join).expect("the worker takes it") else {
            panic!("not a worker run");
        };
        assert!(a.join && a.found.is_none() && a.listen.is_none());
        assert_eq!(a.peers, "6=10.0.0.6:7001,1=10.0.0.1:7001");
        assert_eq!(a.timing, tenure::Timing::lan());
        assert_eq!(a.read_mode, tenure::ReadMode::Safe);
        assert_eq!(a.confirm_every, Duration::from_millis(100));
        assert_eq!(a.log_level, Some(slog::Level::Warning));
        assert_eq!(a.settle_every, Duration::from_millis(150));
        assert_eq!(a.row_delay.base, Duration::from_millis(20));
        assert_eq!(a.row_delay.jitter, Duration::ZERO);
        assert_eq!((a.bench_confirms, a.stats_every), (0, None));
        // No named elections unless asked: the worker it always was.
        assert_eq!(a.elections, 0);

        // An explicit tick over a preset keeps the preset's other times.
        let wan_tick = join.clone().timing("wan").arg("--tick-ms").arg("25");
        let super::Mode::Run(a) = parse(&wan_tick).unwrap() else {
            panic!("not a worker run");
        };
        assert_eq!(a.timing, tenure::Timing::from_millis(25, 200, 1000, 2000));

        // A flag given again among the extra arguments wins, as it always did.
        let again = join.clone().log_level("off").args(["--log-level", "debug"]);
        let super::Mode::Run(a) = parse(&again).unwrap() else {
            panic!("not a worker run");
        };
        assert_eq!(a.log_level, Some(slog::Level::Debug));
    }

    #[test]
    fn a_ledger_password_is_never_printed() {
        let secret = "s3cret-pw";
        let arg = super::LedgerArg(format!("postgres://ledger:{secret}@db.example/settle"));
        assert!(!format!("{arg:?}").contains(secret), "{arg:?}");
        let bad = format!("postgres://ledger:{secret}@db.example/settle?sslmode=bogus");
        let err = crate::ledger::LedgerAt::parse(&bad).unwrap_err();
        assert!(!err.contains(secret), "{err}");
    }
}
