//! Time as other processes on the same host can compare it, and a node's own view of
//! time.
//!
//! Two clocks matter (see `docs/design.md`, section 8):
//!
//! * `CLOCK_MONOTONIC` ([`monotonic_ns`]): what tokio's timers and `Instant` run on, so
//!   what the driver's ticks, raft-rs's election timers and the restart quiet period
//!   count. On Linux it does **not** count time the system spent suspended.
//! * `CLOCK_BOOTTIME` ([`boottime_ns`]): the same clock, plus the time suspended. The
//!   lease's validity is checked on both: a lease holds while *both* say its period has
//!   not run out since the round that earned it was sent, so a leader woken from a
//!   suspend sees at once that its lease ended during it.
//!
//! Event timestamps for other tools stay `CLOCK_MONOTONIC` ([`monotonic_ns`],
//! [`instant_to_monotonic_ns`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; the clock ids used here
    // always exist on the platforms they are compiled for.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: comparable across processes on one host.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_BOOTTIME` now, in nanoseconds: like [`monotonic_ns`], but it also counts the
/// time the system was suspended. Where there is no such clock (outside Linux and
/// Android), `CLOCK_MONOTONIC`.
pub fn boottime_ns() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        clock_ns(libc::CLOCK_BOOTTIME)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        clock_ns(libc::CLOCK_MONOTONIC)
    }
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

/// One reading of a node's two clocks: the monotonic one (timers, ticks) and the
/// boot-time one (which also counts a suspend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// The monotonic clock (tokio's `Instant`, skewed in clock tests).
    pub(crate) mono: Instant,
    /// The boot-time clock, since an arbitrary origin.
    pub(crate) boot: Duration,
}

impl Stamp {
    /// Both clocks `d` later. The boot-time part saturates (an end that never comes).
    pub(crate) fn add(self, d: Duration) -> Stamp {
        Stamp {
            mono: self.mono + d,
            boot: self.boot.saturating_add(d),
        }
    }

    /// Whether this reading is earlier than `until` on **both** clocks: a period that
    /// ends at `until` has not run out by either.
    pub(crate) fn before(self, until: Stamp) -> bool {
        self.mono < until.mono && self.boot < until.boot
    }

    /// The later of two ends, clock by clock.
    pub(crate) fn max(self, other: Stamp) -> Stamp {
        Stamp {
            mono: self.mono.max(other.mono),
            boot: self.boot.max(other.boot),
        }
    }
}

/// What the simulation did to a node's clock so far (see [`ClockControl`]).
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    /// Bumped by every change.
    generation: u64,
    /// The sum of every forward step.
    jumped: Duration,
    /// Stalls in progress that stop the monotonic clock (every stall does).
    mono_stalls: u32,
    /// Stalls in progress that stop the boot-time clock too (the guest never saw them).
    boot_stalls: u32,
}

/// Test hook: clock faults for one node, driven from outside the node (the simulation).
///
/// A forward step moves both of the node's clocks ahead at once; a stall stops its
/// monotonic clock (and with it its ticks, timers and the restart quiet period) until
/// it resumes, without counting the stalled span, and stops its boot-time clock too
/// unless the stall is a suspend that `CLOCK_BOOTTIME` counts. The process and its
/// network keep running meanwhile. A fault takes effect at the node's next reading of
/// its clock, which comes at once: the driver's timers wait on the control. One control
/// outlives the node's restarts (a
/// restarted process on a stalled host reads the stalled clock). Set it with the hidden
/// `Config::clock_control`; production nodes have none.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ClockControl {
    faults: Arc<watch::Sender<Faults>>,
}

impl Default for ClockControl {
    fn default() -> Self {
        ClockControl::new()
    }
}

impl ClockControl {
    /// A control with no fault yet.
    pub fn new() -> Self {
        ClockControl {
            faults: Arc::new(watch::Sender::new(Faults::default())),
        }
    }

    /// Steps the node's clocks forward by `by`, now.
    pub fn jump(&self, by: Duration) {
        self.faults.send_modify(|f| {
            f.jumped += by;
            f.generation += 1;
        });
    }

    /// The node's clock stands still from now until [`resume`](Self::resume) (with the
    /// same `counted_by_boottime`). With `counted_by_boottime` only the monotonic clock
    /// stops (a system suspend: `CLOCK_BOOTTIME` counts it); without, both do (a pause
    /// that neither clock of the guest counts).
    pub fn stall(&self, counted_by_boottime: bool) {
        self.faults.send_modify(|f| {
            f.mono_stalls += 1;
            if !counted_by_boottime {
                f.boot_stalls += 1;
            }
            f.generation += 1;
        });
    }

