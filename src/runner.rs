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
//!
//! # Named elections
//!
//! [`LeaderTask::for_elections`] runs one task per named election this node leads
//! (`docs/design.md`, section 11), each with that election's lease, so a worker that
//! leads `shard-3` works on shard 3 under `shard-3`'s token. Elections created later are
//! picked up; a removed one's task is cancelled (its lease is lost with
//! [`LostReason::Removed`]) and its runner ends. Within one election, the task of a
//! tenure is cancelled (through its lease's
//! [`cancellation_token`](Lease::cancellation_token)) before the node asks for the
//! next lease, so a node never runs two tasks of one name at once; across the group,
//! the leases of one name never overlap, and neither do the tasks.
//!
//! ```no_run
//! # async fn demo(node: tenure::Node) {
//! use tenure::runner::LeaderTask;
//!
//! let handle = LeaderTask::for_elections(node)
//!     .on_started(|name, token| println!("leading {name} with token {token}"))
//!     .on_stopped(|name, token, reason| println!("stopped leading {name} {token}: {reason}"))
//!     .spawn(|name, lease| async move {
//!         // One fence per election, keyed by its name (see tenure::fence).
//!         loop {
//!             let Ok(token) = lease.confirm().await else { return };
//!             println!("settling {name}'s shard with token {token}");
//!             tokio::time::sleep(std::time::Duration::from_secs(1)).await;
//!         }
//!     });
//! // … later
//! handle.stop().await;
//! # }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::election::ElectionError;
use crate::error::LostReason;
use crate::lease::{FencingToken, Lease};
use crate::node::Node;

type StartedFn = Arc<dyn Fn(FencingToken) + Send + Sync>;
type StoppedFn = Arc<dyn Fn(FencingToken, LostReason) + Send + Sync>;
type NamedStartedFn = Arc<dyn Fn(&str, FencingToken) + Send + Sync>;
type NamedStoppedFn = Arc<dyn Fn(&str, FencingToken, LostReason) + Send + Sync>;

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

    /// A runner of one task per named election `node` leads (see the [module
    /// docs](self#named-elections)); [`LeaderTask::new`] is the root election's.
    pub fn for_elections(node: Node) -> ElectionTasks {
        ElectionTasks {
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

/// Builds a runner of one leader-only task per named election (see
/// [`LeaderTask::for_elections`]).
pub struct ElectionTasks {
    node: Node,
    started: Option<NamedStartedFn>,
    stopped: Option<NamedStoppedFn>,
}

impl ElectionTasks {
    /// Called with the election's name when one of its tenures begins, before its task
    /// starts.
    pub fn on_started(mut self, f: impl Fn(&str, FencingToken) + Send + Sync + 'static) -> Self {
        self.started = Some(Arc::new(f));
        self
    }

    /// Called with the election's name when one of its tenures ends, after its task was
    /// cancelled.
    pub fn on_stopped(
        mut self,
        f: impl Fn(&str, FencingToken, LostReason) + Send + Sync + 'static,
    ) -> Self {
        self.stopped = Some(Arc::new(f));
        self
    }

    /// Starts the runner: for every named election this node runs, now or later,
    /// `task(name, lease)` runs once per tenure of this node in it, and is cancelled (its
    /// future dropped at its next `.await`) the moment that lease's
    /// [`cancellation_token`](Lease::cancellation_token) fires: the lease was lost, the
    /// election removed, the node stopped. A task that returns early leaves the tenure
    /// to run out before the next can start, as [`LeaderTask::spawn`] does.
    pub fn spawn<F, Fut>(self, task: F) -> LeaderTaskHandle
    where
        F: Fn(Arc<str>, Lease) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let ElectionTasks {
            node,
            started,
            stopped,
        } = self;
        let shared = Arc::new(Shared {
            node,
            started,
            stopped,
            task: Box::new(move |name, lease| Box::pin(task(name, lease))),
        });
        let stop2 = stop.clone();
        let join = tokio::spawn(supervise(shared, stop2));
        LeaderTaskHandle { stop, join }
    }
}

type BoxedTask = Box<
    dyn Fn(Arc<str>, Lease) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync,
>;

struct Shared {
    node: Node,
    started: Option<NamedStartedFn>,
    stopped: Option<NamedStoppedFn>,
    task: BoxedTask,
}

/// Keeps one runner per election in this node's view of the catalog
/// ([`Node::elections`]): starts one for each name that appears, cancels the runner of
/// each name that goes (removed), and ends them all when stopped or the node stops.
async fn supervise(shared: Arc<Shared>, stop: CancellationToken) {
    let mut view = shared.node.elections();
    let mut runners: BTreeMap<String, (CancellationToken, JoinHandle<()>)> = BTreeMap::new();
    loop {
        let names: Vec<String> = view.borrow_and_update().keys().cloned().collect();
        // Runners of removed names (and of runners that ended by themselves) go.
        runners.retain(|name, (cancel, join)| {
            let keep = names.binary_search(name).is_ok() && !join.is_finished();
            if !keep {
                cancel.cancel();
            }
            keep
        });
        for name in names {
            if runners.contains_key(&name) {
                continue;
            }
            let cancel = stop.child_token();
            let join = tokio::spawn(run_election(
                Arc::clone(&shared),
                name.as_str().into(),
                cancel.clone(),
            ));
            runners.insert(name, (cancel, join));
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            changed = view.changed() => if changed.is_err() { break },
        }
    }
    for (_, (cancel, join)) in std::mem::take(&mut runners) {
        cancel.cancel();
        let _ = join.await;
    }
}

/// One election's runner: each time this node holds a lease of `name`, runs the task
/// until the lease is lost (or `cancel`), and only then asks for the next lease.
async fn run_election(shared: Arc<Shared>, name: Arc<str>, cancel: CancellationToken) {
    let election = shared.node.election(&name);
    loop {
        let lease = tokio::select! {
            _ = cancel.cancelled() => return,
            l = election.lease() => match l {
                Ok(l) => l,
                // The name's incarnation was removed: a later one (created again) leads
                // with higher tokens; the supervisor cancels this runner if the name
                // is gone for good.
                Err(ElectionError::Removed(_)) => continue,
                Err(_) => return,
            },
        };
        let token = lease.token();
        if let Some(f) = &shared.started {
            f(&name, token);
        }
        // The task ends the moment the lease's token is cancelled, whoever awaits it.
        let lost = lease.cancellation_token();
        let work = (shared.task)(Arc::clone(&name), lease.clone());
        let mut work = tokio::spawn(async move {
            tokio::select! {
                biased;
                _ = lost.cancelled() => {}
                _ = work => {}
            }
        });
        let mut finished = false;
        let reason = tokio::select! {
            r = lease.lost() => r,
            _ = cancel.cancelled() => LostReason::Shutdown,
            _ = &mut work => {
                // Finished early: the tenure continues until lost (or stopped).
                finished = true;
                tokio::select! {
                    r = lease.lost() => r,
                    _ = cancel.cancelled() => LostReason::Shutdown,
                }
            }
        };
        if !finished {
            // Lost: the task saw its token and ends at once; stopped: it ends here.
            work.abort();
            let _ = work.await;
        }
        if let Some(f) = &shared.stopped {
            f(&name, token, reason);
        }
        if cancel.is_cancelled() {
            return;
        }
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
