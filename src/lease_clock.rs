//! The lease clock: ends every lease a node holds at its deadline, whatever the driver
//! is doing (`docs/design.md`, section 2, "The lease's own deadline").
//!
//! One task per node, beside the driver, with one timer and a deadline queue of the
//! leases the node holds. The driver adds a lease when it grants it; renewals move the
//! lease's end (an atomic maximum in [`LeaseShared`]) without touching the queue. When
//! the clock reaches an entry it reads the lease's end again: still ahead on both clocks,
//! the entry goes back in at the new end; passed on either, the clock revokes the lease
//! ([`LostReason::Expired`]) and wakes the driver through [`LeaseClock::lapsed`].
//!
//! The clock decides nothing about a lease's length and never extends one: it only
//! announces an end the driver's arithmetic already fixed, so a stuck driver (a synced
//! write to a stalled disk, a long turn) cannot make `Lease::lost`, the cancellation
//! token or the worker's `lease_lost` event late.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::clock::{LocalClock, Stamp};
use crate::error::LostReason;
use crate::lease::LeaseShared;
use crate::status::Leadership;

/// The deadline queue of one node's leases, shared by the driver (which adds leases and
/// listens to [`lapsed`](Self::lapsed)) and the clock's task ([`LeaseClock::run`]).
pub(crate) struct LeaseClock {
    queue: Mutex<BinaryHeap<Due>>,
    /// Wakes the clock's task: a lease was added (its end may come before the one the
    /// task sleeps towards).
    added: Notify,
    /// Wakes the driver: the clock ended a lease the driver still holds.
    pub(crate) lapsed: Notify,
    clock: LocalClock,
}

/// One queued lease: it is looked at again when the monotonic clock reaches `at` (its
/// end as last read; all of one node's leases end at `sent + L` on both clocks, so the
/// monotonic order is the boot-time order too).
struct Due {
    at: Instant,
    lease: Weak<LeaseShared>,
    /// The election's published leadership: its `leased` turns false when the clock ends
    /// the lease, so that whoever watches it (the worker's events, the readiness check)
    /// does not wait for the driver either.
    leadership: Option<Arc<watch::Sender<Leadership>>>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    /// Reversed: `BinaryHeap` is a max-heap, the queue wants the earliest end on top.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

/// What one sweep of the queue did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sweep {
    /// Leases the clock revoked.
    pub(crate) ended: usize,
    /// The end of the earliest lease still held: the clock sleeps until then.
    pub(crate) next: Option<Stamp>,
}

impl LeaseClock {
    pub(crate) fn new(clock: LocalClock) -> Arc<Self> {
        Arc::new(LeaseClock {
            queue: Mutex::new(BinaryHeap::new()),
            added: Notify::new(),
            lapsed: Notify::new(),
            clock,
        })
    }

    /// Queues a lease just granted; `leadership`: its election's published leadership.
    pub(crate) fn watch(
        &self,
        lease: &Arc<LeaseShared>,
        leadership: Option<Arc<watch::Sender<Leadership>>>,
    ) {
        let at = lease.valid_until().mono;
        self.lock().push(Due {
            at,
            lease: Arc::downgrade(lease),
            leadership,
        });
        self.added.notify_one();
    }

    /// How many leases are queued (revoked or dropped ones leave at their next visit).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BinaryHeap<Due>> {
        // The queue holds no invariant a panic could break halfway: keep using it.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Looks at every lease whose end, as last read, has come at `now`: revokes those
    /// that ran out, queues the others again at their new end.
    pub(crate) fn sweep(&self, now: Stamp) -> Sweep {
        let mut q = self.lock();
        let mut out = Sweep::default();
        while let Some(top) = q.peek() {
            let Some(lease) = top.lease.upgrade() else {
                q.pop(); // every handle and the driver's are gone
                continue;
            };
            if lease.lost_reason().is_some() {
                q.pop(); // revoked by the driver (or by this clock before)
                continue;
            }
            let until = lease.valid_until();
            if lease.is_valid_at(now) {
                if until.mono > top.at {
                    // Renewed since it was queued: back in at its new end.
                    if let Some(mut due) = q.pop() {
                        due.at = until.mono;
                        q.push(due);
                    }
                    continue;
                }
                out.next = Some(until);
                break;
            }
            let due = q.pop();
            // The published leadership first, then the lease: whoever sees the lease
            // lost finds the leadership saying so too.
            if let Some(watch) = due.and_then(|d| d.leadership) {
                let term = lease.token.term();
                // Only if what is published is still this lease's term: the driver may
                // have moved on already.
                watch.send_if_modified(|l| {
                    let stale = l.leased && l.term == term;
                    if stale {
                        l.leased = false;
                    }
                    stale
                });
            }
            lease.revoke(LostReason::Expired);
            out.ended += 1;
        }
        out
    }