    /// Ends one [`stall`](Self::stall): the clock runs on from where it stood.
    pub fn resume(&self, counted_by_boottime: bool) {
        self.faults.send_modify(|f| {
            f.mono_stalls = f.mono_stalls.saturating_sub(1);
            if !counted_by_boottime {
                f.boot_stalls = f.boot_stalls.saturating_sub(1);
            }
            f.generation += 1;
        });
    }
}

/// The piecewise-linear map from real time to a controlled clock's readings: from the
/// anchor on, each clock runs at the rate unless it stands still.
#[derive(Debug, Clone, Copy)]
struct Segment {
    /// The generation of the faults this segment follows.
    generation: u64,
    /// The faults' `jumped` already applied.
    jumped: Duration,
    real: Instant,
    mono: Instant,
    boot: Duration,
    mono_still: bool,
    boot_still: bool,
}

/// The host's wall clock in milliseconds since the Unix epoch (0 before it).
pub(crate) fn wall_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Real time `d` on a clock of rate `rate` (exact at 1.0).
fn scale(d: Duration, rate: f64) -> Duration {
    if rate == 1.0 {
        d
    } else {
        d.mul_f64(rate)
    }
}

/// Longer than any run: a boot-time end this far off never comes.
const NEVER: Duration = Duration::from_secs(1 << 32);

/// How much real time a clock of rate `rate` takes to count `d`: never less (float
/// rounding could wake a sleeper a nanosecond early, which costs a whole timer tick).
/// `None` for a span that never ends.
fn unscale(d: Duration, rate: f64) -> Option<Duration> {
    if d >= NEVER {
        None
    } else if rate == 1.0 {
        Some(d)
    } else {
        Some(d.div_f64(rate) + Duration::from_nanos(10))
    }
}

impl Segment {
    fn at(&self, real: Instant, rate: f64) -> Stamp {
        let run = scale(real.saturating_duration_since(self.real), rate);
        Stamp {
            mono: if self.mono_still {
                self.mono
            } else {
                self.mono + run
            },
            boot: if self.boot_still {
                self.boot
            } else {
                self.boot + run
            },
        }
    }
}

#[derive(Debug)]
struct Controlled {
    control: ClockControl,
    segment: Mutex<Segment>,
}

impl Controlled {
    /// The segment in force at `real`, after applying any fault that came since.
    fn segment_at(&self, real: Instant, rate: f64) -> Segment {
        let faults = *self.control.faults.borrow();
        let mut seg = self
            .segment
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if faults.generation != seg.generation {
            let here = seg.at(real, rate);
            let step = faults.jumped.saturating_sub(seg.jumped);
            *seg = Segment {
                generation: faults.generation,
                jumped: faults.jumped,
                real: real.max(seg.real),
                mono: here.mono + step,
                boot: here.boot + step,
                mono_still: faults.mono_stalls > 0,
                boot_still: faults.boot_stalls > 0,
            };
        }
        *seg
    }
}

