//! How rules are counted. The arithmetic lives here, apart from storage: the memory
//! backend runs these functions, and each `scripts/<algorithm>.lua` is the same arithmetic
//! for Redis. Both answer a [`RawDecision`] in microseconds, so they can be compared exactly.

mod fixed_window;
mod sliding_log;
mod sliding_window;
mod token_bucket;

use crate::decision::RawDecision;
use crate::Rule;

/// How a set of rules is counted.
///
/// Every algorithm keeps all rules of a key in that one key, checks all rules before
/// updating any (so a denial consumes nothing), and takes time from the backend's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Exact: one log entry per admitted call; never more than `count` in any window.
    #[default]
    SlidingLog,
    /// One counter per rule per aligned window.
    FixedWindow,
    /// The previous aligned window's count weighted by its overlap, plus the current count.
    SlidingWindow,
    /// GCRA: bursts of up to `count`, refilled at one every `window / count`.
    TokenBucket,
}

impl Algorithm {
    /// The attribute's spelling: `SLIDING_LOG`, `FIXED_WINDOW`, `SLIDING_WINDOW`, `TOKEN_BUCKET`.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::SlidingLog => "SLIDING_LOG",
            Algorithm::FixedWindow => "FIXED_WINDOW",
            Algorithm::SlidingWindow => "SLIDING_WINDOW",
            Algorithm::TokenBucket => "TOKEN_BUCKET",
        }
    }
}

/// How long a key must live after a write, as the scripts' `PEXPIRE` sets it: `needed_us`
/// rounded up to whole milliseconds, plus a one-second margin, in µs.
///
/// `needed_us` is how long the state just written stays meaningful (for the sliding log,
/// the longest window). The margin only keeps a key a little longer than it matters, never
/// shorter: every algorithm ignores expired data by itself, so expiry frees memory and never
/// decides. Every script computes the same as `ttl_ms(needed_us)`:
/// `floor((needed_us + 999) / 1000) + 1000`.
pub(crate) fn ttl_us(needed_us: u64) -> u64 {
    const MARGIN_MS: u64 = 1000;
    needed_us
        .div_ceil(1000)
        .saturating_add(MARGIN_MS)
        .saturating_mul(1000)
}

/// The expiry a write of the fixed window, sliding window or token bucket leaves: their
/// scripts move a key's expiry only when the state written would outlive it, and then to
/// [`ttl_us`]`(reach_us)` from now; otherwise `SET ... KEEPTTL` keeps it, which costs Redis
/// less than setting it again.
///
/// `expires_at_us` is the key's expiry as the state records it (0 for a new key), moved
/// when the expiry moves. `needed_us` is how long the state just written matters;
/// `reach_us` (at least `needed_us`) how far ahead a write of the same rules can ever
/// need, so that a moved expiry also covers the writes after it: the token bucket's burst
/// span, the fixed and sliding window's `needed_us` itself (their state matters until a
/// window ends, whatever the calls). Returns the new TTL, or `None` when the expiry already
/// covers `needed_us` from `now_us`. Either way the key lives at least as long as the
/// state just written matters, which is all expiry is for.
pub(crate) fn extend_expiry(
    expires_at_us: &mut u64,
    now_us: u64,
    needed_us: u64,
    reach_us: u64,
) -> Option<u64> {
    if *expires_at_us >= now_us.saturating_add(needed_us) {
        return None;
    }
    let ttl = ttl_us(reach_us.max(needed_us));
    *expires_at_us = now_us.saturating_add(ttl);
    Some(ttl)
}

/// The longest window among `rules`, in µs: how long a check's writes stay meaningful.
pub(crate) fn longest_window_us(rules: &[Rule]) -> u64 {
    rules.iter().map(Rule::window_us).max().unwrap_or(0)
}

/// What one check did to a key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub decision: RawDecision,
    /// `Some(ttl)` when the check moved the key's expiry: the key now expires `ttl` µs from
    /// `now` (what the script's `PEXPIRE` or `SET ... PX` does). `None` leaves the expiry
    /// as it was: a peek or a denial, which write nothing, or a write the expiry already
    /// covers (see [`extend_expiry`]). A check of an absent key that writes always moves it.
    pub ttl_us: Option<u64>,
}

