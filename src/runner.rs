//! Leader-only work: run a task only while this node holds a confirmed lease.
//!
//! The shape of client-go's `OnStartedLeading` / `OnStoppedLeading`, with the fencing
//! token attached: at each tenure the task is started with the [`Lease`]; the moment the
//! lease is lost the task is cancelled (its future is dropped at its next `.await`), the
//! stop callback runs, and the runner waits for the next tenure.
//!
//! ```no_run
//! # async fn demo(node: tenure::Node) {
//! use tenure::runner::LeaderTask;
//!
//! let handle = LeaderTask::new(node)
//!     .on_started(|token| println!("leading with token {token}"))
//!     .on_stopped(|token, reason| println!("stopped leading {token}: {reason}"))
//!     .spawn(|lease| async move {
//!         loop {
//!             let Ok(token) = lease.confirm().await else { return };
//!             // settle one batch with `token` …
//!             tokio::time::sleep(std::time::Duration::from_secs(1)).await;
//!         }
//!     });
//! // … later
//! handle.stop().await;
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::LostReason;
use crate::lease::{FencingToken, Lease};
use crate::node::Node;

type StartedFn = Arc<dyn Fn(FencingToken) + Send + Sync>;
type StoppedFn = Arc<dyn Fn(FencingToken, LostReason) + Send + Sync>;

/// Builds a leader-only task runner for a [`Node`].
pub struct LeaderTask {
    node: Node,
    started: Option<StartedFn>,
    stopped: Option<StoppedFn>,
}

impl LeaderTask {
    /// A runner for `node`.
    pub fn new(node: Node) -> Self {
        LeaderTask {
            node,
            started: None,
            stopped: None,
        }
    }

    /// Called when a tenure begins, before the task starts.
    pub fn on_started(mut self, f: impl Fn(FencingToken) + Send + Sync + 'static) -> Self {
        self.started = Some(Arc::new(f));
        self
    }

    /// Called when a tenure ends, after the task was cancelled.
    pub fn on_stopped(
        mut self,
        f: impl Fn(FencingToken, LostReason) + Send + Sync + 'static,
    ) -> Self {
        self.stopped = Some(Arc::new(f));
        self
    }

    /// Starts the runner: `task` runs once per tenure with its lease. If the task returns
    /// while the lease still holds, the runner waits for the tenure to end before it can
    /// start again.
    pub fn spawn<F, Fut>(self, task: F) -> LeaderTaskHandle
    where
        F: Fn(Lease) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let stop2 = stop.clone();
        let LeaderTask {
            node,
            started,
            stopped,
        } = self;
        let join = tokio::spawn(async move {
            loop {
                let lease = tokio::select! {
                    _ = stop2.cancelled() => return,
                    l = node.lease() => match l {
                        Ok(l) => l,
                        Err(_) => return,
                    },
                };
                let token = lease.token();
                if let Some(f) = &started {
                    f(token);
                }
                let mut work = tokio::spawn(task(lease.clone()));
                let mut finished = false;
                let reason = tokio::select! {
                    r = lease.lost() => r,
                    _ = stop2.cancelled() => LostReason::Shutdown,
                    _ = &mut work => {
                        // Finished early: the tenure continues until lost (or stop).
                        finished = true;
                        tokio::select! {
                            r = lease.lost() => r,
                            _ = stop2.cancelled() => LostReason::Shutdown,
                        }
                    }
                };
                if !finished {
                    work.abort();
                    let _ = work.await;
                }
                if let Some(f) = &stopped {
                    f(token, reason);
                }
                if stop2.is_cancelled() {
                    return;
                }
            }
        });
        LeaderTaskHandle { stop, join }
    }
}

/// Controls a running [`LeaderTask`].
pub struct LeaderTaskHandle {
    stop: CancellationToken,
    join: JoinHandle<()>,
}

impl LeaderTaskHandle {
    /// Cancels the current task (if any), runs the stop callback, and ends the runner.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.join.await;
    }

    /// Whether the runner has ended (stopped, or the node stopped).
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}
