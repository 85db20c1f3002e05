//! The circuit breaker, one per Redis server: a server that keeps failing is not sent to
//! until a cool-down has passed, so that a dead or hung server costs the checks of its keys
//! microseconds instead of the timeout, and costs the checks of other servers' keys nothing.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// When a limiter stops sending checks to a failing Redis server, and for how long.
///
/// Each server has a breaker of its own, with this configuration: the one server of a
/// `redis://` URL, each master of a Redis Cluster (by address: when a replica is promoted,
/// the keys of its slots go to the new master's breaker, closed), the master that the
/// sentinels name (a new one after a failover), and, for a Cluster or Sentinel, the search
/// for where the servers are (`CLUSTER SLOTS` from the known nodes, the question to the
/// sentinels) when it must be made again.
///
/// After [`failures`](Self::new) consecutive failures of one server (unreachable, timed out,
/// a connection broken mid-call, the limiter's credentials refused; Redis's other error
/// answers come back in a round trip and do not count) its breaker *opens*:
/// checks of the keys it serves fail at once with
/// [`BackendErrorKind::Unavailable`](crate::BackendErrorKind::Unavailable), without touching
/// it, for the cool-down, and one warning names the server. Checks of keys on other servers
/// are not affected. After the cool-down one check of its keys is let through as a probe, to
/// that server only: if it succeeds the breaker closes and every check goes to the server
/// again; if it fails, another cool-down starts. A probe that finds the key's slot served
/// elsewhere (a failover) follows it there. A failing check goes through the limiter's
/// failure policy (fail-open, fail-closed, or the [fallback](crate::Limiter::fallback),
/// which then counts only the keys of the failing server) either way.
///
/// The default, [`Breaker::DEFAULT`], opens after 3 consecutive failures for 1 second.
///
/// ```
/// use std::time::Duration;
/// use redis_ratelimit::{Breaker, Limiter};
///
/// let limiter = Limiter::redis("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")?
///     .breaker(Breaker::new(5, Duration::from_millis(500)));
/// # Ok::<(), redis_ratelimit::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Breaker {
    failures: u32,
    cool_down: Duration,
}

impl Breaker {
    /// 3 consecutive failures open the breaker for 1 second.
    pub const DEFAULT: Breaker = Breaker::new(3, Duration::from_secs(1));

    /// Opens after `failures` consecutive failures of one server, for `cool_down`.
    ///
    /// # Panics
    ///
    /// When `failures` is 0.
    pub const fn new(failures: u32, cool_down: Duration) -> Breaker {
        assert!(failures > 0, "a breaker opens after at least one failure");
        Breaker {
            failures,
            cool_down,
        }
    }

    /// How many consecutive failures of one server open its breaker.
    pub const fn failures(&self) -> u32 {
        self.failures
    }

    /// How long a breaker stays open before it lets a probe through.
    pub const fn cool_down(&self) -> Duration {
        self.cool_down
    }

    /// A breaker that never opens: every check goes to its server and waits for the
    /// timeout.
    pub const fn never() -> Breaker {
        Breaker {
            failures: u32::MAX,
            cool_down: Duration::ZERO,
        }
    }
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker::DEFAULT
    }
}

/// A [`Breaker`]'s state for one server, shared by every check sent to it. Lock-free: a
/// check reads one atomic while the breaker is closed.
pub(super) struct BreakerState {
    config: Breaker,
    /// What messages call the server: `Redis at 127.0.0.1:7001`, `the sentinels`.
    server: Box<str>,
    consecutive: AtomicU32,
    /// Milliseconds since [`crate::throttle::epoch`] until which the breaker is open, plus
    /// one; 0 while closed.
    open_until_ms: AtomicU64,
    /// Whether a probe is under way (at most one at a time).
    probing: AtomicBool,
}

/// What one call's outcome says about its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Health {
    /// It answered (an error about one key's contents included).
    Answered,
    /// It could not be reached, did not answer in time, or cannot serve.
    Failed,
    /// Nothing: the call never reached it (a connection found broken before the write).
    Unknown,
}

/// A call the breaker let through; report how it went with [`record`](Self::record). A
/// probe that is dropped before it reports (its caller gave up) lets the next call probe
/// instead of keeping the breaker open.
pub(super) struct Pass<'a> {
    state: &'a BreakerState,
    probe: bool,
}

impl BreakerState {
    pub fn new(config: Breaker, server: impl Into<Box<str>>) -> Self {
        BreakerState {
            config,
            server: server.into(),
            consecutive: AtomicU32::new(0),
            open_until_ms: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// A pass for one call, or, while the breaker is open, why the call may not go.
    pub fn admit(&self) -> Result<Pass<'_>, String> {
        self.admit_at(now_ms())
    }

    /// Whether the breaker is open now (a probe may be due).
    pub fn is_open(&self) -> bool {
        self.open_until_ms.load(Ordering::Acquire) != 0
    }

    fn admit_at(&self, now_ms: u64) -> Result<Pass<'_>, String> {
        let until = self.open_until_ms.load(Ordering::Acquire);
        if until == 0 {
            return Ok(Pass {
                state: self,
                probe: false,
            });
        }
        if now_ms >= until
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(Pass {
                state: self,
                probe: true,
            });
        }
        Err(self.refusal(until.saturating_sub(now_ms)))
    }

    fn refusal(&self, wait_ms: u64) -> String {
        format!(
            "{} failed {} calls in a row, so the checks that need it fail at once without \
             reaching it (circuit breaker open); a probe goes through in {wait_ms} ms",
            self.server, self.config.failures
        )
    }

    /// Opens the breaker after consecutive failures; one warning per opening, from the
    /// call that opened it.
    fn open(&self, now_ms: u64) {
        let until = self.until(now_ms);
        if self
            .open_until_ms
            .compare_exchange(0, until, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::warn!(
                target: "redis_ratelimit",
                server = %self.server,
                failures = self.config.failures,
                cool_down_ms = self.config.cool_down.as_millis() as u64,
                "circuit breaker opened: {} failed {} calls in a row; the checks that need it \
                 fail at once (or go to the fallback) until a probe after the cool-down \
                 succeeds",
                self.server,
                self.config.failures,
            );
        }
    }

    /// Keeps the breaker open for another cool-down after a failed probe.
    fn reopen(&self, now_ms: u64) {
        self.open_until_ms
            .store(self.until(now_ms), Ordering::Release);
    }

    fn until(&self, now_ms: u64) -> u64 {
        (now_ms + self.config.cool_down.as_millis() as u64).max(1)
    }

    fn close(&self) {
        self.consecutive.store(0, Ordering::Relaxed);
        if self.open_until_ms.swap(0, Ordering::AcqRel) != 0 {
            tracing::info!(
                target: "redis_ratelimit",
                server = %self.server,
                "circuit breaker closed: {} answers again",
                self.server,
            );
        }
    }
}

