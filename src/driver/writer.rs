//! The store writer: the driver's synced writes run on a thread of their own, so that a
//! stalled disk holds up neither the driver's turns nor anything else on the runtime
//! (`docs/design.md`, sections 2 and 15).
//!
//! A turn's Ready batch the driver hands over with [`Writer::submit`] (one at a time:
//! the driver holds the next one's writes meanwhile) and waits for it at most half the
//! stall bound ([`Writer::wait_for_batch`]: a healthy disk answers well within that);
//! its end comes back on a channel, in order. The other writes of a store
//! whose writes wait on a device ([`RaftStore::blocks_on_io`]: compactions, an election's
//! store created or removed) run on the same thread behind the batches, and the driver
//! waits for them ([`Writer::store_write`]): one that comes back within
//! [`HAND_OFF_AFTER`] cost the runtime's worker thread that long, as any turn's work does;
//! one that takes longer is waited for off the runtime (on a multi-thread runtime the
//! worker hands its other tasks and its place to another thread: tokio's
//! `block_in_place`), so that only the driver's turn waits for the disk. (A
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

/// A batch's end, as the writer reports it to the driver ([`Writer::submit`]).
pub(super) struct Done {
    /// The batch's sequence number.
    pub(super) seq: u64,
    /// How it ended (a panic of the store is raised in the driver).
    result: std::thread::Result<Result<(), StorageError>>,
    /// How long the write itself took.
    took: Duration,
}

/// Where the driver hears of its batches' ends: each is sent here, and then `ready` is
/// notified (the driver's loop waits on it; a write that came back within
/// [`HAND_OFF_AFTER`] the driver takes at once, without it).
pub(super) struct DoneRx {
    pub(super) rx: mpsc::Receiver<Done>,
    pub(super) ready: std::sync::Arc<tokio::sync::Notify>,
}

/// A batch handed to the writer and not yet reported back.
struct Outstanding {
    seq: u64,
    /// When its write began and ended on the writer thread (set there): time it spent
    /// queued behind other writes, or done while the driver had not yet looked, is no
    /// stall of the disk.
    times: std::sync::Arc<WriteTimes>,
    operation: String,
    /// It waits on a device: its time counts towards a stall.
    timed: bool,
    /// A stall was named for it while it was out.
    named: bool,
}

/// When a batch's write began and ended (set on the writer thread).
#[derive(Default)]
struct WriteTimes {
    began: std::sync::OnceLock<Instant>,
    ended: std::sync::OnceLock<Instant>,
}

/// The writer thread of one driver (started at its first write; it ends when the driver
/// drops this), the latch of a failed write, and the disk's health: a synced write
/// slower than the bound is a stall, and probes find its end (`docs/design.md`, section
/// 15).
pub(super) struct Writer {
    jobs: std::sync::OnceLock<Option<mpsc::Sender<Job>>>,
    disk: std::cell::RefCell<Disk>,
    /// The batches handed over and not yet reported, oldest first (one writer thread:
    /// they end in this order).
    outstanding: std::cell::RefCell<std::collections::VecDeque<Outstanding>>,
    done_tx: mpsc::Sender<Done>,
    done_ready: std::sync::Arc<tokio::sync::Notify>,
    /// The latch of a failed write: the first write that failed with an I/O error (what
    /// was written, and the error), set where it failed (the writer thread), so that every
    /// write queued behind it is refused there with that error, before the driver has
    /// heard of the failure: nothing is written after a failed sync.
    fuse: Fuse,
}

/// The latch of a failed write ([`Writer`]'s `fuse`).
type Fuse = std::sync::Arc<std::sync::Mutex<Option<(String, StorageError)>>>;

fn blown(fuse: &Fuse) -> std::sync::MutexGuard<'_, Option<(String, StorageError)>> {
    fuse.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `f`, the write `operation`, unless `fuse` is blown (then its error, and `f` never
/// runs); an I/O error of `f` blows it.
fn fused<T>(
    fuse: &Fuse,
    operation: impl FnOnce() -> String,
    f: impl FnOnce() -> Result<T, StorageError>,
) -> Result<T, StorageError> {
    if let Some((_, e)) = blown(fuse).as_ref() {
        return Err(e.clone());
    }
    let out = f();
    if let Err(e @ StorageError::Io { .. }) = &out {
        blown(fuse).get_or_insert_with(|| (operation(), e.clone()));
    }
    out
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
        Writer::new(crate::config::Timing::lan().disk_stall_bound()).0
    }
}

/// A probe's write, named in the stop cause if it fails.
const PROBING: &str = "probing a stalled disk (a synced write of nothing)";

