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
