//! Token bucket as GCRA (the redis-cell / redis_rate design): one theoretical arrival time
//! (`tat`) per rule.
//!
//! A rule of `count` per `window` (µs) allows a burst of `count` and refills one unit every
//! emission interval `T = ceil(window / count)` µs. Rounding `T` up keeps the steady rate
//! at or below the promised one; the burst span `count * T` (at least `window`, by less
//! than `count` µs more) lets exactly `count` units through at once. In any interval of
//! length `t` a rule admits at most `count + floor(t / T)` units.
//!
//! Per rule, with `tat' = max(tat, now)` (a missing or past `tat` is `now`, so stale state
//! decides exactly like absent state) and, for a call of `n` units, `d = tat' + n * T - now`
//! (how far ahead the call would push the rule):
//!
//! - left now: `floor((count * T - (tat' - now)) / T)`; the rule admits the call when
//!   `d <= count * T`;
//! - admitted: `reset_after = d` (until the new `tat`, when the bucket is full again);
//! - denied: `reset_after = tat' - now`, `retry_after = d - count * T` (at
//!   `now + retry_after` the call fits exactly);
//! - never (`n > count`): denied with [`RawDecision::NEVER`].
//!
//! Time never runs backwards here without any clamp: a check that reads an older `now`
//! than a stored `tat` finds that `tat` further ahead, and so counts it in full; nothing
//! newer is ever discarded (see [`super::Clamp`] for the algorithms that need one).
//!
//! The call is admitted when every rule admits it, and then every rule's `tat` becomes
//! `now + d` (see [`super::records`]). A write stores the `tat` of the rules it checked,
//! and only those, as the fixed window does (which explains why). The key lives at least
//! until the latest `tat`: a write that would outlive its expiry moves it to cover the
//! longest burst span (the latest `tat` an admitted call can leave) plus the TTL margin,
//! so that the writes after it keep it. `scripts/token_bucket.lua` is the same arithmetic
//! for Redis; both are exact while times, windows and counts stay below 2^53.
//!
//! [`RawDecision::NEVER`]: crate::decision::RawDecision::NEVER

use super::calendar::Period;
use super::records::{PerRule, Verdict};
use super::Figures;
use crate::{Algorithm, Rule};

/// The theoretical arrival time of each rule of one key's last write.
pub(crate) type State = super::records::State<TokenBucket>;

/// The token bucket's arithmetic; a rule's record is its `tat` (µs), then 0; a calendar
/// rule's (see [`super::calendar`]) its units, then its period's start.
#[derive(Debug)]
pub(crate) enum TokenBucket {}

impl PerRule for TokenBucket {
    const ALGORITHM: Algorithm = Algorithm::TokenBucket;

    type Record = (u64, u64);

    /// None: a tat ahead of `now` is counted in full, with no clamp.
    #[cfg(feature = "redis")]
    const NUMBERS: usize = 1;

    #[cfg(feature = "redis")]
    fn from_numbers(numbers: &[u64]) -> Self::Record {
        (numbers[0], 0)
    }

    fn from_period(period: Period) -> (u64, u64) {
        (period.units, period.start_us)
    }

    fn period(&(units, start_us): &(u64, u64)) -> Period {
        Period { start_us, units }
    }

    fn latest_us(_: &(u64, u64)) -> Option<u64> {
        None
    }

    #[inline(always)]
    fn judge(
        stored: Option<(u64, u64)>,
        rule: &Rule,
        now_us: u64,
        cost: u64,
        hold_us: u64,
    ) -> Verdict<(u64, u64)> {
        let count = rule.count();
        let interval_us = rule.window_us().div_ceil(count);
        let burst_us = count * interval_us;
        // A draw is charged as if at `now + hold`: its slots start no earlier than its
        // units may be spent, and it must still conform at `now`.
        let ahead_us = stored
            .map_or(0, |(tat, _)| tat.saturating_sub(now_us))
            .max(hold_us);
        // `n <= left` exactly when `d <= count * T`.
        let left = burst_us.saturating_sub(ahead_us) / interval_us;
        // `n * T` only when it cannot pass the burst span: `n <= count`.
        let after_us = ahead_us + cost.min(count + 1) * interval_us;
        Verdict {
            figures: Figures::of(
                count,
                cost,
                left,
                after_us,
                || ahead_us,
                || after_us - burst_us,
            ),
            counted: (now_us + after_us, 0),
            needed_us: after_us,
            reach_us: burst_us,
        }
    }

    fn held((tat, _): (u64, u64), rule: &Rule, now_us: u64) -> u64 {
        let interval_us = rule.window_us().div_ceil(rule.count());
        tat.saturating_sub(now_us).div_ceil(interval_us)
    }

    fn until_us(&(tat, _): &(u64, u64)) -> Option<u64> {
        Some(tat)
    }

    /// The excess taken from now (or from when it was counted, if later): the bucket is
    /// then `units` emptier than it is, in debt past empty if need be.
    fn take((tat, _): (u64, u64), rule: &Rule, at_us: u64, units: u64, now_us: u64) -> (u64, u64) {
        let interval_us = rule.window_us().div_ceil(rule.count());
        let tat = tat
            .max(now_us.max(at_us))
            .saturating_add(units.saturating_mul(interval_us));
        (tat, 0)
    }

    /// The draw's unused units were its last slots, ending at `tat` (the witness says no
    /// charge came after it): the frontier moves back over them.
    fn give_back((tat, _): (u64, u64), rule: &Rule, _: u64, units: u64, _: u64) -> (u64, u64) {
        let interval_us = rule.window_us().div_ceil(rule.count());
        (tat.saturating_sub(units.saturating_mul(interval_us)), 0)
    }

    fn witness(&(tat, _): &(u64, u64)) -> Option<u64> {
        Some(tat)
    }

    /// What of the `units` given back has not refilled yet, counted as if the `reserved`
    /// units they are part of were the last to drain from a bucket that was full before
    /// them, and these the last of those (so never more than they hold): all `n` of them
    /// until `at + (reserved - n) * T`, then less what has passed since, none after
    /// `at + reserved * T`. The `tat` never goes below `now`, a full bucket. (Counting the
    /// units given back as the first of the reservation to drain kept, at every settle,
    /// the refill of the time since the check: concurrent settles kept one of those each.)
    fn refund(
        (tat, _): (u64, u64),
        rule: &Rule,
        at_us: u64,
        units: u64,
        reserved: u64,
        now_us: u64,
    ) -> (u64, u64) {
        let count = rule.count();
        let interval_us = rule.window_us().div_ceil(count);
        let now_us = now_us.max(at_us);
        let drained_us = (at_us + reserved.min(count) * interval_us).saturating_sub(now_us);
        let held_us = drained_us.min(units.min(count) * interval_us);
        (tat - held_us.min(tat.saturating_sub(now_us)), 0)
    }
}
