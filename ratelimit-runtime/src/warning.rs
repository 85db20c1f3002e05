//! Warned before the limit: a check with `warn_at = p` that takes a rule from below `p` %
//! of its count to at or above it is a *crossing*. The backend decides it, from the counts
//! it holds under the key's lock (the scripts' `warn.lua`, the embedded backend's
//! [`crossings`]), so that of any two checks only the one that crossed knows it: the hook
//! runs once per crossing, whichever instance made it.

use std::fmt;
use std::sync::Arc;

use crate::Rule;

/// A check took a rule to its warning share (`warn_at`) from below: what
/// [`Limiter::on_warning`](crate::Limiter::on_warning)'s hook is given.
///
/// ```
/// use redis_ratelimit::{Rule, Warning};
///
/// fn describe(w: &Warning) -> String {
///     format!("{} has used {} of {} ({})", w.key, w.used, w.rule.count(), w.rule)
/// }
/// let w = Warning { key: "k".into(), site: "api".into(), rule: Rule::per_minute(10), used: 8 };
/// assert_eq!(describe(&w), "k has used 8 of 10 (10 per 60s)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The key checked (`rate_limit:user:42:my_app::complete`).
    pub key: String,
    /// The site: the guarded site's path (or `name`), `programmatic` for
    /// [`Limiter::check`](crate::Limiter::check), as the metrics' `site` label.
    pub site: String,
    /// The rule whose share was reached.
    pub rule: Rule,
    /// The units (or calls) of `rule` used once the check was counted: at least the
    /// warning share of its count.
    pub used: u64,
}

/// The hook of [`Limiter::on_warning`](crate::Limiter::on_warning).
pub(crate) type Hook = Arc<dyn Fn(&Warning) + Send + Sync>;

/// One rule a check took to its warning share: the rule's index among the rules checked,
/// and the units it used once the check was counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Crossing {
    pub rule_index: usize,
    pub used: u64,
}

/// The crossings of one admitted check; `None` for every other check (so a check that does
/// not warn carries one null pointer).
pub(crate) type Crossings = Option<Box<[Crossing]>>;

/// Whether a rule of `count` with `before` units used crosses `warn_at` % of its count when
/// a check takes `units` more: `before < p·count/100 <= before + units`. As the scripts
/// compute it (`warn.lua`), in exact integers.
pub(crate) fn crosses(count: u64, warn_at: u8, before: u64, units: u64) -> bool {
    let share = u128::from(warn_at) * u128::from(count);
    let used = |n: u64| u128::from(n) * 100;
    used(before) < share && used(before.saturating_add(units)) >= share
}

/// The crossings of an admitted check of `cost` that found `left[i]` units left under
/// `rules[i]` (as the check judged them): those of every rule the check took to its
/// `warn_at` share. The embedded backend's side of `warn.lua`.
pub(crate) fn crossings(rules: &[Rule], left: &[u64], cost: u64, warn_at: u8) -> Crossings {
    let found: Vec<Crossing> = rules
        .iter()
        .zip(left)
        .enumerate()
        .filter_map(|(rule_index, (rule, &left))| {
            let before = rule.count().saturating_sub(left);
            let units = rule.units(cost);
            crosses(rule.count(), warn_at, before, units).then_some(Crossing {
                rule_index,
                used: before + units,
            })
        })
        .collect();
    (!found.is_empty()).then(|| found.into_boxed_slice())
}

/// Reports the `crossings` of a check of `key` by `site` against `rules`: an `INFO` event
/// and counter `ratelimit_warnings_total{site, rule}` each, and the limiter's hook.
#[cold]
pub(crate) fn report(
    hook: Option<&Hook>,
    site: &str,
    key: &str,
    rules: &[Rule],
    crossings: &[Crossing],
) {
    for crossing in crossings {
        let Some(&rule) = rules.get(crossing.rule_index) else {
            continue;
        };
        tracing::info!(
            target: "redis_ratelimit",
            site,
            key,
            rule = %rule,
            used = crossing.used,
            "rate limit warning: {} of {} used",
            crossing.used,
            rule,
        );
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "ratelimit_warnings_total",
            "site" => site.to_owned(),
            "rule" => rule.to_string(),
        )
        .increment(1);
        if let Some(hook) = hook {
            hook(&Warning {
                key: key.to_owned(),
                site: site.to_owned(),
                rule,
                used: crossing.used,
            });
        }
    }
}

/// The hook, as `Limiter`'s `Debug` shows it.
pub(crate) struct HookSet<'a>(pub &'a Option<Hook>);

impl fmt::Debug for HookSet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "set" } else { "none" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crossing_is_from_below_the_share_to_at_or_above_it() {
        // 80 % of 10 is 8.
        assert!(!crosses(10, 80, 6, 1));
        assert!(crosses(10, 80, 7, 1));
        assert!(!crosses(10, 80, 8, 1));
        assert!(crosses(10, 80, 5, 5));
        // 80 % of 7 is 5.6: the 6th unit crosses.
        assert!(!crosses(7, 80, 4, 1));
        assert!(crosses(7, 80, 5, 1));
        assert!(!crosses(7, 80, 6, 1));
        // Exact far past what f64 holds.
        assert!(crosses(u64::MAX / 2, 50, u64::MAX / 4, 1));
    }

    #[test]
    fn crossings_name_each_rule_crossed_with_what_it_used() {
        let rules = [
            Rule::per_second(10),
            Rule::per_minute(100),
            Rule::per_minute(5).calls(),
        ];
        // left before a check of cost 3: 4 of 10, 30 of 100, 2 of 5.
        let found = crossings(&rules, &[4, 30, 2], 3, 80).unwrap();
        assert_eq!(
            &*found,
            [
                Crossing {
                    rule_index: 0,
                    used: 9
                },
                Crossing {
                    rule_index: 2,
                    used: 4
                },
            ]
        );
        assert!(crossings(&rules, &[10, 100, 5], 1, 80).is_none());
    }
}
