//! Rules written as text (`"10/minute"`, `"5/minute, 20/hour"`): the attribute's grammar,
//! from the `ratelimit-rule-text` crate that the attribute uses too, so a rule stored in
//! Redis reads exactly as the same string in `#[rate_limiter(rules("..."))]`.

use std::str::FromStr;
use std::time::Duration;

use crate::Rule;

pub use ratelimit_rule_text::RuleTextError as ParseRuleError;

impl Rule {
    fn from_parsed(rule: ratelimit_rule_text::ParsedRule) -> Rule {
        let parsed = match rule.calendar {
            Some(calendar) => Rule::per_calendar(rule.count, calendar),
            None => Rule::new(rule.count, Duration::from_millis(rule.window_ms)),
        };
        match rule.calls {
            true => parsed.calls(),
            false => parsed,
        }
    }

    /// Parses rules separated by commas, in the attribute's string grammar (`"N/unit"`,
    /// `"N/<k><unit>"`, `"N per unit"`, `"N per k units"`; units `ms`, `s`, `m`, `h`, `d`
    /// and their spelled-out forms).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::Rule;
    ///
    /// let rules = Rule::parse_list("5/minute, 20 per 2 hours")?;
    /// assert_eq!(rules, [Rule::per_minute(5), Rule::new(20, Duration::from_secs(7200))]);
    /// assert!(Rule::parse_list("5/fortnight").is_err());
    /// # Ok::<(), redis_ratelimit::ParseRuleError>(())
    /// ```
    pub fn parse_list(text: &str) -> Result<Vec<Rule>, ParseRuleError> {
        Ok(ratelimit_rule_text::parse_rule_list(text)?
            .into_iter()
            .map(Rule::from_parsed)
            .collect())
    }
}

/// One rule in the attribute's string grammar.
///
/// ```
/// use redis_ratelimit::Rule;
///
/// assert_eq!("10/minute".parse::<Rule>()?, Rule::per_minute(10));
/// assert!("0/minute".parse::<Rule>().unwrap_err().to_string().contains("count must be at least 1"));
/// # Ok::<(), redis_ratelimit::ParseRuleError>(())
/// ```
impl FromStr for Rule {
    type Err = ParseRuleError;

    fn from_str(text: &str) -> Result<Rule, ParseRuleError> {
        ratelimit_rule_text::parse_rule(text).map(Rule::from_parsed)
    }
}
