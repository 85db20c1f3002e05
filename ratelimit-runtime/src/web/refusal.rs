//! What a refusal tells a person (the problem's `detail`) and which policy it violated
//! (`violated-policies`, named as `RateLimit-Policy` names it), from the refusal's error
//! and, inside a rate-limit layer, the site's decision it kept.

use std::time::Duration;

use crate::web::fields;
use crate::{Calendar, Rule};

/// One refusal, as the problem describes it.
pub(crate) struct Refusal {
    /// The violated policy's name: `p1`, `dup`, `conc`, or `limit` outside a layer.
    pub policy: String,
    why: Why,
}

enum Why {
    /// The rule's budget is used up until `retry_after`.
    Rule { rule: Rule, retry_after: Duration },
    /// The call costs more than the rule ever admits.
    Never { rule: Rule },
    /// Every slot of the caller is held.
    InFlight { max: u64 },
}

impl Refusal {
    /// The refusal by `rule` (waiting `retry_after`; `Duration::MAX`: never), with the
    /// policy named by the decision the request's layer kept, when it is this refusal.
    pub fn of(rule: &Rule, retry_after: Duration) -> Refusal {
        let site = crate::context::kept_decision()
            .filter(|site| !site.decision.allowed && site.decision.rule == *rule);
        let policy = fields::policy_name(
            site.as_ref()
                .map(|site| (&site.decision, site.rules, site.duplicate_rule)),
        );
        let why = match site {
            Some(site) if site.decision.bound_by_slots() => Why::InFlight {
                max: site.decision.limit,
            },
            _ if retry_after == Duration::MAX => Why::Never { rule: *rule },
            _ => Why::Rule {
                rule: *rule,
                retry_after,
            },
        };
        Refusal { policy, why }
    }

    /// What the person behind the request can do: which limit refused it and when to try
    /// again, after the site's own `message` when it has one.
    pub fn detail(&self, message: &str) -> String {
        let specific = match &self.why {
            Why::InFlight { max } => format!(
                "{max} request{} of this caller already in flight; retry when one of them \
                 completes",
                if *max == 1 { "" } else { "s" }
            ),
            Why::Never { rule } => format!(
                "this request costs more than the limit of {rule} allows at once: it can never \
                 pass"
            ),
            Why::Rule { rule, retry_after } => {
                let wait = human(*retry_after);
                match rule.calendar() {
                    Some(calendar) => {
                        let period = match calendar {
                            Calendar::Day => "day",
                            Calendar::Month => "month",
                            Calendar::Year => "year",
                        };
                        format!(
                            "the quota of {rule} is used up until the {period} ends (UTC); \
                             retry in {wait}"
                        )
                    }
                    None => format!("the limit of {rule} is reached; retry in {wait}"),
                }
            }
        };
        if message == ratelimit_rule_text::DEFAULT_MESSAGE {
            specific
        } else {
            format!("{message} ({specific})")
        }
    }
}

/// A wait in whole seconds, rounded up, in human units: `42s`, `3m12s`, `2h05m`, `3d04h`.
fn human(wait: Duration) -> String {
    let secs = fields::retry_after_secs(wait);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3_599 => format!("{}m{:02}s", secs / 60, secs % 60),
        3_600..=86_399 => format!("{}h{:02}m", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detail_says_which_limit_and_when() {
        let refusal = Refusal::of(&Rule::per_minute(10), Duration::from_millis(41_200));
        assert_eq!(refusal.policy, "limit");
        assert_eq!(
            refusal.detail(ratelimit_rule_text::DEFAULT_MESSAGE),
            "the limit of 10 per 60s is reached; retry in 42s"
        );
        assert_eq!(
            refusal.detail("too many codes"),
            "too many codes (the limit of 10 per 60s is reached; retry in 42s)"
        );
        let month = Rule::per_calendar(2_000_000, Calendar::Month);
        let refusal = Refusal::of(&month, Duration::from_secs(3 * 86_400 + 4 * 3_600));
        assert_eq!(
            refusal.detail(ratelimit_rule_text::DEFAULT_MESSAGE),
            "the quota of 2000000 per calendar month is used up until the month ends (UTC); \
             retry in 3d04h"
        );
        let year = Rule::per_calendar(1_000, Calendar::Year);
        let refusal = Refusal::of(&year, Duration::from_secs(40 * 86_400));
        assert_eq!(
            refusal.detail(ratelimit_rule_text::DEFAULT_MESSAGE),
            "the quota of 1000 per calendar year is used up until the year ends (UTC); \
             retry in 40d00h"
        );
        let never = Refusal::of(&Rule::per_minute(10), Duration::MAX);
        assert!(never
            .detail(ratelimit_rule_text::DEFAULT_MESSAGE)
            .ends_with("it can never pass"));
    }
}
