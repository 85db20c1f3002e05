//! Fixed window: one counter per rule per aligned window.
//!
//! A rule of `count` per `window` (µs) counts calls in windows aligned to the epoch: the
//! window holding `now` starts at `floor(now / window) * window` and ends one window later.
//! Per rule, with `n` the calls counted in the current window (0 when the stored counter
//! belongs to any other window, so stale state decides exactly like absent state):
//!
//! - the rule admits the call when `n + 1 <= count`;
//! - admitted: `remaining = count - n - 1`, `reset_after = window end - now`;
//! - denied: `remaining = 0`, `reset_after = retry_after = window end - now` (the next
//!   window starts empty, so a call at `now + retry_after` passes this rule).
//!
//! The call is admitted when every rule admits it, and then counted in every rule's
//! current window; a denial or a peek writes nothing. The decision's binding rule is, when
//! admitted, the one with the least `remaining` (ties: lowest index) and, when denied, the
//! denying rule with the largest `retry_after` (ties: lowest index). A peek answers exactly
//! what a consuming check would.
//!
//! A write stores the counters of the rules it checked, and only those: when a call site's
//! rules change, the rules it keeps keep their counts, new ones start empty and the others
//! are forgotten at the next write. (So one key checked in turn with two sets of rules
//! forgets, at each write, the rules only the other set has: give each set its own key.)
//! The key lives at least until the last rule's current window ends: a write that would
//! outlive its expiry moves it there plus the TTL margin (see [`super::extend_expiry`]).
//! `scripts/fixed_window.lua` is the same arithmetic for Redis; both are exact for times
//! and windows below 2^53 µs.

use super::{extend_expiry, Outcome};
use crate::decision::RawDecision;
use crate::Rule;

/// The counters of one key: per rule of the last write, the window it counted in.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// When the key expires, as the Redis value records it (0: never written).
    expires_at_us: u64,
    /// Looked up by rule, like the script's records of `count` and `window_us`.
    windows: Vec<(Rule, Window)>,
}

#[derive(Clone, Copy, Debug)]
struct Window {
    start_us: u64,
    calls: u64,
}

impl State {
    fn window(&self, rule: &Rule) -> Option<Window> {
        self.windows
            .iter()
            .find(|(r, _)| r == rule)
            .map(|&(_, w)| w)
    }
}

/// One rule's view of the call.
struct Verdict {
    start_us: u64,
    calls: u64,
    end_us: u64,
}

fn verdict(state: &State, rule: &Rule, now_us: u64) -> Verdict {
    let window_us = rule.window_us();
    let start_us = now_us / window_us * window_us;
    let calls = match state.window(rule) {
        Some(w) if w.start_us == start_us => w.calls,
        _ => 0,
    };
    Verdict {
        start_us,
        calls,
        end_us: start_us + window_us,
    }
}

