//! The `RateLimit-Policy`, `RateLimit` and `Retry-After` headers, in the structured-field
//! form of draft-ietf-httpapi-ratelimit-headers.

use std::fmt::Write as _;
use std::time::Duration;

use ::axum::http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use ::axum::http::StatusCode;

use crate::context::SiteDecision;
use crate::Rule;

/// `RateLimit-Policy`: the quota policies of the endpoint.
pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: where the client stands under the binding policy.
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The name of a rule known only by itself (a [`RateLimitError`](crate::RateLimitError)
/// turned into a response outside the layer, which does not know the other rules).
pub(crate) const LONE_POLICY: &str = "limit";

/// Whole seconds, rounded up: a client told to wait this long never comes back early.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The name of rule `index` of a call site: `p1`, `p2`, ... in the order the attribute
/// lists them, and `dup` for the duplicate-submission rule.
fn policy_name(index: usize, rules: &[Rule], duplicate_rule: bool) -> PolicyName {
    if duplicate_rule && index + 1 == rules.len() {
        PolicyName::Duplicate
    } else {
        PolicyName::Numbered(index + 1)
    }
}

enum PolicyName {
    Numbered(usize),
    Duplicate,
}

impl std::fmt::Display for PolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyName::Numbered(n) => write!(f, "p{n}"),
            PolicyName::Duplicate => f.write_str("dup"),
        }
    }
}

fn push_policy(out: &mut String, name: impl std::fmt::Display, rule: &Rule) {
    // Writing into a String cannot fail.
    let _ = write!(
        out,
        "\"{name}\";q={};w={}",
        rule.count(),
        ceil_secs(rule.window())
    );
}

fn push_status(out: &mut String, name: impl std::fmt::Display, remaining: u64, reset: Duration) {
    let _ = write!(out, "\"{name}\";r={remaining};t={}", ceil_secs(reset));
}

fn value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).expect("structured-field text is visible ASCII")
}

/// `"p1";q=10;w=60, "dup";q=1;w=5`: every rule of the call site.
pub(crate) fn policy_list(rules: &[Rule], duplicate_rule: bool) -> HeaderValue {
    let mut out = String::with_capacity(24 * rules.len());
    for (index, rule) in rules.iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        push_policy(&mut out, policy_name(index, rules, duplicate_rule), rule);
    }
    value(out)
}

/// `RateLimit-Policy` and `RateLimit` for one rule known only by itself.
pub(crate) fn lone_policy(rule: &Rule, wait: Duration) -> (HeaderValue, HeaderValue) {
    let mut policy = String::new();
    push_policy(&mut policy, LONE_POLICY, rule);
    let mut status = String::new();
    push_status(&mut status, LONE_POLICY, 0, wait);
    (value(policy), value(status))
}

/// `Retry-After` in whole seconds, rounded up and at least 1: a 429 must not invite an
/// immediate retry.
pub(crate) fn retry_after(wait: Duration) -> HeaderValue {
    HeaderValue::from(ceil_secs(wait).max(1))
}

