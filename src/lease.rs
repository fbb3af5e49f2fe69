//! Leases and fencing tokens.
//!
//! A [`Lease`] is this node's proof, for one Raft term, that it leads: it exists only
//! after a ReadIndex round of that term was acknowledged by a quorum, and it is revoked
//! at once when the term moves on, the node steps down, hands over or shuts down, or the
//! lease runs out unrenewed. Its [`FencingToken`] is the Raft term.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::{LocalClock, Stamp};
use crate::config::ReadMode;
use crate::error::{LeaseLost, LostReason};
pub use crate::token::FencingToken;

/// State shared by every [`Lease`] handle of one tenure and by the driver.
///
/// The lease holds until a [`Stamp`] on both of the node's clocks (monotonic and
/// boot-time, see [`crate::clock`]): it ends when either says its period ran out.
#[derive(Debug)]
pub(crate) struct LeaseShared {
    pub(crate) token: FencingToken,
    /// Monotonic nanoseconds since `base` until which the lease holds.
    valid_until_ns: AtomicU64,
    /// Boot-time nanoseconds until which the lease holds.
    valid_until_boot_ns: AtomicU64,
    base: Instant,
    cancel: CancellationToken,
    reason: OnceLock<LostReason>,
    /// When the lease ended (real time): the earlier of its revocation and its validity
    /// running out, as known when it was revoked.
    ended: OnceLock<Instant>,
    /// The node's clock (local time; real time outside clock tests).
    clock: LocalClock,
    /// When the driver granted the lease (real time, this process's `Instant` clock).
    granted: Instant,
}

impl LeaseShared {
    pub(crate) fn new(
        token: FencingToken,
        base: Instant,
        valid_until: Stamp,
        clock: LocalClock,
    ) -> Arc<Self> {
        let s = Arc::new(LeaseShared {
            token,
            valid_until_ns: AtomicU64::new(0),
            valid_until_boot_ns: AtomicU64::new(0),
            base,
            cancel: CancellationToken::new(),
            reason: OnceLock::new(),
            ended: OnceLock::new(),
            clock,
            granted: Instant::now(),
        });
        s.extend(valid_until);
        s
    }

    /// Moves the end of the lease forward (never back), clock by clock.
    pub(crate) fn extend(&self, until: Stamp) {
        let ns = until.mono.saturating_duration_since(self.base).as_nanos() as u64;
        self.valid_until_ns.fetch_max(ns, Ordering::AcqRel);
        let boot = u64::try_from(until.boot.as_nanos()).unwrap_or(u64::MAX);
        self.valid_until_boot_ns.fetch_max(boot, Ordering::AcqRel);
    }

    pub(crate) fn valid_until(&self) -> Stamp {
        Stamp {
            mono: self.base
                + std::time::Duration::from_nanos(self.valid_until_ns.load(Ordering::Acquire)),
            boot: std::time::Duration::from_nanos(self.valid_until_boot_ns.load(Ordering::Acquire)),
        }
    }

    /// Ends the lease; the first reason wins.
    pub(crate) fn revoke(&self, reason: LostReason) {
        let _ = self.reason.set(reason);
        let _ = self
            .ended
            .set(Instant::now().min(self.clock.real_deadline(self.valid_until())));
        self.cancel.cancel();
    }

    /// The token cancelled when the lease ends (for the lease clock's tests).
    #[cfg(test)]
    pub(crate) fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        if self.cancel.is_cancelled() {
            Some(self.reason.get().copied().unwrap_or(LostReason::Expired))
        } else {
            None
        }
    }

    pub(crate) fn is_valid_at(&self, now: Stamp) -> bool {
        !self.cancel.is_cancelled() && now.before(self.valid_until())
    }
}

/// What a [`Lease`] asks of its node's driver: a fresh ReadIndex round for the lease of
/// `term`, answered with the token or why the lease is gone.
pub(crate) struct ConfirmRequest {
    pub(crate) term: u64,
    pub(crate) reply: oneshot::Sender<Result<FencingToken, LostReason>>,
}

