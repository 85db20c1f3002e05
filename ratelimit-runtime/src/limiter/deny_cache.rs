//! The deny cache: a key the backend denied stays denied locally until its `retry_after`,
//! so a flood of calls on one key costs the backend nothing.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use crate::backend::Request;
use crate::decision::RawDecision;
use crate::sharded::Sharded;
use crate::{clock, Algorithm, Rule};

/// How many independently locked maps the denials are spread over.
const SHARDS: usize = 16;

/// The most denials a shard holds; past it, expired ones are dropped and, if it is still
/// full, new denials are not cached (they are answered by the backend as usual).
const SHARD_CAPACITY: usize = 4_096;

/// A full shard is swept for expired denials at most this often, so that a shard full of
/// live denials costs one pass per interval, not one per denial.
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// Denials by key, each valid until its `retry_after` has passed.
pub(crate) struct DenyCache {
    shards: Sharded<Shard>,
}

struct Shard {
    denials: HashMap<Box<str>, Denial>,
    swept_at: Instant,
}

struct Denial {
    rules: Box<[Rule]>,
    algorithm: Algorithm,
    /// The cost that was denied: a smaller one might pass.
    cost: NonZeroU64,
    decision: RawDecision,
    /// When the denial was answered, locally.
    at: Instant,
    /// When a call may pass again, locally: `at + retry_after`.
    until: Instant,
}

impl DenyCache {
    pub fn new() -> Self {
        DenyCache {
            shards: Sharded::new(SHARDS, |_| Shard {
                denials: HashMap::new(),
                swept_at: Instant::now(),
            }),
        }
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, Shard> {
        self.shards.lock(self.shards.hash(key))
    }

    /// The cached denial that answers `request`, its times moved to now: same key, rules
    /// and algorithm, a cost at least the one denied, before the denial's `retry_after`.
    pub fn lookup(&self, request: &Request<'_>) -> Option<RawDecision> {
        let now = Instant::now();
        let shard = self.shard(request.key);
        let denial = shard.denials.get(request.key)?;
        let applies = now < denial.until
            && request.cost >= denial.cost
            && request.algorithm == denial.algorithm
            && *denial.rules == *request.rules;
        applies.then(|| {
            let elapsed_us = clock::micros(now - denial.at);
            RawDecision {
                // Rounded up: a call retried after it must find the denial passed.
                retry_after_us: clock::micros_rounded_up(denial.until - now),
                reset_after_us: denial.decision.reset_after_us.saturating_sub(elapsed_us),
                ..denial.decision.clone()
            }
        })
    }

    /// Remembers `decision`, the backend's answer to `request`, when it is a denial with a
    /// time to retry at (a call that can never pass is not worth keeping: it is rare).
    pub fn remember(&self, request: &Request<'_>, decision: &RawDecision) {
        let Some(retry_after) = decision.retry_after() else {
            return;
        };
        if retry_after == Duration::ZERO {
            return;
        }
        let at = Instant::now();
        let denial = Denial {
            rules: request.rules.into(),
            algorithm: request.algorithm,
            cost: request.cost,
            decision: decision.clone(),
            at,
            until: at + retry_after,
        };
        let mut shard = self.shard(request.key);
        if shard.denials.len() >= SHARD_CAPACITY && !shard.denials.contains_key(request.key) {
            if at.duration_since(shard.swept_at) < SWEEP_INTERVAL {
                return;
            }
            shard.swept_at = at;
            shard.denials.retain(|_, d| d.until > at);
            if shard.denials.len() >= SHARD_CAPACITY {
                return;
            }
        }
        shard.denials.insert(request.key.into(), denial);
    }

    /// Forgets the denial of `key`, if any.
    pub fn forget(&self, key: &str) {
        self.shard(key).denials.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: [Rule; 1] = [Rule::new(2, Duration::from_secs(60))];

    fn request(key: &str, cost: u64) -> Request<'_> {
        Request {
            cost: NonZeroU64::new(cost).unwrap(),
            refundable: false,
            ..Request::new(key, &RULES, true)
        }
    }

    fn denied(retry_after: Duration) -> RawDecision {
        RawDecision::refused(0, 50_000_000, clock::micros(retry_after))
    }

    #[test]
    fn a_denial_answers_the_same_check_until_its_retry_after() {
        let cache = DenyCache::new();
        cache.remember(&request("k", 1), &denied(Duration::from_millis(50)));
        let d = cache.lookup(&request("k", 1)).expect("cached");
        assert!(!d.allowed);
        assert!(d.retry_after_us <= 50_000);
        assert!(d.reset_after_us <= 50_000_000);
        std::thread::sleep(Duration::from_millis(60));
        assert!(cache.lookup(&request("k", 1)).is_none(), "expired");
    }

    #[test]
    fn only_the_same_rules_algorithm_and_at_least_the_cost_are_answered() {
        let cache = DenyCache::new();
        cache.remember(&request("k", 2), &denied(Duration::from_secs(5)));
        assert!(cache.lookup(&request("k", 2)).is_some());
        assert!(cache.lookup(&request("k", 3)).is_some());
        assert!(
            cache.lookup(&request("k", 1)).is_none(),
            "a smaller cost may pass"
        );
        assert!(cache.lookup(&request("other", 2)).is_none());
        let other_rules = [Rule::new(3, Duration::from_secs(60))];
        let mut req = request("k", 2);
        req.rules = &other_rules;
        assert!(cache.lookup(&req).is_none());
        let mut req = request("k", 2);
        req.algorithm = Algorithm::TokenBucket;
        assert!(cache.lookup(&req).is_none());
        cache.forget("k");
        assert!(cache.lookup(&request("k", 2)).is_none());
    }

    #[test]
    fn admissions_and_never_passing_denials_are_not_kept() {
        let cache = DenyCache::new();
        let mut allowed = denied(Duration::from_secs(5));
        allowed.allowed = true;
        allowed.retry_after_us = 0;
        cache.remember(&request("a", 1), &allowed);
        let mut never = denied(Duration::from_secs(5));
        never.retry_after_us = RawDecision::NEVER;
        cache.remember(&request("n", 1), &never);
        assert!(cache.lookup(&request("a", 1)).is_none());
        assert!(cache.lookup(&request("n", 1)).is_none());
    }

    #[test]
    fn a_full_shard_keeps_serving_and_stays_bounded() {
        let cache = DenyCache::new();
        let keys: Vec<String> = (0..SHARDS * SHARD_CAPACITY * 2)
            .map(|i| format!("k{i}"))
            .collect();
        for key in &keys {
            cache.remember(&request(key, 1), &denied(Duration::from_secs(5)));
        }
        let held: usize = cache.shards.iter().map(|shard| shard.denials.len()).sum();
        assert!(held <= SHARDS * SHARD_CAPACITY, "{held}");
        assert!(held >= SHARDS * SHARD_CAPACITY / 2, "{held}");
    }
}
