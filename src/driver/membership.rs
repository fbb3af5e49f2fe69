//! Changing the group (raft-rs `ConfChangeV2`, joint consensus) and drains: proposals
//! checked before they are made, answered once applied; conf changes applied with the
//! compaction that stores them; farewells to removed nodes; reachability.

use std::collections::{BTreeMap, BTreeSet};

use raft::eraftpb::{
    ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, Message, MessageType,
};
use raft::StateRole;
use slog::{debug, info, warn};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Driver, MemberChange};
use crate::error::LostReason;
use crate::error::{MembershipError, StorageError};
use crate::state::{decode_addrs, encode_addrs, GroupState};
use crate::status::Membership;
use crate::storage::RaftStore;
use crate::transport::{NodeId, PeerAddr};

/// A node that left the group, told so until `until`.
pub(super) struct Farewell {
    to: NodeId,
    /// The last index it acknowledged before the removal, if this node led then.
    matched: Option<u64>,
    /// The index of the conf change that removed it.
    removal: u64,
    until: Instant,
    last_sent: Option<Instant>,
}

/// A proposed membership change or drain, answered once its entry is applied.
pub(super) struct PendingChange {
    /// The entry's index and term: the same index and term mean the same entry.
    index: u64,
    term: u64,
    what: String,
    /// Answer only once the group has also left the joint configuration.
    until_not_joint: bool,
    /// A conf change (not a drain): only one may be in flight.
    conf: bool,
    /// The entry is applied (waiting for the joint configuration to be left).
    applied: bool,
    /// Another entry was applied at `index`: a new leader overwrote the proposal.
    superseded: bool,
    deadline: Instant,
    pub(super) reply: Option<oneshot::Sender<Result<Membership, MembershipError>>>,
}

impl<S: RaftStore> Driver<S> {
    /// Applies a committed conf change. The new membership is not written on its own:
    /// it goes to disk with a snapshot taken right after (so the stored membership is
    /// always a snapshot's, and conf changes above it are replayed exactly once).
    pub(super) fn apply_conf_change(
        &mut self,
        cc: &ConfChangeV2,
        index: u64,
    ) -> Result<(), StorageError> {
        let before = self.members_now();
        let leading = self.root.raw.raft.state == StateRole::Leader;
        let matched: BTreeMap<NodeId, u64> = self
            .root
            .raw
            .raft
            .prs()
            .iter()
            .map(|(id, p)| (*id, p.matched))
            .collect();
        match self.root.raw.apply_conf_change(cc) {
            Ok(cs) => {
                self.root.joint = !cs.voters_outgoing.is_empty();
                info!(self.env.logger, "membership changed";
                      "voters" => ?cs.voters, "learners" => ?cs.learners,
                      "outgoing" => ?cs.voters_outgoing);
                let added = decode_addrs(&cc.context);
                for (id, addr) in &added {
                    self.state.addrs.insert(*id, addr.clone());
                }
                self.apply_addrs(&added);
                let after = self.members_now();
                for gone in before.difference(&after) {
                    self.state.addrs.remove(gone);
                    self.state.drained.remove(gone);
                    self.state.removed.insert(*gone);
                    if *gone != self.env.id {
                        info!(self.env.logger, "node left the group"; "node" => *gone);
                        self.farewells.push(Farewell {
                            to: *gone,
                            matched: matched.get(gone).copied().filter(|_| leading),
                            removal: index,
                            until: self.env.clock.now() + self.env.timing.election_timeout() * 3,
                            last_sent: None,
                        });
                    }
                }
                // Refused at the handshake from now on; the open connections stay for
                // the farewells (`say_farewells` forgets the peer afterwards).
                self.env.transport.set_removed(&self.state.removed);
                self.root.force_compact = true;
                if leading && !self.is_voter(self.env.id) {
                    self.step_down_removed();
                }
                Ok(())
            }
            Err(e) => {
                warn!(self.env.logger, "conf change rejected by raft"; "error" => %e);
                Ok(())
            }
        }
    }

