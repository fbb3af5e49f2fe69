//! Named elections' leases in the driver: the bookkeeping after a lease ended (the lease
//! clock announces the end itself, `lease_clock.rs`), the earliest end the loop waits for,
//! and handing leases to those who ask.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::super::group::Quiet;
use super::super::Driver;
use crate::clock::Stamp;
use crate::election::ElectionError;
use crate::lease::Lease;
use crate::storage::RaftStore;

impl<S: RaftStore> Driver<S> {
    /// Revokes every named lease whose period ran out (the root's: `expire_lease`), and
    /// returns the earliest end of those that remain (one pass: with thousands of
    /// elections: it runs when the lease clock says one lapsed, or every loop turn without
    /// the clock).
    pub(in crate::driver) fn expire_named_leases(&mut self, now: Stamp) -> Option<Stamp> {
        if let Some(floor) = self.named.lease_floor {
            if now.before(floor) {
                return Some(floor);
            }
        }
        let min = |f: Option<Stamp>, u: Stamp| {
            Some(f.map_or(u, |f| Stamp {
                mono: f.mono.min(u.mono),
                boot: f.boot.min(u.boot),
            }))
        };
        let mut changed = false;
        let mut lapsed = Vec::new();
        let mut first: Option<Stamp> = None;
        // Only the leases held (not every election): those that ran out are looked at.
        let mut ended = Vec::new();
        for (id, l) in self.env.leased.borrow().iter() {
            let u = l.valid_until();
            // Ended by the lease clock (its period ran out) while this loop was busy.
            if now.before(u) && l.lost_reason().is_none() {
                first = min(first, u);
            } else {
                ended.push(*id);
            }
        }
        for id in ended {
            let Some(ng) = self.named.groups.get_mut(&id) else {
                self.env.leased.borrow_mut().remove(&id);
                continue;
            };
            if ng.g.expire_lease(&self.env, now) {
                changed |= ng.g.publish_named(&self.env);
                if ng.g.quiet == Quiet::Leading && ng.g.leads_as_voter(&self.env) {
                    // Quiet still: the stream's next quorum brings the lease back, or
                    // the election wakes after a grace (section 12, "A lapse is not a
                    // wake-up").
                    self.support.lapsed.entry(id).or_insert(now.mono);
                } else if ng.g.quiet != Quiet::Awake {
                    lapsed.push(id);
                }
            } else if let Some(l) = &ng.g.lease {
                first = min(first, l.valid_until());
            } else {
                self.env.leased.borrow_mut().remove(&id);
            }
        }
        if changed {
            self.named.view_dirty = true;
            self.named.changes += 1;
            self.named.changes += 1;
        }
        self.wake_lapsed(lapsed);
        self.named.lease_floor = first;
        first
    }

    /// The earliest end of a lease this node holds, the root's or `named` (the earliest
    /// named one): the loop wakes then.
    pub(in crate::driver) fn lease_deadline(&self, named: Option<Stamp>) -> Option<Stamp> {
        let root = self.root.lease.as_ref().map(|l| l.valid_until());
        // Either clock ends a lease: wake when the first of all of them does.
        root.into_iter().chain(named).reduce(|a, b| Stamp {
            mono: a.mono.min(b.mono),
            boot: a.boot.min(b.boot),
        })
    }

    /// A lease of election `name`: now if this node holds one, else when it gets one.
    pub(in crate::driver) fn election_lease(
        &mut self,
        name: Arc<str>,
        reply: oneshot::Sender<Result<Lease, ElectionError>>,
    ) {
        let env = &self.env;
        match self.named.by_name_mut(&name) {
            Some(ng) => match ng.g.current_lease(env) {
                Some(l) => {
                    let _ = reply.send(Ok(l));
                }
                None => {
                    ng.g.touch(env);
                    ng.g.lease_waiters.push(reply);
                }
            },
            None => self.named.waiting.entry(name).or_default().push(reply),
        }
    }
}
