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

/// The longest window among `rules`, in µs: how long a check's writes stay meaningful.
pub(crate) fn longest_window_us(rules: &[Rule]) -> u64 {
    rules.iter().map(Rule::window_us).max().unwrap_or(0)
}

/// What one check did to a key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub decision: RawDecision,
    /// `Some(ttl)` when the state was written: the key now expires `ttl` µs from `now`
    /// (what the script's `PEXPIRE` does). `None` leaves the expiry as it was.
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

#[cfg(test)]
mod tests {
    use super::ttl_us;

    #[test]
    fn ttl_is_whole_milliseconds_rounded_up_plus_one_second() {
        assert_eq!(ttl_us(0), 1_000_000);
        assert_eq!(ttl_us(1), 1_001_000);
        assert_eq!(ttl_us(1_000), 1_001_000);
        assert_eq!(ttl_us(1_001), 1_002_000);
        assert_eq!(ttl_us(60_000_000), 61_000_000);
    }
}
