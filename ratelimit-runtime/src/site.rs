//! Guarded sites: what `#[rate_limiter]` expands to calls, and the step every guarded
//! check takes around the check pipeline (modes, rules in force, shadow, fail-open, the
//! decision left for response headers). Not public API: reached only through
//! `redis_ratelimit::__private`, and may change in any release.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use crate::backend::Request;
use crate::concurrency::SlotAsk;
use crate::context::{RequestContext, SiteDecision};
use crate::decision::RawDecision;
use crate::key::{function_path, KeyTemplate};
use crate::limiter::slot::warn_release_failed;
use crate::limiter::{boxed_in_place, decided, decided_with_slot, Begun, Plan};
pub use crate::lockout::Lockout;
use crate::overrides::{intern, SiteRules};
pub use crate::site_config::SiteConfig;
use crate::throttle::{throttled, OnceEach};
use crate::Slot;
use crate::{registry, BackendError, Decision, LimitType, Limiter, Mode, RateLimitError, Rule};

/// A guarded function: its configuration plus the constant part of its keys, built on
/// the first call.
#[derive(Debug)]
pub struct CallSite {
    config: SiteConfig,
    /// The attribute's `name = "..."`: the keys' path part instead of the function's path.
    name: Option<&'static str>,
    /// Where the attribute is written (`file:line:column`), to tell sites apart in warnings.
    location: &'static str,
    built: OnceLock<Site>,
    /// The site that checks before any key was built (see [`check`](Self::check)).
    unbuilt: OnceLock<Site>,
}

/// A guarded site once its path is known: its configuration, the path part of its keys
/// (also its metric label and the field of its overrides) and the constant part of its
/// keys, registered once. The attribute's call site makes one at its first call, a layer
/// guard when it is added, the outbound middleware at its first request; each guards its
/// calls through it: the key from the request ([`key_from_context`](Self::key_from_context)),
/// then the guarded step ([`guard`](Self::guard), or [`listed`](Self::listed) in a list).
#[derive(Clone, Debug)]
pub(crate) struct Site {
    pub(crate) config: SiteConfig,
    pub(crate) path: &'static str,
    template: KeyTemplate,
}

impl Site {
    /// The site `config` at `path`, registered (for `function`, written at `location`: the
    /// attribute's; else both empty), so that the limiter's `rules_in_force` and
    /// `mode_in_force` know it and two sites counting one path differently are reported.
    pub(crate) fn new(
        config: SiteConfig,
        path: &'static str,
        function: &str,
        location: &'static str,
    ) -> Site {
        registry::register(config, path, function, location);
        Site::unregistered(config, path)
    }

    /// The site `config` at `path`, known to no registry.
    fn unregistered(config: SiteConfig, path: &'static str) -> Site {
        Site {
            config,
            path,
            template: KeyTemplate::new(config.prefix, config.limit_type, path),
        }
    }

    /// The key for `identity` (the attribute's `by = ...`).
    pub(crate) fn key_for(&self, identity: impl fmt::Display) -> Cow<'static, str> {
        Cow::Owned(self.template.key_for(identity))
    }
}

impl CallSite {
    pub const fn new(config: SiteConfig) -> Self {
        CallSite {
            config,
            name: None,
            location: "",
            built: OnceLock::new(),
            unbuilt: OnceLock::new(),
        }
    }

    /// Sets the path part of the keys, instead of the guarded function's path.
    pub const fn named(mut self, name: &'static str) -> Self {
        self.name = Some(name);
        self
    }

    /// Records where the attribute is written, for warnings.
    pub const fn defined_at(mut self, location: &'static str) -> Self {
        self.location = location;
        self
    }

    pub fn config(&self) -> &SiteConfig {
        &self.config
    }

    /// `probe` is `type_name_of_val` of a fn item declared inside the guarded function,
    /// which names the function's full path (see [`function_path`]).
    ///
    /// Built once per call site; this first call also registers the site's path, so that
    /// two sites counting one path differently are reported.
    fn built(&'static self, probe: &str) -> &'static Site {
        self.built.get_or_init(|| {
            let function = function_path(probe);
            let path: &'static str = match self.name {
                Some(name) => name,
                // Once per call site, for the life of the process.
                None => Box::leak(function.clone().into_boxed_str()),
            };
            Site::new(self.config, path, &function, self.location)
        })
    }

