//! The runtime of [`redis-ratelimit`](https://docs.rs/redis-ratelimit): rules, keys,
//! request context, the Redis and in-memory backends, and errors.
//!
//! Depend on the `redis-ratelimit` facade crate; it re-exports everything here together
//! with the `#[rate_limiter]` attribute.

#![warn(missing_docs)]

#[cfg(feature = "actix")]
pub mod actix;
mod algorithm;
mod algorithm_kind;
#[cfg(feature = "axum")]
pub mod axum;
mod backend;
mod bans;
mod calendar;
pub mod clock;
mod concurrency;
pub mod context;
mod decision;
mod error;
mod global;
mod guard;
pub mod key;
mod limit_type;
mod limiter;
mod lockout;
mod mode;
mod most_limited_keys;
mod observe;
mod overrides;
mod random;
mod registry;
#[cfg(feature = "reqwest")]
pub mod reqwest;
mod rule;
mod rule_text;
#[doc(hidden)]
pub mod site;
mod site_config;
mod slot;
mod sync;
mod throttle;
#[cfg(feature = "tonic")]
pub mod tonic;
#[cfg(feature = "tower")]
pub mod tower;
mod warning;
#[cfg(any(feature = "tower", feature = "actix"))]
mod web;

pub use algorithm_kind::{Algorithm, ParseAlgorithmError};
/// Draws and give-backs straight on a backend, for the tests of allowances.
#[cfg(feature = "test-clock")]
#[doc(hidden)]
pub use backend::probe as draws;
#[cfg(feature = "redis")]
pub use backend::redis::Breaker;
pub use calendar::Calendar;
#[doc(hidden)]
pub use concurrency::{Concurrency, DEFAULT_LEASE};
pub use context::RequestContext;
pub use decision::Decision;
pub use error::{BackendError, BackendErrorKind, ConfigError, InitError, RateLimitError};
pub use global::{global, init, ALLOWANCE_ENV, REDIS_URL_ENV, STATE_FILE_ENV};
pub use guard::Guard;
pub use limit_type::LimitType;
pub use limiter::Acquire;
pub use limiter::{BlockState, Check, CheckAll, KeyState, Limiter, LogState, RuleState};
#[cfg(feature = "redis")]
pub use limiter::{OverrideError, StoredOverride, StoredOverrides};
pub use mode::{Mode, ParseModeError};
pub use overrides::Setting;
pub use rule::Rule;
pub use rule_text::ParseRuleError;
pub use slot::Slot;
pub use warning::Warning;
