//! Logs that a request can trigger are throttled: a misconfiguration or an outage must not
//! write one line per request.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// Logs `tracing::$level!(fields, suppressed, message)` under the crate's target, at most
/// once per [`LogThrottle::INTERVAL`] from the place it is written: `suppressed` is how
/// many lines it held back since the last.
macro_rules! throttled {
    ($level:ident, [$($field:tt)+], $($message:tt)+) => {{
        static THROTTLE: $crate::throttle::LogThrottle = $crate::throttle::LogThrottle::new();
        if let Some(suppressed) = THROTTLE.admit() {
            tracing::$level!(target: "redis_ratelimit", $($field)+, suppressed, $($message)+);
        }
    }};
}
pub(crate) use throttled;

/// Lets one log line through per [`INTERVAL`](Self::INTERVAL) and counts the ones it holds
/// back.
pub(crate) struct LogThrottle {
    /// Milliseconds since [`epoch`] of the last line let through, plus one (0: never).
    last_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl LogThrottle {
    pub const INTERVAL: Duration = Duration::from_secs(10);

    /// A throttle that lets its first line through; `const`, for `static`s.
    pub const fn new() -> Self {
        LogThrottle {
            last_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(lines held back since the last one)` when a line may be logged now.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(epoch().elapsed().as_millis() as u64 + 1)
    }

    fn admit_at(&self, now: u64) -> Option<u64> {
        let last = self.last_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= Self::INTERVAL.as_millis() as u64;
        if due
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// Lets each distinct line through once: for a misconfiguration, which says the same on
/// every request until someone changes the configuration. Holds at most
/// [`LIMIT`](Self::LIMIT) lines; past that, new ones are held back too (a process with so
/// many distinct misconfigurations has said enough).
pub(crate) struct OnceEach {
    seen: LazyLock<Mutex<HashSet<String>>>,
}

impl OnceEach {
    pub const LIMIT: usize = 1024;

    pub const fn new() -> Self {
        OnceEach {
            seen: LazyLock::new(Mutex::default),
        }
    }

    /// Whether `line` is new (and now seen).
    pub fn first(&self, line: &str) -> bool {
        let mut seen = crate::sync::lock(&self.seen);
        if seen.contains(line) || seen.len() >= Self::LIMIT {
            return false;
        }
        seen.insert(line.to_owned())
    }
}

/// The process's reference instant for millisecond clocks kept in atomics.
pub(crate) fn epoch() -> Instant {
    static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
    *EPOCH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_throttled_and_count_what_they_hold_back() {
        let throttle = LogThrottle::new();
        let interval = LogThrottle::INTERVAL.as_millis() as u64;
        assert_eq!(throttle.admit_at(5), Some(0));
        assert_eq!(throttle.admit_at(6), None);
        assert_eq!(throttle.admit_at(4 + interval), None);
        assert_eq!(throttle.admit_at(5 + interval), Some(2));
        assert_eq!(throttle.admit_at(6 + interval), None);
    }

    #[test]
    fn each_distinct_line_is_let_through_once() {
        let once = OnceEach::new();
        assert!(once.first("a"));
        assert!(!once.first("a"));
        assert!(once.first("b"));
        for i in 0..OnceEach::LIMIT {
            once.first(&i.to_string());
        }
        assert!(!once.first("past the limit"));
    }
}