    /// A leader that has just applied its own removal stops leading at once, handing over
    /// to the most up-to-date remaining voter on the way out (docs/design.md, section 4:
    /// it never leases again in this term). raft-rs 0.7 keeps no progress for a leader
    /// outside its configuration and unwraps it on the next append response or persisted
    /// entry, so it must not go on leading even for the length of a transfer. A leader
    /// elected with the entry that removes it still uncommitted in its log meets this
    /// (simulation seed 373).
    fn step_down_removed(&mut self) {
        let term = self.root.raw.raft.term;
        match self.start_transfer(None) {
            Ok(to) => {
                info!(self.env.logger, "removed from the group: handed leadership over"; "to" => to, "term" => term);
            }
            Err(e) => {
                warn!(self.env.logger, "removed from the group: stepping down without a handover"; "error" => %e);
                self.revoke(LostReason::SteppedDown);
            }
        }
        self.root.become_follower(term, raft::INVALID_ID);
    }

    /// Tells nodes that left the group so (see `farewells`), then forgets them.
    pub(super) fn say_farewells(&mut self, now: Instant) {
        if self.farewells.is_empty() {
            return;
        }
        let mut keep = Vec::new();
        for mut f in std::mem::take(&mut self.farewells) {
            if now >= f.until {
                self.env.transport.set_peer(f.to, None);
                continue;
            }
            let due = f
                .last_sent
                .is_none_or(|t| now.duration_since(t) >= self.env.timing.heartbeat_interval());
            if due && self.root.raw.raft.state == StateRole::Leader {
                if let Some(m) = self.farewell_message(&f) {
                    self.env.transport.send(m);
                }
                f.last_sent = Some(now);
            }
            keep.push(f);
        }
        self.farewells = keep;
    }

    /// An append carrying the entries up to the removal and a commit index covering it.
    pub(super) fn farewell_message(&self, f: &Farewell) -> Option<Message> {
        let prev = f.matched?;
        let log_term = raft::Storage::term(self.root.raw.store(), prev).ok()?;
        let entries = if prev < f.removal {
            raft::Storage::entries(
                self.root.raw.store(),
                prev + 1,
                f.removal + 1,
                Some(1 << 20),
                raft::GetEntriesContext::empty(false),
            )
            .ok()?
        } else {
            Vec::new()
        };
        let last = prev + entries.len() as u64;
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = f.to;
        m.from = self.env.id;
        m.term = self.root.raw.raft.term;
        m.index = prev;
        m.log_term = log_term;
        m.commit = f
            .removal
            .min(last)
            .min(self.root.raw.raft.raft_log.committed);
        m.entries = entries.into();
        Some(m)
    }

    /// Every member of the applied configuration (voters of both halves, learners).
    pub(super) fn members_now(&self) -> BTreeSet<NodeId> {
        let cs = self.root.raw.raft.prs().conf().to_conf_state();
        cs.voters
            .iter()
            .chain(&cs.voters_outgoing)
            .chain(&cs.learners)
            .chain(&cs.learners_next)
            .copied()
            .collect()
    }

    pub(super) fn is_voter(&self, id: NodeId) -> bool {
        self.root.raw.raft.prs().conf().voters().contains(id)
    }

    /// Tells the transport which nodes the group removed, and forgets those among its
    /// peers (configured ones included): at start, and when a snapshot replaced the
    /// group state. (A removal applied while running keeps the removed peer for its
    /// farewells.)
    pub(super) fn shut_out_removed(&self) {
        self.env.transport.set_removed(&self.state.removed);
        for id in &self.state.removed {
            if *id != self.env.id {
                self.env.transport.set_peer(*id, None);
            }
        }
    }

    /// Tells the transport where replicated members listen (configured peers keep the
    /// address they were started with).
    pub(super) fn apply_addrs(&self, addrs: &BTreeMap<NodeId, PeerAddr>) {
        for (id, addr) in addrs {
            if *id != self.env.id && !self.configured.contains(id) {
                self.env.transport.set_peer(*id, Some(addr.clone()));
            }
        }
    }