/// Checks `rules` at `now_us`, counting the call when `consume` and every rule admits it.
pub(crate) fn check(state: &mut State, rules: &[Rule], now_us: u64, consume: bool) -> Outcome {
    let verdicts: Vec<Verdict> = rules.iter().map(|r| verdict(state, r, now_us)).collect();
    let denied = rules
        .iter()
        .zip(&verdicts)
        .enumerate()
        .filter(|(_, (rule, v))| v.calls >= rule.count())
        // Largest retry wins; `max_by_key` keeps the last of equals, so compare reversed
        // indices to keep the lowest.
        .max_by_key(|&(i, (_, v))| (v.end_us - now_us, std::cmp::Reverse(i)));
    if let Some((i, (_, v))) = denied {
        let wait_us = v.end_us - now_us;
        return Outcome {
            decision: RawDecision {
                allowed: false,
                rule_index: i,
                remaining: 0,
                reset_after_us: wait_us,
                retry_after_us: wait_us,
            },
            ttl_us: None,
        };
    }
    let (i, remaining) = rules
        .iter()
        .zip(&verdicts)
        .map(|(rule, v)| rule.count() - v.calls - 1)
        .enumerate()
        .min_by_key(|&(i, remaining)| (remaining, i))
        .expect("at least one rule");
    let decision = RawDecision {
        allowed: true,
        rule_index: i,
        remaining,
        reset_after_us: verdicts[i].end_us - now_us,
        retry_after_us: 0,
    };
    if !consume {
        return Outcome {
            decision,
            ttl_us: None,
        };
    }
    state.windows = rules
        .iter()
        .zip(&verdicts)
        .map(|(rule, v)| {
            let window = Window {
                start_us: v.start_us,
                calls: v.calls + 1,
            };
            (*rule, window)
        })
        .collect();
    let last_end_us = verdicts
        .iter()
        .map(|v| v.end_us)
        .max()
        .expect("at least one rule");
    Outcome {
        decision,
        ttl_us: extend_expiry(
            &mut state.expires_at_us,
            now_us,
            last_end_us - now_us,
            last_end_us - now_us,
        ),
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
        let first = check(&mut s, &rules, 10_400, true);
        assert_eq!(first.decision, raw(true, 0, 1, 600, 0));
        assert_eq!(first.ttl_us, Some((1 + 1000) * 1000));
        assert_eq!(
            check(&mut s, &rules, 10_999, true).decision,
            raw(true, 0, 0, 1, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 10_999, true).decision,
            raw(false, 0, 0, 1, 1)
        );
        // The next window starts empty, however recently the last one filled.
        assert_eq!(
            check(&mut s, &rules, 11_000, true).decision,
            raw(true, 0, 1, 1_000, 0)
        );
    }

    #[test]
    fn sub_second_windows_are_counted_in_microseconds() {
        let rules = [rule(1, 250_000)];
        let mut s = State::default();
        let now = 1_700_000_000_100_000;
        assert_eq!(
            check(&mut s, &rules, now, true).decision,
            raw(true, 0, 0, 150_000, 0)
        );
        let denied = check(&mut s, &rules, now + 149_999, true).decision;
        assert_eq!(denied, raw(false, 0, 0, 1, 1));
        assert!(check(&mut s, &rules, now + 150_000, true).decision.allowed);
    }

    #[test]
    fn denied_calls_consume_nothing() {
        let rules = [rule(3, 1_000), rule(1, 100)];
        let mut s = State::default();
        assert!(check(&mut s, &rules, 0, true).decision.allowed);
        // The 100 µs rule is full; the 1 ms rule must not count the denied calls.
        for _ in 0..5 {
            let d = check(&mut s, &rules, 50, true);
            assert_eq!(d.decision, raw(false, 1, 0, 50, 50));
            assert_eq!(d.ttl_us, None);
        }
        assert_eq!(
            check(&mut s, &rules, 100, true).decision,
            raw(true, 1, 0, 100, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 200, true).decision,
            raw(true, 0, 0, 800, 0)
        );
    }

    #[test]
    fn retry_after_is_exactly_when_the_binding_rule_passes() {
        let mut s = State::default();
        let rules = [rule(2, 700), rule(5, 3_000)];
        assert_retry_after_is_exact(
            |rules, now, consume| check(&mut s, rules, now, consume).decision,
            &rules,
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
            check(&mut s, &rules, 0, true).decision,
            raw(true, 0, 1, 1_000, 0)
        );
        assert_eq!(
            check(&mut s, &rules, 0, true).decision,
            raw(true, 0, 0, 1_000, 0)
        );
        // Both 2-call rules deny; the 10 ms one frees last.
        assert_eq!(
            check(&mut s, &rules, 10, true).decision,
            raw(false, 1, 0, 9_990, 9_990)
        );
        assert_eq!(
            check(&mut s, &rules, 10, true).decision,
            raw(false, 1, 0, 9_990, 9_990)
        );
    }

    #[test]
    fn equal_retries_bind_the_lowest_index() {
        let rules = [rule(1, 1_000), rule(1, 1_000), rule(1, 500)];
        let mut s = State::default();
        check(&mut s, &rules, 0, true);
        assert_eq!(
            check(&mut s, &rules, 5, true).decision,
            raw(false, 0, 0, 995, 995)
        );
    }

    #[test]
    fn peek_answers_like_a_check_and_writes_nothing() {
        let rules = [rule(2, 1_000)];
        let mut s = State::default();
        for now in [0, 1, 2] {
            let peek = check(&mut s, &rules, now, false);
            assert_eq!(peek.ttl_us, None);
            assert_eq!(peek.decision, check(&mut s, &rules, now, true).decision);
        }
        let peek = check(&mut s, &rules, 3, false);
        assert_eq!(peek.decision, raw(false, 0, 0, 997, 997));
    }

    #[test]
    fn ttl_covers_the_last_rule_window() {
        let rules = [rule(5, 1_000), rule(5, 60_000_000)];
        let mut s = State::default();
        let d = check(&mut s, &rules, 59_000_000, true);
        // 1 s of the minute left, rounded up to whole ms, plus the one-second margin.
        assert_eq!(d.ttl_us, Some((1_000 + 1_000) * 1_000));
        // Counted in the same windows: the expiry already covers them.
        assert_eq!(check(&mut s, &rules, 59_000_001, true).ttl_us, None);
        // The next minute outlives it.
        let d = check(&mut s, &rules, 60_000_000, true);
        assert_eq!(d.ttl_us, Some((60_000 + 1_000) * 1_000));
    }

    #[test]
    fn a_write_keeps_only_the_rules_it_checked() {
        let (short, long) = (rule(3, 1_000), rule(5, 10_000));
        let mut s = State::default();
        check(&mut s, &[short, long], 0, true);
        check(&mut s, &[short, long], 1, true);
        // The long rule keeps its count when checked alone, in any position.
        assert_eq!(
            check(&mut s, &[long], 2, true).decision,
            raw(true, 0, 2, 9_998, 0)
        );
        // The short rule was not in that write: it starts empty again.
        assert_eq!(
            check(&mut s, &[long, short], 3, false).decision,
            raw(true, 0, 1, 9_997, 0)
        );
        assert_eq!(
            check(&mut s, &[short], 3, true).decision,
            raw(true, 0, 2, 997, 0)
        );
    }
}
