//! A network lab for real worker processes (root only): every worker runs in its own
//! network namespace, wired by a veth to a bridge that lives in a dedicated "switch"
//! namespace, with an address in a private subnet (10.77.0.0/24) that exists only inside
//! these namespaces. The host's own network namespace is never touched. Every worker
//! opens its admin endpoint (`--admin`, port [`ADMIN_PORT`]); an operator namespace on the
//! same bridge ([`OPERATOR_ADDR`], no fault rules of its own) runs `ctl` against them
//! ([`Operator`]).
//!
//! Workers name each other: worker `id` is `n<id>.tenure.test` ([`host_of`]), in a hosts
//! file per namespace (`/etc/netns/<ns>/hosts`, which `ip netns exec` mounts over
//! `/etc/hosts`), so a worker can move to another address under its name
//! ([`Lab::move_to_new_address`]): its veth gets the new address and every hosts file is rewritten
//! in place (the mounts of running workers see the new text).
//!
//! Faults are nftables rules in each worker's namespace (an `inet tenure` table with an
//! `input` and an `output` chain): drop from / to given peers, one way or both, and drop
//! a share of packets at random (`numgen random mod 100 < P`; the kernel here has no
//! netem). Processes are paused with SIGSTOP, killed with SIGKILL and restarted with the
//! same data folder. Every process is tracked by PID (`ip netns exec` execs the worker,
//! so the child's PID is the worker's); nothing is killed by name.
//!
//! Cleanup: dropping a [`Lab`] (also while a panic unwinds) kills its workers and deletes
//! its namespaces, which deletes their veths and the bridge with them. Workers get
//! `PR_SET_PDEATHSIG` = SIGKILL, so they die with the harness even when it is killed, and
//! [`Lab::new`] deletes namespaces left behind by harness processes that no longer run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::faultfs::{DirSync, FaultFs, Loss, LossReport};
use super::kit::command::{Start, WorkerCommand};

/// Every namespace this harness makes starts with this; [`Lab::new`] sweeps stale ones.
pub const NS_PREFIX: &str = "tenure-netns-";
/// The port every worker listens on (each has its own namespace, so they never clash).
pub const PORT: u16 = 7000;
/// The port of every worker's admin endpoint (`--admin`), for the operator's `ctl`.
pub const ADMIN_PORT: u16 = 7100;
/// The operator's address: its own namespace on the bridge, with no fault rules of its
/// own (a node's loss rules drop its packets too, as they drop any peer's).
pub const OPERATOR_ADDR: &str = "10.77.0.200";

/// Why the suite cannot run here, if it cannot: `None` means go ahead.
///
/// Forced with `TENURE_NETNS_SKIP=1`. Without root, `ip` or `nft`, or when this kernel
/// or container refuses network namespaces, it is skipped too. Probed once per process
/// (the tests of a suite ask at once, and the probe namespace's name is the process's).
pub fn skip_reason() -> Option<String> {
    static REASON: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    REASON.get_or_init(probe_skip_reason).clone()
}

fn probe_skip_reason() -> Option<String> {
    if std::env::var("TENURE_NETNS_SKIP").is_ok_and(|v| !v.is_empty() && v != "0") {
        return Some("TENURE_NETNS_SKIP is set".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root".into());
    }
    for (tool, arg) in [("ip", "-V"), ("nft", "--version")] {
        let ok = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Some(format!(
                "`{tool}` is missing (scripts/bootstrap.sh --with-nft installs nftables)"
            ));
        }
    }
    // Can we make a namespace and an nft table in it? (Root in a container may not.)
    let probe = format!("{NS_PREFIX}{}-probe", std::process::id());
    let made = run("ip", &["netns", "add", &probe]);
    let nft = made.is_ok() && nft_script(&probe, &table_script()).is_ok();
    let _ = run("ip", &["netns", "del", &probe]);
    if let Err(e) = made {
        return Some(format!("cannot create a network namespace: {e}"));
    }
    if !nft {
        return Some("cannot create an nftables table in a network namespace".into());
    }
    None
}