    /// Marks the pending changes whose entry is `index`: applied if the entry is theirs
    /// (same term), superseded otherwise (a new leader overwrote the proposal).
    pub(super) fn entry_applied(&mut self, index: u64, term: u64) {
        for p in &mut self.pending_changes {
            if p.index == index && !p.applied {
                if p.term == term {
                    p.applied = true;
                } else {
                    p.superseded = true; // answered in `progress_changes`
                }
            }
        }
    }

    /// Answers pending changes that are done, superseded or out of time.
    pub(super) fn progress_changes(&mut self, now: Instant) {
        if self.pending_changes.is_empty() {
            return;
        }
        let joint = self.is_joint();
        let members = self.membership();
        let leader_hint =
            (self.root.raw.raft.leader_id != 0).then_some(self.root.raw.raft.leader_id);
        let mut keep = Vec::new();
        for p in self.pending_changes.drain(..) {
            let result = if p.applied && !(p.until_not_joint && joint) {
                Some(Ok(members.clone()))
            } else if p.superseded {
                Some(Err(MembershipError::NotLeader { leader_hint }))
            } else if now >= p.deadline {
                Some(Err(MembershipError::TimedOut {
                    what: p.what.clone(),
                }))
            } else {
                None
            };
            match (result, p.reply) {
                (Some(r), Some(reply)) => {
                    let _ = reply.send(r);
                }
                (Some(_), None) => {}
                (None, reply) => keep.push(PendingChange { reply, ..p }),
            }
        }
        self.pending_changes = keep;
    }

    pub(super) fn is_joint(&self) -> bool {
        self.root.joint
    }

