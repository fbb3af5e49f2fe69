//! The inbound byte budget of a QUIC transport, shared by all its connections.
//!
//! Before a stream's reader allocates a frame's payload it reserves what the frame may
//! take once decoded ([`frame::decode_bound`](crate::transport::frame::decode_bound)); it waits
//! while the budget is spent. Once decoded, the reservation shrinks to what the message
//! may take ([`frame::Shape::decoded_bytes`](crate::transport::frame::Shape::decoded_bytes)) and
//! stays held while the message waits in the channel to the driver; it is given back
//! when the driver has taken the message (see `DriverQueue` in `shared.rs`). So the memory
//! of inbound frames, read, being read, decoded or queued, never exceeds the budget.
//!
//! One peer may hold at most half of it, so a peer that stalls frames or floods the
//! node cannot starve the others.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::transport::NodeId;

/// How often a reader waiting for budget looks again even without a wake-up (the driver
/// taking a message from its channel frees budget without telling anyone).
const RECHECK: Duration = Duration::from_millis(10);

/// The budget. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Budget {
    total: usize,
    per_peer: usize,
    state: Mutex<State>,
    freed: Notify,
    /// The most bytes ever reserved at once.
    peak: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    used: usize,
    by_peer: HashMap<NodeId, usize>,
}

/// Bytes reserved for one frame or message of `peer`; given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    budget: Arc<Budget>,
    peer: NodeId,
    bytes: usize,
}

impl Budget {
    /// A budget of `total` bytes; one peer may hold at most `total / 2`.
    pub(crate) fn new(total: usize) -> Arc<Budget> {
        Arc::new(Budget {
            total,
            per_peer: total / 2,
            state: Mutex::new(State::default()),
            freed: Notify::new(),
            peak: AtomicU64::new(0),
        })
    }

    /// The most bytes ever reserved at once.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn try_take(self: &Arc<Self>, peer: NodeId, bytes: usize) -> Option<Permit> {
        let mut s = self.lock();
        let mine = s.by_peer.get(&peer).copied().unwrap_or(0);
        if s.used + bytes > self.total || mine + bytes > self.per_peer {
            return None;
        }
        s.used += bytes;
        *s.by_peer.entry(peer).or_insert(0) += bytes;
        self.peak.fetch_max(s.used as u64, Ordering::Relaxed);
        Some(Permit {
            budget: self.clone(),
            peer,
            bytes,
        })
    }

    /// Reserves `bytes` for `peer` if the budget (and the peer's half) has room now;
    /// calls `reclaim` first (it gives back what the driver has taken).
    pub(crate) fn try_acquire(
        self: &Arc<Self>,
        peer: NodeId,
        bytes: usize,
        reclaim: impl Fn(),
    ) -> Option<Permit> {
        reclaim();
        self.try_take(peer, bytes)
    }

    /// Reserves `bytes` for `peer`, waiting while the budget (or the peer's half) is
    /// spent; calls `reclaim` before every try. `bytes` must not exceed half the budget
    /// (the transport checks its settings at start), or this waits forever.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        peer: NodeId,
        bytes: usize,
        reclaim: impl Fn(),
    ) -> Permit {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(p) = self.try_acquire(peer, bytes, &reclaim) {
                return p;
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep(RECHECK) => {}
            }
        }
    }

    fn give_back(&self, peer: NodeId, bytes: usize) {
        if bytes == 0 {
            return;
        }
        {
            let mut s = self.lock();
            s.used = s.used.saturating_sub(bytes);
            if let Some(mine) = s.by_peer.get_mut(&peer) {
                *mine = mine.saturating_sub(bytes);
                if *mine == 0 {
                    s.by_peer.remove(&peer);
                }
            }
        }
        self.freed.notify_waiters();
    }
}

impl Permit {
    /// Gives back what exceeds `bytes` (a permit never grows).
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.budget.give_back(self.peer, self.bytes - bytes);
            self.bytes = bytes;
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.give_back(self.peer, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_peer_gets_at_most_half_and_waiters_proceed_when_budget_is_given_back() {
        let b = Budget::new(100);
        let p1 = b.acquire(1, 50, || {}).await;
        assert!(b.try_take(1, 1).is_none(), "peer 1 holds its half");
        let mut p2 = b.try_acquire(2, 50, || {}).expect("room for peer 2");
        assert!(b.try_take(3, 1).is_none(), "the budget is spent");
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.acquire(3, 30, || {}).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        p2.shrink_to(10);
        let p3 = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter got its bytes")
            .unwrap();
        assert_eq!(b.peak(), 100);
        drop((p1, p2, p3));
        assert_eq!(b.lock().used, 0);
        assert!(b.lock().by_peer.is_empty());
    }
}
