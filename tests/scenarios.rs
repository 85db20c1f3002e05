//! The sliding log's behaviour, written once and run on both backends (a real
//! `redis-server` and the embedded memory backend), plus what only Redis can show: the
//! key's type and TTL, and that both backends decide alike call for call.

mod support;

use std::time::{Duration, Instant};

use redis_ratelimit::{Algorithm, Decision, Limiter, Rule};

/// An arbitrary fixed moment for explicit-time checks.
const T0: Duration = Duration::from_secs(1_700_000_000);
const MS: Duration = Duration::from_millis(1);
const US: Duration = Duration::from_micros(1);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A consuming check at `T0 + at`.
async fn check_at(limiter: &Limiter, key: &str, rules: &[Rule], at: Duration) -> Decision {
    let check = support::run_at(limiter, Algorithm::SlidingLog, key, rules, true, T0 + at);
    check.await.expect("check")
}

/// A peek at `T0 + at`.
async fn peek_at(limiter: &Limiter, key: &str, rules: &[Rule], at: Duration) -> Decision {
    let peek = support::run_at(limiter, Algorithm::SlidingLog, key, rules, false, T0 + at);
    peek.await.expect("peek")
}

/// A decision's figures, as a test expects them (a `Decision` also carries what a refund of
/// it needs, which only the limiter makes).
#[derive(Debug)]
struct Expected {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_after: Duration,
    retry_after: Option<Duration>,
    rule: Rule,
    rule_index: usize,
}

impl PartialEq<Expected> for Decision {
    fn eq(&self, e: &Expected) -> bool {
        (
            self.allowed,
            self.limit,
            self.remaining,
            self.reset_after,
            self.retry_after,
            self.rule,
            self.rule_index,
        ) == (
            e.allowed,
            e.limit,
            e.remaining,
            e.reset_after,
            e.retry_after,
            e.rule,
            e.rule_index,
        )
    }
}

fn allowed(rules: &[Rule], rule_index: usize, remaining: u64, reset_after: Duration) -> Expected {
    Expected {
        allowed: true,
        limit: rules[rule_index].count(),
        remaining,
        reset_after,
        retry_after: None,
        rule: rules[rule_index],
        rule_index,
    }
}

fn denied(rules: &[Rule], rule_index: usize, reset_after: Duration, retry: Duration) -> Expected {
    Expected {
        allowed: false,
        limit: rules[rule_index].count(),
        remaining: 0,
        reset_after,
        retry_after: Some(retry),
        rule: rules[rule_index],
        rule_index,
    }
}

/// A consuming check at `T0 + at`, and what it must answer: `(at, expected)`.
type Step = (Duration, Expected);

/// Consuming checks of `key` at `T0 + at` for each `(at, expected)` in turn, each answered
/// as expected.
async fn assert_checks(limiter: &Limiter, key: &str, rules: &[Rule], steps: &[Step]) {
    for (step, (at, expected)) in steps.iter().enumerate() {
        let at = *at;
        let decision = check_at(limiter, key, rules, at).await;
        assert_eq!(decision, *expected, "{key}, step {step}, at {at:?}");
    }
}

