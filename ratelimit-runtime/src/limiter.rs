use std::fmt;
use std::sync::Arc;
use std::time::Duration;

mod acquire;
mod allowance;
mod answer;
mod bans;
mod build;
mod check;
mod check_all;
pub(crate) use answer::Now;
pub(crate) use check::{boxed_in_place, checked_warn_at, decided, decided_with_slot, Begun, Plan};
mod deny_cache;
mod failover;
mod inspect;
pub(crate) mod most_limited;
mod operator;
mod refunds;
mod settle;
pub(crate) mod slot;
mod state_file;
mod store;
pub use slot::Slot;
pub(crate) use store::Store;
#[cfg(feature = "redis")]
mod stored_overrides;
mod unused;

pub use acquire::Acquire;
pub use check::Check;
pub use check_all::CheckAll;
pub use inspect::{BlockState, KeyState, LogState, RuleState};
#[cfg(feature = "redis")]
pub use stored_overrides::{OverrideError, StoredOverride, StoredOverrides};

use self::allowance::LocalAllowances;
use self::deny_cache::DenyCache;
use self::failover::Failover;
use self::refunds::Refunds;
use self::store::misconfigured;
use self::unused::Unused;
use crate::backend::memory_state::StateFile;
use crate::backend::Request;
use crate::decision::CountedBy;
use crate::overrides::Overrides;
use crate::Rule;

/// Checks rules against a backend: Redis (shared by every process) or the embedded
/// in-process memory backend.
///
/// `Limiter` is `Send + Sync`; share one per process (a `static`, an `Arc`, or the global
/// one set with [`init`](crate::init)).
///
/// ```
/// use std::time::Duration;
/// use redis_ratelimit::{Limiter, Rule};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// const REPLY: [Rule; 1] = [Rule::new(5, Duration::from_secs(60))];
/// let limiter = Limiter::memory();
/// let d = limiter.check("hist:tom:reply", &REPLY).await?;
/// assert!(d.allowed);
/// assert_eq!((d.limit, d.remaining), (5, 4));
/// # Ok(()) }
/// ```
pub struct Limiter {
    store: Store,
    /// What a check answers when `store` cannot: the fallbacks, fail-open or the error.
    failover: Failover,
    deny_cache: Option<DenyCache>,
    /// The decisions of the counting algorithms refunded, each refunded once.
    refunds: Refunds,
    /// Puts every guarded site in shadow mode, unless its own mode is overridden.
    shadow: bool,
    /// Rules overridden at run time, in process or stored in Redis.
    overrides: Arc<Overrides>,
    /// How often the overrides stored in Redis are read; `None`: never.
    rules_poll: Option<Duration>,
    /// Where the embedded backend saves its state, if anywhere (`limiter/state_file.rs`).
    state_file: Option<Arc<StateFile>>,
    /// Called once per crossing of a `warn_at` share (`on_warning`).
    warning_hook: Option<crate::warning::Hook>,
    /// The guarded sites' refusals by identity (`most_limited`).
    refusals: Arc<most_limited::Refusals>,
    /// Local allowances: whether checks spend them, the default one, the live ones (see
    /// `limiter/allowance.rs`).
    allowances: LocalAllowances,
    /// The options set that do nothing on this backend, warned of at the first check.
    unused: Unused,
}