/// Runs a command, `Err` with its stderr when it fails.
pub fn run(prog: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Loads an nft script (one atomic transaction) in namespace `ns`.
fn nft_script(ns: &str, script: &str) -> Result<(), String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("ip netns exec {ns} nft: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(script.as_bytes())
        .map_err(|e| format!("nft stdin: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft in {ns}: {}\nscript:\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn table_script() -> String {
    "table inet tenure {\n\
       chain input { type filter hook input priority 0; policy accept; }\n\
       chain output { type filter hook output priority 0; policy accept; }\n\
     }\n"
    .to_string()
}

/// Deletes namespaces (and their `/etc/netns` folders) of harness processes that are
/// gone (killed before they could clean up). Their workers died with them
/// (`PR_SET_PDEATHSIG`).
fn sweep_stale() {
    let gone = |name: &str| {
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            return false;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            return false;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let failed = unsafe { libc::kill(pid, 0) } != 0;
        failed && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    };
    if let Ok(list) = run("ip", &["netns", "list"]) {
        for line in list.lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if gone(name) {
                let _ = run("ip", &["netns", "del", name]);
            }
        }
    }
    if let Ok(dirs) = std::fs::read_dir("/etc/netns") {
        for d in dirs.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            if gone(&name) {
                let _ = std::fs::remove_dir_all(d.path());
            }
        }
    }
}

/// The first address of worker `id` (1-based); [`Lab::addr`] is where it is now.
pub fn addr_of(id: u64) -> String {
    format!("10.77.0.{id}")
}

/// The name of worker `id`, in every namespace's hosts file.
pub fn host_of(id: u64) -> String {
    format!("n{id}.tenure.test")
}

/// Where `ip netns exec NS` finds the files it mounts over `/etc`.
fn etc_of(ns: &str) -> PathBuf {
    Path::new("/etc/netns").join(ns)
}

/// What the network does now: one-way cuts and random loss. The default heals all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetState {
    /// `(from, to)`: packets from `from` to `to` are dropped (at both ends).
    pub cut: BTreeSet<(u64, u64)>,
    /// Node → percent of its packets dropped, inbound and outbound.
    pub loss: BTreeMap<u64, u32>,
}

impl NetState {
    /// Cuts both directions between every node of `a` and every node of `b`.
    pub fn cut_between(&mut self, a: &[u64], b: &[u64]) {
        for &x in a {
            for &y in b {
                if x != y {
                    self.cut.insert((x, y));
                    self.cut.insert((y, x));
                }
            }
        }
    }

    /// Drops what goes from `from` to each of `to` (one way).
    pub fn cut_one_way(&mut self, from: u64, to: &[u64]) {
        for &y in to {
            if y != from {
                self.cut.insert((from, y));
            }
        }
    }

    /// Whether `id` can still exchange packets both ways with a majority of `ids`
    /// (itself included), loss aside.
    pub fn reaches_majority(&self, id: u64, ids: &[u64]) -> bool {
        let both = ids
            .iter()
            .filter(|p| {
                **p == id || !(self.cut.contains(&(id, **p)) || self.cut.contains(&(**p, id)))
            })
            .count();
        both > ids.len() / 2
    }

    /// The nft script that makes node `id`'s namespace enforce this state, with the
    /// nodes at `addrs`.
    fn script_for(&self, id: u64, addrs: &BTreeMap<u64, String>) -> String {
        let addr_of = |n: u64| addrs.get(&n).cloned().unwrap_or_else(|| addr_of(n));
        let mut s = String::from("flush chain inet tenure input\nflush chain inet tenure output\n");
        for &(from, to) in &self.cut {
            if from == id {
                s += &format!(
                    "add rule inet tenure output ip daddr {} drop\n",
                    addr_of(to)
                );
            }
            if to == id {
                s += &format!(
                    "add rule inet tenure input ip saddr {} drop\n",
                    addr_of(from)
                );
            }
        }
        if let Some(p) = self.loss.get(&id).filter(|p| **p > 0) {
            s += &format!(
                "add rule inet tenure input ip saddr 10.77.0.0/24 numgen random mod 100 < {p} drop\n\
                 add rule inet tenure output ip daddr 10.77.0.0/24 numgen random mod 100 < {p} drop\n"
            );
        }
        s
    }
}

impl fmt::Display for NetState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cut.is_empty() && self.loss.is_empty() {
            return write!(f, "all links up");
        }
        let cuts: Vec<String> = self.cut.iter().map(|(a, b)| format!("{a}->{b}")).collect();
        let loss: Vec<String> = self.loss.iter().map(|(n, p)| format!("{n}:{p}%")).collect();
        write!(f, "cut [{}] loss [{}]", cuts.join(" "), loss.join(" "))
    }
}

/// One line a worker printed, with its `CLOCK_MONOTONIC` time.
#[derive(Debug, Clone)]
pub struct Line {
    /// The worker that printed it.
    pub node: u64,
    /// Its `event` field.
    pub event: String,
    /// Its `mono_ns` field: when the worker printed it.
    pub mono_ns: u64,
    /// The whole line, parsed.
    pub v: Value,
    /// The line as printed.
    pub raw: String,
}

