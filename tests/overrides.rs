//! Rules overridden at run time: in process (`Limiter::override_rules`), and stored in
//! Redis under `{prefix}rules`, read by every instance within the documented delay (one
//! poll interval, 1 s ± 20 %, plus a round trip). Real servers only; the two-process test
//! re-runs this binary as child processes, as tests/processes.rs does.

mod support;

use std::time::{Duration, Instant};

use redis_ratelimit::context::{self, RequestContext};
use redis_ratelimit::{rate_limiter, Limiter, RateLimitError, Rule};
use support::RedisServer;

/// The documented delay (the longest poll interval) and room for a busy machine.
const PICKED_UP_WITHIN: Duration = Duration::from_millis(1_200 + 600);

#[rate_limiter(rules("2/minute"), limit_type = CUSTOM, by = who, limiter = limiter, name = "ops.send")]
async fn send(limiter: &'static Limiter, who: &str) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(
    rules("3/minute"),
    prevent_duplicate = true,
    limit_type = CUSTOM,
    by = who,
    limiter = limiter,
    name = "ops.submit"
)]
async fn submit(limiter: &'static Limiter, who: &str) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("1/minute"), limit_type = IP, limiter = limiter, name = "ops.by_ip")]
async fn by_ip(limiter: &'static Limiter) -> Result<(), RateLimitError> {
    Ok(())
}

/// How many of `calls` calls to `send` for `who` pass.
async fn admitted(limiter: &'static Limiter, who: &str, calls: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..calls {
        admitted += usize::from(send(limiter, who).await.is_ok());
    }
    admitted
}

fn leak(limiter: Limiter) -> &'static Limiter {
    Box::leak(Box::new(limiter))
}

