//! Storage: the Redis backend, shared by every process, and the embedded in-process one.
//!
//! They differ in kind, so no trait stands over them: the embedded backend answers
//! synchronously (`check_now`, no future to build), Redis asynchronously. The limiter's
//! check pipeline takes the synchronous path whenever it can and awaits Redis otherwise.

pub(crate) mod memory;
pub(crate) mod memory_slots;
pub(crate) mod memory_state;
#[cfg(feature = "test-clock")]
pub mod probe;
#[cfg(feature = "redis")]
pub(crate) mod redis;

use std::num::NonZeroU64;

use crate::algorithm::{Call, Returned, Settled};
use crate::concurrency::SlotAsk;
use crate::decision::Receipt;
use crate::lockout::Packed;
use crate::{Algorithm, Rule};

/// One check of one key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    pub key: &'a str,
    pub rules: &'a [Rule],
    pub algorithm: Algorithm,
    /// How many units of every rule the call uses.
    pub cost: NonZeroU64,
    /// `false` for a peek: answer as a check would, record nothing.
    pub consume: bool,
    /// An explicit time in µs since the epoch, for differential tests; `None`: the
    /// backend's own clock (Redis `TIME`).
    pub now_us: Option<NonZeroU64>,
    /// When a consuming check is refused by a rule, the key then refuses every check (and
    /// peek) for as long as this says, consuming nothing (see `algorithm::Block`); `None`:
    /// no block. Each duration below 2^51 µs (71 years): the scripts read the first with
    /// the call, as one exact double.
    pub lockout: Option<Packed>,
    /// Whether the caller may refund the decision (`Receipt`). The memory backend and the
    /// sliding log can always refund; a string-state script (fixed window, sliding window,
    /// token bucket) then also answers the time the check was counted at, which a refund
    /// needs and which costs Redis about 3 % more per check (a string to make). Without it,
    /// the receipt of such a decision counted by Redis is empty: a refund gives nothing
    /// back.
    // Only Redis reads it: the embedded backend always keeps what a refund needs.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub refundable: bool,
    /// A slot to take with the check, all or nothing (calls in flight, `slot.rs`);
    /// `None` for a check that takes none, which costs nothing more.
    pub slot: Option<&'a SlotAsk>,
    /// A consuming check that takes a rule from below this percentage of its count to at
    /// or above it is told so by the backend (`warning.rs`); 0: no warning, which costs
    /// nothing more.
    pub warn_at: u8,
    /// An allowance to draw with the check (see [`Draw`]); `None` for a plain check, which
    /// costs nothing more.
    pub draw: Option<&'a Draw>,
    /// How long a local allowance this check may spend from lives, in ms (0: none; see
    /// `limiter/allowance.rs`). Read by the limiter alone, before any backend sees the
    /// check; kept here, in what would be padding, so that a check stays within 128 bytes.
    pub allowance_ms: u32,
}

/// An allowance drawn by a check: a reservation of `cost` units of every rule counting
/// units and `calls` calls of every rule counting calls, all or nothing, as a check of
/// them would take, but recorded as spent at the latest time they may be spent: `hold_us`
/// after the time the draw is counted at (`d`), shortened by [`hold_at`](Draw::hold_at).
/// Its answer's receipt names the draw's records for [`GiveBack`]: `at_us` is `d`, `cost`
/// the units drawn; `id` the sliding log's id, the token bucket's first rule's
/// theoretical arrival time after the draw (what a give-back finds unmoved when no later
/// charge came), the fixed and sliding window's draw number. Its `remaining` is what the
/// key has left after the draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Draw {
    /// What the rules counting calls take: the calls the allowance stands for.
    pub calls: NonZeroU64,
    /// How long after the draw its units may be spent, in µs.
    pub hold_us: u64,
}

impl Draw {
    /// The hold a draw of `rules` by `algorithm`, counted at `at_us` (the receipt's), gets:
    /// its own, never more than a quarter of the shortest window, and never past the end
    /// (less 1 µs) of the aligned window (fixed and sliding window) it was counted in, nor
    /// of its UTC day when a rule counts in calendar periods. Its units are recorded at `at_us + hold_at(..)`; an instance spends
    /// them until then at the latest. Both backends and the limiter compute it here.
    pub fn hold_at(&self, rules: &[Rule], algorithm: Algorithm, at_us: u64) -> u64 {
        crate::algorithm::draw_hold_us(rules, algorithm, at_us, self.hold_us)
    }
}

