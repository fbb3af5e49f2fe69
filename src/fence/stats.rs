//! [`FenceStats`]: what a fence accepted and rejected.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one fence, updated as it decides. Read them with
/// [`snapshot`](Self::snapshot).
///
/// A fence hands them out as an `Arc`, so a metrics exporter can keep them after the
/// fence is gone.
#[derive(Debug, Default)]
pub struct FenceStats {
    /// Writes committed with an accepted token.
    accepted: AtomicU64,
    /// Attempts rejected because their token was lower than the highest accepted one.
    rejected_stale: AtomicU64,
}

/// The values of [`FenceStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceStatsSnapshot {
    /// Writes committed with an accepted token, the token advance included.
    pub accepted: u64,
    /// Attempts rejected with [`FenceError::Stale`](super::FenceError::Stale): a
    /// replaced leader tried to write. Any at all is worth an alert.
    pub rejected_stale: u64,
}

impl FenceStats {
    /// The current values. Each counter is read on its own, so a snapshot taken while
    /// writes run may mix two moments.
    pub fn snapshot(&self) -> FenceStatsSnapshot {
        FenceStatsSnapshot {
            accepted: self.accepted.load(Ordering::Relaxed),
            rejected_stale: self.rejected_stale.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn record_accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_stale(&self) {
        self.rejected_stale.fetch_add(1, Ordering::Relaxed);
    }
}