backend_tests! {
    /// Each case's checks, in turn, answered exactly: what is left, when it resets, and
    /// which rule binds.
    async fn checks_report_exact_decisions_and_the_binding_rule() {
        let l = support::limiter();
        let one = [Rule::new(3, secs(10))];
        let two = [Rule::new(5, secs(1)), Rule::new(3, secs(60))];
        let even = [Rule::new(2, secs(10)), Rule::new(2, secs(20))];
        let cases: [(&str, &[Rule], Vec<Step>); 3] = [
            ("one rule", &one, vec![
                (secs(0), allowed(&one, 0, 2, secs(10))),
                (secs(1), allowed(&one, 0, 1, secs(10))),
                (secs(2), allowed(&one, 0, 0, secs(10))),
                // Free again when the call at 0 s leaves (10 s); fully free when the one
                // at 2 s does.
                (secs(3), denied(&one, 0, secs(9), secs(7))),
            ]),
            // Rule 1 has the least left, so it binds while calls pass.
            ("two rules", &two, vec![
                (secs(0), allowed(&two, 1, 2, secs(60))),
                (secs(1), allowed(&two, 1, 1, secs(60))),
                (secs(2), allowed(&two, 1, 0, secs(60))),
                (secs(3), denied(&two, 1, secs(59), secs(57))),
            ]),
            ("two even rules", &even, vec![
                // Equal budgets: the lower index binds.
                (secs(0), allowed(&even, 0, 1, secs(10))),
                (secs(1), allowed(&even, 0, 0, secs(10))),
                // Both full: the rule that frees up last binds, however early the other
                // frees.
                (secs(2), denied(&even, 1, secs(19), secs(18))),
                // At 10 s rule 0 frees, rule 1 still holds both calls.
                (secs(10), denied(&even, 1, secs(11), secs(10))),
            ]),
        ];
        // Each case on a key named after it, which the failure message names.
        for (case, rules, steps) in cases {
            assert_checks(l, case, rules, &steps).await;
        }
    }

    async fn denied_calls_consume_nothing() {
        let l = support::limiter();
        let rules = [Rule::new(2, secs(1)), Rule::new(3, secs(60))];
        assert!(check_at(l, "k", &rules, MS).await.allowed);
        assert!(check_at(l, "k", &rules, 2 * MS).await.allowed);
        for i in 3..50 {
            let d = check_at(l, "k", &rules, i * MS).await;
            assert_eq!((d.allowed, d.rule_index), (false, 0), "call {i}");
        }
        // Rule 0 is free again; had the 47 denials been counted, rule 1 would be full.
        assert_eq!(
            check_at(l, "k", &rules, secs(2)).await,
            allowed(&rules, 1, 0, secs(60))
        );
        assert_eq!(
            check_at(l, "k", &rules, secs(3)).await,
            denied(&rules, 1, secs(59), secs(57) + MS)
        );
    }

    async fn peek_consumes_nothing() {
        let l = support::limiter();
        let rules = [Rule::new(2, secs(10))];
        // A peek tells what is left now.
        for _ in 0..10 {
            assert_eq!(peek_at(l, "k", &rules, secs(0)).await, allowed(&rules, 0, 2, secs(10)));
        }
        assert_eq!(check_at(l, "k", &rules, secs(0)).await, allowed(&rules, 0, 1, secs(10)));
        assert_eq!(peek_at(l, "k", &rules, secs(1)).await, allowed(&rules, 0, 1, secs(10)));
        assert_eq!(check_at(l, "k", &rules, secs(1)).await, allowed(&rules, 0, 0, secs(10)));
        // When full, a peek answers exactly what a check would.
        let peek = peek_at(l, "k", &rules, secs(2)).await;
        assert_eq!(peek, denied(&rules, 0, secs(9), secs(8)));
        assert_eq!(check_at(l, "k", &rules, secs(2)).await, peek);

        // The programmatic API on the backend's own clock.
        let now_rules = [Rule::new(1, secs(60))];
        for _ in 0..3 {
            assert!(l.peek("now", &now_rules).await.unwrap().allowed);
        }
        assert!(l.check("now", &now_rules).await.unwrap().allowed);
        assert!(!l.peek("now", &now_rules).await.unwrap().allowed);
    }

    async fn reset_forgets_the_key() {
        let l = support::limiter();
        let rules = [Rule::new(2, secs(60))];
        for _ in 0..2 {
            assert!(l.check("k", &rules).await.unwrap().allowed);
        }
        assert!(!l.check("k", &rules).await.unwrap().allowed);
        l.reset("k").await.unwrap();
        let d = l.check("k", &rules).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 1));
        // Resetting a key that does not exist is not an error.
        l.reset("never-checked").await.unwrap();
    }

    async fn windows_slide_entry_by_entry() {
        let l = support::limiter();
        let rules = [Rule::new(3, secs(10))];
        for at in [0, 4, 8] {
            assert!(check_at(l, "k", &rules, secs(at)).await.allowed);
        }
        assert_eq!(
            check_at(l, "k", &rules, secs(9)).await,
            denied(&rules, 0, secs(9), secs(1))
        );
        // An entry at s is inside the window at now iff s > now - window.
        assert!(!check_at(l, "k", &rules, secs(10) - US).await.allowed);
        assert_eq!(check_at(l, "k", &rules, secs(10)).await, allowed(&rules, 0, 0, secs(10)));
        assert_eq!(
            check_at(l, "k", &rules, secs(11)).await,
            denied(&rules, 0, secs(9), secs(3))
        );
        assert!(check_at(l, "k", &rules, secs(14)).await.allowed);
        assert!(check_at(l, "k", &rules, secs(18)).await.allowed);
        assert!(!check_at(l, "k", &rules, secs(19)).await.allowed);
        // Long idle: the old entries decide nothing.
        assert_eq!(
            check_at(l, "k", &rules, secs(1_000)).await,
            allowed(&rules, 0, 2, secs(10))
        );
    }

    async fn sub_second_windows_count_in_microseconds() {
        let l = support::limiter();
        let rules = [Rule::new(2, 250 * MS), Rule::new(3, Duration::from_micros(1_500))];
        assert_eq!(check_at(l, "k", &rules, US).await, allowed(&rules, 0, 1, 250 * MS));
        assert_eq!(check_at(l, "k", &rules, 2 * US).await, allowed(&rules, 0, 0, 250 * MS));
        assert_eq!(
            check_at(l, "k", &rules, 3 * US).await,
            denied(&rules, 0, 250 * MS - US, 250 * MS - 2 * US)
        );
        assert!(!check_at(l, "k", &rules, 250 * MS).await.allowed);
        assert_eq!(
            check_at(l, "k", &rules, 250 * MS + US).await,
            allowed(&rules, 0, 0, 250 * MS)
        );
    }

    async fn windows_slide_in_real_time() {
        // On the backend's own clock. The bounds on `retry_after` come from instants taken
        // around the calls, so a slow machine widens them rather than breaks them; and the
        // pauses between calls are half the window, so a machine would have to stall for
        // that long to change which calls pass.
        let l = support::limiter();
        let window = secs(3);
        let rules = [Rule::new(2, window)];
        let before_first = Instant::now();
        assert!(l.check("k", &rules).await.unwrap().allowed);
        let after_first = Instant::now();
        tokio::time::sleep(window / 2).await;
        assert!(l.check("k", &rules).await.unwrap().allowed);
        let before_third = Instant::now();
        let d = l.check("k", &rules).await.unwrap();
        let after_third = Instant::now();
        assert!(!d.allowed);
        // The first call leaves `window` after it was made.
        let retry = d.retry_after.expect("denied");
        let earliest = window.saturating_sub(after_third - before_first);
        let latest = window - (before_third - after_first);
        assert!(
            retry + MS >= earliest && retry <= latest + MS,
            "{retry:?} is not within {earliest:?}..={latest:?}"
        );
        tokio::time::sleep(retry + MS).await;
        assert!(l.check("k", &rules).await.unwrap().allowed);
        // The second call is still inside the window.
        assert!(!l.check("k", &rules).await.unwrap().allowed);
    }

    async fn a_concurrent_burst_admits_exactly_the_limit() {
        let l = support::limiter();
        static RULES: [Rule; 1] = [Rule::new(100, Duration::from_secs(60))];
        let rules = &RULES[..];
        // Connect and load the script first, so the burst measures counting alone.
        l.check("warm-up", rules).await.unwrap();
        let tasks: Vec<_> = (0..1_000)
            .map(|_| tokio::spawn(async move { l.check("burst", rules).await }))
            .collect();
        let mut admitted = 0;
        for task in tasks {
            if task.await.unwrap().expect("no backend error in the burst").allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 100);
        assert!(!l.peek("burst", rules).await.unwrap().allowed);
    }

    async fn many_keys_are_counted_apart() {
        let l = support::limiter();
        let rules = [Rule::new(2, secs(60))];
        let keys: Vec<String> = (0..50).map(|i| format!("rate_limit:ip:10.0.0.{i}:f")).collect();
        for round in 0..3 {
            for key in &keys {
                let d = check_at(l, key, &rules, secs(round)).await;
                assert_eq!(d.allowed, round < 2, "{key} round {round}");
            }
        }
        assert!(check_at(l, "rate_limit:ip:10.0.0.50:f", &rules, secs(3)).await.allowed);
    }
}