/// The state one key holds, for whichever algorithm counts it.
#[derive(Debug)]
pub(crate) enum KeyState {
    SlidingLog(sliding_log::State),
    FixedWindow(fixed_window::State),
    SlidingWindow(sliding_window::State),
    TokenBucket(token_bucket::State),
}

impl KeyState {
    /// The empty state of a key that does not exist yet.
    pub fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::SlidingLog => KeyState::SlidingLog(Default::default()),
            Algorithm::FixedWindow => KeyState::FixedWindow(Default::default()),
            Algorithm::SlidingWindow => KeyState::SlidingWindow(Default::default()),
            Algorithm::TokenBucket => KeyState::TokenBucket(Default::default()),
        }
    }

    /// The algorithm whose state this is.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            KeyState::SlidingLog(_) => Algorithm::SlidingLog,
            KeyState::FixedWindow(_) => Algorithm::FixedWindow,
            KeyState::SlidingWindow(_) => Algorithm::SlidingWindow,
            KeyState::TokenBucket(_) => Algorithm::TokenBucket,
        }
    }

    /// Checks `rules` at `now_us`; records the call when `consume` and every rule admits it.
    pub fn check(&mut self, rules: &[Rule], now_us: u64, consume: bool) -> Outcome {
        match self {
            KeyState::SlidingLog(s) => sliding_log::check(s, rules, now_us, consume),
            KeyState::FixedWindow(s) => fixed_window::check(s, rules, now_us, consume),
            KeyState::SlidingWindow(s) => sliding_window::check(s, rules, now_us, consume),
            KeyState::TokenBucket(s) => token_bucket::check(s, rules, now_us, consume),
        }
    }
}

/// Helpers shared by the algorithms' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::time::Duration;

    use crate::decision::RawDecision;
    use crate::Rule;

    /// A rule of `count` per `window_us` microseconds.
    pub fn rule(count: u64, window_us: u64) -> Rule {
        Rule::new(count, Duration::from_micros(window_us))
    }

    /// A decision, field by field.
    pub fn raw(
        allowed: bool,
        rule_index: usize,
        remaining: u64,
        reset: u64,
        retry: u64,
    ) -> RawDecision {
        RawDecision {
            allowed,
            rule_index,
            remaining,
            reset_after_us: reset,
            retry_after_us: retry,
        }
    }

    /// Calls `check(rules, now, consume)` every `step` µs from 1,234 µs until `denials`
    /// denials, and requires each denial's `retry_after` to be exact for its binding rule
    /// alone: a peek one µs earlier is denied, a peek on time is admitted.
    pub fn assert_retry_after_is_exact(
        mut check: impl FnMut(&[Rule], u64, bool) -> RawDecision,
        rules: &[Rule],
        step: u64,
        denials: usize,
    ) {
        let mut now = 1_234;
        let mut seen = 0;
        while seen < denials {
            let d = check(rules, now, true);
            if d.allowed {
                now += step;
                continue;
            }
            seen += 1;
            let binding = [rules[d.rule_index]];
            assert!(!check(&binding, now + d.retry_after_us - 1, false).allowed);
            now += d.retry_after_us;
            assert!(check(&binding, now, false).allowed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{extend_expiry, ttl_us};

    #[test]
    fn expiry_moves_only_when_the_state_would_outlive_it() {
        let mut expires = 0;
        assert_eq!(
            extend_expiry(&mut expires, 5_000_000, 1_500, 1_500),
            Some(1_002_000)
        );
        assert_eq!(expires, 6_002_000);
        // Covered, up to the last µs.
        assert_eq!(
            extend_expiry(&mut expires, 5_500_000, 502_000, 502_000),
            None
        );
        assert_eq!(expires, 6_002_000);
        assert_eq!(
            extend_expiry(&mut expires, 5_500_000, 502_001, 502_001),
            Some(1_503_000)
        );
        assert_eq!(expires, 7_003_000);
    }

    #[test]
    fn ttl_is_whole_milliseconds_rounded_up_plus_one_second() {
        assert_eq!(ttl_us(0), 1_000_000);
        assert_eq!(ttl_us(1), 1_001_000);
        assert_eq!(ttl_us(1_000), 1_001_000);
        assert_eq!(ttl_us(1_001), 1_002_000);
        assert_eq!(ttl_us(60_000_000), 61_000_000);
    }
}
