//! Cluster outages stay local: each master has a circuit breaker of its own, so a master
//! that hangs (`DEBUG SLEEP`) or dies (`kill -9`) costs only the checks of the keys it
//! serves; the keys of the other masters are checked on Redis throughout. A real 6-node
//! cluster (3 masters, 3 replicas) per test.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_ratelimit::{Breaker, Limiter, Rule};
use support::cluster::RedisCluster;
use support::RedisServer;
use support::Topology as _;

/// Never denies: the tests count where checks were counted, not denials.
const MANY: [Rule; 1] = [Rule::new(1_000_000, Duration::from_secs(600))];
const COOL_DOWN: Duration = Duration::from_millis(300);

/// The phases of an outage, as the load sees them.
const BEFORE: u8 = 0;
const DURING: u8 = 1;
const AFTER: u8 = 2;

/// For each master, a hash tag whose keys it serves (`{tag}:…`), with its port.
fn tag_per_master(cluster: &RedisCluster) -> Vec<(String, u16)> {
    let masters = cluster.masters().len();
    let mut found: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let tag = format!("m{i}");
        let master = cluster.master_of(&format!("{{{tag}}}"));
        if !found.iter().any(|&(_, known)| known == master) {
            found.push((tag, master));
        }
        if found.len() == masters {
            break;
        }
    }
    found
}

/// Masters keep serving their slots while another is failed (Redis's default stops the
/// whole cluster until a replica takes over): the setting that lets an outage stay local.
fn keep_serving_while_a_master_fails(cluster: &RedisCluster) {
    for port in cluster.ports() {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query::<()>(&mut cluster.connection(port))
            .unwrap_or_else(|e| panic!("CONFIG SET on {port}: {e}"));
    }
}

/// What one master's checks met in each phase.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    ok: u64,
    /// Failed at once: the master's breaker was open.
    breaker_open: u64,
    /// Failed after trying the master (timed out, refused).
    tried: u64,
}

/// One master's checks, until stopped: each phase's tally, and for a master that came back
/// the failures that tried it after `AFTER` began and before the first check that passed.
struct Load {
    tallies: [Tally; 3],
    tried_after_before_ok: u64,
}

/// Checks keys of `tag` one after another until `stop`, yielding in between (a check that
/// fails at once takes microseconds). Sets `back` once a check passes in `AFTER`.
fn load(
    limiter: Arc<Limiter>,
    tag: String,
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    back: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Load> {
    tokio::spawn(async move {
        let mut load = Load {
            tallies: [Tally::default(); 3],
            tried_after_before_ok: 0,
        };
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let started_in = phase.load(Ordering::SeqCst);
            let key = format!("{{{tag}}}:{}", n % 100);
            n += 1;
            let tally = &mut load.tallies[usize::from(started_in)];
            match limiter.check(&key, &MANY).await {
                Ok(_) => {
                    tally.ok += 1;
                    if started_in == AFTER {
                        back.store(true, Ordering::SeqCst);
                    }
                }
                Err(err) if err.to_string().contains("circuit breaker open") => {
                    tally.breaker_open += 1
                }
                Err(_) => {
                    tally.tried += 1;
                    if started_in == AFTER && !back.load(Ordering::SeqCst) {
                        load.tried_after_before_ok += 1;
                    }
                }
            }
            tokio::task::yield_now().await;
        }
        load
    })
}

