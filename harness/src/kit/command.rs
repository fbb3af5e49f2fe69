//! The worker's command line, built: [`WorkerCommand`].
//!
//! Every launcher starts its workers with one, so the worker's flags are spelled here and
//! in their parser (`WorkerCli` in `src/bin/tenure-worker/cli.rs`) only;
//! `tests/operations/command_lines.rs` parses what this builds with that parser.

use std::ffi::OsString;
use std::fmt::Display;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A worker command line that parses whole, with nothing behind it (no certificates, no
/// folder): what tests of the worker's refusals add a case to.
pub const WHOLE_ARGS: [&str; 8] = [
    "--id",
    "1",
    "--peers",
    "1=127.0.0.1:9",
    "--data-dir",
    "/nonexistent",
    "--certs",
    "/nonexistent",
];

/// How a worker meets its data folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Neither `--found` nor `--join`: the folder must hold this node's store.
    Existing,
    /// `--found GROUP`: found the group with the first members if the folder is empty,
    /// else check the stored group id (what every start of a first member passes).
    Found(String),
    /// `--join`: wait, with no membership, to be added to a running group.
    Join,
}

/// One worker's command line: the program, then the worker's flags in a fixed order,
/// then the extra arguments (last, so that a flag given there again wins, as the
/// worker takes the last value of a repeated flag).
///
/// A launcher builds a template for its group and fills in each worker:
///
/// ```ignore
/// let template = WorkerCommand::new(kit::binary::worker())
///     .peers(&addrs)
///     .certs(dir.join("certs"))
///     .log_level("off")
///     .found(&group);
/// let child = template.clone().id(2).listen(&addrs[&2]).data_dir(dir.join("data-2"))
///     .command()
///     .spawn()?;
/// ```
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    program: PathBuf,
    id: Option<u64>,
    listen: Option<String>,
    peers: Option<String>,
    data_dir: Option<PathBuf>,
    certs: Option<PathBuf>,
    admin: Option<String>,
    metrics: Option<String>,
    timing: Option<String>,
    timing_ms: Option<[u64; 4]>,
    log_level: Option<String>,
    ledger: Option<PathBuf>,
    elections: Option<u64>,
    start: Start,
    extra: Vec<OsString>,
}

impl WorkerCommand {
    /// A command line for `program` (the worker binary) with no flags yet.
    pub fn new(program: impl Into<PathBuf>) -> WorkerCommand {
        WorkerCommand {
            program: program.into(),
            id: None,
            listen: None,
            peers: None,
            data_dir: None,
            certs: None,
            admin: None,
            metrics: None,
            timing: None,
            timing_ms: None,
            log_level: None,
            ledger: None,
            elections: None,
            start: Start::Existing,
            extra: Vec::new(),
        }
    }

    /// `--id N`.
    pub fn id(mut self, id: u64) -> Self {
        self.id = Some(id);
        self
    }

    /// `--listen ADDR`.
    pub fn listen(mut self, addr: impl Display) -> Self {
        self.listen = Some(addr.to_string());
        self
    }

    /// `--peers 1=ADDR,2=ADDR,...`, in the order given.
    pub fn peers<I: Display, A: Display>(
        mut self,
        peers: impl IntoIterator<Item = (I, A)>,
    ) -> Self {
        let list: Vec<String> = peers
            .into_iter()
            .map(|(id, addr)| format!("{id}={addr}"))
            .collect();
        self.peers = Some(list.join(","));
        self
    }

    /// `--data-dir DIR`.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// `--certs DIR`.
    pub fn certs(mut self, dir: impl Into<PathBuf>) -> Self {
        self.certs = Some(dir.into());
        self
    }

    /// `--found GROUP`.
    pub fn found(mut self, group: impl Display) -> Self {
        self.start = Start::Found(group.to_string());
        self
    }

    /// `--join`.
    pub fn join(mut self) -> Self {
        self.start = Start::Join;
        self
    }

    /// Neither `--found` nor `--join`, or as `start` says.
    pub fn start(mut self, start: Start) -> Self {
        self.start = start;
        self
    }

    /// `--timing PRESET` (`lan`, `fast`, `wan`).
    pub fn timing(mut self, preset: &str) -> Self {
        self.timing = Some(preset.to_string());
        self
    }

