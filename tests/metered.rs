//! Metered usage, on both backends (a real `redis-server` and the embedded memory backend)
//! and every algorithm: rules that count calls beside rules that count units, and costs
//! settled after the call.

mod support;

use std::time::Duration;

use redis_ratelimit::{rate_limiter, Algorithm, Limiter, RateLimitError, Rule};

/// 3 calls and 10 units a minute, checked together.
static CALLS_AND_UNITS: [Rule; 2] = [Rule::per_minute(3).calls(), Rule::per_minute(10)];

#[rate_limiter(
    rules(rule(count = 2, time = 60, calls = true), "100/minute"),
    cost = tokens,
    limit_type = CUSTOM,
    by = who,
    limiter = support::limiter(),
    name = "metered.calls_attribute"
)]
async fn calls_attribute(who: &str, tokens: u64) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(
    rules("2 calls/minute", "100 per minute"),
    cost = tokens,
    limit_type = CUSTOM,
    by = who,
    limiter = support::limiter(),
    name = "metered.calls_text"
)]
async fn calls_text(who: &str, tokens: u64) -> Result<(), RateLimitError> {
    Ok(())
}

#[test]
fn rules_counting_calls_are_written_and_read_back_as_text() {
    let calls = Rule::per_minute(60).calls();
    assert!(calls.counts_calls());
    assert_eq!(calls.to_string(), "60 calls per 60s");
    assert_eq!("60 calls per 60s".parse::<Rule>().unwrap(), calls);
    assert_eq!("60 calls/minute".parse::<Rule>().unwrap(), calls);
    assert_eq!("60 calls per minute".parse::<Rule>().unwrap(), calls);
    assert_eq!(
        Rule::parse_list("60 calls/minute, 90000/minute").unwrap(),
        [calls, Rule::per_minute(90_000)]
    );
    assert_ne!(
        calls,
        Rule::per_minute(60),
        "a calls rule is not the units rule"
    );
    let millis = Rule::new(4, Duration::from_millis(250)).calls();
    assert_eq!(millis.to_string().parse::<Rule>().unwrap(), millis);
}

backend_tests! {
    async fn a_check_takes_one_from_calls_rules_and_its_cost_from_the_others() {
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("metered:mixed:{algorithm}");
            let check = |cost| limiter.check(&key, &CALLS_AND_UNITS).cost(cost).algorithm(algorithm);
            // 4 units and 1 call: 6 units and 2 calls left; the calls rule binds.
            let d = check(4).await.unwrap();
            assert!(d.allowed, "{algorithm}");
            assert_eq!((d.rule_index, d.remaining), (0, 2), "{algorithm}");
            // 1 unit: 5 units and 1 call left; the calls rule binds.
            let d = check(1).await.unwrap();
            assert_eq!((d.allowed, d.rule_index, d.remaining), (true, 0, 1), "{algorithm}");
            // 6 units do not fit: refused, consuming nothing, by the units rule.
            let d = check(6).await.unwrap();
            assert_eq!((d.allowed, d.rule_index, d.remaining), (false, 1, 5), "{algorithm}");
            assert!(d.retry_after.is_some(), "{algorithm}");
            // 5 units do: the third call, which leaves no call and no unit.
            let d = check(5).await.unwrap();
            assert_eq!((d.allowed, d.remaining), (true, 0), "{algorithm}");
            // A fourth call of any cost is refused by the calls rule.
            let d = limiter.peek(&key, &CALLS_AND_UNITS[..1]).algorithm(algorithm).await.unwrap();
            assert_eq!((d.allowed, d.remaining), (false, 0), "{algorithm}");
            let d = check(1).await.unwrap();
            assert!(!d.allowed, "{algorithm}");
        }
    }

    async fn a_cost_above_a_units_count_never_passes_whatever_the_calls_rules_say() {
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("metered:never:{algorithm}");
            let d = limiter.check(&key, &CALLS_AND_UNITS).cost(11).algorithm(algorithm).await.unwrap();
            assert!(!d.allowed, "{algorithm}");
            assert_eq!((d.rule_index, d.retry_after), (1, None), "{algorithm}: never");
            // A cost far above the calls rule's count passes when the units allow it.
            let many = [Rule::per_minute(1).calls(), Rule::per_minute(1_000)];
            let d = limiter.check(&key, &many).cost(500).algorithm(algorithm).await.unwrap();
            assert!(d.allowed, "{algorithm}");
        }
    }

    async fn a_refund_gives_back_the_call_and_the_units() {
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("metered:refund:{algorithm}");
            let d = limiter.check(&key, &CALLS_AND_UNITS).cost(4).algorithm(algorithm).await.unwrap();
            limiter.refund(&key, &CALLS_AND_UNITS, &d).await.unwrap();
            let peek = limiter.peek(&key, &CALLS_AND_UNITS[..1]).algorithm(algorithm).await.unwrap();
            assert_eq!(peek.remaining, 3, "{algorithm}: the call is back");
            let peek = limiter.peek(&key, &CALLS_AND_UNITS[1..]).algorithm(algorithm).await.unwrap();
            assert_eq!(peek.remaining, 10, "{algorithm}: the units are back");
        }
    }

    async fn the_attribute_counts_calls_with_calls_true_and_in_rule_text() {
        // 2 calls a minute, whatever their cost (within the 100 units).
        for who in ["ann", "bob"] {
            assert!(calls_attribute(who, 40).await.is_ok());
            assert!(calls_attribute(who, 1).await.is_ok());
            assert!(calls_attribute(who, 1).await.is_err(), "a third call");
            assert!(calls_text(who, 40).await.is_ok());
            assert!(calls_text(who, 1).await.is_ok());
            assert!(calls_text(who, 1).await.is_err(), "a third call");
        }
        // The units rule still binds: 60 + 50 units is above 100.
        assert!(calls_text("cy", 60).await.is_ok());
        assert!(calls_text("cy", 50).await.is_err());
    }
}

/// The shape users write: one `static` limiter, shared by tests running in parallel.
static SHARED: std::sync::LazyLock<Limiter> = std::sync::LazyLock::new(Limiter::memory);

#[tokio::test]
async fn a_shared_limiter_counts_calls_per_key_for_parallel_tests_a() {
    let rules = [Rule::per_minute(2).calls(), Rule::per_minute(50)];
    for cost in [20, 20] {
        assert!(
            SHARED
                .check("metered:shared:a", &rules)
                .cost(cost)
                .await
                .unwrap()
                .allowed
        );
    }
    assert!(
        !SHARED
            .check("metered:shared:a", &rules)
            .cost(1)
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test]
async fn a_shared_limiter_counts_calls_per_key_for_parallel_tests_b() {
    let rules = [Rule::per_minute(2).calls(), Rule::per_minute(50)];
    assert!(
        SHARED
            .check("metered:shared:b", &rules)
            .cost(45)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        !SHARED
            .check("metered:shared:b", &rules)
            .cost(6)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        SHARED
            .check("metered:shared:b", &rules)
            .cost(5)
            .await
            .unwrap()
            .allowed
    );
}