/// Waits until `path`'s rules in force are `expected`, at most `limit`; how long it took.
async fn until_in_force(
    limiter: &Limiter,
    path: &str,
    expected: &[Rule],
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    while limiter.rules_in_force(path) != expected {
        assert!(
            start.elapsed() < limit,
            "`{path}` still has {:?} after {limit:?}, expected {expected:?}",
            limiter.rules_in_force(path)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

fn hset(server: &RedisServer, field: &str, value: &str) {
    redis::cmd("HSET")
        .arg("rate_limit:rules")
        .arg(field)
        .arg(value)
        .exec(&mut server.connection())
        .unwrap();
}

fn hdel(server: &RedisServer, field: &str) {
    redis::cmd("HDEL")
        .arg("rate_limit:rules")
        .arg(field)
        .exec(&mut server.connection())
        .unwrap();
}

#[tokio::test]
async fn in_process_overrides_replace_the_compiled_rules_until_cleared() {
    let limiter = leak(Limiter::memory());
    assert_eq!(admitted(limiter, "a", 5).await, 2);
    assert_eq!(limiter.rules_in_force("ops.send"), [Rule::per_minute(2)]);
    limiter.override_rules("ops.send", &[Rule::per_minute(4)]);
    assert_eq!(limiter.rules_in_force("ops.send"), [Rule::per_minute(4)]);
    assert_eq!(admitted(limiter, "b", 6).await, 4);
    limiter.clear_override("ops.send");
    assert_eq!(admitted(limiter, "c", 5).await, 2);
}

#[tokio::test]
async fn the_duplicate_rule_stays_unless_overridden_explicitly() {
    let limiter = leak(Limiter::memory());
    let duplicate = Rule::new(1, Duration::from_secs(5));
    submit(limiter, "a").await.unwrap();
    assert_eq!(
        limiter.rules_in_force("ops.submit"),
        [Rule::per_minute(3), duplicate]
    );
    limiter.override_rules("ops.submit", &[Rule::per_minute(10)]);
    assert_eq!(
        limiter.rules_in_force("ops.submit"),
        [Rule::per_minute(10), duplicate]
    );
    // The duplicate rule still refuses a second call within 5 s.
    submit(limiter, "b").await.unwrap();
    assert!(submit(limiter, "b").await.is_err());
    // Removed explicitly: calls in a row pass, up to the new count.
    limiter.override_rules("ops.submit#duplicate", &[]);
    assert_eq!(limiter.rules_in_force("ops.submit"), [Rule::per_minute(10)]);
    for _ in 0..10 {
        submit(limiter, "c").await.unwrap();
    }
    assert!(submit(limiter, "c").await.is_err());
}

#[tokio::test]
async fn an_override_stored_in_redis_is_picked_up_within_the_delay_and_removed() {
    let server = RedisServer::start();
    let limiter = leak(Limiter::redis(&server.url()).unwrap());
    // The first guarded check starts the reads.
    assert_eq!(admitted(limiter, "a", 3).await, 2);

    hset(&server, "ops.send", "5/minute, 20/hour");
    let took = until_in_force(
        limiter,
        "ops.send",
        &[Rule::per_minute(5), Rule::per_hour(20)],
        PICKED_UP_WITHIN,
    )
    .await;
    eprintln!("override picked up after {took:?}");
    assert_eq!(admitted(limiter, "b", 7).await, 5);

    hdel(&server, "ops.send");
    until_in_force(
        limiter,
        "ops.send",
        &[Rule::per_minute(2)],
        PICKED_UP_WITHIN,
    )
    .await;
    assert_eq!(admitted(limiter, "c", 3).await, 2);
}

#[tokio::test]
async fn a_malformed_stored_value_is_ignored_with_one_warning() {
    let (logs, _subscriber) = support::capture_logs();
    let server = RedisServer::start();
    let limiter = leak(Limiter::redis(&server.url()).unwrap());
    admitted(limiter, "a", 1).await;
    hset(&server, "ops.send", "5 per fortnight");
    // Let at least two reads see it.
    tokio::time::sleep(PICKED_UP_WITHIN + Duration::from_millis(1_200)).await;
    assert_eq!(limiter.rules_in_force("ops.send"), [Rule::per_minute(2)]);
    assert_eq!(admitted(limiter, "b", 3).await, 2);
    let text = logs.text();
    assert_eq!(
        text.matches("ignoring a malformed rate limit rule override")
            .count(),
        1,
        "{text}"
    );
    assert!(text.contains("5 per fortnight"), "{text}");
    // A fixed value is read as usual.
    hset(&server, "ops.send", "6/minute");
    until_in_force(
        limiter,
        "ops.send",
        &[Rule::per_minute(6)],
        PICKED_UP_WITHIN,
    )
    .await;
}

#[tokio::test]
async fn redis_down_never_blocks_a_check_and_the_last_rules_read_stay() {
    let mut server = RedisServer::start();
    let limiter = leak(
        Limiter::redis(&server.url())
            .unwrap()
            .fallback(Limiter::memory()),
    );
    admitted(limiter, "a", 1).await;
    hset(&server, "ops.send", "4/minute");
    until_in_force(
        limiter,
        "ops.send",
        &[Rule::per_minute(4)],
        PICKED_UP_WITHIN,
    )
    .await;
    server.kill();
    // Reads fail from now on; checks go to the fallback, with the override, at once.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(limiter.rules_in_force("ops.send"), [Rule::per_minute(4)]);
    let start = Instant::now();
    assert_eq!(admitted(limiter, "b", 6).await, 4);
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn exempt_requests_skip_the_check_even_without_an_identity() {
    let limiter = leak(Limiter::memory());
    let exempt = RequestContext::new().with_exempt(true);
    for _ in 0..3 {
        context::scope(exempt.clone(), by_ip(limiter))
            .await
            .unwrap();
    }
    let ip = RequestContext::new().with_ip([192, 0, 2, 1].into());
    context::scope(ip.clone(), by_ip(limiter)).await.unwrap();
    assert!(context::scope(ip, by_ip(limiter)).await.is_err());
    // Exempting a request does not exempt the caller's next ones.
    let exempt_ip = RequestContext::new()
        .with_ip([192, 0, 2, 1].into())
        .with_exempt(true);
    context::scope(exempt_ip, by_ip(limiter)).await.unwrap();
    assert!(matches!(
        by_ip(limiter).await,
        Err(RateLimitError::MissingIdentity { .. })
    ));
}

const URL_ENV: &str = "RATELIMIT_CHILD_REDIS_URL";
/// Milliseconds since the epoch at which the parent writes the override.
const SET_AT_ENV: &str = "RATELIMIT_CHILD_SET_AT_MS";
const CHILD_TEST: &str = "child_picks_up_the_override";
const CHILDREN: usize = 2;

#[test]
fn two_processes_both_pick_up_one_stored_override() {
    let server = RedisServer::start();
    // Late enough for both children to start and make their first check.
    let set_at = support::epoch_ms() + 1_500;
    let children: Vec<_> = (0..CHILDREN)
        .map(|_| {
            support::spawn_child_test(
                CHILD_TEST,
                &[(URL_ENV, server.url()), (SET_AT_ENV, set_at.to_string())],
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(
        set_at.saturating_sub(support::epoch_ms()),
    ));
    hset(&server, "ops.send", "5/minute");

    for child in children {
        let report = support::child_report(child, "picked_up_ms=");
        let (picked_up_ms, admitted) = report.split_once(" admitted=").unwrap();
        let picked_up_ms: u64 = picked_up_ms.parse().unwrap();
        assert!(
            picked_up_ms <= PICKED_UP_WITHIN.as_millis() as u64,
            "picked up after {picked_up_ms} ms"
        );
        assert_eq!(admitted, "5", "{report}");
    }
}

#[tokio::test]
#[ignore = "child of two_processes_both_pick_up_one_stored_override"]
async fn child_picks_up_the_override() {
    let (Ok(url), Ok(set_at)) = (std::env::var(URL_ENV), std::env::var(SET_AT_ENV)) else {
        panic!("{CHILD_TEST} only runs as a child of the test that starts it, which sets its environment");
    };
    let set_at: u64 = set_at.parse().unwrap();
    let limiter = leak(
        Limiter::redis(&url)
            .unwrap()
            .timeout(Duration::from_secs(2)),
    );
    // Its own identity, so the two children's counts do not mix.
    let me = format!("child-{}", std::process::id());
    assert_eq!(admitted(limiter, &me, 1).await, 1);
    assert_eq!(limiter.rules_in_force("ops.send"), [Rule::per_minute(2)]);
    while limiter.rules_in_force("ops.send") != [Rule::per_minute(5)] {
        assert!(support::epoch_ms() < set_at + 5_000, "never picked up");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let picked_up_ms = support::epoch_ms().saturating_sub(set_at);
    // One was counted under the compiled rules already: 4 more pass, of 5.
    let admitted = 1 + admitted(limiter, &me, 6).await;
    println!("picked_up_ms={picked_up_ms} admitted={admitted}");
}
