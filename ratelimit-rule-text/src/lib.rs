//! The rule-string grammar of [`redis-ratelimit`](https://docs.rs/redis-ratelimit):
//! `"10/minute"`, `"10/60s"`, `"20 per 2 minutes"`, `"5/second"`, `"1000/day"`, and lists
//! of them separated by commas (`"5/minute, 20/hour"`); durations in the same units
//! (`"15 minutes"`, `"900s"`, `"500ms"`); and the limits every rule keeps.
//!
//! One implementation for every place a rule or a duration is written: the
//! `#[rate_limiter]` attribute (at compile time), rules stored in Redis and rules built in
//! code (at run time). It lives in a crate of its own, without dependencies, so that the
//! proc-macro crate does not depend on the runtime (and its Redis client) to use it. Use it
//! through `redis-ratelimit` (`"5/minute".parse::<Rule>()`, `Rule::parse_list`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::time::Duration;

/// The largest count a rule may have: 2^52, so that every figure stays exact in the Lua
/// scripts' doubles.
pub const MAX_COUNT: u64 = 1 << 52;

/// The longest window a rule may have, in microseconds (the unit the backends count in):
/// 2^52, about 142 years, for the same reason.
pub const MAX_WINDOW_US: u64 = 1 << 52;

/// The longest window in whole milliseconds, the finest unit rule text can name.
pub const MAX_WINDOW_MS: u64 = MAX_WINDOW_US / 1_000;

/// The key prefix of a site that names none (the attribute's `key`), also the prefix of
/// the `{prefix}rules` hash of its overrides. Here so that the attribute and the runtime
/// (and through it the `ratelimit` command) share one definition.
pub const DEFAULT_PREFIX: &str = "rate_limit:";

/// The text a refusal carries when its site names none (the attribute's `message`).
pub const DEFAULT_MESSAGE: &str = "too many requests";

/// The accepted forms of a rule, for error messages.
pub const RULE_FORMS: &str =
    "expected \"N/unit\", \"N/<k><unit>\", \"N per unit\" or \"N per k units\" \
     (e.g. \"10/minute\", \"10/60s\", \"20 per 2 minutes\"), with units ms, s, m, h, d or \
     millisecond(s), sec(s), second(s), min(s), minute(s), hour(s), day(s); or \
     \"N per calendar day\", \"N per calendar month\" or \"N per calendar year\" (UTC)";

/// The accepted forms of a duration, for error messages.
pub const DURATION_FORMS: &str =
    "expected \"N unit\" or \"N<unit>\" (e.g. \"15 minutes\", \"900s\", \"1 hour\", \"500ms\"), \
     with units ms, s, m, h, d or millisecond(s), sec(s), second(s), min(s), minute(s), \
     hour(s), day(s)";

/// A unit of time of the grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// Its length in milliseconds.
    pub ms: u64,
    /// Every spelling rule text and durations accept (in any case), its full name last.
    pub spellings: &'static [&'static str],
}

/// The units, shortest first.
pub const UNITS: [Unit; 5] = [
    Unit::new(1, &["ms", "msec", "msecs", "millisecond", "milliseconds"]),
    Unit::new(1_000, &["s", "sec", "secs", "second", "seconds"]),
    Unit::new(60_000, &["m", "min", "mins", "minute", "minutes"]),
    Unit::new(3_600_000, &["h", "hr", "hrs", "hour", "hours"]),
    Unit::new(86_400_000, &["d", "day", "days"]),
];

impl Unit {
    const fn new(ms: u64, spellings: &'static [&'static str]) -> Unit {
        Unit { ms, spellings }
    }

    /// Its full name, in the plural (`"minutes"`): what the attribute's
    /// `rule(unit = ...)` takes, in any case.
    pub fn name(&self) -> &'static str {
        self.spellings.last().expect("every unit has spellings")
    }

    /// The unit of any of its spellings, in any case.
    ///
    /// ```
    /// use ratelimit_rule_text::Unit;
    ///
    /// assert_eq!(Unit::parse("Min").map(|unit| unit.ms), Some(60_000));
    /// assert_eq!(Unit::parse("fortnight"), None);
    /// ```
    pub fn parse(spelling: &str) -> Option<&'static Unit> {
        UNITS.iter().find(|unit| {
            unit.spellings
                .iter()
                .any(|known| known.eq_ignore_ascii_case(spelling))
        })
    }
}

