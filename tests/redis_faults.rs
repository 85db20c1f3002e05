//! How the Redis backend behaves when Redis misbehaves: a flushed script cache, a killed,
//! stalled or restarted server, connections killed mid-call, a server that is not there
//! yet, and a bad URL.

mod support;

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use redis_ratelimit::__private::{CallSite, SiteConfig};
use redis_ratelimit::{
    Algorithm, BackendError, BackendErrorKind, Breaker, LimitType, Limiter, RateLimitError, Rule,
};
use support::RedisServer;

/// Long enough for any answer on a loaded machine, short enough to wait for a few times.
const TIMEOUT: Duration = Duration::from_secs(1);
/// A call this long ignored its timeout: the timeout and as much again, an order of
/// magnitude more than a loaded machine delays an answer.
const HUNG: Duration = Duration::from_secs(2);

static ONE_PER_MINUTE: [Rule; 1] = [Rule::new(1, Duration::from_secs(60))];
static TEN_PER_MINUTE: [Rule; 1] = [Rule::new(10, Duration::from_secs(60))];

/// A guarded call site, as `#[rate_limiter(rules(rule(count = 1, time = 60)), limit_type = CUSTOM, ..)]`
/// expands to.
static SITE: CallSite = CallSite::new(SiteConfig {
    limit_type: LimitType::Custom,
    ..SiteConfig::new(&ONE_PER_MINUTE)
});

/// A limiter whose every check reaches the connection layer: the circuit breaker, which
/// would answer for it after a few failures, has tests of its own (tests/outage.rs).
fn limiter(server: &RedisServer, fail_open: bool) -> Limiter {
    Limiter::redis(&server.url())
        .unwrap()
        .breaker(Breaker::never())
        .fail_open(fail_open)
        .timeout(TIMEOUT)
}

/// One guarded call, timed.
async fn guarded(limiter: &Limiter, key: &'static str) -> (Result<(), RateLimitError>, Duration) {
    let start = Instant::now();
    let result = SITE
        .check(limiter, Cow::Borrowed(key), NonZeroU64::MIN, None)
        .answer()
        .await
        .map(drop);
    (result, start.elapsed())
}

fn assert_unavailable(err: &BackendError, server: &RedisServer) {
    assert_eq!(err.kind(), BackendErrorKind::Unavailable, "{err}");
    let message = err.to_string();
    let address = format!("127.0.0.1:{}", server.port());
    assert!(
        message.starts_with(&format!("cannot reach Redis at {address}")),
        "{message}"
    );
    assert!(message.contains("is it running?"), "{message}");
}

#[tokio::test]
async fn a_flushed_script_cache_is_reloaded_transparently() {
    let server = RedisServer::start();
    let limiter = limiter(&server, false);
    let mut conn = server.connection();
    for remaining in (0..10).rev() {
        if remaining % 3 == 0 {
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
        }
        let d = limiter.check("k", &TEN_PER_MINUTE).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, remaining));
    }
    assert!(!limiter.check("k", &TEN_PER_MINUTE).await.unwrap().allowed);
}

#[tokio::test]
async fn fail_open_lets_guarded_calls_through_while_redis_is_down() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server, true);
    assert!(guarded(&limiter, "open").await.0.is_ok());
    assert!(matches!(
        guarded(&limiter, "open").await.0,
        Err(RateLimitError::Limited { .. })
    ));

    server.kill();
    for _ in 0..20 {
        let (result, elapsed) = guarded(&limiter, "open").await;
        assert!(result.is_ok(), "{result:?}");
        assert!(elapsed < HUNG, "{elapsed:?}");
    }
    // The programmatic API still reports the failure.
    let err = limiter.check("open", &ONE_PER_MINUTE).await.unwrap_err();
    assert_unavailable(&err, &server);
}

