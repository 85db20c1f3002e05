//! The public programmatic API, on each backend's own clock (Redis `TIME`, system time).

use std::time::Duration;

use redis_ratelimit::{Algorithm, Rule};

use crate::support;

/// Windows of an hour: a run of calls never straddles a boundary that would reset a
/// fixed window (or shift a sliding one) in a way these assertions do not expect.
const RULES: [Rule; 2] = [Rule::per_hour(2), Rule::per_day(100)];
/// The algorithms that keep one record per rule.
const COUNTING: [Algorithm; 3] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::TokenBucket,
];

crate::backend_tests! {
    async fn every_algorithm_limits_through_check_and_peek() {
        let l = support::limiter();
        for algorithm in COUNTING {
            let key = format!("api:{}", algorithm.name());
            let first = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
            assert!(first.allowed, "{algorithm:?}");
            assert_eq!((first.limit, first.remaining, first.rule_index), (2, 1, 0));
            // A peek tells what is left now, and whether a call of its cost would pass.
            let peek = l.peek(&key, &RULES).algorithm(algorithm).await.unwrap();
            assert_eq!((peek.allowed, peek.remaining), (true, 1), "{algorithm:?}");
            let two = l.peek(&key, &RULES).cost(2).algorithm(algorithm).await.unwrap();
            assert_eq!((two.allowed, two.remaining), (false, 1), "{algorithm:?}");
            assert!(l.check(&key, &RULES).algorithm(algorithm).await.unwrap().allowed);

            let denied = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
            assert!(!denied.allowed, "{algorithm:?}");
            assert_eq!((denied.rule, denied.remaining), (RULES[0], 0));
            let retry = denied.retry_after.expect("denied");
            assert!(retry > Duration::ZERO && retry <= Duration::from_secs(2 * 3600));
            assert!(!l.peek(&key, &RULES).algorithm(algorithm).await.unwrap().allowed);

            l.reset(&key).await.unwrap();
            let fresh = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
            assert_eq!((fresh.allowed, fresh.remaining), (true, 1), "{algorithm:?}");
        }
    }

    async fn a_clock_behind_the_key_never_discards_newer_state() {
        let l = support::limiter();
        // 1 s windows; the newer window is full, then a check reads a clock 600 ms
        // behind, in the window before. Counting it there would find that window empty.
        let rules = [Rule::new(2, Duration::from_secs(1))];
        let t = Duration::from_secs(1_700_000_000);
        for algorithm in Algorithm::ALL {
            let key = format!("behind:{}", algorithm.name());
            let at = |now| l.check(&key, &rules).algorithm(algorithm).at(now);
            let newer = t + Duration::from_millis(100);
            assert!(at(newer).await.unwrap().allowed, "{algorithm:?}");
            assert!(at(newer).await.unwrap().allowed, "{algorithm:?}");
            let behind = at(t - Duration::from_millis(500)).await.unwrap();
            assert!(!behind.allowed, "{algorithm:?} admitted a third call: {behind:?}");
            // The next call on the newer clock is still denied: nothing was lost.
            assert!(!at(newer).await.unwrap().allowed, "{algorithm:?}");
        }
    }

    async fn a_cost_uses_that_many_units_or_none() {
        let l = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("cost:{}", algorithm.name());
            let check = |cost| l.check(&key, &RULES).cost(cost).algorithm(algorithm);
            let too_many = check(3).await.unwrap();
            assert!(!too_many.allowed, "{algorithm:?}");
            assert_eq!(too_many.retry_after, None, "{algorithm:?}: never");
            assert_eq!((too_many.remaining, too_many.rule), (2, RULES[0]));
            let both = check(2).await.unwrap();
            assert_eq!((both.allowed, both.remaining), (true, 0), "{algorithm:?}");
            let denied = check(1).await.unwrap();
            assert!(!denied.allowed && denied.retry_after.is_some(), "{algorithm:?}");
            let peek = l.peek(&key, &[RULES[1]]).algorithm(algorithm).await.unwrap();
            assert_eq!(peek.remaining, 98, "{algorithm:?}: 2 units of the day's 100");
        }
    }

    async fn a_refund_gives_back_exactly_that_decision_s_units_once() {
        let l = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("refund:{}", algorithm.name());
            let left = || async {
                let peek = l.peek(&key, &RULES).algorithm(algorithm).await.unwrap();
                peek.remaining
            };
            assert!(l.check(&key, &RULES).algorithm(algorithm).await.unwrap().allowed);
            let taken = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
            assert_eq!((taken.allowed, taken.remaining), (true, 0), "{algorithm:?}");
            l.refund(&key, &RULES, &taken).await.unwrap();
            assert_eq!(left().await, 1, "{algorithm:?}: its unit is back");
            // Twice: nothing more comes back.
            l.refund(&key, &RULES, &taken).await.unwrap();
            assert_eq!(left().await, 1, "{algorithm:?}: given back once");
            // A refusal took nothing, so its refund gives nothing.
            assert!(l.check(&key, &RULES).algorithm(algorithm).await.unwrap().allowed);
            let refused = l.check(&key, &RULES).algorithm(algorithm).await.unwrap();
            assert!(!refused.allowed, "{algorithm:?}");
            l.refund(&key, &RULES, &refused).await.unwrap();
            assert_eq!(left().await, 0, "{algorithm:?}: a refusal's refund is a no-op");
        }
    }

    async fn a_key_counted_by_one_algorithm_refuses_another() {
        let l = support::limiter();
        let all = Algorithm::ALL;
        for owner in all {
            let key = format!("owned:{}", owner.name());
            assert!(l.check(&key, &RULES).algorithm(owner).await.unwrap().allowed);
            for other in all.into_iter().filter(|a| *a != owner) {
                let err = l.check(&key, &RULES).algorithm(other).await.unwrap_err();
                assert!(err.to_string().contains(&key), "{owner:?} then {other:?}: {err}");
                assert!(l.peek(&key, &RULES).algorithm(other).await.is_err());
            }
            // The owner's state is untouched by the refused calls.
            let again = l.check(&key, &RULES).algorithm(owner).await.unwrap();
            assert_eq!((again.allowed, again.remaining), (true, 0), "{owner:?}");
        }
    }
}
