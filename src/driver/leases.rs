//! tenure's lease, as the driver runs it for each election: ReadIndex rounds through
//! raft-rs, the [`LeaseKeeper`](super::keeper::LeaseKeeper)'s arithmetic, and the
//! [`Lease`] handles users hold. `docs/design.md`, section 2, has the argument; every
//! election (the root and each named one) runs it on its own group, with its own rounds.

use std::sync::Arc;

use raft::StateRole;
use slog::{info, warn};

use super::group::{Env, Group};
use super::keeper::{decode_ctx, encode_ctx, Acked};
use super::Driver;
use crate::clock::Stamp;
use crate::config::ReadMode;
use crate::error::LostReason;
use crate::lease::{ConfirmRequest, Lease, LeaseShared};
use crate::mutation;
use crate::storage::RaftStore;
use crate::token::FencingToken;

impl<S: RaftStore> Group<S> {
    /// Whether this node leads this election as one of its voters.
    pub(super) fn leads_as_voter(&self, env: &Env) -> bool {
        self.raw.raft.state == StateRole::Leader
            && self.raw.raft.prs().conf().voters().contains(env.id)
    }

    /// A `Safe` confirm of a quiet leader's election, if this is one: the support
    /// stream's next requests (sent at the end of this turn) answer it, and raft-rs has
    /// nothing to do, so the election is not made busy. A busy election costs the whole
    /// after-Ready pass each turn: 2,000 callers confirming back to back on each of five
    /// workers made every turn take 200 ms, longer than a lease, and the group lost every
    /// lease. Gives the request back if it is not such a confirm.
    pub(super) fn confirm_on_stream(
        &mut self,
        env: &Env,
        req: ConfirmRequest,
    ) -> Result<(), ConfirmRequest> {
        let now = env.clock.stamp();
        let eligible = self.quiet == super::group::Quiet::Leading
            && env.read_mode == ReadMode::Safe
            && self.raw.raft.term == req.term
            && self.raw.raft.lead_transferee.is_none()
            && self.transfer.is_none()
            && self
                .lease
                .as_ref()
                .is_some_and(|l| l.token.term() == req.term && l.is_valid_at(now));
        if !eligible {
            return Err(req);
        }
        self.keeper.queue_confirm(req.reply);
        self.keeper.start_stream_round(now, req.term);
        Ok(())
    }

