//! Disk use of a group over many leadership changes, with and without log compaction.
//!
//! ```text
//! cargo bench --bench disk                              # 100 000 changes, compaction on, then off
//! cargo bench --bench disk -- --dir /dev/shm            # data folders on tmpfs (faster)
//! cargo bench --bench disk -- --changes 20000 --every 2000 --compaction off
//! cargo bench --bench disk -- --quick                   # 2 000 changes each (CI)
//! ```
//!
//! Three nodes run in this process, started the way an application starts them
//! (`Node::start`: a RocksDB data folder each, QUIC with mutual TLS on loopback), with
//! `Timing::fast()`. One *change*: the leader hands leadership to the next node in turn
//! (`Node::transfer_leadership`), and the change counts once the new leader has applied
//! its "tenure began" history record. Each change is one new term and one history record
//! (two log entries: raft's empty entry of the new term and the record).
//!
//! Every 100 changes (a *sample*) and at each checkpoint the bench walks every node's
//! data folder and adds up its files, as a user would see them: the apparent size (`ls`,
//! `du --apparent-size`) and the allocated size (`du`; RocksDB preallocates its WAL),
//! split into RocksDB's SST files, write-ahead log (`*.log`), `MANIFEST-*`, its info log
//! (`LOG*`) and the rest. It also records each node's Raft log span (first..=last index)
//! and this process's RSS. At the end the nodes stop, each store is opened once more
//! (RocksDB replays and flushes its WAL on open) and the folders are measured again.
//!
//! *Compaction on* is tenure's default (`compact_after` 1024, `history_retention`
//! 1000); *off* is `compact_after` 2⁶², which the log never reaches.
//!
//! Results go to `<target dir>/tenure-bench/`: `disk.txt` (the tables), `disk.csv` (one
//! row per checkpoint: bytes per node, totals, log spans), `disk-samples.csv` (every
//! sample) and `disk.svg` (disk use against changes, both settings).

mod support;

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plotters::prelude::*;
use tenure::storage::RocksStore;
use tenure::{Config, Node, NodeId, Role, Timing};

use support::{plot, table, Progress};

const USAGE: &str = "\
usage: cargo bench --bench disk -- [--changes N] [--every N] [--compaction on|off|both]
                                   [--no-compaction] [--dir PATH] [--keep] [--quick]

  --changes N        leadership changes per setting (default 100000)
  --every N          changes between checkpoints (default: a tenth of --changes)
  --compaction WHICH on (tenure's default), off, or both (default)
  --no-compaction    the same as --compaction off
  --dir PATH         put the group's folders in a new temporary folder under PATH
                     (/dev/shm: tmpfs); default: under the target folder
  --keep             leave the data folders in place (their path is printed)
  --quick            2000 changes per setting, a checkpoint every 200 (CI)";

/// Nodes in the group.
const NODES: u64 = 3;
/// Changes between two samples (progress line, plot point).
const SAMPLE: u64 = 100;
/// `compact_after` for "compaction off": far above any log this bench writes, and far
/// enough below `u64::MAX` that `first index + compact_after` cannot overflow.
const NEVER: u64 = 1 << 62;
/// How long one change may take before it counts as failed (then the bench finds the
/// leader again and goes on).
const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    On,
    Off,
}

impl Setting {
    fn name(self) -> &'static str {
        match self {
            Setting::On => "on",
            Setting::Off => "off",
        }
    }

    fn compact_after(self) -> u64 {
        match self {
            Setting::On => Config::builder(1).build().compact_after,
            Setting::Off => NEVER,
        }
    }

    fn label(self) -> String {
        match self {
            Setting::On => format!("compaction on (compact_after {})", self.compact_after()),
            Setting::Off => "compaction off".into(),
        }
    }
}

struct Options {
    changes: u64,
    every: u64,
    settings: Vec<Setting>,
    dir: Option<PathBuf>,
    keep: bool,
}