impl Pass<'_> {
    /// Reports how the call went.
    pub fn record(self, health: Health) {
        self.record_at(health, now_ms());
    }

    fn record_at(mut self, health: Health, now_ms: u64) {
        let state = self.state;
        match health {
            Health::Failed if self.probe => state.reopen(now_ms),
            Health::Failed => {
                let failures = state
                    .consecutive
                    .fetch_add(1, Ordering::Relaxed)
                    .saturating_add(1);
                if failures >= state.config.failures {
                    state.open(now_ms);
                }
            }
            Health::Answered => {
                // Read first: a store on every call would contend for the line between cores.
                if self.probe || state.consecutive.load(Ordering::Relaxed) > 0 {
                    state.close();
                }
            }
            Health::Unknown => {}
        }
        if std::mem::take(&mut self.probe) {
            state.probing.store(false, Ordering::Release);
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if self.probe {
            self.state.probing.store(false, Ordering::Release);
        }
    }
}

fn now_ms() -> u64 {
    crate::throttle::epoch().elapsed().as_millis() as u64 + 1
}

impl fmt::Debug for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerState")
            .field("server", &self.server)
            .field("config", &self.config)
            .field("consecutive", &self.consecutive.load(Ordering::Relaxed))
            .field("open", &self.is_open())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sends(state: &BreakerState, now: u64) -> Option<Pass<'_>> {
        state.admit_at(now).ok()
    }

    #[test]
    fn opens_after_consecutive_failures_and_probes_after_the_cool_down() {
        let state = BreakerState::new(Breaker::new(3, Duration::from_millis(100)), "Redis at h:1");
        for now in 1..3 {
            sends(&state, now).unwrap().record_at(Health::Failed, now);
        }
        // An answer in between starts the count again.
        sends(&state, 3).unwrap().record_at(Health::Answered, 3);
        for now in 4..7 {
            sends(&state, now).unwrap().record_at(Health::Failed, now);
        }
        assert!(sends(&state, 7).is_none(), "open after 3 in a row");
        assert!(sends(&state, 105).is_none(), "still cooling down");
        let probe = sends(&state, 106).expect("one probe after the cool-down");
        assert!(sends(&state, 106).is_none(), "only one probe at a time");
        probe.record_at(Health::Failed, 106);
        assert!(sends(&state, 205).is_none(), "a failed probe reopens it");
        sends(&state, 206).unwrap().record_at(Health::Answered, 206);
        for now in 207..210 {
            assert!(sends(&state, now).is_some(), "closed after a good probe");
        }
    }

    #[test]
    fn calls_that_never_reached_the_server_change_nothing() {
        let state = BreakerState::new(Breaker::new(2, Duration::from_millis(10)), "Redis at h:1");
        sends(&state, 1).unwrap().record_at(Health::Failed, 1);
        sends(&state, 2).unwrap().record_at(Health::Unknown, 2);
        sends(&state, 3).unwrap().record_at(Health::Failed, 3);
        assert!(sends(&state, 4).is_none(), "two failures in a row");
        let probe = sends(&state, 20).expect("probe");
        probe.record_at(Health::Unknown, 20);
        assert!(sends(&state, 20).is_some(), "the next call probes instead");
    }

    #[test]
    fn a_dropped_probe_lets_the_next_check_probe() {
        let state = BreakerState::new(Breaker::new(1, Duration::from_millis(10)), "Redis at h:1");
        sends(&state, 1).unwrap().record_at(Health::Failed, 1);
        drop(sends(&state, 20).expect("probe"));
        assert!(
            sends(&state, 20).is_some(),
            "the abandoned probe's turn passes on"
        );
    }

    #[test]
    fn the_refusal_names_the_server_and_when_it_is_probed() {
        let state = BreakerState::new(
            Breaker::new(2, Duration::from_millis(500)),
            "Redis at 127.0.0.1:7001",
        );
        for now in [1, 2] {
            sends(&state, now).unwrap().record_at(Health::Failed, now);
        }
        let message = state.admit_at(102).err().expect("open");
        assert!(
            message.starts_with("Redis at 127.0.0.1:7001 failed 2 calls in a row"),
            "{message}"
        );
        assert!(message.contains("circuit breaker open"), "{message}");
        assert!(message.contains("in 400 ms"), "{message}");
    }

    #[test]
    fn never_does_not_open() {
        let state = BreakerState::new(Breaker::never(), "Redis at h:1");
        for now in 0..1_000 {
            sends(&state, now).unwrap().record_at(Health::Failed, now);
        }
        assert!(sends(&state, 1_000).is_some());
    }
}