impl Line {
    /// Its `term` field, if it has one.
    pub fn term(&self) -> Option<u64> {
        self.v.get("term").and_then(Value::as_u64)
    }

    /// An event of the group's own election (not of a named one: those carry its name).
    pub fn is_root(&self) -> bool {
        self.v.get("election").is_none_or(Value::is_null)
    }
}

/// What kind of thing the harness did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// A worker process was started.
    Start,
    /// A fault landed (rules, SIGSTOP).
    Fault,
    /// A fault was healed (rules flushed, SIGCONT).
    Heal,
    /// A worker was killed with SIGKILL.
    Crash,
    /// The workers were told to stop.
    Stop,
    /// An operator op (`ctl`) was asked, or answered.
    Op,
}

/// Something the harness did, for the timeline.
#[derive(Debug, Clone)]
pub struct Action {
    /// When the harness did it (`CLOCK_MONOTONIC`).
    pub mono_ns: u64,
    /// What kind of thing it was.
    pub kind: ActionKind,
    /// The worker it concerns; 0 for the whole network.
    pub node: u64,
    /// What was done, for a person.
    pub what: String,
}

/// Five (or `n`) workers in their namespaces, and room for one more: a spare that joins
/// the group ([`Lab::spawn_spare`]).
pub struct Lab {
    /// The lab's name: its namespaces' and bridge's prefix.
    pub name: String,
    /// The workers started so far: the first members, then the spare once it runs.
    pub ids: Vec<u64>,
    /// The group's first members (their `--peers`, as a unit file would keep it).
    first: Vec<u64>,
    /// The spare's id (`n + 1`): its namespace exists from the start.
    pub spare: u64,
    /// Workers started with `--join`.
    joined: BTreeSet<u64>,
    /// Workers the operator stopped for good (replaced): never started again.
    retired: BTreeSet<u64>,
    /// Certificates, data folders and ledgers.
    pub dir: tempfile::TempDir,
    /// When the lab was made (`CLOCK_MONOTONIC`): the timeline's zero.
    pub start_ns: u64,
    switch: String,
    namespaces: Vec<String>,
    worker: PathBuf,
    args: Vec<String>,
    /// The group the workers found (`--found` on every start, as a unit file would).
    group: String,
    children: BTreeMap<u64, Child>,
    paused: BTreeSet<u64>,
    net: NetState,
    /// Where each worker is now (its name's address in every hosts file).
    addrs: BTreeMap<u64, String>,
    /// Moves so far (each picks a fresh address).
    moves: u64,
    /// Each worker's disk, when the lab runs them on the fault filesystem
    /// ([`Lab::use_fault_fs`]): unmounted once the workers are gone.
    disks: BTreeMap<u64, FaultFs>,
    /// Every line the workers printed, in the order read.
    pub lines: Arc<Mutex<Vec<Line>>>,
    /// Everything the harness did, in order.
    pub actions: Arc<Mutex<Vec<Action>>>,
}

