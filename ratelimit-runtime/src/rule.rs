use std::fmt;
use std::time::Duration;

use crate::calendar::Calendar;

/// A limit of `count` units per `window`.
///
/// Rules are plain `Copy` data built by a `const fn`, so a call site's rules live in a
/// `static` and nothing is parsed or allocated per call.
///
/// A rule counts the units of each call's cost, unless it is marked with
/// [`calls`](Self::calls): then it counts calls, one per admitted call whatever its cost.
/// A rule built by [`per_calendar`](Self::per_calendar) counts in the UTC calendar's days,
/// months or years rather than in a window of fixed length.
///
/// ```
/// use std::time::Duration;
/// use ratelimit_runtime::Rule;
///
/// const REPLY: [Rule; 2] = [Rule::new(5, Duration::from_secs(60)), Rule::per_hour(100)];
/// assert_eq!(REPLY[0].count(), 5);
/// assert_eq!(REPLY[1].window(), Duration::from_secs(3600));
/// assert_eq!(REPLY[0].to_string(), "5 per 60s");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    count: u64,
    /// The window in µs (below 2^53), and [`CALLS`] when the rule counts calls, and
    /// [`CALENDAR`] when it counts in calendar periods (the window is then the period's
    /// longest length, which says which period): one word, so that a rule stays two
    /// words, as a decision carries one.
    window_us: u64,
}

/// The bit of `Rule::window_us` that marks a rule counting calls.
const CALLS: u64 = 1 << 63;

/// The bit of `Rule::window_us` that marks a rule counting in calendar periods.
const CALENDAR: u64 = 1 << 62;

/// A calendar day, in µs: the window of a rule counting calendar days.
const DAY_US: u64 = Calendar::Day.longest_ms() * 1_000;

/// The longest calendar month, in µs: the window of a rule counting calendar months.
const MONTH_US: u64 = Calendar::Month.longest_ms() * 1_000;

impl Rule {
    /// The largest count: 2^52, so that every figure stays exact in the Lua scripts' doubles.
    pub const MAX_COUNT: u64 = ratelimit_rule_text::MAX_COUNT;

    /// The longest window: 2^52 µs (about 142 years), for the same reason.
    pub const MAX_WINDOW: Duration = Duration::from_micros(ratelimit_rule_text::MAX_WINDOW_US);

    /// A rule admitting `count` calls in any `window`.
    ///
    /// Windows are counted in whole microseconds.
    ///
    /// # Panics
    ///
    /// When `count` is 0 or above [`MAX_COUNT`](Self::MAX_COUNT), or `window` is shorter
    /// than one microsecond or longer than [`MAX_WINDOW`](Self::MAX_WINDOW) (at compile time
    /// when used in a `const`), with the reason rule text and the attribute give too.
    pub const fn new(count: u64, window: Duration) -> Rule {
        // The checks of rule text and of the attribute, so every way of writing a rule
        // admits the same rules.
        let count = match ratelimit_rule_text::check_count(count) {
            Ok(count) => count,
            Err(invalid) => panic!("{}", invalid.message()),
        };
        let window_us = match ratelimit_rule_text::check_window_us(window.as_micros()) {
            Ok(window_us) => window_us,
            Err(invalid) => panic!("{}", invalid.message()),
        };
        Rule { count, window_us }
    }

    /// `count` calls per second.
    pub const fn per_second(count: u64) -> Rule {
        Rule::new(count, Duration::from_secs(1))
    }

    /// `count` calls per minute.
    pub const fn per_minute(count: u64) -> Rule {
        Rule::new(count, Duration::from_secs(60))
    }

    /// `count` calls per hour.
    pub const fn per_hour(count: u64) -> Rule {
        Rule::new(count, Duration::from_secs(3600))
    }

    /// `count` calls per day.
    pub const fn per_day(count: u64) -> Rule {
        Rule::new(count, Duration::from_secs(86_400))
    }

