//! The rule-string grammar of [`redis-ratelimit`](https://docs.rs/redis-ratelimit):
//! `"10/minute"`, `"10/60s"`, `"20 per 2 minutes"`, `"5/second"`, `"1000/day"`, and lists
//! of them separated by commas (`"5/minute, 20/hour"`).
//!
//! One parser for every place a rule is written as text: the `#[rate_limiter]` attribute
//! (at compile time) and rules stored in Redis (at run time). It lives in a crate of its
//! own, without dependencies, so that the proc-macro crate does not depend on the runtime
//! (and its Redis client) to use it. Use it through `redis-ratelimit`
//! (`"5/minute".parse::<Rule>()`, `Rule::parse_list`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

/// The largest count a rule may have: 2^52, so that every figure stays exact in the Lua
/// scripts' doubles.
pub const MAX_COUNT: u64 = 1 << 52;

/// The longest window a rule may have, in whole milliseconds: 2^52 µs (about 142 years).
pub const MAX_WINDOW_MS: u64 = (1 << 52) / 1_000;

/// The accepted forms, for error messages.
pub const RULE_FORMS: &str =
    "expected \"N/unit\", \"N/<k><unit>\", \"N per unit\" or \"N per k units\" \
     (e.g. \"10/minute\", \"10/60s\", \"20 per 2 minutes\"), with units ms, s, m, h, d or \
     millisecond(s), sec(s), second(s), min(s), minute(s), hour(s), day(s)";

/// A valid rule: `count` calls per `window_ms` milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParsedRule {
    /// Calls admitted per window: 1 to [`MAX_COUNT`].
    pub count: u64,
    /// The window in milliseconds: 1 to [`MAX_WINDOW_MS`].
    pub window_ms: u64,
}

/// Why a rule string is not a rule. Its `Display` is the message the attribute reports.
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
/// assert_eq!(parse_rule("20 per 2 minutes"), Ok(ParsedRule { count: 20, window_ms: 120_000 }));
/// assert!(parse_rule("0/s").unwrap_err().to_string().contains("admits no calls"));
/// ```
pub fn parse_rule(text: &str) -> Result<ParsedRule, RuleTextError> {
    match RuleText::parse(text) {
        Some(RuleText { count: 0, .. }) => Err(RuleTextError::new(format!(
            "rule \"{text}\" admits no calls: the count must be at least 1"
        ))),
        Some(RuleText { time: 0, .. }) => Err(RuleTextError::new(format!(
            "rule \"{text}\" has an empty window: the time must be at least 1"
        ))),
        Some(RuleText { count, .. }) if count > MAX_COUNT => {
            Err(RuleTextError::new(too_large(count)))
        }
        Some(RuleText {
            count,
            time,
            unit_ms,
        }) => match window_ms(time, unit_ms) {
            Some(window_ms) => Ok(ParsedRule { count, window_ms }),
            None => Err(RuleTextError::new(too_long(time, unit_ms))),
        },
        None => Err(RuleTextError::new(format!(
            "cannot parse rule \"{text}\": {RULE_FORMS}"
        ))),
    }
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

/// `time` units of `unit_ms` milliseconds, if a rule can count such a window.
pub fn window_ms(time: u64, unit_ms: u64) -> Option<u64> {
    time.checked_mul(unit_ms).filter(|ms| *ms <= MAX_WINDOW_MS)
}

/// The message for a count above [`MAX_COUNT`].
pub fn too_large(count: u64) -> String {
    format!("a count of {count} is too large: the most is {MAX_COUNT} (2^52)")
}

/// The message for a window above [`MAX_WINDOW_MS`].
pub fn too_long(time: u64, unit_ms: u64) -> String {
    format!(
        "a window of {time} x {unit_ms} ms is too long: the longest is {MAX_WINDOW_MS} ms \
         (about 142 years)"
    )
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
                let rest = words.next()?.trim_start();
                let (per, period) = rest.split_at(rest.find(char::is_whitespace)?);
                if !per.eq_ignore_ascii_case("per") {
                    return None;
                }
                (count, period)
            }
        };
        let count = parse_digits(count.trim())?;
        let period = period.trim();
        let digits = period.find(|c: char| !c.is_ascii_digit())?;
        let time = match digits {
            0 => 1,
            _ => parse_digits(&period[..digits])?,
        };
        let unit_ms = unit_ms(period[digits..].trim_start())?;
        Some(RuleText {
            count,
            time,
            unit_ms,
        })
    }
}

/// Plain decimal digits (no sign, no underscores) that fit in `u64`.
fn parse_digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A unit's length in milliseconds, by any of its spellings, in any case.
fn unit_ms(unit: &str) -> Option<u64> {
    let unit = unit.to_ascii_lowercase();
    let ms = match unit.as_str() {
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    };
    Some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(count: u64, time: u64, unit_ms: u64) -> Option<RuleText> {
        Some(RuleText {
            count,
            time,
            unit_ms,
        })
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
        assert!(message("0/s").contains("admits no calls"));
        assert!(message("1/0s").contains("empty window"));
        assert!(message("4503599627370497/s").contains("too large"));
        assert!(message("1/999999999999d").contains("too long"));
        assert!(message("1/fortnight").starts_with("cannot parse rule \"1/fortnight\": expected"));
        assert_eq!(
            parse_rule("4503599627370496/s"),
            Ok(ParsedRule {
                count: MAX_COUNT,
                window_ms: 1_000
            })
        );
    }

    #[test]
    fn lists_are_separated_by_commas_and_every_entry_must_be_a_rule() {
        assert_eq!(
            parse_rule_list(" 5/minute ,20 per 2 hours"),
            Ok(vec![
                ParsedRule {
                    count: 5,
                    window_ms: 60_000
                },
                ParsedRule {
                    count: 20,
                    window_ms: 7_200_000
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
            .contains("admits no calls"));
    }
}
