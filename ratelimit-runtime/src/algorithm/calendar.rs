//! A rule counting in calendar periods ([`Rule::per_calendar`]), whatever the call site's
//! algorithm: a fixed window whose start and end are the period's UTC boundaries. Its
//! record is the period's start and the units counted since, like the fixed window's;
//! a record of an earlier period decides like no record, and one of a later period (the clock
//! stepped back over its start) counts the call in that period. Per rule, with `calls` the units
//! counted in the current period and a call of `n` units:
//!
//! - left now: `count - calls`; the rule admits the call when `calls + n <= count`;
//! - admitted, and denied: `reset_after = retry_after = period end - now'` (the next
//!   period starts empty);
//! - never (`n > count`): denied with [`RawDecision::NEVER`].
//!
//! The string-state algorithms keep this record in their own per rule ([`super::records`]);
//! the sliding log keeps one such counter per calendar rule beside its entries, never an
//! entry per unit (a month of tokens would be millions of entries). `scripts/calendar.lua`
//! is the same arithmetic for Redis.
//!
//! [`Rule::per_calendar`]: crate::Rule::per_calendar
//! [`RawDecision::NEVER`]: crate::decision::RawDecision::NEVER

use super::Figures;
use crate::calendar::{period_us, Calendar};
use crate::Rule;

/// A calendar rule's record: the start of the period counted (µs), and its units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Period {
    pub start_us: u64,
    pub units: u64,
}

/// A calendar rule's view of a call of `cost` units at `now_us`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeriodVerdict {
    pub figures: Figures,
    /// The record the call leaves when it is admitted and consumes.
    pub counted: Period,
    /// Until the period ends: how long the record matters.
    pub until_end_us: u64,
}

/// `rule`'s (counting in `calendar`) view of a call of `cost` units at `now_us`, from its
/// record (`None`: not stored).
pub(crate) fn judge(
    stored: Option<Period>,
    rule: &Rule,
    calendar: Calendar,
    now_us: u64,
    cost: u64,
) -> PeriodVerdict {
    let count = rule.count();
    let (mut start_us, mut end_us) = period_us(calendar, now_us);
    // A record of a later period: the clock stepped back over its start. The call counts
    // in that period, as a check clamped to the key's latest time would; only the token
    // bucket, which keeps no latest time, meets it here.
    if let Some(later) = stored.filter(|p| p.start_us > start_us) {
        (start_us, end_us) = period_us(calendar, later.start_us);
    }
    let units = stored
        .filter(|p| p.start_us == start_us)
        .map_or(0, |p| p.units);
    let until_end_us = end_us - now_us;
    PeriodVerdict {
        figures: Figures::of(
            count,
            cost,
            count.saturating_sub(units),
            until_end_us,
            || until_end_us,
            || until_end_us,
        ),
        counted: Period {
            start_us,
            units: units + cost,
        },
        until_end_us,
    }
}

/// The units `period` holds at `now_us`, uncapped.
pub(crate) fn held(period: Period, calendar: Calendar, now_us: u64) -> u64 {
    match period_us(calendar, now_us).0 == period.start_us {
        true => period.units,
        false => 0,
    }
}

/// `period` with `units` more (`take`) or fewer, when it is still the period of `at_us`,
/// the time the units were counted at; unchanged otherwise (the period they were counted
/// in is over, and with it their weight).
pub(crate) fn adjust(
    period: Period,
    calendar: Calendar,
    at_us: u64,
    units: u64,
    take: bool,
) -> Period {
    if period_us(calendar, at_us).0 != period.start_us {
        return period;
    }
    Period {
        units: match take {
            true => period.units + units,
            false => period.units.saturating_sub(units),
        },
        ..period
    }
}
