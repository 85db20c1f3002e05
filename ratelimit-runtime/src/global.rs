//! The process-wide limiter that guarded functions use unless given `limiter = ...`.

use std::sync::OnceLock;

use crate::{ConfigError, InitError, Limiter};

/// The environment variable naming the Redis server of the default global limiter.
pub const REDIS_URL_ENV: &str = "RATELIMIT_REDIS_URL";

/// The environment variable naming the state file of the default global limiter on the
/// embedded backend (see [`Limiter::state_file`]).
pub const STATE_FILE_ENV: &str = "RATELIMIT_STATE_FILE";
/// The environment variable giving the default global limiter a local allowance: a
/// duration in the rules' units (`250ms`, `1s`); see
/// [`Limiter::allowance`](crate::Limiter::allowance). Unset, or `0ms`: none.
pub const ALLOWANCE_ENV: &str = "RATELIMIT_ALLOWANCE";

static GLOBAL: OnceLock<Limiter> = OnceLock::new();

/// Sets the global limiter. Call it once, at startup, before any guarded call.
///
/// ```
/// use std::time::Duration;
/// use redis_ratelimit::Limiter;
///
/// let limiter = Limiter::memory().fail_open(false).timeout(Duration::from_millis(50));
/// redis_ratelimit::init(limiter).unwrap();
/// assert!(redis_ratelimit::init(Limiter::memory()).is_err()); // only once
/// ```
pub fn init(limiter: Limiter) -> Result<(), InitError> {
    GLOBAL.set(limiter).map_err(|_| InitError(()))
}

/// The global limiter; built on first use when [`init`] was not called: Redis at
/// `$RATELIMIT_REDIS_URL` when set, else the embedded memory backend (with a warning that
/// limits are then counted per process), keeping its state in the file
/// `$RATELIMIT_STATE_FILE` when set (see [`Limiter::state_file`]), with the local allowance
/// `$RATELIMIT_ALLOWANCE` when set.
pub fn global() -> &'static Limiter {
    GLOBAL.get_or_init(|| with_env_allowance(from_env()))
}

/// `limiter` with the allowance [`ALLOWANCE_ENV`] names, if any; a malformed one is
/// logged and ignored (checks then make a round trip each, as without it).
fn with_env_allowance(limiter: Limiter) -> Limiter {
    let Ok(text) = std::env::var(ALLOWANCE_ENV) else {
        return limiter;
    };
    if matches!(text.trim(), "0" | "0ms" | "0s") {
        return limiter;
    }
    match ratelimit_rule_text::parse_duration(&text) {
        Ok(max_age) => limiter.allowance(max_age),
        Err(err) => {
            tracing::error!(
                target: "redis_ratelimit",
                "{ALLOWANCE_ENV} is invalid ({err}); the global limiter draws no allowances"
            );
            limiter
        }
    }
}

fn from_env() -> Limiter {
    match std::env::var(REDIS_URL_ENV) {
        Ok(url) => redis(&url).unwrap_or_else(|err| {
            tracing::error!(
                target: "redis_ratelimit",
                "{REDIS_URL_ENV} is invalid ({err}); every guarded call will fail until it is \
                 fixed or unset"
            );
            let why = format!("{REDIS_URL_ENV} is invalid ({err}); fix it, or unset it to use the embedded backend");
            Limiter::misconfigured(ConfigError::new(why)).fail_open(false)
        }),
        Err(_) => {
            tracing::warn!(
                target: "redis_ratelimit",
                "no limiter set with redis_ratelimit::init and {REDIS_URL_ENV} is unset: using the \
                 embedded memory backend, so limits are counted per process"
            );
            match std::env::var_os(STATE_FILE_ENV) {
                Some(path) if !path.is_empty() => Limiter::memory().state_file(path),
                _ => Limiter::memory(),
            }
        }
    }
}

#[cfg(feature = "redis")]
fn redis(url: &str) -> Result<Limiter, ConfigError> {
    Limiter::redis(url)
}

/// Without the `redis` feature a Redis URL cannot be served: the environment asks for
/// something this build does not have.
#[cfg(not(feature = "redis"))]
fn redis(_url: &str) -> Result<Limiter, ConfigError> {
    Err(ConfigError::new(
        "a Redis URL needs the `redis` feature of redis-ratelimit (on by default)",
    ))
}
