//! `Limiter::check_all`: one request, many limits, all or nothing. Each scenario runs on
//! the embedded backend and on a Redis server of its own; a Cluster with the keys on two
//! masters gives back what one took when the other refused; one Redis round trip per
//! list on one server; lists from many tasks and two instances never admit past a limit
//! and count exactly what they admitted.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis_ratelimit::clock::ManualClock;
use redis_ratelimit::{Algorithm, Calendar, Decision, Limiter, Rule};
use support::cluster::RedisCluster;
use support::{remaining, Topology};

const MINUTE: Duration = Duration::from_secs(60);
const TEN: [Rule; 1] = [Rule::new(10, MINUTE)];
const THREE: [Rule; 1] = [Rule::new(3, MINUTE)];
/// Two rules, one of them a calendar day's.
const WITH_CALENDAR: [Rule; 2] = [Rule::new(5, MINUTE), Rule::per_calendar(100, Calendar::Day)];

backend_tests! {
    memory = support::leak(Limiter::memory()),
    redis = |url: &str| support::leak(support::counting_limiter(url));

    async fn an_empty_list_is_admitted(limiter: &Limiter) {
        assert!(limiter.check_all([]).await.unwrap().is_empty());
    }

    async fn an_admitted_list_consumes_each_checks_own_cost(limiter: &Limiter) {
        for algorithm in Algorithm::ALL {
            let (ip, tenant) = (format!("ip:{algorithm}"), format!("tenant:{algorithm}"));
            let ds = limiter
                .check_all([
                    limiter.check(&ip, &TEN),
                    limiter.check(&tenant, &TEN).cost(3).algorithm(algorithm),
                ])
                .await
                .unwrap();
            assert!(ds.iter().all(|d| d.allowed), "{algorithm}: {ds:?}");
            assert_eq!((ds[0].remaining, ds[1].remaining), (9, 7), "{algorithm}");
            assert_eq!(remaining(limiter, Algorithm::SlidingLog, &ip, &TEN).await, 9);
            assert_eq!(remaining(limiter, algorithm, &tenant, &TEN).await, 7, "{algorithm}");
        }
    }

    async fn a_list_refused_by_one_check_consumes_nothing_from_the_others(limiter: &Limiter) {
        for algorithm in Algorithm::ALL {
            let (ip, user, tenant) = (
                format!("refused:ip:{algorithm}"),
                format!("refused:user:{algorithm}"),
                format!("refused:tenant:{algorithm}"),
            );
            limiter.check(&tenant, &THREE).cost(3).algorithm(algorithm).await.unwrap();
            let ds = limiter
                .check_all([
                    limiter.check(&ip, &TEN).algorithm(Algorithm::TokenBucket),
                    limiter.check(&user, &WITH_CALENDAR).cost(2).algorithm(algorithm),
                    limiter.check(&tenant, &THREE).algorithm(algorithm),
                ])
                .await
                .unwrap();
            let allowed: Vec<bool> = ds.iter().map(|d| d.allowed).collect();
            assert_eq!(allowed, [true, true, false], "{algorithm}: {ds:?}");
            assert!(ds[2].retry_after.is_some(), "{algorithm}: {ds:?}");
            assert_eq!(ds[0].retry_after, None);
            assert_eq!(remaining(limiter, Algorithm::TokenBucket, &ip, &TEN).await, 10, "{algorithm}");
            assert_eq!(remaining(limiter, algorithm, &user, &WITH_CALENDAR).await, 5, "{algorithm}");
            assert_eq!(remaining(limiter, algorithm, &tenant, &THREE).await, 0, "{algorithm}");
        }
    }

    async fn a_peek_in_a_list_takes_part_in_admission_and_consumes_nothing(limiter: &Limiter) {
        let ds = limiter
            .check_all([limiter.check("peeked:a", &TEN), limiter.peek("peeked:b", &THREE).cost(3)])
            .await
            .unwrap();
        assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
        assert_eq!(remaining(limiter, Algorithm::SlidingLog, "peeked:a", &TEN).await, 9);
        assert_eq!(remaining(limiter, Algorithm::SlidingLog, "peeked:b", &THREE).await, 3);
        // A peek that would not pass refuses the list.
        let ds = limiter
            .check_all([limiter.check("peeked:a", &TEN), limiter.peek("peeked:b", &THREE).cost(4)])
            .await
            .unwrap();
        assert_eq!((ds[0].allowed, ds[1].allowed), (true, false), "{ds:?}");
        assert_eq!(remaining(limiter, Algorithm::SlidingLog, "peeked:a", &TEN).await, 9);
    }

    async fn a_refusing_check_starts_its_own_block_and_the_others_consume_nothing(limiter: &Limiter) {
        let lockout = Duration::from_secs(900);
        limiter.check("blocked:b", &THREE).cost(3).await.unwrap();
        let ds = limiter
            .check_all([
                limiter.check("blocked:a", &TEN).block_for(lockout),
                limiter.check("blocked:b", &THREE).block_for(lockout),
            ])
            .await
            .unwrap();
        assert_eq!((ds[0].allowed, ds[1].allowed), (true, false), "{ds:?}");
        assert!(ds[1].retry_after > Some(MINUTE), "locked out: {ds:?}");
        // The key that would have passed is neither counted nor blocked.
        assert_eq!(remaining(limiter, Algorithm::SlidingLog, "blocked:a", &TEN).await, 10);
        assert!(limiter.check("blocked:a", &TEN).await.unwrap().allowed);
        let d = limiter.peek("blocked:b", &THREE).await.unwrap();
        assert!(d.retry_after > Some(MINUTE), "{d:?}");
    }

    async fn a_key_named_twice_is_counted_twice_or_not_at_all(limiter: &Limiter) {
        for algorithm in Algorithm::ALL {
            let key = format!("twice:{algorithm}");
            let both = || {
                limiter.check_all([
                    limiter.check(&key, &THREE).cost(2).algorithm(algorithm),
                    limiter.check(&key, &THREE).algorithm(algorithm),
                ])
            };
            let ds = both().await.unwrap();
            assert!(ds.iter().all(|d| d.allowed), "{algorithm}: {ds:?}");
            assert_eq!(remaining(limiter, algorithm, &key, &THREE).await, 0, "{algorithm}");
            limiter.reset(&key).await.unwrap();
            limiter.check(&key, &THREE).algorithm(algorithm).await.unwrap();
            // 1 + 2 fit, 1 + 2 + 1 do not: the list takes nothing.
            let ds = both().await.unwrap();
            assert!(!ds.iter().all(|d| d.allowed), "{algorithm}: {ds:?}");
            assert_eq!(remaining(limiter, algorithm, &key, &THREE).await, 2, "{algorithm}");
        }
    }

    async fn a_refund_of_one_decision_gives_back_to_its_own_key_only(limiter: &Limiter) {
        for algorithm in Algorithm::ALL {
            let (a, b) = (format!("refund:a:{algorithm}"), format!("refund:b:{algorithm}"));
            let ds = limiter
                .check_all([
                    limiter.check(&a, &TEN).cost(2).algorithm(algorithm),
                    limiter.check(&b, &TEN).cost(4).algorithm(algorithm),
                ])
                .await
                .unwrap();
            limiter.refund(&b, &TEN, &ds[1]).await.unwrap();
            assert_eq!(remaining(limiter, algorithm, &a, &TEN).await, 8, "{algorithm}");
            assert_eq!(remaining(limiter, algorithm, &b, &TEN).await, 10, "{algorithm}");
            let settled = limiter.settle(&a, &TEN, &ds[0], 1).await.unwrap();
            assert_eq!(settled.remaining, 9, "{algorithm}");
        }
    }

    async fn a_cost_no_algorithm_takes_fails_the_list_and_counts_nothing(limiter: &Limiter) {
        let err = limiter
            .check_all([
                limiter.check("large:a", &TEN),
                limiter.check("large:b", &TEN).cost(Algorithm::SLIDING_LOG_MAX_COST + 1),
            ])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), redis_ratelimit::BackendErrorKind::CostTooLarge);
        assert_eq!(remaining(limiter, Algorithm::SlidingLog, "large:a", &TEN).await, 10);
    }

    async fn a_list_waits_for_room_when_its_refusing_check_asks(limiter: &Limiter) {
        const BRIEF: [Rule; 1] = [Rule::new(1, Duration::from_millis(200))];
        limiter.check("waits:b", &BRIEF).await.unwrap();
        let ds = limiter
            .check_all([
                limiter.check("waits:a", &TEN),
                limiter.check("waits:b", &BRIEF).wait(Duration::from_secs(30)),
            ])
            .await
            .unwrap();
        assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
        assert_eq!(remaining(limiter, Algorithm::SlidingLog, "waits:a", &TEN).await, 9);
    }
}

