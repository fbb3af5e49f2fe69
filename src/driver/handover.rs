//! Handing leadership over: transfers asked for, the handover a shutdown, a drain or a
//! removal starts, and what follows a failed one. `docs/design.md`, section 4: a leader
//! that sent `MsgTimeoutNow` in a term never holds a lease in it again.

use raft::StateRole;
use slog::{debug, info, warn};
use tokio::sync::oneshot;
use tokio::time::Instant;

use std::collections::BTreeSet;

use super::group::{Env, Group};
use super::{Driver, PendingTransfer, StopKind};
use crate::error::{LostReason, NodeStopped, TransferError};
use crate::mutation;
use crate::storage::RaftStore;
use crate::transport::{Inbound, NodeId};

impl<S: RaftStore> Driver<S> {
    /// Validates and starts a root transfer; revokes the lease first.
    pub(super) fn start_transfer(&mut self, to: Option<NodeId>) -> Result<NodeId, TransferError> {
        self.root.start_transfer(&self.env, to, &self.state.drained)
    }

    pub(super) fn begin_shutdown(&mut self, reply: Option<oneshot::Sender<()>>) {
        if self.shutdown.is_some() || self.stop.is_some() {
            // Already on the way out; answer when done (or now, if no slot).
            if let Some(r) = reply {
                if self.shutdown.is_none() {
                    let _ = r.send(());
                } else {
                    // Keep the first reply; the second caller just learns it is stopping.
                    drop(r);
                }
            }
            return;
        }
        let leading = self.root.raw.raft.state == StateRole::Leader;
        if leading && self.root.raw.raft.prs().conf().voters().ids().len() > 1 {
            match self.start_transfer(None) {
                Ok(target) => {
                    let deadline = self.env.clock.now() + self.env.timing.election_timeout();
                    info!(self.env.logger, "shutdown: waiting for handover"; "to" => target);
                    if let Some(t) = self.root.transfer.take() {
                        if let Some(r) = t.reply {
                            let _ = r.send(Err(TransferError::Stopped(NodeStopped::shutdown(
                                "shutting down",
                            ))));
                        }
                    }
                    self.root.transfer = Some(PendingTransfer {
                        to: target,
                        deadline,
                        reply: None,
                    });
                    let (tx, rx) = oneshot::channel();
                    drop(rx);
                    self.shutdown = Some((deadline, reply.unwrap_or(tx)));
                    return;
                }
                Err(e) => debug!(self.env.logger, "shutdown without handover"; "why" => %e),
            }
        }
        // Named elections this node leads are handed over too (`named_after_ready`
        // starts their transfers while the shutdown waits).
        let named_led = self.named_led_with_others() > 0;
        if named_led {
            let deadline = self.env.clock.now() + self.env.timing.election_timeout();
            info!(
                self.env.logger,
                "shutdown: waiting for the named elections' handovers"
            );
            let (tx, rx) = oneshot::channel();
            drop(rx);
            self.shutdown = Some((deadline, reply.unwrap_or(tx)));
            return;
        }
        self.stop = Some(StopKind::Graceful(reply));
    }

    /// How many named elections this node leads that have other voters to hand over to.
    pub(super) fn named_led_with_others(&self) -> usize {
        self.named
            .groups
            .values()
            .filter(|ng| {
                ng.g.raw.raft.state == StateRole::Leader
                    && ng.g.raw.raft.prs().conf().voters().ids().len() > 1
            })
            .count()
    }

