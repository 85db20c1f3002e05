//! Servers whose scripts may not call `TIME` (some managed services refuse it; here
//! `rename-command TIME ""`, or an ACL without `time`): checks still count exactly on every
//! algorithm, on one server and on a Redis Cluster, with this process's clock and one
//! warning. A server that refuses the scripts themselves is reported as misconfigured.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_ratelimit::{Algorithm, BackendErrorKind, Calendar, Limiter, Rule};
use support::cluster::RedisCluster;
use support::{RedisServer, Topology as _};

const THREE_PER_MINUTE: [Rule; 1] = [Rule::per_minute(3)];

/// How many of `calls` checks of `key` pass with `algorithm`.
async fn admitted(limiter: &Limiter, key: &str, algorithm: Algorithm, calls: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..calls {
        let decision = limiter
            .check(key, &THREE_PER_MINUTE)
            .algorithm(algorithm)
            .await
            .unwrap_or_else(|err| panic!("{algorithm:?}: {err}"));
        admitted += usize::from(decision.allowed);
    }
    admitted
}

#[tokio::test(flavor = "current_thread")]
async fn every_algorithm_counts_exactly_with_the_client_clock_and_warns_once() {
    let server = RedisServer::start_with(&["--rename-command", "TIME", ""]);
    let (logs, _guard) = support::capture_logs();
    let limiter = support::counting_limiter(&server.url());
    for algorithm in Algorithm::ALL {
        let key = format!("time-refused:{algorithm:?}");
        assert_eq!(
            admitted(&limiter, &key, algorithm, 5).await,
            3,
            "{algorithm:?}"
        );
        let peek = limiter
            .peek(&key, &THREE_PER_MINUTE)
            .algorithm(algorithm)
            .await
            .unwrap();
        assert_eq!((peek.allowed, peek.remaining), (false, 0), "{algorithm:?}");
    }
    let text = logs.text();
    assert_eq!(text.matches("refuses TIME in scripts").count(), 1, "{text}");
}

/// A calendar quota on a server refusing `TIME`: counted in this process's day, its
/// refusal waiting until this process's midnight UTC.
#[tokio::test(flavor = "current_thread")]
async fn a_calendar_quota_counts_in_the_client_clock_s_day() {
    let server = RedisServer::start_with(&["--rename-command", "TIME", ""]);
    let limiter = support::counting_limiter(&server.url());
    let rules = [Rule::per_calendar(2, Calendar::Day)];
    for algorithm in Algorithm::ALL {
        let key = format!("time-refused:calendar:{algorithm:?}");
        for _ in 0..2 {
            let check = limiter.check(&key, &rules).algorithm(algorithm);
            assert!(check.await.unwrap().allowed, "{algorithm:?}");
        }
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let refused = limiter
            .check(&key, &rules)
            .algorithm(algorithm)
            .await
            .unwrap();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let retry = refused.retry_after.expect("tomorrow");
        // Until midnight from the time the check read this process's clock, between the
        // two readings (to the µs it counts in).
        let midnight = |t: Duration| Duration::from_secs((t.as_secs() / 86_400 + 1) * 86_400);
        assert!(!refused.allowed, "{algorithm:?}");
        if midnight(before) == midnight(after) {
            let earliest = midnight(after) - after;
            let latest = midnight(before) - before + Duration::from_micros(1);
            assert!(
                (earliest..=latest).contains(&retry),
                "{algorithm:?}: {retry:?}"
            );
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_cluster_whose_acl_refuses_time_counts_exactly_on_every_master() {
    let cluster = RedisCluster::start();
    for port in cluster.ports() {
        let mut deny = redis::cmd("ACL");
        deny.arg("SETUSER").arg("default").arg("-time");
        support::query::<()>(port, &deny).unwrap();
    }
    let limiter = support::counting_limiter(&cluster.url());
    // Keys on every master: many keys spread over the slots.
    for i in 0..12 {
        let key = format!("time-refused:{i}");
        assert_eq!(
            admitted(&limiter, &key, Algorithm::SlidingLog, 4).await,
            3,
            "{key}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_that_refuses_scripts_is_misconfigured_and_says_what_to_allow() {
    let server = RedisServer::start();
    let mut deny = redis::cmd("ACL");
    deny.arg("SETUSER")
        .arg("default")
        .arg("-evalsha")
        .arg("-eval");
    support::query::<()>(server.port(), &deny).unwrap();
    let limiter = support::counting_limiter(&server.url());
    let err = limiter
        .check("scripts-refused", &THREE_PER_MINUTE)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Misconfigured, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("refuses Lua scripts") && text.contains("+@scripting"),
        "{text}"
    );
}