/// A calendar period a rule can count in (`"2000000 per calendar month"`,
/// `rule(count = 2000000, calendar = MONTH)`): every unit since the start of the current
/// UTC day, month or year, empty again at the next one.
///
/// ```
/// use ratelimit_rule_text::Calendar;
///
/// assert_eq!(Calendar::parse("month"), Some(Calendar::Month));
/// assert_eq!(Calendar::parse("DAY"), Some(Calendar::Day));
/// assert_eq!(Calendar::Month.name(), "month");
/// assert_eq!(Calendar::Month.longest_ms(), 31 * 86_400_000);
/// assert_eq!(Calendar::parse("Year"), Some(Calendar::Year));
/// assert_eq!(Calendar::Year.longest_ms(), 366 * 86_400_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Calendar {
    /// The UTC day, from midnight to midnight.
    Day,
    /// The UTC month, from midnight on its first day to midnight on the next month's.
    Month,
    /// The UTC year, from midnight on January 1 to midnight on the next year's.
    Year,
}

impl Calendar {
    /// Every calendar period, shortest first.
    pub const ALL: [Calendar; 3] = [Calendar::Day, Calendar::Month, Calendar::Year];

    /// Its name in rule text (`"per calendar month"`); the attribute takes it in any case
    /// (`calendar = MONTH`).
    pub const fn name(self) -> &'static str {
        match self {
            Calendar::Day => "day",
            Calendar::Month => "month",
            Calendar::Year => "year",
        }
    }

    /// The period of a [`name`](Self::name), in any case.
    pub fn parse(name: &str) -> Option<Calendar> {
        Calendar::ALL
            .into_iter()
            .find(|calendar| calendar.name().eq_ignore_ascii_case(name))
    }

    /// Its longest length in milliseconds (a day; a month of 31 days; a leap year): what a rule
    /// counting in it gives as its window.
    pub const fn longest_ms(self) -> u64 {
        match self {
            Calendar::Day => 86_400_000,
            Calendar::Month => 31 * 86_400_000,
            Calendar::Year => 366 * 86_400_000,
        }
    }
}

/// Why a count or a window cannot make a rule. Every way of writing a rule (the attribute,
/// rule text, `Rule::new`) checks it here, so each is refused with the same reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidRule {
    /// A count of 0.
    NoCalls,
    /// A count above [`MAX_COUNT`].
    CountTooLarge,
    /// A window shorter than one microsecond.
    EmptyWindow,
    /// A window longer than [`MAX_WINDOW_US`].
    WindowTooLong,
}

impl InvalidRule {
    /// What is wrong and what is allowed (`const`, for `Rule::new`'s compile-time panics).
    pub const fn message(self) -> &'static str {
        match self {
            InvalidRule::NoCalls => {
                "a rule's count must be at least 1 (a rule admitting no calls would refuse \
                 every call)"
            }
            InvalidRule::CountTooLarge => {
                "a rule's count must be at most 2^52 (4503599627370496), so that every figure \
                 stays exact"
            }
            InvalidRule::EmptyWindow => "a rule's window must last at least 1 microsecond",
            InvalidRule::WindowTooLong => {
                "a rule's window must last at most 2^52 microseconds (about 142 years)"
            }
        }
    }
}

impl fmt::Display for InvalidRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for InvalidRule {}

/// `count` if a rule may admit that many calls per window.
pub const fn check_count(count: u64) -> Result<u64, InvalidRule> {
    match count {
        0 => Err(InvalidRule::NoCalls),
        count if count > MAX_COUNT => Err(InvalidRule::CountTooLarge),
        count => Ok(count),
    }
}

