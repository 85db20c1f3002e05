//! Metered usage, on both backends (a real `redis-server` and the embedded memory backend)
//! and every algorithm: rules that count calls beside rules that count units, and costs
//! settled after the call.

mod support;

use std::time::Duration;

use redis_ratelimit::{rate_limiter, Algorithm, Limiter, RateLimitError, Rule};
use support::CallError;

/// 3 calls and 10 units a minute, checked together.
static CALLS_AND_UNITS: [Rule; 2] = [Rule::per_minute(3).calls(), Rule::per_minute(10)];

/// Guarded functions counting their first parameter's (`who`'s) calls on the scenario's
/// limiter: each `#[rate_limiter(policies)]` function in it stands for one with
/// `#[rate_limiter(policies, limit_type = CUSTOM, by = who, limiter = support::limiter())]`.
macro_rules! by_who {
    ($(
        $(#[doc = $doc:literal])*
        #[rate_limiter($($policy:tt)*)]
        async fn $name:ident($who:ident: &str, $($param:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block
    )*) => {$(
        $(#[doc = $doc])*
        #[rate_limiter($($policy)*, limit_type = CUSTOM, by = $who, limiter = support::limiter())]
        async fn $name($who: &str, $($param: $ty),*) -> $ret $body
    )*};
}

metered_sites! {
    calls_attribute(
        rules(rule(count = 2, time = 60, calls = true), "100/minute"),
        name = "metered.calls_attribute"
    );
    calls_text(rules("2 calls/minute", "100 per minute"), name = "metered.calls_text");
}

/// A completion: what the (fake) API says it used.
struct Completion {
    tokens: u64,
}

/// The tokens a completion used; none for a failure.
fn settled_tokens(r: &Result<Completion, CallError>) -> u64 {
    r.as_ref().map_or(0, |c| c.tokens)
}

/// Completions of 2 calls and 100 tokens a minute, `max_tokens` reserved: each
/// `name(policies);` is `async fn name(who, max_tokens, used)` with those policies too,
/// answering a completion that used `used` tokens, or (`None`) a failure.
macro_rules! completions {
    ($($(#[doc = $doc:literal])* $name:ident($($policy:tt)*);)*) => {
        by_who! {$(
            $(#[doc = $doc])*
            #[rate_limiter(rules("2 calls/minute", "100/minute"), cost = max_tokens, $($policy)*)]
            async fn $name(
                who: &str,
                max_tokens: u64,
                used: Option<u64>,
            ) -> Result<Completion, CallError> {
                used.map(|tokens| Completion { tokens })
                    .ok_or(CallError::Failed)
            }
        )*}
    };
}

completions! {
    /// Settled at the usage the API reports.
    complete(
        settle = |r: &Result<Completion, CallError>| r.as_ref().map_or(0, |c| c.tokens),
        name = "metered.complete"
    );
    /// As `complete`, but a failed call is not charged at all (`charge_if`).
    complete_charged(
        settle = settled_tokens,
        charge_if = Result::is_ok,
        name = "metered.complete_charged"
    );
}

by_who! {
    /// As `complete`, with a body that says it started, then waits for ever (to be dropped
    /// mid-body).
    #[rate_limiter(
        rules("100/minute"),
        cost = max_tokens,
        settle = |r: &Result<Completion, CallError>| r.as_ref().map_or(0, |c| c.tokens),
        name = "metered.complete_slow"
    )]
    async fn complete_slow(
        who: &str,
        max_tokens: u64,
        started: tokio::sync::oneshot::Sender<()>,
    ) -> Result<Completion, CallError> {
        let _ = started.send(());
        std::future::pending::<()>().await;
        Ok(Completion { tokens: 1 })
    }
}

/// The key a site named `name` counts `who` under.
fn key(name: &str, who: &str) -> String {
    format!("rate_limit:custom:{who}:{name}")
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

    async fn settle_gives_back_or_takes_the_difference_and_answers_as_a_peek() {
        let limiter = support::limiter();
        let rules = [Rule::per_minute(3).calls(), Rule::per_minute(100)];
        for algorithm in Algorithm::ALL {
            let key = format!("metered:settle:{algorithm}");
            let check = |cost| limiter.check(&key, &rules).cost(cost).algorithm(algorithm);
            let units = || limiter.peek(&key, &rules[1..]).algorithm(algorithm);
            // 40 reserved, 10 used: 30 back; the calls rule keeps its one.
            let d = check(40).await.unwrap();
            let after = limiter.settle(&key, &rules, &d, 10).await.unwrap();
            assert_eq!((after.allowed, after.rule_index, after.remaining), (true, 0, 2), "{algorithm}");
            assert_eq!(units().await.unwrap().remaining, 90, "{algorithm}");
            // Settling the same decision again changes nothing.
            limiter.settle(&key, &rules, &d, 0).await.unwrap();
            assert_eq!(units().await.unwrap().remaining, 90, "{algorithm}");
            // 10 reserved, 95 used: in debt by 5; a call of one unit is refused.
            let d = check(10).await.unwrap();
            let after = limiter.settle(&key, &rules, &d, 95).await.unwrap();
            assert!(!after.allowed, "{algorithm}: in debt");
            assert_eq!((after.rule_index, after.remaining), (1, 0), "{algorithm}");
            assert!(after.retry_after.is_some(), "{algorithm}: refused until the window has room");
            assert!(!check(1).await.unwrap().allowed, "{algorithm}");
            // Equal changes nothing; a denied decision settles nothing.
            let denied = check(1).await.unwrap();
            assert_eq!(limiter.settle(&key, &rules, &denied, 50).await.unwrap(), denied);
            assert!(!units().await.unwrap().allowed, "{algorithm}");
        }
    }

    async fn the_settle_argument_replaces_the_reservation_by_the_result_s_cost() {
        let limiter = support::limiter();
        let units = |name: &str, who: &str| {
            let key = key(name, who);
            async move { limiter.peek(&key, &[Rule::per_minute(100)]).await.unwrap().remaining }
        };
        // 60 reserved, 15 used: 85 left, and room for 60 more.
        assert!(complete("ann", 60, Some(15)).await.is_ok());
        assert_eq!(units("metered.complete", "ann").await, 85);
        assert!(complete("ann", 60, Some(70)).await.is_ok());
        // 15 + 70 = 85 used; the calls rule (2 a minute) is full now.
        assert_eq!(units("metered.complete", "ann").await, 15);
        assert!(matches!(complete("ann", 1, Some(1)).await, Err(CallError::Limited)));
        // A failed call settles at 0 units but keeps its call.
        assert!(matches!(complete("bob", 60, None).await, Err(CallError::Failed)));
        assert_eq!(units("metered.complete", "bob").await, 100);
        let calls = limiter.peek(&key("metered.complete", "bob"), &[Rule::per_minute(2).calls()]).await.unwrap();
        assert_eq!(calls.remaining, 1, "the failed call still counts as a call");
    }

    async fn with_charge_if_a_rejected_call_gives_everything_back_and_the_others_settle() {
        let limiter = support::limiter();
        for _ in 0..3 {
            assert!(matches!(complete_charged("cy", 60, None).await, Err(CallError::Failed)));
        }
        let key = key("metered.complete_charged", "cy");
        let d = limiter.peek(&key, &[Rule::per_minute(2).calls(), Rule::per_minute(100)]).await.unwrap();
        assert_eq!((d.rule_index, d.remaining), (0, 2), "calls and units all given back");
        assert!(complete_charged("cy", 60, Some(30)).await.is_ok());
        let d = limiter.peek(&key, &[Rule::per_minute(100)]).await.unwrap();
        assert_eq!(d.remaining, 70, "settled at 30");
    }

    async fn a_future_dropped_mid_body_keeps_its_reservation() {
        let limiter = support::limiter();
        let (started, body_runs) = tokio::sync::oneshot::channel();
        let call = complete_slow("dee", 60, started);
        // Admitted, and dropped once its body runs (it never returns).
        tokio::select! {
            _ = call => panic!("the body never returns"),
            ran = body_runs => ran.unwrap(),
        }
        let d = limiter.peek(&key("metered.complete_slow", "dee"), &[Rule::per_minute(100)]).await.unwrap();
        assert_eq!(d.remaining, 40, "the 60 reserved stay used");
    }

    async fn concurrent_reservations_covering_their_cost_never_hold_more_than_a_count() {
        // 64 callers at once, each reserving 5 to 20 units and settling at most that:
        // neither rule ever holds more than its count, and the key holds exactly the
        // settled costs. A day, so that no window ends (or unit refills) meanwhile.
        static RULES: [Rule; 2] = [Rule::per_day(40).calls(), Rule::per_day(300)];
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            let key: &'static str = Box::leak(format!("metered:concurrent:{algorithm}").into_boxed_str());
            let callers: Vec<_> = (0..64u64)
                .map(|caller| {
                    tokio::spawn(async move {
                        let (mut calls, mut units, mut refused) = (0u64, 0u64, 0u64);
                        for i in 0..4u64 {
                            let reserved = 5 + (caller * 7 + i * 3) % 16;
                            let actual = reserved - (caller + i) % 6;
                            let d = limiter.check(key, &RULES).cost(reserved).algorithm(algorithm).await.unwrap();
                            if !d.allowed {
                                refused += 1;
                                continue;
                            }
                            tokio::task::yield_now().await;
                            limiter.settle(key, &RULES, &d, actual).await.unwrap();
                            calls += 1;
                            units += actual;
                        }
                        (calls, units, refused)
                    })
                })
                .collect();
            let (mut calls, mut units, mut refused) = (0, 0, 0);
            for caller in callers {
                let (c, u, r) = caller.await.unwrap();
                (calls, units, refused) = (calls + c, units + u, refused + r);
            }
            assert!(calls <= 40, "{algorithm}: {calls} calls admitted");
            assert!(units <= 300, "{algorithm}: {units} units settled");
            assert!(refused > 0, "{algorithm}: nothing contended");
            let left = |rules: &'static [Rule]| async move {
                limiter.peek(key, rules).algorithm(algorithm).await.unwrap().remaining
            };
            assert_eq!(left(&RULES[..1]).await, 40 - calls, "{algorithm}: calls held");
            // The token bucket gives back only what has not refilled: the µs between a
            // reservation and its settle refill a fraction of a unit, which may round.
            let held = 300 - left(&RULES[1..]).await;
            match algorithm {
                Algorithm::TokenBucket => assert!(held == units || held == units + 1, "{algorithm}: {held} units held of {units}"),
                _ => assert_eq!(held, units, "{algorithm}: units held"),
            }
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

/// Whether [`SHARED`] admits a check of `cost` for `key`, under 2 calls and 50 units a minute.
async fn shared_admits(key: &str, cost: u64) -> bool {
    static RULES: [Rule; 2] = [Rule::per_minute(2).calls(), Rule::per_minute(50)];
    SHARED.check(key, &RULES).cost(cost).await.unwrap().allowed
}

#[tokio::test]
async fn a_shared_limiter_counts_calls_per_key_for_parallel_tests_a() {
    for cost in [20, 20] {
        assert!(shared_admits("metered:shared:a", cost).await);
    }
    assert!(!shared_admits("metered:shared:a", 1).await);
}

#[tokio::test]
async fn a_shared_limiter_counts_calls_per_key_for_parallel_tests_b() {
    assert!(shared_admits("metered:shared:b", 45).await);
    assert!(!shared_admits("metered:shared:b", 6).await);
    assert!(shared_admits("metered:shared:b", 5).await);
}

/// Connections killed (`CLIENT KILL` from another connection, again and again) while many
/// settles are in flight on them never settle a reservation twice: every reservation has a
/// key of its own, whose state tells how often its settle ran. A settle that cannot be
/// re-run harmlessly (the fixed window's) fails when its reply is lost, leaving the
/// reservation; the sliding log's, which settles the check's members by name, is sent again
/// and settles once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_on_connections_killed_mid_call_are_never_counted_twice() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
    ] {
        settles_killed_mid_call(algorithm).await;
    }
}

async fn settles_killed_mid_call(algorithm: Algorithm) {
    use redis_ratelimit::Breaker;

    const KILLS: usize = 30;
    const IN_FLIGHT: usize = 32;
    // A day, so that no window ends (or refills a unit) during the test: 5 reserved of 10,
    // 8 used, so a settle that ran once leaves 2, one that ran twice none.
    static TEN_PER_DAY: [Rule; 1] = [Rule::per_day(10)];
    const KEYS: usize = 4_000;

    let server = support::RedisServer::start();
    let limiter = support::leak(support::counting_limiter(&server.url()).breaker(Breaker::never()));
    let mut reserved = Vec::with_capacity(KEYS);
    for n in 0..KEYS {
        let key = format!("settled:{algorithm}:{n}");
        let d = limiter
            .check(&key, &TEN_PER_DAY)
            .cost(5)
            .algorithm(algorithm)
            .await
            .unwrap();
        reserved.push((key, d));
    }
    let reserved: &'static [_] = reserved.leak();

    let (killed, outcomes) = server
        .calls_while_killing(KILLS, IN_FLIGHT, move |n| async move {
            let (key, d) = reserved.get(n)?;
            Some((key.clone(), limiter.settle(key, &TEN_PER_DAY, d, 8).await))
        })
        .await;

    let (mut settled, mut failed) = (0, 0);
    for (key, outcome) in &outcomes {
        let left = support::remaining(limiter, algorithm, key, &TEN_PER_DAY).await;
        match outcome {
            Ok(after) => {
                assert_eq!(
                    left,
                    2,
                    "{key} ({algorithm}) was settled and holds {}",
                    10 - left
                );
                assert_eq!(after.remaining, 2, "{key} ({algorithm}) answered");
                settled += 1;
            }
            Err(err) => {
                support::assert_lost_reply(err);
                assert!(
                    left == 5 || left == 2,
                    "{key} ({algorithm}) failed and holds {}",
                    10 - left
                );
                failed += 1;
            }
        }
    }
    eprintln!("{algorithm}: {killed} connections killed; {settled} settled, {failed} failed");
    // Connections die only while there are any: the settles may all be done before the
    // last kill.
    assert!(killed > 0, "{algorithm}: no connection killed");
    assert!(settled > 0, "{algorithm}: nothing settled");
}

/// Reserves 40 units, then, in its body, takes the right to run scripts away from the
/// limiter's user (`default`), so that the settle (to 1 unit) cannot reach the backend.
#[rate_limiter(
    rules("100/minute"),
    cost = 40,
    settle = |_: &Result<(), RateLimitError>| 1,
    limit_type = CUSTOM,
    by = who,
    limiter = limiter,
    name = "metered.unreachable"
)]
async fn refused_settle(
    limiter: &'static Limiter,
    who: &str,
    admin: &mut redis::aio::MultiplexedConnection,
) -> Result<(), RateLimitError> {
    let acl = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-@scripting")
        .query_async::<()>(admin)
        .await;
    acl.unwrap();
    Ok(())
}

#[tokio::test]
async fn a_settle_that_cannot_reach_the_backend_leaves_the_reservation_and_logs_once() {
    let server = support::RedisServer::start();
    let url = server.url();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("admin")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query(&mut conn)
        .unwrap();
    let admin_url = url.replacen("redis://", "redis://admin:secret@", 1);
    let mut admin = redis::Client::open(admin_url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let limiter = support::leak(support::counting_limiter(&url));
    let (logs, _capture) = support::capture_logs();
    for who in ["ann", "bob"] {
        assert!(refused_settle(limiter, who, &mut admin).await.is_ok());
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("+@scripting")
            .query_async(&mut admin)
            .await
            .unwrap();
        let key = key("metered.unreachable", who);
        let d = limiter.peek(&key, &[Rule::per_minute(100)]).await.unwrap();
        assert_eq!(d.remaining, 60, "{who}: the 40 reserved stay used");
    }
    let logged = logs.text().matches("settle its cost").count();
    assert_eq!(logged, 1, "logged once: {}", logs.text());
}

/// Costs at the limits of what an algorithm takes, the deny cache beside settles and
/// refunds, and settles racing on the token bucket.
mod limits {
    use super::*;
    use redis_ratelimit::BackendErrorKind;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A moment at the start of an hour (so that no aligned window of an hour or less ends
    /// during a scenario run at the test clock).
    const T0: Duration = Duration::from_secs(1_699_999_200 + 60);

    const HUGE: u64 = 10_000_000_000;

    /// Bodies that ran.
    static UPLOADS: AtomicU64 = AtomicU64::new(0);

    by_who! {
        /// Metered in bytes on the default algorithm, the sliding log.
        #[rate_limiter(rules("10000000000/hour"), cost = bytes, name = "metered.upload")]
        async fn upload(who: &str, bytes: u64) -> Result<(), RateLimitError> {
            UPLOADS.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    backend_tests! {
        async fn a_sliding_log_cost_above_its_maximum_is_refused_before_the_backend() {
            let limiter = support::limiter();
            let rules = [Rule::per_hour(HUGE)];
            let max = Algorithm::SLIDING_LOG_MAX_COST;
            let key = "metered:log:max";
            let err = limiter.check(key, &rules).cost(max + 1).await.unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::CostTooLarge, "{err}");
            let text = err.to_string();
            assert!(text.contains("10000") && text.contains("TOKEN_BUCKET"), "{text}");
            let err = limiter.peek(key, &rules).cost(max + 1).await.unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::CostTooLarge, "{err}");
            assert_eq!(limiter.peek(key, &rules).await.unwrap().remaining, HUGE, "nothing counted");
            // The maximum itself is taken, and settled within it.
            let d = limiter.check(key, &rules).cost(max).await.unwrap();
            assert_eq!((d.allowed, d.remaining), (true, HUGE - max));
            let err = limiter.settle(key, &rules, &d, max + 1).await.unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::CostTooLarge, "{err}");
            assert_eq!(limiter.peek(key, &rules).await.unwrap().remaining, HUGE - max, "the reservation stays");
            let after = limiter.settle(key, &rules, &d, 1).await.unwrap();
            assert_eq!(after.remaining, HUGE - 1, "a refused settle can be made again within the maximum");
            // The other algorithms take any cost a rule can hold.
            for algorithm in &Algorithm::ALL[1..] {
                let key = format!("metered:log:max:{algorithm}");
                let d = limiter.check(&key, &rules).cost(5_000_000_000).algorithm(*algorithm).await.unwrap();
                assert!(d.allowed, "{algorithm}");
            }
        }

        async fn a_guarded_call_above_the_sliding_log_maximum_is_refused_even_fail_open() {
            let limiter = support::limiter();
            assert!(limiter.is_fail_open());
            let before = UPLOADS.load(Ordering::SeqCst);
            let max = Algorithm::SLIDING_LOG_MAX_COST;
            match upload("ann", max + 1).await {
                Err(RateLimitError::Backend(err)) => {
                    assert_eq!(err.kind(), BackendErrorKind::CostTooLarge, "{err}")
                }
                other => panic!("a guarded call above the maximum ran: {other:?}"),
            }
            assert_eq!(UPLOADS.load(Ordering::SeqCst), before, "the body did not run");
            assert!(upload("ann", max).await.is_ok());
            let left = limiter.peek(&key("metered.upload", "ann"), &[Rule::per_hour(HUGE)]).await.unwrap();
            assert_eq!(left.remaining, HUGE - max, "only the call within the maximum counted");
        }

        async fn reservations_above_u32_max_settle_and_refund_exactly() {
            let limiter = support::limiter();
            let rules = [Rule::per_hour(HUGE)];
            let largest = [Rule::per_hour(Rule::MAX_COUNT)];
            let big = 5_000_000_000;
            for algorithm in &Algorithm::ALL[1..] {
                let algorithm = *algorithm;
                let key = format!("metered:large:{algorithm}");
                let peek = |rules: &'static [Rule]| {
                    let key = key.clone();
                    async move { limiter.peek(&key, rules).algorithm(algorithm).at(T0).await.unwrap().remaining }
                };
                let rules: &'static [Rule] = Box::leak(Box::new(rules));
                let largest: &'static [Rule] = Box::leak(Box::new(largest));
                let check = |cost| limiter.check(&key, rules).cost(cost).algorithm(algorithm).at(T0);
                let d = check(big).await.unwrap();
                assert_eq!((d.allowed, d.remaining), (true, HUGE - big), "{algorithm}");
                let after = limiter.settle_at(&key, rules, &d, 1, T0).await.unwrap();
                assert_eq!(after.remaining, HUGE - 1, "{algorithm}: settled to 1");
                assert_eq!(peek(rules).await, HUGE - 1, "{algorithm}");
                let d = check(big).await.unwrap();
                limiter.refund_at(&key, rules, &d, T0).await.unwrap();
                assert_eq!(peek(rules).await, HUGE - 1, "{algorithm}: refunded");
                // In debt past u32::MAX: settled above the reservation.
                let d = check(1).await.unwrap();
                let after = limiter.settle_at(&key, rules, &d, big, T0).await.unwrap();
                assert_eq!(after.remaining, HUGE - 1 - big, "{algorithm}: took the excess");
                // The largest cost a rule holds.
                let key = format!("metered:largest:{algorithm}");
                let d = limiter.check(&key, largest).cost(Rule::MAX_COUNT).algorithm(algorithm).at(T0).await.unwrap();
                assert_eq!((d.allowed, d.remaining), (true, 0), "{algorithm}");
                limiter.refund_at(&key, largest, &d, T0).await.unwrap();
                let left = limiter.peek(&key, largest).algorithm(algorithm).at(T0).await.unwrap();
                assert_eq!(left.remaining, Rule::MAX_COUNT, "{algorithm}: the largest cost refunded");
            }
        }

        async fn concurrent_settles_give_back_exactly_what_they_settle() {
            // 40 tasks x 6 rounds of cost(40), then settle(1..=40) a second later (test
            // clock: the second is what a loaded machine may take between the two).
            static RULES: [Rule; 2] = [Rule::per_minute(100).calls(), Rule::per_hour(1_000)];
            const TASKS: usize = 40;
            let limiter = support::limiter();
            for algorithm in Algorithm::ALL {
                let key: &'static str = Box::leak(format!("metered:racing:{algorithm}").into_boxed_str());
                let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(TASKS));
                let round_at = |round: u64| T0 + Duration::from_secs(2 * round);
                let tasks: Vec<_> = (0..TASKS as u64)
                    .map(|task| {
                        let barrier = barrier.clone();
                        tokio::spawn(async move {
                            let mut units = 0;
                            for round in 0..6u64 {
                                let at = round_at(round);
                                let d = limiter.check(key, &RULES).cost(40).algorithm(algorithm).at(at).await.unwrap();
                                barrier.wait().await;
                                if d.allowed {
                                    let actual = 1 + (task * 7 + round * 13) % 40;
                                    let settle_at = at + Duration::from_secs(1);
                                    limiter.settle_at(key, &RULES, &d, actual, settle_at).await.unwrap();
                                    units += actual;
                                }
                                barrier.wait().await;
                            }
                            units
                        })
                    })
                    .collect();
                let mut units = 0;
                for task in tasks {
                    units += task.await.unwrap();
                }
                let end = round_at(6);
                let left = limiter.peek(key, &RULES[1..]).algorithm(algorithm).at(end).await.unwrap();
                let held = 1_000 - left.remaining;
                match algorithm {
                    // Refilled since the first round: one unit every 3.6 s; plus the one
                    // unit of rounding.
                    Algorithm::TokenBucket => assert!(
                        held <= units + 1 && held + 4 >= units,
                        "{algorithm}: {held} units held of {units} settled"
                    ),
                    _ => assert_eq!(held, units, "{algorithm}: units held"),
                }
            }
        }
    }

    /// A login: `charge_if` charges the failures alone.
    #[derive(Debug)]
    enum LoginError {
        BadPassword,
        Limited,
    }

    impl From<RateLimitError> for LoginError {
        fn from(_: RateLimitError) -> Self {
            LoginError::Limited
        }
    }

    by_who! {
        #[rate_limiter(rules("3/minute"), charge_if = Result::is_err, name = "metered.login")]
        async fn login(
            who: &str,
            right: bool,
            started: tokio::sync::mpsc::UnboundedSender<()>,
            gate: tokio::sync::watch::Receiver<bool>,
        ) -> Result<(), LoginError> {
            let _ = started.send(());
            let mut gate = gate;
            let _ = gate.wait_for(|open| *open).await;
            if right {
                Ok(())
            } else {
                Err(LoginError::BadPassword)
            }
        }
    }

    /// A check of 8 of 10, a refused check of 5 (cached), then a settle, a refund or a
    /// block of the key: the next check is answered by what the key holds now.
    async fn the_deny_cache_follows_settles_refunds_and_blocks(limiter: &Limiter) {
        let rules = [Rule::per_minute(10)];
        for algorithm in Algorithm::ALL {
            for how in ["settle", "refund"] {
                let key = format!("metered:denied:{how}:{algorithm}");
                let check = |cost| limiter.check(&key, &rules).cost(cost).algorithm(algorithm);
                let peek = |cost| limiter.peek(&key, &rules).cost(cost).algorithm(algorithm);
                let d = check(8).await.unwrap();
                assert!(d.allowed, "{algorithm}");
                assert!(
                    !check(5).await.unwrap().allowed,
                    "{algorithm}: refused, and cached"
                );
                match how {
                    "settle" => drop(limiter.settle(&key, &rules, &d, 1).await.unwrap()),
                    _ => limiter.refund(&key, &rules, &d).await.unwrap(),
                }
                assert!(
                    peek(5).await.unwrap().allowed,
                    "{algorithm}: a peek after the {how}"
                );
                assert!(
                    check(5).await.unwrap().allowed,
                    "{algorithm}: a check after the {how}"
                );
            }
            let key = format!("metered:denied:block:{algorithm}");
            let check = || limiter.check(&key, &rules).cost(5).algorithm(algorithm);
            assert!(check().await.unwrap().allowed);
            assert!(check().await.unwrap().allowed);
            assert!(
                !check().await.unwrap().allowed,
                "{algorithm}: refused, and cached"
            );
            limiter
                .block(&key, Duration::from_secs(3600))
                .await
                .unwrap();
            let blocked = check().await.unwrap();
            assert!(
                blocked.retry_after > Some(Duration::from_secs(3500)),
                "{algorithm}: answered by the block, not the cached refusal: {blocked:?}"
            );
        }
    }

    /// Four right logins at once on 3 a minute: three run and are given back, the fourth
    /// is refused (and cached); a fifth, with nothing counted, runs.
    async fn a_login_given_back_clears_the_deny_cache() {
        let (started, mut running) = tokio::sync::mpsc::unbounded_channel();
        let (open, gate) = tokio::sync::watch::channel(false);
        let three = async {
            tokio::join!(
                login("zoe", true, started.clone(), gate.clone()),
                login("zoe", true, started.clone(), gate.clone()),
                login("zoe", true, started.clone(), gate.clone()),
            )
        };
        let fourth = async {
            for _ in 0..3 {
                running.recv().await.unwrap();
            }
            let fourth = login("zoe", true, started.clone(), gate.clone()).await;
            open.send(true).unwrap();
            fourth
        };
        let ((a, b, c), fourth) = tokio::join!(three, fourth);
        assert!(a.is_ok() && b.is_ok() && c.is_ok());
        assert!(matches!(fourth, Err(LoginError::Limited)), "{fourth:?}");
        let left = support::limiter()
            .peek(&key("metered.login", "zoe"), &[Rule::per_minute(3)])
            .await
            .unwrap();
        assert_eq!(left.remaining, 3, "the three were given back");
        let fifth = login("zoe", true, started.clone(), gate.clone()).await;
        assert!(fifth.is_ok(), "{fifth:?}");
        // A wrong password is charged.
        assert!(matches!(
            login("zoe", false, started, gate).await,
            Err(LoginError::BadPassword)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_the_deny_cache_follows_settles_refunds_and_blocks() {
        let server = support::RedisServer::start();
        let limiter = support::redis_limiter(&server.url()).deny_cache(true);
        the_deny_cache_follows_settles_refunds_and_blocks(&limiter).await;
        support::with_limiter(limiter, a_login_given_back_clears_the_deny_cache()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_the_deny_cache_follows_settles_refunds_and_blocks() {
        let limiter = Limiter::memory().deny_cache(true);
        the_deny_cache_follows_settles_refunds_and_blocks(&limiter).await;
        support::with_limiter(limiter, a_login_given_back_clears_the_deny_cache()).await;
    }
}
