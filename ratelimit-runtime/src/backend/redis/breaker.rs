//! The circuit breaker: a backend that keeps failing is not sent to until a cool-down has
//! passed, so that a dead Redis costs each check microseconds instead of the timeout.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::{BackendError, BackendErrorKind};

/// When a limiter stops sending checks to a failing backend, and for how long.
///
/// After [`failures`](Self::new) consecutive failures (unreachable, timed out, refused; an
/// error about one key's contents does not count) the breaker *opens*: checks fail at once
/// with [`BackendErrorKind::Unavailable`], without touching the backend, for the
/// cool-down. Then one check is let through as a probe: if it succeeds the breaker closes
/// and every check goes to the backend again; if it fails, another cool-down starts. A
/// failing check goes through the limiter's failure policy (fail-open, fail-closed, or
/// the [fallback](crate::Limiter::fallback)) either way.
///
/// The default, [`Breaker::DEFAULT`], opens after 3 consecutive failures for 1 second.
///
/// ```
/// use std::time::Duration;
/// use redis_ratelimit::{Breaker, Limiter};
///
/// let limiter = Limiter::redis("redis://127.0.0.1:6379")?
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

    /// Opens after `failures` consecutive failures, for `cool_down`.
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

    /// How many consecutive failures open the breaker.
    pub const fn failures(&self) -> u32 {
        self.failures
    }

    /// How long the breaker stays open before it lets a probe through.
    pub const fn cool_down(&self) -> Duration {
        self.cool_down
    }

    /// A breaker that never opens: every check goes to the backend and waits for its
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

/// A [`Breaker`]'s state, shared by every check of one limiter. Lock-free: a check reads
/// one atomic while the breaker is closed.
pub(super) struct BreakerState {
    config: Breaker,
    consecutive: AtomicU32,
    /// Milliseconds since [`crate::throttle::epoch`] until which the breaker is open, plus one; 0
    /// while closed.
    open_until_ms: AtomicU64,
    /// Whether a probe is under way (at most one at a time).
    probing: AtomicBool,
}

/// What the breaker lets a check do.
pub(super) enum Admission<'a> {
    /// Send it; report how it went with [`Pass::record`].
    Send(Pass<'a>),
    /// Do not send it: the breaker is open.
    Refuse(BackendError),
}

/// A check the breaker let through. A probe that is dropped before it reports (its caller
/// gave up) lets the next check probe instead of keeping the breaker open.
pub(super) struct Pass<'a> {
    state: &'a BreakerState,
    probe: bool,
}

