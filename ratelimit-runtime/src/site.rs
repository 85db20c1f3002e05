//! What `#[rate_limiter]` expands to calls. Not public API: reached only through
//! `redis_ratelimit::__private`, and may change in any release.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing::Instrument as _;

use crate::backend::Request;
use crate::context::RequestContext;
use crate::key::{function_path, KeyTemplate};
use crate::observe::Observation;
use crate::overrides::SiteRules;
use crate::{Algorithm, LimitType, Limiter, RateLimitError, Rule};

/// One guarded function's static configuration, as written in its attribute.
#[derive(Clone, Copy, Debug)]
pub struct SiteConfig {
    /// Every rule, the duplicate-submission rule last when `duplicate_rule` is set.
    pub rules: &'static [Rule],
    /// Whether the last rule is the duplicate-submission rule.
    pub duplicate_rule: bool,
    pub algorithm: Algorithm,
    pub limit_type: LimitType,
    pub prefix: &'static str,
    pub message: &'static str,
}

/// A guarded function: its configuration plus the constant part of its keys, built on
/// the first call.
#[derive(Debug)]
pub struct CallSite {
    config: SiteConfig,
    /// The attribute's `name = "..."`: the keys' path part instead of the function's path.
    name: Option<&'static str>,
    /// Where the attribute is written (`file:line:column`), to tell sites apart in warnings.
    location: &'static str,
    built: OnceLock<Built>,
}

/// What a call site builds on its first call.
#[derive(Debug)]
struct Built {
    template: KeyTemplate,
    /// The path part of its keys: the `name`, or the function's path. Also the site's
    /// metric label and the field of its rule overrides.
    path: Box<str>,
}

