//! Guards: routes limited from the router, without an attribute on each handler. A
//! [`Guard`] is free of any framework; the tower layer (axum, tonic, hyper) and the
//! actix-web middleware hold them and check each request against them before it reaches
//! the inner service.

use std::time::Duration;

use ratelimit_rule_text::{check_name, NAME_FORM};

use crate::concurrency::Concurrency;
use crate::lockout::Lockout;
use crate::site_config::SiteConfig;
use crate::{Algorithm, LimitType, Limiter, Rule};

/// A rate limit checked by a framework layer for every request through it, before the
/// request reaches the inner service: the attribute's rules, key, algorithm and policies,
/// written on the router instead of on each handler.
///
/// Add it to a layer with `.guard(..)`: `redis_ratelimit::axum::RateLimitLayer` (and the
/// tower and tonic layers) or `redis_ratelimit::actix::RateLimit`. A layer may hold
/// several; each request is checked against them in the order added, and the first
/// refusal answers (the later guards are not checked, so they count nothing).
///
/// ```
/// use std::time::Duration;
/// use redis_ratelimit::{Algorithm, Guard, LimitType, Rule};
///
/// static API: [Rule; 2] = [Rule::per_minute(100), Rule::per_hour(1000)];
/// static EXPORT: [Rule; 1] = [Rule::per_minute(2)];
///
/// // Per client IP, on the global limiter: keys `rate_limit:ip:{ip}:api`.
/// let api = Guard::new("api", &API);
/// // Per user (the layer's `user_id`), locked out for 15 minutes once refused.
/// let export = Guard::new("api/export", &EXPORT)
///     .limit_type(LimitType::UserId)
///     .algorithm(Algorithm::TokenBucket)
///     .key_prefix("app:")
///     .block_for(Duration::from_secs(15 * 60));
/// assert_eq!(export.name(), "api/export");
/// ```
///
/// # What a request meets
///
/// - **Allowed**: the request goes on; its response carries the guard's `RateLimit-Policy`
///   and `RateLimit` fields (or a handler's guarded call's, when that one binds harder).
/// - **Refused**: the inner service is not called. The layer answers as a guarded
///   handler's refusal does: `429` with `Retry-After`, the RateLimit fields and an
///   `application/problem+json` body (a gRPC request: `RESOURCE_EXHAUSTED`).
/// - **No identity**: an `Ip` guard on a request without a peer address, or a `UserId`
///   guard on a request the layer's `user_id` finds no user for, is answered `500`
///   saying what is missing (gRPC: `INTERNAL`), never pooled into a shared budget.
/// - **Exempt** (the layer's `exempt`): no guard is checked.
/// - **Backend failure**: let through when the limiter is fail-open (the default),
///   answered `503` when it is fail-closed.
///
/// # Operating it
///
/// The guard's name is its site's path, as a function's path is an attribute's: the last
/// part of its keys (`{prefix}{type}:{identity}:{name}`, or `{prefix}global:{name}`), the
/// `site` label of its metrics, and the field of its rule and mode overrides
/// ([`Limiter::override_rules`], [`Limiter::override_mode`], `{name}#mode` in the
/// `{prefix}rules` hash). A guard is known to [`Limiter::rules_in_force`] and
/// [`Limiter::mode_in_force`] once it is added to a layer.
#[derive(Clone, Debug)]
pub struct Guard {
    name: &'static str,
    config: SiteConfig,
    /// `None`: the global limiter, looked up at each check, so that a layer built before
    /// [`init`](crate::init) still counts on the limiter `init` sets.
    limiter: Option<&'static Limiter>,
}

/// Panics, as `ctor` does (`Guard::new`, `RateLimitMiddleware::new`), when `name` (its
/// `noun` in the message) is malformed or `rules` is empty; the message suggests `example`.
#[track_caller]
pub(crate) fn assert_named_rules(
    ctor: &str,
    noun: &str,
    name: &str,
    rules: &[Rule],
    example: &str,
) {
    if let Err(why) = check_name(name) {
        panic!("{ctor}: malformed {noun} {name:?}: {why}; {NAME_FORM}");
    }
    assert!(
        !rules.is_empty(),
        "{ctor}(\"{name}\", ..): no rules; give at least one rule (e.g. [{example}])"
    );
}

