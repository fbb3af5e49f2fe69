//! Errors, one enum per operation.
//!
//! Errors a caller can act on ([`LeaseLost`], [`TransferError::NotLeader`]) are kept
//! apart from fatal ones ([`StartError`], [`NodeStopped`]).

use std::path::PathBuf;

use thiserror::Error;

pub use crate::storage::StorageError;
pub use crate::tls::TlsError;
pub use crate::transport::quic::TransportError;

use crate::token::FencingToken;
use crate::transport::NodeId;

/// A configuration that cannot work.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ConfigError {
    /// A term floor or a backup to found from that cannot be used (`docs/design.md`,
    /// section 6, "Disaster recovery"). The message says why.
    #[error("cannot found from this term floor or backup: {0}")]
    Restore(String),
    /// [`Config::history_retention`](crate::Config::history_retention) is above
    /// [`MAX_HISTORY_RETENTION`](crate::config::MAX_HISTORY_RETENTION): the root's
    /// snapshot, which carries the history, would not fit one frame.
    #[error(
        "history_retention {retention} is above {max}: the root's snapshot carries the \
         history and must fit one frame (docs/design.md, section 9)"
    )]
    HistoryRetention {
        /// The retention asked for.
        retention: usize,
        /// The most allowed.
        max: usize,
    },
    /// Node id 0 is reserved by raft-rs. Fix: number nodes from 1.
    #[error("node id must not be 0 (raft reserves it); number nodes from 1")]
    ZeroId,
    /// This node's id is not in the peer list. Fix: list every member, this node included.
    #[error(
        "node id {id} is not in the peer list {peers:?}; list every member, this node included"
    )]
    SelfNotInPeers {
        /// This node's id.
        id: NodeId,
        /// The ids that were listed.
        peers: Vec<NodeId>,
    },
    /// A peer entry is unusable.
    #[error("peer {id}: {reason}")]
    InvalidPeer {
        /// The peer's id.
        id: NodeId,
        /// What is wrong.
        reason: String,
    },
    /// A `--peers` style list did not parse.
    #[error("peer list entry {input:?}: {reason}")]
    PeerSyntax {
        /// The offending part.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// The timing cannot elect reliably.
    #[error("timing: {0}")]
    Timing(String),
    /// [`Node::start`](crate::Node::start) needs a data directory. Fix: set `data_dir`.
    #[error("no data directory configured; set Config::data_dir")]
    NoDataDir,
    /// [`Node::start`](crate::Node::start) needs TLS files. Fix: set `tls`.
    #[error("no TLS identity configured; set Config::tls (e.g. a folder from `cargo run --example certs`)")]
    NoTls,
    /// [`Config::found`](crate::Config::found) and [`Config::join`](crate::Config::join)
    /// both set. Fix: a node founds a new group or joins an existing one, not both.
    #[error("found and join are both set: a node founds a new group or joins an existing one")]
    FoundAndJoin,
    /// [`Config::found`](crate::Config::found) and [`Config::group`](crate::Config::group)
    /// name different groups. Fix: give one id.
    #[error("found names group {found} but group names {group}")]
    GroupMismatch {
        /// The group to found.
        found: crate::GroupId,
        /// The group to belong to.
        group: crate::GroupId,
    },
    /// The TLS certificate names another node than `id`.
    #[error("the TLS certificate names node {cert_id}, but this node is configured as {id}")]
    IdentityMismatch {
        /// The configured id.
        id: NodeId,
        /// The id in the certificate.
        cert_id: NodeId,
    },
}

