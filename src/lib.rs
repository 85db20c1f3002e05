//! Distributed rate limiting for async Rust, by attribute.
//!
//! Put [`#[rate_limiter]`](rate_limiter) on an `async fn`: before the body runs, every rule
//! of that call site is checked for the caller (client IP, user id, a value of yours, or
//! everyone) **atomically, in one Redis round trip**, with time taken from the Redis
//! server's clock. When a rule is exceeded the body does not run and the function returns
//! the error. Without Redis it runs on an embedded in-process backend with exactly the same
//! semantics, so the same code works in development, in tests and on one box.
//!
//! ```
//! use redis_ratelimit::{rate_limiter, RateLimitError};
//!
//! #[rate_limiter(
//!     rules(rule(count = 10, time = 60), rule(count = 20, time = 120)),
//!     prevent_duplicate = true,   // and at most 1 call per 5 s
//!     limit_type = CUSTOM,
//!     by = phone,
//! )]
//! async fn send_code(phone: &str) -> Result<String, RateLimitError> {
//!     Ok(format!("code sent to {phone}"))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! assert!(send_code("+1 555 0100").await.is_ok());
//! // The same phone again within 5 s: refused, and the body does not run.
//! assert!(matches!(send_code("+1 555 0100").await, Err(RateLimitError::Limited { .. })));
//! assert!(send_code("+1 555 0199").await.is_ok()); // another caller, another budget
//! # }
//! ```
//!
//! # Contents
//!
//! - [`#[rate_limiter]`](rate_limiter): the attribute, with the table of every argument,
//!   its grammar and defaults, and the compile errors.
//! - [`Limiter`]: Redis or the embedded backend, checks in code ([`Limiter::check`],
//!   [`Decision`]), and the global limiter ([`init`], [`global`]).
//! - [`Guard`]: routes limited from the router, without an annotation on each handler.
//! - Framework integrations (each behind its feature): [`axum`], [`tonic`], [`tower`]
//!   (hyper and any tower stack), [`actix`] (actix-web).
//! - Calling rate-limited APIs: [`reqwest`], a middleware through which a fleet of
//!   processes shares a third-party API's quota, waits for room and honours `Retry-After`
//!   together.
//! - The guide:
//!   - [Keys](guide::keys): who is counted, the request context, the keys a check touches.
//!   - [Algorithms](guide::algorithms): checks in code, cost and peek, the four algorithms.
//!   - [Policies](guide::policies): `charge_if`, `block_for`, rules per caller, `wait`,
//!     `shadow`.
//!   - [Metered usage](guide::metered): calls and units in one check, costs settled after
//!     the call, calls in flight, calendar quotas, blocking a key: an LLM gateway.
//!   - [Local allowances](guide::allowances): a hot key decided in process, a round trip
//!     per allowance instead of per check, the bound still exact.
//!   - [Production Redis](guide::production): the limiter, TLS, Cluster, Sentinel, and
//!     what happens when Redis fails.
//!   - [Operating it](guide::operating): the `ratelimit` command, metrics and tracing,
//!     rules stored in Redis, modes, exemptions.
//! - [Benchmarks](https://github.com/redis-ratelimit/redis-ratelimit/blob/main/BENCHMARKS.md)
//!   and the [changelog](https://github.com/redis-ratelimit/redis-ratelimit/blob/main/CHANGELOG.md).
//!
//! # Cargo features
//!
//! | feature | what it brings | pulls in |
//! |---|---|---|
//! | `redis` (default) | [`Limiter::redis`], every plain URL form (`redis://`, `redis+cluster://`, `redis+sentinel://`, `unix://`), rule overrides read from Redis | redis, tokio `net`, socket2 |
//! | `tls` | `rediss://`, `rediss+cluster://`, `rediss+sentinel://`, [`Limiter::with_tls_ca`] | rustls (ring), tokio-rustls, native roots |
//! | `metrics` | counters and a histogram on the `metrics` facade ([operating it](guide::operating#metrics-and-tracing)) | metrics |
//! | `tower`, `axum`, `tonic`, `actix` | the framework integrations | their crates |
//! | `reqwest` | [`reqwest::RateLimitMiddleware`], the outbound client | reqwest, reqwest-middleware |
//!
//! With `default-features = false` the attribute, [`Limiter::memory`], the request context
//! and every policy still work, and neither redis nor any TLS crate is compiled. A URL that
//! needs a feature that is off is a [`ConfigError`] naming it ("rediss:// needs the `tls`
//! feature of redis-ratelimit"). Nothing is process-wide: no crypto provider installed, no
//! global state beyond the global limiter.

#![warn(missing_docs)]

pub use ratelimit_macros::rate_limiter;
pub use ratelimit_runtime::Calendar;
pub use ratelimit_runtime::Guard;
pub use ratelimit_runtime::Warning;
pub use ratelimit_runtime::{
    clock, context, global, init, key, Algorithm, BackendError, BackendErrorKind, BlockState,
    Check, CheckAll, ConfigError, Decision, InitError, KeyState, LimitType, Limiter, LogState,
    Mode, ParseModeError, ParseRuleError, RateLimitError, RequestContext, Rule, RuleState, Setting,
    ALLOWANCE_ENV, REDIS_URL_ENV, STATE_FILE_ENV,
};
pub use ratelimit_runtime::{Acquire, Slot};

#[cfg(feature = "actix")]
pub use ratelimit_runtime::actix;
#[cfg(feature = "axum")]
pub use ratelimit_runtime::axum;
#[cfg(feature = "tonic")]
pub use ratelimit_runtime::tonic;
#[cfg(feature = "reqwest")]
pub mod reqwest {
    #![doc = include_str!("../docs/outbound.md")]
    pub use ratelimit_runtime::reqwest::*;
}
#[cfg(feature = "tower")]
pub use ratelimit_runtime::tower;
#[cfg(feature = "redis")]
pub use ratelimit_runtime::{Breaker, OverrideError, StoredOverride, StoredOverrides};

pub mod guide {
    //! The guide: how rate limiting works here, chapter by chapter. The reference of each
    //! item is on the item itself; the attribute's is on [`#[rate_limiter]`](crate::rate_limiter).

    #[doc = include_str!("../docs/keys.md")]
    pub mod keys {}

    #[doc = include_str!("../docs/algorithms.md")]
    pub mod algorithms {}

    #[doc = include_str!("../docs/policies.md")]
    pub mod policies {}

    #[doc = include_str!("../docs/check_all.md")]
    pub mod check_all {}

    // The chapter ends with the LLM gateway example's code, compiled as one of its doc
    // tests: the example and the chapter cannot drift apart.
    #[doc = include_str!("../docs/metered.md")]
    #[doc = "```rust,no_run"]
    #[doc = include_str!("../examples/llm_gateway.rs")]
    #[doc = "```"]
    pub mod metered {}

    #[doc = include_str!("../docs/allowances.md")]
    pub mod allowances {}

    #[doc = include_str!("../docs/production.md")]
    pub mod production {}

    #[doc = include_str!("../docs/operating.md")]
    pub mod operating {}

    #[doc = include_str!("../docs/server.md")]
    pub mod server {}
}

/// What `#[rate_limiter]` expands to refers to. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use ratelimit_runtime::site::{charge_if, CallSite, Guarded, Lockout, Permit, SiteConfig};
    pub use ratelimit_runtime::Calendar;
    pub use ratelimit_runtime::RequestContext;
    pub use ratelimit_runtime::{global, Algorithm, LimitType, Limiter, RateLimitError, Rule};
    pub use ratelimit_runtime::{Concurrency, DEFAULT_LEASE};
}

/// Every `rust` block of the README, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
