//! The `RateLimit-Policy`, `RateLimit` and `Retry-After` fields, in the structured-field
//! form of draft-ietf-httpapi-ratelimit-headers-11 (its wire format is draft 10's): written
//! once, for HTTP headers (axum, hyper, actix-web) and gRPC metadata (tonic) alike.
//!
//! - `RateLimit-Policy` is a List of quota policies, each a String naming it, with `q` (the
//!   quota, in the default quota unit, requests) and `w` (the window in seconds). The
//!   draft's window is a whole number of seconds ("sub-second precision is not
//!   supported"), so a window that is not one is left out rather than rounded: `w=1` for a
//!   250 ms window would advertise a quarter of the real rate. A calendar quota has no `w`
//!   either: no fixed window fits a month. A limit on calls in flight is the policy `conc`,
//!   `qu="concurrent-requests"`, with no `w`: a slot is held as long as its call runs.
//! - `RateLimit` is the service limit of the binding policy: `r`, the available quota (the
//!   units left), and `t`, the effective window (the seconds until additional quota is made
//!   available, rounded up): for a calendar quota, until the period's end. A limit on calls
//!   in flight has no `t`: nobody knows when a call ends.
//! - `Retry-After` (on a refusal) is in whole seconds, rounded up and at least 1: never
//!   earlier than a call can pass, nor than `t`.

use std::fmt::{self, Write as _};
use std::time::Duration;

use crate::context::SiteDecision;
use crate::{Decision, Rule};

/// `RateLimit-Policy`: the quota policies of the endpoint.
pub(crate) const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// `RateLimit`: where the client stands under the binding policy.
pub(crate) const RATELIMIT: &str = "ratelimit";
/// `Retry-After`: when a refused call may be retried.
pub(crate) const RETRY_AFTER: &str = "retry-after";

/// The name of a rule known only by itself (a [`RateLimitError`](crate::RateLimitError)
/// turned into a response outside an integration's layer, which does not know the other
/// rules).
pub(crate) const LONE_POLICY: &str = "limit";

/// The name of a site's limit on calls in flight, a policy in the quota unit
/// `concurrent-requests`.
pub(crate) const CONCURRENCY_POLICY: &str = "conc";

/// Where the fields go: a framework's header map, or gRPC metadata. Public only in name:
/// it bounds the middleware's response future.
pub trait FieldSink {
    /// Sets `name` (lower case) to `value` (visible ASCII), replacing any value it had.
    fn set(&mut self, name: &'static str, value: String);
    /// Whether `name` is set.
    fn has(&self, name: &'static str) -> bool;
}

/// Whole seconds, rounded up: a client told to wait this long never comes back early.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `Retry-After` in whole seconds, rounded up and at least 1: a refusal must not invite an
/// immediate retry.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    ceil_secs(wait).max(1)
}

/// The name of rule `index` of a call site: `p1`, `p2`, ... in the order the attribute
/// lists them, and `dup` for the duplicate-submission rule.
enum PolicyName {
    Numbered(usize),
    Duplicate,
    /// A rule known alone: a refusal answered from its error.
    Lone,
    /// The limit on calls in flight (`Guard::concurrency`, the attribute's `concurrency`).
    Concurrency,
}

impl PolicyName {
    fn of(index: usize, rules: &[Rule], duplicate_rule: bool) -> PolicyName {
        if duplicate_rule && index + 1 == rules.len() {
            PolicyName::Duplicate
        } else {
            PolicyName::Numbered(index + 1)
        }
    }

    /// The name of what bound `decision` of a site checking `rules`: its rule, or its
    /// limit on calls in flight.
    fn binding(decision: &Decision, rules: &[Rule], duplicate_rule: bool) -> PolicyName {
        match decision.bound_by_slots() {
            true => PolicyName::Concurrency,
            false => PolicyName::of(decision.rule_index, rules, duplicate_rule),
        }
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyName::Numbered(n) => write!(f, "p{n}"),
            PolicyName::Duplicate => f.write_str("dup"),
            PolicyName::Lone => f.write_str(LONE_POLICY),
            PolicyName::Concurrency => f.write_str(CONCURRENCY_POLICY),
        }
    }
}