/// Why a node could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// The data directory could not be opened.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// The TLS files could not be loaded.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The QUIC endpoint could not start.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// raft-rs refused the stored state or the configuration.
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// The data directory holds no store, and the node was told neither to found a group
    /// nor to join one. A node never creates a store on its own: a member whose folder
    /// was lost must not come back as a voter that forgot its vote and log.
    #[error("no tenure store in {path}: node {id} was not told to found a group (Config::found, worker --found) or to join one (Config::join, worker --join). If node {id} was a member and its data folder was lost, it must not return as that member: replace it by a new node id that joins (README: a replacement machine)")]
    NoStore {
        /// The data directory.
        path: PathBuf,
        /// This node.
        id: NodeId,
    },
    /// The store was created (by a founding or joining start) but holds no group yet, and
    /// the node was told neither to found nor to join. Fix: start it as it was first
    /// started (`found` or `join`).
    #[error("the store in {path} holds no group yet (a founding or joining start did not finish): start node {id} with found or join, as it was first started")]
    NotFounded {
        /// The data directory.
        path: PathBuf,
        /// This node.
        id: NodeId,
    },
    /// The store belongs to another node: a data directory copied or mounted from
    /// another machine. Fix: give each node its own data directory.
    #[error("the data directory {path} belongs to node {stored}, not to node {id}: each node needs its own data directory (was it copied from node {stored}?)")]
    WrongNode {
        /// The data directory.
        path: PathBuf,
        /// The node the store was created for.
        stored: NodeId,
        /// This node.
        id: NodeId,
    },
    /// The store belongs to another group than the configured one. Fix: check the data
    /// directory and the group id.
    #[error("the data directory {path} belongs to group {stored}, but node {id} is configured for group {expected}: a data folder of another group, or the wrong group id")]
    WrongGroup {
        /// The data directory.
        path: PathBuf,
        /// This node.
        id: NodeId,
        /// The group in the store.
        stored: crate::GroupId,
        /// The configured group.
        expected: crate::GroupId,
    },
    /// The stored membership does not contain this node.
    #[error("the data directory {path} holds a group whose members {members:?} do not include node {id} (a new node joining a group needs Config::join / --join and an empty data directory)")]
    NotAMember {
        /// The data directory.
        path: PathBuf,
        /// This node.
        id: NodeId,
        /// The stored voters and learners.
        members: Vec<NodeId>,
    },
}

/// Why a lease ended. Every `Lease` of the tenure sees the same reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// No ReadIndex round was acknowledged by a quorum in time: the lease ran out.
    Expired,
    /// The node saw a higher term (another node is campaigning or leads).
    TermChanged,
    /// raft-rs stepped this node down.
    SteppedDown,
    /// This node is handing leadership over (transfer or shutdown).
    HandedOver,
    /// The node shut down.
    Shutdown,
    /// The node stopped on a fatal error (e.g. its disk failed).
    Failed,
    /// The named election was removed from the group's catalog.
    Removed,
    /// An operator suspended the named election: no lease of it is held until it is
    /// resumed, and the first lease after that is in a new term.
    Suspended,
}

impl LostReason {
    /// A short lowercase name, stable for logs and events.
    pub fn as_str(&self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::TermChanged => "term_changed",
            LostReason::SteppedDown => "stepped_down",
            LostReason::HandedOver => "handed_over",
            LostReason::Shutdown => "shutdown",
            LostReason::Failed => "failed",
            LostReason::Removed => "removed",
            LostReason::Suspended => "suspended",
        }
    }
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The lease is gone: stop acting with its token.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
#[error("lease with token {token} lost: {reason}")]
pub struct LeaseLost {
    /// The token of the lost lease.
    pub token: FencingToken,
    /// Why it was lost.
    pub reason: LostReason,
}

/// The node has stopped; nothing more can be done with it.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("the tenure node has stopped: {reason}")]
pub struct NodeStopped {
    /// Why it stopped ("shutdown", or the fatal error), for people.
    pub reason: String,
    /// Why it stopped, for code: match on it.
    pub cause: StopCause,
}

impl NodeStopped {
    /// A stop for `cause`, its `reason` the cause's message.
    pub fn new(cause: StopCause) -> NodeStopped {
        NodeStopped {
            reason: cause.to_string(),
            cause,
        }
    }

    /// The node was shut down or killed (or is on its way out): `reason` says which.
    pub(crate) fn shutdown(reason: &str) -> NodeStopped {
        NodeStopped {
            reason: reason.to_string(),
            cause: StopCause::Shutdown,
        }
    }

    /// Whether the node stopped on a fatal error (not a shutdown).
    pub fn is_fatal(&self) -> bool {
        self.cause != StopCause::Shutdown
    }
}

