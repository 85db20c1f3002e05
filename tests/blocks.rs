//! `Limiter::block`: a key refused to every check for a while, written once and run on
//! both backends (a real `redis-server` and the embedded memory backend), with every
//! algorithm; and seen by every instance sharing a Redis.

mod support;

use std::time::Duration;

use redis_ratelimit::{Algorithm, Decision, Limiter, Rule};

/// An arbitrary fixed moment for explicit-time checks.
const T0: Duration = Duration::from_secs(1_700_000_000);
const HOUR: Duration = Duration::from_secs(3600);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

static RULES: [Rule; 2] = [Rule::per_hour(5), Rule::per_minute(4)];

/// A consuming check of `RULES` by `algorithm` at `T0 + at`.
async fn check_at(limiter: &Limiter, algorithm: Algorithm, key: &str, at: Duration) -> Decision {
    support::run_at(limiter, algorithm, key, &RULES, true, T0 + at)
        .await
        .expect("check")
}

/// A peek of `RULES` by `algorithm` at `T0 + at`.
async fn peek_at(limiter: &Limiter, algorithm: Algorithm, key: &str, at: Duration) -> Decision {
    support::run_at(limiter, algorithm, key, &RULES, false, T0 + at)
        .await
        .expect("peek")
}

/// Asserts that `d` is a block's refusal with `left` of it to go.
#[track_caller]
fn assert_blocked(d: &Decision, left: Duration, what: &str) {
    assert!(!d.allowed, "{what}: {d:?}");
    assert_eq!(d.remaining, 0, "{what}: {d:?}");
    assert_eq!(d.retry_after, Some(left), "{what}: {d:?}");
    assert_eq!(d.reset_after, left, "{what}: {d:?}");
}

static ONE_A_SECOND: [Rule; 1] = [Rule::per_second(1)];
static LOCKOUTS: [Duration; 3] = [
    Duration::from_secs(60),
    Duration::from_secs(600),
    Duration::from_secs(3600),
];

/// A consuming check of one call a second by `algorithm` at `T0 + at_ms`, locking the key
/// out by `LOCKOUTS` when refused.
async fn escalating_at(limiter: &Limiter, algorithm: Algorithm, key: &str, at_ms: u64) -> Decision {
    let check = limiter.check(key, &ONE_A_SECOND).block_schedule(&LOCKOUTS);
    check
        .algorithm(algorithm)
        .at(T0 + Duration::from_millis(at_ms))
        .await
        .expect("check")
}

