//! The store writer: the driver's synced writes run on a thread of their own, so that a
//! stalled disk holds the driver's turn and nothing else (`docs/design.md`, section 2,
//! "The lease's own deadline").
//!
//! The driver hands each write of a store whose writes wait on a device
//! ([`RaftStore::blocks_on_io`](crate::storage::RaftStore::blocks_on_io)) to the writer
//! thread and waits for it. A write that comes back within [`HAND_OFF_AFTER`] (a synced
//! write on a healthy disk: about 2 ms here) cost the runtime's worker thread that long,
//! as any turn's work does. One that takes longer is waited for off the runtime: on a
//! multi-thread runtime the worker hands its other tasks and its place to another
//! thread (tokio's `block_in_place`) and the driver's turn alone waits for the disk. (A
//! `block_in_place` around every write cost 2 points of a core at rest with 10,000
//! elections, and 35 MB, in thread hand-overs; the writer thread costs two thread wakes
//! per write.) Stores in memory write in place.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::status::DiskHealth;
use crate::storage::{RaftStore, StorageError};

/// How long the driver waits for a write on the runtime's worker thread before it hands
/// the thread's other tasks over and waits off the runtime.
pub(super) const HAND_OFF_AFTER: Duration = Duration::from_millis(5);

type Job = Box<dyn FnOnce() + Send>;

/// The writer thread of one driver (started at its first write; it ends when the driver
/// drops this), the latch of a failed write, and the disk's health: a synced write
/// slower than the bound is a stall, and probes find its end (`docs/design.md`, section
/// 15).
pub(super) struct Writer {
    jobs: std::sync::OnceLock<Option<mpsc::Sender<Job>>>,
    /// The first write that failed with an I/O error: what was written, and the error.
    failed: std::cell::RefCell<Option<(String, StorageError)>>,
    disk: std::cell::RefCell<Disk>,
}

/// What the writer knows of the disk.
struct Disk {
    bound: Duration,
    health: DiskHealth,
    /// `health` changed since the driver last took it.
    changed: bool,
    /// The probe in flight: its answer (how long it took, and how it ended).
    probe: Option<mpsc::Receiver<(Duration, Result<(), StorageError>)>>,
    /// When the last probe came back.
    probed_at: Option<Instant>,
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new(crate::config::Timing::lan().disk_stall_bound())
    }
}

/// A probe's write, named in the stop cause if it fails.
const PROBING: &str = "probing a stalled disk (a synced write of nothing)";

impl Writer {
    /// A writer whose synced writes stall past `bound`.
    pub(super) fn new(bound: Duration) -> Self {
        Writer {
            jobs: std::sync::OnceLock::new(),
            failed: std::cell::RefCell::new(None),
            disk: std::cell::RefCell::new(Disk {
                bound,
                health: DiskHealth::Healthy,
                changed: false,
                probe: None,
                probed_at: None,
            }),
        }
    }