impl Guard {
    /// A guard named `name` checking `rules`, per client IP, with the sliding log, on the
    /// [global limiter](crate::global), under the key prefix `"rate_limit:"`.
    ///
    /// # Panics
    ///
    /// When `rules` is empty, or `name` is not one or more segments of ASCII letters,
    /// digits, `_`, `.` and `-` separated by `::` or `/` (the attribute's `name`): it is a
    /// key's last part, a metric label and a Redis hash field. Both are usually written in
    /// the code, like routes.
    pub fn new(name: &'static str, rules: &'static [Rule]) -> Guard {
        assert_named_rules(
            "Guard::new",
            "guard name",
            name,
            rules,
            "Rule::per_minute(100)",
        );
        Guard {
            name,
            config: SiteConfig::new(rules),
            limiter: None,
        }
    }

    /// Whose budget a request is counted against (default [`LimitType::Ip`]):
    ///
    /// - [`Ip`](LimitType::Ip): the client IP the layer found (the peer address, or behind
    ///   trusted proxies the address they forwarded);
    /// - [`UserId`](LimitType::UserId): what the layer's `user_id` closure returns;
    /// - [`Global`](LimitType::Global): one budget shared by every request.
    ///
    /// # Panics
    ///
    /// For [`LimitType::Custom`]: a layer has no value to count it by. Limit the handler
    /// with `#[rate_limiter(limit_type = CUSTOM, by = ...)]` instead, or give the layer a
    /// `user_id` closure returning that value and use `UserId`.
    pub fn limit_type(mut self, limit_type: LimitType) -> Guard {
        assert!(
            limit_type != LimitType::Custom,
            "Guard::limit_type: guard \"{}\" cannot count by LimitType::Custom, as a layer has \
             no value to count it by; use Ip, UserId or Global, or limit the handler with \
             #[rate_limiter(limit_type = CUSTOM, by = ...)]",
            self.name
        );
        self.config.limit_type = limit_type;
        self
    }

