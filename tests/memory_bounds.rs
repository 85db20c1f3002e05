//! The embedded backend stays within `max_keys` however many identities call: expired keys
//! make way first, then the least recently used, and a key in use is kept.
//!
//! A key still held answers a peek as its state says (here: denied, every rule being
//! exhausted); a forgotten key answers like a fresh one (allowed).

use std::time::{Duration, Instant};

use redis_ratelimit::clock::ManualClock;
use redis_ratelimit::{Limiter, Rule};

const START: Duration = Duration::from_secs(1_700_000_000);
/// One call an hour: a key checked once is exhausted, and stays so while the test runs.
const HOURLY: [Rule; 1] = [Rule::new(1, Duration::from_secs(3600))];
/// One call per 10 s: a key checked once expires 11 s later.
const SHORT: [Rule; 1] = [Rule::new(1, Duration::from_secs(10))];

fn limiter(max_keys: usize) -> (Limiter, ManualClock) {
    let clock = ManualClock::new(START);
    (
        Limiter::memory_with_clock(clock.clone()).max_keys(max_keys),
        clock,
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

async fn exhaust(limiter: &Limiter, key: &str, rules: &[Rule]) {
    assert!(limiter.check(key, rules).await.expect("check").allowed);
}

/// Whether `limiter` still holds the exhausted `key` (a peek, so it stores nothing).
async fn holds(limiter: &Limiter, key: &str) -> bool {
    !limiter.peek(key, &HOURLY).await.expect("peek").allowed
}

/// The process's resident memory, in bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let resident: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .expect("resident pages");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    resident * page as u64
}

#[test]
fn a_million_new_keys_keep_memory_bounded() {
    const MAX_KEYS: usize = 10_000;
    const KEYS: usize = 1_000_000;
    let (limiter, _) = limiter(MAX_KEYS);
    let started = Instant::now();
    runtime().block_on(async {
        exhaust(&limiter, "first", &HOURLY).await;
        // Fill the limiter before measuring, so that its own full size is not counted as
        // growth.
        for i in 0..2 * MAX_KEYS {
            exhaust(
                &limiter,
                &format!("rate_limit:custom:warm-{i}:app::f"),
                &HOURLY,
            )
            .await;
        }
        let before = rss_bytes();
        let mut key = String::new();
        for i in 0..KEYS {
            key.clear();
            std::fmt::Write::write_fmt(
                &mut key,
                format_args!("rate_limit:custom:+1555{i:07}:app::send_code"),
            )
            .unwrap();
            exhaust(&limiter, &key, &HOURLY).await;
        }
        let grown = rss_bytes().saturating_sub(before);
        // Unbounded, a million keys of this size take well over 100 MB; bounded, the
        // limiter's 10,000 keys were already resident before.
        assert!(
            grown < 16 << 20,
            "resident memory grew by {} MB over {KEYS} keys",
            grown >> 20
        );
        assert!(!holds(&limiter, "first").await, "the oldest key was kept");
    });
    let took = started.elapsed();
    // About 10 s unoptimised on an idle machine; a pass over all keys per new key would
    // take hours. The bound leaves room for a machine whose cores are all busy.
    assert!(
        took < Duration::from_secs(100),
        "{KEYS} checks took {took:?}"
    );
}

#[test]
fn the_least_recently_used_key_makes_way() {
    let (limiter, _) = limiter(3);
    runtime().block_on(async {
        for key in ["a", "b", "c"] {
            exhaust(&limiter, key, &HOURLY).await;
        }
        // A peek is a use: `a` is now the most recently used, `b` the least.
        assert!(holds(&limiter, "a").await);
        exhaust(&limiter, "d", &HOURLY).await;
        assert!(!holds(&limiter, "b").await, "b was kept");
        // Order now (most recent first): b's peek stored nothing, so d, a, c.
        exhaust(&limiter, "e", &HOURLY).await;
        assert!(!holds(&limiter, "c").await, "c was kept");
        for key in ["a", "d", "e"] {
            assert!(holds(&limiter, key).await, "{key} was forgotten");
        }
    });
}

#[test]
fn expired_keys_make_way_before_live_ones() {
    let (limiter, clock) = limiter(3);
    runtime().block_on(async {
        exhaust(&limiter, "live-least-recent", &HOURLY).await;
        exhaust(&limiter, "expiring", &SHORT).await;
        exhaust(&limiter, "live-recent", &HOURLY).await;
        clock.advance(Duration::from_secs(11));
        exhaust(&limiter, "new", &HOURLY).await;
        for key in ["live-least-recent", "live-recent", "new"] {
            assert!(holds(&limiter, key).await, "{key} was forgotten");
        }
    });
}

#[test]
fn a_key_kept_in_use_survives_a_flood_of_new_keys() {
    const MAX_KEYS: usize = 10_000;
    let (limiter, _) = limiter(MAX_KEYS);
    runtime().block_on(async {
        exhaust(&limiter, "in-use", &HOURLY).await;
        exhaust(&limiter, "idle", &HOURLY).await;
        for i in 0..10 * MAX_KEYS {
            exhaust(&limiter, &format!("flood-{i}"), &HOURLY).await;
            if i % 500 == 0 {
                // Denied, and so still counted: a denial is a use.
                let d = limiter.check("in-use", &HOURLY).await.expect("check");
                assert!(!d.allowed, "in-use was forgotten before flood-{i}");
            }
        }
        assert!(holds(&limiter, "in-use").await, "in-use was forgotten");
        assert!(!holds(&limiter, "idle").await, "idle was kept");
    });
}