    /// Runs one write of `store` (`f`, given a handle of it), and latches a failure: once
    /// a write failed with an I/O error, every later one is refused with that error and
    /// never tried (`docs/design.md`, section 15: a failed fsync is never retried).
    /// `synced`: the write waits for the device, so it runs on the writer thread when
    /// the store's writes do ([`RaftStore::blocks_on_io`]); otherwise in place.
    /// `operation` names the write for the node's stop cause.
    pub(super) fn store_write<S: RaftStore, T: Send + 'static>(
        &self,
        store: &S,
        synced: bool,
        operation: impl FnOnce() -> String,
        f: impl FnOnce(S) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        if let Some((_, e)) = self.failed.borrow().as_ref() {
            return Err(e.clone());
        }
        let handle = store.clone();
        let timed = synced && store.blocks_on_io();
        let (out, took) = self.write(timed, move || {
            let start = Instant::now();
            let out = f(handle);
            (out, start.elapsed())
        });
        if let Err(e @ StorageError::Io { .. }) = &out {
            *self.failed.borrow_mut() = Some((operation(), e.clone()));
        } else if timed {
            self.disk.borrow_mut().wrote(took, operation);
        }
        out
    }

    /// Whether the disk is stalled: this node leads nothing and campaigns in nothing.
    pub(super) fn stalled(&self) -> bool {
        self.disk.borrow().health.is_stalled()
    }

    /// The disk's health, if it changed since the last call.
    pub(super) fn disk_changed(&self) -> Option<DiskHealth> {
        let mut disk = self.disk.borrow_mut();
        std::mem::take(&mut disk.changed).then(|| disk.health.clone())
    }

    /// While the disk is stalled: takes the answer of the probe in flight, and starts
    /// the next probe of `store` once the last came back `every` ago (on the writer
    /// thread, not waited for: the driver goes on meanwhile). A probe that failed
    /// latches like any failed write, and is returned.
    pub(super) fn tend<S: RaftStore>(
        &self,
        store: &S,
        every: Duration,
    ) -> Result<(), StorageError> {
        let mut disk = self.disk.borrow_mut();
        if let Some(rx) = &disk.probe {
            match rx.try_recv() {
                Ok((took, result)) => {
                    disk.probe = None;
                    disk.probed_at = Some(Instant::now());
                    if let Err(e) = result {
                        if matches!(e, StorageError::Io { .. }) {
                            *self.failed.borrow_mut() = Some((PROBING.into(), e.clone()));
                        }
                        return Err(e);
                    }
                    disk.probed(took);
                }
                Err(mpsc::TryRecvError::Empty) => return Ok(()),
                Err(mpsc::TryRecvError::Disconnected) => disk.probe = None,
            }
        }
        let due = disk.probed_at.is_none_or(|t| t.elapsed() >= every);
        if !disk.health.is_stalled() || !due || self.failed.borrow().is_some() {
            return Ok(());
        }
        let handle = store.clone();
        let (tx, rx) = mpsc::sync_channel(1);
        let probe = move || {
            let start = Instant::now();
            // The writer thread outlives a store's panic, as it does in `write`.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.probe()))
                .unwrap_or_else(|_| Err(StorageError::invalid("the store's probe panicked")));
            let _ = tx.send((start.elapsed(), result));
        };
        match store.blocks_on_io().then(|| self.jobs()).flatten() {
            Some(jobs) => {
                if let Err(mpsc::SendError(job)) = jobs.send(Box::new(probe)) {
                    job();
                }
            }
            None => probe(),
        }
        disk.probe = Some(rx);
        Ok(())
    }

    /// The write that failed for good, if one did: what it was, and the error.
    pub(super) fn failure(&self) -> Option<(String, StorageError)> {
        self.failed.borrow().clone()
    }

    /// Runs `f`, a write of a store (`blocks`: its writes wait on a device), on the
    /// writer thread, and waits for it as the module says; in place when `blocks` is
    /// false or the thread could not be started. A panic in `f` is raised here.
    fn write<T: Send + 'static>(&self, blocks: bool, f: impl FnOnce() -> T + Send + 'static) -> T {
        let Some(jobs) = blocks.then(|| self.jobs()).flatten() else {
            return f();
        };
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = done.send(out);
        });
        let out = match jobs.send(job) {
            Ok(()) => match result.recv_timeout(HAND_OFF_AFTER) {
                Ok(out) => Ok(out),
                Err(mpsc::RecvTimeoutError::Timeout) => Err(result),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    unreachable!("the writer thread answers every job it takes")
                }
            },
            // The thread is gone (it cannot be, while this holds the sender): in place.
            Err(mpsc::SendError(job)) => {
                job();
                Err(result)
            }
        };
        let out = match out {
            Ok(out) => out,
            Err(result) => off_runtime(move || result.recv())
                .unwrap_or_else(|_| unreachable!("the writer thread answers every job it takes")),
        };
        out.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    fn jobs(&self) -> Option<&mpsc::Sender<Job>> {
        self.jobs
            .get_or_init(|| {
                let (tx, rx) = mpsc::channel::<Job>();
                std::thread::Builder::new()
                    .name("tenure-store-writer".into())
                    .spawn(move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    })
                    .ok()
                    .map(|_| tx)
            })
            .as_ref()
    }
}

impl Disk {
    /// A synced write (`operation`) took `took`.
    fn wrote(&mut self, took: Duration, operation: impl FnOnce() -> String) {
        if took <= self.bound {
            return;
        }
        let bound = self.bound;
        match &mut self.health {
            // Still stalled: the probes start counting again.
            DiskHealth::Stalled { fast_probes, .. } => *fast_probes = 0,
            health => {
                *health = DiskHealth::Stalled {
                    operation: operation(),
                    took,
                    bound,
                    fast_probes: 0,
                }
            }
        }
        self.changed = true;
    }

    /// A probe came back after `took`.
    fn probed(&mut self, took: Duration) {
        let bound = self.bound;
        let DiskHealth::Stalled { fast_probes, .. } = &mut self.health else {
            return;
        };
        if took > bound {
            *fast_probes = 0;
        } else {
            *fast_probes += 1;
            if *fast_probes >= DiskHealth::PROBES_TO_RECOVER {
                self.health = DiskHealth::Healthy;
            }
        }
        self.changed = true;
    }
}