/// Lists over the same three keys from many tasks of two instances (limiters) at once:
/// never more admitted than the tightest key allows, and every key counts exactly what
/// the admitted lists took through it.
async fn lists_from_many_tasks_count_exactly(a: &'static Limiter, b: &'static Limiter) {
    const TIGHT: [Rule; 1] = [Rule::new(40, MINUTE)];
    const WIDE: [Rule; 1] = [Rule::new(1000, MINUTE)];
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let limiter = if task % 2 == 0 { a } else { b };
            let admitted = Arc::clone(&admitted);
            tokio::spawn(async move {
                for _ in 0..10 {
                    let ds = limiter
                        .check_all([
                            limiter.check("exact:ip", &WIDE),
                            limiter
                                .check("exact:tenant", &TIGHT)
                                .cost(2)
                                .algorithm(Algorithm::TokenBucket),
                            limiter
                                .check("exact:user", &WIDE)
                                .algorithm(Algorithm::FixedWindow),
                        ])
                        .await
                        .unwrap();
                    if ds.iter().all(|d| d.allowed) {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let admitted = admitted.load(Ordering::Relaxed);
    // The tenant holds 40 units at 2 a list: 20 lists, of 160.
    assert_eq!(admitted, 20);
    assert_eq!(
        remaining(a, Algorithm::SlidingLog, "exact:ip", &WIDE).await,
        1000 - admitted
    );
    assert_eq!(
        remaining(a, Algorithm::FixedWindow, "exact:user", &WIDE).await,
        1000 - admitted
    );
    assert_eq!(
        remaining(a, Algorithm::TokenBucket, "exact:tenant", &TIGHT).await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_from_many_tasks_and_two_instances_count_exactly_on_redis() {
    let server = support::RedisServer::start();
    let a = support::leak(support::counting_limiter(&server.url()));
    let b = support::leak(support::counting_limiter(&server.url()));
    lists_from_many_tasks_count_exactly(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_from_many_tasks_and_two_instances_count_exactly_on_memory() {
    // Two instances over one embedded store, standing for a remote one.
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let a = support::leak(Limiter::remote_memory_with_clock(clock.clone()));
    let b = support::leak(a.sharing_backend(clock));
    lists_from_many_tasks_count_exactly(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_three_keys_is_one_round_trip_on_one_server() {
    let server = support::RedisServer::start();
    let limiter = support::counting_limiter(&server.url());
    let mut redis = server.connection();
    // The script is loaded by a first list.
    let list = || {
        limiter.check_all([
            limiter.check("trip:ip", &TEN),
            limiter
                .check("trip:tenant", &TEN)
                .algorithm(Algorithm::TokenBucket),
            limiter
                .check("trip:user", &TEN)
                .algorithm(Algorithm::SlidingWindow),
        ])
    };
    list().await.unwrap();
    let before =
        support::command_calls(&mut redis, "evalsha") + support::command_calls(&mut redis, "eval");
    let ds = list().await.unwrap();
    let after =
        support::command_calls(&mut redis, "evalsha") + support::command_calls(&mut redis, "eval");
    assert!(ds.iter().all(|d| d.allowed));
    assert_eq!(after - before, 1, "one script for the whole list");
}

/// Two keys in different hash slots of two masters, the second refusing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_nothing_is_kept_on_one_master_when_another_refuses() {
    let cluster = &RedisCluster::start();
    let limiter = support::counting_limiter(&cluster.url());
    let first = "cluster:a".to_string();
    let second = (0..)
        .map(|i| format!("cluster:b{i}"))
        .find(|key| cluster.master_of(key) != cluster.master_of(&first))
        .unwrap();
    limiter.check(&second, &THREE).cost(3).await.unwrap();
    for _ in 0..5 {
        let ds = limiter
            .check_all([limiter.check(&first, &TEN), limiter.check(&second, &THREE)])
            .await
            .unwrap();
        assert_eq!((ds[0].allowed, ds[1].allowed), (true, false), "{ds:?}");
        let entries: u64 = redis::cmd("ZCARD")
            .arg(&first)
            .query(&mut cluster.connection(cluster.master_of(&first)))
            .unwrap();
        assert_eq!(entries, 0, "given back on its master after the call");
    }
    // Both admitted: each counted on its own master.
    let third = format!("{{{first}}}:same-slot");
    let ds = limiter
        .check_all([
            limiter.check(&first, &TEN),
            limiter
                .check(&third, &TEN)
                .algorithm(Algorithm::FixedWindow),
            limiter.check(&format!("{second}:free"), &THREE),
        ])
        .await
        .unwrap();
    assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
    assert_eq!(
        remaining(&limiter, Algorithm::SlidingLog, &first, &TEN).await,
        9
    );
    assert_eq!(
        remaining(&limiter, Algorithm::FixedWindow, &third, &TEN).await,
        9
    );
}

/// The limiter every test below shares, as an application shares one.
static SHARED: LazyLock<Limiter> =
    LazyLock::new(|| support::counting_limiter(support::process_server_url()));

/// One test of many sharing [`SHARED`] at once: its own keys, all or nothing.
async fn shared_scenario(n: u32) {
    let (ip, tenant) = (format!("shared:{n}:ip"), format!("shared:{n}:tenant"));
    let list = || SHARED.check_all([SHARED.check(&ip, &TEN), SHARED.check(&tenant, &THREE)]);
    let ds: Vec<Vec<Decision>> = vec![
        list().await.unwrap(),
        list().await.unwrap(),
        list().await.unwrap(),
        list().await.unwrap(),
    ];
    let admitted = ds.iter().filter(|d| d.iter().all(|d| d.allowed)).count();
    assert_eq!(admitted, 3);
    assert_eq!(
        remaining(&SHARED, Algorithm::SlidingLog, &ip, &TEN).await,
        7
    );
}

#[tokio::test]
async fn a_static_limiter_serves_parallel_tests_1() {
    shared_scenario(1).await;
}

#[tokio::test]
async fn a_static_limiter_serves_parallel_tests_2() {
    shared_scenario(2).await;
}

#[tokio::test]
async fn a_static_limiter_serves_parallel_tests_3() {
    shared_scenario(3).await;
}

mod another_algorithm {
    use super::*;

    backend_tests! {
        memory = support::leak(Limiter::memory()),
        redis = |url: &str| support::leak(support::counting_limiter(url));

        async fn a_key_of_another_algorithm_fails_the_list_and_counts_nothing(limiter: &Limiter) {
            limiter.check("other:b", &TEN).algorithm(Algorithm::TokenBucket).await.unwrap();
            let err = limiter
                .check_all([limiter.check("other:a", &TEN), limiter.check("other:b", &TEN)])
                .await
                .unwrap_err();
            assert_eq!(err.kind(), redis_ratelimit::BackendErrorKind::Command, "{err}");
            assert_eq!(remaining(limiter, Algorithm::SlidingLog, "other:a", &TEN).await, 10);
            assert_eq!(remaining(limiter, Algorithm::TokenBucket, "other:b", &TEN).await, 9);
        }
    }
}

/// A route behind two guards on one Redis: each request is one script, however many
/// guards apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layers_two_guards_are_one_round_trip() {
    use axum::{routing::get, Router};
    use redis_ratelimit::axum::RateLimitLayer;
    use redis_ratelimit::{Guard, LimitType};

    const PER_IP: [Rule; 1] = [Rule::per_minute(100)];
    const EVERYONE: [Rule; 1] = [Rule::per_minute(1000)];
    let server = support::RedisServer::start();
    let limiter = support::leak(support::counting_limiter(&server.url()));
    let layer = RateLimitLayer::new()
        .guard(Guard::new("check_all::per_ip", &PER_IP).limiter(limiter))
        .guard(
            Guard::new("check_all::everyone", &EVERYONE)
                .limit_type(LimitType::Global)
                .limiter(limiter),
        );
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let served = support::http::serve_axum(app, "127.0.0.1");
    let client = support::http::client_from("127.0.0.1");
    let mut redis = server.connection();
    let scripts = |redis: &mut redis::Connection| {
        support::command_calls(redis, "evalsha") + support::command_calls(redis, "eval")
    };
    // The first request loads the script.
    let first = client.get(&served.base).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let before = scripts(&mut redis);
    for _ in 0..5 {
        let response = client.get(&served.base).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(scripts(&mut redis) - before, 5, "one script a request");
    let everyone = limiter
        .peek("rate_limit:global:check_all::everyone", &EVERYONE)
        .await
        .unwrap();
    assert_eq!(everyone.remaining, 994);
}

/// A deterministic stream of lists over a few keys of every algorithm, at explicit times
/// moving forwards, compared decision by decision between Redis and the embedded backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_and_memory_decide_lists_alike() {
    const T0: Duration = Duration::from_secs(1_700_000_000);
    const RULES: [Rule; 2] = [
        Rule::new(4, Duration::from_millis(50)),
        Rule::new(9, Duration::from_millis(400)),
    ];
    let server = support::RedisServer::start();
    let redis = support::counting_limiter(&server.url());
    let memory = Limiter::memory();
    let keys: Vec<String> = (0..8).map(|i| format!("diff:{i}")).collect();
    let algorithm_of = |i: usize| Algorithm::ALL[i % 4];
    let mut next = support::xorshift(0x9e37_79b9_7f4a_7c15);
    let mut now = T0;
    let (mut admitted, mut refused) = (0, 0);
    for step in 0..600 {
        now += Duration::from_micros(next(8_000));
        let first = next(keys.len() as u64) as usize;
        let picked: Vec<(usize, u64, bool)> = (0..1 + next(3) as usize)
            .map(|n| ((first + 3 * n) % keys.len(), 1 + next(3), next(5) != 0))
            .collect();
        let on = async |limiter: &Limiter| {
            let checks = picked.iter().map(|&(i, cost, consume)| {
                let check = match consume {
                    true => limiter.check(&keys[i], &RULES),
                    false => limiter.peek(&keys[i], &RULES),
                };
                check.algorithm(algorithm_of(i)).cost(cost).at(now)
            });
            limiter.check_all(checks).await.unwrap()
        };
        let (from_redis, from_memory) = (on(&redis).await, on(&memory).await);
        let figures = |ds: &[Decision]| -> Vec<(bool, u64, Option<Duration>)> {
            ds.iter()
                .map(|d| (d.allowed, d.remaining, d.retry_after))
                .collect()
        };
        assert_eq!(
            figures(&from_redis),
            figures(&from_memory),
            "step {step}: {picked:?} at {now:?}"
        );
        match from_redis.iter().all(|d| d.allowed) {
            true => admitted += 1,
            false => refused += 1,
        }
    }
    // The stream exercises both answers.
    assert!(
        admitted > 100 && refused > 100,
        "{admitted} admitted, {refused} refused"
    );
}