fn parse() -> Result<Options, String> {
    let mut changes = None;
    let mut every = None;
    let mut quick = false;
    let mut settings = vec![Setting::On, Setting::Off];
    let mut dir = None;
    let mut keep = false;
    let args = support::args();
    let mut it = args.iter();
    let number = |flag: &str, v: String| {
        v.replace('_', "")
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or(format!("{flag}: {v:?} is not a positive number"))
    };
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--changes" => changes = Some(number(a, val()?)?),
            "--every" => every = Some(number(a, val()?)?),
            "--compaction" => {
                settings = match val()?.as_str() {
                    "on" => vec![Setting::On],
                    "off" => vec![Setting::Off],
                    "both" => vec![Setting::On, Setting::Off],
                    other => return Err(format!("--compaction: {other:?} (on, off, both)")),
                }
            }
            "--no-compaction" => settings = vec![Setting::Off],
            "--dir" => dir = Some(PathBuf::from(val()?)),
            "--keep" => keep = true,
            "--quick" => quick = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let changes = changes.unwrap_or(if quick { 2_000 } else { 100_000 });
    let every = every.unwrap_or((changes / 10).max(1));
    Ok(Options {
        changes,
        every,
        settings,
        dir,
        keep,
    })
}

/// The files of one or more data folders, as a user sees them.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    /// Apparent size: the sum of file lengths.
    bytes: u64,
    /// Allocated size (`du`): blocks × 512.
    allocated: u64,
    /// RocksDB table files (`*.sst`).
    sst: u64,
    /// RocksDB write-ahead log (`*.log`).
    wal: u64,
    /// `MANIFEST-*`.
    manifest: u64,
    /// RocksDB's info log (`LOG`, `LOG.old.*`).
    info_log: u64,
    /// Everything else (`OPTIONS-*`, `CURRENT`, `IDENTITY`, `LOCK`).
    other: u64,
    files: u64,
}

impl Usage {
    /// Walks `dir`. Files RocksDB deletes during the walk are skipped.
    fn of(dir: &Path) -> Usage {
        let mut u = Usage::default();
        u.walk(dir);
        u
    }

    fn walk(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                self.walk(&e.path());
                continue;
            }
            let len = meta.len();
            self.bytes += len;
            self.allocated += meta.blocks() * 512;
            self.files += 1;
            let name = e.file_name();
            let name = name.to_string_lossy();
            let slot = if name.ends_with(".sst") {
                &mut self.sst
            } else if name.ends_with(".log") {
                &mut self.wal
            } else if name.starts_with("MANIFEST-") {
                &mut self.manifest
            } else if name.starts_with("LOG") {
                &mut self.info_log
            } else {
                &mut self.other
            };
            *slot += len;
        }
    }

    fn add(&mut self, o: &Usage) {
        self.bytes += o.bytes;
        self.allocated += o.allocated;
        self.sst += o.sst;
        self.wal += o.wal;
        self.manifest += o.manifest;
        self.info_log += o.info_log;
        self.other += o.other;
        self.files += o.files;
    }

    /// MANIFEST, info log and the rest.
    fn meta(&self) -> u64 {
        self.manifest + self.info_log + self.other
    }
}

/// One node's part of a [`Point`].
#[derive(Debug, Clone)]
struct NodePoint {
    /// Its data folder.
    usage: Usage,
    /// Its Raft log's first and last index.
    span: Option<(u64, u64)>,
}

/// One measurement of the group.
#[derive(Debug, Clone)]
struct Point {
    changes: u64,
    secs: f64,
    /// Node 1, 2, 3.
    nodes: Vec<NodePoint>,
    total: Usage,
    rss: u64,
    term: u64,
}

impl Point {
    /// The longest log among the nodes, in entries.
    fn max_log(&self) -> u64 {
        self.nodes
            .iter()
            .filter_map(|n| n.span)
            .map(|(first, last)| (last + 1).saturating_sub(first))
            .max()
            .unwrap_or(0)
    }
}

/// What one setting's run produced.
struct Run {
    setting: Setting,
    checkpoints: Vec<Point>,
    samples: Vec<Point>,
    /// The folders once the nodes stopped and each store was opened and closed again.
    reopened: Option<Vec<(NodeId, Usage)>>,
    secs: f64,
    failures: Vec<String>,
    /// Changes whose transfer call reported an error although leadership moved.
    slow: usize,
    first_term: u64,
}

impl Run {
    fn peak(&self) -> Option<&Point> {
        self.samples.iter().max_by_key(|p| p.total.bytes)
    }
    fn rate(&self) -> f64 {
        let last = self.checkpoints.last().map_or(0, |p| p.changes);
        last as f64 / self.secs.max(1e-9)
    }
}

struct Group {
    root: PathBuf,
    nodes: Vec<(NodeId, Node)>,
}