impl Lab {
    /// Makes the namespaces, the bridge and the certificates for `n` workers; `tag`
    /// tells labs of one harness process apart. Starts no worker.
    pub fn new(tag: &str, n: u64, worker: PathBuf, args: &[String]) -> Result<Lab, String> {
        sweep_stale();
        let name = format!("{NS_PREFIX}{}-{tag}", std::process::id());
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ids: Vec<u64> = (1..=n).collect();
        tenure::transport::tls::write_cluster_certs(dir.path().join("certs"), ids.iter().copied())
            .map_err(|e| e.to_string())?;
        let mut lab = Lab {
            switch: format!("{name}-sw"),
            name,
            first: ids.clone(),
            spare: n + 1,
            joined: BTreeSet::new(),
            retired: BTreeSet::new(),
            ids,
            dir,
            start_ns: tenure::clock::monotonic_ns(),
            namespaces: Vec::new(),
            worker,
            args: args.to_vec(),
            group: tenure::GroupId::random().to_string(),
            children: BTreeMap::new(),
            paused: BTreeSet::new(),
            net: NetState::default(),
            addrs: (1..=n + 1).map(|id| (id, addr_of(id))).collect(),
            moves: 0,
            disks: BTreeMap::new(),
            lines: Arc::new(Mutex::new(Vec::new())),
            actions: Arc::new(Mutex::new(Vec::new())),
        };
        // On error, Drop removes whatever was made.
        let sw = lab.switch.clone();
        lab.make_ns(&sw)?;
        run("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &sw, "link", "set", "br0", "up"])?;
        // The operator's namespace, where `ctl` runs.
        let op = lab.operator_ns();
        lab.make_ns(&op)?;
        run(
            "ip",
            &[
                "-n", &op, "link", "add", "eth0", "type", "veth", "peer", "name", "pop", "netns",
                &sw,
            ],
        )?;
        run("ip", &["-n", &sw, "link", "set", "pop", "master", "br0"])?;
        run("ip", &["-n", &sw, "link", "set", "pop", "up"])?;
        let cidr = format!("{OPERATOR_ADDR}/24");
        run("ip", &["-n", &op, "addr", "add", &cidr, "dev", "eth0"])?;
        run("ip", &["-n", &op, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &op, "link", "set", "lo", "up"])?;
        for id in (1..=lab.spare).collect::<Vec<u64>>() {
            let ns = lab.ns(id);
            lab.make_ns(&ns)?;
            let port = format!("p{id}");
            // The veth is made inside the worker's namespace with its peer straight in
            // the switch namespace: no interface ever appears in the host's namespace.
            run(
                "ip",
                &[
                    "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port,
                    "netns", &sw,
                ],
            )?;
            run("ip", &["-n", &sw, "link", "set", &port, "master", "br0"])?;
            run("ip", &["-n", &sw, "link", "set", &port, "up"])?;
            let cidr = format!("{}/24", addr_of(id));
            run("ip", &["-n", &ns, "addr", "add", &cidr, "dev", "eth0"])?;
            run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            nft_script(&ns, &table_script())?;
        }
        lab.write_hosts()?;
        Ok(lab)
    }

    fn make_ns(&mut self, ns: &str) -> Result<(), String> {
        // The folder first: Drop removes it with the namespace.
        self.namespaces.push(ns.to_string());
        std::fs::create_dir_all(etc_of(ns)).map_err(|e| format!("/etc/netns/{ns}: {e}"))?;
        run("ip", &["netns", "add", ns])?;
        Ok(())
    }

    /// Writes every namespace's hosts file: each worker's name at its address now. In
    /// place (truncate and write, same inode): a running worker's `/etc/hosts` is a bind
    /// mount of that inode, and reads the new text at its next lookup.
    fn write_hosts(&self) -> Result<(), String> {
        let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
        for (id, addr) in &self.addrs {
            text += &format!("{addr} {}\n", host_of(*id));
        }
        for ns in &self.namespaces {
            let path = etc_of(ns).join("hosts");
            std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Where worker `id` is now.
    pub fn addr(&self, id: u64) -> String {
        self.addrs.get(&id).cloned().unwrap_or_else(|| addr_of(id))
    }

    /// Moves stopped worker `id` to a fresh address in the lab's subnet under its name:
    /// its veth's address is replaced and every hosts file says the new one. Returns it.
    pub fn move_to_new_address(&mut self, id: u64) -> Result<String, String> {
        assert!(!self.is_running(id), "move n{id} only while it is stopped");
        self.moves += 1;
        let new = format!("10.77.0.{}", 100 + (self.moves * 10 + id) % 100);
        let ns = self.ns(id);
        run("ip", &["-n", &ns, "addr", "flush", "dev", "eth0"])?;
        run(
            "ip",
            &[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{new}/24"),
                "dev",
                "eth0",
            ],
        )?;
        let old = self.addr(id);
        self.addrs.insert(id, new.clone());
        self.write_hosts()?;
        // The cut rules name addresses: make them follow.
        for n in self.ids.clone() {
            nft_script(&self.ns(n), &self.net.script_for(n, &self.addrs))?;
        }
        self.note(
            ActionKind::Fault,
            id,
            format!("n{id} moves from {old} to {new} ({} follows)", host_of(id)),
        );
        Ok(new)
    }

    /// The namespace of worker `id`.
    pub fn ns(&self, id: u64) -> String {
        format!("{}-n{id}", self.name)
    }

    /// The operator's namespace (`ctl` runs there).
    pub fn operator_ns(&self) -> String {
        format!("{}-op", self.name)
    }

    /// Every worker's admin address, the spare's included, comma-separated (`ctl --addr`).
    pub fn admin_addrs(&self) -> String {
        (1..=self.spare)
            .map(|i| format!("{}:{ADMIN_PORT}", self.addr(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What `ctl` needs to drive this lab from the operator's namespace.
    pub fn operator(&self, ctl: &Path) -> Operator {
        Operator {
            ns: self.operator_ns(),
            ctl: ctl.to_path_buf(),
            certs: self.dir.path().join("certs"),
            addrs: self.admin_addrs(),
            actions: self.actions.clone(),
        }
    }

    /// Worker `id`'s data folder: on its fault filesystem if the lab has them.
    pub fn data_dir(&self, id: u64) -> PathBuf {
        match self.disks.get(&id) {
            Some(disk) => disk.path().join("data"),
            None => self.dir.path().join(format!("data-{id}")),
        }
    }

    /// Puts every worker's data folder (the spare's too) on a fault filesystem of its
    /// own, mounted here, in the harness's mount namespace, before any worker starts:
    /// `ip netns exec` gives each worker a copy of this namespace as it starts (see
    /// [`crate::faultfs`]). Call it before the first start.
    pub fn use_fault_fs(&mut self) -> Result<(), String> {
        let mut ids = self.ids.clone();
        ids.push(self.spare);
        for id in ids {
            let root = self.dir.path().join(format!("disk-{id}"));
            let disk = FaultFs::mount(&root, DirSync::Immediate)
                .map_err(|e| format!("n{id}'s fault filesystem: {e}"))?;
            self.disks.insert(id, disk);
        }
        Ok(())
    }

    /// A power loss on worker `id`'s machine: SIGKILL, then what its disk had not synced
    /// is lost (`loss`). It stays down until [`Lab::spawn`]. Without a fault filesystem
    /// it is the SIGKILL alone, and `None`.
    pub fn power_loss(&mut self, id: u64, loss: Loss) -> Option<LossReport> {
        self.kill(id);
        let report = self.disks.get(&id)?.power_loss(loss);
        self.note(
            ActionKind::Crash,
            id,
            format!(
                "power loss on n{id}: {} unsynced bytes of {} files lost{}",
                report.bytes_dropped,
                report.files,
                match loss {
                    Loss::Drop => String::new(),
                    Loss::Torn(_) => format!(", {} kept (torn)", report.bytes_kept),
                }
            ),
        );
        Some(report)
    }

    /// Worker `id`'s disk holds every write and sync for `length` (at most
    /// [`crate::faultfs::MAX_STALL`]), then answers them. `false` without a fault
    /// filesystem.
    pub fn stall_disk(&mut self, id: u64, length: Duration) -> bool {
        let Some(disk) = self.disks.get(&id) else {
            return false;
        };
        disk.stall(length);
        self.note(
            ActionKind::Fault,
            id,
            format!(
                "disk stall: n{id}'s disk stalls for {} ms",
                length.as_millis()
            ),
        );
        true
    }

    /// SIGKILLs worker `id`'s process `c` and reaps it. What its disk's stall holds
    /// fails with EIO in between: a worker blocked in a held request cannot die before.
    fn kill_and_reap(&self, id: u64, c: &mut Child) {
        let _ = c.kill();
        if let Some(disk) = self.disks.get(&id) {
            disk.fail_held();
        }
        let _ = c.wait();
    }

    /// Records a harness action on the timeline.
    pub fn note(&self, kind: ActionKind, node: u64, what: impl Into<String>) {
        self.actions.lock().unwrap().push(Action {
            mono_ns: tenure::clock::monotonic_ns(),
            kind,
            node,
            what: what.into(),
        });
    }

    /// Starts worker `id` in its namespace (again, after a kill: same data folder). A
    /// retired worker is not started again.
    pub fn spawn(&mut self, id: u64) {
        if self.retired.contains(&id) {
            return;
        }
        // The first members, and a spare itself: whom it reaches first.
        let mut peer_ids = self.first.clone();
        if !peer_ids.contains(&id) {
            peer_ids.push(id);
        }
        let start = if self.joined.contains(&id) {
            Start::Join
        } else {
            Start::Found(self.group.clone())
        };
        let ns = self.ns(id);
        let mut cmd = WorkerCommand::new(&self.worker)
            .id(id)
            // No --listen: a worker whose own entry is a name listens on 0.0.0.0:PORT.
            .peers(
                peer_ids
                    .iter()
                    .map(|i| (*i, format!("{}:{PORT}", host_of(*i)))),
            )
            .data_dir(self.data_dir(id))
            .certs(self.dir.path().join("certs"))
            .log_level("off")
            .admin(format!("{}:{ADMIN_PORT}", self.addr(id)))
            .start(start)
            .args(&self.args)
            .wrapped_in(&["ip", "netns", "exec", &ns]);
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death signal
        // (kept across `ip`'s exec of the worker: neither is set-user-ID).
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn ip netns exec worker");
        let out = child.stdout.take().expect("stdout");
        let lines = self.lines.clone();
        std::thread::spawn(move || {
            for raw in BufReader::new(out).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<Value>(&raw) else {
                    continue;
                };
                let get = |k: &str| v.get(k).and_then(Value::as_u64);
                let line = Line {
                    node: get("node").unwrap_or(0),
                    mono_ns: get("mono_ns").unwrap_or(0),
                    event: v
                        .get("event")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    v: v.clone(),
                    raw,
                };
                lines.lock().unwrap().push(line);
            }
        });
        self.note(
            ActionKind::Start,
            id,
            format!("start n{id} (pid {})", child.id()),
        );
        self.children.insert(id, child);
        self.paused.remove(&id);
    }

    /// Starts the spare on an empty folder, joining (`--join`), with a certificate from
    /// the lab's CA; from now on it is one of the lab's workers. Returns its id.
    pub fn spawn_spare(&mut self) -> Result<u64, String> {
        let id = self.spare;
        if self.ids.contains(&id) {
            return Ok(id);
        }
        let certs = self.dir.path().join("certs");
        tenure::transport::tls::write_node_cert(&certs, id).map_err(|e| e.to_string())?;
        self.joined.insert(id);
        self.ids.push(id);
        self.spawn(id);
        Ok(id)
    }

    /// Stops worker `id` for good (SIGKILL if it runs): the operator took it out of the
    /// group; no heal starts it again.
    pub fn retire(&mut self, id: u64) {
        self.kill(id);
        self.retired.insert(id);
        self.note(
            ActionKind::Stop,
            id,
            format!("n{id} stopped for good (replaced)"),
        );
    }

    /// Starts every worker of the group.
    pub fn start_all(&mut self) {
        for id in self.ids.clone() {
            self.spawn(id);
        }
    }

    /// Whether worker `id` runs (it may be paused).
    pub fn is_running(&self, id: u64) -> bool {
        self.children.contains_key(&id)
    }

    /// Whether worker `id` is stopped by `SIGSTOP`.
    pub fn is_paused(&self, id: u64) -> bool {
        self.paused.contains(&id)
    }

    fn signal(&self, id: u64, sig: i32) {
        if let Some(c) = self.children.get(&id) {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// Stops worker `id` with `SIGSTOP`, as a stalled process.
    pub fn pause(&mut self, id: u64) {
        self.signal(id, libc::SIGSTOP);
        self.paused.insert(id);
        self.note(ActionKind::Fault, id, format!("SIGSTOP n{id}"));
    }

    /// Wakes worker `id` with `SIGCONT`.
    pub fn resume(&mut self, id: u64) {
        self.signal(id, libc::SIGCONT);
        self.paused.remove(&id);
        self.note(ActionKind::Heal, id, format!("SIGCONT n{id}"));
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut c) = self.children.remove(&id) {
            self.kill_and_reap(id, &mut c);
            self.note(ActionKind::Crash, id, format!("SIGKILL n{id}"));
        }
        self.paused.remove(&id);
    }

    /// Makes every namespace enforce `net`; `why` goes on the timeline. Only the
    /// namespaces whose rules change are touched.
    pub fn set_net(&mut self, net: NetState, why: &str) -> Result<(), String> {
        if net == self.net {
            return Ok(());
        }
        for id in self.ids.clone() {
            let script = net.script_for(id, &self.addrs);
            if script != self.net.script_for(id, &self.addrs) {
                nft_script(&self.ns(id), &script)?;
            }
        }
        let kind = if net == NetState::default() {
            ActionKind::Heal
        } else {
            ActionKind::Fault
        };
        self.note(kind, 0, format!("{why}: {net}"));
        self.net = net;
        Ok(())
    }

    /// The network faults set now.
    pub fn net(&self) -> &NetState {
        &self.net
    }

    /// Heals everything: links up, no loss, every worker running and not paused.
    pub fn heal_all(&mut self) -> Result<(), String> {
        self.set_net(NetState::default(), "heal links")?;
        for id in self.paused.clone() {
            self.resume(id);
        }
        for id in self.ids.clone() {
            if !self.is_running(id) {
                self.spawn(id);
            }
        }
        Ok(())
    }

    /// The worker lines so far, in arrival order.
    pub fn lines(&self) -> Vec<Line> {
        self.lines.lock().unwrap().clone()
    }

    /// The node that holds the most recent lease (highest term acquired and not yet
    /// reported lost), else the leader of the highest term anyone reported.
    pub fn current_leader(&self) -> Option<u64> {
        let lines = self.lines.lock().unwrap();
        let acquired = lines
            .iter()
            .filter(|l| l.event == "lease_acquired" && l.is_root())
            .max_by_key(|l| l.term());
        if let Some(a) = acquired {
            let lost = lines.iter().any(|l| {
                l.event == "lease_lost" && l.is_root() && l.node == a.node && l.term() == a.term()
            });
            if !lost {
                return Some(a.node);
            }
        }
        lines
            .iter()
            .filter(|l| l.event == "leader_changed" && l.is_root())
            .filter_map(|l| Some((l.term()?, l.v.get("leader")?.as_u64()?)))
            .max()
            .map(|(_, leader)| leader)
    }

    /// Waits until a line matching `f` arrived; `None` after `timeout`.
    pub fn wait_line(&self, timeout: Duration, f: impl Fn(&Line) -> bool) -> Option<Line> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| f(l)) {
                return Some(l.clone());
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGCONT and SIGTERM to every worker, then waits (SIGKILL after `grace`). Returns
    /// the workers that did not exit by themselves with code 0 (the signal that ended
    /// them, `None` if they exited with another code or had to be killed).
    pub fn stop_all(&mut self, grace: Duration) -> Vec<(u64, Option<i32>)> {
        use std::os::unix::process::ExitStatusExt;
        let mut unclean = Vec::new();
        for disk in self.disks.values() {
            disk.end_stall(); // a stalled worker could not stop within the grace
        }
        for id in self.children.keys().copied().collect::<Vec<_>>() {
            self.signal(id, libc::SIGCONT);
            self.signal(id, libc::SIGTERM);
        }
        self.paused.clear();
        self.note(ActionKind::Stop, 0, "SIGTERM to all workers");
        let deadline = Instant::now() + grace;
        for (id, mut c) in std::mem::take(&mut self.children) {
            loop {
                match c.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            unclean.push((id, status.signal()));
                        }
                        break;
                    }
                    _ if Instant::now() >= deadline => {
                        self.kill_and_reap(id, &mut c);
                        unclean.push((id, None));
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        unclean
    }

    /// Worker lines and harness actions merged in time order, times in ms since the lab
    /// was made; for failure reports.
    pub fn timeline(&self) -> Vec<String> {
        let mut all: Vec<(u64, String)> = self
            .lines()
            .into_iter()
            .filter(|l| l.event != "lease_confirmed" && l.event != "started")
            .map(|l| (l.mono_ns, format!("node {} {}", l.node, l.raw)))
            .collect();
        all.extend(
            self.actions
                .lock()
                .unwrap()
                .iter()
                .map(|a| (a.mono_ns, format!("harness: {}", a.what))),
        );
        all.sort_by_key(|(t, _)| *t);
        all.into_iter()
            .map(|(t, s)| {
                format!(
                    "{:>9.1} ms  {s}",
                    t.saturating_sub(self.start_ns) as f64 / 1e6
                )
            })
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (id, mut c) in std::mem::take(&mut self.children) {
            self.kill_and_reap(id, &mut c);
        }
        // Before the lab's folder is removed (the mounts are in it).
        for disk in std::mem::take(&mut self.disks).into_values() {
            let _ = disk.unmount();
        }
        for ns in self.namespaces.drain(..).rev() {
            let _ = run("ip", &["netns", "del", &ns]);
            let _ = std::fs::remove_dir_all(etc_of(&ns));
        }
    }
}

/// Runs the operator tool (`tenure-ctl`) against a lab, from the operator's namespace,
/// and puts what it asked and what it got on the lab's timeline. Cheap to
/// clone into a thread.
#[derive(Clone)]
pub struct Operator {
    ns: String,
    ctl: PathBuf,
    certs: PathBuf,
    addrs: String,
    actions: Arc<Mutex<Vec<Action>>>,
}

/// What one `ctl` command did.
#[derive(Debug, Clone)]
pub struct CtlRun {
    /// The command, as given (`transfer --to 3`).
    pub command: String,
    /// "ok", or the refusal's kind (`not_leader`, `timed_out`, ..., `unreachable`, or
    /// `ctl` for an error of the tool itself).
    pub outcome: String,
    /// Its JSON answer, or what it printed on stderr.
    pub said: String,
    /// When it was asked (`CLOCK_MONOTONIC`).
    pub asked_ns: u64,
    /// When it answered (`CLOCK_MONOTONIC`).
    pub answered_ns: u64,
}

impl Operator {
    /// Runs `ctl --json --timeout SECS <command>` (every node's admin address given) and
    /// waits for it; never fails (a tool that cannot run says so in the outcome).
    pub fn run(&self, command: &[String], timeout_secs: u64) -> CtlRun {
        let shown = command.join(" ");
        let asked_ns = tenure::clock::monotonic_ns();
        self.note(format!("operator: ctl {shown}"));
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(&self.ctl)
            .arg("--certs")
            .arg(&self.certs)
            .args(["--addr", &self.addrs, "--json"])
            .args(["--timeout", &timeout_secs.to_string()])
            .args(command)
            .stdin(Stdio::null())
            .output();
        let answered_ns = tenure::clock::monotonic_ns();
        let (outcome, said) = match out {
            Err(e) => (
                "ctl".to_string(),
                format!("cannot run {}: {e}", self.ctl.display()),
            ),
            Ok(o) => {
                let stdout = String::from_utf8_lossy(&o.stdout).trim().to_string();
                let stderr = String::from_utf8_lossy(&o.stderr).trim().to_string();
                let v: Option<Value> = serde_json::from_str(&stdout).ok();
                let kind = v.as_ref().and_then(|v| {
                    if v.get("ok").is_some() {
                        Some("ok".to_string())
                    } else {
                        v.pointer("/error/kind")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    }
                });
                match kind {
                    Some(k) if (k == "ok") == o.status.success() => (k, stdout),
                    _ => (
                        "ctl".to_string(),
                        format!("exit {:?}: {stdout} {stderr}", o.status.code()),
                    ),
                }
            }
        };
        self.note(format!("operator: ctl {shown} -> {outcome}: {said}"));
        CtlRun {
            command: shown,
            outcome,
            said,
            asked_ns,
            answered_ns,
        }
    }

    fn note(&self, what: String) {
        self.actions.lock().unwrap().push(Action {
            mono_ns: tenure::clock::monotonic_ns(),
            kind: ActionKind::Op,
            node: 0,
            what,
        });
    }
}

/// The operator tool, `tenure-ctl`: `TENURE_NETNS_CTL=PATH`; else `tenure-ctl` beside a
/// `TENURE_NETNS_WORKER` (`<profile>/tenure-worker`: `.ci/run` built both); else the kit's
/// (`kit::binary::ctl`: beside the test, built with cargo when missing or stale).
pub fn ctl_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("TENURE_NETNS_CTL").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(w) = std::env::var_os("TENURE_NETNS_WORKER").filter(|p| !p.is_empty()) {
        let beside = Path::new(&w).with_file_name("tenure-ctl");
        if beside.exists() {
            return beside;
        }
    }
    super::kit::binary::ctl()
}

/// The worker binary to run: the kit's `tenure-worker`, or, with `TENURE_MUTATION` set
/// and this test built without the mutations feature, one built with `--features
/// mutations` (checked to really be one).
///
/// `TENURE_NETNS_WORKER=PATH` runs that binary instead (no build: for long manual runs
/// while the tree changes).
pub fn worker_for_run() -> PathBuf {
    let mutation = std::env::var("TENURE_MUTATION").unwrap_or_default();
    if let Some(p) = std::env::var_os("TENURE_NETNS_WORKER").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            mutation.trim().is_empty() || contains(&p, b"TENURE_MUTATION"),
            "TENURE_MUTATION is set but {} was not built with --features mutations",
            p.display()
        );
        return p;
    }
    if mutation.trim().is_empty() || tenure::mutation::COMPILED {
        return super::procs::worker_binary();
    }
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_mutations_worker).clone()
}

/// Builds the worker with `--features mutations` and returns cargo's hashed copy of it
/// (`deps/tenure_worker-<hash>`), which a later plain build does not overwrite.
fn build_mutations_worker() -> PathBuf {
    let profile_dir = super::kit::binary::profile_dir();
    let deps = profile_dir.join("deps");
    for _ in 0..3 {
        let mut args = vec![
            "build",
            "--bin",
            "tenure-worker",
            "--features",
            "mutations,postgres",
        ];
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            args.push("--release");
        }
        let status = super::procs::nested_cargo()
            .args(&args)
            .stdout(Stdio::null())
            .status()
            .expect("run cargo build --bin tenure-worker --features mutations,postgres");
        assert!(status.success(), "cargo build --features mutations failed");
        // The uplifted `tenure-worker` is a hard link to the hashed file just built.
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(profile_dir.join("tenure-worker"))
            .expect("worker binary")
            .ino();
        let hashed = std::fs::read_dir(&deps)
            .expect("deps dir")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.starts_with("tenure_worker-")
                    && p.extension().is_none()
                    && std::fs::metadata(p).is_ok_and(|m| m.ino() == ino)
            });
        // Another build may have replaced the link meanwhile: check what we got.
        if let Some(p) = hashed.filter(|p| contains(p, b"TENURE_MUTATION")) {
            return p;
        }
    }
    panic!("could not get a worker built with --features mutations");
}

/// Whether the file at `path` contains `needle`.
fn contains(path: &Path, needle: &[u8]) -> bool {
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        carry.extend_from_slice(&buf[..n]);
        if carry.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        let keep = carry.len().saturating_sub(needle.len());
        carry.drain(..keep);
    }
}
