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
use std::time::Duration;

use super::Store;
use crate::concurrency::{SlotAsk, SlotId, SLOT_RETRY_HINT};
use crate::throttle::throttled;
use crate::BackendError;

/// One of the slots of a key, held while a call runs: taken by
/// [`Limiter::acquire`](crate::Limiter::acquire), or by a guarded call with `concurrency`.
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
    held: Option<Box<Lease>>,
}

struct Lease {
    /// The store that took it, which renews and releases it.
    store: Store,
    /// The rules' key the slot belongs to.
    key: String,
    id: SlotId,
    lease_us: u64,
    renewal: Option<tokio::task::AbortHandle>,
}

impl Slot {
    /// The `retry_after` of a call refused because every slot is taken: a short hint, as
    /// nobody knows when a running call ends. A call that [`wait`](crate::Acquire::wait)s checks
    /// again after it (plus a little jitter).
    ///
    /// A guarded call refused so gets [`RateLimitError::Limited`](crate::RateLimitError)
    /// with this `retry_after` and, as its `rule`, the concurrency limit written as a rule:
    /// its count is the limit, its window the lease. Its decision's `rule_index` is the
    /// number of the site's rules (the limit stands after them), and an HTTP answer names
    /// the policy `"conc"`, with `qu="concurrent-requests"`.
    pub const RETRY_HINT: Duration = SLOT_RETRY_HINT;

    /// The slot `ask` took for `key` in `store`, renewed from now on.
    pub(crate) fn held(store: Store, key: &str, ask: &SlotAsk) -> Slot {
        let mut held = Box::new(Lease {
            store,
            key: key.to_owned(),
            id: ask.id,
            lease_us: ask.lease_us,
            renewal: None,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (store, key, id, lease_us) =
                (held.store.clone(), held.key.clone(), held.id, held.lease_us);
            let task = runtime.spawn(renew(store, key, id, lease_us));
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

impl Lease {
    async fn release(self) -> Result<(), BackendError> {
        if let Some(renewal) = &self.renewal {
            renewal.abort();
        }
        self.store.release_slot(&self.key, self.id).await
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
        if held.store.release_slot_at_once(&held.key, held.id) {
            return;
        }
        // Without a runtime nothing can be sent: the slot lapses (see `Slot`).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = held.release().await {
                    warn_release_failed(&err);
                }
            });
        }
    }
}

/// Logs a release that could not reach the backend, at most once per
/// [`LogThrottle::INTERVAL`](crate::throttle::LogThrottle::INTERVAL) in the process: the
/// slot lapses when its lease ends.
pub(crate) fn warn_release_failed(err: &BackendError) {
    throttled!(
        warn,
        [error = %err],
        "could not release a slot; it lapses when its lease ends",
    );
}

/// Renews the slot every third of its lease until it is aborted, or the slot is found
/// lapsed (another call may hold its place since: it is not taken again).
async fn renew(store: Store, key: String, id: SlotId, lease_us: u64) {
    let every = Duration::from_micros(lease_us / 3).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(every).await;
        match store.renew_slot(&key, id, lease_us).await {
            Ok(true) => {}
            Ok(false) => {
                throttled!(
                    warn,
                    [key = %key],
                    "a running call's slot lapsed or was reset before it was renewed; \
                     the call goes on without it (raise the lease if renewals are late)",
                );
                return;
            }
            // The next renewal may get through; the lease covers two more tries.
            Err(err) => {
                throttled!(
                    warn,
                    [key = %key, error = %err],
                    "could not renew a slot's lease",
                );
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
