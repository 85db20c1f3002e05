//! Redis Cluster: a real 6-node cluster (3 masters, 3 replicas) started by each test.
//! Keys spread over every master count exactly; a flushed script cache on every node, a
//! manual failover and a crashed master are all survived, with exact counts after.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_ratelimit::{Limiter, Rule};
use support::cluster::RedisCluster;

const THREE_PER_MINUTE: [Rule; 1] = [Rule::new(3, Duration::from_secs(60))];

fn limiter(cluster: &RedisCluster) -> Limiter {
    Limiter::redis(&cluster.url())
        .unwrap()
        .fail_open(false)
        .timeout(Duration::from_secs(1))
}

/// Checks each key `tries` times; the number allowed per key.
async fn allowed_per_key(limiter: &Limiter, keys: &[String], tries: u32) -> Vec<u32> {
    let mut allowed = vec![0; keys.len()];
    for _ in 0..tries {
        for (key, allowed) in keys.iter().zip(&mut allowed) {
            let decision = limiter.check(key, &THREE_PER_MINUTE).await;
            *allowed += u32::from(decision.unwrap_or_else(|e| panic!("{key}: {e}")).allowed);
        }
    }
    allowed
}

fn entries(cluster: &RedisCluster, key: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query(&mut cluster.connection(cluster.master_of(key)))
        .unwrap()
}

/// Checks fresh keys until one works, for at most `within`; how long that took.
async fn until_checks_work(limiter: &Limiter, prefix: &str, within: Duration) -> Duration {
    let started = Instant::now();
    for attempt in 0.. {
        let key = format!("{prefix}:probe:{attempt}");
        if limiter.check(&key, &THREE_PER_MINUTE).await.is_ok() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "checks did not recover within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_every_master_count_exactly() {
    let cluster = &RedisCluster::start();
    assert_exact_on_every_master(cluster, &limiter(cluster), "spread", 300).await;
}

/// Checks `n` keys spread over the three masters 5 times each: 3 admitted per key, and 3
/// entries on its master.
async fn assert_exact_on_every_master(
    cluster: &RedisCluster,
    limiter: &Limiter,
    prefix: &str,
    n: usize,
) {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}:{i}")).collect();
    let masters: HashSet<u16> = keys.iter().map(|key| cluster.master_of(key)).collect();
    assert_eq!(masters.len(), 3, "the keys cover every master");
    let allowed = allowed_per_key(limiter, &keys, 5).await;
    assert!(allowed.iter().all(|&n| n == 3), "{allowed:?}");
    for key in &keys {
        assert_eq!(entries(cluster, key), 3, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_over_tls_count_exactly_on_every_master() {
    let cluster = &RedisCluster::start_tls();
    let limiter = Limiter::redis(&cluster.tls_url())
        .unwrap()
        .with_tls_ca(&cluster.ca_pem())
        .unwrap()
        .fail_open(false)
        .timeout(Duration::from_secs(1));
    assert_exact_on_every_master(cluster, &limiter, "tls", 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_cache_flushed_on_every_node_is_reloaded() {
    let cluster = &RedisCluster::start();
    let limiter = limiter(cluster);
    let keys: Vec<String> = (0..30).map(|i| format!("flush:{i}")).collect();
    assert!(allowed_per_key(&limiter, &keys, 2)
        .await
        .iter()
        .all(|&n| n == 2));
    for port in cluster.ports() {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query::<()>(&mut cluster.connection(port))
            .unwrap();
    }
    assert!(allowed_per_key(&limiter, &keys, 2)
        .await
        .iter()
        .all(|&n| n == 1));
    for key in &keys {
        assert_eq!(entries(cluster, key), 3, "{key}");
    }
}

/// Checks on many keys from a task, until stopped; how many it made.
fn load(limiter: Arc<Limiter>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut checks = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let key = format!("load:{}", checks % 500);
            if limiter.check(&key, &THREE_PER_MINUTE).await.is_err() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            checks += 1;
        }
        checks
    })
}

/// After `key`'s master changed: checks on `key`'s slot work again within 3 s, and fresh
/// keys there (sharing its slot through a hash tag) count exactly, on the new master.
async fn assert_recovered(limiter: &Limiter, cluster: &RedisCluster, key: &str, after: &str) {
    let slot = format!("{{{key}}}:{after}");
    let took = until_checks_work(limiter, &slot, Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(3), "{after}: {took:?}");
    let fresh: Vec<String> = (0..30).map(|i| format!("{slot}:{i}")).collect();
    let allowed = allowed_per_key(limiter, &fresh, 4).await;
    assert!(allowed.iter().all(|&n| n == 3), "{after}: {allowed:?}");
    for key in &fresh {
        assert_eq!(entries(cluster, key), 3, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_recover_from_a_failover_and_a_crashed_master_and_count_exactly() {
    let cluster = &mut RedisCluster::start();
    let limiter = Arc::new(limiter(cluster));
    let stop = Arc::new(AtomicBool::new(false));
    let loaded = load(limiter.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;

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
    let checks = loaded.await.unwrap();
    assert!(checks > 100, "the load ran: {checks} checks");
}
