//! Calls in flight: at most `max` calls of one key at once, each holding a slot.
//!
//! A slot is a lease, not a lock. It is stored in the backend with the end of its lease;
//! its holder renews it while the call runs (every third of the lease) and releases it
//! when the call ends, and a holder that stops (its process died) leaves a slot that
//! lapses by itself `lease` later. On Redis the key's slots are a ZSET of slot ids scored
//! by the end of their lease, under a second key in the same hash slot as the rules' key
//! (`slots_key`), taken by the same script as the rules, in the same round trip (see
//! `scripts/slot.lua`); the embedded backend keeps the same sets by its clock.
//!
//! Renewal runs in one task per slot, on the runtime of the call that took it, rather
//! than in one task per process: a call and its renewal then share a runtime, so a
//! runtime that shuts down (a `#[tokio::test]`'s, an actix worker's) stops renewing only
//! the slots of its own calls, which lapse; one task per process would live on one
//! runtime and stop every slot's renewal with it. A task costs a few hundred bytes and one
//! timer, and a renewal is one command either way.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "redis")]
use std::sync::Arc;
use std::sync::LazyLock;
use std::time::Duration;

use crate::backend::memory_slots::MemorySlots;
#[cfg(feature = "redis")]
use crate::backend::redis::RedisBackend;
use crate::backend::Request;
use crate::limiter::{decided_with_slot, Begun, Plan};
use crate::throttle::LogThrottle;
use crate::{clock, random, BackendError, Limiter, Rule};

/// The lease of a slot unless told otherwise. Not public API: see [`Acquire::lease`].
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A site's limit on calls in flight (the attribute's `concurrency` and `lease`, or
/// [`Guard::concurrency`](crate::Guard::concurrency)). Not public API.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concurrency {
    /// The most calls of one key running at once (at least 1).
    pub max: u64,
    /// How long a slot outlives its holder's last renewal.
    pub lease: Duration,
}

impl Concurrency {
    /// At most `max` calls at once, each slot leased for `lease`.
    ///
    /// # Panics
    ///
    /// When `max` is 0 or above [`Rule::MAX_COUNT`], or `lease` is under a millisecond or
    /// above [`Rule::MAX_WINDOW`].
    pub const fn new(max: u64, lease: Duration) -> Concurrency {
        assert!(
            max >= 1 && max <= Rule::MAX_COUNT,
            "concurrency must be at least 1 and at most 2^52"
        );
        assert!(
            lease.as_millis() >= 1 && lease.as_micros() <= Rule::MAX_WINDOW.as_micros(),
            "a slot's lease must last at least 1 ms and at most 2^52 µs"
        );
        Concurrency { max, lease }
    }
}

/// What a check that takes a slot asks for, carried by its [`Request`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotAsk {
    pub max: u64,
    pub lease_us: u64,
    pub id: SlotId,
}

impl SlotAsk {
    pub fn new(concurrency: Concurrency) -> SlotAsk {
        SlotAsk {
            max: concurrency.max,
            lease_us: clock::micros(concurrency.lease),
            id: SlotId::next(),
        }
    }

    /// The decision of a check refused because every slot is taken: bound by the
    /// concurrency limit, which stands after the `rules` checked (`rule_index` is their
    /// number), its `retry_after` the [`Slot::RETRY_HINT`]. See
    /// [`RawDecision::into_decision`](crate::decision::RawDecision::into_decision).
    pub fn full(&self, rules: &[Rule]) -> crate::decision::RawDecision {
        self.answer(rules, false, 0)
    }

    /// The decision of a slot taken without rules, `free` slots left after it.
    pub fn taken(&self, free: u64) -> crate::decision::RawDecision {
        self.answer(&[], true, free)
    }

    fn answer(&self, rules: &[Rule], allowed: bool, free: u64) -> crate::decision::RawDecision {
        crate::decision::RawDecision {
            allowed,
            rule_index: rules.len(),
            remaining: free,
            reset_after_us: self.lease_us,
            retry_after_us: if allowed {
                0
            } else {
                clock::micros(Slot::RETRY_HINT)
            },
            // The limit rides in the receipt's id, which names nothing for a decision
            // that took no units: `into_decision` reads it back.
            receipt: crate::decision::Receipt {
                id: self.max,
                ..crate::decision::Receipt::NONE
            },
        }
    }
}

/// A slot's id: a random prefix per process, then a counter. Unique across processes with
/// near certainty, so a slot's holder alone renews and releases it, and a re-sent check
/// finds its own slot rather than taking a second.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SlotId(pub [u8; 16]);