    /// How the rules are counted (default [`Algorithm::SlidingLog`]).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Guard {
        self.config.algorithm = algorithm;
        self
    }

    /// The limiter to count on (default: the [global limiter](crate::global), as it is
    /// when a request is checked).
    pub fn limiter(mut self, limiter: &'static Limiter) -> Guard {
        self.limiter = Some(limiter);
        self
    }

    /// The keys' prefix (default `"rate_limit:"`), also the prefix of the `{prefix}rules`
    /// hash its overrides are read from.
    pub fn key_prefix(mut self, prefix: &'static str) -> Guard {
        self.config.prefix = prefix;
        self
    }

    /// Counts and reports, but never refuses (default `false`): as the attribute's
    /// `shadow = true`. A would-be refusal is reported (metrics outcome `shadow_limited`,
    /// a throttled `info` event) and the request goes on, without RateLimit fields. An
    /// operator's [mode](Limiter::override_mode) for the guard's name wins over it.
    pub fn shadow(mut self, shadow: bool) -> Guard {
        self.config.shadow = shadow;
        self
    }

    /// Once a request is refused, refuses every request of that caller through this guard
    /// until the refusal's time plus `duration`, as the attribute's `block_for`. The block
    /// is kept with the key's state, so every instance sees it; blocked requests consume
    /// nothing; [`Limiter::reset`] of the key lifts it.
    ///
    /// # Panics
    ///
    /// When `duration` is under 1 ms or over [`Rule::MAX_WINDOW`].
    pub fn block_for(mut self, duration: Duration) -> Guard {
        assert!(
            duration >= Duration::from_millis(1) && duration <= Rule::MAX_WINDOW,
            "Guard::block_for: guard \"{}\" cannot block for {duration:?}; a block lasts at \
             least 1 ms and at most 2^52 microseconds (about 142 years)",
            self.name
        );
        self.config.lockout = Some(Lockout::For(duration));
        self
    }

    /// Once a request is refused, refuses every request of that caller through this guard
    /// for the next duration of `schedule`: the nth lock-out within 24 hours of the end of
    /// the previous one lasts the nth duration (the last repeats), as the attribute's
    /// `block_for = ["1m", "10m", "1h"]` and [`Check::block_schedule`](crate::Check::block_schedule).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Guard, Rule};
    ///
    /// static LOGIN: [Rule; 1] = [Rule::per_minute(5)];
    /// static LOCKOUTS: [Duration; 3] =
    ///     [Duration::from_secs(60), Duration::from_secs(600), Duration::from_secs(3600)];
    /// let guard = Guard::new("login", &LOGIN).block_schedule(&LOCKOUTS);
    /// # drop(guard);
    /// ```
    ///
    /// # Panics
    ///
    /// When `schedule` is empty, or holds a duration under 1 ms or over
    /// [`Rule::MAX_WINDOW`].
    pub fn block_schedule(mut self, schedule: &'static [Duration]) -> Guard {
        self.config.lockout = Some(Lockout::of_schedule(schedule));
        self
    }

    /// Warns when a request takes a rule from below `percent` % of its count to at or
    /// above it, as the attribute's `warn_at` and [`Check::warn_at`](crate::Check::warn_at):
    /// the limiter's [`on_warning`](Limiter::on_warning) hook runs once per crossing,
    /// fleet-wide.
    ///
    /// ```
    /// use redis_ratelimit::{Guard, Rule};
    ///
    /// static API: [Rule; 1] = [Rule::per_minute(600)];
    /// let guard = Guard::new("api", &API).warn_at(90);
    /// # drop(guard);
    /// ```
    ///
    /// # Panics
    ///
    /// When `percent` is 0 or above 99.
    pub fn warn_at(mut self, percent: u8) -> Guard {
        self.config.warn_at = crate::limiter::checked_warn_at(percent);
        self
    }

    /// Admits this guard's requests from a local allowance living up to `max_age`, as the
    /// attribute's `allowance` (default: the limiter's, see [`Limiter::allowance`];
    /// `Duration::ZERO` turns it off for this guard): a part of the key's budget reserved
    /// in one round trip, the requests that follow in this process admitted from it without
    /// one, what is left given back. The bound stays exact; the RateLimit fields then
    /// describe this instance's view.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Guard, LimitType, Rule};
    ///
    /// static API: [Rule; 1] = [Rule::per_second(1000)];
    /// let guard = Guard::new("api", &API)
    ///     .limit_type(LimitType::Global)
    ///     .allowance(Duration::from_millis(250));
    /// # drop(guard);
    /// ```
    pub fn allowance(mut self, max_age: Duration) -> Guard {
        self.config.allowance = Some(max_age);
        self
    }

    /// At most `n` requests of one caller through this guard at once (a slot each, held
    /// until its response has been sent, so a streamed answer holds it to its end), with
    /// the rules, all or nothing, in the same round trip. The request after the `n`th is
    /// refused with the guard's 429 (its `Retry-After` a short hint, see
    /// [`Slot::RETRY_HINT`](crate::Slot::RETRY_HINT)); answers describe the limit as the
    /// policy `"conc"` with `qu="concurrent-requests"`. Each slot is leased for 30 s (see
    /// [`lease`](Self::lease)), renewed while the request runs.
    ///
    /// ```
    /// use redis_ratelimit::{Guard, Rule};
    ///
    /// static COMPLETIONS: [Rule; 1] = [Rule::per_minute(60)];
    /// let guard = Guard::new("llm", &COMPLETIONS).concurrency(4);
    /// # drop(guard);
    /// ```
    ///
    /// # Panics
    ///
    /// When `n` is 0 or above [`Rule::MAX_COUNT`].
    pub fn concurrency(mut self, n: u64) -> Guard {
        let lease = self
            .config
            .concurrency
            .map_or(crate::concurrency::DEFAULT_LEASE, |c| c.lease);
        self.config.concurrency = Some(Concurrency::new(n, lease));
        self
    }

    /// How long a request's slot outlives its holder's last renewal (default 30 s): the
    /// time a crashed instance's slots stay taken. Needs [`concurrency`](Self::concurrency).
    ///
    /// # Panics
    ///
    /// Without `concurrency`, and when `lease` is under 1 ms or above [`Rule::MAX_WINDOW`].
    pub fn lease(mut self, lease: Duration) -> Guard {
        let Some(concurrency) = self.config.concurrency else {
            panic!(
                "Guard::lease: guard \"{}\" has no concurrency limit; call \
                 .concurrency(n) first",
                self.name
            );
        };
        self.config.concurrency = Some(Concurrency::new(concurrency.max, lease));
        self
    }

    /// The guard's name: its site's path, for overrides and modes.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

