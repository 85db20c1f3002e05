//! The runtime's one source of randomness, seeded by the operating system.
//!
//! Each thread draws from a small generator of its own (SplitMix64), seeded on its first
//! draw from std's `RandomState`, whose keys come from the operating system's randomness:
//! no draw takes a lock or contends with another thread, and no two threads or processes
//! draw alike. Nothing here is for secrets; it is for what must not be guessed in advance
//! or repeat by chance: the memory backend's hash seeds (so that chosen identities cannot
//! pile onto one lock), the process's part of the sliding log's check ids, and the jitter
//! that keeps instances from acting in step.

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};
#[cfg(feature = "redis")]
use std::time::Duration;

thread_local! {
    /// The generator's state; 0 until the thread's first draw seeds it.
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// A random `u64`.
pub(crate) fn u64() -> u64 {
    STATE.with(|state| {
        let mut s = state.get();
        if s == 0 {
            s = RandomState::new().hash_one(std::thread::current().id());
        }
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// A random fraction, uniform in `[0, 1)`.
pub(crate) fn fraction() -> f64 {
    (u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// `every`, spread uniformly over `every * [1 - spread, 1 + spread)`: a sleep that many
/// instances take, so that they do not all wake at once.
#[cfg(feature = "redis")]
pub(crate) fn around(every: Duration, spread: f64) -> Duration {
    every.mul_f64(1.0 - spread + 2.0 * spread * fraction())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_do_not_repeat_within_a_thread_or_across_threads() {
        let here: Vec<u64> = (0..1_000).map(|_| u64()).collect();
        let there = std::thread::spawn(|| (0..1_000).map(|_| u64()).collect::<Vec<_>>())
            .join()
            .unwrap();
        let mut all: Vec<u64> = here.iter().chain(&there).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2_000);
    }

    #[test]
    fn fractions_cover_the_unit_interval() {
        let draws: Vec<f64> = (0..10_000).map(|_| fraction()).collect();
        assert!(draws.iter().all(|f| (0.0..1.0).contains(f)));
        // Each tenth of the interval gets its share, give or take a third of it.
        for tenth in 0..10 {
            let low = f64::from(tenth) / 10.0;
            let n = draws
                .iter()
                .filter(|f| (low..low + 0.1).contains(*f))
                .count();
            assert!(
                (667..1_333).contains(&n),
                "{n} draws in [{low}, {low} + 0.1)"
            );
        }
    }

    #[test]
    #[cfg(feature = "redis")]
    fn around_stays_within_its_spread() {
        let every = Duration::from_secs(10);
        let sleeps: Vec<Duration> = (0..1_000).map(|_| around(every, 0.2)).collect();
        assert!(sleeps
            .iter()
            .all(|s| (Duration::from_secs(8)..Duration::from_secs(12)).contains(s)));
        assert!(sleeps.iter().any(|s| *s < Duration::from_secs(9)));
        assert!(sleeps.iter().any(|s| *s > Duration::from_secs(11)));
    }
}
