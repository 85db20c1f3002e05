//! Sliding window: the weighted two-window counter (O(1) memory per rule, approximate).
//!
//! A rule of `count` per `window` (µs) counts units in windows aligned to the epoch, like
//! the fixed window, and estimates the units in the sliding window ending now as the
//! current window's count plus the previous window's count weighted by how much of it the
//! sliding window still overlaps. A check is counted at `now' = max(now, latest stored
//! window start)` (see [`super::Clamp`]). Per rule, with `w` the window, `e = now' mod w`
//! the time elapsed in the current window, `curr` and `prev` the counts of the current and
//! previous aligned windows (0 for any window not stored, so stale state decides exactly
//! like absent state), the weighted previous count rounded up,
//! `W = ceil(prev * (w - e) / w)`, and a call of `n` units:
//!
//! - left now: `count - curr - W`; the rule admits the call when the estimate including
//!   it stays within the rule: `curr + n + W <= count` (so never more than `count` in one
//!   aligned window);
//! - admitted: `reset_after = 2w - e` (the end of the next window, when the estimate
//!   reaches 0 with nothing more admitted);
//! - denied: `reset_after` = until the estimate reaches 0 (`2w - e` when `curr > 0`, else
//!   `w - e`), and `retry_after` = the exact time until the rule would admit the call:
//!   with `k = count - curr - n >= 0`, when the previous window's weight has shrunk to
//!   `k`, at `e' = w - floor(w * k / prev)` in this window (`e' = w`, the next window's
//!   start, when that is 0); with `curr + n > count`, in the next window, where `curr`
//!   becomes the previous count, at `e' = w - floor(w * (count - n) / curr)`;
//! - never (`n > count`): denied with [`RawDecision::NEVER`].
//!
//! The call is admitted when every rule admits it, and then counted in every rule's
//! current window (see [`super::records`]).
//!
//! All arithmetic is on integers, exact. `scripts/sliding_window.lua` computes the same
//! products-then-quotients in doubles directly while a product stays below 2^52, and by a
//! long multiplication that never leaves 2^53 beyond, so the two agree bit for bit while
//! times, windows and counts stay below 2^52.
//!
//! A write stores the counts of the rules it checked, and only those, as the fixed window
//! does (which explains why). The key lives at least until the end of the next window,
//! after which the current count no longer weighs on anything.
//!
//! [`RawDecision::NEVER`]: crate::decision::RawDecision::NEVER

use super::calendar::Period;
use super::records::{PerRule, Verdict};
use super::Figures;
use crate::{Algorithm, Rule};

/// The counts of one key: per rule of the last write, the last window it counted in and
/// the one before.
pub(crate) type State = super::records::State<SlidingWindow>;

/// The sliding window's arithmetic.
#[derive(Debug)]
pub(crate) enum SlidingWindow {}

/// A rule's record, as the script's `window_start_us, curr, prev` after `count, window_us`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Windows {
    /// Start of the window `curr` counts.
    start_us: u64,
    curr: u64,
    /// The count of the window before `start_us`.
    prev: u64,
}

/// `floor(a * b / d)`, exact.
fn mul_div(a: u64, b: u64, d: u64) -> u64 {
    match a.checked_mul(b) {
        Some(p) => p / d,
        None => (u128::from(a) * u128::from(b) / u128::from(d)) as u64,
    }
}

impl super::saved::SavedRecord for Windows {
    fn save(&self, out: &mut super::saved::Writer<'_>) {
        out.number(self.start_us);
        out.number(self.curr);
        out.number(self.prev);
    }

    fn restore(from: &mut super::saved::Reader<'_>) -> Option<Self> {
        Some(Windows {
            start_us: from.number()?,
            curr: from.number()?,
            prev: from.number()?,
        })
    }
}

impl PerRule for SlidingWindow {
    const ALGORITHM: Algorithm = Algorithm::SlidingWindow;

    type Record = Windows;

    #[cfg(feature = "redis")]
    const NUMBERS: usize = 3;

    #[cfg(feature = "redis")]
    fn from_numbers(numbers: &[u64]) -> Self::Record {
        Windows {
            start_us: numbers[0],
            curr: numbers[1],
            prev: numbers[2],
        }
    }