#[cfg(any(feature = "tower", feature = "actix"))]
pub(crate) use checking::{check_listed, GuardSite};

#[cfg(any(feature = "tower", feature = "actix"))]
mod checking {
    use crate::site::{self, GuardedCall, Site};
    use crate::Slot;
    use crate::{Limiter, RateLimitError};

    use super::Guard;

    /// A guard held by a layer: its site, built once, when the guard is added, and the
    /// limiter it checks on (`None`: the global one).
    #[derive(Clone, Debug)]
    pub(crate) struct GuardSite {
        site: Site,
        limiter: Option<&'static Limiter>,
    }

    impl From<Guard> for GuardSite {
        fn from(guard: Guard) -> GuardSite {
            let Guard {
                name,
                config,
                limiter,
            } = guard;
            GuardSite {
                site: Site::new(config, name, name, ""),
                limiter,
            }
        }
    }

    impl GuardSite {
        /// The guard's name.
        pub(crate) fn name(&self) -> &'static str {
            self.site.path
        }

        /// Checks (and counts) the current request: the guarded step of an attribute's
        /// call, with the identity the layer put in the request's context. Nothing is
        /// given back afterwards (a guard has no `charge_if`). The slot it took, when the
        /// guard has a concurrency limit, is held until the response has been sent.
        pub(crate) async fn check(&self) -> Result<Option<Slot>, RateLimitError> {
            let limiter = self.limiter.unwrap_or_else(crate::global);
            let Some(key) = self.site.key_from_context(limiter)? else {
                return Ok(None);
            };
            let guarded = self.site.guard(limiter, GuardedCall::of(key));
            let permit = guarded.answer().await?;
            // What it took stays taken; its slot is held by the response.
            Ok(permit.into_slot())
        }

