//! The runtime of [`redis-ratelimit`](https://docs.rs/redis-ratelimit): rules, keys,
//! request context, the Redis and in-memory backends, and errors.
//!
//! Depend on the `redis-ratelimit` facade crate; it re-exports everything here together
//! with the `#[rate_limiter]` attribute.
//!
//! # Inside the crate
//!
//! The modules in layers; a module calls only those in its own layer's leaves or below it
//! (`scripts/import-cycles` keeps it so: no module imports one that imports it back).
//!
//! - **Leaves**: `rule`, `calendar`, `spelling` (an enum's names, Display and FromStr from
//!   one table), `algorithm_kind`, `limit_type`, `mode`, `error`,
//!   `decision` (a check's answer and its receipt), `clock`, `random`, `sync` (the lock
//!   helper), `sharded` (the one sharded map), `background` (the one kind of background
//!   task on a caller's runtime), `throttle` (throttled logs), `warning`, `lockout`,
//!   `concurrency` (the data of a limit on calls in flight), `most_limited_keys`, `key`
//!   (the key layout), `context` (the per-request identity) and `rule_text`. They own plain data and call
//!   nothing above them.
//! - **`algorithm`** owns the arithmetic: each algorithm's counts (one file each under
//!   `algorithm/`), the lock-out kept with them (`block.rs`), what a key stores
//!   (`StoredState`) and its saved form (`saved.rs`). It calls only the leaves; the
//!   embedded backend runs it and the Lua scripts repeat it.
//! - **`backend`** owns storage: `backend::redis` (topologies, connections, breakers,
//!   scripts), `backend::memory` (the embedded backend and its shards), its slots and its
//!   state file, and `probe` (draws on a backend, for tests). It calls `algorithm` and
//!   the leaves, never the limiter.
//! - **`bans`** and **`overrides`** own the tables operators change at run time (banned
//!   identities; rules and modes by site path) and their polling of Redis: `bans` calls
//!   only the leaves, `overrides` calls `bans`, `backend::redis` and the leaves.
//! - **`limiter`** owns [`Limiter`], a handle over one store: `limiter/store.rs` routes
//!   every operation to Redis, the embedded backend or a misconfiguration;
//!   `failover.rs` is the one failure policy (the fallback stores, fail-open);
//!   `build.rs` builds it; `check.rs`, `answer.rs` and `check_all.rs` are the check
//!   pipeline (with `deny_cache.rs` and `allowance.rs`, the local answers); `settle.rs`
//!   and `refunds.rs` what goes back; `operator.rs`, `bans.rs`, `inspect.rs`,
//!   `most_limited.rs`, `stored_overrides.rs` and `state_file.rs` the operator surface;
//!   `acquire.rs` and `slot.rs` calls in flight (a held slot and its renewal, kept by
//!   the store that took it). It calls `backend`, `bans`, `overrides`, `observe`,
//!   `registry` and the leaves.
//! - **`observe`** (spans, events, metrics of a check) sits beside the limiter: it calls
//!   it; it calls `backend` and the leaves.
//! - **`site`**, `site_config`, `registry`, `guard` and `global` own guarded call sites:
//!   what `#[rate_limiter]` expands to and the router's guards, turning a call into a key
//!   and a check of the `Limiter`. One type, `site::Site`, is a site once its path is
//!   known (registered once; its key from the request; the guarded step), for the
//!   attribute's `CallSite`, a layer's guard and the outbound middleware alike. They call
//!   `limiter` and everything below it.
//! - **Faces**: `web` (what the framework integrations share: client IP, response fields,
//!   problem bodies, the middleware), `tower`, `axum`, `tonic`, `actix` and `reqwest`.
//!   They turn a framework's request into a check through `guard`/`site` and the answer
//!   into a response; nothing below calls them.

#![warn(missing_docs)]

#[cfg(feature = "actix")]
pub mod actix;
mod algorithm;
mod algorithm_kind;
#[cfg(feature = "axum")]
pub mod axum;
mod backend;
mod background;
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
mod sharded;
#[doc(hidden)]
pub mod site;
mod site_config;
mod spelling;
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
pub use limiter::Slot;
pub use limiter::{BlockState, Check, CheckAll, KeyState, Limiter, LogState, RuleState};
#[cfg(feature = "redis")]
pub use limiter::{OverrideError, StoredOverride, StoredOverrides};
pub use mode::{Mode, ParseModeError};
pub use overrides::Setting;
pub use rule::Rule;
pub use rule_text::ParseRuleError;
pub use warning::Warning;
