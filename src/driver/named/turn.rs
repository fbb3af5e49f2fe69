//! A named election's per-turn duties: its ticks (`Driver::tick_named`), what follows
//! every Ready (`Driver::named_after_ready`), and every election's leadership published
//! as one view.

use std::collections::BTreeMap;
use std::sync::Arc;

use raft::StateRole;
use slog::debug;

use super::super::group::Quiet;
use super::super::{Driver, PendingTransfer};
use crate::clock::Stamp;
use crate::election::ElectionId;
use crate::status::Leadership;
use crate::storage::RaftStore;

impl<S: RaftStore> Driver<S> {
    /// Ticks every named election.
    pub(in crate::driver) fn tick_named(&mut self) {
        let now = self.env.clock.now();
        let env = &self.env;
        let every = env.timing.heartbeat_interval();
        let hot: Vec<ElectionId> = env.hot.borrow().iter().copied().collect();
        for id in hot {
            let Some(ng) = self.named.groups.get_mut(&id) else {
                continue;
            };
            let retiring = ng.retiring;
            let g = &mut ng.g;
            if matches!(g.quiet, Quiet::Leading | Quiet::Following(_)) {
                continue;
            }
            if let Some(u) = g.refuse_until {
                if now >= u {
                    g.refuse_until = None;
                } else if g.raw.raft.state != StateRole::Leader
                    && g.raw.raft.election_elapsed + 1 >= g.raw.raft.randomized_election_timeout()
                {
                    // It would campaign: not while the promise holds (section 12).
                    continue;
                }
            }
            // A tick that made a Ready (a campaign, heartbeats) or made a timed duty due
            // (a renewal, a transfer's deadline, a retirement's linger) makes the election
            // busy: the turn looks at it.
            if g.raw.tick() || retiring || g.timed_duty_due(now, every) {
                g.touch(env);
            }
        }
    }

