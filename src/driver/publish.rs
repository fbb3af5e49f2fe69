//! What the node tells the world: the published [`Leadership`], the role, health and
//! status for operators and metrics, and each tenure's record in the replicated history.

use raft::StateRole;
use slog::{debug, info, warn};

use super::group::{Env, Group};
use super::Driver;
use crate::history::{History, TenureStart};
use crate::status::{Leadership, Role, Status};
use crate::storage::RaftStore;

impl<S: RaftStore> Driver<S> {
    pub(super) fn publish(&mut self) {
        let role = self.role();
        if role != self.root.last_published.role {
            match role {
                Role::Removed => warn!(self.env.logger,
                    "this node was removed from the group: it no longer votes or campaigns; stop it"),
                Role::Learner => info!(self.env.logger, "this node is a learner: it replicates the log but does not vote"),
                Role::Joining => info!(self.env.logger, "joining: waiting for a member to add this node"),
                _ => {}
            }
        }
        let raft = &self.root.raw.raft;
        let now = Leadership {
            term: raft.term,
            leader: (raft.leader_id != 0).then_some(raft.leader_id),
            role,
            leased: self.root.lease.is_some(),
            election: None,
            suspended: false,
        };
        if now != self.root.last_published {
            if now.role != self.root.last_published.role {
                match now.role {
                    Role::Candidate => self.env.metrics.election_started(),
                    Role::Leader => self.env.metrics.election_won(),
                    _ => {}
                }
            }
            let t = self.env.clock.now();
            match (now.leader, self.root.leaderless_since) {
                (None, None) => self.root.leaderless_since = Some(t),
                (Some(_), Some(since)) => {
                    self.env
                        .metrics
                        .leaderless_for(t.saturating_duration_since(since));
                    self.root.leaderless_since = None;
                }
                _ => {}
            }
            self.env.metrics.set_state(
                now.term,
                role_code(now.role),
                now.leader.unwrap_or(0),
                now.leased,
            );
            self.root.last_published = now.clone();
            self.root.leadership.send_replace(now);
        }
    }

    /// This node's role in the root election.
    pub(super) fn role(&self) -> Role {
        self.root.role(&self.env)
    }

    /// Peers reachable and quorum health, for the metrics.
    pub(super) fn update_health(&self) {
        let members = self.root.raw.raft.prs().conf().voters().ids().len() as u64;
        let (reachable, healthy) = self.health();
        self.env.metrics.set_health(members, reachable, healthy);
    }

    /// Voters reachable (this node included) and whether the quorum looks healthy: a
    /// leader counts voters recently active and needs its lease; a follower counts itself
    /// and the leader it hears.
    pub(super) fn health(&self) -> (u64, bool) {
        let raft = &self.root.raw.raft;
        let voters = raft.prs().conf().voters().ids();
        if raft.state == StateRole::Leader {
            let active = raft
                .prs()
                .iter()
                .filter(|(id, _)| {
                    **id != self.env.id && voters.contains(**id) && self.heard_recently(**id)
                })
                .count() as u64;
            (
                u64::from(voters.contains(self.env.id)) + active,
                self.root.lease.is_some(),
            )
        } else {
            let hears = raft.leader_id != 0 && raft.election_elapsed < raft.election_timeout();
            (1 + u64::from(hears), hears)
        }
    }

    pub(super) fn status(&self) -> Status {
        let raft = &self.root.raw.raft;
        let (reachable, healthy) = self.health();
        Status {
            id: self.env.id,
            term: raft.term,
            role: self.root.last_published.role,
            leader: (raft.leader_id != 0).then_some(raft.leader_id),
            leased: self.root.lease.is_some(),
            members: self.membership(),
            quorum_healthy: healthy,
            peers_reachable: reachable,
            commit: raft.raft_log.committed,
            applied: self.root.applied,
            change_in_flight: self.change_in_flight(),
            disk_stalled: self.env.writer.stalled(),
            peers_disk_stalled: self.stalled_peers(),
        }
    }

    /// A new root leader records its tenure.
    pub(super) fn record_tenure(&mut self) {
        self.root.record_tenure(&self.env, self.shutdown.is_some());
    }
}

impl<S: RaftStore> Group<S> {
    /// This node's role in this election: raft-rs's, unless it is not a voter.
    pub(super) fn role(&self, env: &Env) -> Role {
        let raft = &self.raw.raft;
        if raft.state == StateRole::Leader {
            return Role::Leader; // until a removed leader has handed over
        }
        let conf = raft.prs().conf();
        if !conf.voters().contains(env.id) {
            if conf.learners().contains(&env.id) || conf.learners_next().contains(&env.id) {
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

    /// A new leader records its tenure in this election's replicated history, once per
    /// term (not while it hands over, or while the node shuts down).
    pub(super) fn record_tenure(&mut self, env: &Env, shutting_down: bool) {
        let term = self.raw.raft.term;
        let leading = self.leads_as_voter(env);
        let handing_over = self.raw.raft.lead_transferee.is_some() || shutting_down;
        if leading && self.recorded_term != term && !handing_over {
            let started_by = if self.handover_term == Some(term) {
                TenureStart::Handover
            } else {
                TenureStart::Election
            };
            let data = History::entry(term, env.id, started_by, env.clock.unix_ms());
            self.touch(env);
            match self.raw.propose(vec![], data) {
                Ok(()) => self.recorded_term = term,
                Err(e) => debug!(env.logger, "history record not proposed yet"; "error" => %e),
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