backend_tests! {
    async fn each_lock_out_in_a_row_lasts_the_next_duration_of_the_schedule() {
        let limiter = support::limiter();
        const S: u64 = 1000;
        for algorithm in Algorithm::ALL {
            let key = format!("blocks:escalating:{algorithm}");
            let what = algorithm.to_string();
            // (time in ms, admitted, or the lock-out refused with that many s to go); each
            // refusal comes 1 ms after an admitted call, within the rule's second.
            let steps: [(u64, Option<u64>); 14] = [
                (0, None),
                (1, Some(60)),                 // the first lock-out: 1 minute
                (30 * S + 1, Some(30)),        // refused during it, which starts no other
                (61 * S, None),
                (61 * S + 1, Some(600)),       // the second: 10 minutes
                (662 * S, None),
                (662 * S + 1, Some(3600)),     // the third: 1 hour
                (4_263 * S, None),
                (22_263 * S, None),            // five quiet hours: within 24 h of the last
                (22_263 * S + 1, Some(3600)),  // the fourth: the last duration repeats
                (25_864 * S, None),
                (112_265 * S, None),           // a quiet day: the streak is forgotten
                (112_265 * S + 1, Some(60)),
                (112_326 * S, None),
            ];
            for (at, refused) in steps {
                let d = escalating_at(limiter, algorithm, &key, at).await;
                match refused {
                    None => assert!(d.allowed, "{what} at {at} ms: {d:?}"),
                    Some(left) => assert_blocked(&d, secs(left), &format!("{what} at {at} ms")),
                }
            }
            // A reset forgets the streak with the block.
            escalating_at(limiter, algorithm, &key, 112_326 * S + 1).await;
            limiter.reset(&key).await.unwrap();
            assert!(escalating_at(limiter, algorithm, &key, 112_327 * S).await.allowed);
            let first = escalating_at(limiter, algorithm, &key, 112_327 * S + 1).await;
            assert_blocked(&first, secs(60), &what);
        }
    }

    async fn a_blocked_key_refuses_every_check_until_the_block_ends_and_reset_lifts_it() {
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("blocks:ends:{algorithm}");
            assert!(check_at(limiter, algorithm, &key, secs(0)).await.allowed);
            limiter.block_at(&key, secs(10), T0 + secs(1)).await.unwrap();
            // Every check and peek is refused, whatever its cost, with what is left.
            for at in [1, 4, 9] {
                let left = secs(10 + 1 - at);
                assert_blocked(&check_at(limiter, algorithm, &key, secs(at)).await, left, &algorithm.to_string());
                assert_blocked(&peek_at(limiter, algorithm, &key, secs(at)).await, left, &algorithm.to_string());
            }
            let costly = limiter.check(&key, &RULES).cost(3).algorithm(algorithm).at(T0 + secs(5)).await.unwrap();
            assert_blocked(&costly, secs(6), &algorithm.to_string());
            // It ends on time, and what the key counted before it is still counted: the
            // refusals consumed nothing.
            let after = check_at(limiter, algorithm, &key, secs(11)).await;
            assert!(after.allowed, "{algorithm}: {after:?}");
            assert_eq!(after.remaining, 2, "{algorithm}: two of the minute's four used");

            // A reset lifts a block at once.
            limiter.block_at(&key, HOUR, T0 + secs(12)).await.unwrap();
            assert!(!check_at(limiter, algorithm, &key, secs(13)).await.allowed, "{algorithm}");
            limiter.reset(&key).await.unwrap();
            let fresh = check_at(limiter, algorithm, &key, secs(14)).await;
            assert!(fresh.allowed, "{algorithm}: {fresh:?}");
            assert_eq!(fresh.remaining, 3, "{algorithm}: counting starts over");
        }
    }

    async fn a_key_with_no_state_is_blocked_for_whichever_algorithm_checks_it_first() {
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("blocks:fresh:{algorithm}");
            limiter.block_at(&key, secs(30), T0).await.unwrap();
            assert_blocked(&check_at(limiter, algorithm, &key, secs(10)).await, secs(20), &algorithm.to_string());
            assert_blocked(&peek_at(limiter, algorithm, &key, secs(29)).await, secs(1), &algorithm.to_string());
            // Once it has ended, the key is that algorithm's, counted from nothing.
            let first = check_at(limiter, algorithm, &key, secs(30)).await;
            assert!(first.allowed, "{algorithm}: {first:?}");
            assert_eq!(first.remaining, 3, "{algorithm}");
            let second = check_at(limiter, algorithm, &key, secs(31)).await;
            assert_eq!((second.allowed, second.remaining), (true, 2), "{algorithm}");
        }
    }

    async fn a_block_never_shortens_a_longer_one_and_a_longer_one_extends_it() {
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            for fresh in [true, false] {
                let key = format!("blocks:longer:{algorithm}:{fresh}");
                if !fresh {
                    check_at(limiter, algorithm, &key, secs(0)).await;
                }
                limiter.block_at(&key, secs(100), T0).await.unwrap();
                limiter.block_at(&key, secs(10), T0 + secs(1)).await.unwrap();
                let what = format!("{algorithm}, fresh: {fresh}");
                assert_blocked(&check_at(limiter, algorithm, &key, secs(50)).await, secs(50), &what);
                limiter.block_at(&key, secs(200), T0 + secs(60)).await.unwrap();
                assert_blocked(&check_at(limiter, algorithm, &key, secs(160)).await, secs(100), &what);
                assert!(check_at(limiter, algorithm, &key, secs(260)).await.allowed, "{what}");
            }
        }
    }

    async fn block_for_and_limiter_block_write_one_block() {
        let limiter = support::limiter();
        let one = [Rule::per_minute(1)];
        for algorithm in Algorithm::ALL {
            let key = format!("blocks:one:{algorithm}");
            let check = |at: u64| limiter.check(&key, &one).algorithm(algorithm).at(T0 + secs(at));
            assert!(check(0).block_for(HOUR).await.unwrap().allowed);
            // Refused by the rule: blocked for the hour from then.
            assert!(!check(1).block_for(HOUR).await.unwrap().allowed);
            // A shorter block leaves it as it is ...
            limiter.block_at(&key, secs(60), T0 + secs(2)).await.unwrap();
            let d = check(3).await.unwrap();
            assert_eq!((d.allowed, d.retry_after), (false, Some(HOUR - secs(2))), "{algorithm}");
            // ... a longer one moves its end, and a refusal answers by the same rule.
            limiter.block_at(&key, 2 * HOUR, T0 + secs(4)).await.unwrap();
            let d = check(5).await.unwrap();
            assert_eq!((d.allowed, d.retry_after), (false, Some(2 * HOUR - secs(1))), "{algorithm}");
            assert_eq!(d.rule, one[0]);
            // After it, the rule's own window has long passed: the key counts again, and a
            // refusal with block_for blocks it again.
            let at = 2 * 3600 + 10;
            assert!(check(at).block_for(HOUR).await.unwrap().allowed, "{algorithm}");
            assert!(!check(at + 1).block_for(HOUR).await.unwrap().allowed, "{algorithm}");
            let d = check(at + 2).await.unwrap();
            assert_eq!(d.retry_after, Some(HOUR - secs(1)), "{algorithm}");
        }
    }

    async fn inspect_shows_a_block_of_limiter_block() {
        let limiter = support::limiter();
        for algorithm in Algorithm::ALL {
            let key = format!("blocks:inspect:{algorithm}");
            limiter.check(&key, &RULES).algorithm(algorithm).await.unwrap();
            limiter.block(&key, HOUR).await.unwrap();
            let state = limiter.inspect(&key).await.unwrap().expect("counted and blocked");
            assert_eq!(state.algorithm(), algorithm);
            let block = state.block().expect("a block");
            assert!(block.ends_in <= HOUR && block.ends_in > HOUR / 2, "{algorithm}: {block:?}");
            assert!(state.expires_in().is_some_and(|ttl| ttl >= block.ends_in), "{algorithm}");
            let refused = limiter.check(&key, &RULES).algorithm(algorithm).await.unwrap();
            assert!(!refused.allowed && refused.retry_after <= Some(HOUR), "{algorithm}: {refused:?}");
        }
        // A key that held nothing is blocked as the sliding log keeps a block.
        limiter.block("blocks:inspect:fresh", HOUR).await.unwrap();
        let state = limiter.inspect("blocks:inspect:fresh").await.unwrap().expect("blocked");
        assert!(state.block().is_some());
        assert!(state.log().is_none(), "no entries");
    }
}