/// Waits until `done` holds; panics after `within` (a bound with ten times the margin the
/// behaviour needs), saying `what` did not happen.
async fn until(what: &str, within: Duration, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One master hangs for 1.5 s (less than the cluster's node timeout, so no failover) while
/// checks run on every master.
#[tokio::test(flavor = "current_thread")]
async fn a_hung_master_fails_only_its_own_keys_fast_and_is_probed_back() {
    let (logs, _capture) = support::capture_logs();
    let cluster = &RedisCluster::start();
    keep_serving_while_a_master_fails(cluster);
    let timeout = Duration::from_millis(200);
    let limiter = Arc::new(
        Limiter::redis(&cluster.url())
            .unwrap()
            .timeout(timeout)
            .breaker(Breaker::new(3, COOL_DOWN)),
    );
    let tags = tag_per_master(cluster);
    for (tag, _) in &tags {
        limiter
            .check(&format!("{{{tag}}}:warm"), &MANY)
            .await
            .unwrap();
    }
    let (phase, stop) = (
        Arc::new(AtomicU8::new(BEFORE)),
        Arc::new(AtomicBool::new(false)),
    );
    let (backs, loads) = per_master(&limiter, &tags, &phase, &stop, load);
    tokio::time::sleep(Duration::from_millis(100)).await;

    let hung = tags[0].1;
    let sleeper = {
        let (phase, mut connection) = (phase.clone(), cluster.connection(hung));
        std::thread::spawn(move || {
            phase.store(DURING, Ordering::SeqCst);
            let slept = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("1.5")
                .query::<()>(&mut connection);
            phase.store(AFTER, Ordering::SeqCst);
            slept.expect("DEBUG SLEEP (the test nodes allow DEBUG from loopback)");
        })
    };
    until("DEBUG SLEEP to end", Duration::from_secs(30), || {
        sleeper.is_finished()
    })
    .await;
    sleeper.join().unwrap();
    let woke = Instant::now();
    // Within the cool-down plus one probe; ten times that here.
    let bound = (COOL_DOWN + timeout) * 10;
    until(
        "the hung master's keys to be checked on Redis again",
        bound,
        || backs[0].load(Ordering::SeqCst),
    )
    .await;
    let came_back = woke.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::new();
    for load in loads {
        results.push(load.await.unwrap());
    }

    let during = results[0].tallies[usize::from(DURING)];
    // The tries that opened its breaker (one may have started before the hang) and the
    // probes.
    assert!(during.tried >= 2, "the master hung: {during:?}");
    assert!(
        during.breaker_open >= 10 * during.tried,
        "once its breaker opened, its keys failed at once: {during:?}"
    );
    assert!(
        results[0].tried_after_before_ok <= 2,
        "after it woke, a probe reached it: {} calls tried it first ({came_back:?})",
        results[0].tried_after_before_ok
    );
    for (healthy, (tag, port)) in results.iter().zip(&tags).skip(1) {
        for (name, tally) in [
            ("while the other hung", healthy.tallies[usize::from(DURING)]),
            ("in all", sum(&healthy.tallies)),
        ] {
            let checks = tally.ok + tally.breaker_open + tally.tried;
            assert!(checks >= 20, "{tag} on {port} {name}: {tally:?}");
            assert!(
                tally.ok * 100 >= checks * 95,
                "{tag} on {port} {name}: {tally:?}"
            );
        }
    }

    let logs = logs.text();
    let opened: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("circuit breaker opened"))
        .collect();
    assert_eq!(opened.len(), 1, "one opening, one warning: {opened:#?}");
    assert!(
        opened[0].contains(&format!("127.0.0.1:{hung}")),
        "the warning names the hung master: {}",
        opened[0]
    );
}

fn sum(tallies: &[Tally]) -> Tally {
    tallies.iter().fold(Tally::default(), |total, t| Tally {
        ok: total.ok + t.ok,
        breaker_open: total.breaker_open + t.breaker_open,
        tried: total.tried + t.tried,
    })
}

/// A task on one master's tag: `load` or `fresh_keys`.
type MasterTask<M, T> = fn(Arc<Limiter>, String, Arc<AtomicU8>, Arc<AtomicBool>, Arc<M>) -> T;

/// `task` (`load` or `fresh_keys`) started for each master's tag, with the phase, the stop
/// flag and a mark of its own; the marks and the tasks.
fn per_master<M: Default, T>(
    limiter: &Arc<Limiter>,
    tags: &[(String, u16)],
    phase: &Arc<AtomicU8>,
    stop: &Arc<AtomicBool>,
    task: MasterTask<M, T>,
) -> (Vec<Arc<M>>, Vec<T>) {
    let marks: Vec<Arc<M>> = tags.iter().map(|_| Arc::default()).collect();
    let tasks = tags
        .iter()
        .zip(&marks)
        .map(|((tag, _), mark)| {
            task(
                limiter.clone(),
                tag.clone(),
                phase.clone(),
                stop.clone(),
                mark.clone(),
            )
        })
        .collect();
    (marks, tasks)
}

/// One check of a fresh key; which phase it started in and whether it passed.
struct Checked {
    key: String,
    phase: u8,
    ok: bool,
}

/// Checks a fresh key of `tag` at a time until `stop`, each once; counts them in `made`.
fn fresh_keys(
    limiter: Arc<Limiter>,
    tag: String,
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    made: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<Vec<Checked>> {
    tokio::spawn(async move {
        let mut checked = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let phase = phase.load(Ordering::SeqCst);
            let key = format!("{{{tag}}}:{}", checked.len());
            let ok = limiter.check(&key, &MANY).await.is_ok();
            checked.push(Checked { key, phase, ok });
            made.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        checked
    })
}

/// How many entries each of `keys` has on the server at `connection`, in one round trip.
fn entries(connection: &mut redis::Connection, keys: &[&str]) -> Vec<u64> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("ZCARD").arg(*key);
    }
    pipe.query(connection).unwrap()
}