/// `window_us` as a `u64` if a rule can count a window of that many microseconds.
pub const fn check_window_us(window_us: u128) -> Result<u64, InvalidRule> {
    match window_us {
        0 => Err(InvalidRule::EmptyWindow),
        us if us > MAX_WINDOW_US as u128 => Err(InvalidRule::WindowTooLong),
        us => Ok(us as u64),
    }
}

/// The window of `time` units of `unit_ms` milliseconds, in milliseconds, if a rule can
/// count it.
///
/// ```
/// use ratelimit_rule_text::{window_ms, InvalidRule};
///
/// assert_eq!(window_ms(2, 60_000), Ok(120_000));
/// assert_eq!(window_ms(0, 60_000), Err(InvalidRule::EmptyWindow));
/// assert_eq!(window_ms(u64::MAX, 1), Err(InvalidRule::WindowTooLong));
/// ```
pub fn window_ms(time: u64, unit_ms: u64) -> Result<u64, InvalidRule> {
    let window_us = (u128::from(time) * u128::from(unit_ms)).saturating_mul(1_000);
    check_window_us(window_us).map(|us| us / 1_000)
}

/// A valid rule: `count` units (or calls) per `window_ms` milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParsedRule {
    /// Units (or calls) admitted per window: 1 to [`MAX_COUNT`].
    pub count: u64,
    /// The window in milliseconds: 1 to [`MAX_WINDOW_MS`].
    pub window_ms: u64,
    /// Whether the rule counts calls (`"60 calls/minute"`) rather than units of cost.
    pub calls: bool,
    /// The calendar period the rule counts in (`"5000 per calendar day"`), if any; its
    /// `window_ms` is then the period's longest length.
    pub calendar: Option<Calendar>,
}

/// Why a rule string or a duration is not one. Its `Display` is the message the attribute
/// reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleTextError {
    message: String,
}

impl fmt::Display for RuleTextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RuleTextError {}

impl RuleTextError {
    fn new(message: String) -> Self {
        RuleTextError { message }
    }
}

/// Parses one rule string, e.g. `"10/minute"`.
///
/// ```
/// use ratelimit_rule_text::{parse_rule, ParsedRule};
///
/// assert_eq!(
///     parse_rule("20 per 2 minutes"),
///     Ok(ParsedRule { count: 20, window_ms: 120_000, calls: false, calendar: None })
/// );
/// assert_eq!(
///     parse_rule("60 calls/minute"),
///     Ok(ParsedRule { count: 60, window_ms: 60_000, calls: true, calendar: None })
/// );
/// assert!(parse_rule("0/s").unwrap_err().to_string().contains("count must be at least 1"));
/// ```
pub fn parse_rule(text: &str) -> Result<ParsedRule, RuleTextError> {
    if let Some((count, calls, calendar)) = calendar_rule(text) {
        return check_count(count)
            .map(|count| ParsedRule {
                count,
                window_ms: calendar.longest_ms(),
                calls,
                calendar: Some(calendar),
            })
            .map_err(|invalid| {
                RuleTextError::new(format!("rule \"{text}\" is not valid: {invalid}"))
            });
    }
    let Some(RuleText {
        count,
        time,
        unit_ms,
        calls,
    }) = RuleText::parse(text)
    else {
        return Err(RuleTextError::new(format!(
            "cannot parse rule \"{text}\": {RULE_FORMS}"
        )));
    };
    check_count(count)
        .and_then(|count| {
            Ok(ParsedRule {
                count,
                window_ms: window_ms(time, unit_ms)?,
                calls,
                calendar: None,
            })
        })
        .map_err(|invalid| RuleTextError::new(format!("rule \"{text}\" is not valid: {invalid}")))
}

/// Parses rule strings separated by commas, e.g. `"5/minute, 20/hour"`: at least one, each
/// valid.
///
/// ```
/// use ratelimit_rule_text::parse_rule_list;
///
/// let rules = parse_rule_list("5/minute, 20/hour").unwrap();
/// assert_eq!(rules.len(), 2);
/// assert!(parse_rule_list("").is_err());
/// assert!(parse_rule_list("5/minute,").is_err());
/// ```
pub fn parse_rule_list(text: &str) -> Result<Vec<ParsedRule>, RuleTextError> {
    if text.trim().is_empty() {
        return Err(RuleTextError::new(format!(
            "no rules in \"{text}\": write one or more rules separated by commas, \
             e.g. \"5/minute, 20/hour\""
        )));
    }
    text.split(',')
        .map(|rule| parse_rule(rule.trim()))
        .collect()
}