/// Writing into a String cannot fail.
fn push_policy(out: &mut String, name: PolicyName, rule: &Rule) {
    let _ = write!(out, "\"{name}\";q={}", rule.count());
    let window = rule.window();
    if window.subsec_nanos() == 0 && rule.calendar().is_none() {
        let _ = write!(out, ";w={}", window.as_secs());
    }
}

/// `"name";r=..;t=..`; `reset` `None` for no `t` (calls in flight).
fn push_limit(out: &mut String, name: PolicyName, remaining: u64, reset: Option<Duration>) {
    let _ = write!(out, "\"{name}\";r={remaining}");
    if let Some(reset) = reset {
        let _ = write!(out, ";t={}", ceil_secs(reset));
    }
}

/// The name the fields give what bound a decision of a call site whose rules are `rules`
/// (`conc`: its limit on calls in flight); [`LONE_POLICY`] without the site.
pub(crate) fn policy_name(site: Option<(&Decision, &[Rule], bool)>) -> String {
    match site {
        Some((decision, rules, duplicate_rule)) => {
            PolicyName::binding(decision, rules, duplicate_rule).to_string()
        }
        None => PolicyName::Lone.to_string(),
    }
}

/// `"p1";q=10;w=60, "dup";q=1;w=5`: every rule of the call site.
pub(crate) fn policy_list(rules: &[Rule], duplicate_rule: bool) -> String {
    let mut out = String::with_capacity(24 * rules.len());
    for (index, rule) in rules.iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        push_policy(&mut out, PolicyName::of(index, rules, duplicate_rule), rule);
    }
    out
}

/// The fields of a refusal known only from its error: the binding rule, named
/// [`LONE_POLICY`], and the wait. `retry_after` of `Duration::MAX` is a cost above the rule's
/// count, which no wait lets pass: the client is not invited to retry (no `Retry-After`),
/// and `t` is the rule's window.
pub(crate) fn describe_refusal(rule: &Rule, retry_after: Duration, sink: &mut impl FieldSink) {
    let never = retry_after == Duration::MAX;
    // A calendar period's end is not known here: a cost that never passes gets no `t`.
    let wait = match never {
        true => rule.calendar().is_none().then(|| rule.window()),
        false => Some(retry_after),
    };
    let mut policy = String::with_capacity(24);
    push_policy(&mut policy, PolicyName::Lone, rule);
    let mut limit = String::with_capacity(24);
    push_limit(&mut limit, PolicyName::Lone, 0, wait);
    sink.set(RATELIMIT_POLICY, policy);
    sink.set(RATELIMIT, limit);
    if !never {
        sink.set(RETRY_AFTER, retry_after_secs(retry_after).to_string());
    }
}