    /// The key for an identity given by the attribute's `by = ...`.
    pub fn key_by(&'static self, probe: &str, identity: impl fmt::Display) -> Cow<'static, str> {
        self.built(probe).key_for(identity)
    }

    /// The key for the identity the limit type reads from the request context
    /// (none for `GLOBAL`); `None` when there is no identity but the site is off on
    /// `limiter` (see [`Site::key_from_context`]). The expansion asks for it only when the
    /// request is not exempt.
    pub fn key_from_context(
        &'static self,
        probe: &str,
        limiter: &Limiter,
    ) -> Result<Option<Cow<'static, str>>, RateLimitError> {
        self.built(probe).key_from_context(limiter)
    }

    /// Checks (and counts) one call using `cost` units (the expansion skips the check of a
    /// call whose cost is 0) against `rules` (the attribute's `rules = <expr>`;
    /// `None`: the compiled rules); `Err` when it must not run.
    ///
    /// A cost above a rule's count can never pass: the backend denies it without a time to
    /// retry at, and it is refused with `retry_after: Duration::MAX`.
    ///
    /// The rules are the compiled or given ones unless overridden (see
    /// [`Limiter::override_rules`]). The expansion does not call it for an exempt request
    /// ([`RequestContext::is_exempt`]), which counts nothing.
    pub fn check<'a>(
        &'static self,
        limiter: &'a Limiter,
        key: Cow<'static, str>,
        cost: NonZeroU64,
        rules: Option<&[Rule]>,
    ) -> Guarded<'a> {
        let site = match self.built.get() {
            Some(site) => site,
            // No key built yet: a check made through this type directly (the expansion
            // builds the key first), by a site of no path.
            None => self
                .unbuilt
                .get_or_init(|| Site::unregistered(self.config, "")),
        };
        site.guard(limiter, GuardedCall { key, cost, rules })
    }
}

/// One call a site guards, as its caller asks for it: counted under `key`, using `cost`
/// units, against `rules` (`None`: the site's compiled rules).
pub(crate) struct GuardedCall<'r> {
    pub(crate) key: Cow<'static, str>,
    pub(crate) cost: NonZeroU64,
    pub(crate) rules: Option<&'r [Rule]>,
}

impl GuardedCall<'_> {
    /// A call of one unit counted under `key` against the site's rules: a layer guard's.
    #[cfg(any(feature = "tower", feature = "actix", feature = "reqwest"))]
    pub(crate) fn of(key: Cow<'static, str>) -> Self {
        GuardedCall {
            key,
            cost: NonZeroU64::MIN,
            rules: None,
        }
    }
}

