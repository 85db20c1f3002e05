//! Separate OS processes sharing one Redis key share one budget: the limit holds across
//! processes, not per process.
//!
//! The parent test re-runs this test binary as child processes, each running only the
//! ignored `child_checks_the_shared_key` with its orders in environment variables, and adds
//! up what the children report on stdout.

mod support;

use std::time::Duration;

use redis_ratelimit::{Limiter, Rule};

const URL_ENV: &str = "RATELIMIT_CHILD_REDIS_URL";
const KEY_ENV: &str = "RATELIMIT_CHILD_KEY";
/// Milliseconds since the epoch at which every child starts checking, so they overlap.
const START_ENV: &str = "RATELIMIT_CHILD_START_MS";

const LIMIT: u64 = 100;
const RULES: [Rule; 1] = [Rule::new(LIMIT, Duration::from_secs(60))];
const CHECKS_PER_CHILD: usize = 150;
const CHILDREN: usize = 2;
const CHILD_TEST: &str = "child_checks_the_shared_key";

#[test]
fn processes_sharing_a_key_admit_exactly_the_limit_together() {
    let server = support::RedisServer::start();
    let start_at = support::epoch_ms() + 500;
    let children: Vec<_> = (0..CHILDREN)
        .map(|_| {
            support::spawn_child_test(
                CHILD_TEST,
                &[
                    (URL_ENV, server.url()),
                    (KEY_ENV, "rate_limit:global:shared".to_owned()),
                    (START_ENV, start_at.to_string()),
                ],
            )
        })
        .collect();

    let admitted: Vec<u64> = children
        .into_iter()
        .map(|child| support::child_report(child, "admitted=").parse().unwrap())
        .collect();
    assert_eq!(
        admitted.iter().sum::<u64>(),
        LIMIT,
        "admitted per process: {admitted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child of processes_sharing_a_key_admit_exactly_the_limit_together"]
async fn child_checks_the_shared_key() {
    let (Ok(url), Ok(key), Ok(start)) = (
        std::env::var(URL_ENV),
        std::env::var(KEY_ENV),
        std::env::var(START_ENV),
    ) else {
        panic!("{CHILD_TEST} only runs as a child of the test that starts it, which sets its environment");
    };
    // Generous: the point is counting across processes, on a machine busy starting them.
    let limiter = Limiter::redis(&url)
        .unwrap()
        .timeout(Duration::from_secs(2));
    limiter.check("warm-up", &RULES).await.unwrap();
    let start: u64 = start.parse().unwrap();
    tokio::time::sleep(Duration::from_millis(
        start.saturating_sub(support::epoch_ms()),
    ))
    .await;

    let limiter: &'static Limiter = Box::leak(Box::new(limiter));
    let key: &'static str = Box::leak(key.into_boxed_str());
    let checks: Vec<_> = (0..CHECKS_PER_CHILD)
        .map(|_| tokio::spawn(async move { limiter.check(key, &RULES).await }))
        .collect();
    let mut admitted = 0;
    for check in checks {
        if check.await.unwrap().expect("check").allowed {
            admitted += 1;
        }
    }
    println!("admitted={admitted}");
}
