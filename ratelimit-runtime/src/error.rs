//! Error types. Each says what happened and what to do about it.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::{LimitType, Rule};

/// Why a guarded call did not run.
///
/// New kinds of refusal may be added in a minor release, so a `match` on it ends with a
/// wildcard arm:
///
/// ```
/// use redis_ratelimit::RateLimitError;
///
/// fn status(err: &RateLimitError) -> u16 {
///     match err {
///         RateLimitError::Limited { .. } => 429,
///         RateLimitError::Backend(_) => 503,
///         _ => 500,
///     }
/// }
/// # let _ = status;
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RateLimitError {
    /// A rule is exceeded for this caller.
    Limited {
        /// The backend key that was checked.
        key: String,
        /// The rule that binds (the one that frees up last).
        rule: Rule,
        /// Time until a call would pass; `Duration::MAX` when it never can: its cost is
        /// above the rule's count.
        retry_after: Duration,
        /// The attribute's `message`.
        message: &'static str,
    },
    /// The limit type needs an identity that neither `by = ...` nor the request context gave.
    MissingIdentity {
        /// The limit type that needed it.
        limit_type: LimitType,
    },
    /// The backend failed and the limiter is fail-closed.
    Backend(BackendError),
}

impl fmt::Display for RateLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateLimitError::Limited {
                key,
                rule,
                retry_after,
                message,
            } if *retry_after == Duration::MAX => write!(
                f,
                "{message}: `{key}`: the call's cost is above {rule}, so it can never pass"
            ),
            RateLimitError::Limited {
                key,
                rule,
                retry_after,
                message,
            } => write!(
                f,
                "{message}: `{key}` exceeded {rule}; retry after {:.3}s",
                retry_after.as_secs_f64()
            ),
            RateLimitError::MissingIdentity { limit_type } => {
                let (what, how) = match limit_type {
                    LimitType::UserId => ("a user id", "RequestContext::with_user_id"),
                    _ => ("a client IP", "RequestContext::with_ip"),
                };
                write!(
                    f,
                    "limit_type = {limit_type} needs {what}, but neither `by = ...` nor the request \
                     context gave one: install the rate-limit layer of your web framework, or run \
                     the call inside redis_ratelimit::context::scope with {how}"
                )
            }
            RateLimitError::Backend(err) => write!(f, "rate limiter unavailable: {err}"),
        }
    }
}

impl Error for RateLimitError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            RateLimitError::Backend(err) => Some(err),
            _ => None,
        }
    }
}

impl From<BackendError> for RateLimitError {
    fn from(err: BackendError) -> Self {
        RateLimitError::Backend(err)
    }
}

/// What kind of failure a [`BackendError`] is. New kinds may be added in a minor release:
/// a `match` on it ends with a wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The backend could not be reached (connection refused, dropped, ...).
    Unavailable,
    /// The backend did not answer within the limiter's timeout.
    Timeout,
    /// The backend answered with an error (e.g. a key holding another algorithm's state).
    Command,
    /// The limiter was built from an invalid configuration.
    Misconfigured,
    /// The check's cost is above what its algorithm takes in one check
    /// ([`Algorithm::SLIDING_LOG_MAX_COST`](crate::Algorithm::SLIDING_LOG_MAX_COST)):
    /// refused before the backend was asked, nothing counted. Not a failure of the
    /// backend: a guarded call is refused with it whatever
    /// [`fail_open`](crate::Limiter::fail_open) says, and no fallback takes it.
    CostTooLarge,
}

/// A failure of the storage behind a [`Limiter`](crate::Limiter).
#[derive(Debug)]
pub struct BackendError {
    kind: BackendErrorKind,
    detail: String,
    source: Option<Box<dyn Error + Send + Sync>>,
}

impl BackendError {
    /// What kind of failure this is.
    pub fn kind(&self) -> BackendErrorKind {
        self.kind
    }

    pub(crate) fn new(kind: BackendErrorKind, detail: impl Into<String>) -> Self {
        BackendError {
            kind,
            detail: detail.into(),
            source: None,
        }
    }

    #[cfg(feature = "redis")]
    pub(crate) fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// A sliding-log check, peek or settle of `cost` units, above what it takes.
    #[cold]
    pub(crate) fn cost_too_large(cost: u64) -> Self {
        BackendError::new(
            BackendErrorKind::CostTooLarge,
            format!(
                "a cost of {cost} units is above the {} a sliding-log check takes \
                 (Algorithm::SLIDING_LOG_MAX_COST): the sliding log records one entry per unit, \
                 and so many would hold the backend for too long; nothing was counted. Count \
                 large costs (bytes, tokens) with algorithm = TOKEN_BUCKET, FIXED_WINDOW or \
                 SLIDING_WINDOW",
                crate::Algorithm::SLIDING_LOG_MAX_COST
            ),
        )
    }

    #[cfg(any(feature = "redis", test))]
    pub(crate) fn timeout(after: Duration) -> Self {
        BackendError::new(
            BackendErrorKind::Timeout,
            format!(
                "no answer within {}ms; check that the backend is up and not overloaded, or raise \
                 Limiter::timeout",
                after.as_millis()
            ),
        )
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)?;
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

impl Error for BackendError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

/// An invalid limiter configuration, such as a malformed Redis URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    detail: String,
}

impl ConfigError {
    pub(crate) fn new(detail: impl Into<String>) -> Self {
        ConfigError {
            detail: detail.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl Error for ConfigError {}

/// [`init`](crate::init) was called after the global limiter already existed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitError(pub(crate) ());

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the global limiter is already set (by an earlier init, or built on first use by a \
             guarded call); call init once, at startup, before any guarded call",
        )
    }
}

impl Error for InitError {}