impl Site {
    /// The key the site counts the current request under. A request without the identity
    /// its limit type needs is refused with `MissingIdentity` by an enforcing site; on
    /// `limiter`, an off site (the kill switch) checks nothing, so nothing is missing, and
    /// a shadow site runs every call (it reports the misconfiguration): for both the
    /// answer is `None`, the call runs unchecked.
    pub(crate) fn key_from_context(
        &self,
        limiter: &Limiter,
    ) -> Result<Option<Cow<'static, str>>, RateLimitError> {
        let Site { config, path, .. } = self;
        let missing = match identity_key(&self.template, config.limit_type) {
            Ok(key) => return Ok(Some(key)),
            Err(missing) => missing,
        };
        let compiled = config.compiled_rules();
        match limiter
            .site_policy(config.prefix, path, compiled, config.shadow)
            .1
        {
            Mode::Enforce => {
                report_misconfiguration(path, &missing);
                Err(missing)
            }
            Mode::Shadow => {
                report_shadow_misconfiguration(path, &missing);
                Ok(None)
            }
            Mode::Off => Ok(None),
        }
    }

    /// The guarded step: what every guarded check (an attribute's, a layer guard's) does
    /// around the check pipeline.
    ///
    /// The site's mode first (`Off`: nothing is checked), then the rules in force (an
    /// operator's override, else the call's own rules, else the compiled ones; none: the
    /// call runs unchecked), then the check itself, then the answer: a denial refuses the call
    /// unless the site is in shadow mode, a backend failure lets it through when the limiter
    /// is fail-open.
    ///
    /// Synchronous as far as it can be: a call answered at once (by the embedded backend, the
    /// deny cache, its mode) builds no future; only one that waits for Redis, or for room,
    /// gets a boxed one owning its key.
    pub(crate) fn guard<'a>(&'a self, limiter: &'a Limiter, call: GuardedCall<'_>) -> Guarded<'a> {
        let (step, rules, key) = match self.policy(limiter, call) {
            Ok(policy) => policy,
            Err(answered) => return Guarded::Ready(answered),
        };
        // A slot to take with the rules, when the site limits calls in flight.
        let ask = self.config.concurrency.map(SlotAsk::new);
        match step.plan(&key, &rules, ask.as_ref()).begin() {
            Begun::Answered(result) => {
                let result = match &ask {
                    None => decided(result, &rules),
                    Some(ask) => decided_with_slot(result, &rules, ask),
                };
                Guarded::Ready(step.answer(result, key, rules, ask.as_ref()))
            }
            Begun::Waits(waits) => {
                let rules = step.owned(rules);
                Guarded::Waiting(boxed_in_place(|| async move {
                    // The plan again, over the key and rules this future owns now.
                    let result = step.plan(&key, &rules, ask.as_ref()).resume(waits).await;
                    step.answer(result, key, rules, ask.as_ref())
                }))
            }
        }
    }

    /// The first steps of a guarded check: the site's mode (`Off`: unchecked), the rules in
    /// force (none: unchecked), an operator's ban; the check's step, rules and key when it is
    /// to be asked, else its answer.
    #[inline]
    #[allow(clippy::type_complexity)]
    fn policy<'a, 'r>(
        &'a self,
        limiter: &'a Limiter,
        call: GuardedCall<'r>,
    ) -> Result<
        (GuardedCheck<'a>, Cow<'r, [Rule]>, Cow<'static, str>),
        Result<Permit<'a>, RateLimitError>,
    > {
        let Site { config, path, .. } = self;
        let GuardedCall { key, cost, rules } = call;
        let (in_force, mode) =
            limiter.site_policy(config.prefix, path, config.compiled_rules(), config.shadow);
        if mode == Mode::Off {
            return Err(Ok(Permit::NOTHING));
        }
        let rules: Cow<'r, [Rule]> = match rules {
            // An operator's override of the ordinary rules wins over the call's own.
            Some(given) if in_force.ordinary().is_empty() => match in_force.duplicate() {
                None => Cow::Borrowed(given),
                Some(duplicate) => Cow::Owned(given.iter().copied().chain([duplicate]).collect()),
            },
            _ => Cow::Borrowed(in_force.rules),
        };
        if rules.is_empty() {
            return Err(Ok(Permit::NOTHING));
        }
        let step = GuardedCheck {
            site: self,
            limiter,
            in_force,
            shadow: mode == Mode::Shadow,
            cost,
        };
        // An operator's ban refuses the caller whatever its counts, in memory, counting nothing.
        if let Some(left_us) = limiter.ban_left_us(&key, config.prefix, path) {
            let banned = RawDecision::refused(0, left_us, left_us);
            return Err(step.answer(Ok(banned.into_decision(&rules)), key, rules, None));
        }
        Ok((step, rules, key))
    }
}

/// The key a site of `limit_type` counts the current request under, from the identity in
/// the request context.
fn identity_key(
    template: &KeyTemplate,
    limit_type: LimitType,
) -> Result<Cow<'static, str>, RateLimitError> {
    let key = match limit_type {
        LimitType::Global => Some(Cow::Owned(template.global_key().to_owned())),
        LimitType::Ip => {
            RequestContext::with_current(|ctx| ctx.ip().map(|ip| template.key_for(ip)))
                .flatten()
                .map(Cow::Owned)
        }
        LimitType::UserId => {
            RequestContext::with_current(|ctx| ctx.user_id().map(|id| template.key_for(id)))
                .flatten()
                .map(Cow::Owned)
        }
        LimitType::Custom => None,
    };
    key.ok_or(RateLimitError::MissingIdentity { limit_type })
}

/// A guarded check of a site without slots, to be counted with others as one
/// (`Limiter::check_all`: a layer's guards): [`Site::listed`] prepares it, its
/// [`plan`](Listed::plan) goes into the list, and [`answer`](Listed::answer) turns the
/// list's decision for it into the call's answer, as [`Site::guard`] would.
#[cfg(any(feature = "tower", feature = "actix"))]
pub(crate) struct Listed<'a> {
    step: GuardedCheck<'a>,
    key: Cow<'static, str>,
    rules: Cow<'static, [Rule]>,
}

