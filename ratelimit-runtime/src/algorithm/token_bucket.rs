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
//! `now + d`; a denial or a peek writes nothing. The binding rule is chosen by
//! [`super::decide`].
//!
//! A write stores the `tat` of the rules it checked, and only those, as the fixed window
//! does (which explains why). The key lives at least until the latest `tat`: a write that
//! would outlive its expiry moves it to cover the longest burst span (the latest `tat` an
//! admitted call can leave) plus the TTL margin, so that the writes after it keep it (see
//! [`super::extend_expiry`]). `scripts/token_bucket.lua` is the same arithmetic for Redis;
//! both are exact while times, windows and counts stay below 2^53.

use super::{decide, extend_expiry, Figures, Outcome, Records};
use crate::decision::RawDecision;
use crate::Rule;

/// The theoretical arrival time of each rule of one key's last write.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// When the key expires, as the Redis value records it (0: never written).
    expires_at_us: u64,
    /// Looked up by rule, like the script's records of `count` and `window_us`.
    pub(super) tats: Records<u64>,
}

/// One rule's view of the call.
struct Verdict {
    /// `count * T`.
    burst_us: u64,
    /// `d = tat' + n * T - now`.
    after_us: u64,
    figures: Figures,
}

/// `rule`'s view at `now_us`, from its stored tat.
fn verdict(stored: Option<u64>, rule: &Rule, now_us: u64, cost: u64) -> Verdict {
    let count = rule.count();
    let interval_us = rule.window_us().div_ceil(count);
    let burst_us = count * interval_us;
    let ahead_us = stored.map_or(0, |tat| tat.saturating_sub(now_us));
    let left = burst_us.saturating_sub(ahead_us) / interval_us;
    // `n * T` only when it cannot pass the burst span: `n <= count`.
    let after_us = ahead_us + cost.min(count + 1) * interval_us;
    let figures = if cost > count {
        Figures {
            left,
            reset_after_us: ahead_us,
            retry_after_us: RawDecision::NEVER,
        }
    } else if after_us > burst_us {
        Figures {
            left,
            reset_after_us: ahead_us,
            retry_after_us: after_us - burst_us,
        }
    } else {
        Figures {
            left,
            reset_after_us: after_us,
            retry_after_us: 0,
        }
    };
    Verdict {
        burst_us,
        after_us,
        figures,
    }
}

