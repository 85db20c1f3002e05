//! How rules are counted. The arithmetic lives here, apart from storage: the memory
//! backend runs these functions, and each `scripts/<algorithm>.lua` is the same arithmetic
//! for Redis. Both answer a [`RawDecision`] in microseconds, so they can be compared exactly.
//!
//! What every algorithm shares is here, once: how a call's `cost` is judged ([`Figures`]),
//! which rule binds ([`decide`]), how time is kept from running backwards ([`Clamp`]) and
//! how long a key lives ([`ttl_us`], [`extend_expiry`]). An algorithm only computes each
//! rule's [`Figures`] from its state and writes the state back.

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
    /// Exact: one log entry per admitted unit; never more than `count` in any window.
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

/// The time a check is counted at: never earlier than the key's stored state.
///
/// A check can read an older time than the state it finds: the memory backend reads its
/// clock before taking the key's lock, and Redis's `TIME` steps back when a failover
/// promotes a server whose clock is behind. Counting such a check at its own time would
/// treat newer state as stale (a window that has not started yet), and so forget calls.
/// It is counted at the state's latest time instead (`at = max(now, latest)`), and its
/// durations are answered from the caller's own `now`: `retry_after` and `reset_after`
/// grow by `lag = at - now`, so that a call at `now + retry_after` on the same clock
/// passes, exactly as without a lag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clamp {
    /// The time the check is counted at.
    pub at_us: u64,
    /// `at - now`: how far behind the state the caller's clock is.
    pub lag_us: u64,
}

impl Clamp {
    /// `now_us`, moved up to `latest_us`, the newest time the key's state records.
    pub fn new(now_us: u64, latest_us: Option<u64>) -> Self {
        let at_us = latest_us.map_or(now_us, |latest| latest.max(now_us));
        Clamp {
            at_us,
            lag_us: at_us - now_us,
        }
    }
}

/// One rule's view of a call of `cost` units, at the time the check is counted at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Units the rule would admit now.
    pub left: u64,
    /// Until the rule's window is fully free: after the call when the rule admits it, as
    /// things stand when it does not.
    pub reset_after_us: u64,
    /// 0 when the rule admits the call; else until it would, exactly; else
    /// [`RawDecision::NEVER`] when the cost is above the rule's count.
    pub retry_after_us: u64,
}