#[tokio::test]
async fn fail_closed_refuses_guarded_calls_quickly_while_redis_is_down() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server, false);
    assert!(guarded(&limiter, "closed").await.0.is_ok());

    server.kill();
    for _ in 0..20 {
        let (result, elapsed) = guarded(&limiter, "closed").await;
        match result {
            Err(RateLimitError::Backend(err)) => assert_unavailable(&err, &server),
            other => panic!("expected a backend error, got {other:?}"),
        }
        assert!(elapsed < HUNG, "{elapsed:?}");
    }
}

#[tokio::test]
async fn concurrent_calls_to_a_dead_redis_all_fail_within_the_timeout() {
    let mut server = RedisServer::start();
    let limiter = support::leak(limiter(&server, false));
    limiter.check("k", &TEN_PER_MINUTE).await.unwrap();
    server.kill();
    let calls: Vec<_> = (0..200)
        .map(|_| tokio::spawn(async move { guarded(limiter, "k").await }))
        .collect();
    for call in calls {
        let (result, elapsed) = call.await.unwrap();
        assert!(
            matches!(result, Err(RateLimitError::Backend(_))),
            "{result:?}"
        );
        assert!(elapsed < HUNG, "{elapsed:?}");
    }
}

#[tokio::test]
async fn a_stalled_redis_times_out_and_later_answers_stay_in_order() {
    let server = RedisServer::start();
    let limiter = limiter(&server, false);
    let first = limiter.check("k", &TEN_PER_MINUTE).await.unwrap();
    assert_eq!(first.remaining, 9);

    server.freeze();
    let start = Instant::now();
    let err = limiter.check("k", &TEN_PER_MINUTE).await.unwrap_err();
    let elapsed = start.elapsed();
    assert_eq!(err.kind(), BackendErrorKind::Timeout, "{err}");
    assert!(elapsed >= TIMEOUT && elapsed < HUNG, "{elapsed:?}");

    server.thaw();
    // The timed-out call runs once Redis resumes, so it counts. (A call made at once could
    // overtake it on the runtime's other connection: wait until it has counted, as read on
    // a connection of the test's own.)
    support::eventually(
        "the timed-out call to count",
        Duration::from_secs(30),
        || async {
            match support::query::<u64>(server.port(), redis::cmd("ZCARD").arg("k")) {
                Ok(2) => Ok(()),
                other => Err(format!("ZCARD k: {other:?}")),
            }
        },
    )
    .await;
    // The next answer is this call's own, not the late answer to the one that timed out.
    let d = limiter.check("k", &TEN_PER_MINUTE).await.unwrap();
    assert_eq!(d.remaining, 7);
}

#[tokio::test]
async fn checks_work_again_after_a_restart_without_rebuilding_the_limiter() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server, false);
    assert!(limiter.check("k", &ONE_PER_MINUTE).await.unwrap().allowed);

    server.kill();
    let err = limiter.check("k", &ONE_PER_MINUTE).await.unwrap_err();
    assert_unavailable(&err, &server);

    server.restart();
    // The first check after the restart works; the restarted server is empty: the key
    // counts from zero.
    assert!(limiter.check("k", &ONE_PER_MINUTE).await.unwrap().allowed);

    // Restarted while idle: the first call finds the old connection broken and uses a new one.
    server.restart();
    let d = limiter.check("k", &ONE_PER_MINUTE).await.unwrap();
    assert!(d.allowed);
}

#[tokio::test]
async fn redis_down_at_first_use_fails_then_works_once_it_is_up() {
    let mut server = RedisServer::start();
    server.kill();
    let limiter = limiter(&server, false);
    for _ in 0..3 {
        let start = Instant::now();
        let err = limiter.check("k", &ONE_PER_MINUTE).await.unwrap_err();
        assert_unavailable(&err, &server);
        assert!(start.elapsed() < HUNG);
    }
    let (result, _) = guarded(&limiter, "k").await;
    assert!(
        matches!(result, Err(RateLimitError::Backend(_))),
        "{result:?}"
    );

    server.restart();
    assert!(limiter.check("probe", &TEN_PER_MINUTE).await.is_ok());
    assert!(guarded(&limiter, "k").await.0.is_ok());
}