        /// Whether the guard is checked with the layer's others as one list
        /// ([`check_listed`]); else it takes its own steps after them: a guard with a
        /// limit on calls in flight (its slot is taken with its units, in a script of its
        /// own) or a wait for room (it sleeps on its own refusals alone).
        pub(crate) fn is_listed(&self) -> bool {
            let config = &self.site.config;
            config.concurrency.is_none() && config.wait.is_none()
        }
    }

    /// Checks the current request against every one of `guards` that
    /// [is listed](GuardSite::is_listed) as one [`check_all`](Limiter::check_all) per
    /// limiter (one, unless guards name limiters of their own): one round trip, and a
    /// request refused by one guard consumes nothing from the others. A shadow guard
    /// refuses nothing, so it is checked alone, after the list. Every guard's decision is
    /// recorded for the response's fields; the first refusal (in the guards' order) is
    /// the answer.
    pub(crate) async fn check_listed(guards: &[GuardSite]) -> Result<(), RateLimitError> {
        let mut lists: Vec<(&'static Limiter, Vec<site::Listed<'_>>)> = Vec::new();
        let mut alone = Vec::new();
        let mut refused = None;
        for guard in guards.iter().filter(|guard| guard.is_listed()) {
            let limiter = guard.limiter.unwrap_or_else(crate::global);
            let Some(key) = guard.site.key_from_context(limiter)? else {
                continue;
            };
            let listed = match guard.site.listed(limiter, key) {
                Ok(listed) => listed,
                // Unchecked, or refused at once (a ban): the list is not asked.
                Err(answered) => {
                    if let Err(err) = answered {
                        refused.get_or_insert(err);
                    }
                    continue;
                }
            };
            if listed.is_shadow() {
                alone.push((limiter, vec![listed]));
                continue;
            }
            match lists.iter_mut().find(|(l, _)| std::ptr::eq(*l, limiter)) {
                Some((_, list)) => list.push(listed),
                None => lists.push((limiter, vec![listed])),
            }
        }
        if let Some(err) = refused {
            return Err(err);
        }
        for (limiter, list) in lists.into_iter().chain(alone) {
            let plans: Vec<_> = list.iter().map(site::Listed::plan).collect();
            let answers = limiter.answer_plans(&plans).await;
            drop(plans);
            for (listed, answer) in list.into_iter().zip(answers) {
                if let Err(err) = listed.answer(answer.result) {
                    refused.get_or_insert(err);
                }
            }
            if let Some(err) = refused {
                return Err(err);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static RULES: [Rule; 1] = [Rule::per_minute(3)];

    #[test]
    fn names_take_the_attribute_s_forms() {
        for name in ["api", "api/v2/orders", "billing::send_invoice", "a.b-c_d"] {
            assert_eq!(check_name(name), Ok(()), "{name}");
        }
        for (name, why) in [
            ("", "it is empty"),
            ("api/", "empty segment"),
            ("a:b", "':' is not allowed"),
            ("api v2", "' ' is not allowed"),
            ("api#mode", "'#' is not allowed"),
            ("{tag}", "'{' is not allowed"),
        ] {
            let err = check_name(name).unwrap_err();
            assert!(err.contains(why), "{name}: {err}");
        }
    }

    #[test]
    fn defaults_are_the_attribute_s() {
        let guard = Guard::new("guard::tests::defaults", &RULES);
        let config = guard.config;
        assert_eq!(config.rules, RULES);
        assert_eq!(config.limit_type, LimitType::Ip);
        assert_eq!(config.algorithm, Algorithm::SlidingLog);
        assert_eq!(config.prefix, "rate_limit:");
        assert_eq!(config.message, "too many requests");
        assert!(!config.shadow && !config.duplicate_rule && !config.dynamic_rules);
        assert_eq!((config.lockout, config.wait), (None, None));
        assert!(guard.limiter.is_none());
    }

    #[test]
    fn refinements_change_only_their_own_setting() {
        let limiter: &'static Limiter = Box::leak(Box::new(Limiter::memory()));
        let guard = Guard::new("guard::tests::refined", &RULES)
            .limit_type(LimitType::Global)
            .algorithm(Algorithm::FixedWindow)
            .limiter(limiter)
            .key_prefix("app:")
            .shadow(true)
            .block_for(Duration::from_secs(60));
        let config = guard.config;
        assert_eq!(config.limit_type, LimitType::Global);
        assert_eq!(config.algorithm, Algorithm::FixedWindow);
        assert_eq!(config.prefix, "app:");
        assert!(config.shadow);
        assert_eq!(config.lockout, Some(Lockout::For(Duration::from_secs(60))));
        assert!(std::ptr::eq(guard.limiter.unwrap(), limiter));
        assert_eq!(config.rules, RULES);
    }

    #[test]
    #[should_panic(expected = "Guard::limit_type: guard \"api\" cannot count by \
                               LimitType::Custom, as a layer has no value to count it by")]
    fn a_custom_limit_type_is_refused_at_construction() {
        let _ = Guard::new("api", &RULES).limit_type(LimitType::Custom);
    }

    #[test]
    #[should_panic(expected = "Guard::new(\"api\", ..): no rules")]
    fn a_guard_without_rules_is_refused() {
        let _ = Guard::new("api", &[]);
    }

    #[test]
    #[should_panic(expected = "Guard::new: malformed guard name \"api v2\": ' ' is not allowed")]
    fn a_malformed_name_is_refused_naming_it() {
        let _ = Guard::new("api v2", &RULES);
    }

    #[test]
    #[should_panic(expected = "cannot block for 0ns")]
    fn an_empty_block_is_refused() {
        let _ = Guard::new("api", &RULES).block_for(Duration::ZERO);
    }
}