/// Proof that this node leads in the term of its [`token`](Lease::token).
///
/// Obtained from [`Node::lease`](crate::Node::lease). Cheap to clone; every clone ends at
/// the same moment. Act on a downstream resource only with the token, and only while the
/// lease holds: check [`confirm`](Lease::confirm) before each critical step, and stop as
/// soon as [`lost`](Lease::lost) resolves or the [`cancellation
/// token`](Lease::cancellation_token) fires.
#[derive(Clone)]
pub struct Lease {
    pub(crate) shared: Arc<LeaseShared>,
    /// Keeps the driver running while the lease is held, like a `Node` handle.
    pub(crate) confirms: mpsc::Sender<ConfirmRequest>,
    pub(crate) mode: ReadMode,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("token", &self.shared.token)
            .field("valid_until", &self.shared.valid_until())
            .field("lost", &self.shared.lost_reason())
            .finish()
    }
}

impl Lease {
    /// The fencing token: the Raft term of this tenure.
    pub fn token(&self) -> FencingToken {
        self.shared.token
    }

    /// Confirms that this node still leads in the lease's term.
    ///
    /// In [`ReadMode::Safe`] this is a fresh ReadIndex round that a quorum acknowledges
    /// after the call began; in [`ReadMode::LeaseBased`] it answers locally while the
    /// lease is within its validity (see the clock caveat there). Returns the token, or
    /// [`LeaseLost`] if the lease is gone or ends while waiting.
    pub async fn confirm(&self) -> Result<FencingToken, LeaseLost> {
        let lost = |reason| LeaseLost {
            token: self.shared.token,
            reason,
        };
        if let Some(reason) = self.shared.lost_reason() {
            return Err(lost(reason));
        }
        if !self.shared.is_valid_at(self.shared.clock.stamp()) {
            return Err(lost(
                self.shared.lost_reason().unwrap_or(LostReason::Expired),
            ));
        }
        if self.mode == ReadMode::LeaseBased {
            return Ok(self.shared.token);
        }
        let (tx, rx) = oneshot::channel();
        let request = ConfirmRequest {
            term: self.shared.token.term(),
            reply: tx,
        };
        if self.confirms.send(request).await.is_err() {
            return Err(lost(LostReason::Shutdown));
        }
        // A lease lost while its confirm was answered counts as lost (and the choice
        // does not depend on tokio's random branch order).
        tokio::select! {
            biased;
            _ = self.shared.cancel.cancelled() => {
                Err(lost(self.shared.lost_reason().unwrap_or(LostReason::Expired)))
            }
            r = rx => match r {
                Ok(Ok(token)) => Ok(token),
                Ok(Err(reason)) => Err(lost(reason)),
                Err(_) => Err(lost(self.shared.lost_reason().unwrap_or(LostReason::Shutdown))),
            },
        }
    }

    /// Resolves when the lease is lost, with the reason. Resolves at once if it already is.
    pub async fn lost(&self) -> LostReason {
        self.shared.cancel.cancelled().await;
        self.shared.lost_reason().unwrap_or(LostReason::Expired)
    }

