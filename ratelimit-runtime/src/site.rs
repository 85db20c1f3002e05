//! What `#[rate_limiter]` expands to calls. Not public API: reached only through
//! `redis_ratelimit::__private`, and may change in any release.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use crate::backend::Request;
use crate::context::RequestContext;
use crate::key::{function_path, KeyTemplate};
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
    template: OnceLock<KeyTemplate>,
}

impl CallSite {
    pub const fn new(config: SiteConfig) -> Self {
        CallSite {
            config,
            template: OnceLock::new(),
        }
    }

    pub fn config(&self) -> &SiteConfig {
        &self.config
    }

    /// `probe` is `type_name_of_val` of a fn item declared inside the guarded function,
    /// which names the function's full path (impl type included).
    fn template(&self, probe: &str) -> &KeyTemplate {
        self.template.get_or_init(|| {
            KeyTemplate::new(
                self.config.prefix,
                self.config.limit_type,
                &function_path(probe),
            )
        })
    }

    /// The key for an identity given by the attribute's `by = ...`.
    pub fn key_by(&'static self, probe: &str, identity: impl fmt::Display) -> Cow<'static, str> {
        Cow::Owned(self.template(probe).key_for(identity))
    }

    /// The key for the identity the limit type reads from the request context
    /// (none for `GLOBAL`).
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

    /// Checks (and counts) one call using `cost` units; `Err` when it must not run.
    pub async fn check(
        &'static self,
        limiter: &Limiter,
        key: Cow<'static, str>,
        cost: u64,
    ) -> Result<(), RateLimitError> {
        let config = &self.config;
        let request = Request {
            key: &key,
            rules: config.rules,
            algorithm: config.algorithm,
            cost,
            consume: true,
            now_us: None,
        };
        let result = limiter.run(request).await;
        if let Ok(decision) = &result {
            crate::context::record(crate::context::SiteDecision {
                decision: *decision,
                rules: config.rules,
                duplicate_rule: config.duplicate_rule,
            });
        }
        match result {
            Ok(decision) if decision.allowed => Ok(()),
            Ok(decision) => Err(RateLimitError::Limited {
                retry_after: decision.retry_after.unwrap_or_default(),
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
