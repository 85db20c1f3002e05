//! Fixed window: one counter per rule per aligned window.
//!
//! A rule of `count` per `window` (µs) counts units in windows aligned to the epoch: the
//! window holding `now` starts at `floor(now / window) * window` and ends one window later.
//! A check is counted at `now' = max(now, latest stored window start)` (see
//! [`super::Clamp`]): a stored window that starts after `now` is newer state, never stale.
//! Per rule, with `calls` the units counted in the current window at `now'` (0 when the
//! stored counter belongs to an earlier window, so stale state decides exactly like absent
//! state) and a call of `n` units:
//!
//! - left now: `count - calls`; the rule admits the call when `calls + n <= count`;
//! - admitted: `reset_after = window end - now'`;
//! - denied: `reset_after = retry_after = window end - now'` (the next window starts
//!   empty, so a call at `now' + retry_after` passes this rule);
//! - never (`n > count`): denied with [`RawDecision::NEVER`].
//!
//! The call is admitted when every rule admits it, and then counted in every rule's
//! current window; a denial or a peek writes nothing. The binding rule is chosen by
//! [`super::decide`].
//!
//! A write stores the counters of the rules it checked, and only those: when a call site's
//! rules change, the rules it keeps keep their counts, new ones start empty and the others
//! are forgotten at the next write. (So one key checked in turn with two sets of rules
//! forgets, at each write, the rules only the other set has: give each set its own key.)
//! The key lives at least until the last rule's current window ends: a write that would
//! outlive its expiry moves it there plus the TTL margin (see [`super::extend_expiry`]).
//! `scripts/fixed_window.lua` is the same arithmetic for Redis; both are exact for times
//! and windows below 2^53 µs.

use super::{decide, extend_expiry, Clamp, Figures, Outcome, Records};
use crate::decision::RawDecision;
use crate::Rule;

/// The counters of one key: per rule of the last write, the window it counted in.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// When the key expires, as the Redis value records it (0: never written).
    expires_at_us: u64,
    /// Looked up by rule, like the script's records of `count` and `window_us`.
    pub(super) windows: Records<Window>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    start_us: u64,
    calls: u64,
}

impl State {
    /// The latest window start stored, for any rule.
    fn latest_us(&self) -> Option<u64> {
        self.windows.values().map(|w| w.start_us).max()
    }
}

/// One rule's view of the call.
struct Verdict {
    start_us: u64,
    calls: u64,
    end_us: u64,
    figures: Figures,
}

