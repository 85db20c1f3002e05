//! The store a limiter counts in, and the one place an operation is routed to Redis, the
//! embedded backend or a misconfiguration. The limiter's modules call these methods; only
//! the check path (`answer.rs`, which answers the embedded backend without awaiting) and
//! the operations Redis alone has (bans, stored overrides) match on the store themselves.
//! Which store of a limiter an operation goes to (its own, its fallbacks) is decided in
//! `limiter.rs`; what a failure answers, in `failover.rs`.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "redis")]
use super::most_limited;
use super::most_limited::Refusals;
use crate::algorithm::StoredState;
use crate::backend::memory::MemoryBackend;
#[cfg(feature = "redis")]
use crate::backend::redis::RedisBackend;
use crate::backend::{GiveBack, Refund, Request, Settle};
use crate::concurrency::SlotId;
use crate::decision::{CountedBy, RawDecision};
use crate::observe::AnsweredBy;
use crate::{BackendError, BackendErrorKind, ConfigError};

/// One store: where every operation of a limiter goes (see the crate's module map). A
/// clone shares the backend: a held slot keeps its store.
#[derive(Clone)]
pub(crate) enum Store {
    // Behind a pointer: its connections make it several times larger than the other
    // variants. Shared with the rule-override poller.
    #[cfg(feature = "redis")]
    Redis(Arc<RedisBackend>),
    // Shared with the thread that saves its state, if any, and by the limiters of a test
    // that stand for instances over one remote store.
    Memory(Arc<MemoryBackend>),
    /// Built from an invalid environment; every check fails with this error.
    Misconfigured(ConfigError),
}

/// What a key holds, but for its slots, as [`Store::read_key`] finds it: its state, the
/// store's time when read (µs since the epoch) and how long until it expires (`None`:
/// never).
pub(super) type ReadKey = (StoredState, u64, Option<Duration>);

impl Store {
    /// The `backend` label of this store's answers (a misconfigured limiter is a Redis
    /// one whose URL was invalid).
    #[inline]
    pub(super) fn answered_by(&self) -> AnsweredBy {
        match self {
            Store::Memory(_) => AnsweredBy::MEMORY,
            #[cfg(feature = "redis")]
            Store::Redis(_) => AnsweredBy::REDIS,
            Store::Misconfigured(_) => AnsweredBy::REDIS,
        }
    }