/// The shape users write: one `static` limiter, shared by tests running in parallel.
static SHARED: std::sync::LazyLock<Limiter> = std::sync::LazyLock::new(Limiter::memory);

/// Whether a check of `key` by `algorithm` is admitted now.
async fn admitted(limiter: &Limiter, key: &str, algorithm: Algorithm) -> bool {
    let check = limiter.check(key, &RULES).algorithm(algorithm);
    check.await.expect("check").allowed
}

#[tokio::test]
async fn a_static_limiter_blocks_one_key_and_not_another() {
    SHARED.block("blocks:static:a", HOUR).await.unwrap();
    let a = SHARED.check("blocks:static:a", &RULES).await.unwrap();
    assert!(!a.allowed && a.retry_after > Some(HOUR / 2), "{a:?}");
    assert!(admitted(&SHARED, "blocks:static:b", Algorithm::SlidingLog).await);
}

#[tokio::test]
async fn a_static_limiter_lifts_a_block_with_reset() {
    SHARED.block("blocks:static:c", HOUR).await.unwrap();
    assert!(!admitted(&SHARED, "blocks:static:c", Algorithm::SlidingLog).await);
    SHARED.reset("blocks:static:c").await.unwrap();
    assert!(admitted(&SHARED, "blocks:static:c", Algorithm::SlidingLog).await);
}