mod redis_only {
    use super::*;
    use crate::support::RedisServer;

    #[tokio::test]
    async fn the_key_is_a_zset_expiring_after_the_longest_window_plus_margin() {
        let server = RedisServer::start();
        let limiter = support::counting_limiter(&server.url());
        let rules = [Rule::new(5, secs(2)), Rule::new(10, secs(30))];
        let checked = Instant::now();
        limiter.check("k", &rules).await.unwrap();
        let mut conn = server.connection();
        let kind: String = redis::cmd("TYPE").arg("k").query(&mut conn).unwrap();
        assert_eq!(kind, "zset");
        let pttl: u64 = redis::cmd("PTTL").arg("k").query(&mut conn).unwrap();
        // At most the window and a 1 s margin; at least the window, less the time since.
        let since = checked.elapsed().as_millis() as u64;
        assert!(
            pttl <= 31_000 && pttl + since > 30_000,
            "PTTL {pttl} ms, {since} ms after"
        );
        // A denied call does not extend the key's life.
        for _ in 0..10 {
            limiter.check("k", &rules).await.unwrap();
        }
        let before: i64 = redis::cmd("PTTL").arg("k").query(&mut conn).unwrap();
        assert!(!limiter.check("k", &rules).await.unwrap().allowed);
        let after: i64 = redis::cmd("PTTL").arg("k").query(&mut conn).unwrap();
        assert!(after <= before, "{after} > {before}");
        // A peek of an absent key creates nothing.
        limiter.peek("absent", &rules).await.unwrap();
        let exists: i64 = redis::cmd("EXISTS").arg("absent").query(&mut conn).unwrap();
        assert_eq!(exists, 0);
    }