/// Describes the decision of a request's guarded calls on its response: every policy of
/// the call site, the binding one's remainder and `t`, replacing what a refusal's error
/// alone could say. On a refusal (`refused`: a 429, or a gRPC `RESOURCE_EXHAUSTED`) that
/// lacks `Retry-After`, one is added.
///
/// `t` is the wait before a call passes when denied. When allowed it is the time until the
/// binding rule's window is free again, which is when additional quota is available at the
/// latest: exact for a fixed window and for a rule with one unit in use; a sliding log frees
/// its units one by one, the first of them possibly sooner.
pub(crate) fn describe(outcome: &SiteDecision, refused: bool, sink: &mut impl FieldSink) {
    let decision = &outcome.decision;
    let mut policies = policy_list(outcome.rules, outcome.duplicate_rule);
    if let Some(max) = outcome.concurrency {
        // No window: a slot is held for as long as its call runs.
        let _ = write!(
            policies,
            ", \"{}\";q={max};qu=\"concurrent-requests\"",
            PolicyName::Concurrency
        );
    }
    sink.set(RATELIMIT_POLICY, policies);
    let name = PolicyName::binding(decision, outcome.rules, outcome.duplicate_rule);
    // Nobody knows when a call in flight ends: its policy has no `t`.
    let reset = match name {
        PolicyName::Concurrency => None,
        _ => Some(decision.retry_after.unwrap_or(decision.reset_after)),
    };
    let mut limit = String::with_capacity(24);
    push_limit(&mut limit, name, decision.remaining, reset);
    sink.set(RATELIMIT, limit);
    if let Some(wait) = decision.retry_after {
        if refused && !sink.has(RETRY_AFTER) {
            sink.set(RETRY_AFTER, retry_after_secs(wait).to_string());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::decision::Bound;
    use crate::Decision;

    /// A sink that is a plain map, to read the fields back.
    #[derive(Debug, Default)]
    pub(crate) struct Fields(pub BTreeMap<&'static str, String>);

    impl FieldSink for Fields {
        fn set(&mut self, name: &'static str, value: String) {
            self.0.insert(name, value);
        }

        fn has(&self, name: &'static str) -> bool {
            self.0.contains_key(name)
        }
    }

    impl Fields {
        fn get(&self, name: &str) -> Option<&str> {
            self.0.get(name).map(String::as_str)
        }
    }

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
            concurrency: None,
        }
    }

    /// A decision binding on rule `rule_index` of `rules`: denied when there is a
    /// `retry_after`.
    pub(crate) fn decision_under(
        rules: &[Rule],
        rule_index: usize,
        remaining: u64,
        reset_after: Duration,
        retry_after: Option<Duration>,
    ) -> Decision {
        let rule = rules[rule_index];
        Decision {
            allowed: retry_after.is_none(),
            limit: rule.count(),
            remaining,
            reset_after,
            retry_after,
            rule,
            rule_index,
            bound: Bound::Rule,
            receipt: Default::default(),
        }
    }

    /// Reset in 59.001 s; when denied, retry in 4.2 s.
    fn decision(allowed: bool, rule_index: usize, remaining: u64) -> Decision {
        let wait = Duration::from_millis(4_200);
        let reset_after = Duration::from_millis(59_001);
        decision_under(
            &RULES,
            rule_index,
            remaining,
            reset_after,
            (!allowed).then_some(wait),
        )
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(12)), 12);
        assert_eq!(ceil_secs(Duration::from_micros(12_000_001)), 13);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(11_001)), 12);
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
    }

    #[test]
    fn a_window_that_is_not_whole_seconds_is_not_advertised() {
        // `w=1` would tell a client 3 calls a second where 12 pass.
        assert_eq!(
            policy_list(&[Rule::new(3, Duration::from_millis(250))], false),
            r#""p1";q=3"#
        );
        assert_eq!(
            policy_list(
                &[
                    Rule::new(3, Duration::from_millis(1_500)),
                    Rule::new(9, Duration::from_millis(2_000))
                ],
                false
            ),
            r#""p1";q=3, "p2";q=9;w=2"#
        );
    }

    #[test]
    fn a_calendar_policy_has_no_window_and_runs_to_the_period_s_end() {
        let rules = [
            Rule::per_minute(60).calls(),
            Rule::per_calendar(2_000_000, crate::Calendar::Month),
        ];
        assert_eq!(
            policy_list(&rules, false),
            r#""p1";q=60;w=60, "p2";q=2000000"#
        );
        let year = [Rule::per_calendar(1_000, crate::Calendar::Year)];
        assert_eq!(policy_list(&year, false), r#""p1";q=1000"#);
        // Its decision's reset is the month's end: 3 days away.
        let month_end = Duration::from_secs(3 * 86_400);
        let mut fields = Fields::default();
        let decision = decision_under(&rules, 1, 1_500_000, month_end, None);
        let site = SiteDecision {
            decision,
            rules: Box::leak(Box::new(rules)),
            duplicate_rule: false,
            concurrency: None,
        };
        describe(&site, false, &mut fields);
        assert_eq!(fields.get(RATELIMIT), Some(r#""p2";r=1500000;t=259200"#));
    }

    #[test]
    fn a_concurrency_policy_has_neither_window_nor_t() {
        let rules: &'static [Rule] = &RULES[..1];
        let lease = Duration::from_secs(30);
        let decision = Decision {
            allowed: false,
            limit: 4,
            remaining: 0,
            reset_after: lease,
            retry_after: Some(Duration::from_millis(100)),
            rule: Rule::new(4, lease),
            rule_index: 1,
            bound: Bound::Slots,
            receipt: Default::default(),
        };
        let site = SiteDecision {
            decision,
            rules,
            duplicate_rule: false,
            concurrency: Some(4),
        };
        let mut fields = Fields::default();
        describe(&site, true, &mut fields);
        assert_eq!(
            fields.get(RATELIMIT_POLICY),
            Some(r#""p1";q=10;w=60, "conc";q=4;qu="concurrent-requests""#)
        );
        assert_eq!(fields.get(RATELIMIT), Some(r#""conc";r=0"#));
        assert_eq!(fields.get(RETRY_AFTER), Some("1"));
    }

    #[test]
    fn an_allowed_call_reports_the_binding_rule_and_its_reset() {
        let mut fields = Fields::default();
        describe(&outcome(decision(true, 1, 7), true), false, &mut fields);
        assert_eq!(fields.get(RATELIMIT), Some(r#""p2";r=7;t=60"#));
        assert_eq!(
            fields.get(RATELIMIT_POLICY),
            Some(r#""p1";q=10;w=60, "p2";q=20;w=120, "dup";q=1;w=5"#)
        );
        assert_eq!(fields.get(RETRY_AFTER), None);
    }

    #[test]
    fn a_denied_call_reports_the_wait_and_replaces_the_lone_policy() {
        let mut fields = Fields::default();
        describe_refusal(&RULES[2], Duration::from_millis(4_200), &mut fields);
        assert_eq!(fields.get(RATELIMIT_POLICY), Some(r#""limit";q=1;w=5"#));
        assert_eq!(fields.get(RATELIMIT), Some(r#""limit";r=0;t=5"#));
        assert_eq!(fields.get(RETRY_AFTER), Some("5"));

        describe(&outcome(decision(false, 2, 0), true), true, &mut fields);
        assert_eq!(fields.get(RATELIMIT), Some(r#""dup";r=0;t=5"#));
        assert_eq!(
            fields.get(RATELIMIT_POLICY),
            Some(r#""p1";q=10;w=60, "p2";q=20;w=120, "dup";q=1;w=5"#)
        );
        assert_eq!(fields.get(RETRY_AFTER), Some("5"));
    }

    #[test]
    fn retry_after_is_never_earlier_than_t() {
        for ms in [0, 1, 999, 1_000, 1_001, 4_200, 59_999] {
            let mut fields = Fields::default();
            describe_refusal(&RULES[0], Duration::from_millis(ms), &mut fields);
            let t: u64 = fields
                .get(RATELIMIT)
                .unwrap()
                .rsplit("t=")
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let retry_after: u64 = fields.get(RETRY_AFTER).unwrap().parse().unwrap();
            assert!(retry_after >= t && retry_after * 1_000 >= ms, "{ms} ms");
        }
    }

    #[test]
    fn a_cost_that_can_never_pass_gets_no_retry_after() {
        let mut fields = Fields::default();
        describe_refusal(&RULES[0], Duration::MAX, &mut fields);
        assert_eq!(fields.get(RETRY_AFTER), None);
        assert_eq!(fields.get(RATELIMIT_POLICY), Some(r#""limit";q=10;w=60"#));
        assert_eq!(fields.get(RATELIMIT), Some(r#""limit";r=0;t=60"#));
    }

    #[test]
    fn a_refusal_of_the_application_s_own_gets_retry_after() {
        let denied = outcome(decision(false, 0, 0), false);
        let mut fields = Fields::default();
        describe(&denied, true, &mut fields);
        assert_eq!(fields.get(RETRY_AFTER), Some("5"));
        assert_eq!(fields.get(RATELIMIT), Some(r#""p1";r=0;t=5"#));
        // Not on other answers: the application answered something else on purpose.
        let mut fields = Fields::default();
        describe(&denied, false, &mut fields);
        assert_eq!(fields.get(RETRY_AFTER), None);
    }
}
