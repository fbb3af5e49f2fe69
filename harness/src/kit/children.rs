//! Worker processes by node id: signals, kills, reaping and a graceful stop, always by
//! PID (nothing is ever killed by name). Every child still running when the set is
//! dropped (also while a panic unwinds) is SIGKILLed and reaped.

use std::collections::BTreeMap;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// The running worker processes of one launcher, by node id.
#[derive(Debug, Default)]
pub struct Children {
    running: BTreeMap<u64, Child>,
}

impl Children {
    /// No children.
    pub fn new() -> Children {
        Children::default()
    }

    /// Tracks `child` as node `id`'s process; a previous one of `id` is killed and
    /// reaped.
    pub fn insert(&mut self, id: u64, child: Child) {
        if let Some(mut old) = self.running.insert(id, child) {
            let _ = old.kill();
            let _ = old.wait();
        }
    }

    /// Whether node `id` has a process (not yet reaped).
    pub fn contains(&self, id: u64) -> bool {
        self.running.contains_key(&id)
    }

    /// The PID of node `id`'s process.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.running.get(&id).map(Child::id)
    }

    /// The ids that have a process.
    pub fn ids(&self) -> Vec<u64> {
        self.running.keys().copied().collect()
    }

    /// Sends `sig` to node `id`'s process; false when there is none or kill(2) failed.
    pub fn signal(&self, id: u64, sig: i32) -> bool {
        match self.pid(id) {
            // SAFETY: kill(2) on a child we spawned and have not reaped yet.
            Some(pid) => unsafe { libc::kill(pid as i32, sig) == 0 },
            None => false,
        }
    }

    /// SIGKILLs node `id`'s process and reaps it; false when there was none.
    pub fn kill(&mut self, id: u64) -> bool {
        let Some(mut c) = self.running.remove(&id) else {
            return false;
        };
        let _ = c.kill();
        let _ = c.wait();
        true
    }

    /// Waits up to `timeout` for node `id`'s process to exit by itself; its status, the
    /// process reaped. `None` when there is none or it still runs.
    pub fn wait(&mut self, id: u64, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let c = self.running.get_mut(&id)?;
        loop {
            match c.try_wait() {
                Ok(Some(status)) => {
                    self.running.remove(&id);
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                _ => return None,
            }
        }
    }

    /// Waits up to `timeout` for node `id`'s process to exit by itself, then SIGKILLs
    /// it. True when it exited by itself (or there was none).
    pub fn reap(&mut self, id: u64, timeout: Duration) -> bool {
        if !self.contains(id) || self.wait(id, timeout).is_some() {
            return true;
        }
        self.kill(id);
        false
    }

    /// Stops every process gracefully: SIGCONT (a paused one must hear it) and SIGTERM
    /// to all, then waits for them, SIGKILLing what still runs after `grace`.
    pub fn stop_all(&mut self, grace: Duration) {
        let ids = self.ids();
        for id in &ids {
            self.signal(*id, libc::SIGCONT);
            self.signal(*id, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        for id in ids {
            self.reap(id, deadline.saturating_duration_since(Instant::now()));
        }
    }

    /// SIGKILLs and reaps every process (a launcher does this before it removes their
    /// folders).
    pub fn kill_all(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.running) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.kill_all();
    }
}
