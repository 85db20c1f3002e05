//! The embedded backend: the same semantics as the Redis scripts, in process.
//!
//! Keys live in [`SHARDS`] independently locked maps, so checks of different keys rarely
//! contend. A lock is held only across the synchronous arithmetic of one check. Every
//! entry carries the expiry a script's `PEXPIRE` would have set; an expired entry counts as
//! absent, and each map sweeps expired entries whenever it has doubled since its last sweep,
//! so memory stays proportional to the keys in use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Backend, Request};
use crate::algorithm::KeyState;
use crate::clock::{Clock, SystemClock};
use crate::decision::RawDecision;
use crate::{BackendError, BackendErrorKind};

/// How many independently locked maps the keys are spread over.
const SHARDS: usize = 32;

/// A map is not swept below this many entries: sweeping tiny maps often costs more than
/// the few expired entries they hold.
const MIN_SWEEP_LEN: usize = 64;

pub(crate) struct MemoryBackend {
    clock: Arc<dyn Clock>,
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<Box<str>, Entry>,
    /// How many entries survived the last sweep; the next one runs at twice that.
    len_after_sweep: usize,
}

struct Entry {
    state: KeyState,
    /// When the key stops existing (µs since the epoch), as `PEXPIRE` would make it.
    expires_at_us: u64,
}

impl MemoryBackend {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryBackend {
            clock,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    pub fn system() -> Self {
        Self::new(Arc::new(SystemClock))
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        let shard = &self.shards[shard_index(key)];
        // A panic while holding the lock cannot leave a map half-updated in a way that
        // matters more than losing rate-limit state, so keep serving.
        shard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_now(&self, request: &Request<'_>) -> Result<RawDecision, BackendError> {
        let now_us = request.now_us.unwrap_or_else(|| self.clock.now_us());
        let mut shard = self.shard(request.key);
        shard.check(request, now_us)
    }

    /// How many keys are stored, expired ones included.
    #[cfg(test)]
    fn stored_keys(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap().entries.len())
            .sum()
    }
}

impl Shard {
    fn check(&mut self, request: &Request<'_>, now_us: u64) -> Result<RawDecision, BackendError> {
        let Request {
            key,
            rules,
            algorithm,
            cost,
            consume,
            ..
        } = *request;
        if let Some(entry) = self.entries.get_mut(key) {
            if entry.expires_at_us > now_us {
                let held = entry.state.algorithm();
                if held != algorithm {
                    return Err(BackendError::new(
                        BackendErrorKind::Command,
                        format!(
                            "key `{key}` holds {} state; it cannot be checked with {} (use one \
                             algorithm per key)",
                            held.name(),
                            algorithm.name()
                        ),
                    ));
                }
            } else {
                // Expired: start over as if the key were absent. A check that writes
                // nothing leaves the (still expired) entry for the sweep.
                entry.state = KeyState::new(algorithm);
            }
            let outcome = entry.state.check(rules, now_us, cost, consume);
            if let Some(ttl) = outcome.ttl_us {
                entry.expires_at_us = now_us.saturating_add(ttl);
            }
            return Ok(outcome.decision);
        }

        let mut state = KeyState::new(algorithm);
        let outcome = state.check(rules, now_us, cost, consume);
        // A peek, or a denial, of an absent key stores nothing.
        if let Some(ttl) = outcome.ttl_us {
            self.sweep_if_doubled(now_us);
            self.entries.insert(
                Box::from(key),
                Entry {
                    state,
                    expires_at_us: now_us.saturating_add(ttl),
                },
            );
        }
        Ok(outcome.decision)
    }

    /// Drops expired entries once the map has doubled since the last sweep: amortised
    /// O(1) per insert, and never more than about twice the live keys stored.
    fn sweep_if_doubled(&mut self, now_us: u64) {
        if self.entries.len() >= MIN_SWEEP_LEN.max(2 * self.len_after_sweep) {
            self.entries.retain(|_, e| e.expires_at_us > now_us);
            self.len_after_sweep = self.entries.len();
        }
    }
}

impl Backend for MemoryBackend {
    async fn check(&self, request: &Request<'_>) -> Result<RawDecision, BackendError> {
        self.check_now(request)
    }

    async fn reset(&self, key: &str) -> Result<(), BackendError> {
        self.shard(key).entries.remove(key);
        Ok(())
    }
}

/// FNV-1a over the key, folded to a shard. Only spreads keys over locks; each shard's map
/// still hashes with the standard, flooding-resistant hasher.
fn shard_index(key: &str) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key.as_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    ((hash ^ (hash >> 32)) as usize) % SHARDS
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::{Algorithm, Rule};

