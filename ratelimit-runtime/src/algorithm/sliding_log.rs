//! The sliding log: one timestamp per admitted call; a rule is full when its window holds
//! `count` of them. Exact, at the cost of one entry per admitted call.
//!
//! `scripts/sliding_log.lua` is the same arithmetic on a Redis ZSET (score = timestamp);
//! keep the two in step.

use std::collections::VecDeque;

use super::{longest_window_us, ttl_us, Outcome};
use crate::decision::RawDecision;
use crate::Rule;

/// The timestamps (µs) of admitted calls, ascending.
#[derive(Debug, Default)]
pub(crate) struct State {
    log: VecDeque<u64>,
}

/// An entry at `s` is inside a window `w` at `now` iff `s > now - w`, written so that it
/// cannot underflow.
fn in_window(s: u64, window_us: u64, now_us: u64) -> bool {
    s.saturating_add(window_us) > now_us
}

pub(crate) fn check(state: &mut State, rules: &[Rule], now_us: u64, consume: bool) -> Outcome {
    let log = &mut state.log;
    let longest = longest_window_us(rules);
    // A peek writes nothing, so it leaves stale entries in place; every count below skips
    // them by itself, as the script's ZCOUNTs do.
    if consume {
        while log.front().is_some_and(|&s| !in_window(s, longest, now_us)) {
            log.pop_front();
        }
    }
    let total = log.len();

    // (rule index, retry_after) of the full rule that frees up last.
    let mut denied: Option<(usize, u64)> = None;
    // (rule index, remaining) of the admitting rule with the least left.
    let mut tightest: Option<(usize, u64)> = None;
    for (i, rule) in rules.iter().enumerate() {
        let window = rule.window_us();
        let inside = total - log.partition_point(|&s| !in_window(s, window, now_us));
        let count = rule.count();
        if inside as u64 >= count {
            // The window's entries are the newest `inside`; the call may pass once the
            // `inside - count + 1` oldest of them have left, the last of which sits at
            // `total - count` overall.
            let must_leave = log[total - count as usize];
            let retry = must_leave.saturating_add(window) - now_us;
            if denied.map_or(true, |(_, r)| retry > r) {
                denied = Some((i, retry));
            }
        } else {
            let remaining = count - inside as u64 - 1;
            if tightest.map_or(true, |(_, r)| remaining < r) {
                tightest = Some((i, remaining));
            }
        }
    }

    if let Some((rule_index, retry_after_us)) = denied {
        let newest = *log.back().expect("a full rule has entries");
        let window = rules[rule_index].window_us();
        return Outcome {
            decision: RawDecision {
                allowed: false,
                rule_index,
                remaining: 0,
                reset_after_us: newest.saturating_add(window) - now_us,
                retry_after_us,
            },
            ttl_us: None,
        };
    }

    let (rule_index, remaining) = tightest.expect("at least one rule");
    let mut ttl = None;
    if consume {
        // Tests may move time backwards; keep the log sorted anyway.
        let at = log.partition_point(|&s| s <= now_us);
        log.insert(at, now_us);
        ttl = Some(ttl_us(longest));
    }
    Outcome {
        decision: RawDecision {
            allowed: true,
            rule_index,
            remaining,
            // The call just admitted is the last to leave the binding window.
            reset_after_us: rules[rule_index].window_us(),
            retry_after_us: 0,
        },
        ttl_us: ttl,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const T0: u64 = 1_700_000_000_000_000;
    const SEC: u64 = 1_000_000;

    fn rule(count: u64, secs: u64) -> Rule {
        Rule::new(count, Duration::from_secs(secs))
    }

    fn allowed(rule_index: usize, remaining: u64, reset_after_us: u64) -> RawDecision {
        RawDecision {
            allowed: true,
            rule_index,
            remaining,
            reset_after_us,
            retry_after_us: 0,
        }
    }

    fn denied(rule_index: usize, reset_after_us: u64, retry_after_us: u64) -> RawDecision {
        RawDecision {
            allowed: false,
            rule_index,
            remaining: 0,
            reset_after_us,
            retry_after_us,
        }
    }

    #[test]
    fn admits_count_per_window_then_denies_until_the_oldest_leaves() {
        let rules = [rule(2, 10)];
        let mut s = State::default();
        let c = |s: &mut State, at| check(s, &rules, at, true);
        assert_eq!(c(&mut s, T0).decision, allowed(0, 1, 10 * SEC));
        assert_eq!(c(&mut s, T0 + 3 * SEC).decision, allowed(0, 0, 10 * SEC));
        assert_eq!(
            c(&mut s, T0 + 4 * SEC).decision,
            denied(0, 9 * SEC, 6 * SEC)
        );
        // The first entry leaves exactly at T0 + 10 s (an entry at s is in iff s > now - w).
        assert_eq!(
            c(&mut s, T0 + 10 * SEC - 1).decision,
            denied(0, 3 * SEC + 1, 1)
        );
        assert_eq!(c(&mut s, T0 + 10 * SEC).decision, allowed(0, 0, 10 * SEC));
        assert_eq!(s.log, [T0 + 3 * SEC, T0 + 10 * SEC]);
    }

    #[test]
    fn binding_rule_is_least_remaining_when_admitted_and_latest_free_when_denied() {
        let rules = [rule(3, 10), rule(5, 100)];
        let mut s = State::default();
        assert_eq!(
            check(&mut s, &rules, T0, true).decision,
            allowed(0, 2, 10 * SEC)
        );
        for i in 1..3 {
            check(&mut s, &rules, T0 + i, true);
        }
        // Rule 0 is full until T0 + 10 s.
        assert_eq!(
            check(&mut s, &rules, T0 + SEC, true).decision,
            denied(0, 10 * SEC - SEC + 2, 9 * SEC)
        );
        // Rule 0 is free again; rule 1 has one call left after this one.
        assert_eq!(
            check(&mut s, &rules, T0 + 20 * SEC, true).decision,
            allowed(1, 1, 100 * SEC)
        );
        assert_eq!(s.log.len(), 4, "the denial recorded nothing");
    }

    #[test]
    fn when_several_rules_are_full_the_one_freeing_up_last_binds() {
        let rules = [rule(2, 10), rule(2, 100)];
        let mut s = State::default();
        check(&mut s, &rules, T0, true);
        check(&mut s, &rules, T0 + 1, true);
        assert_eq!(
            check(&mut s, &rules, T0 + SEC, true).decision,
            denied(1, 100 * SEC - SEC + 1, 100 * SEC - SEC)
        );
    }

    #[test]
    fn ties_go_to_the_lowest_index() {
        let rules = [rule(2, 10), rule(2, 10)];
        let mut s = State::default();
        assert_eq!(
            check(&mut s, &rules, T0, true).decision,
            allowed(0, 1, 10 * SEC)
        );
        check(&mut s, &rules, T0, true);
        assert_eq!(
            check(&mut s, &rules, T0, true).decision,
            denied(0, 10 * SEC, 10 * SEC)
        );
    }

    #[test]
    fn peek_answers_like_a_check_and_writes_nothing() {
        let rules = [rule(2, 10)];
        let mut s = State::default();
        check(&mut s, &rules, T0, true);
        let peek = check(&mut s, &rules, T0 + SEC, false);
        assert_eq!(peek.ttl_us, None);
        assert_eq!(s.log, [T0]);
        assert_eq!(
            peek.decision,
            check(&mut s, &rules, T0 + SEC, true).decision
        );
        // Stale entries are skipped, not trimmed, by a peek.
        let later = T0 + 60 * SEC;
        assert_eq!(
            check(&mut s, &rules, later, false).decision,
            allowed(0, 1, 10 * SEC)
        );
        assert_eq!(s.log.len(), 2);
    }

    #[test]
    fn a_consuming_check_sets_the_ttl_of_the_longest_window() {
        let rules = [rule(1, 10), rule(5, 60)];
        let mut s = State::default();
        assert_eq!(
            check(&mut s, &rules, T0, true).ttl_us,
            Some(61 * SEC),
            "longest window plus the 1 s margin"
        );
        assert_eq!(check(&mut s, &rules, T0, true).ttl_us, None, "denied");
    }

    #[test]
    fn stale_entries_decide_like_no_entries() {
        let rules = [rule(2, 10)];
        let mut stale = State::default();
        check(&mut stale, &rules, T0, true);
        check(&mut stale, &rules, T0, true);
        let later = T0 + 10 * SEC;
        let mut fresh = State::default();
        for consume in [false, true, true, true] {
            assert_eq!(
                check(&mut stale, &rules, later, consume),
                check(&mut fresh, &rules, later, consume)
            );
        }
    }

    #[test]
    fn time_moving_backwards_keeps_the_log_sorted() {
        let rules = [rule(10, 10)];
        let mut s = State::default();
        for at in [T0 + 5, T0 + 1, T0 + 3, T0 + 3] {
            check(&mut s, &rules, at, true);
        }
        assert_eq!(s.log, [T0 + 1, T0 + 3, T0 + 3, T0 + 5]);
    }
}