/// Runs `f` (a wait on the disk) off the runtime's worker threads: on a multi-thread
/// runtime the worker first hands its other tasks to another thread (tokio's
/// `block_in_place`). Elsewhere (a current-thread runtime) `f` runs in place: nothing
/// can run beside it there.
fn off_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_runs_on_the_writer_thread_and_its_panic_is_raised_in_the_driver() {
        let w = Writer::default();
        let name = w.write(true, || std::thread::current().name().map(str::to_owned));
        assert_eq!(name.as_deref(), Some("tenure-store-writer"));
        let here = w.write(false, || std::thread::current().name().map(str::to_owned));
        assert_ne!(here.as_deref(), Some("tenure-store-writer"));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.write(true, || panic!("the store's own assertion"));
        }));
        assert!(panicked.is_err());
        // The thread survives a job's panic.
        assert_eq!(w.write(true, || 7), 7);
    }

    #[test]
    fn a_failed_write_is_never_tried_again() {
        let store = crate::storage::MemStore::new(Default::default());
        let w = Writer::default();
        let io = || StorageError::Io {
            path: "/data".into(),
            detail: "fsync: Input/output error".into(),
        };
        let r: Result<(), _> = w.store_write(
            &store,
            true,
            || "writing one turn's Ready".into(),
            move |_| Err(io()),
        );
        assert_eq!(r, Err(io()));
        let tried = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = std::sync::Arc::clone(&tried);
        let again = w.store_write(
            &store,
            false,
            || "compacting".into(),
            move |_| {
                t.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            },
        );
        assert_eq!(again, Err(io()), "refused with the first error");
        assert!(
            !tried.load(std::sync::atomic::Ordering::SeqCst),
            "never tried"
        );
        assert_eq!(w.failure(), Some(("writing one turn's Ready".into(), io())));
        // A refused write (a bug, nothing written) does not latch.
        let w = Writer::default();
        let bad: Result<(), _> = w.store_write(&store, true, String::new, |_| {
            Err(StorageError::InvalidWrite {
                detail: "gap".into(),
            })
        });
        assert!(bad.is_err());
        assert_eq!(w.failure(), None);
        assert_eq!(w.store_write(&store, true, String::new, |_| Ok(1)), Ok(1));
    }

    #[test]
    fn a_slow_write_is_a_stall_that_only_fast_probes_in_a_row_end() {
        let ms = Duration::from_millis;
        let w = Writer::new(ms(50));
        w.disk.borrow_mut().wrote(ms(50), || "at the bound".into());
        assert_eq!(w.disk_changed(), None, "a write at the bound is no stall");
        w.disk
            .borrow_mut()
            .wrote(ms(80), || "writing one turn's Ready".into());
        let expect = |fast_probes| DiskHealth::Stalled {
            operation: "writing one turn's Ready".into(),
            took: ms(80),
            bound: ms(50),
            fast_probes,
        };
        assert_eq!(w.disk_changed(), Some(expect(0)));
        assert!(w.stalled());
        let mut disk = w.disk.borrow_mut();
        disk.probed(ms(10));
        disk.probed(ms(10));
        assert_eq!(disk.health, expect(2));
        disk.probed(ms(51));
        assert_eq!(
            disk.health,
            expect(0),
            "a slow probe starts the count again"
        );
        disk.probed(ms(10));
        disk.wrote(ms(70), || "another".into());
        assert_eq!(
            disk.health,
            expect(0),
            "so does a slow write; the first is kept"
        );
        disk.probed(ms(10));
        disk.probed(ms(10));
        assert!(disk.health.is_stalled());
        disk.probed(ms(10));
        assert_eq!(disk.health, DiskHealth::Healthy);
        drop(disk);
        assert!(!w.stalled());
    }

    #[test]
    fn a_stalled_writer_probes_its_store_until_the_disk_is_healthy() {
        let store = crate::storage::MemStore::new(Default::default());
        let w = Writer::new(Duration::from_millis(50));
        // Healthy: no probe.
        w.tend(&store, Duration::ZERO).unwrap();
        assert!(w.disk.borrow().probe.is_none());
        w.disk
            .borrow_mut()
            .wrote(Duration::from_secs(1), || "writing".into());
        let mut turns = 0;
        while w.stalled() {
            w.tend(&store, Duration::ZERO).unwrap();
            turns += 1;
            assert!(turns < 100, "the probes of a fast store end the stall");
        }
        // One turn starts a probe, the next takes its answer and starts another.
        assert_eq!(turns, DiskHealth::PROBES_TO_RECOVER + 1);
        assert_eq!(w.disk_changed(), Some(DiskHealth::Healthy));
        w.tend(&store, Duration::ZERO).unwrap();
        assert!(w.disk.borrow().probe.is_none(), "no probe once healthy");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_write_is_waited_for_off_the_runtime() {
        let w = Writer::default();
        // The write ends only when a timer of the runtime has fired: it can only if the
        // runtime goes on while the driver's turn waits for the disk.
        let (fired, heard) = mpsc::channel();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = fired.send(());
        });
        let saw = w.write(true, move || {
            heard.recv_timeout(Duration::from_secs(10)).is_ok()
        });
        assert!(saw, "the timer fired while the write waited");
    }
}