    /// What a leader owes the group beyond raft-rs: hand over when drained,
    /// and finish a joint configuration a previous leader left behind.
    pub(super) fn leader_duties(&mut self, now: Instant) {
        if self.root.raw.raft.state != StateRole::Leader || self.shutdown.is_some() {
            return;
        }
        // (A removed leader does not get here: it steps down as it applies its removal,
        // `Driver::step_down_removed`.)
        let why = if self.state.is_drained(self.env.id) {
            "drained"
        } else {
            "disk stalled"
        };
        if self.stands_down()
            && self.root.transfer.is_none()
            && self.root.raw.raft.lead_transferee.is_none()
        {
            match self.start_transfer(None) {
                Ok(to) => {
                    info!(self.env.logger, "handing leadership over"; "why" => why, "to" => to);
                    self.root.transfer = Some(PendingTransfer {
                        to,
                        deadline: now + self.env.timing.election_timeout() * 2,
                        reply: None,
                    });
                }
                Err(e) => {
                    warn!(self.env.logger, "cannot hand leadership over"; "why" => why, "error" => %e);
                }
            }
            return;
        }
        self.leave_stale_joint();
    }

    pub(super) fn progress_transfer(&mut self, now: Instant) {
        self.root.progress_transfer(&self.env, now);
    }

    /// The root's failed handover ends in a new election.
    pub(super) fn end_failed_handover(&mut self) {
        if self
            .root
            .end_failed_handover(&self.env, self.shutdown.is_some())
        {
            self.handle_ready();
        }
    }

    /// A `MsgTimeoutNow` held while this node was drained: step it once the undrain has
    /// been applied here, refuse it after two heartbeats.
    pub(super) fn release_held_timeout_now(&mut self, now: Instant) {
        if let Some((m, at)) = self.root.held_timeout_now.take() {
            if !self.stands_down() {
                self.on_inbound(Inbound::Message(m));
                self.handle_ready();
            } else if now.duration_since(at) < self.env.timing.heartbeat_interval() * 2 {
                self.root.held_timeout_now = Some((m, at));
            } else {
                info!(self.env.logger, "drained or disk stalled: refused to take over leadership";
                      "from" => m.from);
                self.env.metrics.takeover_refused();
            }
        }
    }

    /// A shutdown that waited for its handover stops once another node leads, or at the
    /// deadline.
    pub(super) fn progress_shutdown(&mut self, now: Instant) {
        if let Some((deadline, _)) = &self.shutdown {
            let handed =
                self.root.raw.raft.state != StateRole::Leader && self.named_led_with_others() == 0;
            if handed || now >= *deadline {
                if !handed {
                    warn!(
                        self.env.logger,
                        "shutdown: handover did not finish in time; stopping anyway"
                    );
                }
                if let Some((_, reply)) = self.shutdown.take() {
                    self.stop = Some(StopKind::Graceful(Some(reply)));
                }
            }
        }
    }
}

impl<S: RaftStore> Group<S> {
    /// Whether a drained node may campaign in this election: only as a last resort,
    /// once it has known no leader for twice the longest election timeout
    /// (docs/design.md, section 4). Its log may be the only up-to-date one left, and an
    /// undrain needs a leader.
    pub(super) fn drained_may_campaign(&self, env: &Env, now: Instant) -> bool {
        let longest = env.timing.tick * env.timing.election_ticks_max as u32;
        self.leaderless_since
            .is_some_and(|t| now.saturating_duration_since(t) >= longest * 2)
    }

    /// Validates and starts a transfer of this election; revokes the lease first.
    /// `drained`: the nodes that take over nothing.
    pub(super) fn start_transfer(
        &mut self,
        env: &Env,
        to: Option<NodeId>,
        drained: &BTreeSet<NodeId>,
    ) -> Result<NodeId, TransferError> {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader {
            let hint = (raft.leader_id != 0).then_some(raft.leader_id);
            return Err(TransferError::NotLeader { leader_hint: hint });
        }
        let voters: Vec<NodeId> = raft.prs().conf().voters().ids().iter().collect();
        let target = match to {
            Some(t) if t == env.id => return Err(TransferError::AlreadyLeader(t)),
            Some(t) if !voters.contains(&t) => return Err(TransferError::UnknownNode(t)),
            Some(t) if drained.contains(&t) => return Err(TransferError::Drained(t)),
            Some(t) => t,
            None => self
                .best_follower(env, drained)
                .ok_or(TransferError::NoCandidate)?,
        };
        info!(env.logger, "handing leadership over"; "to" => target, "term" => raft.term,
              "election" => self.name.as_deref());
        self.revoke(env, LostReason::HandedOver);
        self.touch(env);
        self.raw.transfer_leader(target);
        Ok(target)
    }