    /// A token cancelled the moment the lease is lost: hand it to work that must stop then.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.shared.cancel.child_token()
    }

    /// Whether the lease holds right now (not revoked, and its period has run out on
    /// neither the monotonic nor the boot-time clock).
    pub fn is_valid(&self) -> bool {
        self.shared.is_valid_at(self.shared.clock.stamp())
    }

    /// The instant until which the lease holds unless renewed (it moves forward with each
    /// acknowledged round), on this process's `Instant` clock: the first moment either
    /// of the node's clocks says the period ran out, supposing no suspend from now on.
    /// Meaningless once lost.
    pub fn valid_until(&self) -> Instant {
        self.shared.clock.real_deadline(self.shared.valid_until())
    }

    /// When the lease ended: the earlier of its validity running out and its revocation.
    /// `None` while it holds.
    pub fn ended_at(&self) -> Option<Instant> {
        match self.shared.ended.get() {
            Some(at) => Some(*at),
            None if !self.is_valid() => Some(self.valid_until()),
            None => None,
        }
    }

    /// Why the lease was lost, or `None` while it holds.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.shared.lost_reason()
    }

    /// When the driver granted this lease, on this process's `Instant` clock (real time,
    /// like [`valid_until`](Self::valid_until) and [`ended_at`](Self::ended_at)): the
    /// moment it began to protect anything. Handles obtained later (another
    /// [`Node::lease`](crate::Node::lease) call, a clone) report the same instant.
    ///
    /// A task that waited on `Node::lease` wakes some time after this, longer if its
    /// process was paused: a log line or an event stamped when the task got the lease
    /// can be late, and this tells a lease announced late from one granted late
    /// (`tenure-worker`'s `lease_acquired` carries it as `granted_ns`;
    /// `tests/election/lease_bound.rs` measures the gap between one tenure's `ended_at` and the
    /// next one's `granted_at` with it).
    pub fn granted_at(&self) -> Instant {
        self.shared.granted
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ClockControl;

    const MS: Duration = Duration::from_millis(1);

    /// A lease earned by a round sent at real `t0`, period 100 ms, on a clock that stalls
    /// 10 ms later; where it stands 150 ms after `t0`.
    fn after_a_stall(counted_by_boottime: bool) -> (bool, bool) {
        let ctl = ClockControl::new();
        let clock = LocalClock::controlled(1.0, ctl.clone());
        let t0 = Instant::now();
        let sent = clock.stamp_at(t0);
        let lease = LeaseShared::new(FencingToken::new(7), t0, sent.add(100 * MS), clock.clone());
        ctl.stall(counted_by_boottime);
        // A fault takes effect at the clock's next reading.
        assert!(lease.is_valid_at(clock.stamp_at(t0 + 10 * MS)));
        let later = clock.stamp_at(t0 + 150 * MS);
        let mono_only = later.mono < lease.valid_until().mono;
        (lease.is_valid_at(later), mono_only)
    }

    /// The gap CLOCK_BOOTTIME closes: a node suspended 10 ms after the round that earned
    /// its lease stops the monotonic clock, which after 150 ms of real time still reads
    /// 10 ms; the boot-time clock counted the suspend, so the lease has ended.
    #[test]
    fn a_suspend_ends_the_lease_in_real_time_though_the_monotonic_clock_stood_still() {
        let (valid, mono_only) = after_a_stall(true);
        assert!(
            mono_only,
            "by the monotonic clock alone it would still hold"
        );
        assert!(!valid, "the boot-time clock says it ran out");
    }

    /// What stays assumed: a pause that neither clock counts (a hypervisor that stops the
    /// guest without telling it) leaves the lease valid past its real end.
    #[test]
    fn a_pause_no_clock_counts_leaves_the_lease_valid_past_its_real_end() {
        let (valid, _) = after_a_stall(false);
        assert!(valid);
    }

    #[test]
    fn a_lease_ends_when_either_clock_runs_out_and_extends_clock_by_clock() {
        let clock = LocalClock::default();
        let t0 = Instant::now();
        let s = Stamp {
            mono: t0,
            boot: 1000 * MS,
        };
        let lease = LeaseShared::new(FencingToken::new(3), t0, s.add(100 * MS), clock);
        assert!(lease.is_valid_at(s.add(99 * MS)));
        assert!(!lease.is_valid_at(Stamp {
            mono: t0 + 10 * MS,
            boot: 1100 * MS
        }));
        assert!(!lease.is_valid_at(Stamp {
            mono: t0 + 100 * MS,
            boot: 1010 * MS
        }));
        // Extending never moves either end back.
        lease.extend(Stamp {
            mono: t0 + 200 * MS,
            boot: 1050 * MS,
        });
        assert_eq!(
            lease.valid_until(),
            Stamp {
                mono: t0 + 200 * MS,
                boot: 1100 * MS
            }
        );
        lease.revoke(LostReason::SteppedDown);
        assert!(!lease.is_valid_at(s));
        assert_eq!(lease.lost_reason(), Some(LostReason::SteppedDown));
    }
}