/// Checks a call of `cost` units against `rules` at `now_us`, recording it when `consume`
/// and every rule admits it.
pub(crate) fn check(
    state: &mut State,
    rules: &[Rule],
    now_us: u64,
    cost: u64,
    consume: bool,
) -> Outcome {
    let figures = rules
        .iter()
        .enumerate()
        .map(|(i, r)| verdict(state.tats.get(i, r), r, now_us, cost).figures);
    let decision = decide(figures, cost, consume, 0);
    if !consume || !decision.allowed {
        return Outcome {
            decision,
            ttl_us: None,
        };
    }
    // The verdicts again (cheaper than keeping them), now writing each rule's tat.
    let (mut needed_us, mut reach_us) = (0, 0);
    state.tats.write(rules, |_, rule, stored| {
        let v = verdict(stored, rule, now_us, cost);
        needed_us = needed_us.max(v.after_us);
        reach_us = reach_us.max(v.burst_us);
        now_us + v.after_us
    });
    Outcome {
        decision,
        ttl_us: extend_expiry(&mut state.expires_at_us, now_us, needed_us, reach_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::testing::{assert_retry_after_is_exact, raw, rule};

    #[test]
    fn a_burst_of_count_passes_then_one_per_interval() {
        // T = 250 µs, burst span 1000 µs.
        let rules = [rule(4, 1_000)];
        let mut s = State::default();
        let now = 1_700_000_000_000_000;
        let first = check(&mut s, &rules, now, 1, true);
        assert_eq!(first.decision, raw(true, 0, 3, 250, 0));
        assert_eq!(first.ttl_us, Some((1 + 1_000) * 1_000));
        assert_eq!(
            check(&mut s, &rules, now, 1, true).decision,
            raw(true, 0, 2, 500, 0)
        );
        assert_eq!(
            check(&mut s, &rules, now, 1, true).decision,
            raw(true, 0, 1, 750, 0)
        );
        let last = check(&mut s, &rules, now, 1, true);
        assert_eq!(last.decision, raw(true, 0, 0, 1_000, 0));
        // The first write's margin still covers the latest tat.
        assert_eq!(last.ttl_us, None);
        assert_eq!(
            check(&mut s, &rules, now, 1, true).decision,
            raw(false, 0, 0, 1_000, 250)
        );
        assert_eq!(
            check(&mut s, &rules, now + 100, 1, true).decision,
            raw(false, 0, 0, 900, 150)
        );
        assert_eq!(
            check(&mut s, &rules, now + 250, 1, true).decision,
            raw(true, 0, 0, 1_000, 0)
        );
        // Half an interval later, nothing has refilled in whole calls yet.
        assert_eq!(
            check(&mut s, &rules, now + 375, 1, true).decision,
            raw(false, 0, 0, 875, 125)
        );
    }

    #[test]
    fn the_interval_rounds_up_so_the_rate_is_never_exceeded() {
        // 3 per 1000 µs: T = 334, burst span 1002 µs.
        let rules = [rule(3, 1_000)];
        let mut s = State::default();
        for _ in 0..3 {
            assert!(check(&mut s, &rules, 0, 1, true).decision.allowed);
        }
        assert_eq!(
            check(&mut s, &rules, 333, 1, true).decision,
            raw(false, 0, 0, 669, 1)
        );
        assert_eq!(
            check(&mut s, &rules, 334, 1, true).decision,
            raw(true, 0, 0, 1_002, 0)
        );
    }

    #[test]
    fn sub_second_windows_are_counted_in_microseconds() {
        let rules = [rule(2, 300_000)];
        let mut s = State::default();
        let now = 1_700_000_000_123_456;
        assert_eq!(
            check(&mut s, &rules, now, 1, true).decision,
            raw(true, 0, 1, 150_000, 0)
        );
        assert_eq!(
            check(&mut s, &rules, now + 1, 1, true).decision,
            raw(true, 0, 0, 299_999, 0)
        );
        let denied = check(&mut s, &rules, now + 2, 1, true).decision;
        assert_eq!(denied, raw(false, 0, 0, 299_998, 149_998));
        assert!(
            check(&mut s, &rules, now + 150_000, 1, true)
                .decision
                .allowed
        );
    }

    #[test]
    fn stale_state_decides_like_absent_state() {
        let rules = [rule(2, 1_000)];
        let mut s = State::default();
        check(&mut s, &rules, 0, 1, true);
        check(&mut s, &rules, 0, 1, true);
        let mut fresh = State::default();
        for now in [1_000, 5_000] {
            assert_eq!(
                check(&mut s, &rules, now, 1, false).decision,
                check(&mut fresh, &rules, now, 1, false).decision
            );
        }
    }

    #[test]
    fn denied_calls_consume_nothing() {
        let rules = [rule(10, 1_000), rule(1, 100)];
        let mut s = State::default();
        assert!(check(&mut s, &rules, 0, 1, true).decision.allowed);
        for _ in 0..5 {
            let d = check(&mut s, &rules, 40, 1, true);
            assert_eq!(d.decision, raw(false, 1, 0, 60, 60));
            assert_eq!(d.ttl_us, None);
        }
        // Rule 0 counted only the admitted call: 8 left after this one.
        assert_eq!(
            check(&mut s, &rules, 100, 1, true).decision,
            raw(true, 1, 0, 100, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 200, 1, false).decision,
            raw(true, 1, 1, 100, 0)
        );
        assert_eq!(s.tats.get(0, &rules[0]), Some(200));
    }

    #[test]
    fn retry_after_is_exactly_when_the_binding_rule_passes() {
        let mut s = State::default();
        let rules = [rule(3, 700), rule(7, 5_000)];
        assert_retry_after_is_exact(
            |rules, now, cost, consume| check(&mut s, rules, now, cost, consume).decision,
            &rules,
            &[1, 2, 1, 1, 2],
            29,
            8,
        );
    }

    #[test]
    fn binding_rule_is_least_remaining_when_allowed_and_last_to_free_when_denied() {
        let rules = [rule(2, 1_000), rule(2, 10_000), rule(5, 10_000)];
        let mut s = State::default();
        // Remaining 1, 1, 4: the tie goes to rule 0.
        assert_eq!(
            check(&mut s, &rules, 0, 1, true).decision,
            raw(true, 0, 1, 500, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 0, 1, true).decision,
            raw(true, 0, 0, 1_000, 0)
        );
        // Rules 0 and 1 deny: retry 500 and 5000; rule 1 frees last.
        assert_eq!(
            check(&mut s, &rules, 0, 1, true).decision,
            raw(false, 1, 0, 10_000, 5_000)
        );
        // Equal retries bind the lowest index.
        let both = [rule(1, 1_000), rule(1, 1_000), rule(2, 1_000)];
        let mut s = State::default();
        check(&mut s, &both, 0, 1, true);
        assert_eq!(
            check(&mut s, &both, 10, 1, true).decision,
            raw(false, 0, 0, 990, 990)
        );
    }

    #[test]
    fn peek_tells_what_is_left_now_and_writes_nothing() {
        let rules = [rule(2, 1_000)];
        let mut s = State::default();
        for now in [0, 1] {
            let peek = check(&mut s, &rules, now, 1, false);
            assert_eq!(peek.ttl_us, None);
            let counted = check(&mut s, &rules, now, 1, true).decision;
            let left_now = counted.remaining + 1;
            assert_eq!(
                peek.decision,
                RawDecision {
                    remaining: left_now,
                    ..counted
                }
            );
        }
        assert_eq!(
            check(&mut s, &rules, 3, 1, false).decision,
            raw(false, 0, 0, 997, 497)
        );
    }

    #[test]
    fn the_expiry_moves_to_the_burst_span_once_a_tat_outgrows_it() {
        // T = 600 ms, a burst span of 60 s: the first write's expiry, at 61 s, covers
        // the whole burst at once, with the one-second margin; the next tat outgrows it.
        let rules = [rule(100, 60_000_000)];
        let mut s = State::default();
        let ttl = |s: &mut State, now: u64| check(s, &rules, now, 1, true).ttl_us;
        assert_eq!(ttl(&mut s, 0), Some((60_000 + 1_000) * 1_000));
        for _ in 1..100 {
            assert_eq!(ttl(&mut s, 0), None);
        }
        // tat 60.6 s, to be kept until 61.6 s.
        assert_eq!(ttl(&mut s, 600_000), Some((60_000 + 1_000) * 1_000));
    }

    #[test]
    fn a_write_keeps_only_the_rules_it_checked() {
        // T = 500 µs and 2500 µs.
        let (short, long) = (rule(2, 1_000), rule(4, 10_000));
        let mut s = State::default();
        check(&mut s, &[short, long], 0, 1, true);
        assert_eq!(
            check(&mut s, &[long], 0, 1, true).decision,
            raw(true, 0, 2, 5_000, 0)
        );
        // Not in that write: the short rule's bucket is full again.
        assert_eq!(
            check(&mut s, &[short], 0, 1, false).decision,
            raw(true, 0, 2, 500, 0)
        );
    }
}