/// The decision for a call of `cost` units, from each rule's [`Figures`] in the rules'
/// order; `lag_us` as [`Clamp`] computed it.
///
/// The call passes when every rule admits it. The binding rule is then the one with the
/// least left (ties: lowest index), and `remaining` what it has left after the call (a
/// check) or now (a peek). Otherwise the binding rule is the denying one with the largest
/// `retry_after` (ties: lowest index; a cost that can never pass is the largest), and
/// `remaining` what it has left now. Every script makes the same choice in its `bind`.
pub(crate) fn decide(
    figures: impl IntoIterator<Item = Figures>,
    cost: u64,
    consume: bool,
    lag_us: u64,
) -> RawDecision {
    let mut denied: Option<(usize, Figures)> = None;
    let mut tightest: Option<(usize, Figures)> = None;
    for (i, f) in figures.into_iter().enumerate() {
        if f.retry_after_us > 0 {
            if denied.map_or(true, |(_, d)| f.retry_after_us > d.retry_after_us) {
                denied = Some((i, f));
            }
        } else if tightest.map_or(true, |(_, t)| f.left < t.left) {
            tightest = Some((i, f));
        }
    }
    let later = |us: u64| us.saturating_add(lag_us);
    if let Some((rule_index, f)) = denied {
        let retry_after_us = match f.retry_after_us {
            RawDecision::NEVER => RawDecision::NEVER,
            retry => later(retry),
        };
        return RawDecision {
            allowed: false,
            rule_index,
            remaining: f.left,
            reset_after_us: later(f.reset_after_us),
            retry_after_us,
        };
    }
    let (rule_index, f) = tightest.expect("at least one rule");
    RawDecision {
        allowed: true,
        rule_index,
        remaining: if consume { f.left - cost } else { f.left },
        reset_after_us: later(f.reset_after_us),
        retry_after_us: 0,
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
    needed_us
        .div_ceil(1000)
        .saturating_add(MARGIN_US / 1000)
        .saturating_mul(1000)
}

/// How much longer than its state matters a key always lives: one second. A check whose
/// clock is behind the key's (see [`Clamp`]) by less than this never finds the key
/// expired while its state still matters to it.
pub(crate) const MARGIN_US: u64 = 1_000_000;

/// The expiry a write of the fixed window, sliding window or token bucket leaves: their
/// scripts move a key's expiry only when the state written would outlive it (with the
/// [`MARGIN_US`]), and then to [`ttl_us`]`(reach_us)` from now; otherwise `SET ...
/// KEEPTTL` keeps it, which costs Redis less than setting it again.
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
    if *expires_at_us >= now_us.saturating_add(needed_us).saturating_add(MARGIN_US) {
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

/// The records of a key counted by the fixed window, the sliding window or the token
/// bucket: per rule of the last write, the algorithm's numbers `X`, in that write's order.
///
/// A rule is looked up at its own place first and elsewhere only when the rules changed,
/// as the scripts' `state.lua` does. A write of the same rules as the last (the steady
/// state) updates the records in place, allocating nothing; other rules replace them.
#[derive(Debug)]
pub(crate) struct Records<X>(Vec<(Rule, X)>);

impl<X> Default for Records<X> {
    fn default() -> Self {
        Records(Vec::new())
    }
}

impl<X> Records<X> {
    /// Where the records are stored (for [`prefetch`]).
    pub fn first(&self) -> *const (Rule, X) {
        self.0.as_ptr()
    }
}

impl<X: Copy> Records<X> {
    /// The record of `rule`, the `i`-th rule of a check.
    pub fn get(&self, i: usize, rule: &Rule) -> Option<X> {
        match self.0.get(i) {
            Some((r, x)) if r == rule => Some(*x),
            _ => self.0.iter().find(|(r, _)| r == rule).map(|&(_, x)| x),
        }
    }

    /// Every record, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = X> + '_ {
        self.0.iter().map(|&(_, x)| x)
    }

    /// Makes the records those of `rules`, rule `i`'s being `new(i, rule, its record
    /// before this write)`.
    pub fn write(&mut self, rules: &[Rule], mut new: impl FnMut(usize, &Rule, Option<X>) -> X) {
        let same =
            self.0.len() == rules.len() && self.0.iter().zip(rules).all(|((r, _), q)| r == q);
        if same {
            // Each rule finds its record at its own place, which no earlier rule writes.
            for (i, (rule, x)) in self.0.iter_mut().enumerate() {
                *x = new(i, rule, Some(*x));
            }
        } else {
            let records = rules
                .iter()
                .enumerate()
                .map(|(i, rule)| (*rule, new(i, rule, self.get(i, rule))))
                .collect();
            self.0 = records;
        }
    }
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

    /// Asks the processor to start loading the state's own memory (a log, or records),
    /// so that it arrives while the key is being compared rather than after.
    pub fn prefetch(&self) {
        match self {
            KeyState::SlidingLog(s) => s.ends().into_iter().for_each(prefetch),
            KeyState::FixedWindow(s) => prefetch(s.windows.first()),
            KeyState::SlidingWindow(s) => prefetch(s.windows.first()),
            KeyState::TokenBucket(s) => prefetch(s.tats.first()),
        }
    }

    /// Checks a call of `cost` units (at least 1) against `rules` at `now_us`; records it
    /// when `consume` and every rule admits it.
    pub fn check(&mut self, rules: &[Rule], now_us: u64, cost: u64, consume: bool) -> Outcome {
        match self {
            KeyState::SlidingLog(s) => sliding_log::check(s, rules, now_us, cost, consume),
            KeyState::FixedWindow(s) => fixed_window::check(s, rules, now_us, cost, consume),
            KeyState::SlidingWindow(s) => sliding_window::check(s, rules, now_us, cost, consume),
            KeyState::TokenBucket(s) => token_bucket::check(s, rules, now_us, cost, consume),
        }
    }
}

/// A hint to load the cache line at `ptr`; it reads nothing and cannot fault.
#[inline(always)]
fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch only hints the cache; any address is allowed.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
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

    /// Calls `check(rules, now, cost, consume)` every `step` µs from 1,234 µs, with the
    /// costs of `costs` in turn, until `denials` denials, and requires each denial's
    /// `retry_after` to be exact for its binding rule alone: a peek of the same cost one µs
    /// earlier is denied, one on time is admitted.
    pub fn assert_retry_after_is_exact(
        mut check: impl FnMut(&[Rule], u64, u64, bool) -> RawDecision,
        rules: &[Rule],
        costs: &[u64],
        step: u64,
        denials: usize,
    ) {
        let mut now = 1_234;
        let mut seen = 0;
        for &cost in costs.iter().cycle() {
            if seen == denials {
                break;
            }
            let d = check(rules, now, cost, true);
            if d.allowed {
                now += step;
                continue;
            }
            seen += 1;
            assert_ne!(d.retry_after_us, RawDecision::NEVER, "cost {cost}");
            let binding = [rules[d.rule_index]];
            let early = check(&binding, now + d.retry_after_us - 1, cost, false);
            assert!(!early.allowed, "cost {cost} passed 1 µs early");
            now += d.retry_after_us;
            assert!(check(&binding, now, cost, false).allowed, "cost {cost}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::rule;
    use super::{extend_expiry, ttl_us, Algorithm, KeyState};
    use crate::decision::RawDecision;

    const ALL: [Algorithm; 4] = [
        Algorithm::SlidingLog,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
    ];

    #[test]
    fn a_cost_above_a_count_is_denied_for_ever_and_consumes_nothing() {
        let rules = [rule(10, 1_000), rule(3, 100)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            assert!(s.check(&rules, 5_000, 1, true).decision.allowed);
            let never = s.check(&rules, 5_000, 4, true);
            assert!(!never.decision.allowed, "{algorithm:?}");
            assert_eq!(never.decision.rule_index, 1, "{algorithm:?}");
            assert_eq!(never.decision.retry_after_us, RawDecision::NEVER);
            assert_eq!(never.decision.remaining, 2, "{algorithm:?}: left now");
            assert_eq!(never.ttl_us, None);
            // Nothing was consumed: 2 units of the 3 are still there.
            let d = s.check(&rules, 5_000, 2, true).decision;
            assert_eq!((d.allowed, d.remaining), (true, 0), "{algorithm:?}");
        }
    }

    #[test]
    fn a_cost_uses_that_many_units_of_every_rule() {
        let rules = [rule(10, 1_000_000), rule(4, 1_000_000)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            let d = s.check(&rules, 0, 3, true).decision;
            assert_eq!(
                (d.allowed, d.rule_index, d.remaining),
                (true, 1, 1),
                "{algorithm:?}"
            );
            let peek = s.check(&rules, 0, 1, false).decision;
            assert_eq!((peek.rule_index, peek.remaining), (1, 1), "{algorithm:?}");
            let denied = s.check(&rules, 0, 2, true).decision;
            assert!(!denied.allowed, "{algorithm:?}");
            assert_eq!(denied.remaining, 1, "{algorithm:?}: left now");
            // The denial took nothing: the last unit still passes, under both rules.
            let last = s.check(&rules, 0, 1, true).decision;
            assert_eq!((last.allowed, last.remaining), (true, 0), "{algorithm:?}");
        }
    }

    #[test]
    fn an_older_now_never_discards_newer_state() {
        // Two windows of 1 ms: the newer one full, then a check from 600 µs in the past
        // (the previous window) must still find it full.
        let rules = [rule(2, 1_000)];
        for algorithm in ALL {
            let mut s = KeyState::new(algorithm);
            assert!(s.check(&rules, 10_100, 1, true).decision.allowed);
            assert!(s.check(&rules, 10_100, 1, true).decision.allowed);
            let late = s.check(&rules, 9_500, 1, true).decision;
            assert!(!late.allowed, "{algorithm:?}: {late:?}");
            // Answered from the caller's clock: a call from it passes exactly on time.
            let retry = late.retry_after_us;
            assert!(
                !s.check(&rules, 9_500 + retry - 1, 1, false)
                    .decision
                    .allowed
            );
            assert!(
                s.check(&rules, 9_500 + retry, 1, false).decision.allowed,
                "{algorithm:?}"
            );
        }
    }

    #[test]
    fn expiry_moves_only_when_the_state_would_outlive_it() {
        let mut expires = 0;
        assert_eq!(
            extend_expiry(&mut expires, 5_000_000, 1_500, 1_500),
            Some(1_002_000)
        );
        assert_eq!(expires, 6_002_000);
        // Covered with the one-second margin, up to the last µs.
        assert_eq!(extend_expiry(&mut expires, 5_000_000, 2_000, 2_000), None);
        assert_eq!(expires, 6_002_000);
        assert_eq!(
            extend_expiry(&mut expires, 5_000_000, 2_001, 2_001),
            Some(1_003_000)
        );
        assert_eq!(expires, 6_003_000);
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
