//! A guarded site's configuration, as its attribute (or a layer's guard) writes it.

use std::time::Duration;

use crate::concurrency::Concurrency;
use crate::lockout::Lockout;
use crate::overrides::SiteRules;
use crate::{Algorithm, LimitType, Rule};

/// One guarded site's static configuration. Not public API: built by `#[rate_limiter]`'s
/// expansion and by layer guards.
#[derive(Clone, Copy, Debug)]
pub struct SiteConfig {
    /// The compiled rules, the duplicate-submission rule last when `duplicate_rule` is
    /// set. With `dynamic_rules`, only the duplicate-submission rule (or none).
    pub rules: &'static [Rule],
    /// Whether the last rule is the duplicate-submission rule.
    pub duplicate_rule: bool,
    /// Whether the rules are chosen per call (`rules = <expr>`).
    pub dynamic_rules: bool,
    /// How the rules are counted.
    pub algorithm: Algorithm,
    /// Whose budget is counted.
    pub limit_type: LimitType,
    /// The keys' prefix, also the prefix of the `{prefix}rules` overrides hash.
    pub prefix: &'static str,
    /// The text a refusal carries.
    pub message: &'static str,
    /// The attribute's `shadow = true`.
    pub shadow: bool,
    /// After a refusal, refuse every call of that caller for this long (the attribute's
    /// `block_for`).
    pub lockout: Option<Lockout>,
    /// Wait up to this long for room instead of refusing at once.
    pub wait: Option<Duration>,
    /// Whether a call's units may be given back (the attribute's `charge_if`): only then
    /// does a check ask Redis for what a refund needs, which costs it a little per check.
    pub refunds: bool,
    /// At most this many calls of one key at once (the attribute's `concurrency` and
    /// `lease`); `None`: no limit on calls in flight.
    pub concurrency: Option<Concurrency>,
    /// Warn when a call takes a rule to this percentage of its count (the attribute's
    /// `warn_at`, 1 to 99); 0: never.
    pub warn_at: u8,
    /// How long a local allowance of this site's keys lives (the attribute's `allowance`);
    /// `None`: the limiter's default; `Some(ZERO)`: none.
    pub allowance: Option<Duration>,
}

impl SiteConfig {
    /// The text a refusal carries unless the site says otherwise (the attribute's `message`).
    pub const DEFAULT_MESSAGE: &'static str = ratelimit_rule_text::DEFAULT_MESSAGE;
    /// The key prefix unless the site says otherwise (the attribute's `key`).
    pub const DEFAULT_PREFIX: &'static str = crate::key::DEFAULT_PREFIX;

    /// A site checking `rules` per client IP with the sliding log, under the default prefix
    /// and message, with no policy: what a layer's guard starts from, and what a site that
    /// changes a few of these writes `..SiteConfig::new(rules)` after.
    pub const fn new(rules: &'static [Rule]) -> SiteConfig {
        SiteConfig {
            rules,
            duplicate_rule: false,
            dynamic_rules: false,
            algorithm: Algorithm::SlidingLog,
            limit_type: LimitType::Ip,
            prefix: Self::DEFAULT_PREFIX,
            message: Self::DEFAULT_MESSAGE,
            shadow: false,
            lockout: None,
            wait: None,
            refunds: false,
            concurrency: None,
            warn_at: 0,
            allowance: None,
        }
    }

    /// The rules as compiled.
    pub(crate) fn compiled_rules(&self) -> SiteRules {
        SiteRules {
            rules: self.rules,
            duplicate_rule: self.duplicate_rule,
        }
    }
}
