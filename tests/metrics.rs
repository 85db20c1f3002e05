//! Feature `metrics`: `ratelimit_checks_total` counts every check once, by site, algorithm
//! and outcome, and `ratelimit_check_duration_seconds` times it by backend. Read through
//! `metrics-util`'s `DebuggingRecorder`, installed once for this test binary; the tests take
//! turns (each snapshot drains what the previous one did not see).

mod support;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redis_ratelimit::context::{self, RequestContext};
use redis_ratelimit::{rate_limiter, Algorithm, Breaker, Limiter, RateLimitError, Rule};
use support::RedisServer;

static SNAPSHOTTER: LazyLock<Snapshotter> = LazyLock::new(|| {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    snapshotter
});

/// One test at a time, starting from a drained recorder.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = TURN.lock().await;
    SNAPSHOTTER.snapshot();
    guard
}

/// What was recorded since the last snapshot: counters as `site/algorithm/outcome -> n`,
/// histograms as `backend -> number of samples`.
#[derive(Debug, Default)]
struct Seen {
    checks: BTreeMap<String, u64>,
    durations: BTreeMap<String, usize>,
}

fn seen() -> Seen {
    let mut seen = Seen::default();
    for (key, _, _, value) in SNAPSHOTTER.snapshot().into_vec() {
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map_or_else(String::new, |l| l.value().to_owned())
        };
        match (key.name(), value) {
            ("ratelimit_checks_total", DebugValue::Counter(n)) if n > 0 => {
                let labels: Vec<&str> = key.labels().map(|l| l.key()).collect();
                assert_eq!(labels, ["site", "algorithm", "outcome"]);
                let name = format!(
                    "{}/{}/{}",
                    label("site"),
                    label("algorithm"),
                    label("outcome")
                );
                *seen.checks.entry(name).or_default() += n;
            }
            ("ratelimit_check_duration_seconds", DebugValue::Histogram(samples))
                if !samples.is_empty() =>
            {
                assert!(samples
                    .iter()
                    .all(|s| s.into_inner() >= 0.0 && s.into_inner() < 5.0));
                *seen.durations.entry(label("backend")).or_default() += samples.len();
            }
            _ => {}
        }
    }
    seen
}

/// Requires what was recorded since the last snapshot to be exactly `checks` (counters by
/// `site/algorithm/outcome`) and `durations` (samples by backend).
fn assert_seen<const C: usize, const D: usize>(
    checks: [(&str, u64); C],
    durations: [(&str, usize); D],
) {
    let seen = seen();
    let checks: BTreeMap<String, u64> = checks.iter().map(|&(k, n)| (k.to_owned(), n)).collect();
    let durations: BTreeMap<String, usize> =
        durations.iter().map(|&(k, n)| (k.to_owned(), n)).collect();
    assert_eq!(seen.checks, checks, "checks");
    assert_eq!(seen.durations, durations, "durations");
}

static MEMORY: LazyLock<Limiter> = LazyLock::new(Limiter::memory);

#[rate_limiter(rules("2/minute"), limit_type = GLOBAL, limiter = MEMORY, name = "metrics.send")]
async fn send() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("2/minute"), limit_type = GLOBAL, limiter = MEMORY, algorithm = TOKEN_BUCKET)]
async fn unnamed() -> Result<(), RateLimitError> {
    Ok(())
}

custom_sites! {
    on_redis(rules("2/minute"), name = "metrics.redis");
}

/// A limiter on `server` that reads no rule overrides (reads are not checks).
fn redis_limiter(server: &RedisServer) -> Limiter {
    support::counting_limiter(&server.url()).rules_poll(None)
}

