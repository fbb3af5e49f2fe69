//! A group of real worker processes (`tenure-worker`) for tests: spawn, signal,
//! kill and restart them by PID, and read their JSON events. Built on the kit: the
//! command line is a [`WorkerCommand`], the events are the kit's [`Event`]s.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use super::kit::binary::nested_cargo;
use super::kit::children::Children;
use super::kit::command::WorkerCommand;
use super::kit::event::{read_events, Event};

/// One event line, with when the harness received it (`at`).
pub type Ev = Event;

/// Path of the worker, `tenure-worker`, of this test's profile (and, under the mutations
/// feature, built with it).
pub fn worker_binary() -> PathBuf {
    super::kit::binary::worker()
}

/// Worker processes of one group on loopback, their events gathered as they print them.
pub struct Group {
    /// Certificates, data folders and the ledger.
    pub dir: tempfile::TempDir,
    /// The workers' ids.
    pub ids: Vec<u64>,
    /// Each worker's address.
    pub addrs: BTreeMap<u64, String>,
    /// The running workers (killed when the group is dropped).
    pub children: Children,
    /// Every event the workers printed, in the order read.
    pub events: Arc<Mutex<Vec<Ev>>>,
    /// The ledger the workers settle into, if they do.
    pub ledger: Option<PathBuf>,
    /// Arguments every worker start adds.
    pub extra: Vec<String>,
    /// The group the first workers found: every start passes `--found`, as a unit file
    /// would (but for nodes started with `--join`).
    pub group: String,
}

impl Group {
    /// Starts `n` workers; with `ledger`, they settle the ledger at that path.
    pub fn start(n: u64, ledger: Option<PathBuf>, extra: &[&str]) -> Group {
        let dir = tempfile::tempdir().expect("temp dir");
        let ids: Vec<u64> = (1..=n).collect();
        tenure::transport::tls::write_cluster_certs(dir.path().join("certs"), ids.iter().copied())
            .expect("certs");
        let addrs = ids
            .iter()
            .map(|id| {
                let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("free port");
                (*id, s.local_addr().expect("addr").to_string())
            })
            .collect();
        let mut g = Group {
            dir,
            ids: ids.clone(),
            addrs,
            children: Children::new(),
            events: Arc::new(Mutex::new(Vec::new())),
            ledger,
            extra: extra.iter().map(std::string::ToString::to_string).collect(),
            group: tenure::GroupId::random().to_string(),
        };
        for id in ids {
            g.spawn(id);
        }
        g
    }

    /// Starts worker `id` (again, after it stopped) on its data folder.
    pub fn spawn(&mut self, id: u64) {
        let mut cmd = WorkerCommand::new(worker_binary())
            .id(id)
            .listen(&self.addrs[&id])
            .peers(&self.addrs)
            .data_dir(self.dir.path().join(format!("data-{id}")))
            .certs(self.dir.path().join("certs"))
            .log_level("off");
        if !self.extra.iter().any(|a| a == "--join") {
            cmd = cmd.found(&self.group);
        }
        if let Some(l) = &self.ledger {
            cmd = cmd.ledger(l);
        }
        let mut child = cmd
            .args(&self.extra)
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker");
        let out = child.stdout.take().expect("stdout");
        let events = self.events.clone();
        read_events(out, move |e| events.lock().unwrap().push(e));
        self.children.insert(id, child);
    }

    /// Sends `sig` to worker `id`.
    pub fn signal(&self, id: u64, sig: i32) {
        let pid = self.children.pid(id).expect("a running worker");
        assert!(self.children.signal(id, sig), "kill({pid}, {sig})");
    }

    /// Waits until worker `id` exits by itself; its exit code (`None`: killed by a
    /// signal). Panics after `timeout`.
    pub fn wait_exit(&mut self, id: u64, timeout: Duration) -> Option<i32> {
        assert!(self.children.contains(id), "worker {id} was not spawned");
        match self.children.wait(id, timeout) {
            Some(status) => status.code(),
            None => panic!("worker {id} did not exit within {timeout:?}"),
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self, id: u64) {
        self.children.kill(id);
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Ev> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until an event matching `f` arrived (among all so far); returns it.
    pub fn wait_event(&self, what: &str, timeout: Duration, f: impl Fn(&Ev) -> bool) -> Ev {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events.lock().unwrap().iter().find(|e| f(e)) {
                return e.clone();
            }
            if Instant::now() >= deadline {
                let tail: Vec<String> = self
                    .events()
                    .iter()
                    .rev()
                    .take(25)
                    .rev()
                    .map(|e| format!("  node {} {} {}", e.node, e.event, e.v))
                    .collect();
                panic!(
                    "timed out after {timeout:?} waiting for {what}; last events:\n{}",
                    tail.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The node currently holding a lease (its last lease event is an acquisition).
    pub fn leaseholder(&self, timeout: Duration) -> (u64, u64) {
        // The root election's leases only (named elections' events carry their name).
        let e = self.wait_event("a lease holder", timeout, |e| {
            e.event == "lease_acquired" && e.is_root()
        });
        let evs = self.events();
        // The most recent acquisition wins.
        let last = evs
            .iter()
            .rev()
            .find(|e| e.event == "lease_acquired" && e.is_root())
            .unwrap_or(&e);
        (last.node, last.term().unwrap_or(0))
    }

    /// SIGCONT and SIGTERM to every worker; SIGKILL what still runs after 5 s.
    pub fn stop(&mut self) {
        self.children.stop_all(Duration::from_secs(5));
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Before the temporary folder (a field) goes.
        self.children.kill_all();
    }
}
