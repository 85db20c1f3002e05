//! The arithmetic every algorithm shares, and the hand-worked sequences.

use super::testing::{call, rule};
use super::{Call, StoredState};
use std::time::Duration;

use crate::decision::{RawDecision, Receipt};
use crate::lockout::Lockout;
use crate::Algorithm;
use crate::Rule;

const ALL: [Algorithm; 4] = Algorithm::ALL;

/// The arithmetic of one key, for the hand-worked sequences.
struct Key(Option<StoredState>);

impl super::worked::Runner for Key {
    type Receipt = Receipt;

    fn check(&mut self, check: &super::worked::Check<'_>) -> ([u64; 5], Receipt) {
        let algorithm: Algorithm = check.algorithm.parse().unwrap();
        let rules: Vec<Rule> = check.rules.iter().map(|&(c, w)| rule(c, w)).collect();
        let call = Call {
            rules: &rules,
            now_us: check.now_us,
            cost: check.cost,
            calls: 1,
            hold_us: 0,
            draw: false,
            consume: check.consume,
            lockout: Lockout::For(Duration::from_micros(check.block_for_us)).packed(),
        };
        let state = self.0.get_or_insert_with(|| StoredState::new(algorithm));
        let d = state.check(&call).decision;
        let answer = [
            u64::from(d.allowed),
            d.rule_index as u64,
            d.remaining,
            d.reset_after_us,
            d.retry_after_us,
        ];
        (answer, d.receipt)
    }

    fn refund(&mut self, _: &str, rules: &[(u64, u64)], receipt: &Receipt, now_us: u64) {
        let rules: Vec<Rule> = rules.iter().map(|&(c, w)| rule(c, w)).collect();
        if let Some(state) = &mut self.0 {
            state.refund(&rules, receipt, now_us);
        }
    }

    fn reset(&mut self) {
        self.0 = None;
    }

    fn start(&mut self, _: usize) {
        self.0 = None;
    }
}

#[test]
fn hand_worked_sequences_are_answered_exactly() {
    super::worked::replay(&mut Key(None));
}

/// What `denied` told was left is all still there: a check of exactly that many units at
/// `now_us` is admitted and leaves none.
#[track_caller]
fn assert_denial_took_nothing(
    s: &mut StoredState,
    rules: &[Rule],
    now_us: u64,
    denied: &RawDecision,
    algorithm: Algorithm,
) {
    let left = denied.remaining;
    let d = s.check(&call(rules, now_us, left, true)).decision;
    assert_eq!((d.allowed, d.remaining), (true, 0), "{algorithm:?}");
}

#[test]
fn a_cost_above_a_count_is_denied_for_ever_and_consumes_nothing() {
    let rules = [rule(10, 1_000), rule(3, 100)];
    for algorithm in ALL {
        let mut s = StoredState::new(algorithm);
        assert!(s.check(&call(&rules, 5_000, 1, true)).decision.allowed);
        let never = s.check(&call(&rules, 5_000, 4, true));
        assert!(!never.decision.allowed, "{algorithm:?}");
        assert_eq!(never.decision.rule_index, 1, "{algorithm:?}");
        assert_eq!(never.decision.retry_after_us, RawDecision::NEVER);
        assert_eq!(never.decision.remaining, 2, "{algorithm:?}: left now");
        assert_eq!(never.ttl_us, None);
        // Nothing was consumed: 2 units of the 3 are still there.
        assert_denial_took_nothing(&mut s, &rules, 5_000, &never.decision, algorithm);
    }
}

#[test]
fn a_cost_uses_that_many_units_of_every_rule() {
    let rules = [rule(10, 1_000_000), rule(4, 1_000_000)];
    for algorithm in ALL {
        let mut s = StoredState::new(algorithm);
        let d = s.check(&call(&rules, 0, 3, true)).decision;
        assert_eq!(
            (d.allowed, d.rule_index, d.remaining),
            (true, 1, 1),
            "{algorithm:?}"
        );
        let peek = s.check(&call(&rules, 0, 1, false)).decision;
        assert_eq!((peek.rule_index, peek.remaining), (1, 1), "{algorithm:?}");
        let denied = s.check(&call(&rules, 0, 2, true)).decision;
        assert!(!denied.allowed, "{algorithm:?}");
        assert_eq!(denied.remaining, 1, "{algorithm:?}: left now");
        // The denial took nothing: the last unit still passes, under both rules.
        assert_denial_took_nothing(&mut s, &rules, 0, &denied, algorithm);
    }
}