impl SlotId {
    fn next() -> SlotId {
        static PREFIX: LazyLock<u64> = LazyLock::new(random::u64);
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut id = [0; 16];
        id[..8].copy_from_slice(&PREFIX.to_le_bytes());
        id[8..].copy_from_slice(&NEXT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        SlotId(id)
    }
}

impl fmt::Debug for SlotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// One of the slots of a key, held while a call runs: taken by
/// [`Limiter::acquire`], or by a guarded call with `concurrency`.
///
/// Its lease is renewed in the background while it is held (every third of the lease, in
/// a task on the runtime that took it). [`release`](Slot::release) frees it and says
/// whether the backend heard; dropping it frees it too:
/// - on the embedded backend, at once;
/// - on Redis, by a command sent from a task spawned on the current Tokio runtime. Dropped
///   where there is none (outside a runtime, or after the runtime has shut down, as at the
///   end of a `#[tokio::test]` whose runtime drops it), nothing can be sent: the renewal
///   stops with its runtime, and the slot lapses `lease` after its last renewal.
///
/// ```
/// use redis_ratelimit::Limiter;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::memory();
/// let first = limiter.acquire("export:acme", 1).await?.expect("a free slot");
/// assert!(limiter.acquire("export:acme", 1).await?.is_none()); // every slot taken
/// first.release().await?;
/// assert!(limiter.acquire("export:acme", 1).await?.is_some());
/// # Ok(()) }
/// ```
#[must_use = "a slot is released as soon as it is dropped"]
pub struct Slot {
    held: Option<Box<Held>>,
}

struct Held {
    home: Home,
    /// The rules' key the slot belongs to.
    key: String,
    id: SlotId,
    lease_us: u64,
    renewal: Option<tokio::task::AbortHandle>,
}

/// Where a slot is kept.
#[derive(Clone)]
pub(crate) enum Home {
    #[cfg(feature = "redis")]
    Redis(Arc<RedisBackend>),
    Memory(std::sync::Arc<MemorySlots>),
}

impl Slot {
    /// The `retry_after` of a call refused because every slot is taken: a short hint, as
    /// nobody knows when a running call ends. A call that [`wait`](Acquire::wait)s checks
    /// again after it (plus a little jitter).
    ///
    /// A guarded call refused so gets [`RateLimitError::Limited`](crate::RateLimitError)
    /// with this `retry_after` and, as its `rule`, the concurrency limit written as a rule:
    /// its count is the limit, its window the lease. Its decision's `rule_index` is the
    /// number of the site's rules (the limit stands after them), and an HTTP answer names
    /// the policy `"conc"`, with `qu="concurrent-requests"`.
    pub const RETRY_HINT: Duration = Duration::from_millis(50);

    /// The slot `ask` took for `key` in `home`, renewed from now on.
    pub(crate) fn held(home: Home, key: &str, ask: &SlotAsk) -> Slot {
        let mut held = Box::new(Held {
            home,
            key: key.to_owned(),
            id: ask.id,
            lease_us: ask.lease_us,
            renewal: None,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (home, key, id, lease_us) =
                (held.home.clone(), held.key.clone(), held.id, held.lease_us);
            let task = runtime.spawn(renew(home, key, id, lease_us));
            held.renewal = Some(task.abort_handle());
        }
        Slot { held: Some(held) }
    }

    /// Frees the slot now, and says whether the backend heard. A release that cannot reach
    /// Redis leaves the slot to lapse `lease` after its last renewal.
    pub async fn release(mut self) -> Result<(), BackendError> {
        match self.held.take() {
            Some(held) => held.release().await,
            None => Ok(()),
        }
    }

    /// The key whose slot this is.
    pub fn key(&self) -> &str {
        self.held.as_ref().map_or("", |held| &held.key)
    }

    /// How long the slot outlives its last renewal.
    pub fn lease(&self) -> Duration {
        self.held
            .as_ref()
            .map_or(Duration::ZERO, |held| Duration::from_micros(held.lease_us))
    }
}

impl Held {
    async fn release(self) -> Result<(), BackendError> {
        if let Some(renewal) = &self.renewal {
            renewal.abort();
        }
        match &self.home {
            #[cfg(feature = "redis")]
            Home::Redis(redis) => redis.release_slot(&self.key, self.id).await,
            Home::Memory(memory) => {
                memory.release(&self.key, self.id);
                Ok(())
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        if let Some(renewal) = &held.renewal {
            renewal.abort();
        }
        match &held.home {
            #[cfg(feature = "redis")]
            Home::Redis(_) => {
                // Without a runtime nothing can be sent: the slot lapses (see `Slot`).
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        if let Err(err) = held.release().await {
                            warn_release_failed(&err);
                        }
                    });
                }
            }
            Home::Memory(memory) => memory.release(&held.key, held.id),
        }
    }
}

/// Logs a release that could not reach the backend, at most once per
/// [`LogThrottle::INTERVAL`] in the process: the slot lapses when its lease ends.
pub(crate) fn warn_release_failed(err: &BackendError) {
    static FAILURES: LogThrottle = LogThrottle::new();
    if let Some(suppressed) = FAILURES.admit() {
        tracing::warn!(
            target: "redis_ratelimit",
            error = %err,
            suppressed,
            "could not release a slot; it lapses when its lease ends",
        );
    }
}

/// Renews the slot every third of its lease until it is aborted, or the slot is found
/// lapsed (another call may hold its place since: it is not taken again).
async fn renew(home: Home, key: String, id: SlotId, lease_us: u64) {
    let every = Duration::from_micros(lease_us / 3).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(every).await;
        let held: Result<bool, BackendError> = match &home {
            #[cfg(feature = "redis")]
            Home::Redis(redis) => redis.renew_slot(&key, id, lease_us).await,
            Home::Memory(memory) => Ok(memory.renew(&key, id, lease_us)),
        };
        match held {
            Ok(true) => {}
            Ok(false) => {
                static LAPSED: LogThrottle = LogThrottle::new();
                if let Some(suppressed) = LAPSED.admit() {
                    tracing::warn!(
                        target: "redis_ratelimit",
                        key = %key,
                        suppressed,
                        "a running call's slot lapsed or was reset before it was renewed; \
                         the call goes on without it (raise the lease if renewals are late)",
                    );
                }
                return;
            }
            // The next renewal may get through; the lease covers two more tries.
            Err(err) => {
                static FAILURES: LogThrottle = LogThrottle::new();
                if let Some(suppressed) = FAILURES.admit() {
                    tracing::warn!(
                        target: "redis_ratelimit",
                        key = %key,
                        error = %err,
                        suppressed,
                        "could not renew a slot's lease",
                    );
                }
            }
        }
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Slot");
        if let Some(held) = &self.held {
            debug
                .field("key", &held.key)
                .field("id", &held.id)
                .field("lease", &Duration::from_micros(held.lease_us));
        }
        debug.finish_non_exhaustive()
    }
}