impl Group {
    async fn start(root: &Path, compact_after: u64) -> Group {
        let ids: Vec<NodeId> = (1..=NODES).collect();
        tenure::transport::tls::write_cluster_certs(root.join("certs"), ids.iter().copied())
            .expect("write certificates");
        // Bind them all at once so no two get the same port, then release them.
        let socks: Vec<std::net::UdpSocket> = ids
            .iter()
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").expect("free UDP port"))
            .collect();
        let peers: Vec<(NodeId, std::net::SocketAddr)> = ids
            .iter()
            .zip(&socks)
            .map(|(id, s)| (*id, s.local_addr().expect("local addr")))
            .collect();
        drop(socks);
        // A new group each run, founded explicitly by all of its first members.
        let group = tenure::GroupId::random();
        let mut nodes = Vec::new();
        for id in ids {
            let config = Config::builder(id)
                .peers(peers.iter().copied())
                .data_dir(Group::data_dir_in(root, id))
                .tls_dir(root.join("certs"))
                .timing(Timing::fast())
                .compact_after(compact_after)
                .found(group)
                .build();
            let node = Node::start(config)
                .await
                .unwrap_or_else(|e| panic!("node {id} does not start: {e}"));
            nodes.push((id, node));
        }
        Group {
            root: root.to_path_buf(),
            nodes,
        }
    }

    fn data_dir_in(root: &Path, id: NodeId) -> PathBuf {
        root.join(format!("data-{id}"))
    }

    fn node(&self, id: NodeId) -> &Node {
        &self
            .nodes
            .iter()
            .find(|(i, _)| *i == id)
            .expect("a member")
            .1
    }