/// What a site's name may be: the attribute's `name`, a layer guard's name.
pub const NAME_FORM: &str = "a name is one or more segments of ASCII letters, digits, `_`, `.` \
                             and `-`, separated by `::` or `/` (e.g. \"billing::send_invoice\", \
                             \"api/v2/orders\")";

/// Checks a site's name ([`NAME_FORM`]): it is a key's last part, a metric label and a
/// field of the overrides hash, so it holds nothing those would need to escape.
///
/// ```
/// use ratelimit_rule_text::check_name;
///
/// assert!(check_name("api/v2/orders").is_ok());
/// assert_eq!(check_name("a::").unwrap_err(), "it has an empty segment");
/// assert_eq!(check_name("a b").unwrap_err(), "' ' is not allowed");
/// ```
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    for segment in name.split("::").flat_map(|part| part.split('/')) {
        if segment.is_empty() {
            return Err("it has an empty segment".to_owned());
        }
        if let Some(c) = segment
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        {
            return Err(format!("{c:?} is not allowed"));
        }
    }
    Ok(())
}

/// Parses a duration in the rules' units, e.g. `"15 minutes"`, `"900s"`, `"1 hour"` or
/// `"500ms"`: at least 1 ms, at most [`MAX_WINDOW_MS`], as a rule's window.
///
/// ```
/// use std::time::Duration;
/// use ratelimit_rule_text::parse_duration;
///
/// assert_eq!(parse_duration("15 minutes"), Ok(Duration::from_secs(900)));
/// assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
/// assert!(parse_duration("0s").unwrap_err().to_string().contains("at least 1 ms"));
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, RuleTextError> {
    let Some((Some(amount), unit_ms)) = amount_of_unit(text.trim()) else {
        return Err(RuleTextError::new(format!(
            "cannot parse duration \"{text}\": {DURATION_FORMS}"
        )));
    };
    match window_ms(amount, unit_ms) {
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(InvalidRule::EmptyWindow) => Err(RuleTextError::new(format!(
            "duration \"{text}\" is empty: a duration must be at least 1 ms (e.g. \"500ms\", \
             \"2s\")"
        ))),
        Err(_) => Err(RuleTextError::new(format!(
            "duration \"{text}\" is too long: the longest is 2^52 microseconds (about 142 years)"
        ))),
    }
}

/// The parts of a rule string, before validation; numbers that overflow `u64` make the
/// string unparsable.
#[derive(Debug, PartialEq, Eq)]
pub struct RuleText {
    /// The number of calls.
    pub count: u64,
    /// How many units the window lasts (1 when the string names only the unit).
    pub time: u64,
    /// The unit in milliseconds.
    pub unit_ms: u64,
    /// Whether the word `calls` follows the count (`"60 calls/minute"`).
    pub calls: bool,
}

impl RuleText {
    /// The parts of `text`, or `None` when it is not of the grammar.
    pub fn parse(text: &str) -> Option<RuleText> {
        let text = text.trim();
        let (count, period) = match text.split_once('/') {
            Some((count, period)) => (count, period),
            None => {
                let mut words = text.splitn(2, char::is_whitespace);
                let count = words.next()?;
                let mut rest = words.next()?.trim_start();
                if let Some((word, after)) = rest.split_once(char::is_whitespace) {
                    if word.eq_ignore_ascii_case("calls") {
                        rest = after.trim_start();
                        let (per, period) = rest.split_at(rest.find(char::is_whitespace)?);
                        if !per.eq_ignore_ascii_case("per") {
                            return None;
                        }
                        let mut rule = RuleText::parse(&format!("{count} per {period}"))?;
                        rule.calls = true;
                        return Some(rule);
                    }
                }
                let (per, period) = rest.split_at(rest.find(char::is_whitespace)?);
                if !per.eq_ignore_ascii_case("per") {
                    return None;
                }
                (count, period)
            }
        };
        // `N calls/unit`: the word `calls` after the count.
        let (count, calls) = match count.trim().split_once(char::is_whitespace) {
            Some((count, word)) if word.trim().eq_ignore_ascii_case("calls") => (count, true),
            _ => (count.trim(), false),
        };
        let count = parse_digits(count)?;
        let (time, unit_ms) = amount_of_unit(period.trim())?;
        Some(RuleText {
            count,
            time: time.unwrap_or(1),
            unit_ms,
            calls,
        })
    }
}