impl BreakerState {
    pub fn new(config: Breaker) -> Self {
        BreakerState {
            config,
            consecutive: AtomicU32::new(0),
            open_until_ms: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    pub fn admit(&self) -> Admission<'_> {
        self.admit_at(now_ms())
    }

    fn admit_at(&self, now_ms: u64) -> Admission<'_> {
        let until = self.open_until_ms.load(Ordering::Acquire);
        if until == 0 {
            return Admission::Send(Pass {
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
            return Admission::Send(Pass {
                state: self,
                probe: true,
            });
        }
        Admission::Refuse(self.open_error(until.saturating_sub(now_ms)))
    }

    fn open_error(&self, wait_ms: u64) -> BackendError {
        BackendError::new(
            BackendErrorKind::Unavailable,
            format!(
                "the backend failed {} checks in a row, so checks fail at once without \
                 reaching it (circuit breaker open); a probe goes through in {wait_ms} ms",
                self.config.failures
            ),
        )
    }

    fn open(&self, now_ms: u64) {
        let until = now_ms + self.config.cool_down.as_millis() as u64;
        self.open_until_ms.store(until.max(1), Ordering::Release);
    }

    fn close(&self) {
        self.consecutive.store(0, Ordering::Relaxed);
        self.open_until_ms.store(0, Ordering::Release);
    }
}

impl Pass<'_> {
    /// Reports how the check went: `Err` with a failure the breaker counts, or `Ok`.
    pub fn record<T>(self, result: &Result<T, BackendError>) {
        self.record_at(result, now_ms());
    }

    fn record_at<T>(mut self, result: &Result<T, BackendError>, now_ms: u64) {
        let state = self.state;
        match result {
            Err(err) if counts(err) => {
                if self.probe {
                    state.open(now_ms);
                } else {
                    let failures = state.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
                    if failures >= state.config.failures
                        && state.open_until_ms.load(Ordering::Acquire) == 0
                    {
                        state.open(now_ms);
                    }
                }
            }
            // An answer, even an error about one key, shows the backend is there.
            _ => {
                if self.probe || state.consecutive.load(Ordering::Relaxed) > 0 {
                    state.close();
                }
            }
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

/// Whether `err` says the backend cannot serve (and so counts towards opening).
fn counts(err: &BackendError) -> bool {
    err.kind() != BackendErrorKind::Command
}

fn now_ms() -> u64 {
    crate::throttle::epoch().elapsed().as_millis() as u64 + 1
}

impl fmt::Debug for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerState")
            .field("config", &self.config)
            .field("consecutive", &self.consecutive.load(Ordering::Relaxed))
            .field("open", &(self.open_until_ms.load(Ordering::Relaxed) != 0))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Result<(), BackendError> {
        Err(BackendError::new(BackendErrorKind::Timeout, "slow"))
    }

    fn sends(state: &BreakerState, now: u64) -> Option<Pass<'_>> {
        match state.admit_at(now) {
            Admission::Send(pass) => Some(pass),
            Admission::Refuse(_) => None,
        }
    }

    #[test]
    fn opens_after_consecutive_failures_and_probes_after_the_cool_down() {
        let state = BreakerState::new(Breaker::new(3, Duration::from_millis(100)));
        for now in 1..3 {
            sends(&state, now).unwrap().record_at(&failure(), now);
        }
        // A success in between starts the count again.
        sends(&state, 3).unwrap().record_at(&Ok(()), 3);
        for now in 4..7 {
            sends(&state, now).unwrap().record_at(&failure(), now);
        }
        assert!(sends(&state, 7).is_none(), "open after 3 in a row");
        assert!(sends(&state, 105).is_none(), "still cooling down");
        let probe = sends(&state, 106).expect("one probe after the cool-down");
        assert!(sends(&state, 106).is_none(), "only one probe at a time");
        probe.record_at(&failure(), 106);
        assert!(sends(&state, 205).is_none(), "a failed probe reopens it");
        sends(&state, 206).unwrap().record_at(&Ok(()), 206);
        for now in 207..210 {
            assert!(sends(&state, now).is_some(), "closed after a good probe");
        }
    }

    #[test]
    fn errors_about_one_key_do_not_count() {
        let state = BreakerState::new(Breaker::new(1, Duration::from_secs(1)));
        let wrong_type: Result<(), _> =
            Err(BackendError::new(BackendErrorKind::Command, "WRONGTYPE"));
        sends(&state, 1).unwrap().record_at(&wrong_type, 1);
        assert!(sends(&state, 2).is_some());
    }

    #[test]
    fn a_dropped_probe_lets_the_next_check_probe() {
        let state = BreakerState::new(Breaker::new(1, Duration::from_millis(10)));
        sends(&state, 1).unwrap().record_at(&failure(), 1);
        drop(sends(&state, 20).expect("probe"));
        assert!(
            sends(&state, 20).is_some(),
            "the abandoned probe's turn passes on"
        );
    }

    #[test]
    fn the_refusal_says_what_happened() {
        let state = BreakerState::new(Breaker::new(2, Duration::from_millis(500)));
        for now in [1, 2] {
            sends(&state, now).unwrap().record_at(&failure(), now);
        }
        let Admission::Refuse(err) = state.admit_at(102) else {
            panic!("open");
        };
        assert_eq!(err.kind(), BackendErrorKind::Unavailable);
        let message = err.to_string();
        assert!(message.contains("failed 2 checks in a row"), "{message}");
        assert!(message.contains("circuit breaker open"), "{message}");
        assert!(message.contains("in 400 ms"), "{message}");
    }

    #[test]
    fn never_does_not_open() {
        let state = BreakerState::new(Breaker::never());
        for now in 0..1_000 {
            sends(&state, now).unwrap().record_at(&failure(), now);
        }
        assert!(sends(&state, 1_000).is_some());
    }
}
