//! What `Node` handles ask of the driver, and how each request is answered.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::{Driver, PendingTransfer, StopKind};
use crate::election::{ElectionError, ElectionInfo, ElectionOptions, Removed};
use crate::error::{MembershipError, NodeStopped, TransferError};
use crate::history::TenureRecord;
use crate::lease::Lease;
use crate::status::{Membership, Status};
use crate::storage::RaftStore;
use crate::transport::{NodeId, PeerAddr};

/// Requests from `Node` handles to the driver (a `Lease`'s confirms have a channel of
/// their own, [`ConfirmRequest`](crate::lease::ConfirmRequest)).
pub(crate) enum Command {
    /// Resolve with a lease once this node holds a confirmed one.
    Lease {
        reply: oneshot::Sender<Result<Lease, ElectionError>>,
    },
    /// A lease of a named election.
    ElectionLease {
        name: Arc<str>,
        reply: oneshot::Sender<Result<Lease, ElectionError>>,
    },
    /// Hand a named election's leadership over.
    ElectionTransfer {
        name: Arc<str>,
        to: Option<NodeId>,
        reply: oneshot::Sender<Result<NodeId, TransferError>>,
    },
    /// A named election's history.
    ElectionHistory {
        name: Arc<str>,
        reply: oneshot::Sender<Result<Vec<TenureRecord>, ElectionError>>,
    },
    /// Create a named election (root leader only).
    CreateElection {
        name: String,
        options: ElectionOptions,
        reply: oneshot::Sender<Result<ElectionInfo, ElectionError>>,
    },
    /// Remove a named election (root leader only).
    RemoveElection {
        name: String,
        reply: oneshot::Sender<Result<Removed, ElectionError>>,
    },
    /// Suspend (`suspended`) or resume a named election (root leader only).
    SuspendElection {
        name: String,
        suspended: bool,
        reply: oneshot::Sender<Result<ElectionInfo, ElectionError>>,
    },
    /// The catalog of named elections, as this node applied it.
    Elections {
        reply: oneshot::Sender<Vec<ElectionInfo>>,
    },
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
    /// A backup of the replicated state (disaster recovery).
    Backup {
        reply: oneshot::Sender<Result<crate::backup::Backup, String>>,
    },
    /// Change the membership or drain a node (leader only).
    ChangeMembers {
        change: MemberChange,
        reply: oneshot::Sender<Result<Membership, MembershipError>>,
    },
}

/// A change an operator asks for.
#[derive(Debug, Clone)]
pub(crate) enum MemberChange {
    AddLearner(NodeId, PeerAddr),
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
                    let _ = reply.send(Ok(lease));
                } else {
                    self.root.lease_waiters.push(reply);
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
                        self.root.transfer = Some(PendingTransfer {
                            to: target,
                            deadline: self.env.clock.now() + self.env.timing.election_timeout() * 2,
                            reply: Some(reply),
                        });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Command::ElectionLease { name, reply } => self.election_lease(name, reply),
            Command::ElectionTransfer { name, to, reply } => {
                self.election_transfer(&name, to, reply);
            }
            Command::ElectionHistory { name, reply } => {
                let _ = reply.send(self.election_history(&name));
            }
            Command::CreateElection {
                name,
                options,
                reply,
            } => self.create_election(&name, options, reply),
            Command::RemoveElection { name, reply } => self.remove_election(&name, reply),
            Command::SuspendElection {
                name,
                suspended,
                reply,
            } => self.suspend_election(&name, suspended, reply),
            Command::Elections { reply } => {
                let _ = reply.send(self.catalog());
            }
            Command::Shutdown { reply } => self.begin_shutdown(Some(reply)),
            Command::Kill { reply } => self.stop = Some(StopKind::Killed(reply)),
            Command::History { reply } => {
                let _ = reply.send(self.state.history.records());
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Command::Backup { reply } => {
                let _ = reply.send(self.backup());
            }
            Command::ChangeMembers { change, reply } => {
                let now = self.env.clock.now();
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
                let first = self.root.store.first_index().unwrap_or(0);
                let last = self.root.store.last_index().unwrap_or(0);
                let _ = reply.send((first, last));
            }
        }
    }
}