#[test]
fn denied_calls_consume_nothing() {
    let rules = [rule(10, 1_000), rule(1, 100)];
    for algorithm in ALL {
        let (mut denied, mut fresh) = (StoredState::new(algorithm), StoredState::new(algorithm));
        for s in [&mut denied, &mut fresh] {
            assert!(s.check(&call(&rules, 0, 1, true)).decision.allowed);
        }
        // The 100 µs rule is full: denials, which write nothing.
        for now in [40, 50, 60] {
            let d = denied.check(&call(&rules, now, 1, true));
            assert_eq!(
                (d.decision.allowed, d.decision.rule_index, d.ttl_us),
                (false, 1, None),
                "{algorithm:?}"
            );
        }
        // The state that saw them answers every later call as the one that did not.
        for now in [100, 200, 250, 900, 1_100] {
            let (a, b) = (
                denied.check(&call(&rules, now, 1, true)),
                fresh.check(&call(&rules, now, 1, true)),
            );
            assert_eq!(a, b, "{algorithm:?} at {now}");
        }
    }
}

#[test]
fn retry_after_is_exactly_when_the_binding_rule_passes() {
    // Calls every `step` µs with the costs in turn, until enough denials: each denial's
    // `retry_after` must be exact for its binding rule alone: a peek of the same cost
    // one µs earlier is denied, one on time is admitted.
    let cases: [(&[Rule], u64, usize); 3] = [
        (&[rule(2, 700), rule(5, 3_000)], 37, 6),
        (&[rule(3, 700), rule(7, 5_000), rule(2, 333)], 23, 12),
        (&[rule(3, 700), rule(7, 5_000)], 29, 8),
    ];
    for algorithm in ALL {
        for (rules, step, denials) in cases {
            let mut s = StoredState::new(algorithm);
            let (mut now, mut seen) = (1_234, 0);
            for &cost in [1, 2, 1, 1, 2].iter().cycle() {
                if seen == denials {
                    break;
                }
                let d = s.check(&call(rules, now, cost, true)).decision;
                if d.allowed {
                    now += step;
                    continue;
                }
                seen += 1;
                let retry = d.retry_after_us;
                assert_ne!(retry, RawDecision::NEVER, "{algorithm:?}, cost {cost}");
                let binding = [rules[d.rule_index]];
                let early = s.check(&call(&binding, now + retry - 1, cost, false));
                assert!(!early.decision.allowed, "{algorithm:?}: 1 µs early");
                now += retry;
                let on_time = s.check(&call(&binding, now, cost, false));
                assert!(on_time.decision.allowed, "{algorithm:?}: on time");
            }
        }
    }
}

#[test]
fn peek_tells_what_is_left_now_and_writes_nothing() {
    let rules = [rule(2, 1_000)];
    for algorithm in ALL {
        let mut s = StoredState::new(algorithm);
        for now in [0, 1] {
            let peek = s.check(&call(&rules, now, 1, false));
            assert_eq!(peek.ttl_us, None, "{algorithm:?}");
            let counted = s.check(&call(&rules, now, 1, true)).decision;
            let left_now = counted.remaining + 1;
            let expected = RawDecision {
                remaining: left_now,
                ..counted
            };
            assert_eq!(peek.decision, expected, "{algorithm:?}");
        }
        let full = s.check(&call(&rules, 3, 1, false));
        assert_eq!(full.ttl_us, None, "{algorithm:?}");
        assert!(!full.decision.allowed, "{algorithm:?}");
        assert_eq!(s.check(&call(&rules, 3, 1, true)).decision, full.decision);
    }
}

#[test]
fn stale_state_decides_like_absent_state() {
    let rules = [rule(2, 1_000)];
    for algorithm in ALL {
        let mut s = StoredState::new(algorithm);
        s.check(&call(&rules, 500, 1, true));
        s.check(&call(&rules, 501, 1, true));
        let mut fresh = StoredState::new(algorithm);
        for now in [2_501, 7_000] {
            assert_eq!(
                s.check(&call(&rules, now, 1, false)).decision,
                fresh.check(&call(&rules, now, 1, false)).decision,
                "{algorithm:?} at {now}"
            );
        }
        for _ in 0..3 {
            assert_eq!(
                s.check(&call(&rules, 7_000, 1, true)).decision,
                fresh.check(&call(&rules, 7_000, 1, true)).decision,
                "{algorithm:?}"
            );
        }
    }
}

#[test]
fn binding_rule_is_least_remaining_when_allowed_and_last_to_free_when_denied() {
    let rules = [rule(2, 1_000), rule(2, 10_000), rule(5, 10_000)];
    for algorithm in ALL {
        let mut s = StoredState::new(algorithm);
        // Remaining 1, 1, 4, then 0, 0, 3: ties go to the lowest index.
        for remaining in [1, 0] {
            let d = s.check(&call(&rules, 0, 1, true)).decision;
            assert_eq!((d.rule_index, d.remaining), (0, remaining), "{algorithm:?}");
        }
        // Rules 0 and 1 deny; rule 1's window frees last.
        let d = s.check(&call(&rules, 10, 1, true)).decision;
        assert_eq!((d.allowed, d.rule_index), (false, 1), "{algorithm:?}");
    }
    // Equal retries bind the lowest index.
    let both = [rule(1, 1_000), rule(1, 1_000), rule(2, 1_000)];
    for algorithm in ALL {
        let mut s = StoredState::new(algorithm);
        s.check(&call(&both, 0, 1, true));
        let d = s.check(&call(&both, 10, 1, true)).decision;
        assert_eq!((d.allowed, d.rule_index), (false, 0), "{algorithm:?}");
    }
}

