//! What `Node` handles ask of the driver, and how each request is answered.

use std::net::SocketAddr;

use tokio::sync::oneshot;

use super::{Driver, PendingTransfer, StopKind};
use crate::error::{MembershipError, NodeStopped, TransferError};
use crate::history::TenureRecord;
use crate::lease::Lease;
use crate::status::{Membership, Status};
use crate::storage::RaftStore;
use crate::transport::NodeId;

/// Requests from `Node` handles to the driver (a `Lease`'s confirms have a channel of
/// their own, [`ConfirmRequest`](crate::lease::ConfirmRequest)).
pub(crate) enum Command {
    /// Resolve with a lease once this node holds a confirmed one.
    Lease { reply: oneshot::Sender<Lease> },
    /// Hand leadership over.
    Transfer {
        to: Option<NodeId>,
        reply: oneshot::Sender<Result<NodeId, TransferError>>,
    },
    /// Hand over if leading, then stop.
    Shutdown { reply: oneshot::Sender<()> },
    /// Stop at once, as if the process died (no handover).
    Kill { reply: oneshot::Sender<()> },
    /// The replicated leadership history as this node has applied it.
    History {
        reply: oneshot::Sender<Vec<TenureRecord>>,
    },
    /// The log's first and last index (for tests of compaction).
    #[cfg(feature = "testing")]
    LogSpan { reply: oneshot::Sender<(u64, u64)> },
    /// Role, term, membership, health.
    Status { reply: oneshot::Sender<Status> },
    /// Change the membership or drain a node (leader only).
    ChangeMembers {
        change: MemberChange,
        reply: oneshot::Sender<Result<Membership, MembershipError>>,
    },
}

/// A change an operator asks for.
#[derive(Debug, Clone)]
pub(crate) enum MemberChange {
    AddLearner(NodeId, SocketAddr),
    Promote(NodeId),
    Remove(NodeId),
    Replace {
        old: NodeId,
        new: NodeId,
        /// The group stays joint until a leader leaves explicitly (a test hook).
        explicit: bool,
    },
    Drain(NodeId, bool),
}

impl<S: RaftStore> Driver<S> {
    pub(super) fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Lease { reply } => {
                if let Some(lease) = self.current_lease() {
                    let _ = reply.send(lease);
                } else {
                    self.lease_waiters.push(reply);
                }
            }
            Command::Transfer { to, reply } => {
                if self.shutdown.is_some() {
                    let _ = reply.send(Err(TransferError::Stopped(NodeStopped::shutdown(
                        "shutting down",
                    ))));
                    return;
                }
                match self.start_transfer(to) {
                    Ok(target) => {
                        self.transfer = Some(PendingTransfer {
                            to: target,
                            deadline: self.clock.now() + self.timing.election_timeout() * 2,
                            reply: Some(reply),
                        });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Command::Shutdown { reply } => self.begin_shutdown(Some(reply)),
            Command::Kill { reply } => self.stop = Some(StopKind::Killed(reply)),
            Command::History { reply } => {
                let _ = reply.send(self.state.history.records());
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Command::ChangeMembers { change, reply } => {
                let now = self.clock.now();
                match self.propose_change(change, now) {
                    Ok(mut pending) => {
                        pending.reply = Some(reply);
                        self.pending_changes.push(pending);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            #[cfg(feature = "testing")]
            Command::LogSpan { reply } => {
                let first = self.store.first_index().unwrap_or(0);
                let last = self.store.last_index().unwrap_or(0);
                let _ = reply.send((first, last));
            }
        }
    }
}