#[cfg(any(feature = "tower", feature = "actix"))]
impl Site {
    /// The check of `key` by this site, prepared for a list: `Err` with its answer when it
    /// needs no check (its mode is off, it has no rules) or is refused at once (a ban). The
    /// site must take no slot.
    pub(crate) fn listed<'a>(
        &'a self,
        limiter: &'a Limiter,
        key: Cow<'static, str>,
    ) -> Result<Listed<'a>, Result<Permit<'a>, RateLimitError>> {
        debug_assert!(
            self.config.concurrency.is_none(),
            "a listed site takes no slot"
        );
        let (step, rules, key) = self.policy(limiter, GuardedCall::of(key))?;
        let rules = step.owned(rules);
        Ok(Listed { step, key, rules })
    }
}

#[cfg(any(feature = "tower", feature = "actix"))]
impl<'a> Listed<'a> {
    /// The check, as a list runs it.
    pub(crate) fn plan(&self) -> Plan<'_> {
        self.step.plan(&self.key, &self.rules, None)
    }

    /// Whether this check's site is in shadow mode (it refuses nothing, so it takes no
    /// part in a list's admission).
    pub(crate) fn is_shadow(&self) -> bool {
        self.step.shadow
    }

    /// The call's answer from the list's `result` for this check.
    pub(crate) fn answer(
        self,
        result: Result<RawDecision, BackendError>,
    ) -> Result<Permit<'a>, RateLimitError> {
        let result = decided(result, &self.rules);
        self.step.answer(result, self.key, self.rules, None)
    }
}

/// A guarded check: answered at once, or still waiting (see `guard`). The caller takes
/// a ready answer as it is and awaits only a waiting one, so that an answer at hand goes
/// through no future at all.
#[must_use = "a guarded check is answered, or awaited"]
pub enum Guarded<'a> {
    /// The answer, at hand.
    Ready(Result<Permit<'a>, RateLimitError>),
    /// Waiting for Redis, or for room.
    Waiting(Pin<Box<dyn Future<Output = Result<Permit<'a>, RateLimitError>> + Send + 'a>>),
}

impl<'a> Guarded<'a> {
    /// The answer: the one at hand, or the waiting check's once it comes. (The attribute's
    /// expansion matches instead, to spare a ready answer even this future.)
    pub async fn answer(self) -> Result<Permit<'a>, RateLimitError> {
        match self {
            Guarded::Ready(answer) => answer,
            Guarded::Waiting(waiting) => waiting.await,
        }
    }
}

impl fmt::Debug for Guarded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Guarded::Ready(answer) => f.debug_tuple("Ready").field(answer).finish(),
            Guarded::Waiting(_) => f.write_str("Waiting"),
        }
    }
}

/// One guarded check, once its mode and rules are known.
#[derive(Clone, Copy)]
struct GuardedCheck<'a> {
    site: &'a Site,
    limiter: &'a Limiter,
    in_force: SiteRules,
    shadow: bool,
    cost: NonZeroU64,
}