/// `rule`'s view at `now_us`, from its stored window.
fn verdict(stored: Option<Window>, rule: &Rule, now_us: u64, cost: u64) -> Verdict {
    let (count, window_us) = (rule.count(), rule.window_us());
    let start_us = now_us / window_us * window_us;
    let calls = match stored {
        Some(w) if w.start_us == start_us => w.calls,
        _ => 0,
    };
    let end_us = start_us + window_us;
    let left = count.saturating_sub(calls);
    let retry_after_us = if cost > count {
        RawDecision::NEVER
    } else if cost > left {
        end_us - now_us
    } else {
        0
    };
    Verdict {
        start_us,
        calls,
        end_us,
        figures: Figures {
            left,
            reset_after_us: end_us - now_us,
            retry_after_us,
        },
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
    // The verdicts again (a few operations per rule, cheaper than keeping them), now
    // writing each rule's window.
    let mut last_end_us = 0;
    state.windows.write(rules, |_, rule, stored| {
        let v = verdict(stored, rule, now, cost);
        last_end_us = last_end_us.max(v.end_us);
        Window {
            start_us: v.start_us,
            calls: v.calls + cost,
        }
    });
    // From the caller's `now`, which the key's expiry (the script's PX) is relative to.
    let needed_us = last_end_us - now_us;
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
    fn counts_per_aligned_window() {
        let rules = [rule(2, 1_000)];
        let mut s = State::default();
        // Window [10_000, 11_000).
        let first = check(&mut s, &rules, 10_400, 1, true);
        assert_eq!(first.decision, raw(true, 0, 1, 600, 0));
        assert_eq!(first.ttl_us, Some((1 + 1000) * 1000));
        assert_eq!(
            check(&mut s, &rules, 10_999, 1, true).decision,
            raw(true, 0, 0, 1, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 10_999, 1, true).decision,
            raw(false, 0, 0, 1, 1)
        );
        // The next window starts empty, however recently the last one filled.
        assert_eq!(
            check(&mut s, &rules, 11_000, 1, true).decision,
            raw(true, 0, 1, 1_000, 0)
        );
    }

    #[test]
    fn sub_second_windows_are_counted_in_microseconds() {
        let rules = [rule(1, 250_000)];
        let mut s = State::default();
        let now = 1_700_000_000_100_000;
        assert_eq!(
            check(&mut s, &rules, now, 1, true).decision,
            raw(true, 0, 0, 150_000, 0)
        );
        let denied = check(&mut s, &rules, now + 149_999, 1, true).decision;
        assert_eq!(denied, raw(false, 0, 0, 1, 1));
        assert!(
            check(&mut s, &rules, now + 150_000, 1, true)
                .decision
                .allowed
        );
    }

    #[test]
    fn denied_calls_consume_nothing() {
        let rules = [rule(3, 1_000), rule(1, 100)];
        let mut s = State::default();
        assert!(check(&mut s, &rules, 0, 1, true).decision.allowed);
        // The 100 µs rule is full; the 1 ms rule must not count the denied calls.
        for _ in 0..5 {
            let d = check(&mut s, &rules, 50, 1, true);
            assert_eq!(d.decision, raw(false, 1, 0, 50, 50));
            assert_eq!(d.ttl_us, None);
        }
        assert_eq!(
            check(&mut s, &rules, 100, 1, true).decision,
            raw(true, 1, 0, 100, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 200, 1, true).decision,
            raw(true, 0, 0, 800, 0)
        );
    }

    #[test]
    fn retry_after_is_exactly_when_the_binding_rule_passes() {
        let mut s = State::default();
        let rules = [rule(2, 700), rule(5, 3_000)];
        assert_retry_after_is_exact(
            |rules, now, cost, consume| check(&mut s, rules, now, cost, consume).decision,
            &rules,
            &[1, 2, 1, 1, 2],
            37,
            6,
        );
    }

    #[test]
    fn binding_rule_is_least_remaining_when_allowed_and_last_to_free_when_denied() {
        let rules = [rule(2, 1_000), rule(2, 10_000), rule(5, 10_000)];
        let mut s = State::default();
        // Ties on remaining pick the lowest index.
        assert_eq!(
            check(&mut s, &rules, 0, 1, true).decision,
            raw(true, 0, 1, 1_000, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 0, 1, true).decision,
            raw(true, 0, 0, 1_000, 0)
        );
        // Both 2-call rules deny; the 10 ms one frees last.
        assert_eq!(
            check(&mut s, &rules, 10, 1, true).decision,
            raw(false, 1, 0, 9_990, 9_990)
        );
        assert_eq!(
            check(&mut s, &rules, 10, 1, true).decision,
            raw(false, 1, 0, 9_990, 9_990)
        );
    }

    #[test]
    fn equal_retries_bind_the_lowest_index() {
        let rules = [rule(1, 1_000), rule(1, 1_000), rule(1, 500)];
        let mut s = State::default();
        check(&mut s, &rules, 0, 1, true);
        assert_eq!(
            check(&mut s, &rules, 5, 1, true).decision,
            raw(false, 0, 0, 995, 995)
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
        let peek = check(&mut s, &rules, 3, 1, false);
        assert_eq!(peek.decision, raw(false, 0, 0, 997, 997));
    }

    #[test]
    fn ttl_covers_the_last_rule_window() {
        let rules = [rule(5, 1_000), rule(5, 60_000_000)];
        let mut s = State::default();
        let d = check(&mut s, &rules, 59_000_000, 1, true);
        // 1 s of the minute left, rounded up to whole ms, plus the one-second margin.
        assert_eq!(d.ttl_us, Some((1_000 + 1_000) * 1_000));
        // Counted in the same windows: the expiry already covers them.
        assert_eq!(check(&mut s, &rules, 59_000_001, 1, true).ttl_us, None);
        // The next minute outlives it.
        let d = check(&mut s, &rules, 60_000_000, 1, true);
        assert_eq!(d.ttl_us, Some((60_000 + 1_000) * 1_000));
    }

    #[test]
    fn a_write_keeps_only_the_rules_it_checked() {
        let (short, long) = (rule(3, 1_000), rule(5, 10_000));
        let mut s = State::default();
        check(&mut s, &[short, long], 0, 1, true);
        check(&mut s, &[short, long], 1, 1, true);
        // The long rule keeps its count when checked alone, in any position.
        assert_eq!(
            check(&mut s, &[long], 2, 1, true).decision,
            raw(true, 0, 2, 9_998, 0)
        );
        // The short rule was not in that write: it starts empty again.
        assert_eq!(
            check(&mut s, &[long, short], 3, 1, false).decision,
            raw(true, 0, 2, 9_997, 0)
        );
        assert_eq!(
            check(&mut s, &[short], 3, 1, true).decision,
            raw(true, 0, 2, 997, 0)
        );
    }
}
