use std::time::Duration;

use crate::Rule;

/// The outcome of one check of a set of rules.
///
/// Every figure describes the *binding* rule: the one with the least remaining budget
/// (when allowed), or the one that frees up last (when denied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the call may proceed (and, for a check, was counted).
    pub allowed: bool,
    /// The binding rule's count.
    pub limit: u64,
    /// Calls left under the binding rule after this one.
    pub remaining: u64,
    /// Time until the binding rule's window is fully free again.
    pub reset_after: Duration,
    /// `Some` when denied: the time until a call would pass.
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
    /// 0 when allowed.
    pub retry_after_us: u64,
}

impl RawDecision {
    pub(crate) fn into_decision(self, rules: &[Rule]) -> Decision {
        let rule = rules[self.rule_index];
        Decision {
            allowed: self.allowed,
            limit: rule.count(),
            remaining: self.remaining,
            reset_after: Duration::from_micros(self.reset_after_us),
            retry_after: (!self.allowed).then(|| Duration::from_micros(self.retry_after_us)),
            rule,
            rule_index: self.rule_index,
        }
    }
}