impl<'a> GuardedCheck<'a> {
    /// The check of `key` against `rules`.
    #[inline]
    fn plan<'p>(&self, key: &'p str, rules: &'p [Rule], slot: Option<&'p SlotAsk>) -> Plan<'p>
    where
        'a: 'p,
    {
        let config = &self.site.config;
        let request = Request {
            key,
            rules,
            algorithm: config.algorithm,
            cost: self.cost,
            consume: true,
            now_us: None,
            lockout: config.lockout.and_then(Lockout::packed),
            // Only a site with `charge_if` gives units back.
            refundable: config.refunds,
            slot,
            warn_at: config.warn_at,
            draw: None,
            // Resolved once: the site's own, else the limiter's default.
            allowance_ms: self.limiter.allowance_ms(config.allowance),
        };
        // A shadow site never waits: it refuses nothing.
        let wait = config.wait.filter(|_| !self.shadow);
        Plan::guarded(self.limiter, request, self.site.path, wait, self.shadow)
    }

    /// The check's `result`, as the guarded call's answer: its permit, or why it must not
    /// run.
    fn answer(
        self,
        result: Result<Decision, BackendError>,
        key: Cow<'static, str>,
        rules: Cow<'_, [Rule]>,
        slot: Option<&SlotAsk>,
    ) -> Result<Permit<'a>, RateLimitError> {
        // Read in place: a decision is large, and copied only where it is kept.
        let decision = match result {
            Ok(ref decision) => decision,
            Err(err) if self.limiter.lets_through(&key, &err) => return Ok(Permit::NOTHING),
            Err(err) => return Err(RateLimitError::Backend(err)),
        };
        if self.shadow {
            // No headers describe a shadow site's decisions, and it refuses nothing.
            if !decision.allowed {
                report_shadow_refusal(&key, decision);
                return Ok(Permit::NOTHING);
            }
        } else {
            crate::context::record_with(|| {
                Some(SiteDecision {
                    decision: *decision,
                    rules: match &rules {
                        Cow::Borrowed(rules) if self.is_in_force(rules) => self.in_force.rules,
                        rules => intern(rules)?,
                    },
                    duplicate_rule: self.in_force.duplicate_rule,
                    concurrency: self.site.config.concurrency.map(|c| c.max),
                })
            });
            if !decision.allowed {
                return Err(RateLimitError::Limited {
                    retry_after: decision.retry_after.unwrap_or(Duration::MAX),
                    rule: decision.rule,
                    message: self.site.config.message,
                    key: key.into_owned(),
                });
            }
        }
        // The slot taken with the units, held by the permit until the call ends.
        let slot = slot.filter(|_| decision.allowed).and_then(|ask| {
            Some(Slot::held(
                self.limiter.slot_store(decision.receipt())?,
                &key,
                ask,
            ))
        });
        // Only a site that may give its units back (`charge_if`) keeps what it took.
        if !self.site.config.refunds {
            return Ok(Permit {
                slot,
                ..Permit::NOTHING
            });
        }
        Ok(Permit {
            taken: Some(Box::new(Taken {
                limiter: self.limiter,
                key,
                rules: self.owned(rules),
                decision: *decision,
            })),
            slot,
        })
    }

    /// Whether `rules` are the ones in force, not the call's own.
    fn is_in_force(&self, rules: &[Rule]) -> bool {
        rules.as_ptr() == self.in_force.rules.as_ptr()
    }

    /// `rules` with no borrow of the call: the rules in force are static; rules chosen
    /// per call are the caller's, and a permit or a waiting check may outlive them.
    fn owned(&self, rules: Cow<'_, [Rule]>) -> Cow<'static, [Rule]> {
        match rules {
            Cow::Borrowed(rules) if self.is_in_force(rules) => Cow::Borrowed(self.in_force.rules),
            rules => Cow::Owned(rules.into_owned()),
        }
    }
}

/// Logs a shadow site's would-be refusal, at most once per
/// [`LogThrottle::INTERVAL`](crate::throttle::LogThrottle::INTERVAL) in the process.
fn report_shadow_refusal(key: &str, decision: &Decision) {
    throttled!(
        info,
        [
            key,
            rule = %decision.rule,
            retry_after_ms = decision.retry_after.map(|d| d.as_millis() as u64)
        ],
        "shadow rate limit: this call would have been refused; it went on",
    );
}

/// Names a site refusing calls for want of an identity, once per site: the refusal
/// answers the client a generic 500 (`web/problem.rs`), so the log is where an operator
/// learns what to configure.
#[cold]
fn report_misconfiguration(path: &str, missing: &RateLimitError) {
    static REPORTED: OnceEach = OnceEach::new();
    if REPORTED.first(path) {
        tracing::error!(
            target: "redis_ratelimit",
            site = path,
            "rate limit misconfigured: every call without an identity is refused: {missing}",
        );
    }
}

/// Logs a shadow site's call that an enforcing site would refuse as misconfigured, at
/// most once per [`LogThrottle::INTERVAL`](crate::throttle::LogThrottle::INTERVAL) in the
/// process.
fn report_shadow_misconfiguration(path: &str, missing: &RateLimitError) {
    throttled!(
        warn,
        [site = path],
        "shadow rate limit: this call went on unchecked; enforcing, it would fail: {missing}",
    );
}

