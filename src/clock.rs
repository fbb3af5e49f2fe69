//! Time as other processes on the same host can compare it.

use tokio::time::Instant;

/// `CLOCK_MONOTONIC` now, in nanoseconds: comparable across processes on one host.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists
    // on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Converts a tokio [`Instant`] of this process to `CLOCK_MONOTONIC` nanoseconds.
///
/// Rust's `Instant` is `CLOCK_MONOTONIC` on Linux, so the offset is exact up to the few
/// nanoseconds between the two readings. Under tokio's paused test clock the result is
/// meaningless.
pub fn instant_to_monotonic_ns(at: Instant) -> u64 {
    let now = Instant::now();
    let now_ns = monotonic_ns();
    if at >= now {
        now_ns + (at - now).as_nanos() as u64
    } else {
        now_ns.saturating_sub((now - at).as_nanos() as u64)
    }
}

/// A node's view of time. In production it is the real clock; the simulation and the
/// clock tests run a node whose clock runs `rate` times as fast as real time, to check
/// where `LeaseBased` reads stop being safe (see [`Timing::max_clock_drift`]).
///
/// [`Timing::max_clock_drift`]: crate::Timing::max_clock_drift
#[derive(Debug, Clone, Copy)]
pub struct LocalClock {
    rate: f64,
    origin: Instant,
}

impl Default for LocalClock {
    fn default() -> Self {
        LocalClock::with_rate(1.0)
    }
}

impl LocalClock {
    /// A clock running `rate` times as fast as real time from now on (1.0: real time).
    pub fn with_rate(rate: f64) -> Self {
        LocalClock {
            rate,
            origin: Instant::now(),
        }
    }

    /// The rate relative to real time.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Local time now.
    pub fn now(&self) -> Instant {
        self.to_local(Instant::now())
    }

    /// The local reading at real instant `real`.
    pub fn to_local(&self, real: Instant) -> Instant {
        if self.rate == 1.0 {
            return real;
        }
        self.origin
            + real
                .saturating_duration_since(self.origin)
                .mul_f64(self.rate)
    }

    /// The real instant at which this clock reads `local`.
    pub fn to_real(&self, local: Instant) -> Instant {
        if self.rate == 1.0 {
            return local;
        }
        self.origin
            + local
                .saturating_duration_since(self.origin)
                .div_f64(self.rate)
    }

    /// How long in real time a local duration lasts.
    pub fn real_duration(&self, local: std::time::Duration) -> std::time::Duration {
        if self.rate == 1.0 {
            return local;
        }
        local.div_f64(self.rate)
    }
}