    /// `--tick-ms`, `--heartbeat-ms`, `--election-ms` and `--election-max-ms`, all in ms
    /// (over the preset).
    pub fn timing_ms(mut self, tick: u64, heartbeat: u64, election: u64, max: u64) -> Self {
        self.timing_ms = Some([tick, heartbeat, election, max]);
        self
    }

    /// `--log-level LEVEL` (`off`, `error`, `warn`, `info`, `debug`). The environment's
    /// `TENURE_TEST_WORKER_LOG`, when set, overrides it: to read a failing test's
    /// workers' logs (on stderr, with `--nocapture`).
    pub fn log_level(mut self, level: &str) -> Self {
        let level = std::env::var("TENURE_TEST_WORKER_LOG").unwrap_or_else(|_| level.to_string());
        self.log_level = Some(level);
        self
    }

    /// `--ledger PATH`: settle this SQLite ledger while leading.
    pub fn ledger(mut self, path: impl Into<PathBuf>) -> Self {
        self.ledger = Some(path.into());
        self
    }

    /// `--elections N`: run named elections `shard-0` … `shard-<N-1>` (each settling its
    /// own shard of the ledger under its own fence).
    pub fn elections(mut self, n: u64) -> Self {
        self.elections = Some(n);
        self
    }

    /// `--admin ADDR`: the admin endpoint (port 0: any).
    pub fn admin(mut self, addr: impl Display) -> Self {
        self.admin = Some(addr.to_string());
        self
    }

    /// `--metrics ADDR`: Prometheus metrics (port 0: any).
    pub fn metrics(mut self, addr: impl Display) -> Self {
        self.metrics = Some(addr.to_string());
        self
    }

    /// One more argument after the worker's flags.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra.push(arg.into());
        self
    }

    /// More arguments after the worker's flags (read mode, confirm interval, ...).
    pub fn args<S: Into<OsString>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.extra.extend(args.into_iter().map(Into::into));
        self
    }

    /// The program.
    pub fn program(&self) -> &PathBuf {
        &self.program
    }

    /// How the worker meets its data folder.
    pub fn start_mode(&self) -> &Start {
        &self.start
    }

    /// Every argument after the program.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let text = |s: &String| OsString::from(s);
        let path = |p: &PathBuf| p.clone().into_os_string();
        let flags = [
            ("--id", self.id.map(|id| id.to_string().into())),
            ("--listen", self.listen.as_ref().map(text)),
            ("--peers", self.peers.as_ref().map(text)),
            ("--data-dir", self.data_dir.as_ref().map(path)),
            ("--certs", self.certs.as_ref().map(path)),
            ("--admin", self.admin.as_ref().map(text)),
            ("--metrics", self.metrics.as_ref().map(text)),
            ("--timing", self.timing.as_ref().map(text)),
        ];
        let timing_ms = self
            .timing_ms
            .map(|ms| ms.map(|v| Some(v.to_string().into())));
        let [tick, heartbeat, election, max] = timing_ms.unwrap_or_default();
        let more = [
            ("--tick-ms", tick),
            ("--heartbeat-ms", heartbeat),
            ("--election-ms", election),
            ("--election-max-ms", max),
            ("--log-level", self.log_level.as_ref().map(text)),
            ("--ledger", self.ledger.as_ref().map(path)),
            ("--elections", self.elections.map(|n| n.to_string().into())),
        ];
        for (name, value) in flags.into_iter().chain(more) {
            if let Some(v) = value {
                a.push(name.into());
                a.push(v);
            }
        }
        match &self.start {
            Start::Existing => {}
            Start::Found(group) => a.extend(["--found".into(), group.into()]),
            Start::Join => a.push("--join".into()),
        }
        a.extend(self.extra.iter().cloned());
        a
    }

    /// The command that runs the worker, stdin from `/dev/null` (stdout and stderr are
    /// the launcher's to set).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(self.to_args()).stdin(Stdio::null());
        cmd
    }

    /// The command that runs the worker through `wrapper` (a program and its arguments,
    /// such as `ip netns exec NS`), stdin from `/dev/null`.
    pub fn wrapped_in(&self, wrapper: &[&str]) -> Command {
        let (program, args) = wrapper.split_first().expect("a wrapper program");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .arg(&self.program)
            .args(self.to_args())
            .stdin(Stdio::null());
        cmd
    }
}
