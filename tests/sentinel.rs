//! Sentinel: a real master, replica and 3 sentinels started by each test. Checks go to the
//! master the sentinels name, and move to the new one as soon as they fail it over, while
//! the old master still accepts writes that would be lost.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit::{Limiter, Rule};
use support::sentinel::RedisSentinels;
use support::Topology;

const THREE_PER_MINUTE: [Rule; 1] = [Rule::new(3, Duration::from_secs(60))];

/// How long checks may take to move to a new master before the test gives up: an order of
/// magnitude more than they take on a loaded machine.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// How many of `tries` checks of `key` were admitted.
async fn admitted(limiter: &Limiter, key: &str, tries: u32) -> u32 {
    let mut admitted = 0;
    for _ in 0..tries {
        let decision = limiter.check(key, &THREE_PER_MINUTE).await;
        admitted += u32::from(decision.unwrap_or_else(|e| panic!("{key}: {e}")).allowed);
    }
    admitted
}

/// Checks fresh keys until one is written on `master`; how long that took.
async fn until_written_on(limiter: &Limiter, sentinels: &RedisSentinels, master: u16) -> Duration {
    support::until_a_check_lands(limiter, "after", |key| exists(sentinels, master, key)).await
}

fn exists(sentinels: &RedisSentinels, port: u16, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut sentinels.connection(port))
        .unwrap()
}

#[tokio::test]
async fn checks_count_exactly_on_the_master_the_sentinels_name() {
    let sentinels = RedisSentinels::start();
    let limiter = support::counting_limiter(&sentinels.url());
    assert_eq!(admitted(&limiter, "s:k", 5).await, 3);
    let entries: u64 = redis::cmd("ZCARD")
        .arg("s:k")
        .query(&mut sentinels.connection(sentinels.master()))
        .unwrap();
    assert_eq!(entries, 3);
}

/// Sentinels rarely require a password: the limiter asks them without, and with the URL's
/// credentials when they answer NOAUTH (the credentials are the master's too).
#[tokio::test]
async fn sentinels_that_require_the_password_are_asked_with_it() {
    let sentinels = RedisSentinels::start();
    let master = sentinels.master();
    // Connections made before the passwords keep working: they inspect the master.
    let mut inspect = sentinels.connection(master);
    support::require_password(&mut inspect, "secret");
    let url = sentinels.url();
    for port in url["redis+sentinel://".len()..url.rfind('/').unwrap()]
        .split(',')
        .map(|host| host.rsplit_once(':').unwrap().1.parse::<u16>().unwrap())
    {
        redis::cmd("ACL")
            .arg(&["SETUSER", "default", "resetpass", ">secret"])
            .query::<()>(&mut sentinels.connection(port))
            .unwrap();
    }
    let with_password = url.replacen("redis+sentinel://", "redis+sentinel://:secret@", 1);
    let limiter = support::counting_limiter(&with_password);
    assert_eq!(admitted(&limiter, "auth:k", 5).await, 3);
    let entries: u64 = redis::cmd("ZCARD")
        .arg("auth:k")
        .query(&mut inspect)
        .unwrap();
    assert_eq!(entries, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_move_to_the_new_master_at_once_after_a_failover() {
    let sentinels = RedisSentinels::start();
    let limiter = Arc::new(support::counting_limiter(&sentinels.url()));
    // A steady load, counting its checks and errors.
    let (stop, checks, errors) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let load = tokio::spawn({
        let (limiter, stop, checks, errors) = (
            limiter.clone(),
            stop.clone(),
            checks.clone(),
            errors.clone(),
        );
        async move {
            while !stop.load(Ordering::Relaxed) {
                let key = format!("load:{}", checks.fetch_add(1, Ordering::Relaxed) % 100);
                if limiter.check(&key, &THREE_PER_MINUTE).await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    support::until_counted("the load to run", GIVE_UP_AFTER, 100, || {
        checks.load(Ordering::Relaxed)
    })
    .await;

    let (_old, new) = sentinels.failover();
    let took = until_written_on(&limiter, &sentinels, new).await;

    // From then on every check is counted on the new master, exactly.
    for i in 0..20 {
        let key = format!("exact:{i}");
        assert_eq!(admitted(&limiter, &key, 4).await, 3, "{key}");
        assert!(exists(&sentinels, new, &key), "{key} is on the new master");
    }

    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let errors = errors.load(Ordering::Relaxed);
    assert!(
        errors < 20,
        "{errors} failed checks around the failover ({took:?} to move)"
    );
}

/// The case that loses counts: the sentinels lose sight of the master (a partition)
/// while the application still reaches it, and fail it over. The old master cannot be
/// demoted while they cannot reach it, so it keeps accepting writes, and what is counted
/// there is lost. Checks must move as soon as the sentinels announce the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_leave_a_master_the_sentinels_can_no_longer_reach() {
    let sentinels = RedisSentinels::start();
    let limiter = support::counting_limiter(&sentinels.url());
    limiter.check("warm", &THREE_PER_MINUTE).await.unwrap();
    let old = sentinels.master();

    // The partition: the master now wants a password the sentinels do not have, and their
    // connections are cut. The limiter's connections were authenticated before: they work.
    let mut admin = sentinels.connection(old);
    support::require_password(&mut admin, "partitioned");
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    for client in clients
        .lines()
        .filter(|line| line.contains(" name=sentinel-"))
    {
        let id = client
            .split(' ')
            .find_map(|field| field.strip_prefix("id="));
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id.expect("CLIENT LIST names each client's id"))
            .query::<()>(&mut admin)
            .unwrap();
    }

    let new = support::eventually("the sentinels to fail over", GIVE_UP_AFTER, || async {
        match sentinels.master() {
            master if master != old => Ok(master),
            master => Err(format!("master still {master}")),
        }
    })
    .await;
    let took = until_written_on(&limiter, &sentinels, new).await;
    // What moved the checks was the sentinels' announcement: the old master was not demoted.
    let old_role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut admin).unwrap();
    assert_eq!(
        old_role.first(),
        Some(&redis::Value::BulkString(b"master".to_vec())),
        "the old master still takes writes"
    );
    // And they stay there.
    for i in 0..20 {
        let key = format!("exact:{i}");
        limiter.check(&key, &THREE_PER_MINUTE).await.unwrap();
        assert!(
            exists(&sentinels, new, &key),
            "{key} was not written on the new master {new}, though one before was after {took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_checks_count_exactly_and_follow_a_failover() {
    let sentinels = RedisSentinels::start_tls();
    let limiter = support::counting_limiter(&sentinels.tls_url())
        .with_tls_ca(&sentinels.ca_pem())
        .unwrap();
    assert_eq!(admitted(&limiter, "tls:k", 5).await, 3);
    assert!(exists(&sentinels, sentinels.master(), "tls:k"));

    let (_old, new) = sentinels.failover();
    until_written_on(&limiter, &sentinels, new).await;
}