#[tokio::test]
async fn a_static_limiter_escalates_each_key_s_lock_outs_apart() {
    for (key, at) in [("blocks:static:d", 0), ("blocks:static:e", 5_000)] {
        assert!(
            escalating_at(&SHARED, Algorithm::TokenBucket, key, at)
                .await
                .allowed
        );
        let first = escalating_at(&SHARED, Algorithm::TokenBucket, key, at + 1).await;
        assert_blocked(&first, secs(60), key);
    }
    assert!(
        escalating_at(&SHARED, Algorithm::TokenBucket, "blocks:static:d", 61_000)
            .await
            .allowed
    );
    let second = escalating_at(&SHARED, Algorithm::TokenBucket, "blocks:static:d", 61_001).await;
    assert_blocked(&second, secs(600), "the second of blocks:static:d");
}

#[tokio::test]
async fn a_block_reaches_every_instance_on_one_redis() {
    let server = support::RedisServer::start();
    let instance = || support::leak(Limiter::redis(&server.url()).unwrap());
    let (a, b) = (instance(), instance());
    for algorithm in Algorithm::ALL {
        let key = format!("blocks:instances:{algorithm}");
        assert!(admitted(a, &key, algorithm).await);
        a.block(&key, HOUR).await.unwrap();
        let seen = b.check(&key, &RULES).algorithm(algorithm).await.unwrap();
        assert!(!seen.allowed, "{algorithm}: {seen:?}");
        assert!(
            seen.retry_after > Some(HOUR / 2) && seen.retry_after <= Some(HOUR),
            "{seen:?}"
        );
        b.reset(&key).await.unwrap();
        assert!(admitted(a, &key, algorithm).await);
    }
}

#[tokio::test]
async fn a_block_of_a_key_holding_foreign_data_is_an_error_that_says_so() {
    let server = support::RedisServer::start();
    let limiter = Limiter::redis(&server.url()).unwrap();
    let _: () = redis::cmd("HSET")
        .arg("blocks:hash")
        .arg("f")
        .arg("v")
        .query(&mut server.connection())
        .unwrap();
    let err = limiter.block("blocks:hash", HOUR).await.unwrap_err();
    assert!(
        err.to_string().contains("which the limiter never writes"),
        "{err}"
    );
    let _: () = redis::cmd("SET")
        .arg("blocks:text")
        .arg("not ours")
        .query(&mut server.connection())
        .unwrap();
    let err = limiter.block("blocks:text", HOUR).await.unwrap_err();
    assert!(err.to_string().contains("did not write"), "{err}");
}

/// A key that served an escalating lock-out lives 24 hours past its end on Redis, and one
/// instance's streak escalates the next lock-out another instance starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_out_streak_is_kept_in_the_key_for_every_instance_for_a_day() {
    let server = support::RedisServer::start();
    let instance = || support::leak(Limiter::redis(&server.url()).unwrap());
    let (a, b) = (instance(), instance());
    let mut redis = support::connect(server.port());
    for algorithm in Algorithm::ALL {
        let key = format!("blocks:streak:{algorithm}");
        let first = escalating_at(a, algorithm, &key, 0).await;
        assert!(first.allowed, "{algorithm}");
        assert_blocked(
            &escalating_at(a, algorithm, &key, 1).await,
            secs(60),
            &algorithm.to_string(),
        );
        let ttl_ms: i64 = redis::cmd("PTTL").arg(&key).query(&mut redis).unwrap();
        assert!(
            ttl_ms > (86_400 + 60) * 1000 - 5_000,
            "{algorithm}: {ttl_ms} ms"
        );
        assert!(
            escalating_at(b, algorithm, &key, 61_000).await.allowed,
            "{algorithm}"
        );
        assert_blocked(
            &escalating_at(b, algorithm, &key, 61_001).await,
            secs(600),
            &algorithm.to_string(),
        );
    }
}
