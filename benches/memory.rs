//! The embedded backend's cost per check, against governor's keyed limiter in the same
//! harness: 10,000 keys checked in turn on one thread, every algorithm with the same rule
//! (100 per second) on a simulated clock that makes every check pass, for both limiters.
//! Then a guarded function against the direct check it expands to, and the four algorithms
//! and governor again on their real clocks.
//!
//! `cargo bench --bench memory` (add `-- <filter>` for one group).

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use redis_ratelimit::clock::ManualClock;
use redis_ratelimit::{rate_limiter, Algorithm, Limiter, RateLimitError, Rule};

const KEYS: usize = 10_000;
const PER_SECOND: u32 = 100;
const RULES: [Rule; 1] = [Rule::new(PER_SECOND as u64, Duration::from_secs(1))];

/// The keys, in the shape `#[rate_limiter]` makes them.
fn keys(site: &str) -> Vec<String> {
    (0..KEYS)
        .map(|i| format!("rate_limit:custom:{i}:{site}"))
        .collect()
}

/// Nothing to wake: the memory backend never waits, so every check is ready when first
/// polled.
struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

/// Polls `fut` once; it must be ready. Inlined, so that the future is built where it is
/// polled, as an executor polls a task's future in place: a call would copy the check and
/// its answer across a boundary no executor has.
#[inline(always)]
fn ready<F: Future>(fut: F, cx: &mut Context<'_>) -> F::Output {
    match pin!(fut).poll(cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a memory check never waits"),
    }
}

/// Runs `check` on each of `keys` in turn, one per iteration, and tells what share of
/// the checks passed (denials cost less than admissions, so compare like with like).
fn each_key(
    c: &mut Criterion,
    name: &str,
    keys: &[String],
    mut check: impl FnMut(&String) -> bool,
) {
    let (mut next, mut allowed, mut total) = (0, 0u64, 0u64);
    c.bench_function(name, |b| {
        b.iter(|| {
            let key = &keys[next];
            next = (next + 1) % keys.len();
            let passed = check(black_box(key));
            allowed += u64::from(passed);
            total += 1;
            black_box(passed)
        })
    });
    // Nothing ran when a filter left this benchmark out.
    if total > 0 {
        eprintln!(
            "{name}: {:.1}% of {total} checks allowed",
            100.0 * allowed as f64 / total.max(1) as f64
        );
    }
}

/// Simulated time moves this much per check: each key comes round every 10,000 checks,
/// 20 ms apart, 50 times a second, half of what the rule allows, so every check of every
/// limiter is admitted (the costlier path), whatever the machine's speed.
const STEP: Duration = Duration::from_micros(2);

fn algorithms(c: &mut Criterion) {
    let waker = Waker::from(Arc::new(NoWake));
    let mut cx = Context::from_waker(&waker);
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
        let limiter = Limiter::memory_with_clock(clock.clone());
        let keys = keys(algorithm.name());
        each_key(c, &format!("memory/{}", algorithm.name()), &keys, |key| {
            clock.advance(STEP);
            ready(limiter.check(key, &RULES).algorithm(algorithm), &mut cx)
                .expect("memory check")
                .allowed
        });
    }

    let clock = FakeRelativeClock::default();
    // governor's defaults (std's hasher, no middleware) but its test clock.
    let governor: RateLimiter<String, DefaultKeyedStateStore<String>, _, NoOpMiddleware<_>> =
        RateLimiter::new(quota(), DefaultKeyedStateStore::default(), clock.clone());
    each_key(c, "governor/check_key", &keys("governor"), |key| {
        clock.advance(STEP);
        // Keys of governor's map are `String`s; looking one up by `&String` costs no copy.
        governor.check_key(key).is_ok()
    });
}

/// The same, on each limiter's real clock (the system clock; governor's `quanta`). The
/// share admitted then depends on how fast the checks run, so it is printed.
fn real_clock(c: &mut Criterion) {
    let waker = Waker::from(Arc::new(NoWake));
    let mut cx = Context::from_waker(&waker);
    for algorithm in Algorithm::ALL {
        let limiter = Limiter::memory();
        let keys = keys(algorithm.name());
        each_key(
            c,
            &format!("real_clock/memory/{}", algorithm.name()),
            &keys,
            |key| {
                ready(limiter.check(key, &RULES).algorithm(algorithm), &mut cx)
                    .expect("memory check")
                    .allowed
            },
        );
    }
    let governor: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota());
    each_key(
        c,
        "real_clock/governor/check_key",
        &keys("governor"),
        |key| governor.check_key(key).is_ok(),
    );
}

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(PER_SECOND).unwrap())
}

static CLOCK: LazyLock<ManualClock> =
    LazyLock::new(|| ManualClock::new(Duration::from_secs(1_700_000_000)));
static LIMITER: LazyLock<Limiter> = LazyLock::new(|| Limiter::memory_with_clock(CLOCK.clone()));

#[rate_limiter(
    rules(rule(count = 100, time = 1)),
    limit_type = CUSTOM,
    by = id,
    limiter = &LIMITER
)]
async fn guarded(id: usize) -> Result<(), RateLimitError> {
    Ok(())
}

fn attribute(c: &mut Criterion) {
    let waker = Waker::from(Arc::new(NoWake));
    let mut cx = Context::from_waker(&waker);
    let mut next = 0;
    let mut id = move || {
        CLOCK.advance(STEP);
        next = (next + 1) % KEYS;
        next
    };
    c.bench_function("attribute/guarded", |b| {
        b.iter(|| black_box(ready(guarded(black_box(id())), &mut cx).is_ok()))
    });
    // What the attribute does, by hand: build the key, then check it.
    c.bench_function("attribute/direct_check_building_the_key", |b| {
        b.iter(|| {
            let key = format!("rate_limit:custom:{}:memory::direct", black_box(id()));
            let decision = ready(LIMITER.check(&key, &RULES), &mut cx).expect("memory check");
            black_box(decision.allowed)
        })
    });
    let keys = keys("memory::direct_prebuilt");
    each_key(c, "attribute/direct_check_prebuilt_key", &keys, |key| {
        CLOCK.advance(STEP);
        ready(LIMITER.check(key, &RULES), &mut cx)
            .expect("memory check")
            .allowed
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = algorithms, attribute, real_clock
}
criterion_main!(benches);
