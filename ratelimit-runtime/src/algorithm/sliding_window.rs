//! Sliding window: the weighted two-window counter (O(1) memory per rule, approximate).
//!
//! A rule of `count` per `window` (µs) counts units in windows aligned to the epoch, like
//! the fixed window, and estimates the units in the sliding window ending now as the
//! current window's count plus the previous window's count weighted by how much of it the
//! sliding window still overlaps. A check is counted at `now' = max(now, latest stored
//! window start)` (see [`super::Clamp`]). Per rule, with `w` the window, `e = now' mod w`
//! the time elapsed in the current window, `curr` and `prev` the counts of the current and
//! previous aligned windows (0 for any window not stored, so stale state decides exactly
//! like absent state), the weighted previous count rounded up,
//! `W = ceil(prev * (w - e) / w)`, and a call of `n` units:
//!
//! - left now: `count - curr - W`; the rule admits the call when the estimate including
//!   it stays within the rule: `curr + n + W <= count` (so never more than `count` in one
//!   aligned window);
//! - admitted: `reset_after = 2w - e` (the end of the next window, when the estimate
//!   reaches 0 with nothing more admitted);
//! - denied: `reset_after` = until the estimate reaches 0 (`2w - e` when `curr > 0`, else
//!   `w - e`), and `retry_after` = the exact time until the rule would admit the call:
//!   with `k = count - curr - n >= 0`, when the previous window's weight has shrunk to
//!   `k`, at `e' = w - floor(w * k / prev)` in this window (`e' = w`, the next window's
//!   start, when that is 0); with `curr + n > count`, in the next window, where `curr`
//!   becomes the previous count, at `e' = w - floor(w * (count - n) / curr)`;
//! - never (`n > count`): denied with [`RawDecision::NEVER`].
//!
//! The call is admitted when every rule admits it, and then counted in every rule's
//! current window; a denial or a peek writes nothing. The binding rule is chosen by
//! [`super::decide`].
//!
//! All arithmetic is on integers, exact. `scripts/sliding_window.lua` computes the same
//! products-then-quotients in doubles directly while a product stays below 2^52, and by a
//! long multiplication that never leaves 2^53 beyond, so the two agree bit for bit while
//! times, windows and counts stay below 2^52.
//!
//! A write stores the counts of the rules it checked, and only those, as the fixed window
//! does (which explains why). The key lives at least until the end of the next window,
//! after which the current count no longer weighs on anything: a write that would outlive
//! its expiry moves it there plus the TTL margin (see [`super::extend_expiry`]).

use super::{decide, extend_expiry, Clamp, Figures, Outcome, Records};
use crate::decision::RawDecision;
use crate::Rule;

/// The counts of one key: per rule of the last write, the last window it counted in and
/// the one before.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// When the key expires, as the Redis value records it (0: never written).
    expires_at_us: u64,
    /// Looked up by rule, like the script's records of `count` and `window_us`.
    pub(super) windows: Records<Windows>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Windows {
    /// Start of the window `curr` counts.
    start_us: u64,
    curr: u64,
    /// The count of the window before `start_us`.
    prev: u64,
}

impl State {
    /// The latest window start stored, for any rule.
    fn latest_us(&self) -> Option<u64> {
        self.windows.values().map(|w| w.start_us).max()
    }
}

/// One rule's view of the call.
struct Verdict {
    window_us: u64,
    start_us: u64,
    elapsed_us: u64,
    curr: u64,
    prev: u64,
    figures: Figures,
}

/// `floor(a * b / d)`, exact.
fn mul_div(a: u64, b: u64, d: u64) -> u64 {
    (u128::from(a) * u128::from(b) / u128::from(d)) as u64
}

/// `rule`'s view at `now_us`, from its stored windows.
fn verdict(stored: Option<Windows>, rule: &Rule, now_us: u64, cost: u64) -> Verdict {
    let (count, w) = (rule.count(), rule.window_us());
    let e = now_us % w;
    let start_us = now_us - e;
    let (curr, prev) = match stored {
        Some(s) if s.start_us == start_us => (s.curr, s.prev),
        Some(s) if s.start_us.checked_add(w) == Some(start_us) => (0, s.curr),
        _ => (0, 0),
    };
    let weighted_prev = (u128::from(prev) * u128::from(w - e)).div_ceil(u128::from(w)) as u64;
    let left = count.saturating_sub(curr + weighted_prev);
    let mut figures = Figures {
        left,
        reset_after_us: 2 * w - e,
        retry_after_us: 0,
    };
    if cost > left {
        if curr == 0 {
            figures.reset_after_us = w - e;
        }
        figures.retry_after_us = if cost > count {
            RawDecision::NEVER
        } else if curr + cost <= count {
            // Denied with room in this window: `W > k`, so `prev > k >= 0`.
            w - mul_div(w, count - curr - cost, prev) - e
        } else {
            (w - e) + w - mul_div(w, count - cost, curr)
        };
    }
    Verdict {
        window_us: w,
        start_us,
        elapsed_us: e,
        curr,
        prev,
        figures,
    }
}

