//! Storage: the Redis backend, shared by every process, and the embedded in-process one.
//!
//! They differ in kind, so no trait stands over them: the embedded backend answers
//! synchronously (`check_now`, no future to build), Redis asynchronously. The limiter's
//! check pipeline takes the synchronous path whenever it can and awaits Redis otherwise.

pub(crate) mod memory;
pub(crate) mod memory_slots;
pub(crate) mod memory_state;
#[cfg(feature = "redis")]
pub(crate) mod redis;

use std::num::NonZeroU64;

use crate::algorithm::Call;
use crate::concurrency::SlotAsk;
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
    /// An explicit time in µs since the epoch, for differential tests; 0 means the
    /// backend's own clock (Redis `TIME`), as in the scripts' arguments. (Not an `Option`:
    /// a programmatic check holds its request, and stays within 128 bytes with it: see the
    /// assertion next to `Check`.)
    pub now_us: u64,
    /// When a consuming check is refused by a rule, the key then refuses every check (and
    /// peek) for this many µs, consuming nothing (see `algorithm::Block`); `None`: no
    /// block. Below 2^51 (71 years): the scripts read it with the call, as one exact double.
    pub block_for_us: Option<NonZeroU64>,
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
            block_for_us: None,
            now_us: 0,
            // A programmatic check's decision can be refunded (`Limiter::refund`); a guarded
            // site's only when it has `charge_if` (see `site.rs`).
            refundable: consume,
            slot: None,
            warn_at: 0,
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
            consume: self.consume,
            block_for_us: self.block_for_us,
        }
    }

    /// The time the request is checked at: its own, or else `clock`'s.
    #[inline]
    pub fn now_us_or(&self, clock: impl FnOnce() -> u64) -> u64 {
        match self.now_us {
            0 => clock(),
            now_us => now_us,
        }
    }
}