    /// A `Lease` asks to confirm: answered locally inside a valid lease in `LeaseBased`
    /// mode, otherwise by the next round.
    pub(super) fn on_confirm(&mut self, env: &Env, req: ConfirmRequest) {
        let ConfirmRequest { term, reply } = req;
        self.touch(env);
        match &self.lease {
            Some(l) if l.token.term() == term && self.raw.raft.term == term => {
                if env.read_mode == ReadMode::LeaseBased && l.is_valid_at(env.clock.stamp()) {
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
    pub(super) fn on_read_states(&mut self, env: &Env, states: Vec<raft::ReadState>) {
        let term = self.raw.raft.term;
        let leading = self.raw.raft.state == StateRole::Leader;
        for rs in states {
            let Some(ctx) = decode_ctx(&rs.request_ctx) else {
                continue;
            };
            if let Acked::Renewed { sent, until } = self.keeper.acknowledged(ctx, leading, term) {
                if self.conf_hold || self.credit_from.is_some_and(|t| sent.mono < t) {
                    // A round that left before this leader's conf change was carried out
                    // (section 11): it earns nothing.
                    continue;
                }
                if self.election == 0 {
                    env.metrics
                        .renew_round_trip(env.clock.now().saturating_duration_since(sent.mono));
                }
                if let Some(l) = &self.lease {
                    l.extend(until);
                }
            }
        }
    }

    /// After a Ready: a lease lives only while this node leads (as a voter) in its
    /// term. A leader that applied its own removal hands over (it stops acting now,
    /// before it sends `MsgTimeoutNow`).
    pub(super) fn lease_follows_role(&mut self, env: &Env) {
        let term = self.raw.raft.term;
        let leading = self.leads_as_voter(env);
        let removed_leader = self.raw.raft.state == StateRole::Leader && !leading;
        if let Some(l) = &self.lease {
            if l.token.term() != term {
                self.revoke(env, LostReason::TermChanged);
            } else if removed_leader {
                self.revoke(env, LostReason::HandedOver);
            } else if !leading {
                self.revoke(env, LostReason::SteppedDown);
            }
        }
        self.keeper.follow(leading, term);
    }

    /// After a Ready, for a leader: grant the lease once a round of its term was
    /// acknowledged (and it committed in its term), hand it to those waiting, and start
    /// a round for waiting confirms or the heartbeat's renewal. `handing_over`: the node
    /// hands this election over (or shuts down), so it earns no lease. Returns whether a
    /// round started (its heartbeats are in a new Ready).
    pub(super) fn grant_and_renew(&mut self, env: &Env, at: Stamp, handing_over: bool) -> bool {
        let term = self.raw.raft.term;
        let handing_over = handing_over || self.raw.raft.lead_transferee.is_some();
        if !self.leads_as_voter(env) {
            return false;
        }
        if mutation::active("lease-before-read-index") {
            // Broken on purpose (mutation testing): the lease is granted and renewed on
            // the leader's word alone, without waiting for quorum-acknowledged rounds
            // (what raft-rs's own LeaseBased read does).
            self.keeper.grant_unconfirmed(term, at);
            if let Some(l) = &self.lease {
                l.extend(at.add(env.timing.lease_duration()));
            }
        }
        // The commit of the term's first entry earns the first lease, a round sooner
        // (docs/design.md, section 2).
        let committed = self.raw.raft.commit_to_current_term();
        if committed || mutation::active("lease-at-election") {
            self.keeper.first_entry_committed(term);
        }
        if self.suspended && !mutation::active("suspend-keeps-leasing") {
            self.keeper.refuse_pending(LostReason::Suspended);
            return false;
        }
        if handing_over
            || !self.may_hold_lease_in(term)
            || !(committed || mutation::active("lease-at-election"))
        {
            self.keeper.refuse_pending(LostReason::HandedOver);
            return false;
        }
        if let Some(until) = self.keeper.valid_until(term, at) {
            if self.lease.is_none() {
                let shared =
                    LeaseShared::new(FencingToken::new(term), env.epoch, until, env.clock.clone());
                info!(env.logger, "lease acquired"; "token" => term, "election" => self.name.as_deref());
                if self.election == 0 {
                    env.metrics.lease_acquired();
                }
                if self.election != 0 {
                    env.leased
                        .borrow_mut()
                        .insert(self.election, Arc::clone(&shared));
                }
                env.lease_clock
                    .watch(&shared, Some(Arc::clone(&self.leadership)));
                self.lease = Some(shared);
            }
        }
        if let Some(lease) = self.current_lease(env) {
            for w in self.lease_waiters.drain(..) {
                let _ = w.send(Ok(lease.clone()));
            }
        }
        self.lease_waiters.retain(|w| !w.is_closed());
        if self.quiet == super::group::Quiet::Leading {
            // Quiet: the support stream renews the lease; a confirm waits for its next
            // requests, sent at the end of this turn (section 12).
            if self.keeper.has_pending() {
                self.keeper.start_stream_round(at, term);
                self.support_urgent = true;
            }
            return false;
        }
        // Confirms get a round of their own; otherwise renew every heartbeat.
        if self.keeper.has_pending()
            || self
                .keeper
                .renewal_due(at.mono, env.timing.heartbeat_interval())
        {
            let ctx = self.keeper.start_round(at, term);
            self.raw.read_index(encode_ctx(ctx));
            return true;
        }
        false
    }

    /// The support stream shows a quorum of this election's voters supporting this
    /// leader in `term` from `sigma` on (section 12): the lease extends as a round sent
    /// at `sigma` would, under the same conditions (it leads as a voter in `term`, may
    /// hold a lease in it, is not changing the configuration, and holds a lease of
    /// `term` already or is quiet: a term's first lease comes from its first entry's
    /// commit, which a quiet leader's has).
    pub(super) fn credit_support(&mut self, env: &Env, sigma: Stamp, term: u64, retiring: bool) {
        if retiring
            || (self.suspended && !mutation::active("suspend-keeps-leasing"))
            || !self.leads_as_voter(env)
            || self.raw.raft.term != term
            || !self.may_hold_lease_in(term)
            || self.raw.raft.lead_transferee.is_some()
            || self.conf_hold
            || self.credit_from.is_some_and(|t| sigma.mono < t)
        {
            return;
        }
        match &self.lease {
            Some(lease) if lease.token.term() == term => {
                let until = self.keeper.supported(sigma, term);
                lease.extend(until);
            }
            Some(_) => {}
            None if self.quiet == super::group::Quiet::Leading => {
                // A quiet leader whose lease lapsed (a stall of this node or of its
                // supporters) and that still leads in `term`: the support is as good as a
                // round's, so the lease comes back on this turn's after-Ready pass
                // (`grant_and_renew`), without waking the election (section 12, "A
                // lapse is not a wake-up").
                let until = self.keeper.supported(sigma, term);
                if env.clock.stamp().before(until) {
                    self.touch(env);
                }
            }
            None => {}
        }
    }

    /// A handle of the current lease, while it is valid.
    pub(super) fn current_lease(&self, env: &Env) -> Option<Lease> {
        let shared = self.lease.as_ref()?;
        if !shared.is_valid_at(env.clock.stamp()) {
            return None;
        }
        let confirms = env.confirm_tx.upgrade()?;
        Some(Lease {
            shared: Arc::clone(shared),
            confirms,
            mode: env.read_mode,
        })
    }

    /// Revokes a lease whose period ran out on either clock (or that the lease clock
    /// already ended for that reason); true if it did.
    pub(super) fn expire_lease(&mut self, env: &Env, now: Stamp) -> bool {
        if let Some(l) = &self.lease {
            if !now.before(l.valid_until()) || l.lost_reason().is_some() {
                warn!(env.logger, "lease expired unrenewed"; "token" => l.token.term(),
                      "election" => self.name.as_deref());
                self.revoke(env, LostReason::Expired);
                return true;
            }
        }
        false
    }

    /// Ends the lease (every handle sees `reason`) and answers every waiting confirm.
    pub(super) fn revoke(&mut self, env: &Env, reason: LostReason) {
        if let Some(l) = self.lease.take() {
            if self.election != 0 {
                env.leased.borrow_mut().remove(&self.election);
            }
            info!(env.logger, "lease revoked"; "token" => l.token.term(), "reason" => reason.as_str(),
                  "election" => self.name.as_deref());
            l.revoke(reason);
            if self.election == 0 {
                env.metrics.lease_revoked(reason);
            }
        }
        self.keeper.revoke(reason);
    }
}

impl<S: RaftStore> Driver<S> {
    /// A `Lease` asks to confirm: routed to its election by the token (`term >> 40`).
    pub(super) fn on_confirm(&mut self, req: ConfirmRequest) {
        let election = crate::election::election_of_term(req.term);
        if mutation::active("lease-from-other-election") {
            // Broken on purpose (mutation testing): a confirm is answered by whichever
            // election's lease this node holds, not by its own election's.
            let stamp = self.env.clock.stamp();
            let any = self.root.lease.iter().chain(
                self.named
                    .groups
                    .values()
                    .filter_map(|ng| ng.g.lease.as_ref()),
            );
            if any.into_iter().any(|l| l.is_valid_at(stamp)) {
                let _ = req.reply.send(Ok(FencingToken::new(req.term)));
                return;
            }
        }
        let req = match self.named.groups.get_mut(&election) {
            Some(ng) if !ng.retiring => match ng.g.confirm_on_stream(&self.env, req) {
                Ok(()) => {
                    self.support.urgent = true;
                    return;
                }
                Err(req) => req,
            },
            _ => req,
        };
        match self.group_mut(election) {
            Some((g, env)) => g.on_confirm(env, req),
            None => {
                let _ = req.reply.send(Err(LostReason::Removed));
            }
        }
    }

    /// The root's lease follows its role.
    pub(super) fn lease_follows_role(&mut self) {
        self.root.lease_follows_role(&self.env);
    }

    /// The root's lease is granted and renewed.
    pub(super) fn grant_and_renew(&mut self, at: Stamp) {
        if self
            .root
            .grant_and_renew(&self.env, at, self.shutdown.is_some())
        {
            // The round's heartbeats are in a new Ready: send them now.
            self.handle_ready();
        }
    }

    /// A handle of the root's current lease, while it is valid.
    pub(super) fn current_lease(&self) -> Option<Lease> {
        self.root.current_lease(&self.env)
    }

    /// Revokes a root lease whose period ran out on either clock.
    pub(super) fn expire_lease(&mut self, now: Stamp) {
        if self.root.expire_lease(&self.env, now) {
            self.publish();
        }
    }

    /// Ends the root's lease.
    pub(super) fn revoke(&mut self, reason: LostReason) {
        self.root.revoke(&self.env, reason);
    }
}