    #[tokio::test]
    async fn calls_in_one_microsecond_are_all_recorded() {
        let server = RedisServer::start();
        let limiter = support::counting_limiter(&server.url());
        let rules = [Rule::new(1_000, secs(60))];
        for i in 0..100 {
            let d = check_at(&limiter, "k", &rules, secs(5)).await;
            assert_eq!((d.allowed, d.remaining), (true, 999 - i));
        }
        let mut conn = server.connection();
        // Members are the checks' ids, made by the client (binary).
        let members: Vec<(Vec<u8>, u64)> = redis::cmd("ZRANGE")
            .arg("k")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut conn)
            .unwrap();
        assert_eq!(members.len(), 100);
        let at = (T0 + secs(5)).as_micros() as u64;
        assert!(members.iter().all(|&(_, score)| score == at));
    }

    /// A deterministic stream of checks and peeks over a few keys, at times that jump
    /// forwards (and sometimes back), compared decision by decision.
    #[tokio::test]
    async fn redis_and_memory_decide_alike() {
        let server = RedisServer::start();
        let redis = support::counting_limiter(&server.url());
        let memory = Limiter::memory();
        let rule_sets: [&[Rule]; 3] = [
            &[Rule::new(3, 100 * MS)],
            &[Rule::new(2, 40 * MS), Rule::new(5, 300 * MS)],
            &[
                Rule::new(4, Duration::from_micros(7_777)),
                Rule::new(4, 50 * MS),
                Rule::new(9, secs(1)),
            ],
        ];
        let mut next = support::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut now = T0;
        let mut denials = 0;
        // Clocks go back by up to 1.5 s, though never more than the TTL margin (1 s)
        // before a call that may have found a key expired (a margin after the last
        // write): the memory backend forgets such a key on its explicit clock where Redis
        // (on its own) keeps it, and the state it forgot is stale only that far back.
        let mut floor = T0;
        let mut last_writes = std::collections::HashMap::new();
        for step in 0..2_000 {
            now += match next(100) {
                0..=4 => Duration::ZERO,
                5 => secs(2),
                _ => Duration::from_micros(next(3_000)),
            };
            if next(20) == 0 {
                now = now
                    .saturating_sub(Duration::from_micros(next(1_500_000)))
                    .max(floor);
            }
            if last_writes.values().any(|&w| now >= w + secs(1)) {
                floor = floor.max(now - secs(1));
            }
            let set = next(3) as usize;
            let key = format!("k{set}-{}", next(2));
            let consume = next(4) != 0;
            let on = async |limiter| {
                let rules = rule_sets[set];
                let decision =
                    support::run_at(limiter, Algorithm::SlidingLog, &key, rules, consume, now);
                decision.await.unwrap()
            };
            let (on_redis, on_memory) = (on(&redis).await, on(&memory).await);
            assert_eq!(
                on_redis, on_memory,
                "step {step}: {key} consume={consume} at {now:?}"
            );
            if consume && on_redis.allowed {
                let last = last_writes.entry(key.clone()).or_insert(now);
                *last = now.max(*last);
            }
            denials += usize::from(!on_redis.allowed);
        }
        // The stream must exercise both answers to prove anything.
        assert!(
            (200..1_800).contains(&denials),
            "{denials} denials in 2000 calls"
        );
    }
}
