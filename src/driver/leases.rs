//! tenure's lease, as the driver runs it: ReadIndex rounds through raft-rs, the
//! [`LeaseKeeper`](super::keeper::LeaseKeeper)'s arithmetic, and the [`Lease`] handles
//! users hold. `docs/design.md`, section 2, has the argument.

use std::sync::Arc;

use raft::StateRole;
use slog::{info, warn};

use super::keeper::{decode_ctx, encode_ctx, Acked};
use super::Driver;
use crate::clock::Stamp;
use crate::config::ReadMode;
use crate::error::LostReason;
use crate::lease::{ConfirmRequest, Lease, LeaseShared};
use crate::mutation;
use crate::storage::RaftStore;
use crate::token::FencingToken;

impl<S: RaftStore> Driver<S> {
    /// A `Lease` asks to confirm: answered locally inside a valid lease in `LeaseBased`
    /// mode, otherwise by the next round.
    pub(super) fn on_confirm(&mut self, req: ConfirmRequest) {
        let ConfirmRequest { term, reply } = req;
        match &self.lease {
            Some(l) if l.token.term() == term && self.raw.raft.term == term => {
                if self.read_mode == ReadMode::LeaseBased && l.is_valid_at(self.clock.stamp()) {
                    let _ = reply.send(Ok(l.token));
                } else {
                    self.keeper.queue_confirm(reply);
                }
            }
            _ => {
                let reason = if self.raw.raft.term != term {
                    LostReason::TermChanged
                } else {
                    LostReason::Expired
                };
                let _ = reply.send(Err(reason));
            }
        }
    }

    /// raft-rs reports rounds acknowledged by a quorum.
    pub(super) fn on_read_states(&mut self, states: Vec<raft::ReadState>) {
        let term = self.raw.raft.term;
        let leading = self.raw.raft.state == StateRole::Leader;
        for rs in states {
            let Some(ctx) = decode_ctx(&rs.request_ctx) else {
                continue;
            };
            if let Acked::Renewed { sent, until } = self.keeper.acknowledged(ctx, leading, term) {
                self.metrics
                    .renew_round_trip(self.clock.now().saturating_duration_since(sent.mono));
                if let Some(l) = &self.lease {
                    l.extend(until);
                }
            }
        }
    }

    /// After a Ready: a lease lives only while this node leads (as a voter) in its
    /// term. A leader that applied its own removal hands over (it stops acting now,
    /// before it sends `MsgTimeoutNow`).
    pub(super) fn lease_follows_role(&mut self) {
        let raft = &self.raw.raft;
        let term = raft.term;
        let leading = raft.state == StateRole::Leader && self.is_voter(self.id);
        let removed_leader = raft.state == StateRole::Leader && !leading;
        if let Some(l) = &self.lease {
            if l.token.term() != term {
                self.revoke(LostReason::TermChanged);
            } else if removed_leader {
                self.revoke(LostReason::HandedOver);
            } else if !leading {
                self.revoke(LostReason::SteppedDown);
            }
        }
        self.keeper.follow(leading, term);
    }

    /// After a Ready, for a leader: grant the lease once a round of its term was
    /// acknowledged (and it committed in its term), hand it to those waiting, and start
    /// a round for waiting confirms or the heartbeat's renewal.
    pub(super) fn grant_and_renew(&mut self, at: Stamp) {
        let term = self.raw.raft.term;
        let leading = self.raw.raft.state == StateRole::Leader && self.is_voter(self.id);
        let handing_over = self.raw.raft.lead_transferee.is_some() || self.shutdown.is_some();
        if !leading {
            return;
        }
        if mutation::active("lease-before-read-index") {
            // Broken on purpose (mutation testing): the lease is granted and renewed on
            // the leader's word alone, without waiting for quorum-acknowledged rounds
            // (what raft-rs's own LeaseBased read does).
            self.keeper.grant_unconfirmed(term, at);
            if let Some(l) = &self.lease {
                l.extend(at.add(self.timing.lease_duration()));
            }
        }
        // The commit of the term's first entry earns the first lease, a round sooner
        // (docs/design.md, section 2).
        let committed = self.raw.raft.commit_to_current_term();
        if committed || mutation::active("lease-at-election") {
            self.keeper.first_entry_committed(term);
        }
        if handing_over
            || !self.may_hold_lease_in(term)
            || !(committed || mutation::active("lease-at-election"))
        {
            self.keeper.refuse_pending(LostReason::HandedOver);
            return;
        }
        if let Some(until) = self.keeper.valid_until(term, at) {
            if self.lease.is_none() {
                let shared = LeaseShared::new(
                    FencingToken::new(term),
                    self.epoch,
                    until,
                    self.clock.clone(),
                );
                info!(self.logger, "lease acquired"; "token" => term);
                self.metrics.lease_acquired();
                self.lease = Some(shared);
            }
        }
        if let Some(lease) = self.current_lease() {
            for w in self.lease_waiters.drain(..) {
                let _ = w.send(lease.clone());
            }
        }
        self.lease_waiters.retain(|w| !w.is_closed());
        // Confirms get a round of their own; otherwise renew every heartbeat.
        if self.keeper.has_pending()
            || self
                .keeper
                .renewal_due(at.mono, self.timing.heartbeat_interval())
        {
            self.start_round(at);
            // The round's heartbeats are in a new Ready: send them now.
            self.handle_ready();
        }
    }

    /// Starts a ReadIndex round of this term, carrying the waiting confirms.
    pub(super) fn start_round(&mut self, now: Stamp) {
        let ctx = self.keeper.start_round(now, self.raw.raft.term);
        self.raw.read_index(encode_ctx(ctx));
    }

    /// A handle of the current lease, while it is valid.
    pub(super) fn current_lease(&self) -> Option<Lease> {
        let shared = self.lease.as_ref()?;
        if !shared.is_valid_at(self.clock.stamp()) {
            return None;
        }
        let confirms = self.confirm_tx.upgrade()?;
        Some(Lease {
            shared: Arc::clone(shared),
            confirms,
            mode: self.read_mode,
        })
    }

    /// Revokes a lease whose period ran out on either clock.
    pub(super) fn expire_lease(&mut self, now: Stamp) {
        if let Some(l) = &self.lease {
            if !now.before(l.valid_until()) {
                warn!(self.logger, "lease expired unrenewed"; "token" => l.token.term());
                self.revoke(LostReason::Expired);
                self.publish();
            }
        }
    }

    /// Ends the lease (every handle sees `reason`) and answers every waiting confirm.
    pub(super) fn revoke(&mut self, reason: LostReason) {
        if let Some(l) = self.lease.take() {
            info!(self.logger, "lease revoked"; "token" => l.token.term(), "reason" => reason.as_str());
            l.revoke(reason);
            self.metrics.lease_revoked(reason);
        }
        self.keeper.revoke(reason);
    }
}