    /// The period as the current window, with no previous one.
    fn from_period(period: Period) -> Windows {
        Windows {
            start_us: period.start_us,
            curr: period.units,
            prev: 0,
        }
    }

    fn period(windows: &Windows) -> Period {
        Period {
            start_us: windows.start_us,
            units: windows.curr,
        }
    }

    fn latest_us(windows: &Windows) -> Option<u64> {
        Some(windows.start_us)
    }

    #[inline(always)]
    fn judge(
        stored: Option<Windows>,
        rule: &Rule,
        now_us: u64,
        cost: u64,
        _: u64,
    ) -> Verdict<Windows> {
        let (count, w) = (rule.count(), rule.window_us());
        let (start_us, curr, prev) = match stored {
            // Still the stored window: its start, without a division.
            Some(s) if s.start_us <= now_us && now_us - s.start_us < w => {
                (s.start_us, s.curr, s.prev)
            }
            _ => {
                let start_us = now_us - now_us % w;
                match stored {
                    Some(s) if s.start_us.checked_add(w) == Some(start_us) => (start_us, 0, s.curr),
                    _ => (start_us, 0, 0),
                }
            }
        };
        let e = now_us - start_us;
        // In u64 when the product fits, as it nearly always does: a u128 division costs
        // several times more.
        let weighted_prev = match prev.checked_mul(w - e) {
            Some(p) => p.div_ceil(w),
            None => (u128::from(prev) * u128::from(w - e)).div_ceil(u128::from(w)) as u64,
        };
        let left = count.saturating_sub(curr + weighted_prev);
        // The end of the next window: when the estimate reaches 0 with nothing more
        // admitted, and until when the current count weighs on anything.
        let next_end_us = 2 * w - e;
        let denied_reset_us = || if curr == 0 { w - e } else { next_end_us };
        let retry_after_us = || {
            if curr + cost <= count {
                // Denied with room in this window: `W > k`, so `prev > k >= 0`.
                w - mul_div(w, count - curr - cost, prev) - e
            } else {
                (w - e) + w - mul_div(w, count - cost, curr)
            }
        };
        Verdict {
            figures: Figures::of(
                count,
                cost,
                left,
                next_end_us,
                denied_reset_us,
                retry_after_us,
            ),
            counted: Windows {
                start_us,
                curr: curr + cost,
                prev,
            },
            needed_us: next_end_us,
            reach_us: next_end_us,
        }
    }

    fn held(windows: Windows, rule: &Rule, now_us: u64) -> u64 {
        let w = rule.window_us();
        let (curr, prev) = if windows.start_us <= now_us && now_us - windows.start_us < w {
            (windows.curr, windows.prev)
        } else if windows.start_us + w <= now_us && now_us - (windows.start_us + w) < w {
            (0, windows.curr)
        } else {
            (0, 0)
        };
        let e = now_us % w;
        let weighted = (u128::from(prev) * u128::from(w - e)).div_ceil(u128::from(w)) as u64;
        curr + weighted
    }

    /// Into the current window's count while the reservation was counted in it, into the
    /// previous one's once a window has started since (where it still weighs).
    fn take(windows: Windows, rule: &Rule, at_us: u64, units: u64, _: u64) -> Windows {
        let (start_us, w) = (windows.start_us, rule.window_us());
        if start_us <= at_us && at_us - start_us < w {
            Windows {
                curr: windows.curr + units,
                ..windows
            }
        } else if at_us < start_us && start_us - at_us <= w {
            Windows {
                prev: windows.prev + units,
                ..windows
            }
        } else {
            windows
        }
    }

    /// From the current window's count while the units were counted in it, from the
    /// previous one's once a window has started since (where they still weigh).
    fn refund(windows: Windows, rule: &Rule, at_us: u64, cost: u64, _: u64, _: u64) -> Windows {
        let (start_us, w) = (windows.start_us, rule.window_us());
        if start_us <= at_us && at_us - start_us < w {
            Windows {
                curr: windows.curr.saturating_sub(cost),
                ..windows
            }
        } else if at_us < start_us && start_us - at_us <= w {
            Windows {
                prev: windows.prev.saturating_sub(cost),
                ..windows
            }
        } else {
            windows
        }
    }
}