    /// The node that leads in the highest term, once there is one.
    async fn leader(&self, timeout: Duration) -> Option<NodeId> {
        let deadline = Instant::now() + timeout;
        loop {
            let best = self
                .nodes
                .iter()
                .map(|(id, n)| (*id, n.leadership()))
                .filter(|(_, l)| l.role == Role::Leader)
                .max_by_key(|(_, l)| l.term);
            if let Some((id, _)) = best {
                return Some(id);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until `id` leads and has applied the history record of its term; its term.
    async fn recorded(&self, id: NodeId, timeout: Duration) -> Result<u64, String> {
        let deadline = Instant::now() + timeout;
        let node = self.node(id);
        loop {
            let l = node.leadership();
            if l.role == Role::Leader {
                let h = node.history().await.map_err(|e| e.to_string())?;
                if h.last().is_some_and(|r| r.term == l.term && r.leader == id) {
                    return Ok(l.term);
                }
            } else if l.term > 0 && l.leader.is_some_and(|x| x != id) {
                return Err(format!("node {id} lost leadership to {:?}", l.leader));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "node {id} did not record its tenure in {timeout:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// One change: `leader`, whose recorded tenure is `term`, hands over to the next
    /// node. The new leader's id and recorded term, and the transfer's error if it
    /// reported one although leadership moved (raft-rs went on with a transfer tenure had
    /// given up on after two election timeouts). An error when no new tenure was recorded.
    async fn change(
        &self,
        leader: NodeId,
        term: u64,
    ) -> Result<(NodeId, u64, Option<String>), String> {
        let to = leader % NODES + 1;
        let t = self.node(leader).transfer_leadership(Some(to));
        let why = match tokio::time::timeout(PATIENCE, t).await {
            Ok(Ok(new)) => {
                let t = self.recorded(new, PATIENCE).await?;
                return Ok((new, t, None));
            }
            Ok(Err(e)) => format!("transfer {leader} → {to}: {e}"),
            Err(_) => format!("transfer {leader} → {to}: no answer in {PATIENCE:?}"),
        };
        // Let the election the transfer may have started finish, then see who leads.
        tokio::time::sleep(Timing::fast().election_timeout() * 4).await;
        let new = self
            .leader(PATIENCE)
            .await
            .ok_or(format!("{why}; then no leader for {PATIENCE:?}"))?;
        let t = self
            .recorded(new, PATIENCE)
            .await
            .map_err(|e| format!("{why}; then {e}"))?;
        if t > term {
            Ok((new, t, Some(why)))
        } else {
            Err(why)
        }
    }

    async fn measure(&self, changes: u64, started: Instant) -> Point {
        let mut nodes = Vec::new();
        let mut total = Usage::default();
        let mut term = 0;
        for (id, n) in &self.nodes {
            let u = Usage::of(&Group::data_dir_in(&self.root, *id));
            total.add(&u);
            term = term.max(n.leadership().term);
            nodes.push(NodePoint {
                usage: u,
                span: n.log_span().await.ok(),
            });
        }
        Point {
            changes,
            secs: started.elapsed().as_secs_f64(),
            nodes,
            total,
            rss: rss(),
            term,
        }
    }

    async fn stop(self) {
        for (_, n) in &self.nodes {
            n.kill().await;
        }
    }
}

/// This process's resident set size in bytes (`VmRSS`).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The file system `path` lies on, from `/proc/mounts` (longest mount point prefix).
fn fs_type(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && path.starts_with(f[1])).then(|| (f[1].len(), f[2].to_string()))
        })
        .max()
        .map_or_else(|| "unknown".into(), |(_, t)| t)
}

fn mib(b: u64) -> String {
    format!("{:.2}", b as f64 / (1024.0 * 1024.0))
}

fn hms(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

async fn run(setting: Setting, o: &Options, root: &Path) -> Run {
    let group = Group::start(root, setting.compact_after()).await;
    let mut failures = Vec::new();
    let mut leader = group
        .leader(Duration::from_secs(30))
        .await
        .expect("the group elects a first leader");
    let first_term = match group.recorded(leader, PATIENCE).await {
        Ok(t) => t,
        Err(e) => panic!("the first leader does not record its tenure: {e}"),
    };
    let started = Instant::now();
    let mut checkpoints = vec![group.measure(0, started).await];
    let mut samples = checkpoints.clone();
    // On a terminal the line is rewritten every sample; in a log, one line per 2% or so.
    let mut progress = Progress::new((o.changes / 50).next_multiple_of(SAMPLE) as usize);
    let (mut window_at, mut window_k) = (Instant::now(), 0u64);
    let mut rate = 0.0;
    let mut k = 0;
    let mut term = first_term;
    let mut slow = 0;
    let mut in_a_row = 0;
    while k < o.changes {
        match group.change(leader, term).await {
            Ok((new, t, note)) => {
                (leader, term, in_a_row) = (new, t, 0);
                slow += usize::from(note.is_some());
            }
            Err(e) => {
                progress.finish();
                eprintln!("disk {}: change {}: {e}", setting.name(), k + 1);
                failures.push(format!("change {}: {e}", k + 1));
                in_a_row += 1;
                if in_a_row > 20 {
                    eprintln!(
                        "disk {}: 20 failed changes in a row, giving up",
                        setting.name()
                    );
                    break;
                }
                let Some(l) = group.leader(Duration::from_secs(30)).await else {
                    failures.push("no leader for 30 s".into());
                    break;
                };
                match group.recorded(l, PATIENCE).await {
                    Ok(t) => (leader, term) = (l, t),
                    Err(e) => failures.push(format!("after change {}: {e}", k + 1)),
                }
                // Not counted: the next change tries again.
                continue;
            }
        }
        k += 1;
        let checkpoint = k.is_multiple_of(o.every) || k == o.changes;
        if k.is_multiple_of(SAMPLE) || checkpoint {
            let p = group.measure(k, started).await;
            let now = Instant::now();
            if now >= window_at + Duration::from_secs(2) || k == o.changes {
                rate = (k - window_k) as f64 / (now - window_at).as_secs_f64();
                (window_at, window_k) = (now, k);
            }
            let avg = k as f64 / p.secs.max(1e-9);
            progress.update(
                k as usize,
                o.changes as usize,
                &format!(
                    "changes, compaction {}: {rate:.0}/s (mean {avg:.0}/s), ETA {}, \
                     term {}, disk {} MiB (WAL {}, SST {}), longest log {} entries",
                    setting.name(),
                    hms((o.changes - k) as f64 / avg.max(1e-9)),
                    p.term,
                    mib(p.total.bytes),
                    mib(p.total.wal),
                    mib(p.total.sst),
                    p.max_log(),
                ),
            );
            if checkpoint {
                checkpoints.push(p.clone());
            }
            samples.push(p);
        }
    }
    progress.finish();
    let secs = started.elapsed().as_secs_f64();
    group.stop().await;
    // What a restart sees: RocksDB replays the WAL into a table file on open.
    let mut reopened = Some(Vec::new());
    for id in 1..=NODES {
        let dir = Group::data_dir_in(root, id);
        match RocksStore::open(&dir) {
            Ok(store) => drop(store),
            Err(e) => {
                eprintln!("disk {}: reopening node {id}: {e}", setting.name());
                reopened = None;
                break;
            }
        }
        if let Some(r) = &mut reopened {
            r.push((id, Usage::of(&dir)));
        }
    }
    Run {
        setting,
        checkpoints,
        samples,
        reopened,
        secs,
        failures,
        slow,
        first_term,
    }
}

fn report(o: &Options, runs: &[Run], machine: &str, place: &str, took: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n# disk: data folders of a {NODES}-node group over {} leadership changes",
        o.changes
    );
    let _ = writeln!(out, "machine: {machine}");
    let _ = writeln!(out, "data folders: {place}");
    let t = Timing::fast();
    let _ = writeln!(
        out,
        "timing: Timing::fast() ({} ms ticks, heartbeat {} ticks, election {}-{} ticks)",
        t.tick.as_millis(),
        t.heartbeat_ticks,
        t.election_ticks,
        t.election_ticks_max
    );
    let _ = writeln!(
        out,
        "run: {:.0} s, load at end {}",
        took.as_secs_f64(),
        support::load()
    );
    let _ = writeln!(
        out,
        "MiB = 2^20 bytes; sizes are apparent (file lengths) unless marked du (allocated).\n"
    );
    for r in runs {
        let _ = writeln!(out, "## {}", r.setting.label());
        let mut header: Vec<String> = vec!["changes".into(), "s".into(), "changes/s".into()];
        header.extend((1..=NODES).map(|i| format!("node {i}")));
        header
            .extend(["total", "du", "SST", "WAL", "other", "log", "term", "RSS"].map(String::from));
        let mut rows = Vec::new();
        let mut prev: Option<&Point> = None;
        for p in &r.checkpoints {
            let rate = prev.map_or(String::from("-"), |q| {
                format!(
                    "{:.0}",
                    (p.changes - q.changes) as f64 / (p.secs - q.secs).max(1e-9)
                )
            });
            let mut row = vec![p.changes.to_string(), format!("{:.0}", p.secs), rate];
            row.extend(p.nodes.iter().map(|n| mib(n.usage.bytes)));
            row.extend([
                mib(p.total.bytes),
                mib(p.total.allocated),
                mib(p.total.sst),
                mib(p.total.wal),
                mib(p.total.meta()),
                p.max_log().to_string(),
                p.term.to_string(),
                mib(p.rss),
            ]);
            rows.push(row);
            prev = Some(p);
        }
        let h: Vec<&str> = header.iter().map(String::as_str).collect();
        out.push_str(&table(&h, &rows));
        if let Some(re) = &r.reopened {
            let mut total = Usage::default();
            for (_, u) in re {
                total.add(u);
            }
            let _ = writeln!(
                out,
                "after stopping and reopening each store: {} MiB (du {}; SST {}, WAL {}, other {}); per node {}",
                mib(total.bytes),
                mib(total.allocated),
                mib(total.sst),
                mib(total.wal),
                mib(total.meta()),
                re.iter()
                    .map(|(_, u)| mib(u.bytes))
                    .collect::<Vec<_>>()
                    .join(" / ")
            );
        }
        if let Some(p) = r.peak() {
            let _ = writeln!(
                out,
                "peak of the samples (every {SAMPLE} changes): {} MiB (du {}) at change {} (WAL {}, SST {})",
                mib(p.total.bytes),
                mib(p.total.allocated),
                p.changes,
                mib(p.total.wal),
                mib(p.total.sst)
            );
        }
        let done = r.checkpoints.last().map_or(0, |p| p.changes);
        let last_term = r.checkpoints.last().map_or(0, |p| p.term);
        let _ = writeln!(
            out,
            "{done} changes in {:.0} s ({:.0} changes/s); terms {} → {} ({} beyond one per change); \
             {} changes whose transfer call timed out but leadership moved; {} failed attempts (not counted)",
            r.secs,
            r.rate(),
            r.first_term,
            last_term,
            (last_term - r.first_term).saturating_sub(done),
            r.slow,
            r.failures.len()
        );
        for f in r.failures.iter().take(10) {
            let _ = writeln!(out, "  {f}");
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "node N, total, SST, WAL, other: MiB of the data folders (other: MANIFEST, RocksDB's info LOG, OPTIONS, …).\n\
         du: allocated size. log: the longest Raft log among the nodes, in entries. RSS: this whole process (3 nodes)."
    );
    out
}

fn csv(runs: &[Run], samples: bool) -> String {
    let mut out = String::from("compaction,changes,secs");
    for i in 1..=NODES {
        let _ = write!(out, ",node{i}_bytes,node{i}_log_first,node{i}_log_last");
    }
    out.push_str(
        ",total_bytes,total_allocated,sst_bytes,wal_bytes,manifest_bytes,info_log_bytes,\
         other_bytes,files,max_log_entries,term,rss_bytes\n",
    );
    for r in runs {
        let points = if samples { &r.samples } else { &r.checkpoints };
        for p in points {
            let _ = write!(out, "{},{},{:.3}", r.setting.name(), p.changes, p.secs);
            for n in &p.nodes {
                let (f, l) = n.span.map_or((String::new(), String::new()), |(f, l)| {
                    (f.to_string(), l.to_string())
                });
                let _ = write!(out, ",{},{f},{l}", n.usage.bytes);
            }
            let t = &p.total;
            let _ = writeln!(
                out,
                ",{},{},{},{},{},{},{},{},{},{},{}",
                t.bytes,
                t.allocated,
                t.sst,
                t.wal,
                t.manifest,
                t.info_log,
                t.other,
                t.files,
                p.max_log(),
                p.term,
                p.rss
            );
        }
    }
    out
}

/// Disk use (all three folders) against changes, one line per setting, from the samples.
fn chart(o: &Options, runs: &[Run], path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (scale, unit) = if o.changes >= 10_000 {
        (1000.0, "thousand leadership changes")
    } else {
        (1.0, "leadership changes")
    };
    let mut series = Vec::new();
    let mut y_max = 1.0f64;
    for r in runs {
        let points: Vec<(f64, f64)> = r
            .samples
            .iter()
            .map(|p| {
                (
                    p.changes as f64 / scale,
                    p.total.bytes as f64 / (1024.0 * 1024.0),
                )
            })
            .collect();
        y_max = points.iter().map(|p| p.1).fold(y_max, f64::max);
        let end = r.checkpoints.last();
        series.push(plot::Series {
            label: format!(
                "{}: {} MiB after {} changes",
                r.setting.label(),
                end.map_or("-".into(), |p| mib(p.total.bytes)),
                end.map_or(0, |p| p.changes)
            ),
            color: match r.setting {
                Setting::On => plot::COLORS[0],
                Setting::Off => plot::COLORS[1],
            },
            points,
        });
    }
    let x_desc = unit.to_string();
    let frame = plot::Frame {
        title: "Disk use of a 3-node group (all data folders) against leadership changes",
        x_desc: &x_desc,
        y_desc: "MiB on disk (apparent)",
        x_max: plot::nice_max(o.changes as f64 / scale),
        y_max: plot::nice_max(y_max),
        legend: SeriesLabelPosition::UpperLeft,
    };
    plot::lines(&root, &frame, &series)?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("disk: {msg}\n");
            }
            eprintln!("{USAGE}");
            std::process::exit(if msg.is_empty() { 0 } else { 2 });
        }
    };
    let parent = o.dir.clone().unwrap_or_else(support::target_dir);
    let machine = support::machine();
    eprintln!("disk: {machine}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let mut runs = Vec::new();
    let mut place = String::new();
    for &setting in &o.settings {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("tenure-disk-{}-", setting.name()))
            .tempdir_in(&parent)
            .unwrap_or_else(|e| panic!("temporary folder in {}: {e}", parent.display()));
        place = format!("{} ({})", parent.display(), fs_type(tmp.path()));
        eprintln!(
            "disk: {} changes with {}, folders in {}",
            o.changes,
            setting.label(),
            tmp.path().display()
        );
        runs.push(rt.block_on(run(setting, &o, tmp.path())));
        if o.keep {
            let kept = tmp.keep();
            eprintln!("disk: kept {}", kept.display());
        }
    }
    drop(rt);
    let report = report(&o, &runs, &machine, &place, started.elapsed());
    print!("{report}");
    let dir = support::out_dir();
    support::save("disk.txt", &report);
    support::save("disk.csv", &csv(&runs, false));
    support::save("disk-samples.csv", &csv(&runs, true));
    let svg = dir.join("disk.svg");
    match chart(&o, &runs, &svg) {
        Ok(()) => eprintln!("disk: wrote {}", svg.display()),
        Err(e) => eprintln!("disk: plot failed: {e}"),
    }
    eprintln!(
        "disk: wrote {}, disk.csv and disk-samples.csv there",
        dir.join("disk.txt").display()
    );
    if runs
        .iter()
        .any(|r| r.checkpoints.last().map_or(0, |p| p.changes) < o.changes)
    {
        // The group stopped making progress: a liveness failure, not a figure.
        std::process::exit(1);
    }
}