    const START: Duration = Duration::from_secs(1_700_000_000);
    const RULES: [Rule; 1] = [Rule::new(3, Duration::from_secs(10))];

    fn backend() -> (MemoryBackend, ManualClock) {
        let clock = ManualClock::new(START);
        (MemoryBackend::new(Arc::new(clock.clone())), clock)
    }

    fn request(key: &str, algorithm: Algorithm, consume: bool) -> Request<'_> {
        Request {
            key,
            rules: &RULES,
            algorithm,
            cost: 1,
            consume,
            now_us: None,
        }
    }

    fn check(backend: &MemoryBackend, key: &str) -> RawDecision {
        backend
            .check_now(&request(key, Algorithm::SlidingLog, true))
            .unwrap()
    }

    #[test]
    fn admits_exactly_count_then_denies() {
        let (backend, _) = backend();
        let remaining: Vec<_> = (0..5)
            .map(|_| check(&backend, "k"))
            .map(|d| (d.allowed, d.remaining))
            .collect();
        assert_eq!(
            remaining,
            [(true, 2), (true, 1), (true, 0), (false, 0), (false, 0)]
        );
    }

    #[test]
    fn keys_are_counted_apart() {
        let (backend, _) = backend();
        for _ in 0..3 {
            assert!(check(&backend, "a").allowed);
        }
        assert!(!check(&backend, "a").allowed);
        assert!(check(&backend, "b").allowed);
    }

    #[test]
    fn a_peek_of_an_absent_key_stores_nothing() {
        let (backend, _) = backend();
        let d = backend
            .check_now(&request("k", Algorithm::SlidingLog, false))
            .unwrap();
        // All 3 left: a peek tells what is left now.
        assert_eq!((d.allowed, d.remaining), (true, 3));
        assert_eq!(backend.stored_keys(), 0);
    }

    #[test]
    fn an_expired_entry_counts_as_absent() {
        let (backend, clock) = backend();
        for _ in 0..3 {
            check(&backend, "k");
        }
        // The window ends after 10 s; the entry expires 1 s later (the TTL margin).
        clock.advance(Duration::from_secs(11));
        let d = check(&backend, "k");
        assert_eq!((d.allowed, d.remaining), (true, 2));
    }

    #[test]
    fn expired_entries_are_swept_as_new_keys_arrive() {
        let (backend, clock) = backend();
        let keys = 10 * SHARDS * MIN_SWEEP_LEN;
        for i in 0..keys {
            check(&backend, &format!("old-{i}"));
        }
        assert_eq!(backend.stored_keys(), keys);
        clock.advance(Duration::from_secs(11));
        for i in 0..keys {
            check(&backend, &format!("new-{i}"));
        }
        // Every shard swept its old keys at least once while the new ones doubled it.
        let stored = backend.stored_keys();
        assert!(
            stored < keys + keys / 2,
            "{stored} keys stored for {keys} live ones"
        );
        assert!(stored >= keys);
    }

    #[test]
    fn a_key_holding_another_algorithms_state_is_an_error() {
        let (backend, clock) = backend();
        check(&backend, "k");
        let err = backend
            .check_now(&request("k", Algorithm::FixedWindow, true))
            .unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Command);
        assert_eq!(
            err.to_string(),
            "key `k` holds SLIDING_LOG state; it cannot be checked with FIXED_WINDOW (use one \
             algorithm per key)"
        );
        // Once expired, the key is absent, and any algorithm may take it.
        clock.advance(Duration::from_secs(11));
        let d = backend
            .check_now(&request("k", Algorithm::FixedWindow, true))
            .unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 2));
    }

    #[tokio::test]
    async fn reset_forgets_the_key() {
        let (backend, _) = backend();
        for _ in 0..3 {
            check(&backend, "k");
        }
        backend.reset("k").await.unwrap();
        assert_eq!(backend.stored_keys(), 0);
        assert!(check(&backend, "k").allowed);
    }

    #[test]
    fn shards_are_all_used() {
        let mut used = [false; SHARDS];
        for i in 0..SHARDS * 16 {
            used[shard_index(&format!("rate_limit:ip:10.0.0.{i}:app::f"))] = true;
        }
        assert!(used.iter().all(|&u| u));
    }
}