    /// The clock's task: sweeps, then sleeps until the earliest end or a new lease.
    /// Runs until aborted (the driver aborts it when it stops; leases still held are
    /// revoked by the driver then).
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            let sweep = self.sweep(self.clock.stamp());
            if sweep.ended > 0 {
                self.lapsed.notify_one();
            }
            let wait = async {
                match sweep.next {
                    Some(until) => self.clock.sleep_until(until).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = self.added.notified() => {}
                () = wait => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::token::FencingToken;

    const MS: Duration = Duration::from_millis(1);

    fn lease(clock: &LocalClock, t0: Instant, now: Stamp, ms: u64) -> Arc<LeaseShared> {
        LeaseShared::new(
            FencingToken::new(ms),
            t0,
            now.add(MS * ms as u32),
            clock.clone(),
        )
    }

    #[test]
    fn the_clock_ends_a_lease_that_ran_out_and_requeues_one_renewed() {
        let clock = LocalClock::default();
        let lc = LeaseClock::new(clock.clone());
        let t0 = Instant::now();
        let s = clock.stamp_at(t0);
        let short = lease(&clock, t0, s, 10);
        let renewed = lease(&clock, t0, s, 20);
        let long = lease(&clock, t0, s, 100);
        for l in [&short, &renewed, &long] {
            lc.watch(l, None);
        }
        // Before any end: nothing happens, the clock sleeps until the first end.
        let sweep = lc.sweep(s.add(5 * MS));
        assert_eq!(sweep.ended, 0);
        assert_eq!(sweep.next, Some(short.valid_until()));
        // `renewed` is renewed past `long`'s end; at 30 ms only `short` ran out.
        renewed.extend(s.add(150 * MS));
        let sweep = lc.sweep(s.add(30 * MS));
        assert_eq!(sweep.ended, 1);
        assert_eq!(short.lost_reason(), Some(LostReason::Expired));
        assert!(renewed.lost_reason().is_none());
        assert_eq!(sweep.next, Some(long.valid_until()));
        assert_eq!(lc.len(), 2);
        // At 120 ms `long` ran out; `renewed` holds until 150 ms.
        let sweep = lc.sweep(s.add(120 * MS));
        assert_eq!(sweep.ended, 1);
        assert_eq!(long.lost_reason(), Some(LostReason::Expired));
        assert_eq!(sweep.next, Some(renewed.valid_until()));
    }

    #[test]
    fn either_clock_ends_a_lease_and_revoked_or_dropped_leases_leave_the_queue() {
        let clock = LocalClock::default();
        let lc = LeaseClock::new(clock.clone());
        let t0 = Instant::now();
        let s = clock.stamp_at(t0);
        let a = lease(&clock, t0, s, 10);
        let b = lease(&clock, t0, s, 20);
        let c = lease(&clock, t0, s, 30);
        for l in [&a, &b, &c] {
            lc.watch(l, None);
        }
        a.revoke(LostReason::SteppedDown);
        drop(b);
        // The monotonic clock stood still (a suspend); the boot-time clock counted it.
        let suspended = Stamp {
            mono: s.mono,
            boot: s.boot + 40 * MS,
        };
        let sweep = lc.sweep(suspended);
        assert_eq!(sweep.ended, 1, "only c was still held, and it ran out");
        assert_eq!(
            a.lost_reason(),
            Some(LostReason::SteppedDown),
            "first reason wins"
        );
        assert_eq!(c.lost_reason(), Some(LostReason::Expired));
        assert_eq!(sweep.next, None);
        assert_eq!(lc.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_announces_the_end_at_the_deadline_and_wakes_the_driver() {
        let clock = LocalClock::default();
        let lc = LeaseClock::new(clock.clone());
        let task = tokio::spawn(Arc::clone(&lc).run());
        let t0 = Instant::now();
        let l = lease(&clock, t0, clock.stamp_at(t0), 50);
        lc.watch(&l, None);
        let cancel = l.cancel_token();
        tokio::time::timeout(Duration::from_secs(1), cancel.cancelled())
            .await
            .expect("the clock ends the lease");
        let late = Instant::now().saturating_duration_since(t0 + 50 * MS);
        assert!(late <= 2 * MS, "ended {late:?} after its end (paused time)");
        tokio::time::timeout(Duration::from_secs(1), lc.lapsed.notified())
            .await
            .expect("the driver is woken");
        task.abort();
    }
}
