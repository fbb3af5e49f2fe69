//! A group of real worker processes (`examples/worker.rs`) for tests: spawn, signal,
//! kill and restart them by PID, and read their JSON events.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Path of the worker example binary, building it if `cargo test` did not (it builds
/// examples only when no test filter is given).
pub fn worker_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test exe path");
            // target/<profile>/deps/<test> → target/<profile>/examples/worker
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("target dir")
                .to_path_buf();
            let bin = profile_dir.join("examples").join("worker");
            // A plain `cargo test` has just built the examples: use the binary when it is
            // newer than every source it is built from. Otherwise (a filtered run such as
            // `cargo test --test settlement`) ask cargo to build it.
            if bin.exists() && newer_than_sources(&bin) {
                return bin;
            }
            let mut args = vec!["build", "--example", "worker"];
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                args.push("--release");
            }
            let status = nested_cargo()
                .args(&args)
                .stdout(Stdio::null())
                .status()
                .expect("run cargo build --example worker");
            assert!(status.success(), "cargo build --example worker failed");
            assert!(bin.exists(), "worker binary not found at {}", bin.display());
            bin
        })
        .clone()
}

/// `cargo`, to run from a test, in the package folder.
///
/// The test runs with the package's cargo variables set; ring's build script reruns when
/// CARGO_MANIFEST_DIR changes, so none of them is passed on, or the nested build rebuilds
/// half the dependency tree.
pub fn nested_cargo() -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    for (k, _) in std::env::vars_os() {
        let key = k.to_string_lossy().into_owned();
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || key.starts_with("CARGO_BIN_")
            || key.starts_with("CARGO_CRATE_")
            || key == "CARGO_PRIMARY_PACKAGE"
            || key == "CARGO_TARGET_TMPDIR"
        {
            cmd.env_remove(&k);
        }
    }
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
    cmd
}

/// Whether `bin` is newer than Cargo.toml and every file under src/ and examples/.
fn newer_than_sources(bin: &Path) -> bool {
    fn newest(dir: &Path, acc: &mut std::time::SystemTime) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                newest(&p, acc);
            } else if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
                *acc = (*acc).max(m);
            }
        }
    }
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut newest_src = std::fs::metadata(root.join("Cargo.toml"))
        .and_then(|m| m.modified())
        .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
    newest(&root.join("src"), &mut newest_src);
    newest(&root.join("examples"), &mut newest_src);
    built > newest_src
}

/// One event line with when the harness received it.
#[derive(Debug, Clone)]
pub struct Ev {
    pub node: u64,
    pub event: String,
    pub v: Value,
    pub at: Instant,
}

impl Ev {
    pub fn term(&self) -> Option<u64> {
        self.v.get("term").and_then(Value::as_u64)
    }
    pub fn u64(&self, key: &str) -> Option<u64> {
        self.v.get(key).and_then(Value::as_u64)
    }
}

pub struct Group {
    pub dir: tempfile::TempDir,
    pub ids: Vec<u64>,
    pub addrs: BTreeMap<u64, String>,
    pub children: BTreeMap<u64, Child>,
    pub events: Arc<Mutex<Vec<Ev>>>,
    pub ledger: Option<PathBuf>,
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
            children: BTreeMap::new(),
            events: Arc::new(Mutex::new(Vec::new())),
            ledger,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            group: tenure::GroupId::random().to_string(),
        };
        for id in ids {
            g.spawn(id);
        }
        g
    }

    pub fn spawn(&mut self, id: u64) {
        let peers = self
            .addrs
            .iter()
            .map(|(i, a)| format!("{i}={a}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = Command::new(worker_binary());
        cmd.args([
            "--id",
            &id.to_string(),
            "--listen",
            &self.addrs[&id],
            "--peers",
            &peers,
        ])
        .arg("--data-dir")
        .arg(self.dir.path().join(format!("data-{id}")))
        .arg("--certs")
        .arg(self.dir.path().join("certs"))
        .args(["--log-level", "off"])
        .args(&self.extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        if !self.extra.iter().any(|a| a == "--join") {
            cmd.args(["--found", &self.group]);
        }
        if let Some(l) = &self.ledger {
            cmd.arg("--ledger").arg(l);
        }
        let mut child = cmd.spawn().expect("spawn worker");
        let out = child.stdout.take().expect("stdout");
        let events = self.events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let event = v
                        .get("event")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    let node = v.get("node").and_then(Value::as_u64).unwrap_or(0);
                    events.lock().unwrap().push(Ev {
                        node,
                        event,
                        v,
                        at: Instant::now(),
                    });
                }
            }
        });
        self.children.insert(id, child);
    }

    pub fn signal(&self, id: u64, sig: i32) {
        let pid = self.children[&id].id() as i32;
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig})");
    }

    /// Waits until worker `id` exits by itself; its exit code (`None`: killed by a
    /// signal). Panics after `timeout`.
    pub fn wait_exit(&mut self, id: u64, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let child = self.children.get_mut(&id).expect("a spawned worker");
        loop {
            if let Some(status) = child.try_wait().expect("wait for a worker") {
                self.children.remove(&id);
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "worker {id} did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut c) = self.children.remove(&id) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

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
        let e = self.wait_event("a lease holder", timeout, |e| e.event == "lease_acquired");
        let evs = self.events();
        // The most recent acquisition wins.
        let last = evs
            .iter()
            .rev()
            .find(|e| e.event == "lease_acquired")
            .unwrap_or(&e);
        (last.node, last.term().unwrap_or(0))
    }

    pub fn stop(&mut self) {
        let ids: Vec<u64> = self.children.keys().copied().collect();
        for id in &ids {
            self.signal(*id, libc::SIGCONT);
            self.signal(*id, libc::SIGTERM);
        }
        for id in ids {
            if let Some(mut c) = self.children.remove(&id) {
                let deadline = Instant::now() + Duration::from_secs(5);
                loop {
                    match c.try_wait() {
                        Ok(Some(_)) => break,
                        _ if Instant::now() > deadline => {
                            let _ = c.kill();
                            let _ = c.wait();
                            break;
                        }
                        _ => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.children) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