/// A refund: what `receipt` (of a decision made for `key` and `rules`) took, given back
/// as far as the key's state still holds it (see `algorithm::Counter::refund`). Each
/// backend gives back only what it counted itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Refund<'a> {
    pub key: &'a str,
    pub rules: &'a [Rule],
    pub receipt: Receipt,
    /// An explicit time in µs since the epoch, for differential tests; `None`: the
    /// backend's own clock.
    pub now_us: Option<u64>,
}

/// A settle: what `receipt` (of a decision made for `peek.key` and `peek.rules`) reserved,
/// replaced by `actual` units as far as the key's state still counts it (see
/// `algorithm::StoredState::settle`), then `peek` answered, in one step. Each backend
/// settles only what it counted itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settle<'a> {
    /// The peek of cost 1 that answers.
    pub peek: Request<'a>,
    pub receipt: Receipt,
    pub actual: u64,
}

impl Settle<'_> {
    /// The settle as the algorithms apply it, to the peek's rules.
    pub fn settled(&self) -> Settled<'_> {
        Settled {
            rules: self.peek.rules,
            receipt: self.receipt,
            actual: self.actual,
        }
    }
}

/// What an allowance leaves when its life ends: giving back what its draw did not use,
/// and re-timing what it did. Unused units and calls are no longer counted; the used ones
/// are counted as spent at `last_spend_us` instead of at the draw's hold time. Sent twice,
/// it changes the key once.
#[derive(Clone, Debug)]
pub(crate) struct GiveBack {
    pub key: Box<str>,
    /// The draw's rules.
    pub rules: Box<[Rule]>,
    /// What was drawn (its `calls` and requested `hold_us`).
    pub draw: Draw,
    /// The draw's receipt: its algorithm, units (`cost`), time and id.
    pub receipt: Receipt,
    /// Calls spent of the draw's `calls` (at most them).
    pub used_calls: u64,
    /// Units spent of the draw's units (at most them).
    pub used_units: u64,
    /// When the last of them was spent, µs on the backend's clock: at least the draw's
    /// time, at most its time plus its hold. Unread when nothing was used.
    pub last_spend_us: u64,
}

impl GiveBack {
    /// The give-back as the algorithms apply it: the draw's hold as [`Draw::hold_at`]
    /// gave it, and what was not used.
    pub fn returned(&self) -> Returned<'_> {
        let receipt = &self.receipt;
        let units = receipt.cost;
        let (used_units, used_calls) = (
            self.used_units.min(units),
            self.used_calls.min(self.draw.calls.get()),
        );
        Returned {
            rules: &self.rules,
            at_us: receipt.at_us,
            id: receipt.id,
            hold_us: self
                .draw
                .hold_at(&self.rules, receipt.algorithm, receipt.at_us),
            units: units - used_units,
            calls: self.draw.calls.get() - used_calls,
            used_units,
            used_calls,
            last_spend_us: self.last_spend_us,
        }
    }
}

impl<'a> Request<'a> {
    /// A check (`consume`) or peek of one unit of `rules` for `key`, by the sliding log.
    pub fn new(key: &'a str, rules: &'a [Rule], consume: bool) -> Self {
        Request {
            key,
            rules,
            algorithm: Algorithm::SlidingLog,
            cost: NonZeroU64::MIN,
            consume,
            lockout: None,
            now_us: None,
            // A programmatic check's decision can be refunded (`Limiter::refund`); a guarded
            // site's only when it has `charge_if` (see `site.rs`).
            refundable: consume,
            slot: None,
            warn_at: 0,
            draw: None,
            allowance_ms: 0,
        }
    }

    /// A check of `rules` for `key` (none: the slot alone) that also takes the slot `ask`
    /// asks for.
    pub fn with_slot(key: &'a str, rules: &'a [Rule], ask: &'a SlotAsk) -> Self {
        Request {
            refundable: false,
            slot: Some(ask),
            ..Request::new(key, rules, true)
        }
    }

    /// The check as the algorithms count it, at `now_us` (see [`now_us_or`](Self::now_us_or)).
    #[inline]
    pub fn call(&self, now_us: u64) -> Call<'a> {
        Call {
            rules: self.rules,
            now_us,
            cost: self.cost.get(),
            calls: self.draw.map_or(1, |draw| draw.calls.get()),
            hold_us: self.draw.map_or(0, |draw| draw.hold_us),
            draw: self.draw.is_some(),
            consume: self.consume,
            lockout: self.lockout,
        }
    }

    /// The time the request is checked at: its own, or else `clock`'s.
    #[inline]
    pub fn now_us_or(&self, clock: impl FnOnce() -> u64) -> u64 {
        self.now_us.map_or_else(clock, NonZeroU64::get)
    }
}
