//! Separate OS processes sharing one Redis key share one budget: the limit holds across
//! processes, not per process.
//!
//! The parent test re-runs this test binary as child processes, each running only the
//! ignored `child_checks_the_shared_key` with its orders in environment variables. Each
//! child says `ready` once connected; the parent then tells them all to `go`, so their
//! checks overlap, and adds up what they report.

mod support;

use std::time::Duration;

use redis_ratelimit::Rule;
use support::ChildTest;

const URL_ENV: &str = support::CHILD_URL_ENV;
const KEY_ENV: &str = "RATELIMIT_CHILD_KEY";

const LIMIT: u64 = 100;
const RULES: [Rule; 1] = [Rule::new(LIMIT, Duration::from_secs(60))];
const CHECKS_PER_CHILD: usize = 150;
const CHILDREN: usize = 2;
const CHILD_TEST: &str = "child_checks_the_shared_key";

#[test]
fn processes_sharing_a_key_admit_exactly_the_limit_together() {
    let server = support::RedisServer::start();
    let mut children: Vec<ChildTest> = (0..CHILDREN)
        .map(|_| {
            let envs = [
                (URL_ENV, server.url()),
                (KEY_ENV, "rate_limit:global:shared".to_owned()),
            ];
            ChildTest::spawn(&[CHILD_TEST, "--exact"], &envs)
        })
        .collect();
    for child in &mut children {
        child.wait_for("ready");
    }
    for child in &mut children {
        child.send("go");
    }

    let admitted: Vec<u64> = children
        .into_iter()
        .map(|child| child.finish("admitted=").parse().unwrap())
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
    let key = support::from_parent(KEY_ENV);
    let limiter = support::leak(support::counting_limiter(&support::from_parent(URL_ENV)));
    limiter.check("warm-up", &RULES).await.unwrap();
    support::tell_parent_then_await("ready", "go").await;

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