#[tokio::test]
async fn guarded_checks_count_per_site_and_outcome_and_direct_checks_as_programmatic() {
    let _turn = turn().await;
    for _ in 0..3 {
        let _ = send().await;
    }
    unnamed().await.unwrap();
    const ONE: [Rule; 1] = [Rule::per_minute(1)];
    assert!(MEMORY.check("direct", &ONE).await.unwrap().allowed);
    assert!(!MEMORY.check("direct", &ONE).await.unwrap().allowed);
    assert!(!MEMORY.peek("direct", &ONE).await.unwrap().allowed);
    assert_seen(
        [
            ("metrics.send/sliding_log/allowed", 2),
            ("metrics.send/sliding_log/limited", 1),
            ("metrics::unnamed/token_bucket/allowed", 1),
            ("programmatic/sliding_log/allowed", 1),
            ("programmatic/sliding_log/limited", 2),
        ],
        [("memory", 7)],
    );
}

#[rate_limiter(rules("2/minute"), limit_type = GLOBAL, limiter = MEMORY, name = "programmatic")]
async fn named_programmatic() -> Result<(), RateLimitError> {
    Ok(())
}

/// A guarded site may be named `programmatic` (a name like any other): its checks are a
/// site's, labelled apart from the programmatic checks'.
#[tokio::test]
async fn a_site_named_programmatic_is_labelled_apart_from_programmatic_checks() {
    let _turn = turn().await;
    for _ in 0..3 {
        let _ = named_programmatic().await;
    }
    const ONE: [Rule; 1] = [Rule::per_minute(1)];
    assert!(MEMORY.check("apart", &ONE).await.unwrap().allowed);
    assert_seen(
        [
            ("programmatic (site)/sliding_log/allowed", 2),
            ("programmatic (site)/sliding_log/limited", 1),
            ("programmatic/sliding_log/allowed", 1),
        ],
        [("memory", 4)],
    );
}

#[tokio::test]
async fn exempt_requests_are_not_checked_and_count_nothing() {
    let _turn = turn().await;
    let exempt = RequestContext::new().with_exempt(true);
    for _ in 0..5 {
        context::scope(exempt.clone(), send()).await.unwrap();
    }
    assert_seen([], []);
}

#[tokio::test]
async fn checks_on_redis_are_timed_as_redis() {
    let _turn = turn().await;
    let server = RedisServer::start();
    let limiter = support::leak(redis_limiter(&server));
    for _ in 0..3 {
        let _ = on_redis(limiter, "tom").await;
    }
    let d = limiter
        .check("direct", &[Rule::per_minute(5)])
        .algorithm(Algorithm::FixedWindow)
        .await
        .unwrap();
    assert_eq!(d.remaining, 4);
    assert_seen(
        [
            ("metrics.redis/sliding_log/allowed", 2),
            ("metrics.redis/sliding_log/limited", 1),
            ("programmatic/fixed_window/allowed", 1),
        ],
        [("redis", 4)],
    );
}

#[tokio::test]
async fn a_dead_redis_counts_fallback_answers_as_fallback_and_timed_as_memory() {
    let _turn = turn().await;
    let mut server = RedisServer::start();
    let limiter = support::leak(redis_limiter(&server).fallback(Limiter::memory()));
    on_redis(limiter, "ann").await.unwrap();
    server.kill();
    // Two more admitted by the fallback, which counts alone, then one denied by it.
    on_redis(limiter, "ann").await.unwrap();
    on_redis(limiter, "ann").await.unwrap();
    assert!(on_redis(limiter, "ann").await.is_err());
    assert!(
        limiter
            .check("direct", &[Rule::per_minute(5)])
            .await
            .unwrap()
            .allowed
    );
    assert_seen(
        [
            ("metrics.redis/sliding_log/allowed", 1),
            ("metrics.redis/sliding_log/fallback", 3),
            ("programmatic/sliding_log/fallback", 1),
        ],
        [("memory", 4), ("redis", 1)],
    );
}

