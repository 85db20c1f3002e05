//! Redis Cluster: a real 6-node cluster (3 masters, 3 replicas) started by each test.
//! Keys spread over every master count exactly; a flushed script cache on every node, a
//! manual failover and a crashed master are all survived, with exact counts after.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_ratelimit::{Limiter, Rule};
use support::cluster::RedisCluster;
use support::Topology;

const THREE_PER_MINUTE: [Rule; 1] = [Rule::new(3, Duration::from_secs(60))];

/// How long checks may take to work again after the cluster changed before the test gives
/// up: an order of magnitude more than they take on a loaded machine.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// `n` keys named `{prefix}:{i}`.
fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i}")).collect()
}

/// Checks each key `tries` times, in turns, and requires `admitted` of them admitted per key.
async fn assert_admitted(limiter: &Limiter, keys: &[String], tries: u32, admitted: u32) {
    let mut allowed = vec![0; keys.len()];
    for _ in 0..tries {
        for (key, allowed) in keys.iter().zip(&mut allowed) {
            let decision = limiter.check(key, &THREE_PER_MINUTE).await;
            *allowed += u32::from(decision.unwrap_or_else(|e| panic!("{key}: {e}")).allowed);
        }
    }
    assert!(allowed.iter().all(|&n| n == admitted), "{allowed:?}");
}

/// Requires each key to hold 3 entries on its master: 3 checks counted, once each.
fn assert_three_entries(cluster: &RedisCluster, keys: &[String]) {
    for key in keys {
        let entries: u64 = redis::cmd("ZCARD")
            .arg(key)
            .query(&mut cluster.connection(cluster.master_of(key)))
            .unwrap();
        assert_eq!(entries, 3, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_every_master_count_exactly() {
    let cluster = &RedisCluster::start();
    let limiter = support::counting_limiter(&cluster.url());
    assert_exact_on_every_master(cluster, &limiter, "spread", 300).await;
}

/// Checks `n` keys spread over the three masters 5 times each: 3 admitted per key, and 3
/// entries on its master.
async fn assert_exact_on_every_master(
    cluster: &RedisCluster,
    limiter: &Limiter,
    prefix: &str,
    n: usize,
) {
    let keys = keys(prefix, n);
    let masters: HashSet<u16> = keys.iter().map(|key| cluster.master_of(key)).collect();
    assert_eq!(masters.len(), 3, "the keys cover every master");
    assert_admitted(limiter, &keys, 5, 3).await;
    assert_three_entries(cluster, &keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_over_tls_count_exactly_on_every_master() {
    let cluster = &RedisCluster::start_tls();
    let limiter = support::counting_limiter(&cluster.tls_url())
        .with_tls_ca(&cluster.ca_pem())
        .unwrap();
    assert_exact_on_every_master(cluster, &limiter, "tls", 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_cache_flushed_on_every_node_is_reloaded() {
    let cluster = &RedisCluster::start();
    let limiter = support::counting_limiter(&cluster.url());
    let keys = keys("flush", 30);
    assert_admitted(&limiter, &keys, 2, 2).await;
    for port in cluster.ports() {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query::<()>(&mut cluster.connection(port))
            .unwrap();
    }
    assert_admitted(&limiter, &keys, 2, 1).await;
    assert_three_entries(cluster, &keys);
}

/// Checks on many keys from a task, until stopped, counting them in `checks`.
fn load(
    limiter: Arc<Limiter>,
    stop: Arc<AtomicBool>,
    checks: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let key = format!("load:{}", checks.fetch_add(1, Ordering::Relaxed) % 500);
            if limiter.check(&key, &THREE_PER_MINUTE).await.is_err() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    })
}

/// After `key`'s master changed: checks on `key`'s slot work again, and fresh keys there
/// (sharing its slot through a hash tag) count exactly, on the new master.
async fn assert_recovered(limiter: &Limiter, cluster: &RedisCluster, key: &str, after: &str) {
    let slot = format!("{{{key}}}:{after}");
    let took = support::until_a_check_lands(limiter, &format!("{slot}:probe"), |_| true).await;
    eprintln!("{after}: checks worked again after {took:?}");
    let fresh = keys(&slot, 30);
    assert_admitted(limiter, &fresh, 4, 3).await;
    assert_three_entries(cluster, &fresh);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_recover_from_a_failover_and_a_crashed_master_and_count_exactly() {
    let cluster = &mut RedisCluster::start();
    let limiter = Arc::new(support::counting_limiter(&cluster.url()));
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let loaded = load(limiter.clone(), stop.clone(), checks.clone());
    support::eventually("the load to run", GIVE_UP_AFTER, || async {
        match checks.load(Ordering::Relaxed) {
            100.. => Ok(()),
            n => Err(format!("{n} checks")),
        }
    })
    .await;

    // A manual failover: the replica takes over without losing anything.
    let key = "failover:key";
    let promoted = cluster.failover(cluster.master_of(key));
    assert_eq!(cluster.master_of(key), promoted);
    assert_recovered(&limiter, cluster, key, "failover").await;

    // A master dies: its replica is promoted once the others time it out (2 s).
    let victim = cluster.master_of(key);
    cluster.kill(victim);
    cluster.wait_until_ok();
    assert_ne!(cluster.master_of(key), victim);
    assert_recovered(&limiter, cluster, key, "crash").await;

    stop.store(true, Ordering::Relaxed);
    loaded.await.unwrap();
}

/// Escalating lock-outs on keys spread over every master: the streak lives in each key, so
/// the second lock-out of a key lasts the schedule's second duration wherever it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalating_lock_outs_follow_their_schedule_on_every_master() {
    use redis_ratelimit::Algorithm;
    static ONE_A_SECOND: [Rule; 1] = [Rule::per_second(1)];
    static SCHEDULE: [Duration; 2] = [Duration::from_secs(60), Duration::from_secs(600)];
    let t0 = Duration::from_secs(1_700_000_040);
    let cluster = RedisCluster::start();
    let limiter = support::counting_limiter(&cluster.url());
    for algorithm in Algorithm::ALL {
        let keys = keys(&format!("lockouts:{algorithm}"), 12);
        let masters: HashSet<u16> = keys.iter().map(|key| cluster.master_of(key)).collect();
        assert_eq!(masters.len(), 3, "the keys cover every master");
        for key in keys {
            let at = |ms: u64| {
                limiter
                    .check(&key, &ONE_A_SECOND)
                    .block_schedule(&SCHEDULE)
                    .algorithm(algorithm)
                    .at(t0 + Duration::from_millis(ms))
            };
            // Each lock-out in a row, a second after the one before ended.
            for (nth, lockout) in SCHEDULE.iter().enumerate() {
                let start = 61_000 * nth as u64;
                assert!(at(start).await.unwrap().allowed, "{key}");
                let refused = at(start + 1).await.unwrap();
                let got = (refused.allowed, refused.retry_after);
                assert_eq!(got, (false, Some(*lockout)), "{key}: lock-out {nth}");
            }
        }
    }
}
