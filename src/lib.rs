//! Distributed rate limiting by attribute.
//!
//! ```
//! use redis_ratelimit::{rate_limiter, RateLimitError};
//!
//! #[rate_limiter(rules("3/minute"), limit_type = CUSTOM, by = phone)]
//! async fn send_code(phone: &str) -> Result<String, RateLimitError> {
//!     Ok(format!("code sent to {phone}"))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! for _ in 0..3 {
//!     assert!(send_code("+1 555 0100").await.is_ok());
//! }
//! assert!(matches!(send_code("+1 555 0100").await, Err(RateLimitError::Limited { .. })));
//! assert!(send_code("+1 555 0199").await.is_ok()); // another caller, another budget
//! # }
//! ```
//!
//! Before the body runs, every rule of the call site is checked for this caller atomically,
//! in one round trip to Redis (or in the embedded memory backend when no Redis is
//! configured). See the README for the attribute reference, the key layout and the failure
//! behaviour.

#![warn(missing_docs)]

pub use ratelimit_macros::rate_limiter;
pub use ratelimit_runtime::Calendar;
pub use ratelimit_runtime::Guard;
pub use ratelimit_runtime::{
    clock, context, global, init, key, Algorithm, BackendError, BackendErrorKind, BlockState,
    Check, ConfigError, Decision, InitError, KeyState, LimitType, Limiter, LogState, Mode,
    ParseModeError, ParseRuleError, RateLimitError, RequestContext, Rule, RuleState, Setting,
    REDIS_URL_ENV,
};

#[cfg(feature = "actix")]
pub use ratelimit_runtime::actix;
#[cfg(feature = "axum")]
pub use ratelimit_runtime::axum;
#[cfg(feature = "tonic")]
pub use ratelimit_runtime::tonic;
#[cfg(feature = "tower")]
pub use ratelimit_runtime::tower;
#[cfg(feature = "redis")]
pub use ratelimit_runtime::{Breaker, OverrideError, StoredOverride, StoredOverrides};

/// What `#[rate_limiter]` expands to refers to. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use ratelimit_runtime::site::{charge_if, CallSite, Guarded, Permit, SiteConfig};
    pub use ratelimit_runtime::Calendar;
    pub use ratelimit_runtime::RequestContext;
    pub use ratelimit_runtime::{global, Algorithm, LimitType, Limiter, RateLimitError, Rule};
}

/// Every `rust` block of the README, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