/// `N [calls] per calendar <day|month|year>` (in any case): the count, whether it counts
/// calls, and the period; `None` for every other form.
fn calendar_rule(text: &str) -> Option<(u64, bool, Calendar)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let (count, calls, rest) = match words.as_slice() {
        [count, calls, rest @ ..] if calls.eq_ignore_ascii_case("calls") => (count, true, rest),
        [count, rest @ ..] => (count, false, rest),
        [] => return None,
    };
    match rest {
        [per, calendar, period]
            if per.eq_ignore_ascii_case("per") && calendar.eq_ignore_ascii_case("calendar") =>
        {
            Some((parse_digits(count)?, calls, Calendar::parse(period)?))
        }
        _ => None,
    }
}

/// `[N][ ]unit` (`"2 minutes"`, `"60s"`, `"hour"`): the number, if written, and the unit
/// in milliseconds. Rule periods and durations share it.
fn amount_of_unit(text: &str) -> Option<(Option<u64>, u64)> {
    let digits = text.find(|c: char| !c.is_ascii_digit())?;
    let amount = match digits {
        0 => None,
        _ => Some(parse_digits(&text[..digits])?),
    };
    let unit = Unit::parse(text[digits..].trim_start())?;
    Some((amount, unit.ms))
}

/// Plain decimal digits (no sign, no underscores) that fit in `u64`.
fn parse_digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(count: u64, time: u64, unit_ms: u64) -> Option<RuleText> {
        Some(RuleText {
            count,
            time,
            unit_ms,
            calls: false,
        })
    }

    #[test]
    fn the_word_calls_after_the_count_makes_a_rule_counting_calls() {
        let calls = |count, time, unit_ms| {
            text(count, time, unit_ms).map(|t| RuleText { calls: true, ..t })
        };
        assert_eq!(RuleText::parse("60 calls/minute"), calls(60, 1, 60_000));
        assert_eq!(RuleText::parse("60 calls per minute"), calls(60, 1, 60_000));
        assert_eq!(RuleText::parse("60 CALLS per 60s"), calls(60, 60, 1_000));
        assert_eq!(RuleText::parse(" 3  Calls / 7 h "), calls(3, 7, 3_600_000));
        for bad in [
            "60 calls",
            "60 call/minute",
            "calls/minute",
            "60 calls calls/minute",
        ] {
            assert_eq!(RuleText::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_rule("60 calls per 2 minutes"),
            Ok(ParsedRule {
                count: 60,
                window_ms: 120_000,
                calls: true,
                calendar: None,
            })
        );
    }

    #[test]
    fn per_calendar_day_month_or_year_makes_a_calendar_rule() {
        use Calendar::{Day, Month, Year};

        let calendar = |count, calls, calendar: Calendar| {
            Ok(ParsedRule {
                count,
                window_ms: calendar.longest_ms(),
                calls,
                calendar: Some(calendar),
            })
        };
        for (text, count, calls, period) in [
            ("2000000 per calendar month", 2_000_000, false, Month),
            (" 5000  PER Calendar DAY ", 5_000, false, Day),
            ("100 calls per calendar day", 100, true, Day),
            ("1000 per calendar year", 1_000, false, Year),
            ("12 calls PER calendar Year", 12, true, Year),
        ] {
            assert_eq!(parse_rule(text), calendar(count, calls, period), "{text:?}");
        }
        for bad in [
            "5 per calendar",
            "5 per calendar week",
            "5 per calendar 2 months",
            "5 per calendar years",
            "5/calendar month",
            "calls per calendar day",
        ] {
            let err = parse_rule(bad).unwrap_err().to_string();
            assert!(err.contains("per calendar month"), "{bad:?}: {err}");
        }
        assert!(parse_rule("0 per calendar day")
            .unwrap_err()
            .to_string()
            .contains("count must be at least 1"));
    }

    #[test]
    fn rule_strings_of_the_documented_forms_parse() {
        assert_eq!(RuleText::parse("10/minute"), text(10, 1, 60_000));
        assert_eq!(RuleText::parse("10/60s"), text(10, 60, 1_000));
        assert_eq!(RuleText::parse("20 per 2 minutes"), text(20, 2, 60_000));
        assert_eq!(RuleText::parse("5/second"), text(5, 1, 1_000));
        assert_eq!(RuleText::parse("1000/day"), text(1000, 1, 86_400_000));
    }

    #[test]
    fn rule_strings_accept_every_unit_spelling_in_any_case() {
        let spellings: &[(&[&str], u64)] = &[
            (&["ms", "msec", "millisecond", "milliseconds"], 1),
            (&["s", "sec", "secs", "second", "seconds"], 1_000),
            (&["m", "min", "mins", "minute", "minutes"], 60_000),
            (&["h", "hr", "hour", "hours"], 3_600_000),
            (&["d", "day", "days"], 86_400_000),
        ];
        for (names, ms) in spellings {
            for name in *names {
                for name in [name.to_string(), name.to_uppercase()] {
                    assert_eq!(RuleText::parse(&format!("3/{name}")), text(3, 1, *ms));
                    assert_eq!(RuleText::parse(&format!("3/7{name}")), text(3, 7, *ms));
                    assert_eq!(RuleText::parse(&format!("3 / 7 {name}")), text(3, 7, *ms));
                    assert_eq!(RuleText::parse(&format!("3 per {name}")), text(3, 1, *ms));
                    assert_eq!(
                        RuleText::parse(&format!(" 3  PER 7 {name} ")),
                        text(3, 7, *ms)
                    );
                }
            }
        }
    }

    #[test]
    fn malformed_rule_strings_are_rejected() {
        for bad in [
            "",
            "10",
            "/minute",
            "10/",
            "10/fortnight",
            "10 minute",
            "10 per",
            "ten/minute",
            "-1/minute",
            "+1/minute",
            "1_000/minute",
            "10/-5s",
            "10/5.5s",
            "10 per 2 per minutes",
            "10/2/minutes",
            "99999999999999999999/s",
            "1/99999999999999999999s",
        ] {
            assert_eq!(RuleText::parse(bad), None, "{bad:?}");
            assert!(parse_rule(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rules_the_runtime_cannot_count_are_rejected_with_the_reason() {
        let message = |text: &str| parse_rule(text).unwrap_err().to_string();
        assert_eq!(
            message("0/s"),
            format!("rule \"0/s\" is not valid: {}", InvalidRule::NoCalls)
        );
        assert!(message("1/0s").ends_with(InvalidRule::EmptyWindow.message()));
        assert!(message("4503599627370497/s").ends_with(InvalidRule::CountTooLarge.message()));
        assert!(message("1/999999999999d").ends_with(InvalidRule::WindowTooLong.message()));
        assert!(message("1/fortnight").starts_with("cannot parse rule \"1/fortnight\": expected"));
        assert_eq!(
            parse_rule("4503599627370496/s"),
            Ok(ParsedRule {
                count: MAX_COUNT,
                window_ms: 1_000,
                calls: false,
                calendar: None,
            })
        );
        assert_eq!(
            parse_rule(&format!("1/{MAX_WINDOW_MS}ms")),
            Ok(ParsedRule {
                count: 1,
                calls: false,
                window_ms: MAX_WINDOW_MS,
                calendar: None,
            })
        );
        assert!(parse_rule(&format!("1/{}ms", MAX_WINDOW_MS + 1)).is_err());
    }

    #[test]
    fn counts_and_windows_are_checked_at_their_limits() {
        assert_eq!(check_count(0), Err(InvalidRule::NoCalls));
        assert_eq!(check_count(1), Ok(1));
        assert_eq!(check_count(MAX_COUNT), Ok(MAX_COUNT));
        assert_eq!(check_count(MAX_COUNT + 1), Err(InvalidRule::CountTooLarge));
        assert_eq!(check_window_us(0), Err(InvalidRule::EmptyWindow));
        assert_eq!(check_window_us(1), Ok(1));
        assert_eq!(
            check_window_us(u128::from(MAX_WINDOW_US)),
            Ok(MAX_WINDOW_US)
        );
        assert_eq!(
            check_window_us(u128::from(MAX_WINDOW_US) + 1),
            Err(InvalidRule::WindowTooLong)
        );
        assert_eq!(
            window_ms(u64::MAX, u64::MAX),
            Err(InvalidRule::WindowTooLong)
        );
        assert_eq!(window_ms(MAX_WINDOW_MS, 1), Ok(MAX_WINDOW_MS));
        assert_eq!(window_ms(0, 1_000), Err(InvalidRule::EmptyWindow));
    }

    #[test]
    fn units_are_found_by_any_spelling_and_named_in_full() {
        for unit in &UNITS {
            assert_eq!(Unit::parse(&unit.name().to_uppercase()), Some(unit));
        }
        let names: Vec<&str> = UNITS.iter().map(Unit::name).collect();
        assert_eq!(
            names,
            ["milliseconds", "seconds", "minutes", "hours", "days"]
        );
        assert_eq!(Unit::parse("HRS").map(|unit| unit.ms), Some(3_600_000));
        assert_eq!(Unit::parse("weeks"), None);
        assert_eq!(Unit::parse(""), None);
    }

    #[test]
    fn durations_of_the_documented_forms_parse() {
        let secs = Duration::from_secs;
        assert_eq!(parse_duration("15 minutes"), Ok(secs(900)));
        assert_eq!(parse_duration("900s"), Ok(secs(900)));
        assert_eq!(parse_duration("1 hour"), Ok(secs(3_600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(secs(2)));
        assert_eq!(parse_duration(" 3 DAYS "), Ok(secs(3 * 86_400)));
        assert_eq!(
            parse_duration(&format!("{MAX_WINDOW_MS}ms")),
            Ok(Duration::from_millis(MAX_WINDOW_MS))
        );
    }

    #[test]
    fn empty_long_and_malformed_durations_are_rejected_with_the_reason() {
        let message = |text: &str| parse_duration(text).unwrap_err().to_string();
        for zero in ["0s", "0 minutes", "000ms"] {
            assert!(
                message(zero).starts_with(&format!("duration \"{zero}\" is empty")),
                "{zero:?}"
            );
        }
        assert!(message("999999999999 days").contains("is too long"));
        assert!(message(&format!("{}ms", MAX_WINDOW_MS + 1)).contains("is too long"));
        for bad in [
            "",
            "s",
            "minutes",
            "15",
            "15 fortnights",
            "1.5s",
            "-2s",
            "+2s",
            "2 s s",
            "1/s",
            "99999999999999999999s",
        ] {
            assert!(
                message(bad).starts_with(&format!("cannot parse duration \"{bad}\": expected")),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn lists_are_separated_by_commas_and_every_entry_must_be_a_rule() {
        assert_eq!(
            parse_rule_list(" 5/minute ,20 per 2 hours"),
            Ok(vec![
                ParsedRule {
                    count: 5,
                    window_ms: 60_000,
                    calls: false,
                    calendar: None,
                },
                ParsedRule {
                    count: 20,
                    window_ms: 7_200_000,
                    calls: false,
                    calendar: None,
                },
            ])
        );
        for bad in [
            "",
            "  ",
            ",",
            "5/minute,",
            "5/minute,,1/s",
            "5/minute, ten/s",
        ] {
            assert!(parse_rule_list(bad).is_err(), "{bad:?}");
        }
        assert!(parse_rule_list("5/minute, 0/s")
            .unwrap_err()
            .to_string()
            .contains("count must be at least 1"));
    }
}