/// A request for one of `max` slots of a key: returned by [`Limiter::acquire`], refined
/// with [`lease`](Acquire::lease) and [`wait`](Acquire::wait), run when awaited.
#[must_use = "an acquire does nothing until it is awaited"]
pub struct Acquire<'a> {
    limiter: &'a Limiter,
    key: &'a str,
    concurrency: Concurrency,
    wait: Option<Duration>,
    now_us: u64,
}

impl<'a> Acquire<'a> {
    pub(crate) fn new(limiter: &'a Limiter, key: &'a str, max: u64) -> Self {
        Acquire {
            limiter,
            key,
            concurrency: Concurrency::new(max, DEFAULT_LEASE),
            wait: None,
            now_us: 0,
        }
    }

    /// How long the slot outlives its holder's last renewal (default 30 s): the time a
    /// crashed process's slot stays taken. The holder renews it every third of it.
    ///
    /// # Panics
    ///
    /// When `lease` is under a millisecond or above [`Rule::MAX_WINDOW`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.concurrency = Concurrency::new(self.concurrency.max, lease);
        self
    }

    /// Waits up to `budget` for a slot instead of answering `None` at once, checking
    /// again every [`Slot::RETRY_HINT`] (plus a little jitter). Waiters are not served in
    /// order of arrival.
    pub fn wait(mut self, budget: Duration) -> Self {
        self.wait = Some(budget);
        self
    }

    /// Takes the slot at an explicit time (since the epoch) instead of the backend's
    /// clock. For differential tests only.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub fn at(mut self, now: Duration) -> Self {
        self.now_us = clock::micros(now);
        self
    }

    async fn run(self) -> Result<Option<Slot>, BackendError> {
        let Acquire {
            limiter,
            key,
            concurrency,
            wait,
            now_us,
        } = self;
        let ask = SlotAsk::new(concurrency);
        let request = Request {
            now_us,
            ..Request::with_slot(key, &[], &ask)
        };
        let plan = Plan::programmatic(limiter, request, wait);
        let decision = match plan.begin() {
            Begun::Answered(result) => decided_with_slot(result, &[]),
            Begun::Waits(waits) => plan.resume(waits).await,
        }?;
        Ok(decision
            .allowed
            .then(|| limiter.slot_home(decision.receipt()))
            .flatten()
            .map(|home| Slot::held(home, key, &ask)))
    }
}

impl<'a> IntoFuture for Acquire<'a> {
    type Output = Result<Option<Slot>, BackendError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("key", &self.key)
            .field("max", &self.concurrency.max)
            .field("lease", &self.concurrency.lease)
            .field("wait", &self.wait)
            .finish()
    }
}