/// A node's view of time. In production it is the real clock: tokio's `Instant`
/// (`CLOCK_MONOTONIC`) and `CLOCK_BOOTTIME`. The simulation and the clock tests run a
/// node whose clock runs `rate` times as fast as real time, to check where `LeaseBased`
/// reads stop being safe (see [`Timing::max_clock_drift`]), and whose clock a hidden
/// [`ClockControl`] can step forward or stall. Clones share one clock.
///
/// [`Timing::max_clock_drift`]: crate::Timing::max_clock_drift
#[derive(Debug, Clone)]
pub struct LocalClock {
    rate: f64,
    origin: Instant,
    controlled: Option<Arc<Controlled>>,
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
            controlled: None,
        }
    }

    /// As [`with_rate`](Self::with_rate), with faults from `control` (test hook).
    #[doc(hidden)]
    pub fn controlled(rate: f64, control: ClockControl) -> Self {
        let origin = Instant::now();
        let faults = *control.faults.borrow();
        let segment = Segment {
            generation: faults.generation,
            jumped: faults.jumped,
            real: origin,
            mono: origin,
            boot: Duration::ZERO,
            mono_still: faults.mono_stalls > 0,
            boot_still: faults.boot_stalls > 0,
        };
        LocalClock {
            rate,
            origin,
            controlled: Some(Arc::new(Controlled {
                control,
                segment: Mutex::new(segment),
            })),
        }
    }

    /// The rate relative to real time.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The real clock of production: no rate, no faults.
    fn is_real(&self) -> bool {
        self.controlled.is_none() && self.rate == 1.0
    }

    /// Wall-clock time now, in milliseconds since the Unix epoch (informational, as in
    /// the leadership history). A clock with faults (the simulation's) has no wall clock
    /// of its own: it counts from 2026-01-01 by its local time, so that a run replays.
    pub(crate) fn unix_ms(&self) -> u64 {
        if self.controlled.is_some() {
            const SIM_EPOCH_MS: u64 = 1_767_225_600_000;
            let since = self.now().saturating_duration_since(self.origin);
            return SIM_EPOCH_MS + since.as_millis() as u64;
        }
        wall_unix_ms()
    }

    /// Local time now (the monotonic clock).
    pub fn now(&self) -> Instant {
        self.to_local(Instant::now())
    }

    /// Both clocks now.
    pub(crate) fn stamp(&self) -> Stamp {
        if self.is_real() {
            return Stamp {
                mono: Instant::now(),
                boot: Duration::from_nanos(boottime_ns()),
            };
        }
        self.stamp_at(Instant::now())
    }

    /// Both clocks at real instant `real` (not before the last reading), for a simulated
    /// clock. For the real clock the boot-time part is the monotonic one.
    pub(crate) fn stamp_at(&self, real: Instant) -> Stamp {
        match &self.controlled {
            Some(c) => c.segment_at(real, self.rate).at(real, self.rate),
            None => {
                let mono = self.to_local(real);
                Stamp {
                    mono,
                    boot: mono.saturating_duration_since(self.origin),
                }
            }
        }
    }

    /// The local reading at real instant `real` (for a controlled clock: not before the
    /// last reading).
    pub fn to_local(&self, real: Instant) -> Instant {
        if let Some(c) = &self.controlled {
            return c.segment_at(real, self.rate).at(real, self.rate).mono;
        }
        if self.rate == 1.0 {
            return real;
        }
        self.origin
            + real
                .saturating_duration_since(self.origin)
                .mul_f64(self.rate)
    }

    /// The real instant at which this clock reads `local`, supposing it runs from now on
    /// (a stalled clock's future readings are then as if it resumed now). For a
    /// controlled clock and a reading it passed before its last fault, the moment of
    /// that fault: a clock that stepped over `local` passed it then.
    pub fn to_real(&self, local: Instant) -> Instant {
        match &self.controlled {
            None if self.rate == 1.0 => local,
            None => {
                self.origin
                    + local
                        .saturating_duration_since(self.origin)
                        .div_f64(self.rate)
            }
            Some(c) => {
                let real = Instant::now();
                let seg = c.segment_at(real, self.rate);
                let now = seg.at(real, self.rate);
                self.real_when(
                    real,
                    &seg,
                    seg.mono_still,
                    now.mono.saturating_duration_since(self.origin),
                    local.saturating_duration_since(self.origin),
                )
            }
        }
    }

    /// When a clock of this one's rate that reads `now` at `real`, in segment `seg`
    /// (standing still: `still`), reads `target`: see [`to_real`](Self::to_real).
    fn real_when(
        &self,
        real: Instant,
        seg: &Segment,
        still: bool,
        now: Duration,
        target: Duration,
    ) -> Instant {
        if target >= now {
            return unscale(target - now, self.rate)
                .and_then(|d| real.checked_add(d))
                .unwrap_or(real + NEVER);
        }
        if still {
            return seg.real;
        }
        real.checked_sub(self.real_duration(now - target))
            .unwrap_or(seg.real)
            .max(seg.real)
    }

    /// The real instant at which a period ending at `until` runs out on the first of the
    /// two clocks, supposing both run from now on (see [`to_real`](Self::to_real)).
    pub(crate) fn real_deadline(&self, until: Stamp) -> Instant {
        let Some(c) = &self.controlled else {
            let real = Instant::now();
            let now = self.stamp();
            let mono = self.to_real(until.mono);
            let boot = if until.boot >= now.boot {
                unscale(until.boot - now.boot, self.rate).and_then(|d| real.checked_add(d))
            } else {
                real.checked_sub(self.real_duration(now.boot - until.boot))
            };
            return boot.map_or(mono, |b| b.min(mono));
        };
        let real = Instant::now();
        let seg = c.segment_at(real, self.rate);
        let now = seg.at(real, self.rate);
        let mono = self.real_when(
            real,
            &seg,
            seg.mono_still,
            now.mono.saturating_duration_since(self.origin),
            until.mono.saturating_duration_since(self.origin),
        );
        let boot = self.real_when(real, &seg, seg.boot_still, now.boot, until.boot);
        mono.min(boot)
    }

    /// How long in real time a local duration lasts.
    pub fn real_duration(&self, local: std::time::Duration) -> std::time::Duration {
        if self.rate == 1.0 {
            return local;
        }
        local.div_f64(self.rate)
    }

    /// Sleeps until a period ending at `until` has run out on either clock (or a little
    /// after; callers check the clock again). A boot-time end beyond any real instant
    /// never wakes it.
    ///
    /// The real clock sleeps on tokio's timer for the shorter of the two remainders: the
    /// clocks run together except across a suspend, during which the process does not
    /// run; on waking, the driver's next turn (within a tick) reads both again.
    pub(crate) async fn sleep_until(&self, until: Stamp) {
        let Some(c) = &self.controlled else {
            let real = Instant::now();
            let now = self.stamp();
            let mono = self.to_real(until.mono);
            let boot = unscale(until.boot.saturating_sub(now.boot), self.rate)
                .and_then(|d| real.checked_add(d));
            tokio::time::sleep_until(boot.map_or(mono, |b| b.min(mono))).await;
            return;
        };
        loop {
            // Subscribe before reading, so that a fault that comes in between wakes us.
            let mut changed = c.control.faults.subscribe();
            let real = Instant::now();
            let seg = c.segment_at(real, self.rate);
            let now = seg.at(real, self.rate);
            if !now.before(until) {
                return;
            }
            // When each clock, running on, reaches its end.
            let wake = |still: bool, left: Duration| {
                (!still)
                    .then(|| unscale(left, self.rate).and_then(|d| real.checked_add(d)))
                    .flatten()
            };
            let mono = wake(seg.mono_still, until.mono - now.mono);
            let boot = wake(seg.boot_still, until.boot - now.boot);
            let at = match (mono, boot) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match at {
                Some(at) => {
                    tokio::select! {
                        biased;
                        _ = changed.changed() => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => {
                    // Both clocks stand still: only a fault's end can wake us.
                    if changed.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }

    /// A ticker of period `period` on this clock (see [`Ticker`]).
    pub(crate) fn ticker(&self, period: Duration) -> Ticker {
        let inner = if self.controlled.is_some() {
            TickerInner::Clocked {
                next: self.now(),
                period,
            }
        } else {
            TickerInner::Tokio {
                next: tokio::time::Instant::now(),
                period: self.real_duration(period),
                catch_up: self.real_duration(TICK_CATCH_UP),
            }
        };
        Ticker {
            clock: self.clone(),
            inner,
        }
    }
}

/// How much of a late tick the driver's next tick may catch up on: each tick is due a
/// period after the last was due, but never sooner than a period less this after the
/// last one ran. The lease is shorter by this much ([`crate::Timing::lease_duration`];
/// docs/design.md, section 2).
pub const TICK_CATCH_UP: Duration = Duration::from_millis(1);

/// The driver's tick timer, on its node's clock. The first tick completes at once. Each
/// next one is due a period after the previous one was due, so a tick run a little late
/// is caught up on and the ticks keep their rate; but never earlier than a period less
/// [`TICK_CATCH_UP`] after the previous one *ran*. So however late the driver runs them,
/// any `k` consecutive ticks after the first span at least `k × period − TICK_CATCH_UP`,
/// which the lease bound counts on (docs/design.md, section 2), and a tick that ran very
/// late, or a clock that stepped far forward, is followed by one tick, not a burst.
/// (tokio's `Interval` catches up on ticks up to 5 ms late, which a refusal window of
/// 2 ms ticks could lose several ticks to.) A stalled clock stalls the ticks.
pub(crate) struct Ticker {
    clock: LocalClock,
    inner: TickerInner,
}

enum TickerInner {
    /// Real (or only rate-skewed) clocks: tokio's timer, `period` in real time.
    Tokio {
        next: tokio::time::Instant,
        period: Duration,
        catch_up: Duration,
    },
    /// Controlled clocks: the next tick's local time.
    Clocked { next: Instant, period: Duration },
}

impl Ticker {
    /// Whether the next tick is due now ([`Ticker::tick`] would complete at once).
    pub(crate) fn is_due(&self) -> bool {
        match &self.inner {
            TickerInner::Tokio { next, .. } => tokio::time::Instant::now() >= *next,
            TickerInner::Clocked { next, .. } => self.clock.now() >= *next,
        }
    }

    /// Completes at the next tick. Cancel-safe.
    pub(crate) async fn tick(&mut self) {
        match &mut self.inner {
            TickerInner::Tokio {
                next,
                period,
                catch_up,
            } => {
                tokio::time::sleep_until(*next).await;
                let ran = tokio::time::Instant::now();
                *next = (*next + *period).max(ran + period.saturating_sub(*catch_up));
            }
            TickerInner::Clocked { next, period } => loop {
                let due = *next;
                self.clock
                    .sleep_until(Stamp {
                        mono: due,
                        boot: Duration::MAX,
                    })
                    .await;
                let now = self.clock.now();
                if now >= due {
                    *next = (due + *period).max(now + period.saturating_sub(TICK_CATCH_UP));
                    return;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn boottime_counts_at_least_what_monotonic_counts() {
        let (m0, b0) = (monotonic_ns(), boottime_ns());
        std::thread::sleep(Duration::from_millis(5));
        let (m1, b1) = (monotonic_ns(), boottime_ns());
        assert!(
            b0 >= m0 && b1 >= m1,
            "BOOTTIME ≥ MONOTONIC ({b0} {m0}, {b1} {m1})"
        );
        assert!(b1 - b0 >= 5_000_000, "BOOTTIME advanced {} ns", b1 - b0);
        // The real clock's stamp reads CLOCK_BOOTTIME.
        let s = LocalClock::default().stamp();
        let b2 = boottime_ns();
        assert!(s.boot.as_nanos() as u64 <= b2 && b2 - (s.boot.as_nanos() as u64) < 1_000_000_000);
    }

    #[test]
    fn a_step_moves_both_clocks_forward_at_once() {
        let ctl = ClockControl::new();
        let clock = LocalClock::controlled(1.0, ctl.clone());
        let t0 = clock.origin;
        let a = clock.stamp_at(t0 + 10 * MS);
        ctl.jump(300 * MS);
        let b = clock.stamp_at(t0 + 20 * MS);
        assert_eq!(b.mono - a.mono, 310 * MS);
        assert_eq!(b.boot - a.boot, 310 * MS);
        // A clock built after the step starts from real time (a new process).
        let fresh = LocalClock::controlled(1.0, ctl);
        assert_eq!(fresh.stamp_at(fresh.origin).mono, fresh.origin);
    }

    #[test]
    fn a_stall_stops_the_clock_and_the_stalled_span_is_never_counted() {
        for counted_by_boottime in [false, true] {
            let ctl = ClockControl::new();
            let clock = LocalClock::controlled(2.0, ctl.clone());
            let t0 = clock.origin;
            let _ = clock.stamp_at(t0 + 10 * MS); // 20 ms local
            ctl.stall(counted_by_boottime);
            let at_stall = clock.stamp_at(t0 + 10 * MS);
            let during = clock.stamp_at(t0 + 110 * MS);
            assert_eq!(
                during.mono, at_stall.mono,
                "the monotonic clock stands still"
            );
            if counted_by_boottime {
                assert_eq!(
                    during.boot - at_stall.boot,
                    200 * MS,
                    "a suspend is counted"
                );
            } else {
                assert_eq!(during.boot, at_stall.boot, "an unseen pause is not");
            }
            ctl.resume(counted_by_boottime);
            let _ = clock.stamp_at(t0 + 110 * MS);
            let after = clock.stamp_at(t0 + 120 * MS);
            assert_eq!(
                after.mono - at_stall.mono,
                20 * MS,
                "runs on from where it stood"
            );
            // A stall seen by a clock built while it lasts (a process restarted in it).
            ctl.stall(false);
            let fresh = LocalClock::controlled(1.0, ctl.clone());
            assert_eq!(fresh.stamp_at(fresh.origin + 50 * MS).mono, fresh.origin);
            ctl.resume(false);
        }
    }

    #[test]
    fn a_stamp_is_before_an_end_only_while_neither_clock_reached_it() {
        let t = Instant::now();
        let s = Stamp {
            mono: t,
            boot: 100 * MS,
        };
        let until = s.add(50 * MS);
        assert!(s.before(until));
        assert!(
            !Stamp {
                mono: t,
                boot: 150 * MS
            }
            .before(until),
            "boot-time ran out"
        );
        assert!(
            !Stamp {
                mono: t + 50 * MS,
                boot: 100 * MS
            }
            .before(until),
            "monotonic ran out"
        );
        assert_eq!(s.max(until), until);
        assert_eq!(
            Stamp {
                mono: t,
                boot: Duration::MAX
            }
            .add(MS)
            .boot,
            Duration::MAX
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reading_the_clock_stepped_over_maps_to_the_moment_of_the_step() {
        let ctl = ClockControl::new();
        let clock = LocalClock::controlled(1.0, ctl.clone());
        let t0 = Instant::now();
        let end = clock.now() + 100 * MS;
        assert_eq!(clock.to_real(end), t0 + 100 * MS);
        tokio::time::advance(40 * MS).await;
        ctl.jump(200 * MS);
        let _ = clock.now(); // the step takes effect at this reading, 40 ms in
        tokio::time::advance(10 * MS).await;
        // The clock read 40 ms at the step and 240 ms right after: it passed 100 ms then.
        assert_eq!(clock.to_real(end), t0 + 40 * MS);
        assert_eq!(clock.to_real(clock.now() + 5 * MS), t0 + 55 * MS);
        // A period ending at `end` on both clocks ran out at the step too.
        let until = Stamp {
            mono: end,
            boot: 100 * MS,
        };
        assert_eq!(clock.real_deadline(until), t0 + 40 * MS);
        // A stall that CLOCK_BOOTTIME counts: the boot-time end decides.
        ctl.stall(true);
        let now = clock.stamp();
        let later = Stamp {
            mono: now.mono + 100 * MS,
            boot: now.boot + 30 * MS,
        };
        assert_eq!(clock.real_deadline(later), Instant::now() + 30 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn ticks_stall_with_the_clock_and_a_step_fires_one_tick_not_a_burst() {
        let ctl = ClockControl::new();
        let clock = LocalClock::controlled(1.0, ctl.clone());
        let mut ticker = clock.ticker(10 * MS);
        let start = Instant::now();
        ticker.tick().await; // at once
        assert_eq!(Instant::now(), start);
        ticker.tick().await;
        assert_eq!(Instant::now() - start, 10 * MS);
        // Stalled 5 ms before the next tick is due, for 80 ms: the tick comes 5 ms after
        // the clock resumes (the stalled span is not counted).
        tokio::time::sleep(5 * MS).await;
        ctl.stall(false);
        let resume = ctl.clone();
        tokio::spawn(async move {
            tokio::time::sleep(80 * MS).await;
            resume.resume(false);
        });
        let before = Instant::now();
        ticker.tick().await;
        assert_eq!(Instant::now() - before, 85 * MS);
        // A step of 10 periods: one tick at once, the next a period (less the catch-up)
        // later.
        ctl.jump(100 * MS);
        let before = Instant::now();
        ticker.tick().await;
        assert!(Instant::now() - before < MS);
        ticker.tick().await;
        assert_eq!(Instant::now() - before, 10 * MS - TICK_CATCH_UP);
    }

    /// The lease bound's premise (docs/design.md, section 2): a tick is never followed by
    /// the next one sooner than a period less `TICK_CATCH_UP` after it ran, on real
    /// (tokio) and on controlled clocks alike; a little lateness is caught up on.
    #[tokio::test(start_paused = true)]
    async fn a_late_tick_is_caught_up_on_by_at_most_the_catch_up() {
        assert_eq!(TICK_CATCH_UP, MS);
        let ctl = ClockControl::new();
        for clock in [
            LocalClock::with_rate(1.0),
            LocalClock::controlled(1.0, ctl.clone()),
        ] {
            let mut ticker = clock.ticker(10 * MS);
            ticker.tick().await; // at once
                                 // The driver was busy: it comes back to the ticker 3 ms after the tick was due
                                 // (under tokio's 5 ms catch-up threshold).
            tokio::time::sleep(13 * MS).await;
            ticker.tick().await; // due 3 ms ago: at once
            let ran = Instant::now();
            ticker.tick().await;
            assert_eq!(Instant::now() - ran, 9 * MS, "a period less the catch-up");
            // The catch-up's worth late (tokio's timers count whole milliseconds): caught
            // up on, the ticks keep their rate.
            tokio::time::sleep(11 * MS).await;
            let due = Instant::now() - MS;
            ticker.tick().await;
            ticker.tick().await;
            assert_eq!(Instant::now() - due, 10 * MS, "on the old schedule");
        }
    }
}