#[test]
fn a_write_of_one_record_per_rule_keeps_only_the_rules_it_checked() {
    let (short, long) = (rule(3, 1_000), rule(5, 10_000));
    for algorithm in &ALL[1..] {
        let mut s = StoredState::new(*algorithm);
        s.check(&call(&[short, long], 0, 1, true));
        s.check(&call(&[short, long], 1, 1, true));
        // The long rule keeps its count when checked alone, in any position.
        let d = s.check(&call(&[long], 2, 1, true)).decision;
        assert_eq!((d.allowed, d.remaining), (true, 2), "{algorithm:?}");
        let d = s.check(&call(&[short, long], 3, 1, false)).decision;
        assert_eq!((d.rule_index, d.remaining), (1, 2), "{algorithm:?}");
        // The short rule was not in that write: it starts empty again.
        let fresh = StoredState::new(*algorithm).check(&call(&[short], 3, 1, false));
        assert_eq!(
            s.check(&call(&[short], 3, 1, false)),
            fresh,
            "{algorithm:?}"
        );
    }
}

#[test]
fn an_older_now_never_discards_newer_state() {
    // Two windows of 1 ms: the newer one full, then a check from 600 µs in the past
    // (the previous window) must still find it full.
    let rules = [rule(2, 1_000)];
    for algorithm in ALL {
        let mut s = StoredState::new(algorithm);
        assert!(s.check(&call(&rules, 10_100, 1, true)).decision.allowed);
        assert!(s.check(&call(&rules, 10_100, 1, true)).decision.allowed);
        let late = s.check(&call(&rules, 9_500, 1, true)).decision;
        assert!(!late.allowed, "{algorithm:?}: {late:?}");
        // Answered from the caller's clock: a call from it passes exactly on time.
        let retry = late.retry_after_us;
        let early = s.check(&call(&rules, 9_500 + retry - 1, 1, false)).decision;
        assert!(!early.allowed, "{algorithm:?}");
        let on_time = s.check(&call(&rules, 9_500 + retry, 1, false)).decision;
        assert!(on_time.allowed, "{algorithm:?}");
    }
}

#[test]
fn ttl_is_whole_milliseconds_rounded_up_plus_one_second() {
    use super::ttl_us;
    assert_eq!(ttl_us(0), 1_000_000);
    assert_eq!(ttl_us(1), 1_001_000);
    assert_eq!(ttl_us(1_000), 1_001_000);
    assert_eq!(ttl_us(1_001), 1_002_000);
    assert_eq!(ttl_us(60_000_000), 61_000_000);
}

#[test]
fn a_write_moves_the_expiry_to_cover_what_its_state_needs() {
    const S: u64 = 1_000_000;
    // Admitted checks as (now, cost, the TTL they set, or None when the expiry
    // already covers what they wrote): the time the state matters, rounded up to whole
    // ms, plus the one-second margin.
    type Writes = &'static [(u64, u64, Option<u64>)];
    let cases: [(Algorithm, &[Rule], Writes); 5] = [
        // Until the last rule's window ends; the next minute outlives it.
        (
            Algorithm::FixedWindow,
            &[rule(5, 1_000), rule(5, 60 * S)],
            &[
                (59 * S, 1, Some(2 * S)),
                (59 * S + 1, 1, None),
                (60 * S, 1, Some(61 * S)),
            ],
        ),
        // Until the end of the next window.
        (
            Algorithm::SlidingWindow,
            &[rule(4, 1_000)],
            &[(100, 1, Some(1_002_000)), (200, 1, None)],
        ),
        // The whole burst span, from the first write on: T = 250 µs, then 600 ms, whose
        // burst, by 0, leaves a tat of 60 s; one more, 60.6 s, outgrows the expiry.
        (
            Algorithm::TokenBucket,
            &[rule(4, 1_000)],
            &[(0, 1, Some(1_001_000)), (0, 3, None)],
        ),
        (
            Algorithm::TokenBucket,
            &[rule(100, 60 * S)],
            &[
                (0, 1, Some(61 * S)),
                (0, 99, None),
                (600_000, 1, Some(61 * S)),
            ],
        ),
        // Every write, for the longest window.
        (
            Algorithm::SlidingLog,
            &[rule(5, 10 * S), rule(5, 60 * S)],
            &[(0, 1, Some(61 * S)), (S, 1, Some(61 * S))],
        ),
    ];
    for (algorithm, rules, writes) in cases {
        let mut s = StoredState::new(algorithm);
        for &(now, cost, ttl) in writes {
            let outcome = s.check(&call(rules, now, cost, true));
            assert!(outcome.decision.allowed, "{algorithm:?} at {now}");
            assert_eq!(outcome.ttl_us, ttl, "{algorithm:?} at {now}");
        }
    }
}
