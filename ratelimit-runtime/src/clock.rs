//! Time for the memory backend. Redis checks always use the server's `TIME`.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `duration` in whole microseconds, `u64::MAX` for one beyond them (580,000 years).
pub(crate) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// A time `us` µs after the epoch given explicitly (tests) instead of the backend's clock;
/// the epoch itself is taken as its first µs.
#[cfg_attr(not(any(feature = "redis", feature = "test-clock")), allow(dead_code))]
pub(crate) fn explicit_us(us: u64) -> NonZeroU64 {
    NonZeroU64::new(us).unwrap_or(NonZeroU64::MIN)
}

/// `duration` in whole µs, rounded up (saturating).
pub(crate) fn micros_rounded_up(duration: Duration) -> u64 {
    micros(duration).saturating_add(u64::from(!duration.subsec_nanos().is_multiple_of(1000)))
}

/// A source of wall-clock time (since the UNIX epoch, in microseconds), so that tests can
/// drive the memory backend's windows without sleeping.
pub trait Clock: Send + Sync + 'static {
    /// Microseconds since the UNIX epoch.
    fn now_us(&self) -> u64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

/// A clock that moves only when told to; clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use redis_ratelimit::{clock::ManualClock, Limiter, Rule};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// let limiter = Limiter::memory_with_clock(clock.clone());
/// let rules = [Rule::new(1, Duration::from_secs(60))];
/// assert!(limiter.check("k", &rules).await.unwrap().allowed);
/// assert!(!limiter.check("k", &rules).await.unwrap().allowed);
/// clock.advance(Duration::from_secs(60));
/// assert!(limiter.check("k", &rules).await.unwrap().allowed);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `since_epoch`.
    pub fn new(since_epoch: Duration) -> Self {
        ManualClock(Arc::new(AtomicU64::new(since_epoch.as_micros() as u64)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_micros() as u64, Ordering::SeqCst);
    }

    /// Sets the clock to `since_epoch`.
    pub fn set(&self, since_epoch: Duration) {
        self.0
            .store(since_epoch.as_micros() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