/// Describes `outcome` on a response: every policy of the call site, the binding one's
/// remainder and reset (`t` is the wait before a call passes when denied), and, on a 429
/// that lacks it, `Retry-After`. Replaces what the error alone could say.
pub(crate) fn describe(outcome: &SiteDecision, status: StatusCode, headers: &mut HeaderMap) {
    let decision = &outcome.decision;
    headers.insert(
        RATELIMIT_POLICY,
        policy_list(outcome.rules, outcome.duplicate_rule),
    );
    let reset = decision.retry_after.unwrap_or(decision.reset_after);
    let mut status_line = String::with_capacity(24);
    push_status(
        &mut status_line,
        policy_name(decision.rule_index, outcome.rules, outcome.duplicate_rule),
        decision.remaining,
        reset,
    );
    headers.insert(RATELIMIT, value(status_line));
    if let Some(wait) = decision.retry_after {
        if status == StatusCode::TOO_MANY_REQUESTS && !headers.contains_key(RETRY_AFTER) {
            headers.insert(RETRY_AFTER, retry_after(wait));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Decision;

    const RULES: [Rule; 3] = [
        Rule::per_minute(10),
        Rule::new(20, Duration::from_secs(120)),
        Rule::new(1, Duration::from_secs(5)),
    ];

    fn outcome(decision: Decision, duplicate_rule: bool) -> SiteDecision {
        SiteDecision {
            decision,
            rules: &RULES,
            duplicate_rule,
        }
    }

    fn decision(allowed: bool, rule_index: usize, remaining: u64) -> Decision {
        Decision {
            allowed,
            limit: RULES[rule_index].count(),
            remaining,
            reset_after: Duration::from_millis(59_001),
            retry_after: (!allowed).then(|| Duration::from_millis(4_200)),
            rule: RULES[rule_index],
            rule_index,
        }
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(12)), 12);
        assert_eq!(ceil_secs(Duration::from_micros(12_000_001)), 13);
        assert_eq!(retry_after(Duration::ZERO), "1");
        assert_eq!(retry_after(Duration::from_millis(11_001)), "12");
    }

    #[test]
    fn policies_are_numbered_in_order_and_the_duplicate_rule_is_dup() {
        assert_eq!(
            policy_list(&RULES, true),
            r#""p1";q=10;w=60, "p2";q=20;w=120, "dup";q=1;w=5"#
        );
        assert_eq!(
            policy_list(&RULES, false),
            r#""p1";q=10;w=60, "p2";q=20;w=120, "p3";q=1;w=5"#
        );
        assert_eq!(policy_list(&RULES[2..], true), r#""dup";q=1;w=5"#);
        // Sub-second windows round up to a whole second.
        assert_eq!(
            policy_list(&[Rule::new(3, Duration::from_millis(250))], false),
            r#""p1";q=3;w=1"#
        );
    }

    #[test]
    fn an_allowed_call_reports_the_binding_rule_and_its_reset() {
        let mut headers = HeaderMap::new();
        describe(
            &outcome(decision(true, 1, 7), true),
            StatusCode::OK,
            &mut headers,
        );
        assert_eq!(headers[RATELIMIT], r#""p2";r=7;t=60"#);
        assert_eq!(
            headers[RATELIMIT_POLICY],
            r#""p1";q=10;w=60, "p2";q=20;w=120, "dup";q=1;w=5"#
        );
        assert!(!headers.contains_key(RETRY_AFTER));
    }

    #[test]
    fn a_denied_call_reports_the_wait_and_replaces_the_lone_policy() {
        let mut headers = HeaderMap::new();
        let (policy, status) = lone_policy(&RULES[2], Duration::from_millis(4_200));
        assert_eq!(policy, r#""limit";q=1;w=5"#);
        assert_eq!(status, r#""limit";r=0;t=5"#);
        headers.insert(RATELIMIT_POLICY, policy);
        headers.insert(RATELIMIT, status);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("5"));

        let denied = outcome(decision(false, 2, 0), true);
        describe(&denied, StatusCode::TOO_MANY_REQUESTS, &mut headers);
        assert_eq!(headers[RATELIMIT], r#""dup";r=0;t=5"#);
        assert_eq!(headers.get_all(RATELIMIT_POLICY).iter().count(), 1);
        assert_eq!(headers[RETRY_AFTER], "5");
    }

    #[test]
    fn a_429_of_the_application_s_own_gets_retry_after() {
        let denied = outcome(decision(false, 0, 0), false);
        let mut headers = HeaderMap::new();
        describe(&denied, StatusCode::TOO_MANY_REQUESTS, &mut headers);
        assert_eq!(headers[RETRY_AFTER], "5");
        assert_eq!(headers[RATELIMIT], r#""p1";r=0;t=5"#);
        // Not on other statuses: the application answered something else on purpose.
        let mut headers = HeaderMap::new();
        describe(&denied, StatusCode::OK, &mut headers);
        assert!(!headers.contains_key(RETRY_AFTER));
    }
}
