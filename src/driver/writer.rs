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
use std::time::Duration;

use crate::storage::{RaftStore, StorageError};

/// How long the driver waits for a write on the runtime's worker thread before it hands
/// the thread's other tasks over and waits off the runtime.
pub(super) const HAND_OFF_AFTER: Duration = Duration::from_millis(5);

type Job = Box<dyn FnOnce() + Send>;

/// The writer thread of one driver (started at its first write; it ends when the driver
/// drops this), and the latch of a failed write.
#[derive(Default)]
pub(super) struct Writer {
    jobs: std::sync::OnceLock<Option<mpsc::Sender<Job>>>,
    /// The first write that failed with an I/O error: what was written, and the error.
    failed: std::cell::RefCell<Option<(String, StorageError)>>,
}

impl Writer {
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
        let out = self.write(synced && store.blocks_on_io(), move || f(handle));
        if let Err(e @ StorageError::Io { .. }) = &out {
            *self.failed.borrow_mut() = Some((operation(), e.clone()));
        }
        out
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