/// What a guarded call took: given back by [`settle`](Permit::settle) when the call is not
/// to be charged. Dropping it keeps what was taken.
#[must_use = "a permit is settled to give its units back, or dropped to keep them"]
#[derive(Debug)]
pub struct Permit<'a> {
    /// `None` when nothing was taken, or nothing is to be given back: the call ran
    /// unchecked, a shadow site's would-be refusal, a backend failure let through, a site
    /// without `charge_if`.
    // Boxed: only `charge_if` sites take one, and every guarded call moves its permit.
    taken: Option<Box<Taken<'a>>>,
    /// The call's slot (a site with `concurrency`), released when the permit is settled
    /// or dropped.
    slot: Option<Slot>,
}

#[derive(Debug)]
struct Taken<'a> {
    limiter: &'a Limiter,
    key: Cow<'static, str>,
    rules: Cow<'static, [Rule]>,
    decision: Decision,
}

impl Permit<'_> {
    const NOTHING: Permit<'static> = Permit {
        taken: None,
        slot: None,
    };

    /// Gives the call's units back when `charged` is false (the attribute's `charge_if`
    /// answered `false`), then releases its slot (`concurrency`). A refund that cannot
    /// reach the backend leaves them used, the safe side, and is logged; a release that
    /// cannot leaves the slot to lapse.
    pub async fn settle(self, charged: bool) {
        let Permit { taken, slot } = self;
        if let Some(taken) = taken.filter(|_| !charged) {
            taken.refund().await;
        }
        release(slot).await;
    }

    /// Settles the call's reservation at `actual` units (the attribute's `settle`), or,
    /// when `charged` is false (`charge_if` answered `false`), gives back everything it
    /// took, rules counting calls too; then releases its slot. A settle that cannot reach
    /// the backend leaves the reservation in place, the safe side, and is logged.
    pub async fn settle_cost(self, charged: bool, actual: u64) {
        let Permit { taken, slot } = self;
        if let Some(taken) = taken {
            taken.settle(charged, actual).await;
        }
        release(slot).await;
    }

    /// The call's slot, to be held elsewhere (a layer's guard holds it in the response
    /// body); what else the permit holds is kept.
    pub fn into_slot(self) -> Option<Slot> {
        self.slot
    }

    /// Whether the permit holds a slot (a site with `concurrency` whose call was admitted).
    pub fn holds_slot(&self) -> bool {
        self.slot.is_some()
    }
}

impl Taken<'_> {
    /// Gives the call's units back (`charge_if` answered `false`).
    async fn refund(self: Box<Self>) {
        let taken = self;
        let refunded = taken
            .limiter
            .refund(&taken.key, &taken.rules, &taken.decision)
            .await;
        if let Err(err) = refunded {
            report_unsettled(&taken.key, &err);
        }
    }

    /// Settles the call's reservation at `actual` units, or gives back everything it took
    /// when `charged` is false.
    async fn settle(self: Box<Self>, charged: bool, actual: u64) {
        let (limiter, key, rules) = (self.limiter, &*self.key, &*self.rules);
        let settled = match charged {
            true => limiter
                .settle(key, rules, &self.decision, actual)
                .await
                .map(drop),
            false => limiter.refund(key, rules, &self.decision).await,
        };
        if let Err(err) = settled {
            report_unsettled(key, &err);
        }
    }
}

/// Releases a call's slot, if it holds one. A release that cannot reach the backend
/// leaves the slot to lapse when its lease ends, and is logged.
async fn release(slot: Option<Slot>) {
    let Some(slot) = slot else {
        return;
    };
    if let Err(err) = slot.release().await {
        warn_release_failed(&err);
    }
}

/// Logs a refund or settle that could not reach the backend, at most once per
/// [`LogThrottle::INTERVAL`](crate::throttle::LogThrottle::INTERVAL) in the process.
fn report_unsettled(key: &str, err: &BackendError) {
    throttled!(
        warn,
        [key, error = %err],
        "could not give a call's units back or settle its cost (charge_if, settle); \
         what it reserved stays used",
    );
}

/// Checks that `f` is a `charge_if` for a function returning `R`: the attribute's
/// expansion passes the user's expression through it, so that a mismatch is reported on
/// that expression.
pub fn charge_if<R, F: FnOnce(&R) -> bool>(f: F) -> F {
    f
}
