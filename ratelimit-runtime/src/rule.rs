use std::fmt;
use std::time::Duration;

/// A limit of `count` calls per `window`.
///
/// Rules are plain `Copy` data built by a `const fn`, so a call site's rules live in a
/// `static` and nothing is parsed or allocated per call.
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
    window_us: u64,
}

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

    /// How many calls the rule admits per window.
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// The length of the window.
    pub const fn window(&self) -> Duration {
        Duration::from_micros(self.window_us)
    }

    /// The window in microseconds, the unit the backends count in.
    pub(crate) const fn window_us(&self) -> u64 {
        self.window_us
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.window_us;
        if us.is_multiple_of(1_000_000) {
            write!(f, "{} per {}s", self.count, us / 1_000_000)
        } else if us.is_multiple_of(1_000) {
            write!(f, "{} per {}ms", self.count, us / 1_000)
        } else {
            write!(f, "{} per {}us", self.count, us)
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