    /// After every turn, for every named election: its lease follows its role, its
    /// transfer progresses, a failed handover steps down, an expired lease ends, a
    /// drained node hands over what it leads, a new leader records its tenure, leases
    /// are granted and renewed; then the leaderships that changed are published.
    /// Returns whether a group has a new Ready (a round started, a step-down).
    pub(in crate::driver) fn named_after_ready(&mut self, at: Stamp) -> bool {
        let now = at.mono;
        let env = &self.env;
        let shutting_down = self.shutdown.is_some();
        let drained_set = &self.state.drained;
        let stalled = env.disk_stalled();
        let drained = drained_set.contains(&env.id) || stalled;
        let mut again = false;
        let mut changed = false;
        // Only the busy elections (something happened to them since the last look): an
        // election nothing happened to has nothing to do (section 12). Every election
        // timeout a sweep visits every awake one too. A draining, stalled or stopping node
        // hands every election over: it looks at each when it begins to, and at each sweep
        // (a handover started makes its election busy; one that could not start is tried
        // again there), not at every turn: a drain can last hours, over 10,000 elections.
        let stands_down = drained || shutting_down;
        let sweep = self
            .named
            .swept_at
            .is_none_or(|t| now.saturating_duration_since(t) >= env.timing.election_timeout());
        if sweep {
            self.named.swept_at = Some(now);
        }
        let every = stands_down && (sweep || !self.named.visited_all);
        self.named.visited_all = stands_down;
        let busy = std::mem::take(&mut *env.busy.borrow_mut());
        let ids: Vec<ElectionId> = if every {
            self.named.groups.keys().copied().collect()
        } else if sweep {
            env.hot.borrow().union(&busy).copied().collect()
        } else {
            busy.into_iter().collect()
        };
        let mut cold = Vec::new();
        let mut lapsed = Vec::new();
        for &id in &ids {
            let Some(ng) = self.named.groups.get_mut(&id) else {
                cold.push(id);
                continue;
            };
            let retiring = ng.retiring;
            let g = &mut ng.g;
            // A drain leaves a suspended election alone (it holds no lease to hand over);
            // a shutdown hands it over as every other.
            let hands_over = shutting_down || (drained && !g.suspended);
            if g.untouched_quiet() && !every {
                cold.push(id);
                continue;
            }
            g.touched = false;
            g.lease_follows_role(env);
            g.progress_transfer(env, now);
            again |= g.end_failed_handover(env, shutting_down);
            if g.expire_lease(env, at) && g.quiet == Quiet::Leading && g.leads_as_voter(env) {
                self.support.lapsed.entry(id).or_insert(now);
            }
            if hands_over
                && !retiring
                && g.raw.raft.state == StateRole::Leader
                && g.transfer.is_none()
                && g.raw.raft.lead_transferee.is_none()
                && g.raw.raft.prs().conf().voters().ids().len() > 1
            {
                match g.start_transfer(env, None, drained_set) {
                    Ok(to) => {
                        g.transfer = Some(PendingTransfer {
                            to,
                            deadline: now + env.timing.election_timeout() * 2,
                            reply: None,
                        });
                    }
                    Err(e) => {
                        debug!(env.logger, "cannot hand an election over";
                               "why" => if stalled { "disk stalled" } else if drained { "drained" } else { "shutting down" },
                               "election" => g.name.as_deref(), "error" => %e);
                    }
                }
            }
            if !retiring {
                g.record_tenure(env, shutting_down);
            }
            // Rounds nobody answered: their confirms go into the round started below (not
            // after it, where an election that then went quiet would keep them waiting
            // with nothing left to visit it).
            g.keeper
                .forget_unanswered(now, env.timing.election_timeout() * 2);
            // A retiring election grants no lease: it hands nothing out, as a handover.
            again |= g.grant_and_renew(env, at, shutting_down || retiring);
            if let (Some(l), Some(floor)) = (&g.lease, self.named.lease_floor) {
                // A lease granted now may end before the floor: lower it.
                let u = l.valid_until();
                self.named.lease_floor = Some(Stamp {
                    mono: floor.mono.min(u.mono),
                    boot: floor.boot.min(u.boot),
                });
            }
            if std::mem::take(&mut g.support_urgent) {
                self.support.urgent = true;
            }
            g.lease_waiters.retain(|w| !w.is_closed());
            if !retiring {
                changed |= g.publish_named(env);
            }
            if g.raw.has_ready() {
                // A round started, a step-down: the next Ready pass takes it.
                again = true;
                g.touch(env);
            }
            let in_grace = g.quiet == Quiet::Leading
                && g.leads_as_voter(env)
                && self.support.lapsed.contains_key(&id);
            if matches!(g.quiet, Quiet::Offered | Quiet::Leading)
                && (g.lease.is_none() || !g.leads_as_voter(env))
                && !in_grace
            {
                // A quiet leader whose lease ended here (revoked, expired, handed over)
                // wakes: raft-rs's check-quorum must run again (the expiry pass wakes
                // the ones whose lease ran out there).
                lapsed.push(id);
            } else if g.untouched_quiet() {
                cold.push(id);
            }
        }
        {
            let mut hot = env.hot.borrow_mut();
            for id in cold {
                let stays = self
                    .named
                    .groups
                    .get(&id)
                    .is_some_and(|ng| !ng.g.untouched_quiet());
                if !stays {
                    hot.remove(&id);
                }
            }
        }
        // The gauges from every election, once a second (a pass over all of them).
        if self
            .named
            .counted_at
            .is_none_or(|t| now.saturating_duration_since(t) >= std::time::Duration::from_secs(1))
        {
            self.named.counted_at = Some(now);
            let (mut led, mut leased, mut leaderless, mut quiet, mut suspended) = (0, 0, 0, 0, 0);
            for ng in self.named.groups.values() {
                let g = &ng.g;
                led += u64::from(g.raw.raft.state == StateRole::Leader);
                leased += u64::from(g.lease.is_some());
                leaderless += u64::from(g.raw.raft.leader_id == 0);
                quiet += u64::from(matches!(g.quiet, Quiet::Leading | Quiet::Following(_)));
                suspended += u64::from(g.suspended);
            }
            env.metrics.set_named_suspended(suspended);
            env.metrics
                .set_named(self.named.groups.len() as u64, led, leased, leaderless);
            env.metrics.set_named_quiet(quiet);
            self.named.awake = self.named.groups.len().saturating_sub(quiet as usize);
        }
        if changed {
            self.named.view_dirty = true;
            self.named.changes += 1;
            self.named.changes += 1;
        }
        self.wake_lapsed(lapsed);
        if let Err(e) = self.progress_retirements(now, &ids) {
            self.storage_failed(e);
        }
        self.progress_suspensions(now);
        self.expire_catalog_calls(now);
        self.ensure_declared(now);
        self.follow_root_membership(now, &ids);
        self.balance(now);
        self.publish_view();
        again || !self.env.busy.borrow().is_empty()
    }

    /// Publishes every election's leadership as one view, if one changed.
    fn publish_view(&mut self) {
        let now = self.env.clock.now();
        if !self.named.view_dirty
            || self.named.view_at.is_some_and(|t| {
                now.saturating_duration_since(t) < self.env.timing.heartbeat_interval()
            })
        {
            return;
        }
        self.named.view_dirty = false;
        self.named.view_at = Some(now);
        let view: BTreeMap<String, Leadership> = self
            .named
            .groups
            .values()
            .filter(|ng| !ng.retiring)
            .filter_map(|ng| {
                let name = ng.g.name.as_deref()?;
                Some((name.to_string(), ng.g.last_published.clone()))
            })
            .collect();
        self.named.view.send_replace(Arc::new(view));
    }
}