impl Limiter {
    /// Checks `rules` for `key` and, if every rule admits the call, counts it.
    ///
    /// The returned [`Check`] is awaited directly (one unit, the sliding log) or refined
    /// first with [`cost`](Check::cost), [`algorithm`](Check::algorithm),
    /// [`wait`](Check::wait) and [`block_for`](Check::block_for):
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Algorithm, Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const UPLOADS: [Rule; 1] = [Rule::new(10, Duration::from_secs(60))];
    /// let limiter = Limiter::memory();
    /// let d = limiter.check("uploads:tom", &UPLOADS).cost(4).algorithm(Algorithm::TokenBucket).await?;
    /// assert_eq!((d.allowed, d.remaining), (true, 6));
    /// // More than a rule's count can never pass: denied, with no time to retry at.
    /// let d = limiter.check("uploads:tom", &UPLOADS).cost(11).algorithm(Algorithm::TokenBucket).await?;
    /// assert_eq!((d.allowed, d.retry_after), (false, None));
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// When `rules` is empty (when awaited).
    #[inline]
    pub fn check<'a>(&'a self, key: &'a str, rules: &'a [Rule]) -> Check<'a> {
        Check::new(self, Request::new(key, rules, true))
    }

    /// What a [`check`](Self::check) would decide now, counting nothing: `remaining` is
    /// what the binding rule has left *now* (the full count on a fresh key), `allowed`
    /// whether a call of the given [`cost`](Check::cost) would pass.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const REPLY: [Rule; 1] = [Rule::new(5, Duration::from_secs(60))];
    /// let limiter = Limiter::memory();
    /// assert_eq!(limiter.peek("hist:tom:reply", &REPLY).await?.remaining, 5);
    /// limiter.check("hist:tom:reply", &REPLY).await?;
    /// let d = limiter.peek("hist:tom:reply", &REPLY).cost(5).await?;
    /// assert_eq!((d.allowed, d.remaining), (false, 4));
    /// # Ok(()) }
    /// ```
    pub fn peek<'a>(&'a self, key: &'a str, rules: &'a [Rule]) -> Check<'a> {
        Check::new(self, Request::new(key, rules, false))
    }

    /// Takes one of `max` slots of `key` for a call in flight: at most `max` holders of
    /// `key`'s slots at once, in every process sharing the backend. The returned
    /// [`Acquire`](crate::Acquire) is awaited directly (a 30 s lease, no waiting) or refined
    /// first with [`lease`](crate::Acquire::lease) and [`wait`](crate::Acquire::wait); it
    /// answers `None` when every slot is taken (after waiting, when asked to).
    ///
    /// The [`Slot`](crate::Slot) is held until it is released or dropped, and renewed
    /// meanwhile; a holder that stops renewing (its process died) leaves a slot that lapses
    /// `lease` later. [`reset`](Self::reset) frees every slot of the key. A slot is kept on
    /// Redis in a second key in the hash slot of `key` (so a Cluster serves both from one
    /// node): `{key}:slots`, or `key` then `:slots` when `key` has a hash tag of its own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::memory();
    /// let slot = limiter.acquire("report:acme", 2).lease(Duration::from_secs(10)).await?;
    /// let Some(slot) = slot else {
    ///     return Ok(()); // two reports of acme are running already
    /// };
    /// // ... build the report ...
    /// slot.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// When `max` is 0 or above [`Rule::MAX_COUNT`].
    pub fn acquire<'a>(&'a self, key: &'a str, max: u64) -> Acquire<'a> {
        Acquire::new(self, key, max)
    }
}

// The fallback's routing, written once: an operation on a decision goes to the store that
// counted it; one on a key (reset, block) to every store, the last fallback first.
impl Limiter {
    /// The store that counted a receipt counted by `counted_by`: this limiter's own or a
    /// fallback; `None` when none did (an allowance's, a misconfigured store's).
    fn counter_of(&self, counted_by: CountedBy) -> Option<&Store> {
        self.stores().find(|store| store.counted(counted_by))
    }

    /// The fallbacks' backends, in the order they are asked (for `Debug`).
    fn fallback_names(&self) -> Vec<&'static str> {
        self.failover.fallbacks().iter().map(Store::name).collect()
    }

    /// This limiter's store, then its fallbacks in the order they are asked.
    fn stores(&self) -> impl DoubleEndedIterator<Item = &Store> {
        std::iter::once(&self.store).chain(self.failover.fallbacks())
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Limiter");
        debug.field("backend", &self.store.name());
        #[cfg(feature = "redis")]
        if let Store::Redis(redis) = &self.store {
            debug.field("redis", redis.config());
        }
        debug
            .field("fail_open", &self.failover.is_fail_open())
            .field("fallback", &self.fallback_names())
            .field("deny_cache", &self.deny_cache.is_some())
            .field("shadow", &self.shadow)
            .field("rules_poll", &self.rules_poll)
            .field("on_warning", &crate::warning::HookSet(&self.warning_hook))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Limiter>();
    }
}