    /// A rule admitting `count` units (or calls, with [`calls`](Self::calls)) in each UTC
    /// calendar day, month or year: everything since the start of the current one counts, and
    /// the next one starts empty, whatever the call site's algorithm (for this rule, a
    /// fixed window from one calendar boundary to the next, with the months' lengths and
    /// the leap years of the calendar). A decision bound by it has `reset_after` and
    /// `retry_after` running to that boundary. Its [`window`](Self::window) is the
    /// period's longest length: a day, 31 days, or 366 days.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Calendar, Rule};
    ///
    /// const TOKENS: [Rule; 2] = [
    ///     Rule::per_minute(90_000),
    ///     Rule::per_calendar(2_000_000, Calendar::Month),
    /// ];
    /// assert_eq!(TOKENS[1].calendar(), Some(Calendar::Month));
    /// assert_eq!(TOKENS[1].window(), Duration::from_secs(31 * 86_400));
    /// assert_eq!(TOKENS[1].to_string(), "2000000 per calendar month");
    /// assert_eq!("2000000 per calendar month".parse(), Ok(TOKENS[1]));
    /// assert_eq!(TOKENS[0].calendar(), None);
    /// ```
    ///
    /// # Panics
    ///
    /// When `count` is 0 or above [`MAX_COUNT`](Self::MAX_COUNT), as [`new`](Self::new).
    pub const fn per_calendar(count: u64, calendar: Calendar) -> Rule {
        let rule = Rule::new(count, Duration::from_millis(calendar.longest_ms()));
        Rule {
            count: rule.count,
            window_us: rule.window_us | CALENDAR,
        }
    }

    /// The calendar period the rule counts in, for a rule built by
    /// [`per_calendar`](Self::per_calendar).
    #[inline(always)]
    pub const fn calendar(&self) -> Option<Calendar> {
        if self.window_us & CALENDAR == 0 {
            None
        } else if self.window_us() == DAY_US {
            Some(Calendar::Day)
        } else if self.window_us() == MONTH_US {
            Some(Calendar::Month)
        } else {
            Some(Calendar::Year)
        }
    }

    /// The same rule, counting calls instead of units: a check of any cost takes one from
    /// it. A call site's rules can mix both, e.g. 60 calls and 90,000 tokens a minute,
    /// checked together, all or nothing.
    ///
    /// ```
    /// use redis_ratelimit::Rule;
    ///
    /// const LLM: [Rule; 2] = [Rule::per_minute(60).calls(), Rule::per_minute(90_000)];
    /// assert!(LLM[0].counts_calls() && !LLM[1].counts_calls());
    /// assert_eq!(LLM[0].to_string(), "60 calls per 60s");
    /// assert_eq!("60 calls/minute".parse(), Ok(LLM[0]));
    /// ```
    pub const fn calls(self) -> Rule {
        Rule {
            count: self.count,
            window_us: self.window_us | CALLS,
        }
    }

    /// Whether the rule counts calls (one per admitted call) rather than units of cost.
    pub const fn counts_calls(&self) -> bool {
        self.window_us & CALLS != 0
    }

    /// How many calls (or units) the rule admits per window.
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// The length of the window.
    pub const fn window(&self) -> Duration {
        Duration::from_micros(self.window_us())
    }

    /// The window in microseconds, the unit the backends count in.
    #[inline(always)]
    pub(crate) const fn window_us(&self) -> u64 {
        self.window_us & !(CALLS | CALENDAR)
    }

    /// What a call of `cost` units takes from this rule: one when it counts calls.
    #[inline(always)]
    pub(crate) const fn units(&self, cost: u64) -> u64 {
        if self.counts_calls() {
            1
        } else {
            cost
        }
    }

    /// The rule's count as the scripts carry it: negative for a rule counting calls, so
    /// that its record is never another rule's, and a check needs no other number.
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn signed_count(&self) -> f64 {
        match self.counts_calls() {
            true => -(self.count as f64),
            false => self.count as f64,
        }
    }