/// A master dies under load; a fallback (a Redis of its own here, so that what it counted
/// can be read) takes its keys until its replica is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_sends_only_its_keys_to_the_fallback_until_its_replica_takes_over() {
    let cluster = &mut RedisCluster::start();
    keep_serving_while_a_master_fails(cluster);
    let fallback = RedisServer::start();
    let limiter = Arc::new(
        Limiter::redis(&cluster.url())
            .unwrap()
            // Generous: a check that times out after its write may have been counted on
            // Redis too, and this test counts exactly.
            .timeout(Duration::from_secs(2))
            .breaker(Breaker::new(3, COOL_DOWN))
            .fail_open(false)
            .fallback(
                Limiter::redis(&fallback.url())
                    .unwrap()
                    .timeout(Duration::from_secs(5)),
            ),
    );
    let tags = tag_per_master(cluster);
    let victim = tags[0].1;
    let (phase, stop) = (
        Arc::new(AtomicU8::new(BEFORE)),
        Arc::new(AtomicBool::new(false)),
    );
    let (made, loads) = per_master(&limiter, &tags, &phase, &stop, fresh_keys);
    let made_by_all = |n: u64| made.iter().all(|made| made.load(Ordering::SeqCst) >= n);
    until("checks on every master", Duration::from_secs(30), || {
        made_by_all(20)
    })
    .await;

    tokio::task::block_in_place(|| cluster.kill(victim));
    phase.store(DURING, Ordering::SeqCst);
    tokio::task::block_in_place(|| cluster.wait_until_ok());
    phase.store(AFTER, Ordering::SeqCst);
    let promoted = cluster.master_of(&format!("{{{}}}", tags[0].0));
    assert_ne!(promoted, victim);
    // The victim's keys are counted on the promoted replica again within the cool-down
    // plus a probe (and a slot map read); twenty times that here, for ten of them.
    let dbsize = |port| -> u64 {
        redis::cmd("DBSIZE")
            .query(&mut cluster.connection(port))
            .unwrap()
    };
    let before = tokio::task::block_in_place(|| dbsize(promoted));
    let started = Instant::now();
    while tokio::task::block_in_place(|| dbsize(promoted)) < before + 10 {
        assert!(
            started.elapsed() < COOL_DOWN * 20 + Duration::from_secs(10),
            "the victim's keys did not return to Redis"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut checked = Vec::new();
    for load in loads {
        checked.push(load.await.unwrap());
    }

    let failed: Vec<&str> = checked
        .iter()
        .flatten()
        .filter(|c| !c.ok)
        .map(|c| c.key.as_str())
        .collect();
    assert!(
        failed.is_empty(),
        "with a fallback no check fails: {failed:?}"
    );
    let mut on_fallback = fallback.connection();
    let fallback_keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut on_fallback).unwrap();
    let victim_tag = format!("{{{}}}:", tags[0].0);
    assert!(
        fallback_keys.iter().all(|key| key.starts_with(&victim_tag)),
        "only the dead master's keys reach the fallback: {fallback_keys:?}"
    );
    // The other masters counted all of theirs, each once.
    for (keys, (tag, port)) in checked.iter().zip(&tags).skip(1) {
        let keys: Vec<&str> = keys.iter().map(|c| c.key.as_str()).collect();
        let counted = entries(&mut cluster.connection(*port), &keys);
        assert!(
            counted.iter().all(|&n| n == 1),
            "{tag} on {port}: {counted:?}"
        );
    }
    // Each of the dead master's keys checked after it died is counted once, either on the
    // fallback or on the promoted replica; the last ones on the replica.
    let after_death: Vec<&str> = checked[0]
        .iter()
        .filter(|c| c.phase != BEFORE)
        .map(|c| c.key.as_str())
        .collect();
    let on_replica = entries(&mut cluster.connection(promoted), &after_death);
    let on_fallback = entries(&mut on_fallback, &after_death);
    for ((key, replica), fallback) in after_death.iter().zip(&on_replica).zip(&on_fallback) {
        assert_eq!(
            (replica + fallback, replica * fallback),
            (1, 0),
            "{key}: {replica} on the replica, {fallback} on the fallback"
        );
    }
    let fell_back: u64 = on_fallback.iter().sum();
    assert!(fell_back > 0, "the fallback counted the dead master's keys");
    assert!(
        on_replica.iter().rev().take(10).all(|&n| n == 1),
        "back on Redis: {:?}",
        &on_replica[on_replica.len().saturating_sub(10)..]
    );
}
