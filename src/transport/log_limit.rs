//! Rate-limited warnings: the first of a kind per key (a remote address, a peer) per
//! window is a warning, the rest of that window are debug lines, and the next warning
//! says how many were held back. A peer that fails its handshake every 20 ms makes one
//! WARN line a minute, not 3 000.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The window of [`LogLimit`] in the transports: one warning per key per minute.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// How many keys are remembered; past that, windows that have ended are forgotten, and
/// if all are current every new key shares one slot (an attacker with many addresses
/// cannot grow the map, nor get more than one warning a window per slot).
const MAX_KEYS: usize = 1024;

/// What the caller should do with one occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Log at WARN; `suppressed` occurrences of this key were logged at DEBUG since the
    /// last warning.
    Warn {
        /// Occurrences held back since the previous warning.
        suppressed: u64,
    },
    /// Log at DEBUG.
    Debug,
}

/// See the [module docs](self).
#[derive(Debug)]
pub(crate) struct LogLimit {
    window: Duration,
    keys: Mutex<HashMap<String, Slot>>,
}

#[derive(Debug)]
struct Slot {
    warned_at: Instant,
    suppressed: u64,
}

impl LogLimit {
    pub(crate) fn new(window: Duration) -> LogLimit {
        LogLimit {
            window,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one occurrence for `key` at `now`.
    pub(crate) fn check(&self, key: &str, now: Instant) -> Verdict {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !keys.contains_key(key) && keys.len() >= MAX_KEYS {
            let window = self.window;
            keys.retain(|_, s| now.saturating_duration_since(s.warned_at) < window);
        }
        let key = if !keys.contains_key(key) && keys.len() >= MAX_KEYS {
            "(other keys)"
        } else {
            key
        };
        match keys.get_mut(key) {
            Some(slot) if now.saturating_duration_since(slot.warned_at) < self.window => {
                slot.suppressed += 1;
                Verdict::Debug
            }
            Some(slot) => {
                let suppressed = std::mem::take(&mut slot.suppressed);
                slot.warned_at = now;
                Verdict::Warn { suppressed }
            }
            None => {
                keys.insert(
                    key.to_owned(),
                    Slot {
                        warned_at: now,
                        suppressed: 0,
                    },
                );
                Verdict::Warn { suppressed: 0 }
            }
        }
    }
}

/// Logs `msg` at WARN or DEBUG as `limit` decides for `key`, with the key-value pairs
/// given, and `suppressed` (how many like it were logged at DEBUG since the last
/// warning) on warnings.
macro_rules! warn_limited {
    ($limit:expr, $key:expr, $log:expr, $msg:expr; $($kv:tt)*) => {
        match $limit.check($key, std::time::Instant::now()) {
            $crate::transport::log_limit::Verdict::Warn { suppressed } => {
                slog::warn!($log, $msg; $($kv)* "suppressed_in_last_minute" => suppressed)
            }
            $crate::transport::log_limit::Verdict::Debug => slog::debug!($log, $msg; $($kv)*),
        }
    };
}
pub(crate) use warn_limited;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_key_per_window_then_the_count_of_held_back_ones() {
        let l = LogLimit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(l.check("a", t0), Verdict::Warn { suppressed: 0 });
        for i in 1..=5 {
            assert_eq!(l.check("a", t0 + Duration::from_secs(i)), Verdict::Debug);
        }
        assert_eq!(l.check("b", t0), Verdict::Warn { suppressed: 0 });
        assert_eq!(
            l.check("a", t0 + Duration::from_secs(61)),
            Verdict::Warn { suppressed: 5 }
        );
        assert_eq!(l.check("a", t0 + Duration::from_secs(62)), Verdict::Debug);
    }

    #[test]
    fn many_keys_do_not_grow_the_map_past_its_bound() {
        let l = LogLimit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let mut warnings = 0;
        for i in 0..(MAX_KEYS * 3) {
            if let Verdict::Warn { .. } = l.check(&format!("10.0.{}.{}", i / 256, i % 256), t0) {
                warnings += 1;
            }
        }
        assert_eq!(warnings, MAX_KEYS + 1, "one slot shared by the overflow");
        assert!(l.keys.lock().unwrap().len() <= MAX_KEYS + 1);
    }
}