    /// The rule's window as the scripts carry it: in µs, or -1 for a rule counting
    /// calendar days, -2 for calendar months and -3 for calendar years
    /// (`scripts/calendar.lua`).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn script_window(&self) -> f64 {
        match self.calendar() {
            None => self.window_us() as f64,
            Some(Calendar::Day) => -1.0,
            Some(Calendar::Month) => -2.0,
            Some(Calendar::Year) => -3.0,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.window_us();
        let calls = if self.counts_calls() { " calls" } else { "" };
        if let Some(calendar) = self.calendar() {
            write!(f, "{}{calls} per calendar {}", self.count, calendar.name())
        } else if us.is_multiple_of(1_000_000) {
            write!(f, "{}{calls} per {}s", self.count, us / 1_000_000)
        } else if us.is_multiple_of(1_000) {
            write!(f, "{}{calls} per {}ms", self.count, us / 1_000)
        } else {
            write!(f, "{}{calls} per {}us", self.count, us)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_uses_the_largest_exact_unit() {
        assert_eq!(Rule::per_minute(10).to_string(), "10 per 60s");
        assert_eq!(
            Rule::new(3, Duration::from_millis(250)).to_string(),
            "3 per 250ms"
        );
        assert_eq!(
            Rule::new(1, Duration::from_micros(7)).to_string(),
            "1 per 7us"
        );
    }

    #[test]
    fn a_rule_counting_calls_is_another_rule_of_the_same_figures() {
        let calls = Rule::per_minute(60).calls();
        assert!(calls.counts_calls() && !Rule::per_minute(60).counts_calls());
        assert_ne!(calls, Rule::per_minute(60));
        assert_eq!(
            (calls.count(), calls.window()),
            (60, Duration::from_secs(60))
        );
        assert_eq!((calls.units(7), Rule::per_minute(60).units(7)), (1, 7));
        assert_eq!(calls.calls(), calls);
        assert_eq!(calls.to_string(), "60 calls per 60s");
        #[cfg(feature = "redis")]
        assert_eq!(calls.signed_count(), -60.0);
    }

    #[test]
    fn a_calendar_rule_says_its_period_and_keeps_its_figures() {
        let month = Rule::per_calendar(2_000_000, Calendar::Month);
        let day = Rule::per_calendar(5_000, Calendar::Day).calls();
        assert_eq!(std::mem::size_of::<Rule>(), 16);
        assert_eq!(
            (month.calendar(), day.calendar()),
            (Some(Calendar::Month), Some(Calendar::Day))
        );
        assert_eq!(Rule::per_day(5_000).calendar(), None);
        assert_ne!(
            Rule::per_day(5_000),
            Rule::per_calendar(5_000, Calendar::Day)
        );
        assert_eq!(month.window(), Duration::from_secs(31 * 86_400));
        assert_eq!(day.window(), Duration::from_secs(86_400));
        assert!(day.counts_calls() && !month.counts_calls());
        assert_eq!(month.to_string(), "2000000 per calendar month");
        assert_eq!(day.to_string(), "5000 calls per calendar day");
        let year = Rule::per_calendar(1_000, Calendar::Year);
        assert_eq!(year.calendar(), Some(Calendar::Year));
        assert_eq!(year.window(), Duration::from_secs(366 * 86_400));
        assert_eq!(year.to_string(), "1000 per calendar year");
        assert_eq!("1000 per calendar year".parse(), Ok(year));
        // A fixed window of 366 days is not the calendar year.
        assert_eq!(Rule::new(1_000, year.window()).calendar(), None);
        #[cfg(feature = "redis")]
        assert_eq!(year.script_window(), -3.0);
    }

    #[test]
    #[should_panic(expected = "count must be at least 1")]
    fn zero_count_is_rejected() {
        let _ = Rule::new(0, Duration::from_secs(1));
    }

    #[test]
    fn the_limits_are_inclusive() {
        let rule = Rule::new(Rule::MAX_COUNT, Rule::MAX_WINDOW);
        assert_eq!(
            (rule.count(), rule.window()),
            (Rule::MAX_COUNT, Rule::MAX_WINDOW)
        );
    }

    #[test]
    #[should_panic(expected = "window must last at most 2^52 microseconds")]
    fn windows_beyond_the_exact_range_are_rejected() {
        let _ = Rule::new(1, Rule::MAX_WINDOW + Duration::from_micros(1));
    }

    #[test]
    #[should_panic(expected = "count must be at most 2^52")]
    fn counts_beyond_the_exact_range_are_rejected() {
        let _ = Rule::new(Rule::MAX_COUNT + 1, Duration::from_secs(1));
    }

    #[test]
    #[should_panic(expected = "window must last at least 1 microsecond")]
    fn zero_window_is_rejected() {
        let _ = Rule::new(1, Duration::from_nanos(999));
    }
}
