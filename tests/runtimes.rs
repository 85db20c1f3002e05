//! One `static` Redis limiter used from many Tokio runtimes: threads with runtimes of their
//! own (as actix-web runs one per worker), a runtime that stops being driven and then shuts
//! down while others still check, and `#[tokio::test]`s sharing the limiter in one process
//! (each test has its own runtime). Every check must succeed and be counted exactly once.

mod support;

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, LazyLock};
use std::thread;
use std::time::Duration;

use redis_ratelimit::{BackendError, Limiter, Rule};
use support::ChildTest;

/// How long a handshake between threads or tests may take before the test gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// The limiter every test shares, as a `static` (or the global limiter) is shared in an
/// application.
static LIMITER: LazyLock<Limiter> =
    LazyLock::new(|| support::counting_limiter(support::process_server_url()));

/// How many entries the sliding log's ZSET `key` holds: one per counted check.
fn entries(key: &str) -> u64 {
    let mut conn = redis::Client::open(support::process_server_url())
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

    fn total(&self) -> u64 {
        self.allowed + self.denied + self.errors.len() as u64
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

/// The first runtime's life in the test below.
const DRIVEN: u8 = 0;
const IDLE: u8 = 1;
const DROPPED: u8 = 2;

#[test]
fn threads_with_runtimes_of_their_own_share_one_static_limiter() {
    const ROUNDS: usize = 3;
    const OTHERS: usize = 3;
    /// Checks the other runtimes must have made, start to answer, while the first one was
    /// alive but not driven: had they needed its thread, none would have been answered.
    const ANSWERED_WHILE_IDLE: u64 = 100;
    static RULES: [Rule; 1] = [Rule::new(300, Duration::from_secs(60))];
    let limit = RULES[0].count();

    for round in 0..ROUNDS {
        let key = format!("runtimes:round:{round}");
        // Passed by the first thread once it has checked (in round 0: connected the
        // limiter), so that the others start on connections that runtime made.
        let first_checked = Barrier::new(OTHERS + 1);
        let first = AtomicU8::new(DRIVEN);
        let answered_while_idle = AtomicU64::new(0);

        let tally = thread::scope(|scope| {
            let first_thread = scope.spawn(|| {
                let runtime = runtime(false);
                let mut tally = runtime.block_on(checks(&key, &RULES, 1, 1));
                first_checked.wait();
                tally.add(runtime.block_on(checks(&key, &RULES, 40, 8)));
                // Alive but not driven, as when its thread blocks in other work, until the
                // others have been answered meanwhile; then gone while they keep checking.
                first.store(IDLE, Ordering::SeqCst);
                support::wait_until(
                    "the other runtimes' checks to be answered while the first is idle",
                    GIVE_UP_AFTER,
                    || match answered_while_idle.load(Ordering::SeqCst) {
                        n if n >= ANSWERED_WHILE_IDLE => Ok(()),
                        n => Err(format!("{n} answered")),
                    },
                );
                drop(runtime);
                first.store(DROPPED, Ordering::SeqCst);
                tally
            });
            let others: Vec<_> = (0..OTHERS)
                .map(|n| {
                    let (key, first_checked, first, answered_while_idle) =
                        (&key, &first_checked, &first, &answered_while_idle);
                    scope.spawn(move || {
                        first_checked.wait();
                        let runtime = runtime(n % 2 == 1);
                        let mut tally = Tally::default();
                        // Batches until the first runtime is gone, and two more after; and
                        // 150 checks at least, so that together they pass the limit.
                        let mut after_drop = 0;
                        while after_drop < 2 || tally.total() < 150 {
                            let before = first.load(Ordering::SeqCst);
                            let batch = runtime.block_on(checks(key, &RULES, 10, 5));
                            let after = first.load(Ordering::SeqCst);
                            if (before, after) == (IDLE, IDLE) && batch.errors.is_empty() {
                                answered_while_idle.fetch_add(batch.total(), Ordering::SeqCst);
                            }
                            after_drop += u32::from(after == DROPPED);
                            tally.add(batch);
                        }
                        tally
                    })
                })
                .collect();
            let mut tally = first_thread.join().unwrap();
            for other in others {
                tally.add(other.join().unwrap());
            }
            tally
        });

        let total = tally.total();
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

/// The shape users write: `#[tokio::test]`s in parallel, each on its own runtime, sharing
/// one `static` limiter. A runner that gives every test a process of its own (nextest)
/// would share nothing, so this test runs them in one process the way `cargo test` does:
/// this binary again, on libtest's threads.
#[test]
fn tokio_tests_running_in_parallel_share_one_static_limiter() {
    let child = ChildTest::spawn(
        &["a_tokio_test_", "--test-threads", &TOKIO_TESTS.to_string()],
        &[],
    );
    let result = child.finish("test result:");
    assert!(
        result.starts_with(&format!("ok. {TOKIO_TESTS} passed")),
        "{result}"
    );
}

const TOKIO_TESTS: usize = 4;

/// What each ignored `#[tokio::test]` below does on a key of its own, once every one of
/// them has started (so that they overlap): 400 checks of a limit of 300, 20 at a time. A
/// check counted twice would leave fewer than 300 admitted.
async fn a_test_counts_exactly(name: &str) {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    static RULES: [Rule; 1] = [Rule::new(300, Duration::from_secs(60))];
    let key = format!("runtimes:test:{name}");
    let mut tally = checks(&key, &RULES, 1, 1).await;
    STARTED.fetch_add(1, Ordering::SeqCst);
    support::eventually("every test to have started", GIVE_UP_AFTER, || async {
        match STARTED.load(Ordering::SeqCst) {
            TOKIO_TESTS => Ok(()),
            started => Err(format!("{started} started")),
        }
    })
    .await;
    for _ in 0..20 {
        tally.add(checks(&key, &RULES, 20, 5).await);
    }
    assert!(tally.errors.is_empty(), "{name}: {:?}", tally.errors);
    assert_eq!((tally.allowed, tally.denied), (300, 101), "{name}");
    assert_eq!(entries(&key), 300, "{name}: counted entries");
}

#[tokio::test]
#[ignore = "run in one process by tokio_tests_running_in_parallel_share_one_static_limiter"]
async fn a_tokio_test_on_a_current_thread_runtime() {
    a_test_counts_exactly("current-a").await;
}

#[tokio::test]
#[ignore = "run in one process by tokio_tests_running_in_parallel_share_one_static_limiter"]
async fn a_tokio_test_on_another_current_thread_runtime() {
    a_test_counts_exactly("current-b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in one process by tokio_tests_running_in_parallel_share_one_static_limiter"]
async fn a_tokio_test_on_a_multi_thread_runtime() {
    a_test_counts_exactly("multi-a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in one process by tokio_tests_running_in_parallel_share_one_static_limiter"]
async fn a_tokio_test_on_another_multi_thread_runtime() {
    a_test_counts_exactly("multi-b").await;
}