    /// Validates and proposes a membership change or drain (leader only).
    pub(super) fn propose_change(
        &mut self,
        change: MemberChange,
        now: Instant,
    ) -> Result<PendingChange, MembershipError> {
        let raft = &self.root.raw.raft;
        if raft.state != StateRole::Leader {
            let leader_hint = (raft.leader_id != 0).then_some(raft.leader_id);
            return Err(MembershipError::NotLeader { leader_hint });
        }
        if !self.is_voter(self.env.id) {
            // Removed, and handing over: it appends nothing more (raft-rs 0.7 keeps no
            // progress for a leader outside its configuration; see `ready_pass`).
            return Err(MembershipError::NotLeader { leader_hint: None });
        }
        let m = self.membership();
        self.check_quorum_now(&m)?;
        let in_flight = self.change_in_flight();
        let commit = raft.raft_log.committed;
        let matched = |id: NodeId| raft.prs().get(id).map_or(0, |p| p.matched);
        let single = |id, t| {
            let mut c = ConfChangeSingle {
                node_id: id,
                ..Default::default()
            };
            c.set_change_type(t);
            c
        };
        let mut cc = ConfChangeV2::default();
        let mut until_not_joint = false;
        let what;
        match change {
            MemberChange::Drain(id, drained) => {
                if !m.contains(id) {
                    return Err(MembershipError::UnknownNode(id));
                }
                let leaders_left = m
                    .voters
                    .iter()
                    .filter(|v| **v != id && !m.drained.contains(v))
                    .count();
                if drained && leaders_left == 0 {
                    return Err(MembershipError::WouldLoseQuorum {
                        reason: format!("draining node {id} would leave no voter that may lead"),
                    });
                }
                let data = GroupState::drain_entry(id, drained);
                let what = format!("{} node {id}", if drained { "drain" } else { "undrain" });
                return self.propose_entry(data, what, now);
            }
            _ if in_flight => return Err(MembershipError::ChangeInFlight),
            MemberChange::AddLearner(id, addr) => {
                if id == 0 {
                    return Err(MembershipError::UnknownNode(0));
                }
                if self.state.removed.contains(&id) {
                    return Err(MembershipError::RemovedNode(id));
                }
                if m.contains(id) {
                    return Err(MembershipError::AlreadyMember(id));
                }
                cc.changes.push(single(id, ConfChangeType::AddLearnerNode));
                let mut addrs = BTreeMap::new();
                addrs.insert(id, addr);
                cc.context = encode_addrs(&addrs).into();
                what = format!("adding node {id} as a learner");
            }
            MemberChange::Promote(id) => {
                if !m.contains(id) {
                    return Err(MembershipError::UnknownNode(id));
                }
                if !m.learners.contains(&id) {
                    return Err(MembershipError::NotALearner(id));
                }
                if matched(id) < commit {
                    return Err(MembershipError::LearnerBehind {
                        id,
                        matched: matched(id),
                        commit,
                    });
                }
                cc.changes.push(single(id, ConfChangeType::AddNode));
                what = format!("promoting node {id}");
            }
            MemberChange::Remove(id) => {
                if !m.contains(id) {
                    return Err(MembershipError::UnknownNode(id));
                }
                if m.is_voter(id) {
                    let rest: Vec<NodeId> = m.voters.iter().copied().filter(|v| *v != id).collect();
                    if rest.is_empty() {
                        return Err(MembershipError::WouldLoseQuorum {
                            reason: format!("node {id} is the last voter"),
                        });
                    }
                    self.check_reachable_quorum(&rest)?;
                }
                cc.changes.push(single(id, ConfChangeType::RemoveNode));
                what = format!("removing node {id}");
            }
            MemberChange::Replace { old, new, explicit } => {
                if !m.is_voter(old) {
                    return Err(MembershipError::UnknownNode(old));
                }
                if !m.contains(new) {
                    return Err(MembershipError::UnknownNode(new));
                }
                if !m.learners.contains(&new) {
                    return Err(MembershipError::NotALearner(new));
                }
                if matched(new) < commit {
                    return Err(MembershipError::LearnerBehind {
                        id: new,
                        matched: matched(new),
                        commit,
                    });
                }
                let rest: Vec<NodeId> = m
                    .voters
                    .iter()
                    .copied()
                    .filter(|v| *v != old)
                    .chain([new])
                    .collect();
                self.check_reachable_quorum(&rest)?;
                cc.changes.push(single(new, ConfChangeType::AddNode));
                cc.changes.push(single(old, ConfChangeType::RemoveNode));
                if explicit {
                    cc.set_transition(ConfChangeTransition::Explicit);
                    self.explicit_joint_term = Some(self.root.raw.raft.term);
                } else {
                    until_not_joint = true;
                }
                what = format!("replacing node {old} by node {new}");
            }
        }
        if let Err(e) = self.root.raw.propose_conf_change(vec![], cc) {
            warn!(self.env.logger, "conf change not proposed"; "error" => %e);
            return Err(MembershipError::ChangeInFlight);
        }
        let index = self.root.raw.raft.raft_log.last_index();
        if self.root.raw.raft.pending_conf_index != index {
            // raft-rs turned it into an empty entry (it saw a change in flight).
            return Err(MembershipError::ChangeInFlight);
        }
        info!(self.env.logger, "membership change proposed"; "what" => &what, "index" => index);
        Ok(self.pending(index, what, true, until_not_joint, now))
    }

    pub(super) fn propose_entry(
        &mut self,
        data: Vec<u8>,
        what: String,
        now: Instant,
    ) -> Result<PendingChange, MembershipError> {
        if let Err(e) = self.root.raw.propose(vec![], data) {
            warn!(self.env.logger, "proposal dropped"; "what" => &what, "error" => %e);
            return Err(MembershipError::TimedOut { what });
        }
        let index = self.root.raw.raft.raft_log.last_index();
        Ok(self.pending(index, what, false, false, now))
    }

    pub(super) fn pending(
        &self,
        index: u64,
        what: String,
        conf: bool,
        until_not_joint: bool,
        now: Instant,
    ) -> PendingChange {
        let wait = (self.env.timing.election_timeout() * 5).max(std::time::Duration::from_secs(2));
        PendingChange {
            index,
            term: self.root.raw.raft.term,
            what,
            conf,
            until_not_joint,
            applied: false,
            superseded: false,
            deadline: now + wait,
            reply: None,
        }
    }

