//! Fixed window: one counter per rule per aligned window.
//!
//! A rule of `count` per `window` (µs) counts units in windows aligned to the epoch: the
//! window holding `now` starts at `floor(now / window) * window` and ends one window later.
//! A check is counted at `now' = max(now, latest stored window start)` (see
//! [`super::Clamp`]): a stored window that starts after `now` is newer state, never stale.
//! Per rule, with `calls` the units counted in the current window at `now'` (0 when the
//! stored counter belongs to an earlier window, so stale state decides exactly like absent
//! state) and a call of `n` units:
//!
//! - left now: `count - calls`; the rule admits the call when `calls + n <= count`;
//! - admitted: `reset_after = window end - now'`;
//! - denied: `reset_after = retry_after = window end - now'` (the next window starts
//!   empty, so a call at `now' + retry_after` passes this rule);
//! - never (`n > count`): denied with [`RawDecision::NEVER`].
//!
//! The call is admitted when every rule admits it, and then counted in every rule's
//! current window (see [`super::records`]). A write stores the counters of the rules it
//! checked, and only those: when a call site's rules change, the rules it keeps keep their
//! counts, new ones start empty and the others are forgotten at the next write. (So one
//! key checked in turn with two sets of rules forgets, at each write, the rules only the
//! other set has: give each set its own key.) The key lives at least until the last
//! rule's current window ends. `scripts/fixed_window.lua` is the same arithmetic for
//! Redis; both are exact for times and windows below 2^53 µs.
//!
//! [`RawDecision::NEVER`]: crate::decision::RawDecision::NEVER

use super::calendar::Period;
use super::records::{PerRule, Verdict};
use super::Figures;
use crate::{Algorithm, Rule};

/// The counters of one key: per rule of the last write, the window it counted in.
pub(crate) type State = super::records::State<FixedWindow>;

/// The fixed window's arithmetic.
#[derive(Debug)]
pub(crate) enum FixedWindow {}

/// A rule's record, as the script's `window_start_us, calls` after `count, window_us`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    start_us: u64,
    calls: u64,
}

impl super::saved::SavedRecord for Window {
    fn save(&self, out: &mut super::saved::Writer<'_>) {
        out.number(self.start_us);
        out.number(self.calls);
    }

    fn restore(from: &mut super::saved::Reader<'_>) -> Option<Self> {
        Some(Window {
            start_us: from.number()?,
            calls: from.number()?,
        })
    }
}

impl PerRule for FixedWindow {
    const ALGORITHM: Algorithm = Algorithm::FixedWindow;

    type Record = Window;

    #[cfg(feature = "redis")]
    const NUMBERS: usize = 2;

    #[cfg(feature = "redis")]
    fn from_numbers(numbers: &[u64]) -> Self::Record {
        Window {
            start_us: numbers[0],
            calls: numbers[1],
        }
    }

    fn from_period(period: Period) -> Window {
        Window {
            start_us: period.start_us,
            calls: period.units,
        }
    }

    fn period(window: &Window) -> Period {
        Period {
            start_us: window.start_us,
            units: window.calls,
        }
    }

    fn latest_us(window: &Window) -> Option<u64> {
        Some(window.start_us)
    }

    #[inline(always)]
    fn judge(
        stored: Option<Window>,
        rule: &Rule,
        now_us: u64,
        cost: u64,
        _: u64,
    ) -> Verdict<Window> {
        let (count, window_us) = (rule.count(), rule.window_us());
        let (start_us, calls) = match stored {
            // Still the stored window: its start, without a division.
            Some(w) if w.start_us <= now_us && now_us - w.start_us < window_us => {
                (w.start_us, w.calls)
            }
            _ => (now_us / window_us * window_us, 0),
        };
        // When the window frees up, and until when its count matters.
        let until_end_us = start_us + window_us - now_us;
        let left = count.saturating_sub(calls);
        Verdict {
            figures: Figures::of(
                count,
                cost,
                left,
                until_end_us,
                || until_end_us,
                || until_end_us,
            ),
            counted: Window {
                start_us,
                calls: calls + cost,
            },
            needed_us: until_end_us,
            reach_us: until_end_us,
        }
    }

    fn held(window: Window, rule: &Rule, now_us: u64) -> u64 {
        let current = window.start_us <= now_us && now_us - window.start_us < rule.window_us();
        if current {
            window.calls
        } else {
            0
        }
    }

    /// Only while the record still counts the window the units were counted in.
    fn take(window: Window, rule: &Rule, at_us: u64, units: u64, _: u64) -> Window {
        if window.start_us <= at_us && at_us - window.start_us < rule.window_us() {
            Window {
                calls: window.calls + units,
                ..window
            }
        } else {
            window
        }
    }

    /// Only while the record still counts the window the units were counted in.
    fn refund(window: Window, rule: &Rule, at_us: u64, cost: u64, _: u64, _: u64) -> Window {
        if window.start_us <= at_us && at_us - window.start_us < rule.window_us() {
            Window {
                calls: window.calls.saturating_sub(cost),
                ..window
            }
        } else {
            window
        }
    }
}