    /// The most up-to-date voter other than this node (recently active ones first), not
    /// drained and not one whose disk is stalled.
    pub(super) fn best_follower(&self, env: &Env, drained: &BTreeSet<NodeId>) -> Option<NodeId> {
        let raft = &self.raw.raft;
        let voters = raft.prs().conf().voters().ids();
        let now = env.clock.now();
        raft.prs()
            .iter()
            .filter(|(id, _)| {
                **id != env.id
                    && voters.contains(**id)
                    && !drained.contains(*id)
                    && !env.peer_stalled(**id, now)
            })
            .max_by_key(|(id, pr)| (pr.recent_active, pr.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id)
    }

    /// A transfer in flight ends: done, timed out, or lost to another leader.
    pub(super) fn progress_transfer(&mut self, env: &Env, now: Instant) {
        let Some(t) = &mut self.transfer else {
            return;
        };
        let raft = &self.raw.raft;
        let done = raft.leader_id == t.to && raft.state != StateRole::Leader;
        let lost = raft.state != StateRole::Leader && raft.leader_id != t.to && raft.leader_id != 0;
        let result = if done {
            Some(Ok(t.to))
        } else if now >= t.deadline
            || lost
            || (raft.state == StateRole::Leader && raft.lead_transferee.is_none())
        {
            Some(Err(TransferError::TimedOut {
                to: t.to,
                timeout_ms: env.timing.election_timeout().as_millis() as u64 * 2,
            }))
        } else {
            None
        };
        if let Some(r) = result {
            if let Some(reply) = t.reply.take() {
                let _ = reply.send(r);
            }
            self.transfer = None;
        }
    }

    /// Section 4 of docs/design.md: a leader that sent MsgTimeoutNow in term `t` never
    /// holds a lease in `t` again (the forced election that message may still start, at
    /// `t + 1`, skips the voters' in-lease refusal).
    /// Nor in a term in which its election resumed, or an earlier one (`lease_after`).
    pub(super) fn may_hold_lease_in(&self, term: u64) -> bool {
        (self.timeout_now_sent != Some(term) || mutation::active("lease-after-failed-transfer"))
            && (term > self.lease_after || mutation::active("resume-keeps-the-term"))
    }

    /// A handover that failed (the transfer is over, and this node still leads in the
    /// term it sent MsgTimeoutNow in) ends in a new election: this node steps down into
    /// the next term, because it may not hold a lease in this one again. True if it
    /// stepped down (a new Ready waits). `shutting_down`: a shutdown waits for the
    /// handover, and ends it itself.
    pub(super) fn end_failed_handover(&mut self, env: &Env, shutting_down: bool) -> bool {
        let raft = &self.raw.raft;
        let term = raft.term;
        if raft.state != StateRole::Leader
            || self.may_hold_lease_in(term)
            || raft.lead_transferee.is_some()
            || self.transfer.is_some()
            || shutting_down
        {
            return false;
        }
        if term <= self.lease_after {
            info!(env.logger,
                "election resumed; stepping down into the next term (its first lease after a suspension is in a new term)";
                "term" => term, "next_term" => term + 1, "election" => self.name.as_deref());
        } else {
            warn!(env.logger,
                "leadership transfer failed; stepping down into the next term (a leader that asked for a handover holds no lease in that term again)";
                "term" => term, "next_term" => term + 1, "election" => self.name.as_deref());
        }
        self.become_follower(term + 1, raft::INVALID_ID);
        true
    }
}