/// Checks a call of `cost` units against `rules` at `now_us`, counting it when `consume`
/// and every rule admits it.
pub(crate) fn check(
    state: &mut State,
    rules: &[Rule],
    now_us: u64,
    cost: u64,
    consume: bool,
) -> Outcome {
    let Clamp { at_us: now, lag_us } = Clamp::new(now_us, state.latest_us());
    let figures = rules
        .iter()
        .enumerate()
        .map(|(i, r)| verdict(state.windows.get(i, r), r, now, cost).figures);
    let decision = decide(figures, cost, consume, lag_us);
    if !consume || !decision.allowed {
        return Outcome {
            decision,
            ttl_us: None,
        };
    }
    // The verdicts again (cheaper than keeping them), now writing each rule's windows.
    let mut needed_us = 0;
    state.windows.write(rules, |_, rule, stored| {
        let v = verdict(stored, rule, now, cost);
        needed_us = needed_us.max(2 * v.window_us - v.elapsed_us);
        Windows {
            start_us: v.start_us,
            curr: v.curr + cost,
            prev: v.prev,
        }
    });
    // From the caller's `now`, which the key's expiry (the script's PX) is relative to.
    let needed_us = needed_us + lag_us;
    Outcome {
        decision,
        ttl_us: extend_expiry(&mut state.expires_at_us, now_us, needed_us, needed_us),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::testing::{assert_retry_after_is_exact, raw, rule};

    #[test]
    fn the_previous_window_weighs_by_its_overlap() {
        let rules = [rule(4, 1_000)];
        let mut s = State::default();
        for (i, now) in [100, 200, 300, 400].into_iter().enumerate() {
            let d = check(&mut s, &rules, now, 1, true);
            assert_eq!(d.decision, raw(true, 0, 3 - i as u64, 2_000 - now, 0));
            // The first write's expiry (the next window's end, plus the margin) covers
            // the others.
            let ttl = (i == 0).then_some((2 + 1_000) * 1_000);
            assert_eq!(d.ttl_us, ttl);
        }
        // The window is full: it frees when 4 * (1000 - e') / 1000 rounds up to 3, e' = 250.
        assert_eq!(
            check(&mut s, &rules, 500, 1, true).decision,
            raw(false, 0, 0, 1_500, 750)
        );
        assert_eq!(
            check(&mut s, &rules, 1_249, 1, true).decision,
            raw(false, 0, 0, 751, 1)
        );
        assert_eq!(
            check(&mut s, &rules, 1_250, 1, true).decision,
            raw(true, 0, 0, 1_750, 0)
        );
        // 1 + ceil(4 * 0.7) = 4: full until the weight drops to 2, at e' = 500.
        assert_eq!(
            check(&mut s, &rules, 1_300, 1, true).decision,
            raw(false, 0, 0, 1_700, 200)
        );
        assert_eq!(
            check(&mut s, &rules, 1_500, 1, true).decision,
            raw(true, 0, 0, 1_500, 0)
        );
        // Two windows later nothing of the first remains.
        assert_eq!(
            check(&mut s, &rules, 3_000, 1, true).decision,
            raw(true, 0, 3, 2_000, 0)
        );
    }

    #[test]
    fn never_more_than_count_in_one_aligned_window() {
        let rules = [rule(3, 1_000)];
        let mut s = State::default();
        // An empty previous window: the current one alone holds the budget.
        for now in [10_000, 10_001, 10_002] {
            assert!(check(&mut s, &rules, now, 1, true).decision.allowed);
        }
        let d = check(&mut s, &rules, 10_999, 1, true).decision;
        assert_eq!(d, raw(false, 0, 0, 1_001, 1 + 1_000 - 666));
    }

    #[test]
    fn an_idle_previous_window_denies_on_weight_alone() {
        let rules = [rule(2, 1_000)];
        let mut s = State::default();
        check(&mut s, &rules, 900, 1, true);
        check(&mut s, &rules, 901, 1, true);
        // At 1_100 the current window is empty but 2 * 0.9 rounds up to 2.
        let d = check(&mut s, &rules, 1_100, 1, false).decision;
        // k = 1: the weight must fall to 1, at e' = 1000 - floor(1000 / 2) = 500.
        assert_eq!(d, raw(false, 0, 0, 900, 400));
    }

    #[test]
    fn sub_second_windows_are_counted_in_microseconds() {
        let rules = [rule(2, 250_000)];
        let mut s = State::default();
        let start = 1_700_000_000_000_000;
        assert!(check(&mut s, &rules, start + 1, 1, true).decision.allowed);
        assert!(check(&mut s, &rules, start + 2, 1, true).decision.allowed);
        let d = check(&mut s, &rules, start + 3, 1, true).decision;
        assert_eq!(d, raw(false, 0, 0, 499_997, 249_997 + 125_000));
        assert!(
            check(&mut s, &rules, start + 375_000, 1, true)
                .decision
                .allowed
        );
    }

    #[test]
    fn denied_calls_consume_nothing() {
        let rules = [rule(10, 1_000), rule(1, 100)];
        let mut s = State::default();
        assert!(check(&mut s, &rules, 0, 1, true).decision.allowed);
        for _ in 0..5 {
            let d = check(&mut s, &rules, 40, 1, true);
            assert!(!d.decision.allowed);
            assert_eq!(d.decision.rule_index, 1);
            assert_eq!(d.ttl_us, None);
        }
        // Rule 0 counted only the admitted call, and will count this one.
        assert!(check(&mut s, &rules, 200, 1, true).decision.allowed);
        assert_eq!(s.windows.get(0, &rules[0]).map(|w| w.curr), Some(2));
    }

    #[test]
    fn retry_after_is_exactly_when_the_binding_rule_passes() {
        let mut s = State::default();
        let rules = [rule(3, 700), rule(7, 5_000), rule(2, 333)];
        assert_retry_after_is_exact(
            |rules, now, cost, consume| check(&mut s, rules, now, cost, consume).decision,
            &rules,
            &[1, 2, 1, 1, 2],
            23,
            12,
        );
    }

    #[test]
    fn binding_rule_is_least_remaining_when_allowed_and_last_to_free_when_denied() {
        let rules = [rule(2, 1_000), rule(2, 10_000), rule(5, 10_000)];
        let mut s = State::default();
        assert_eq!(
            check(&mut s, &rules, 0, 1, true).decision,
            raw(true, 0, 1, 2_000, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 0, 1, true).decision,
            raw(true, 0, 0, 2_000, 0)
        );
        // Rules 0 and 1 deny; rule 1's window ends last.
        let d = check(&mut s, &rules, 0, 1, true).decision;
        assert_eq!(d, raw(false, 1, 0, 20_000, 10_000 + 5_000));
        let both = [rule(1, 1_000), rule(1, 1_000), rule(2, 1_000)];
        let mut s = State::default();
        check(&mut s, &both, 0, 1, true);
        assert_eq!(
            check(&mut s, &both, 10, 1, true).decision,
            raw(false, 0, 0, 1_990, 1_990)
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
    }

    #[test]
    fn stale_state_decides_like_absent_state() {
        let rules = [rule(2, 1_000)];
        let mut s = State::default();
        check(&mut s, &rules, 500, 1, true);
        check(&mut s, &rules, 501, 1, true);
        let mut fresh = State::default();
        for now in [2_000, 7_000] {
            assert_eq!(
                check(&mut s, &rules, now, 1, false).decision,
                check(&mut fresh, &rules, now, 1, false).decision
            );
        }
    }

    #[test]
    fn a_write_keeps_only_the_rules_it_checked() {
        let (short, long) = (rule(3, 1_000), rule(5, 10_000));
        let mut s = State::default();
        check(&mut s, &[short, long], 0, 1, true);
        check(&mut s, &[short, long], 0, 1, true);
        assert_eq!(
            check(&mut s, &[long], 1, 1, true).decision,
            raw(true, 0, 2, 19_999, 0)
        );
        // Not in that write: the short rule starts empty.
        assert_eq!(
            check(&mut s, &[short], 2, 1, false).decision,
            raw(true, 0, 3, 1_998, 0)
        );
    }
}