    /// Refuses a change after which the voters this leader reaches now (itself included)
    /// would not form a quorum of `voters`.
    pub(super) fn check_reachable_quorum(&self, voters: &[NodeId]) -> Result<(), MembershipError> {
        let reachable = voters.iter().filter(|v| self.heard_recently(**v)).count();
        let quorum = voters.len() / 2 + 1;
        if reachable < quorum {
            return Err(MembershipError::WouldLoseQuorum {
                reason: format!(
                    "the new group {voters:?} needs {quorum} voters, but only {reachable} are reachable now"
                ),
            });
        }
        Ok(())
    }

    /// Refuses at once when this leader does not reach a quorum (of both halves while
    /// joint): the change could not commit, and an operator should hear why.
    pub(super) fn check_quorum_now(&self, m: &Membership) -> Result<(), MembershipError> {
        // The lease ran out unrenewed (on either clock): no quorum acknowledged a round
        // for a lease period.
        let lapsed = self.root.keeper.lapsed(self.env.clock.stamp());
        let active = |v: &NodeId| self.heard_recently(*v);
        let majority = |set: &[NodeId]| {
            set.is_empty() || set.iter().filter(|v| active(v)).count() > set.len() / 2
        };
        if !lapsed && majority(&m.voters) && majority(&m.outgoing) {
            return Ok(());
        }
        let mut voters: Vec<NodeId> = m.voters.iter().chain(&m.outgoing).copied().collect();
        voters.sort_unstable();
        voters.dedup();
        let reachable = if lapsed {
            1 // only itself, as far as its lease can tell
        } else {
            voters.iter().filter(|v| active(v)).count()
        };
        Err(MembershipError::NoQuorum { reachable, voters })
    }

    /// Whether `id` is this node or was heard from within an election timeout.
    pub(super) fn heard_recently(&self, id: NodeId) -> bool {
        id == self.env.id
            || self.last_heard.get(&id).is_some_and(|t| {
                self.env.clock.now().saturating_duration_since(*t)
                    < self.env.timing.election_timeout()
            })
    }

    pub(super) fn change_in_flight(&self) -> bool {
        self.root.raw.raft.has_pending_conf()
            || self.is_joint()
            || self.pending_changes.iter().any(|p| p.conf && !p.applied)
    }

    /// The applied membership, drains and addresses.
    pub(super) fn membership(&self) -> Membership {
        let cs = self.root.raw.raft.prs().conf().to_conf_state();
        let sorted = |v: &[NodeId]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut learners = cs.learners.clone();
        learners.extend(&cs.learners_next);
        Membership {
            voters: sorted(&cs.voters),
            learners: sorted(&learners),
            outgoing: sorted(&cs.voters_outgoing),
            drained: self.state.drained.iter().copied().collect(),
            addrs: self
                .state
                .addrs
                .iter()
                .map(|(id, a)| (*id, a.to_string()))
                .collect(),
        }
    }

    /// A joint configuration nobody is leaving (its leader crashed, or the change asked
    /// for an explicit leave): this leader leaves it, so the group does not stay joint.
    pub(super) fn leave_stale_joint(&mut self) {
        let raft = &self.root.raw.raft;
        if self.is_joint()
            && self.is_voter(self.env.id)
            && !raft.has_pending_conf()
            && raft.commit_to_current_term()
            && self.explicit_joint_term != Some(raft.term)
        {
            // A joint configuration nobody is leaving (its leader crashed, or the change
            // asked for an explicit leave): leave it, so the group does not stay joint.
            info!(self.env.logger, "leaving the joint configuration"; "config" => ?raft.prs().conf());
            if let Err(e) = self
                .root
                .raw
                .propose_conf_change(vec![], ConfChangeV2::default())
            {
                debug!(self.env.logger, "leave-joint not proposed yet"; "error" => %e);
            }
        }
    }
}
