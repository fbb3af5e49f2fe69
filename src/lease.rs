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

use crate::clock::LocalClock;
use crate::config::ReadMode;
use crate::driver::Command;
use crate::error::{LeaseLost, LostReason};

/// The fencing token of a tenure: the Raft term in which its holder led.
///
/// Tokens are ordered like terms. At most one node leads in a term, so **equal tokens
/// mean the same tenure** (the same node, possibly over several leases of that term), and
/// a higher token means a later tenure. A resource that remembers the highest token it
/// accepted and rejects anything lower can never be written by a leader that was
/// replaced, however long it stalled (see [`crate::fence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The Raft term.
    pub fn term(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<FencingToken> for u64 {
    fn from(t: FencingToken) -> u64 {
        t.0
    }
}

/// State shared by every [`Lease`] handle of one tenure and by the driver.
#[derive(Debug)]
pub(crate) struct LeaseShared {
    pub(crate) token: FencingToken,
    /// Nanoseconds since `base` until which the lease holds.
    valid_until_ns: AtomicU64,
    base: Instant,
    cancel: CancellationToken,
    reason: OnceLock<LostReason>,
    /// When the lease was revoked (nanoseconds since `base`).
    ended_ns: OnceLock<u64>,
    /// The node's clock (local time; real time outside clock tests).
    clock: LocalClock,
}

impl LeaseShared {
    pub(crate) fn new(
        token: FencingToken,
        base: Instant,
        valid_until: Instant,
        clock: LocalClock,
    ) -> Arc<Self> {
        let s = Arc::new(LeaseShared {
            token,
            valid_until_ns: AtomicU64::new(0),
            base,
            cancel: CancellationToken::new(),
            reason: OnceLock::new(),
            ended_ns: OnceLock::new(),
            clock,
        });
        s.extend(valid_until);
        s
    }

    /// Moves the end of the lease forward (never back).
    pub(crate) fn extend(&self, until: Instant) {
        let ns = until.saturating_duration_since(self.base).as_nanos() as u64;
        self.valid_until_ns.fetch_max(ns, Ordering::AcqRel);
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.base + std::time::Duration::from_nanos(self.valid_until_ns.load(Ordering::Acquire))
    }

    /// Ends the lease; the first reason wins.
    pub(crate) fn revoke(&self, reason: LostReason) {
        let _ = self.reason.set(reason);
        let _ = self.ended_ns.set(
            self.clock
                .now()
                .saturating_duration_since(self.base)
                .as_nanos() as u64,
        );
        self.cancel.cancel();
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        if self.cancel.is_cancelled() {
            Some(self.reason.get().copied().unwrap_or(LostReason::Expired))
        } else {
            None
        }
    }

    pub(crate) fn is_valid_at(&self, now: Instant) -> bool {
        !self.cancel.is_cancelled() && now < self.valid_until()
    }
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
    pub(crate) commands: mpsc::Sender<Command>,
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
        let now = self.shared.clock.now();
        if !self.shared.is_valid_at(now) {
            return Err(lost(
                self.shared.lost_reason().unwrap_or(LostReason::Expired),
            ));
        }
        if self.mode == ReadMode::LeaseBased {
            return Ok(self.shared.token);
        }
        let (tx, rx) = oneshot::channel();
        let cmd = Command::Confirm {
            term: self.shared.token.0,
            reply: tx,
        };
        if self.commands.send(cmd).await.is_err() {
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

    /// Whether the lease holds right now (not revoked, not past its validity).
    pub fn is_valid(&self) -> bool {
        self.shared.is_valid_at(self.shared.clock.now())
    }

    /// The instant until which the lease holds unless renewed (it moves forward with each
    /// acknowledged round). Meaningless once lost.
    pub fn valid_until(&self) -> Instant {
        self.shared.clock.to_real(self.shared.valid_until())
    }

    /// When the lease ended: the earlier of its validity running out and its revocation.
    /// `None` while it holds.
    pub fn ended_at(&self) -> Option<Instant> {
        let revoked = self
            .shared
            .ended_ns
            .get()
            .map(|ns| self.shared.base + std::time::Duration::from_nanos(*ns));
        let local = match revoked {
            Some(r) => Some(r.min(self.shared.valid_until())),
            None if !self.is_valid() => Some(self.shared.valid_until()),
            None => None,
        };
        // Like `valid_until`, in real time (the node's clock may be skewed in tests).
        local.map(|l| self.shared.clock.to_real(l))
    }

    /// Why the lease was lost, or `None` while it holds.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.shared.lost_reason()
    }
}
