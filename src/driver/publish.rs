//! What the node tells the world: the published [`Leadership`], the role, health and
//! status for operators and metrics, and each tenure's record in the replicated history.

use raft::StateRole;
use slog::{debug, info, warn};

use super::Driver;
use crate::history::{History, TenureStart};
use crate::status::{Leadership, Role, Status};
use crate::storage::RaftStore;

impl<S: RaftStore> Driver<S> {
    pub(super) fn publish(&mut self) {
        let role = self.role();
        if role != self.last_published.role {
            match role {
                Role::Removed => warn!(self.logger,
                    "this node was removed from the group: it no longer votes or campaigns; stop it"),
                Role::Learner => info!(self.logger, "this node is a learner: it replicates the log but does not vote"),
                Role::Joining => info!(self.logger, "joining: waiting for a member to add this node"),
                _ => {}
            }
        }
        let raft = &self.raw.raft;
        let now = Leadership {
            term: raft.term,
            leader: (raft.leader_id != 0).then_some(raft.leader_id),
            role,
            leased: self.lease.is_some(),
        };
        if now != self.last_published {
            if now.role != self.last_published.role {
                match now.role {
                    Role::Candidate => self.metrics.election_started(),
                    Role::Leader => self.metrics.election_won(),
                    _ => {}
                }
            }
            let t = self.clock.now();
            match (now.leader, self.leaderless_since) {
                (None, None) => self.leaderless_since = Some(t),
                (Some(_), Some(since)) => {
                    self.metrics
                        .leaderless_for(t.saturating_duration_since(since));
                    self.leaderless_since = None;
                }
                _ => {}
            }
            self.metrics.set_state(
                now.term,
                role_code(now.role),
                now.leader.unwrap_or(0),
                now.leased,
            );
            self.last_published = now.clone();
            self.leadership.send_replace(now);
        }
    }

    /// This node's role: raft-rs's, unless it is not a voter.
    pub(super) fn role(&self) -> Role {
        let raft = &self.raw.raft;
        if raft.state == StateRole::Leader {
            return Role::Leader; // until a removed leader has handed over
        }
        let conf = raft.prs().conf();
        if !conf.voters().contains(self.id) {
            if conf.learners().contains(&self.id) || conf.learners_next().contains(&self.id) {
                return Role::Learner;
            }
            if raft.prs().iter().len() == 0 {
                return Role::Joining; // no membership at all yet
            }
            return Role::Removed;
        }
        match raft.state {
            StateRole::Follower => Role::Follower,
            StateRole::PreCandidate => Role::PreCandidate,
            StateRole::Candidate => Role::Candidate,
            StateRole::Leader => Role::Leader,
        }
    }

    /// Peers reachable and quorum health, for the metrics.
    pub(super) fn update_health(&self) {
        let members = self.raw.raft.prs().conf().voters().ids().len() as u64;
        let (reachable, healthy) = self.health();
        self.metrics.set_health(members, reachable, healthy);
    }

    /// Voters reachable (this node included) and whether the quorum looks healthy: a
    /// leader counts voters recently active and needs its lease; a follower counts itself
    /// and the leader it hears.
    pub(super) fn health(&self) -> (u64, bool) {
        let raft = &self.raw.raft;
        let voters = raft.prs().conf().voters().ids();
        if raft.state == StateRole::Leader {
            let active = raft
                .prs()
                .iter()
                .filter(|(id, _)| {
                    **id != self.id && voters.contains(**id) && self.heard_recently(**id)
                })
                .count() as u64;
            (
                u64::from(voters.contains(self.id)) + active,
                self.lease.is_some(),
            )
        } else {
            let hears = raft.leader_id != 0 && raft.election_elapsed < raft.election_timeout();
            (1 + u64::from(hears), hears)
        }
    }

    pub(super) fn status(&self) -> Status {
        let raft = &self.raw.raft;
        let (reachable, healthy) = self.health();
        Status {
            id: self.id,
            term: raft.term,
            role: self.last_published.role,
            leader: (raft.leader_id != 0).then_some(raft.leader_id),
            leased: self.lease.is_some(),
            members: self.membership(),
            quorum_healthy: healthy,
            peers_reachable: reachable,
            commit: raft.raft_log.committed,
            applied: self.applied,
            change_in_flight: self.change_in_flight(),
        }
    }

    /// A new leader records its tenure in the replicated history, once per term (not
    /// while it hands over).
    pub(super) fn record_tenure(&mut self) {
        let term = self.raw.raft.term;
        let leading = self.raw.raft.state == StateRole::Leader && self.is_voter(self.id);
        let handing_over = self.raw.raft.lead_transferee.is_some() || self.shutdown.is_some();
        if leading && self.recorded_term != term && !handing_over {
            let started_by = if self.handover_term == Some(term) {
                TenureStart::Handover
            } else {
                TenureStart::Election
            };
            let data = History::entry(term, self.id, started_by);
            match self.raw.propose(vec![], data) {
                Ok(()) => self.recorded_term = term,
                Err(e) => debug!(self.logger, "history record not proposed yet"; "error" => %e),
            }
        }
    }
}

pub(super) fn role_code(r: Role) -> u64 {
    match r {
        Role::Follower => 0,
        Role::PreCandidate => 1,
        Role::Candidate => 2,
        Role::Leader => 3,
        Role::Stopped => 4,
        Role::Learner => 5,
        Role::Removed => 6,
        Role::Joining => 7,
        Role::Founding => 8,
    }
}
