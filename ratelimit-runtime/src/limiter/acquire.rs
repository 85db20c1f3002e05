//! [`Limiter::acquire`]'s builder: one of a key's slots, taken through the check pipeline.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::num::NonZeroU64;
use std::pin::Pin;
use std::time::Duration;

use super::{decided_with_slot, Begun, Plan};
use crate::backend::Request;
#[cfg(feature = "test-clock")]
use crate::clock;
use crate::concurrency::{Concurrency, SlotAsk, DEFAULT_LEASE};
use crate::{BackendError, Limiter, Slot};

/// A request for one of `max` slots of a key: returned by [`Limiter::acquire`], refined
/// with [`lease`](Acquire::lease) and [`wait`](Acquire::wait), run when awaited.
#[must_use = "an acquire does nothing until it is awaited"]
pub struct Acquire<'a> {
    limiter: &'a Limiter,
    key: &'a str,
    concurrency: Concurrency,
    wait: Option<Duration>,
    now_us: Option<NonZeroU64>,
}

impl<'a> Acquire<'a> {
    pub(crate) fn new(limiter: &'a Limiter, key: &'a str, max: u64) -> Self {
        Acquire {
            limiter,
            key,
            concurrency: Concurrency::new(max, DEFAULT_LEASE),
            wait: None,
            now_us: None,
        }
    }

    /// How long the slot outlives its holder's last renewal (default 30 s): the time a
    /// crashed process's slot stays taken. The holder renews it every third of it.
    ///
    /// # Panics
    ///
    /// When `lease` is under a millisecond or above [`Rule::MAX_WINDOW`](crate::Rule::MAX_WINDOW).
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
        self.now_us = Some(clock::explicit_us(clock::micros(now)));
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
            Begun::Answered(result) => decided_with_slot(result, &[], &ask),
            Begun::Waits(waits) => plan.resume(waits).await,
        }?;
        Ok(decision
            .allowed
            .then(|| limiter.slot_store(decision.receipt()))
            .flatten()
            .map(|store| Slot::held(store, key, &ask)))
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