    /// The backend's name, for `Debug`.
    pub(super) fn name(&self) -> &'static str {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis(_) => "redis",
            Store::Memory(_) => "memory",
            Store::Misconfigured(_) => "misconfigured",
        }
    }

    /// Whether this store counted a receipt counted by `counted_by`: one counted elsewhere
    /// (by the fallback) is refunded or settled there.
    #[inline]
    pub(super) fn counted(&self, counted_by: CountedBy) -> bool {
        match (self, counted_by) {
            (Store::Memory(_), CountedBy::Memory) => true,
            #[cfg(feature = "redis")]
            (Store::Redis(_), CountedBy::Redis) => true,
            _ => false,
        }
    }

    /// This store, to keep the slots it took (none when misconfigured: it takes none).
    pub(super) fn slot_store(&self) -> Option<Store> {
        match self {
            Store::Misconfigured(_) => None,
            store => Some(store.clone()),
        }
    }

    /// Renews the lease of the slot `id` of `key` for `lease_us` more; `false` when it is
    /// no longer held.
    pub(crate) async fn renew_slot(
        &self,
        key: &str,
        id: SlotId,
        lease_us: u64,
    ) -> Result<bool, BackendError> {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.renew_slot(key, id, lease_us).await,
            Store::Memory(memory) => Ok(memory.slots().renew(key, id, lease_us)),
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Frees the slot `id` of `key`.
    pub(crate) async fn release_slot(&self, key: &str, id: SlotId) -> Result<(), BackendError> {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.release_slot(key, id).await,
            Store::Memory(memory) => {
                memory.slots().release(key, id);
                Ok(())
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Frees the slot `id` of `key` now when that needs no round trip (the embedded
    /// backend's); `false`: [`release_slot`](Self::release_slot) must send it.
    pub(crate) fn release_slot_at_once(&self, key: &str, id: SlotId) -> bool {
        match self {
            Store::Memory(memory) => {
                memory.slots().release(key, id);
                true
            }
            _ => false,
        }
    }

    /// Checks `request` (the embedded backend answers at once).
    pub(super) async fn check(&self, request: &Request<'_>) -> Result<RawDecision, BackendError> {
        match self {
            Store::Memory(memory) => memory.check_now(request),
            Store::Misconfigured(err) => Err(misconfigured(err)),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.check(request).await,
        }
    }

    /// Checks `requests` as one, all or nothing.
    pub(super) async fn check_all(
        &self,
        requests: &[Request<'_>],
    ) -> Result<Vec<RawDecision>, BackendError> {
        match self {
            Store::Memory(memory) => memory.check_all_now(requests),
            Store::Misconfigured(err) => Err(misconfigured(err)),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.check_all(requests).await,
        }
    }

    /// Forgets everything counted for `key`, its block and its slots.
    pub(super) async fn reset(&self, key: &str) -> Result<(), BackendError> {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.reset(key).await,
            Store::Memory(memory) => {
                memory.reset_now(key);
                Ok(())
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Blocks `key` for `block_for_us` from `now_us` (`None`: the store's clock).
    pub(super) async fn block(
        &self,
        key: &str,
        block_for_us: u64,
        now_us: Option<u64>,
    ) -> Result<(), BackendError> {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.block(key, block_for_us, now_us).await,
            Store::Memory(memory) => {
                memory.block(key, block_for_us, now_us);
                Ok(())
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Gives back what `refund.receipt` took, when this store counted it.
    pub(super) async fn refund(&self, refund: &Refund<'_>) -> Result<(), BackendError> {
        match self {
            Store::Memory(memory) => {
                memory.refund(refund);
                Ok(())
            }
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.refund(refund).await,
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Settles what `settle.receipt` reserved and answers as its peek; `None` when the key
    /// no longer holds it.
    pub(super) async fn settle(
        &self,
        settle: &Settle<'_>,
    ) -> Result<Option<RawDecision>, BackendError> {
        match self {
            Store::Memory(memory) => memory.settle(settle).transpose(),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.settle(settle).await,
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Gives back the `retired` allowances at the store's clock (concurrently on Redis).
    pub(super) async fn give_back(&self, retired: &[GiveBack]) -> Result<(), BackendError> {
        match self {
            Store::Memory(memory) => {
                for retired in retired {
                    memory.give_back(retired, None);
                }
                Ok(())
            }
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.give_back_all(retired).await.into_iter().collect(),
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// What `key` holds, but for its slots.
    pub(super) async fn read_key(&self, key: &str) -> Result<Option<ReadKey>, BackendError> {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => Ok(redis
                .read_key(key)
                .await?
                .map(|found| (found.state, found.now_us, found.ttl))),
            Store::Memory(memory) => Ok(memory.inspect(key).map(|(state, now_us, expires)| {
                let ttl = Duration::from_micros(expires.saturating_sub(now_us));
                (state, now_us, Some(ttl))
            })),
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// How many slots of `key` are held now.
    pub(super) async fn slots_in_use(&self, key: &str) -> Result<u64, BackendError> {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.slots_in_use(key).await,
            Store::Memory(memory) => {
                let slots = memory.slots();
                Ok(slots.in_use(key, slots.now_us()))
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// The most refused identities of `site` under `prefix` over the last `since`, at most
    /// `n`: on the embedded backend, this process's `refusals`.
    pub(super) async fn most_limited(
        &self,
        refusals: &Refusals,
        prefix: &str,
        site: &str,
        since: Duration,
        n: usize,
    ) -> Result<Vec<(String, u64)>, BackendError> {
        match self {
            Store::Memory(_) => Ok(refusals.read_here(prefix, site, since, n)),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                let minutes = most_limited::minutes(since, most_limited::this_minute());
                redis.most_limited(prefix, site, minutes, n).await
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }
}

/// The error every operation of a misconfigured limiter answers.
pub(super) fn misconfigured(err: &ConfigError) -> BackendError {
    BackendError::new(BackendErrorKind::Misconfigured, err.to_string())
}