#[tokio::test]
async fn a_dead_redis_fail_open_counts_errors_and_lets_calls_through() {
    let _turn = turn().await;
    let mut server = RedisServer::start();
    let limiter = support::leak(
        redis_limiter(&server)
            .fail_open(true)
            .breaker(Breaker::DEFAULT),
    );
    server.kill();
    for _ in 0..5 {
        on_redis(limiter, "bob").await.unwrap();
    }
    assert!(limiter
        .check("direct", &[Rule::per_minute(5)])
        .await
        .is_err());
    assert_seen(
        [
            ("metrics.redis/sliding_log/error", 5),
            ("programmatic/sliding_log/error", 1),
        ],
        [("redis", 6)],
    );
}

/// A counter of a snapshot: its name, its labels (key, value) and its count.
type Counter = (String, Vec<(String, String)>, u64);

/// Counters named `name` in one snapshot, by `site/rule`.
fn by_site_and_rule(snapshot: &[Counter], name: &str) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    for (metric, labels, n) in snapshot {
        if metric == name && *n > 0 {
            let keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, ["site", "rule"], "{name}");
            *found
                .entry(format!("{}/{}", labels[0].1, labels[1].1))
                .or_default() += n;
        }
    }
    found
}

/// Every counter of one snapshot, with its labels.
fn counters() -> Vec<Counter> {
    SNAPSHOTTER
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) => {
                let key = key.key();
                let labels = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                Some((key.name().to_owned(), labels, n))
            }
            _ => None,
        })
        .collect()
}

custom_sites! {
    two_rules(rules("3/minute", "5/hour"), name = "metrics.rules", warn_at = 60);
}

#[tokio::test]
async fn each_refusal_counts_its_rule_and_each_warning_its_rule() {
    let _turn = turn().await;
    let server = RedisServer::start();
    let deny_cached = support::leak(redis_limiter(&server).deny_cache(true));
    for limiter in [&*MEMORY, deny_cached] {
        for _ in 0..5 {
            let _ = two_rules(limiter, "ann").await;
        }
    }
    // Ann's 4th and 5th calls: refused by 3 a minute (the second of them, on Redis, by the
    // deny cache). 60 % of 3 crossed on the 2nd call, of 5 on the 3rd.
    let snapshot = counters();
    assert_eq!(
        by_site_and_rule(&snapshot, "ratelimit_limited_total"),
        BTreeMap::from([("metrics.rules/3 per 60s".to_owned(), 4)])
    );
    assert_eq!(
        by_site_and_rule(&snapshot, "ratelimit_warnings_total"),
        BTreeMap::from([
            ("metrics.rules/3 per 60s".to_owned(), 2),
            ("metrics.rules/5 per 3600s".to_owned(), 2),
        ])
    );
}

#[tokio::test]
async fn answers_from_an_allowance_are_timed_as_local_and_its_round_trips_counted() {
    let _turn = turn().await;
    let server = RedisServer::start();
    let limiter = redis_limiter(&server).allowance(std::time::Duration::from_secs(5));
    const HOT: [Rule; 1] = [Rule::per_hour(100_000)];
    for _ in 0..20 {
        assert!(limiter.check("hot", &HOT).await.unwrap().allowed);
    }
    let round_trips = limiter.allowance_draws();
    let (mut draws, mut timed) = (0, BTreeMap::<String, usize>::new());
    for (key, _, _, value) in SNAPSHOTTER.snapshot().into_vec() {
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
        };
        match (key.name(), value) {
            ("ratelimit_allowance_draws_total", DebugValue::Counter(n)) => {
                assert_eq!(label("site").as_deref(), Some("programmatic"));
                draws += n;
            }
            ("ratelimit_check_duration_seconds", DebugValue::Histogram(samples)) => {
                *timed.entry(label("backend").unwrap()).or_default() += samples.len();
            }
            _ => {}
        }
    }
    // The key's first two checks alone (cold), the one that tells its room, then a draw
    // or two; every other check answered in process.
    assert_eq!(draws, round_trips);
    assert!(round_trips <= 5, "{round_trips} round trips for 20 checks");
    let round_trips = round_trips as usize;
    assert_eq!(
        timed,
        BTreeMap::from([
            ("local".to_owned(), 20 - round_trips),
            ("redis".to_owned(), round_trips)
        ])
    );
}
