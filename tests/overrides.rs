//! Rules overridden at run time: in process (`Limiter::override_rules`), and stored in
//! Redis under `{prefix}rules`, read by every instance within the documented delay (one
//! poll interval, 1 s ± 20 %). That a change is picked up by the first read after it is
//! shown by counting the reads (`HGETALL`) the server runs, not by timing them. Real servers
//! only; the two-process test re-runs this binary as child processes, as tests/processes.rs
//! does.

mod support;

use std::time::Duration;

use redis_ratelimit::context::{self, RequestContext};
use redis_ratelimit::{rate_limiter, Limiter, RateLimitError, Rule};
use support::{leak, ChildTest, RedisServer};

/// How long an override may take to arrive before the test gives up: an order of magnitude
/// more than the documented delay, for a busy machine. The delay itself is checked by
/// counting reads.
const GIVE_UP_AFTER: Duration = Duration::from_secs(15);

custom_sites! {
    send(rules("2/minute"), name = "ops.send");
    submit(rules("3/minute"), prevent_duplicate = true, name = "ops.submit");
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

/// How many times the server has sent a whole hash: the limiters' reads of the overrides
/// (nothing else in these tests reads one).
fn reads(server: &RedisServer) -> u64 {
    support::command_calls(&mut server.connection(), "hgetall")
}

/// Stores `value` as the override of `ops.send` (`None`: removes it), then waits until its
/// rules in force are `expected`, failing if they are not once a second read has run since
/// the write: the poller reads again only after it has applied the last answer, so by then
/// the first read after the write has been applied.
async fn store_and_expect(
    server: &RedisServer,
    limiter: &Limiter,
    value: Option<&str>,
    expected: &[Rule],
) {
    let path = "ops.send";
    store(server, value);
    let after_write = reads(server);
    support::eventually(
        &format!("`{path}` to have {expected:?}"),
        GIVE_UP_AFTER,
        || async move {
            let reads = reads(server) - after_write;
            let in_force = limiter.rules_in_force(path);
            if in_force == expected {
                return Ok(());
            }
            assert!(
                reads < 2,
                "`{path}` still has {in_force:?} after {reads} reads since the write"
            );
            Err(format!("{in_force:?} after {reads} reads"))
        },
    )
    .await;
}

/// Stores `value` as the override of `ops.send` (`None`: removes it).
fn store(server: &RedisServer, value: Option<&str>) {
    let mut command = redis::cmd(if value.is_some() { "HSET" } else { "HDEL" });
    command.arg("rate_limit:rules").arg("ops.send").arg(value);
    command.exec(&mut server.connection()).unwrap();
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
async fn an_override_stored_in_redis_is_picked_up_by_the_next_read_and_removed() {
    let server = RedisServer::start();
    let limiter = leak(support::counting_limiter(&server.url()));
    // The first guarded check starts the reads.
    assert_eq!(admitted(limiter, "a", 3).await, 2);

    let both = [Rule::per_minute(5), Rule::per_hour(20)];
    store_and_expect(&server, limiter, Some("5/minute, 20/hour"), &both).await;
    assert_eq!(admitted(limiter, "b", 7).await, 5);

    let compiled = [Rule::per_minute(2)];
    store_and_expect(&server, limiter, None, &compiled).await;
    assert_eq!(admitted(limiter, "c", 3).await, 2);
}

#[tokio::test]
async fn a_malformed_stored_value_is_ignored_with_one_warning() {
    let (logs, _subscriber) = support::capture_logs();
    let server = RedisServer::start();
    let limiter = leak(support::counting_limiter(&server.url()));
    admitted(limiter, "a", 1).await;
    store(&server, Some("5 per fortnight"));
    // Two reads applied since the write: a third has run.
    let after_write = reads(&server);
    support::eventually("three reads after the write", GIVE_UP_AFTER, || async {
        match reads(&server) - after_write {
            3.. => Ok(()),
            reads => Err(format!("{reads} reads")),
        }
    })
    .await;
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
    store_and_expect(&server, limiter, Some("6/minute"), &[Rule::per_minute(6)]).await;
}

#[tokio::test]
async fn redis_down_keeps_the_last_rules_read_in_force() {
    let (logs, _subscriber) = support::capture_logs();
    let mut server = RedisServer::start();
    let limiter = leak(support::counting_limiter(&server.url()).fallback(Limiter::memory()));
    admitted(limiter, "a", 1).await;
    store_and_expect(&server, limiter, Some("4/minute"), &[Rule::per_minute(4)]).await;
    server.kill();
    support::eventually("a read of the overrides to fail", GIVE_UP_AFTER, || async {
        match logs.text() {
            text if text.contains("cannot read rate limit rule overrides") => Ok(()),
            text => Err(text),
        }
    })
    .await;
    // Checks go to the fallback, with the override.
    assert_eq!(limiter.rules_in_force("ops.send"), [Rule::per_minute(4)]);
    assert_eq!(admitted(limiter, "b", 6).await, 4);
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

const URL_ENV: &str = support::CHILD_URL_ENV;
const CHILD_TEST: &str = "child_picks_up_the_override";
const CHILDREN: usize = 2;

#[test]
fn two_processes_both_pick_up_one_stored_override() {
    let server = RedisServer::start();
    let mut children: Vec<ChildTest> = (0..CHILDREN)
        .map(|_| ChildTest::spawn(&[CHILD_TEST, "--exact"], &[(URL_ENV, server.url())]))
        .collect();
    // Written once both have checked under the compiled rules (and so read the hash).
    for child in &mut children {
        child.wait_for("ready");
    }
    store(&server, Some("5/minute"));
    for child in children {
        assert_eq!(child.finish("admitted="), "5");
    }
}

#[tokio::test]
#[ignore = "child of two_processes_both_pick_up_one_stored_override"]
async fn child_picks_up_the_override() {
    let limiter = leak(support::counting_limiter(&support::from_parent(URL_ENV)));
    // Its own identity, so the two children's counts do not mix.
    let me = format!("child-{}", std::process::id());
    assert_eq!(admitted(limiter, &me, 1).await, 1);
    assert_eq!(limiter.rules_in_force("ops.send"), [Rule::per_minute(2)]);
    println!("ready");
    support::eventually("the stored override", GIVE_UP_AFTER, || async {
        match limiter.rules_in_force("ops.send") {
            rules if rules == [Rule::per_minute(5)] => Ok(()),
            rules => Err(format!("{rules:?}")),
        }
    })
    .await;
    // One was counted under the compiled rules already: 4 more pass, of 5.
    let admitted = 1 + admitted(limiter, &me, 6).await;
    println!("admitted={admitted}");
}

/// Calls `by_ip` from `ip`: whether it passed, else how long it was told to wait.
async fn from_ip(limiter: &'static Limiter, ip: &str) -> Result<(), Duration> {
    let ctx = RequestContext::new().with_ip(ip.parse().unwrap());
    match context::scope(ctx, by_ip(limiter)).await {
        Ok(()) => Ok(()),
        Err(RateLimitError::Limited { retry_after, .. }) => Err(retry_after),
        Err(other) => panic!("{other}"),
    }
}

backend_tests! {
    memory = leak(Limiter::memory()),
    redis = |url: &str| leak(Limiter::redis(url).unwrap());

    /// Bans on both backends: an identity or a network, IPv4 or IPv6, refused at every site
    /// whatever its counts, until lifted; listed with what is left of each.
    async fn bans_refuse_identities_and_networks_at_every_site(limiter: &'static Limiter) {
        let hour = Duration::from_secs(3600);
        limiter.ban("ip:203.0.113.0/24", hour).await.unwrap();
        limiter.ban("ip:2001:db8::/48", hour).await.unwrap();
        limiter
            .ban("custom:mallory", Duration::from_secs(600))
            .await
            .unwrap();
        for banned in ["203.0.113.9", "203.0.113.250", "2001:db8:0:1::7"] {
            let waited = from_ip(limiter, banned).await.unwrap_err();
            assert!(waited > Duration::from_secs(3500), "{banned}: {waited:?}");
        }
        // Neighbours are not banned, and the bans counted nothing for anyone.
        for free in ["203.0.114.9", "2001:db9::7"] {
            assert_eq!(from_ip(limiter, free).await, Ok(()), "{free}");
        }
        // Every site with that identity: `send` and `submit` are two sites.
        for refused in [
            send(limiter, "mallory").await,
            submit(limiter, "mallory").await,
        ] {
            let Err(RateLimitError::Limited { retry_after, .. }) = refused else {
                panic!("{refused:?}")
            };
            assert!(retry_after > Duration::from_secs(500), "{retry_after:?}");
        }
        assert!(send(limiter, "alice").await.is_ok());
        let listed: Vec<String> = limiter
            .bans()
            .await
            .unwrap()
            .into_iter()
            .map(|(who, _)| who)
            .collect();
        assert_eq!(
            listed,
            ["custom:mallory", "ip:2001:db8::/48", "ip:203.0.113.0/24"]
        );

        limiter.unban("custom:mallory").await.unwrap();
        limiter.unban("ip:203.0.113.0/24").await.unwrap();
        assert!(send(limiter, "mallory").await.is_ok());
        assert_eq!(from_ip(limiter, "203.0.113.9").await, Ok(()));
        assert!(from_ip(limiter, "2001:db8::1").await.is_err());
        assert!(limiter.ban("host:mallory", hour).await.is_err());
    }
}

custom_sites! {
    browse(rules("1000/minute"), name = "ops.browse");
}

/// A ban set through one instance (or the command) reaches another within its poll
/// interval, and so does its lifting; the other instance never asks Redis about it on a
/// check.
#[tokio::test]
async fn a_ban_reaches_every_instance_within_its_poll_interval() {
    let server = RedisServer::start();
    let instance = || {
        let limiter = Limiter::redis(&server.url()).unwrap();
        leak(limiter.rules_poll(Some(Duration::from_millis(100))))
    };
    let (operator, serving) = (instance(), instance());
    // The serving instance polls the prefix of its sites from its first check on.
    assert!(browse(serving, "eve").await.is_ok());
    operator
        .ban("custom:eve", Duration::from_secs(60))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + GIVE_UP_AFTER;
    while browse(serving, "eve").await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the ban never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    operator.unban("custom:eve").await.unwrap();
    while browse(serving, "eve").await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the lifting never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