/// Why a node stopped ([`NodeStopped::cause`]).
///
/// Every cause but [`Shutdown`](Self::Shutdown) is fatal: the node stopped by itself, its
/// leases were revoked (with [`LostReason::Failed`]), and it must not be restarted on the
/// same state before the cause is understood.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopCause {
    /// Shut down, killed, or every handle was dropped: not an error.
    #[error("the node has stopped")]
    Shutdown,
    /// The store failed (disk error, corruption).
    #[error("storage failed: {0}")]
    Storage(StorageError),
    /// A write to the store failed with an I/O error (a failed fsync, a full disk, a
    /// device error) during `operation`. Whether it reached the disk is unknown, and after
    /// a failed fsync the kernel may have dropped the pages it could not write while
    /// reporting them clean, so a retry could report success for data that is not on
    /// disk (Rebello et al., "Can applications recover from fsync failures?", ATC '20).
    /// Nothing retries it: the node stops for good, and every later write of this run is
    /// refused with the same error (`docs/design.md`, section 15).
    ///
    /// Fix: check the disk (`dmesg`, free space). Restarting the node is safe: it drops the
    /// store's files from the page cache before it opens them, so it recovers from what the
    /// disk holds, and the write that failed was never acknowledged to anyone.
    #[error("a store write failed while {operation}: {error}; the node stopped for good (a failed write is never retried); restart it once the disk is checked")]
    WriteFailed {
        /// What the driver was writing, e.g. "writing one turn's Ready (3 groups)".
        operation: String,
        /// The store's error, with the path and the underlying message.
        error: StorageError,
    },
    /// The transport closed underneath the driver: nothing could reach the node any more.
    #[error("transport closed")]
    TransportClosed,
    /// The leader of `term` told this node that it holds entries up to `commit`, which a
    /// leader only says of entries this node acknowledged, but this node's log ends at
    /// `last_index`: the node lost entries it had acknowledged (its data directory was
    /// lost, replaced or rolled back while it ran or while it was down). A node that
    /// forgets what it acknowledged can make the group lose committed entries.
    ///
    /// Fix: do not restart it on this data. Remove it from the group, wipe its data
    /// directory and add it again as a new member, so it catches up from the others.
    #[error("this node lost entries it had acknowledged: node {leader}, leader of term {term}, says it holds entries up to index {commit}, but its log ends at index {last_index} (its data was lost, replaced or rolled back); remove it from the group and add it again with an empty data directory")]
    LostAcknowledgedData {
        /// The leader that said so.
        leader: NodeId,
        /// The leader's term.
        term: u64,
        /// The commit index the leader sent.
        commit: u64,
        /// This node's last index.
        last_index: u64,
    },
    /// This node holds no store (or an empty one it was started with to join), but the
    /// group already counts on a vote and a log of it: a member's store has moved on
    /// since founding, or the leader's first snapshot names this node a voter. Its data
    /// folder was lost; a member that forgot its vote and log must not return as a voter.
    ///
    /// Fix: do not start this node id on this folder again. Replace it by a new node id
    /// that joins the group (README: a replacement machine), then remove the old id.
    #[error("{detail}")]
    LostData {
        /// What showed it, for people.
        detail: String,
    },
    /// raft-rs panicked (it asserts its invariants by panicking): the driver stopped at
    /// once and never used its raft state again. A bug in tenure or raft-rs, or input
    /// that tenure's checks ([`peer_input`](crate::peer_input)) did not foresee: report
    /// it with the node's log.
    #[error("raft-rs panicked while {during}: {message}")]
    RaftPanicked {
        /// What the driver was doing, e.g. "stepping MsgAppend from node 3 (term 7)".
        during: String,
        /// The panic's message.
        message: String,
    },
    /// The driver task itself ended abnormally (panicked outside raft-rs, or was
    /// cancelled).
    #[error("driver task failed: {0}")]
    DriverTask(String),
}