impl Writer {
    /// A writer whose synced writes stall past `bound`, and where the ends of the
    /// batches handed to it come ([`Writer::submit`]).
    pub(super) fn new(bound: Duration) -> (Self, DoneRx) {
        let (done_tx, rx) = mpsc::channel();
        let ready = std::sync::Arc::new(tokio::sync::Notify::new());
        let done_rx = DoneRx {
            rx,
            ready: std::sync::Arc::clone(&ready),
        };
        let writer = Writer {
            outstanding: Default::default(),
            done_tx,
            done_ready: ready,
            fuse: Fuse::default(),
            jobs: std::sync::OnceLock::new(),
            disk: std::cell::RefCell::new(Disk {
                bound,
                health: DiskHealth::Healthy,
                changed: false,
                probe: None,
                probed_at: None,
            }),
        };
        (writer, done_rx)
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
        if let Some((_, e)) = blown(&self.fuse).as_ref() {
            return Err(e.clone());
        }
        let handle = store.clone();
        let timed = synced && store.blocks_on_io();
        let fuse = std::sync::Arc::clone(&self.fuse);
        // Named before it runs: its name goes with it to the writer thread.
        let what = operation();
        let named = what.clone();
        let (out, took) = self.write(timed, move || {
            let start = Instant::now();
            let out = fused(&fuse, || named, || f(handle));
            (out, start.elapsed())
        });
        if out.is_ok() && timed {
            self.disk.borrow_mut().wrote(took, || what);
        }
        out
    }

