//! The runtime of [`redis-ratelimit`](https://docs.rs/redis-ratelimit): rules, keys,
//! request context, the Redis and in-memory backends, and errors.
//!
//! Depend on the `redis-ratelimit` facade crate; it re-exports everything here together
//! with the `#[rate_limiter]` attribute.

#![warn(missing_docs)]

#[cfg(feature = "actix")]
pub mod actix;
mod algorithm;
#[cfg(feature = "axum")]
pub mod axum;
mod backend;
mod calendar;
pub mod clock;
pub mod context;
mod decision;
mod error;
mod global;
mod guard;
mod inspect;
pub mod key;
mod limit_type;
mod limiter;
mod mode;
mod observe;
mod overrides;
mod random;
mod registry;
mod rule;
mod rule_text;
#[doc(hidden)]
pub mod site;
mod site_config;
mod sync;
mod throttle;
#[cfg(feature = "tonic")]
pub mod tonic;
#[cfg(feature = "tower")]
pub mod tower;
#[cfg(any(feature = "tower", feature = "actix"))]
mod web;

pub use algorithm::{Algorithm, ParseAlgorithmError};
#[cfg(feature = "redis")]
pub use backend::redis::Breaker;
pub use calendar::Calendar;
pub use context::RequestContext;
pub use decision::Decision;
pub use error::{BackendError, BackendErrorKind, ConfigError, InitError, RateLimitError};
pub use global::{global, init, REDIS_URL_ENV};
pub use guard::Guard;
pub use inspect::{BlockState, KeyState, LogState, RuleState, Setting};
#[cfg(feature = "redis")]
pub use inspect::{OverrideError, StoredOverride, StoredOverrides};
pub use limit_type::LimitType;
pub use limiter::{Check, Limiter};
pub use mode::{Mode, ParseModeError};
pub use rule::Rule;
pub use rule_text::ParseRuleError;