/// Why a leadership transfer did not happen.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TransferError {
    /// Only the leader can transfer. Fix: ask the leader (hint: `leader_hint`).
    #[error("this node is not the leader (leader: {leader_hint:?})")]
    NotLeader {
        /// The leader this node knows of, if any.
        leader_hint: Option<NodeId>,
    },
    /// The target is not a voting member.
    #[error("node {0} is not a voting member of the group")]
    UnknownNode(NodeId),
    /// The target is this node, which already leads.
    #[error("node {0} already leads")]
    AlreadyLeader(NodeId),
    /// No follower to hand over to (a group of one).
    #[error("no follower to transfer leadership to")]
    NoCandidate,
    /// The target is drained: an operator asked that it never lead. Fix: undrain it
    /// first, or pick another node.
    #[error("node {0} is drained and may not lead (undrain it first)")]
    Drained(NodeId),
    /// The target did not take over within an election timeout (it may be down, stalled
    /// or behind). If this node had already asked it to campaign (`MsgTimeoutNow`), it
    /// has stepped down into the next term, and the group elects a leader anew (it holds
    /// no lease in the term of a failed handover again; docs/design.md, section 4).
    /// Otherwise it may still lead.
    #[error("node {to} did not take over within {timeout_ms} ms")]
    TimedOut {
        /// The target.
        to: NodeId,
        /// How long we waited.
        timeout_ms: u64,
    },
    /// The node stopped.
    #[error(transparent)]
    Stopped(#[from] NodeStopped),
}

/// Why a membership change (or a drain) was not carried out.
///
/// The messages are meant for operators: they say what is wrong and what to do.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MembershipError {
    /// Only the leader changes the group. Fix: ask the leader (hint: `leader_hint`).
    #[error("this node is not the leader ({})", match .leader_hint { Some(l) => format!("the leader is node {l}"), None => "no leader is known: the group may have lost its quorum".into() })]
    NotLeader {
        /// The leader this node knows of, if any.
        leader_hint: Option<NodeId>,
    },
    /// Another membership change has not finished yet (one is proposed but not applied,
    /// or the group is still in a joint configuration). Fix: wait and retry.
    #[error("another membership change is still in flight; wait until it is applied and retry")]
    ChangeInFlight,
    /// The node is not a member of the group.
    #[error("node {0} is not a member of the group")]
    UnknownNode(NodeId),
    /// The node to add is a member already.
    #[error("node {0} is already a member of the group")]
    AlreadyMember(NodeId),
    /// The node to add was removed from the group (or replaced) before: its id is never
    /// admitted again, and every member refuses its certificate. Fix: give the machine a
    /// new id and a certificate for it (`certs renew --node NEW`), start it with
    /// `--join`, and add that id.
    #[error("node {0} was removed from the group and is never admitted again; give the machine a new id and certificate")]
    RemovedNode(NodeId),
    /// Only a learner can be promoted (add it first with `add_learner`).
    #[error("node {0} is not a learner (add it as a learner first)")]
    NotALearner(NodeId),
    /// The learner has not caught up with the log yet. Fix: wait until it has (it must be
    /// running and reachable) and retry.
    #[error("learner {id} is behind: it has {matched} of {commit} committed entries; wait until it has caught up")]
    LearnerBehind {
        /// The learner.
        id: NodeId,
        /// The last index it acknowledged.
        matched: u64,
        /// The leader's commit index.
        commit: u64,
    },
    /// The change would leave the group unable to work: no voter left, fewer voters
    /// reachable than a quorum of the new group, or no voter that may lead.
    #[error("refused: {reason}")]
    WouldLoseQuorum {
        /// What would go wrong.
        reason: String,
    },
    /// This leader does not reach a quorum of the group now (it will step down if that
    /// lasts an election timeout), so nothing can be committed. Fix: restore the lost
    /// nodes or links, then retry.
    #[error("no quorum: this leader reaches {reachable} of the voters {voters:?}, and needs a majority (of both configurations while a joint change is in flight)")]
    NoQuorum {
        /// Voters heard from recently, this node included.
        reachable: usize,
        /// The voters.
        voters: Vec<NodeId>,
    },
    /// The change was proposed but did not take effect in time (the group may have lost
    /// its quorum, or leadership moved). It may still take effect later: check `status`.
    #[error("{what} did not take effect in time; check the group's status")]
    TimedOut {
        /// What was asked.
        what: String,
    },
    /// The node stopped.
    #[error(transparent)]
    Stopped(#[from] NodeStopped),
}