impl CallSite {
    pub const fn new(config: SiteConfig) -> Self {
        CallSite {
            config,
            name: None,
            location: "",
            built: OnceLock::new(),
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
    /// two sites counting one path differently are reported (see [`register`]).
    fn template(&'static self, probe: &str) -> &'static KeyTemplate {
        &self
            .built
            .get_or_init(|| {
                let function = function_path(probe);
                let path = self.name.unwrap_or(&function);
                register(self, path, &function);
                Built {
                    template: KeyTemplate::new(self.config.prefix, self.config.limit_type, path),
                    path: path.into(),
                }
            })
            .template
    }

    /// The path part of this site's keys, once built (always, once a key was made).
    fn path(&'static self) -> &'static str {
        self.built.get().map_or("", |built| &built.path)
    }

    /// The rules as compiled.
    fn compiled_rules(&self) -> SiteRules {
        SiteRules {
            rules: self.config.rules,
            duplicate_rule: self.config.duplicate_rule,
        }
    }

    /// The key for an identity given by the attribute's `by = ...`.
    pub fn key_by(&'static self, probe: &str, identity: impl fmt::Display) -> Cow<'static, str> {
        Cow::Owned(self.template(probe).key_for(identity))
    }

    /// The key for the identity the limit type reads from the request context
    /// (none for `GLOBAL`). The expansion asks for it only when the request is not exempt.
    pub fn key_from_context(
        &'static self,
        probe: &str,
    ) -> Result<Cow<'static, str>, RateLimitError> {
        let template = self.template(probe);
        let limit_type = self.config.limit_type;
        let key = match limit_type {
            LimitType::Global => Some(Cow::Borrowed(template.global_key())),
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

    /// Checks (and counts) one call using `cost` units (at least 1: the expansion skips the
    /// check of a call whose cost is 0); `Err` when it must not run.
    ///
    /// A cost above a rule's count can never pass: the backend denies it without a time to
    /// retry at, and it is refused with `retry_after: Duration::MAX`.
    ///
    /// The rules are the compiled ones unless overridden (see
    /// [`Limiter::override_rules`]). The expansion does not call it for an exempt request
    /// ([`RequestContext::is_exempt`]), which counts nothing.
    pub async fn check(
        &'static self,
        limiter: &Limiter,
        key: Cow<'static, str>,
        cost: u64,
    ) -> Result<(), RateLimitError> {
        debug_assert!(cost > 0, "a guarded call's cost is at least 1");
        let config = &self.config;
        let path = self.path();
        let rules = limiter.site_rules(config.prefix, path, self.compiled_rules());
        let request = Request {
            key: &key,
            rules: rules.rules,
            algorithm: config.algorithm,
            cost,
            consume: true,
            now_us: None,
            block_for_us: 0,
            refundable: false,
        };
        let observation = Observation::start(path, &request);
        // The embedded backend answers at once, without a future to build or instrument.
        // Redis's future is boxed: it is large (every topology's redirects and refreshes),
        // and held inline it would make this future, which the guarded function's holds
        // and moves, large for every backend.
        let answer = match observation.in_scope(|| limiter.answer_now(&request)) {
            Some(answer) => answer,
            None => {
                Box::pin(limiter.wait(request))
                    .instrument(observation.span())
                    .await
            }
        };
        observation.finish(&answer);
        let result = answer.result;
        if let Ok(decision) = &result {
            crate::context::record(crate::context::SiteDecision {
                decision: *decision,
                rules: rules.rules,
                duplicate_rule: rules.duplicate_rule,
            });
        }
        match result {
            Ok(decision) if decision.allowed => Ok(()),
            Ok(decision) => Err(RateLimitError::Limited {
                retry_after: decision.retry_after.unwrap_or(Duration::MAX),
                rule: decision.rule,
                message: config.message,
                key: key.into_owned(),
            }),
            Err(err) if limiter.is_fail_open() => {
                limiter.warn_fail_open(&key, &err);
                Ok(())
            }
            Err(err) => Err(RateLimitError::Backend(err)),
        }
    }
}

/// Every call site whose keys have been built, by the path part of its keys.
static SITES: Mutex<Option<HashMap<String, Registered>>> = Mutex::new(None);

/// The first call site seen with a path.
struct Registered {
    site: &'static CallSite,
    /// The guarded function's own path.
    function: String,
}

/// The key prefix and compiled rules of the first call site seen counting under `path`.
pub(crate) fn compiled_rules(path: &str) -> Option<(&'static str, SiteRules)> {
    let sites = SITES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let first = sites.as_ref()?.get(path)?;
    Some((first.site.config.prefix, first.site.compiled_rules()))
}

/// Records that `site`, guarding `function`, counts under `path`, and warns when another
/// site already counts under it differently: with other rules, algorithm, limit type or
/// prefix they share (or seem to share, in metrics and rule overrides) a budget they
/// count in incompatible ways. With the same configuration the sharing is taken as
/// deliberate (two sites given one `name`).
///
/// Called once per call site, when its key template is built: never per call.
fn register(site: &'static CallSite, path: &str, function: &str) {
    let mut sites = SITES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let first = sites.get_or_insert_with(HashMap::new);
    let Some(first) = first.get(path) else {
        first.insert(
            path.to_owned(),
            Registered {
                site,
                function: function.to_owned(),
            },
        );
        return;
    };
    let differences = differences(&first.site.config, &site.config);
    if differences.is_empty() {
        return;
    }
    tracing::warn!(
        path,
        "rate limiter call sites {} and {} share the key path `{path}` with different {}: \
         {} and {}; give one of them its own `name = \"...\"`, or both the same \
         configuration",
        Located(first.site, &first.function),
        Located(site, function),
        differences.join(", "),
        Described(first.site),
        Described(site),
    );
}

/// What tells the configurations of two sites sharing a path apart.
fn differences(a: &SiteConfig, b: &SiteConfig) -> Vec<&'static str> {
    let mut differences = Vec::new();
    if a.rules != b.rules || a.duplicate_rule != b.duplicate_rule {
        differences.push("rules");
    }
    if a.algorithm != b.algorithm {
        differences.push("algorithms");
    }
    if a.limit_type != b.limit_type {
        differences.push("limit types");
    }
    if a.prefix != b.prefix {
        differences.push("prefixes");
    }
    differences
}

/// A site by its function and where its attribute is written: `app::send (src/lib.rs:3:1)`.
struct Located<'a>(&'static CallSite, &'a str);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Located(site, function) = *self;
        match site.location {
            "" => write!(f, "`{function}`"),
            location => write!(f, "`{function}` ({location})"),
        }
    }
}

/// A site's counting configuration, in the attribute's terms:
/// `rules [10 per 60s, 1 per 5s], algorithm = SLIDING_LOG, limit_type = IP, key = "rate_limit:"`.
struct Described(&'static CallSite);

impl fmt::Display for Described {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = &self.0.config;
        f.write_str("rules [")?;
        for (i, rule) in config.rules.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{rule}")?;
        }
        let algorithm = match config.algorithm {
            Algorithm::SlidingLog => "SLIDING_LOG",
            Algorithm::FixedWindow => "FIXED_WINDOW",
            Algorithm::SlidingWindow => "SLIDING_WINDOW",
            Algorithm::TokenBucket => "TOKEN_BUCKET",
        };
        write!(
            f,
            "], algorithm = {algorithm}, limit_type = {}, key = {:?}",
            config.limit_type, config.prefix
        )
    }
}