#[test]
fn a_bad_url_is_a_clear_config_error() {
    let err = Limiter::redis("http://:hunter2@127.0.0.1:6379").unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("unsupported Redis URL scheme `http://`"),
        "{message}"
    );
    assert!(
        message.contains("redis://[[user]:password@]host[:port][/db]"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");

    let err = Limiter::redis("redis://:hunter2@127.0.0.1:6379/not-a-db").unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with("invalid Redis URL"), "{message}");
    assert!(message.contains("database"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");

    let err = Limiter::redis("localhost:6379").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid Redis URL (it has no scheme); expected redis://"),
        "{err}"
    );
}

/// A `static` or global limiter outlives the runtime that first used it (each
/// `#[tokio::test]` has its own): the connection made there dies with it.
#[test]
fn a_limiter_keeps_working_after_the_runtime_that_connected_it_is_gone() {
    let server = RedisServer::start();
    let limiter = limiter(&server, false);
    for round in 0..3u64 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let d = runtime
            .block_on(limiter.check("k", &TEN_PER_MINUTE))
            .unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert_eq!(d.remaining, 9 - round);
    }
}

/// Connections killed while many checks are in flight on them (`CLIENT KILL` from another
/// connection, again and again) never count a check twice: every check has a key of its
/// own, whose state tells how often it ran. A check that cannot be re-run harmlessly (the
/// fixed window) fails when its reply is lost; the sliding log's, which carries its own id,
/// is sent again and counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_on_connections_killed_mid_call_are_never_counted_twice() {
    let fixed = killed_mid_call(Algorithm::FixedWindow).await;
    assert!(
        fixed.failed > 0,
        "no fixed-window check was in flight when its connection was killed"
    );
    let log = killed_mid_call(Algorithm::SlidingLog).await;
    assert!(log.admitted > log.failed, "{log:?}");
}

#[derive(Debug)]
struct Killed {
    admitted: u64,
    failed: u64,
}

/// Checks with `algorithm` while connections are killed; asserts that no check was
/// counted twice, and that an admitted one was counted once.
async fn killed_mid_call(algorithm: Algorithm) -> Killed {
    const KILLS: usize = 30;
    const IN_FLIGHT: usize = 32;
    // Two, so that a check run twice shows (and is still admitted). A day, so that no
    // fixed window ends during the test.
    static TWO_PER_DAY: [Rule; 1] = [Rule::per_day(2)];

    let server = RedisServer::start();
    let limiter = support::leak(support::counting_limiter(&server.url()).breaker(Breaker::never()));
    limiter
        .check("warm-up", &TWO_PER_DAY)
        .algorithm(algorithm)
        .await
        .unwrap();

    let (killed, outcomes) = server
        .calls_while_killing(KILLS, IN_FLIGHT, move |n| async move {
            let key = format!("killed:{n}");
            let outcome = limiter.check(&key, &TWO_PER_DAY).algorithm(algorithm).await;
            Some((key, outcome))
        })
        .await;

    let (mut admitted, mut failed, mut failed_but_ran) = (0, 0, 0);
    for (key, outcome) in &outcomes {
        // What is left now tells how often the check ran.
        let left = support::remaining(limiter, algorithm, key, &TWO_PER_DAY).await;
        let ran = 2 - left;
        match outcome {
            Ok(d) => {
                assert!(d.allowed, "{key} was denied: it ran before");
                assert_eq!(ran, 1, "{key} was admitted and counted {ran} times");
                admitted += 1;
            }
            Err(err) => {
                support::assert_lost_reply(err);
                assert!(ran <= 1, "{key} failed and was counted {ran} times");
                failed += 1;
                failed_but_ran += ran;
            }
        }
    }
    eprintln!(
        "{algorithm:?}: {killed} connections killed; {admitted} checks admitted, {failed} \
         failed, of which {failed_but_ran} ran"
    );
    assert!(killed >= KILLS as u64, "{killed} connections killed");
    Killed { admitted, failed }
}
