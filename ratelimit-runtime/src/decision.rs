use std::time::Duration;

use crate::Rule;

/// The outcome of one check (or peek) of a set of rules.
///
/// Every figure describes the *binding* rule: the one with the least remaining budget
/// (when allowed), or the one that frees up last (when denied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the call may proceed: for a check, it was admitted and counted; for a peek,
    /// a call of the given cost would pass now.
    pub allowed: bool,
    /// The binding rule's count.
    pub limit: u64,
    /// Units left under the binding rule. For an admitted check: after this call. For a
    /// peek, and for a denied check (which consumes nothing): left now, before any call
    /// (so a peek of a fresh key with a limit of 5 answers 5, and a denied check of cost 3
    /// may answer 2).
    pub remaining: u64,
    /// Time until the binding rule's window is fully free again (for an allowed peek: as
    /// a call of the given cost would leave it).
    pub reset_after: Duration,
    /// When denied: `Some(time until a call of the same cost would pass)`, or `None` when
    /// it never can (its cost is above the binding rule's count). Always `None` when
    /// allowed.
    pub retry_after: Option<Duration>,
    /// The binding rule.
    pub rule: Rule,
    /// The binding rule's position in the rules that were checked.
    pub rule_index: usize,
}

/// What a backend's algorithm answers, in the backend's units (µs). Both backends produce
/// exactly this, so a differential test can compare them field by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawDecision {
    pub allowed: bool,
    /// 0-based index of the binding rule.
    pub rule_index: usize,
    pub remaining: u64,
    pub reset_after_us: u64,
    /// 0 when allowed; [`RawDecision::NEVER`] when the call's cost is above the binding
    /// rule's count.
    pub retry_after_us: u64,
}

impl RawDecision {
    /// `retry_after_us` of a call that can never pass (the scripts answer -1).
    pub const NEVER: u64 = u64::MAX;

    pub(crate) fn into_decision(self, rules: &[Rule]) -> Decision {
        let rule = rules[self.rule_index];
        let retry = !self.allowed && self.retry_after_us != Self::NEVER;
        Decision {
            allowed: self.allowed,
            limit: rule.count(),
            remaining: self.remaining,
            reset_after: Duration::from_micros(self.reset_after_us),
            retry_after: retry.then(|| Duration::from_micros(self.retry_after_us)),
            rule,
            rule_index: self.rule_index,
        }
    }
}
