//! One `static` Redis limiter used from many Tokio runtimes: threads with runtimes of their
//! own (as actix-web runs one per worker), runtimes that stop while others still check, and
//! `#[tokio::test]`s sharing the limiter (each test has its own runtime). Every check must
//! succeed and be counted exactly once.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, LazyLock};
use std::thread;
use std::time::{Duration, Instant};

use redis_ratelimit::{BackendError, Limiter, Rule};
use support::RedisServer;

/// Generous for a loaded test machine, yet shorter than [`IDLE`].
const TIMEOUT: Duration = Duration::from_millis(600);

/// How long the first runtime stays alive but undriven (its thread busy elsewhere) before it
/// is dropped: longer than [`TIMEOUT`], so a check that needed that thread would fail.
const IDLE: Duration = Duration::from_millis(900);

/// The server's URL. It is started once for the whole binary, by a thread that lives as long
/// as the process: the server is killed when the thread that started it ends.
static URL: LazyLock<String> = LazyLock::new(|| {
    let (started, url) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let server = RedisServer::start();
        started.send(server.url()).unwrap();
        loop {
            thread::park();
        }
    });
    url.recv().expect("the test redis-server started")
});

/// The limiter every test shares, as a `static` (or the global limiter) is shared in an
/// application.
static LIMITER: LazyLock<Limiter> = LazyLock::new(|| {
    Limiter::redis(&URL)
        .unwrap()
        .fail_open(false)
        .timeout(TIMEOUT)
});

/// How many entries the sliding log's ZSET `key` holds: one per counted check.
fn entries(key: &str) -> u64 {
    let mut conn = redis::Client::open(URL.as_str())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .unwrap();
    redis::cmd("ZCARD").arg(key).query(&mut conn).unwrap()
}

/// What a set of checks came to.
#[derive(Default, Debug)]
struct Tally {
    allowed: u64,
    denied: u64,
    errors: Vec<BackendError>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.allowed += other.allowed;
        self.denied += other.denied;
        self.errors.extend(other.errors);
    }
}

/// `count` checks of `key`, `concurrency` at a time, on the current runtime.
async fn checks(key: &str, rules: &'static [Rule], count: u64, concurrency: u64) -> Tally {
    let key: Arc<str> = key.into();
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let key = key.clone();
            tokio::spawn(async move {
                let mut tally = Tally::default();
                for _ in (worker..count).step_by(concurrency as usize) {
                    match LIMITER.check(&key, rules).await {
                        Ok(d) if d.allowed => tally.allowed += 1,
                        Ok(_) => tally.denied += 1,
                        Err(err) => tally.errors.push(err),
                    }
                }
                tally
            })
        })
        .collect();
    let mut tally = Tally::default();
    for worker in workers {
        tally.add(worker.await.unwrap());
    }
    tally
}

fn runtime(multi_thread: bool) -> tokio::runtime::Runtime {
    let mut builder = if multi_thread {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(2);
        builder
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().unwrap()
}

#[test]
fn threads_with_runtimes_of_their_own_share_one_static_limiter() {
    const ROUNDS: usize = 4;
    const OTHERS: usize = 3;
    static RULES: [Rule; 1] = [Rule::new(300, Duration::from_secs(60))];
    let limit = RULES[0].count();

    for round in 0..ROUNDS {
        let key = format!("runtimes:round:{round}");
        // Passed by the first thread once it has checked (in round 0: connected the
        // limiter), so that the others start on connections that runtime made.
        let first_checked = Barrier::new(OTHERS + 1);
        let first_dropped = AtomicBool::new(false);
        let started = Instant::now();

        let tally = thread::scope(|scope| {
            let first = scope.spawn(|| {
                let runtime = runtime(false);
                let mut tally = runtime.block_on(checks(&key, &RULES, 1, 1));
                first_checked.wait();
                tally.add(runtime.block_on(checks(&key, &RULES, 40, 8)));
                // Alive but not driven, as when its thread blocks in other work; then gone
                // while the other runtimes keep checking.
                thread::sleep(IDLE);
                drop(runtime);
                first_dropped.store(true, Ordering::SeqCst);
                tally
            });
            let others: Vec<_> = (0..OTHERS)
                .map(|n| {
                    let (key, first_checked, first_dropped) =
                        (&key, &first_checked, &first_dropped);
                    scope.spawn(move || {
                        first_checked.wait();
                        let runtime = runtime(n % 2 == 1);
                        let mut tally = Tally::default();
                        // At least 150 checks each, and checks in flight until the first
                        // runtime is gone, and a little after.
                        let mut after_drop = 0;
                        while after_drop < 2 {
                            if first_dropped.load(Ordering::SeqCst) {
                                after_drop += 1;
                            }
                            tally.add(runtime.block_on(checks(key, &RULES, 50, 10)));
                            if tally.allowed + tally.denied + tally.errors.len() as u64 >= 150 {
                                thread::sleep(Duration::from_millis(50));
                            }
                        }
                        tally
                    })
                })
                .collect();
            let mut tally = first.join().unwrap();
            for other in others {
                tally.add(other.join().unwrap());
            }
            tally
        });

        let total = tally.allowed + tally.denied + tally.errors.len() as u64;
        eprintln!("round {round}: {total} checks in {:?}", started.elapsed());
        assert!(
            tally.errors.is_empty(),
            "round {round}: {} of {total} checks failed, the first: {}",
            tally.errors.len(),
            tally.errors[0]
        );
        assert!(total > limit, "round {round}: only {total} checks");
        assert_eq!(tally.allowed, limit, "round {round}: {tally:?}");
        assert_eq!(entries(&key), limit, "round {round}: counted entries");
    }
}

/// What each `#[tokio::test]` below does on a key of its own: 400 checks of a limit of 300,
/// 20 at a time, so that the tests overlap and some end (their runtimes shut down) while
/// others still check. A check counted twice would leave fewer than 300 admitted.
async fn a_test_counts_exactly(name: &str) {
    static RULES: [Rule; 1] = [Rule::new(300, Duration::from_secs(60))];
    let key = format!("runtimes:test:{name}");
    let mut tally = Tally::default();
    for _ in 0..20 {
        tally.add(checks(&key, &RULES, 20, 5).await);
    }
    assert!(tally.errors.is_empty(), "{name}: {:?}", tally.errors);
    assert_eq!((tally.allowed, tally.denied), (300, 100), "{name}");
    assert_eq!(entries(&key), 300, "{name}: counted entries");
}

// The user's shape. `cargo test` runs these on threads of one process, sharing LIMITER; a
// runner that gives every test a process of its own (nextest) does not, and the test
// above covers the same ground in one process.

#[tokio::test]
async fn a_current_thread_test_shares_the_static_limiter() {
    a_test_counts_exactly("current-a").await;
}

#[tokio::test]
async fn another_current_thread_test_shares_the_static_limiter() {
    a_test_counts_exactly("current-b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_thread_test_shares_the_static_limiter() {
    a_test_counts_exactly("multi-a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_multi_thread_test_shares_the_static_limiter() {
    a_test_counts_exactly("multi-b").await;
}
