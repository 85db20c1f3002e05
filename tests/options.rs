//! A limiter's options that do nothing on its backend are not silently dropped: each is
//! named in one `WARN`, at the limiter's first check (logging is usually set up by then,
//! whenever the limiter was built), and never again. Options that apply say nothing.

mod support;

use std::time::Duration;

use redis_ratelimit::{Breaker, Limiter, Rule};
use support::RedisServer;

const TEN_PER_MINUTE: [Rule; 1] = [Rule::per_minute(10)];

/// How many lines of `logs` say that `option` has no effect.
fn warnings_of(logs: &support::Logs, option: &str) -> usize {
    let said = format!("Limiter::{option} has no effect");
    logs.text()
        .lines()
        .filter(|line| line.contains("WARN") && line.contains(&said))
        .count()
}

#[tokio::test]
async fn options_of_redis_on_the_embedded_backend_are_warned_of_once_at_the_first_check() {
    let (logs, _subscriber) = support::capture_logs();
    let limiter = Limiter::memory()
        .timeout(Duration::from_millis(50))
        .breaker(Breaker::new(3, Duration::from_secs(1)))
        .rules_poll(Some(Duration::from_secs(5)))
        .max_keys(1_000);
    assert_eq!(logs.text(), "", "building the limiter logged");

    for _ in 0..3 {
        assert!(limiter.check("k", &TEN_PER_MINUTE).await.unwrap().allowed);
    }
    for option in ["timeout", "breaker", "rules_poll"] {
        assert_eq!(warnings_of(&logs, option), 1, "{option}: {}", logs.text());
    }
    assert_eq!(warnings_of(&logs, "max_keys"), 0, "{}", logs.text());
    assert!(
        logs.text().contains("the embedded backend answers at once"),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn options_of_the_embedded_backend_on_redis_are_warned_of_once_at_the_first_check() {
    let server = RedisServer::start();
    let (logs, _subscriber) = support::capture_logs();
    let limiter = support::counting_limiter(&server.url())
        .max_keys(1_000)
        .state_file(std::env::temp_dir().join("ratelimit-options-never-written.state"));
    assert_eq!(logs.text(), "", "building the limiter logged");

    // A list is a first check too.
    let list = limiter
        .check_all([limiter.check("a", &TEN_PER_MINUTE)])
        .await
        .unwrap();
    assert!(list[0].allowed);
    assert!(limiter.check("a", &TEN_PER_MINUTE).await.unwrap().allowed);
    for option in ["max_keys", "state_file"] {
        assert_eq!(warnings_of(&logs, option), 1, "{option}: {}", logs.text());
    }
    assert_eq!(warnings_of(&logs, "timeout"), 0, "{}", logs.text());
}

#[tokio::test]
async fn options_that_apply_say_nothing() {
    let server = RedisServer::start();
    let (logs, _subscriber) = support::capture_logs();
    let on_redis = support::counting_limiter(&server.url())
        .breaker(Breaker::DEFAULT)
        .rules_poll(None)
        .fallback(Limiter::memory().max_keys(1_000));
    // `rules_poll(None)` on the embedded backend asks for what it does: no warning.
    let in_memory = Limiter::memory().max_keys(1_000).rules_poll(None);
    assert!(on_redis.check("k", &TEN_PER_MINUTE).await.unwrap().allowed);
    assert!(in_memory.check("k", &TEN_PER_MINUTE).await.unwrap().allowed);
    assert!(!logs.text().contains("has no effect"), "{}", logs.text());
}