    /// Hands batch `seq`, a write of `store` (`f`, given a handle of it), to the writer
    /// and returns at once (`docs/design.md`, section 15, "The driver does not wait for
    /// the disk"): its end comes on the channel [`Writer::new`] gave, and goes
    /// to [`Writer::completed`]. Batches end in the order they were handed over, after
    /// every write handed over before them. A store whose writes do not wait on a device
    /// ([`RaftStore::blocks_on_io`]: in memory) writes in place, and its end still comes
    /// on the channel (the driver hears of it in its next turn, as it would of a disk's).
    /// Refused, with that error, once a write failed for good.
    pub(super) fn submit<S: RaftStore>(
        &self,
        store: &S,
        seq: u64,
        operation: String,
        f: impl FnOnce(S) -> Result<(), StorageError> + Send + 'static,
    ) -> Result<(), StorageError> {
        if let Some((_, e)) = blown(&self.fuse).as_ref() {
            return Err(e.clone());
        }
        let handle = store.clone();
        let timed = store.blocks_on_io();
        let named = operation.clone();
        let done = self.done_tx.clone();
        let ready = std::sync::Arc::clone(&self.done_ready);
        let fuse = std::sync::Arc::clone(&self.fuse);
        let times = std::sync::Arc::new(WriteTimes::default());
        let at = std::sync::Arc::clone(&times);
        let job = move || {
            let start = Instant::now();
            let _ = at.began.set(start);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fused(&fuse, || named, || f(handle))
            }));
            let took = start.elapsed();
            let _ = at.ended.set(Instant::now());
            // The driver may be gone (it stopped); nothing waits for this then.
            let _ = done.send(Done { seq, result, took });
            ready.notify_one();
        };
        self.outstanding.borrow_mut().push_back(Outstanding {
            seq,
            times,
            operation,
            timed,
            named: false,
        });
        self.run(timed, Box::new(job));
        Ok(())
    }

    /// How long the driver waits for a batch it just handed over, if it is the only one
    /// out and waits on a device (else zero): half the stall bound. A write that comes
    /// back within that completes its pass in the same turn, as when the driver waited for
    /// every write (a turn of thousands of elections can be long, and their
    /// acknowledgements must not wait for it to end: at 10,000 elections that let leases
    /// lapse faster than rounds came back); one that takes longer is a stall in the
    /// making, and the driver goes on without it. (Waiting 5 ms or not at all cost
    /// messages at rest and `Safe` confirms there: `docs/design.md`, section 15.)
    pub(super) fn wait_for_batch(&self) -> Duration {
        let out = self.outstanding.borrow();
        if out.len() == 1 && out.front().is_some_and(|b| b.timed) {
            self.disk.borrow().bound / 2
        } else {
            Duration::ZERO
        }
    }

    /// How many batches are out.
    pub(super) fn outstanding(&self) -> usize {
        self.outstanding.borrow().len()
    }

    /// Batch `done` ended: its result. A synced write slower than the bound is a stall
    /// (one that failed with an I/O error latched where it failed). A panic of the store
    /// is raised here, in the driver.
    pub(super) fn completed(&self, done: Done) -> Result<(), StorageError> {
        let batch = self.outstanding.borrow_mut().pop_front();
        debug_assert_eq!(
            batch.as_ref().map(|b| b.seq),
            Some(done.seq),
            "batches end in order"
        );
        let result = done
            .result
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        if let Some(b) = batch.filter(|b| b.timed && result.is_ok()) {
            self.disk.borrow_mut().wrote(done.took, || b.operation);
        }
        result
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
        // A batch whose write has taken longer than the bound so far is a stall while it
        // is out: named now, not when (if ever) it comes back. (Counted from when its
        // write began: a batch queued behind others waits for them, not for a stall.)
        let mut outstanding = self.outstanding.borrow_mut();
        let writing = outstanding
            .iter_mut()
            .find(|b| b.times.ended.get().is_none());
        if let Some(b) = writing {
            let out = b.times.began.get().map_or(Duration::ZERO, Instant::elapsed);
            if b.timed && !b.named && out > disk.bound {
                b.named = true;
                disk.wrote(out, || b.operation.clone());
            }
        }
        drop(outstanding);
        if let Some(rx) = &disk.probe {
            match rx.try_recv() {
                Ok((took, result)) => {
                    disk.probe = None;
                    disk.probed_at = Some(Instant::now());
                    // A failed probe latched where it failed (the fuse).
                    result?;
                    disk.probed(took);
                }
                Err(mpsc::TryRecvError::Empty) => return Ok(()),
                Err(mpsc::TryRecvError::Disconnected) => disk.probe = None,
            }
        }
        let due = disk.probed_at.is_none_or(|t| t.elapsed() >= every);
        if !disk.health.is_stalled() || !due || blown(&self.fuse).is_some() {
            return Ok(());
        }
        let handle = store.clone();
        let (tx, rx) = mpsc::sync_channel(1);
        let fuse = std::sync::Arc::clone(&self.fuse);
        let probe = move || {
            let start = Instant::now();
            // The writer thread outlives a store's panic, as it does in `write`.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fused(&fuse, || PROBING.into(), || handle.probe())
            }))
            .unwrap_or_else(|_| Err(StorageError::invalid("the store's probe panicked")));
            let _ = tx.send((start.elapsed(), result));
        };
        self.run(store.blocks_on_io(), Box::new(probe));
        disk.probe = Some(rx);
        Ok(())
    }

    /// The write that failed for good, if one did: what it was, and the error.
    pub(super) fn failure(&self) -> Option<(String, StorageError)> {
        blown(&self.fuse).clone()
    }

    /// Runs `f`, a write of a store (`blocks`: its writes wait on a device), on the
    /// writer thread, and waits for it as the module says; in place when `blocks` is
    /// false or the thread could not be started. A panic in `f` is raised here.
    fn write<T: Send + 'static>(&self, blocks: bool, f: impl FnOnce() -> T + Send + 'static) -> T {
        if !blocks {
            return f();
        }
        let (done, result) = mpsc::sync_channel(1);
        self.run(
            true,
            Box::new(move || {
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
                let _ = done.send(out);
            }),
        );
        wait_on(&result, None)
            .unwrap_or_else(|| unreachable!("the writer thread answers every job it takes"))
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// Runs `job` on the writer thread when `on_thread` (in place when it is false or the
    /// thread could not be started).
    fn run(&self, on_thread: bool, job: Job) {
        match on_thread.then(|| self.jobs()).flatten() {
            Some(jobs) => {
                // The thread is gone (it cannot be, while this holds the sender): in place.
                if let Err(mpsc::SendError(job)) = jobs.send(job) {
                    job();
                }
            }
            None => job(),
        }
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

/// Waits for the next message on `rx` (a write's end): up to [`HAND_OFF_AFTER`] on the
/// runtime's worker thread, then off the runtime ([`off_runtime`]), in all at most
/// `within` (`None`: until it comes). `None` if none came in time or its sender is gone.
pub(super) fn wait_on<T>(rx: &mpsc::Receiver<T>, within: Option<Duration>) -> Option<T> {
    let first = within.map_or(HAND_OFF_AFTER, |w| w.min(HAND_OFF_AFTER));
    match rx.recv_timeout(first) {
        Ok(out) => return Some(out),
        Err(mpsc::RecvTimeoutError::Disconnected) => return None,
        Err(mpsc::RecvTimeoutError::Timeout) => {}
    }
    match within {
        None => off_runtime(|| rx.recv()).ok(),
        Some(w) if w > first => off_runtime(|| rx.recv_timeout(w - first)).ok(),
        Some(_) => None,
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
    fn a_write_queued_behind_a_failed_one_is_refused_where_it_runs() {
        let fuse = Fuse::default();
        let io = || StorageError::Io {
            path: "/data".into(),
            detail: "fsync: Input/output error".into(),
        };
        let r: Result<(), _> = fused(&fuse, || "writing batch 1".into(), || Err(io()));
        assert_eq!(r, Err(io()));
        // Batch 2 was handed over before the driver heard of batch 1's failure.
        let mut ran = false;
        let r = fused(
            &fuse,
            || "writing batch 2".into(),
            || {
                ran = true;
                Ok(())
            },
        );
        assert_eq!(r, Err(io()), "refused with the first error");
        assert!(!ran, "never written");
        assert_eq!(
            blown(&fuse).clone(),
            Some(("writing batch 1".into(), io())),
            "the latch names the write that failed"
        );
        // An error that is not the disk's (a refused write: nothing written) does not blow it.
        let fuse = Fuse::default();
        let bad: Result<(), _> = fused(&fuse, String::new, || {
            Err(StorageError::InvalidWrite {
                detail: "gap".into(),
            })
        });
        assert!(bad.is_err());
        assert!(blown(&fuse).is_none());
    }

    #[test]
    fn a_slow_write_is_a_stall_that_only_fast_probes_in_a_row_end() {
        let ms = Duration::from_millis;
        let w = Writer::new(ms(50)).0;
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
        let w = Writer::new(Duration::from_millis(50)).0;
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
