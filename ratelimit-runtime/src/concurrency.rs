//! What a site's limit on calls in flight is, and what a check that takes a slot asks the
//! backend for: the plain data that the limiter, the backends and the slots' handle
//! (`slot.rs`) share, so that none of them imports another for it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use crate::decision::{Bound, RawDecision, Receipt};
use crate::{clock, random, Rule};

/// The `retry_after` of a call refused because every slot is taken (`Slot::RETRY_HINT`).
pub(crate) const SLOT_RETRY_HINT: Duration = Duration::from_millis(50);

/// The lease of a slot unless told otherwise. Not public API: see
/// [`Acquire::lease`](crate::Acquire::lease).
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
    /// number), its `retry_after` the [`Slot::RETRY_HINT`](crate::Slot::RETRY_HINT). See
    /// [`RawDecision::into_decision`](RawDecision::into_decision).
    pub fn full(&self, rules: &[Rule]) -> RawDecision {
        self.answer(rules, false, 0)
    }

    /// The decision of a slot taken without rules, `free` slots left after it.
    pub fn taken(&self, free: u64) -> RawDecision {
        self.answer(&[], true, free)
    }

    fn answer(&self, rules: &[Rule], allowed: bool, free: u64) -> RawDecision {
        RawDecision {
            allowed,
            rule_index: rules.len(),
            remaining: free,
            reset_after_us: self.lease_us,
            retry_after_us: if allowed {
                0
            } else {
                clock::micros(SLOT_RETRY_HINT)
            },
            receipt: Receipt::NONE,
            bound: Bound::Slots,
            crossed: None,
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
