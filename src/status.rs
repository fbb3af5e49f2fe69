//! What a node knows of itself and its group: [`Role`], [`Leadership`] (published on
//! every change), [`Membership`] and [`Status`] (for operators). Plain data, shared by the
//! public handle, the driver, founding and the admin endpoint.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// This node's part in the election, as raft-rs sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Follows a leader, or waits for one.
    Follower,
    /// Asking peers whether an election could succeed (pre-vote), without raising the term.
    PreCandidate,
    /// Campaigning in a new term.
    Candidate,
    /// Leads the group in the current term. Act only with a confirmed [`Lease`](crate::Lease).
    Leader,
    /// The node has stopped.
    Stopped,
    /// A non-voting member: it replicates the log but neither votes nor campaigns (until
    /// it is promoted, [`Node::promote`](crate::Node::promote)).
    Learner,
    /// The node was removed from the group: it no longer votes or campaigns. Stop it.
    Removed,
    /// The node started to join a group ([`Config::join`](crate::Config::join)) and waits for a member to add
    /// it and the leader to send it the group's state.
    Joining,
    /// The node founds a group ([`Config::found`](crate::Config::found)) and waits until every first member has
    /// said hello (see [`Config::found`](crate::Config::found)).
    Founding,
}

impl Role {
    /// A short lowercase name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Follower => "follower",
            Role::PreCandidate => "pre_candidate",
            Role::Candidate => "candidate",
            Role::Leader => "leader",
            Role::Stopped => "stopped",
            Role::Learner => "learner",
            Role::Removed => "removed",
            Role::Joining => "joining",
            Role::Founding => "founding",
        }
    }
}

/// A snapshot of who leads, as this node knows it.
///
/// Published through [`Node::watch`](crate::Node::watch) on every change. A `watch` channel keeps the latest
/// value, not every change: a slow reader sees the newest state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The current Raft term at this node.
    pub term: u64,
    /// The leader this node knows of in `term`, or `None` (no leader known).
    pub leader: Option<NodeId>,
    /// This node's role.
    pub role: Role,
    /// Whether this node holds a confirmed lease right now.
    pub leased: bool,
    /// The named election this is the leadership of (`None`: the group's own election).
    pub election: Option<std::sync::Arc<str>>,
    /// An operator suspended the election ([`Node::suspend_election`](crate::Node::suspend_election)):
    /// its Raft group runs, but no lease of it is granted or held until it is resumed
    /// (always `false` for the group's own election).
    pub suspended: bool,
}

/// The group's membership as a node has applied it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The voters (of the incoming configuration while a joint change is in flight).
    pub voters: Vec<NodeId>,
    /// Non-voting members catching up.
    pub learners: Vec<NodeId>,
    /// The voters of the outgoing configuration while a joint change is in flight
    /// (both configurations must agree on every decision then); empty otherwise.
    pub outgoing: Vec<NodeId>,
    /// Members an operator drained: they never campaign and hand over at once if they lead.
    pub drained: Vec<NodeId>,
    /// Where each member listens, as the group was told.
    pub addrs: BTreeMap<NodeId, String>,
}

impl Membership {
    /// Whether `id` votes (in either configuration of a joint change).
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id) || self.outgoing.contains(&id)
    }

    /// Whether `id` is a member at all (voter or learner).
    pub fn contains(&self, id: NodeId) -> bool {
        self.is_voter(id) || self.learners.contains(&id)
    }
}

/// What a node knows about itself and the group, for operators ([`Node::status`](crate::Node::status)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// This node.
    pub id: NodeId,
    /// The current term at this node.
    pub term: u64,
    /// This node's role.
    pub role: Role,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// Whether this node holds a confirmed lease right now.
    pub leased: bool,
    /// The membership this node has applied.
    pub members: Membership,
    /// Leader: a quorum of voters was heard from recently and the lease holds. Follower:
    /// it hears from a leader.
    pub quorum_healthy: bool,
    /// Voters this node reaches (itself included; a follower counts itself and its leader).
    pub peers_reachable: u64,
    /// The commit index of this node's log.
    pub commit: u64,
    /// The last index this node has applied.
    pub applied: u64,
    /// A membership change is proposed but not applied, or a joint configuration is not
    /// left yet: further changes are refused until it finishes.
    pub change_in_flight: bool,
    /// This node's disk is stalled ([`DiskHealth::Stalled`]): it leads nothing and
    /// campaigns in nothing until its probe writes are fast again.
    #[serde(default)]
    pub disk_stalled: bool,
    /// The peers that say their disk is stalled: no election is handed to them until
    /// they say it recovered (or stop saying it for an election timeout).
    #[serde(default)]
    pub peers_disk_stalled: Vec<NodeId>,
}

/// Whether this node's disk keeps up ([`Node::disk`](crate::Node::disk),
/// `docs/design.md`, section 15).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiskHealth {
    /// Every synced write came back within the bound (or the node recovered from a
    /// stall).
    #[default]
    Healthy,
    /// A synced write took longer than the bound
    /// ([`Config::disk_stall_bound`](crate::Config::disk_stall_bound)): this node hands
    /// over every election it leads and campaigns in none until
    /// [`DiskHealth::PROBES_TO_RECOVER`] probe writes in a row came back within the
    /// bound.
    Stalled {
        /// The write that was slow, e.g. "writing one turn's Ready (3 groups)".
        operation: String,
        /// How long it took.
        took: std::time::Duration,
        /// The bound it broke.
        bound: std::time::Duration,
        /// Probe writes in a row that came back within the bound since.
        fast_probes: u32,
    },
}

impl DiskHealth {
    /// How many probe writes in a row must come back within the bound before a stalled
    /// node leads again.
    pub const PROBES_TO_RECOVER: u32 = 3;

    /// Whether the disk is stalled.
    pub fn is_stalled(&self) -> bool {
        matches!(self, DiskHealth::Stalled { .. })
    }
}

impl Status {
    /// The status of a node still founding its group: no term, no membership yet.
    pub(crate) fn founding(id: NodeId) -> Status {
        Status {
            id,
            term: 0,
            role: Role::Founding,
            leader: None,
            leased: false,
            members: Membership::default(),
            quorum_healthy: false,
            peers_reachable: 1,
            commit: 0,
            applied: 0,
            change_in_flight: false,
            disk_stalled: false,
            peers_disk_stalled: Vec::new(),
        }
    }
}
