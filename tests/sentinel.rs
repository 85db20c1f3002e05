//! Sentinel: a real master, replica and 3 sentinels started by each test. Checks go to the
//! master the sentinels name, and move to the new one as soon as they fail it over, while
//! the old master still accepts writes that would be lost.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_ratelimit::{Limiter, Rule};
use support::sentinel::RedisSentinels;

const THREE_PER_MINUTE: [Rule; 1] = [Rule::new(3, Duration::from_secs(60))];

fn limiter(sentinels: &RedisSentinels) -> Limiter {
    Limiter::redis(&sentinels.url())
        .unwrap()
        .fail_open(false)
        .timeout(Duration::from_secs(1))
}

/// How many of `tries` checks of `key` were admitted.
async fn admitted(limiter: &Limiter, key: &str, tries: u32) -> u32 {
    let mut admitted = 0;
    for _ in 0..tries {
        let decision = limiter.check(key, &THREE_PER_MINUTE).await;
        admitted += u32::from(decision.unwrap_or_else(|e| panic!("{key}: {e}")).allowed);
    }
    admitted
}

/// Checks fresh keys until one is written on `master`, for at most 2 s.
async fn until_written_on(limiter: &Limiter, sentinels: &RedisSentinels, master: u16) {
    let moved = Instant::now();
    for probe in 0.. {
        let key = format!("after:{probe}");
        if limiter.check(&key, &THREE_PER_MINUTE).await.is_ok() && exists(sentinels, master, &key) {
            return;
        }
        assert!(
            moved.elapsed() < Duration::from_secs(2),
            "checks were still not written on the new master {master} 2 s after the failover"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    let limiter = limiter(&sentinels);
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
    let limiter = Limiter::redis(&with_password)
        .unwrap()
        .fail_open(false)
        .timeout(Duration::from_secs(1));
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
    let limiter = Arc::new(limiter(&sentinels));
    // A steady load, counting its errors.
    let (stop, errors) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let load = tokio::spawn({
        let (limiter, stop, errors) = (limiter.clone(), stop.clone(), errors.clone());
        async move {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("load:{}", checks % 100);
                if limiter.check(&key, &THREE_PER_MINUTE).await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                checks += 1;
            }
            checks
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (_old, new) = sentinels.failover();
    let moved = Instant::now();
    until_written_on(&limiter, &sentinels, new).await;
    let took = moved.elapsed();

    // From then on every check is counted on the new master, exactly.
    for i in 0..20 {
        let key = format!("exact:{i}");
        assert_eq!(admitted(&limiter, &key, 4).await, 3, "{key}");
        assert!(exists(&sentinels, new, &key), "{key} is on the new master");
    }

    stop.store(true, Ordering::Relaxed);
    let checks = load.await.unwrap();
    let errors = errors.load(Ordering::Relaxed);
    assert!(checks > 100, "the load ran: {checks} checks");
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
    let limiter = limiter(&sentinels);
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

    let cut = Instant::now();
    let new = loop {
        let master = sentinels.master();
        if master != old {
            break master;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(15),
            "the sentinels did not fail over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let switched = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let old_role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut admin).unwrap();
    assert_eq!(
        old_role.first(),
        Some(&redis::Value::BulkString(b"master".to_vec())),
        "the old master still takes writes"
    );
    for i in 0..20 {
        let key = format!("after:{i}");
        limiter.check(&key, &THREE_PER_MINUTE).await.unwrap();
        assert!(
            exists(&sentinels, new, &key),
            "{key} was not written on the new master {new}, {:?} after the switch",
            switched.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_checks_count_exactly_and_follow_a_failover() {
    let sentinels = RedisSentinels::start_tls();
    let limiter = Limiter::redis(&sentinels.tls_url())
        .unwrap()
        .with_tls_ca(&sentinels.ca_pem())
        .unwrap()
        .fail_open(false)
        .timeout(Duration::from_secs(1));
    assert_eq!(admitted(&limiter, "tls:k", 5).await, 3);
    assert!(exists(&sentinels, sentinels.master(), "tls:k"));

    let (_old, new) = sentinels.failover();
    until_written_on(&limiter, &sentinels, new).await;
}
