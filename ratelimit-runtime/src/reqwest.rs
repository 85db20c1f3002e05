//! Calling rate-limited APIs (feature `reqwest`): a [`reqwest_middleware`] middleware so
//! that every process calling a third-party API shares that API's quota, waits for room
//! instead of failing, and holds back together when the API pushes back.
//!
//! ```no_run
//! # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
//! use std::time::Duration;
//!
//! use redis_ratelimit::reqwest::RateLimitMiddleware;
//! use redis_ratelimit::Rule;
//!
//! static PAYMENTS: [Rule; 2] = [Rule::per_second(50), Rule::per_minute(2000)];
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RateLimitMiddleware::new("payments-api", &PAYMENTS).wait(Duration::from_secs(30)))
//!     .build();
//! let response = client.get("https://payments.example/v1/charges").send().await?;
//! # Ok(()) }
//! ```
//!
//! See [`RateLimitMiddleware`] for what a request meets.

use std::borrow::Cow;
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use http::Extensions;
use reqwest::header::{HeaderValue, RETRY_AFTER};
use reqwest::{Request, Response, StatusCode};
use reqwest_middleware::{Middleware, Next};

use crate::key::push_identity;
use crate::site::{GuardedCall, Site};
use crate::site_config::SiteConfig;
use crate::sync::lock;
use crate::throttle::throttled;
use crate::{context, Algorithm, LimitType, Limiter, RateLimitError, Rule};

/// A [`reqwest_middleware::Middleware`] that sends a request only once the API's budget
/// has room for it, shared by every client of the same `name` on the same limiter, in any
/// number of processes.
///
/// ```
/// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
/// use std::time::Duration;
///
/// use redis_ratelimit::reqwest::RateLimitMiddleware;
/// use redis_ratelimit::{Algorithm, Limiter, Rule};
///
/// static MAPS: [Rule; 1] = [Rule::per_second(10)];
/// static LIMITER: std::sync::LazyLock<Limiter> = std::sync::LazyLock::new(Limiter::memory);
///
/// let middleware = RateLimitMiddleware::new("maps-api", &MAPS)
///     .limiter(&LIMITER)                     // default: the global limiter
///     .wait(Duration::from_secs(5))          // default 30 s; Duration::ZERO refuses at once
///     .cost(|request| if request.url().path().starts_with("/batch") { 10 } else { 1 })
///     .algorithm(Algorithm::TokenBucket)     // default: the sliding log
///     .key_prefix("app:")                    // default "rate_limit:"
///     .per_host(true)                        // one budget per host: app:out:maps-api:{host}
///     .respect_retry_after(true);            // the default
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(middleware)
///     .build();
/// ```
///
/// # What a request meets
///
/// - **Room in the budget**: one unit (or its [`cost`](Self::cost)) of every rule is
///   taken from the key `{prefix}out:{name}` (`{prefix}out:{name}:{host}` with
///   [`per_host`](Self::per_host), the host escaped as any identity in a key), and the
///   request is sent. One round trip to the limiter's backend; nothing else.
/// - **No room yet**: the request waits for its turn, up to its [`wait`](Self::wait), in
///   Tokio time, holding no connection or lock; it is checked again when the denial's
///   `retry_after` has passed, as [`Check::wait`](crate::Check::wait) does (the same
///   code). Dropping the request's future while it waits takes nothing from the budget.
///   Waiters are not served in order of arrival.
/// - **No room within its wait** (or a cost above a rule's count): the request fails
///   unsent, with [`reqwest_middleware::Error::Middleware`] wrapping
///   [`RateLimitError::Limited`], which says when to try again:
///
///   ```
///   # mod redis_ratelimit { pub use ::redis_ratelimit::*; }
///   use redis_ratelimit::RateLimitError;
///
///   fn retry_after(err: &reqwest_middleware::Error) -> Option<std::time::Duration> {
///       match err {
///           reqwest_middleware::Error::Middleware(err) => match err.downcast_ref() {
///               Some(RateLimitError::Limited { retry_after, .. }) => Some(*retry_after),
///               _ => None,
///           },
///           _ => None,
///       }
///   }
///   ```
/// - **The API pushes back**: an answer `429 Too Many Requests` or `503 Service
///   Unavailable` with `Retry-After` (delay-seconds or an HTTP-date) blocks the key with
///   [`Limiter::block`] until then, so every process sharing it holds back (its requests
///   wait, or fail if the block outlasts their wait). The answer itself is returned to the
///   caller unchanged, and nothing is sent again. A malformed `Retry-After` is ignored,
///   with a throttled warning. Turned off with
///   [`respect_retry_after(false)`](Self::respect_retry_after).
/// - **The backend fails**: as for a guarded site, the limiter's
///   [`fail_open`](Limiter::fail_open) setting decides (the default lets the request go,
///   with a throttled warning; fail-closed fails it unsent with
///   [`RateLimitError::Backend`] inside `Error::Middleware`), and its
///   [`fallback`](Limiter::fallback) counts instead when it has one.
///
/// # Operating it
///
/// Each request is checked as a guarded site whose path is `out:{name}`: the `site` label
/// of its metrics (`ratelimit_checks_total`, with feature `metrics`) and of its
/// `ratelimit.check` span, and the field of its rule and mode overrides
/// ([`Limiter::override_rules`], [`Limiter::override_mode`], `out:{name}#mode` in the
/// `{prefix}rules` hash; mode `off` sends every request unchecked). Its decisions never
/// reach the RateLimit headers of a request being served while it calls out: the API's
/// budget is not the client's.
#[derive(Clone, Debug)]
pub struct RateLimitMiddleware {
    name: &'static str,
    config: SiteConfig,
    /// `None`: the global limiter, looked up at each request, so that a client built
    /// before [`init`](crate::init) still counts on the limiter `init` sets.
    limiter: Option<&'static Limiter>,
    cost: Option<fn(&Request) -> u64>,
    per_host: bool,
    respect_retry_after: bool,
    /// The site's path `out:{name}` and key `{prefix}out:{name}`, made on the first request
    /// (the prefix may change until then).
    built: OnceLock<Built>,
}

#[derive(Clone, Debug)]
struct Built {
    site: Site,
    key: &'static str,
}

impl RateLimitMiddleware {
    /// How long a request waits for room unless told otherwise.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

    /// A middleware counting every request against `rules` under the name `name`: with the
    /// sliding log, on the [global limiter](crate::global), under the key prefix
    /// `"rate_limit:"`, waiting up to 30 s for room, and honouring `Retry-After`.
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Rule};
    ///
    /// static LLM: [Rule; 2] = [Rule::per_minute(500), Rule::per_hour(10_000)];
    /// let middleware = RateLimitMiddleware::new("llm-api", &LLM);
    /// assert_eq!(middleware.name(), "llm-api");
    /// ```
    ///
    /// # Panics
    ///
    /// When `rules` is empty, or `name` is not one or more segments of ASCII letters,
    /// digits, `_`, `.` and `-` separated by `::` or `/` (a guard's name): it is part of a
    /// key, a metric label and a Redis hash field.
    pub fn new(name: &'static str, rules: &'static [Rule]) -> RateLimitMiddleware {
        crate::guard::assert_named_rules(
            "RateLimitMiddleware::new",
            "name",
            name,
            rules,
            "Rule::per_second(50)",
        );
        RateLimitMiddleware {
            name,
            config: SiteConfig {
                limit_type: LimitType::Global,
                wait: Some(Self::DEFAULT_WAIT),
                ..SiteConfig::new(rules)
            },
            limiter: None,
            cost: None,
            per_host: false,
            respect_retry_after: true,
            built: OnceLock::new(),
        }
    }

    /// The limiter to count on (default: the [global limiter](crate::global), as it is
    /// when a request is sent).
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use std::sync::LazyLock;
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Limiter, Rule};
    ///
    /// static SHARED: LazyLock<Limiter> = LazyLock::new(|| {
    ///     Limiter::redis("redis://127.0.0.1:6379").expect("a valid URL") // connects on first use
    /// });
    /// static API: [Rule; 1] = [Rule::per_second(20)];
    /// let middleware = RateLimitMiddleware::new("partner-api", &API).limiter(&SHARED);
    /// ```
    pub fn limiter(mut self, limiter: &'static Limiter) -> RateLimitMiddleware {
        self.limiter = Some(limiter);
        self
    }

    /// How long a request may wait for room before it fails (default 30 s).
    /// `Duration::ZERO` refuses at once a request the budget has no room for.
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use std::time::Duration;
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Rule};
    ///
    /// static API: [Rule; 1] = [Rule::per_second(20)];
    /// // Interactive calls: fail fast rather than keep a user waiting.
    /// let middleware = RateLimitMiddleware::new("search-api", &API).wait(Duration::ZERO);
    /// ```
    pub fn wait(mut self, wait: Duration) -> RateLimitMiddleware {
        self.config.wait = (!wait.is_zero()).then_some(wait);
        self
    }

    /// How many units of every rule a request uses (default 1): e.g. the items of a batch
    /// call. A request whose cost is 0 is sent unchecked; one above a rule's count can
    /// never pass, and fails at once.
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Rule};
    ///
    /// static GEOCODE: [Rule; 1] = [Rule::per_second(100)];
    /// // The batch endpoint takes its addresses in a header of ours.
    /// let middleware = RateLimitMiddleware::new("geocode", &GEOCODE).cost(|request| {
    ///     request
    ///         .headers()
    ///         .get("x-batch-size")
    ///         .and_then(|v| v.to_str().ok()?.parse().ok())
    ///         .unwrap_or(1)
    /// });
    /// ```
    pub fn cost(mut self, cost: fn(&Request) -> u64) -> RateLimitMiddleware {
        self.cost = Some(cost);
        self
    }

    /// How the rules are counted (default [`Algorithm::SlidingLog`]). Every client sharing
    /// the name must use the same one.
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Algorithm, Rule};
    ///
    /// static API: [Rule; 1] = [Rule::per_minute(600)];
    /// let middleware = RateLimitMiddleware::new("api", &API).algorithm(Algorithm::TokenBucket);
    /// ```
    pub fn algorithm(mut self, algorithm: Algorithm) -> RateLimitMiddleware {
        self.config.algorithm = algorithm;
        self
    }

    /// Admits requests from a local allowance living up to `max_age` (default: the
    /// limiter's, see [`Limiter::allowance`](crate::Limiter::allowance); `Duration::ZERO`
    /// turns it off): a part of the shared quota reserved in one round trip, the requests
    /// that follow in this process sent without one, what is left given back. The quota is
    /// still never exceeded.
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use std::time::Duration;
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Rule};
    ///
    /// static API: [Rule; 1] = [Rule::per_second(500)];
    /// let middleware = RateLimitMiddleware::new("api", &API).allowance(Duration::from_millis(250));
    /// ```
    pub fn allowance(mut self, max_age: Duration) -> RateLimitMiddleware {
        self.config.allowance = Some(max_age);
        self
    }

    /// The keys' prefix (default `"rate_limit:"`), also the prefix of the `{prefix}rules`
    /// hash its overrides are read from.
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Rule};
    ///
    /// static API: [Rule; 1] = [Rule::per_minute(600)];
    /// // Counted under the key "billing:out:api".
    /// let middleware = RateLimitMiddleware::new("api", &API).key_prefix("billing:");
    /// ```
    pub fn key_prefix(mut self, prefix: &'static str) -> RateLimitMiddleware {
        self.config.prefix = prefix;
        self.built = OnceLock::new();
        self
    }

    /// One budget per request host (default `false`: one budget for every request through
    /// the middleware): the key `{prefix}out:{name}:{host}`, for a client that calls
    /// several tenants' or regions' hosts of one API, each with its own quota.
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Rule};
    ///
    /// static SHOP: [Rule; 1] = [Rule::per_second(2)];
    /// // acme.shop.example and globex.shop.example each get 2 requests a second.
    /// let middleware = RateLimitMiddleware::new("shop-api", &SHOP).per_host(true);
    /// ```
    pub fn per_host(mut self, per_host: bool) -> RateLimitMiddleware {
        self.per_host = per_host;
        self
    }

    /// Whether an answer `429` or `503` with `Retry-After` blocks the key until then, for
    /// every process sharing it (default `true`).
    ///
    /// ```
    /// # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::reqwest; }
    /// use redis_ratelimit::{reqwest::RateLimitMiddleware, Rule};
    ///
    /// static API: [Rule; 1] = [Rule::per_second(5)];
    /// // This API's Retry-After is known to be wrong: count, but ignore it.
    /// let middleware = RateLimitMiddleware::new("legacy-api", &API).respect_retry_after(false);
    /// ```
    pub fn respect_retry_after(mut self, respect: bool) -> RateLimitMiddleware {
        self.respect_retry_after = respect;
        self
    }

    /// The middleware's name, as given to [`new`](Self::new).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The site's path and key, made (and the site registered) on the first request.
    fn built(&self) -> &Built {
        self.built.get_or_init(|| {
            let path = intern(format!("out:{}", self.name));
            Built {
                site: Site::new(self.config, path, path, ""),
                key: intern(format!("{}{path}", self.config.prefix)),
            }
        })
    }

    /// The key `request` is counted under.
    fn key(&self, built: &Built, request: &Request) -> Cow<'static, str> {
        match request.url().host_str().filter(|_| self.per_host) {
            Some(host) => {
                let mut key = String::with_capacity(built.key.len() + 1 + host.len());
                key.push_str(built.key);
                key.push(':');
                push_identity(&mut key, host);
                Cow::Owned(key)
            }
            None => Cow::Borrowed(built.key),
        }
    }

    /// Admits `request` under `key`: the guarded step of a layer guard, outside any
    /// request being served.
    async fn admit(
        &self,
        limiter: &Limiter,
        site: &Site,
        key: Cow<'static, str>,
        cost: NonZeroU64,
    ) -> Result<(), RateLimitError> {
        context::unrecorded(async {
            let call = GuardedCall {
                cost,
                ..GuardedCall::of(key)
            };
            let permit = site.guard(limiter, call).answer().await?;
            // What it took stays taken: the request is sent.
            drop(permit);
            Ok(())
        })
        .await
    }

    /// Blocks `key` when `response` says to wait (see [`retry_after`]).
    async fn hold_back(&self, limiter: &Limiter, key: &str, response: &Response) {
        if !matches!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        ) {
            return;
        }
        let Some(value) = response.headers().get(RETRY_AFTER) else {
            return;
        };
        let delay = match retry_after(value, SystemTime::now()) {
            Some(delay) => delay.min(Rule::MAX_WINDOW),
            None => {
                throttled!(
                    warn,
                    [key, retry_after = ?value],
                    "ignoring a malformed Retry-After (neither delay-seconds nor an \
                     HTTP-date); the API's budget is not blocked",
                );
                return;
            }
        };
        if let Err(err) = limiter.block(key, delay).await {
            throttled!(
                warn,
                [key, error = %err],
                "could not block the API's budget after its Retry-After; other processes \
                 may keep calling it",
            );
        }
    }
}

#[async_trait::async_trait]
impl Middleware for RateLimitMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let limiter = self.limiter.unwrap_or_else(crate::global);
        let built = self.built();
        let key = self.key(built, &request);
        let cost = self.cost.map_or(1, |cost| cost(&request));
        if let Some(cost) = NonZeroU64::new(cost) {
            self.admit(limiter, &built.site, key.clone(), cost)
                .await
                .map_err(reqwest_middleware::Error::middleware)?;
        }
        let response = next.run(request, extensions).await?;
        if self.respect_retry_after {
            self.hold_back(limiter, &key, &response).await;
        }
        Ok(response)
    }
}

/// The strings made once per name and prefix for the life of the process (a path or key
/// must be `'static`): a client built again and again makes them once.
fn intern(text: String) -> &'static str {
    static MADE: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let mut made = lock(&MADE);
    let made = made.get_or_insert_with(HashMap::new);
    if let Some(&text) = made.get(&text) {
        return text;
    }
    let leaked: &'static str = Box::leak(text.clone().into_boxed_str());
    made.insert(text, leaked);
    leaked
}

/// How long a `Retry-After` value asks to wait from `now`: delay-seconds, or an HTTP-date
/// (zero once it has passed); `None` when it is neither (RFC 9110, 10.2.3).
fn retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits to hold is still a (very long) delay.
        return Some(Duration::from_secs(text.parse().unwrap_or(u64::MAX)));
    }
    let date = httpdate::parse_http_date(text).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str, now: SystemTime) -> Option<Duration> {
        retry_after(&HeaderValue::from_str(text).unwrap(), now)
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 21 Oct 2015 07:28:00
        assert_eq!(parsed("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parsed(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parsed("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            parsed("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        // The obsolete forms RFC 9110 still asks recipients to read.
        assert_eq!(
            parsed("Wednesday, 21-Oct-15 07:29:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parsed("Wed Oct 21 07:28:10 2015", now),
            Some(Duration::from_secs(10))
        );
        // A date passed asks for no wait.
        assert_eq!(
            parsed("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        for malformed in ["", "-5", "1.5", "soon", "Wed, 21 Oct 2015", "12 s"] {
            assert_eq!(parsed(malformed, now), None, "{malformed:?}");
        }
    }

    #[test]
    fn keys_and_paths_follow_the_name_prefix_and_host() {
        static RULES: [Rule; 1] = [Rule::per_second(1)];
        let request = |url: &str| Request::new(reqwest::Method::GET, url.parse().unwrap());
        let shared = RateLimitMiddleware::new("reqwest.tests.keys", &RULES);
        let built = shared.built();
        assert_eq!(built.site.path, "out:reqwest.tests.keys");
        let key = shared.key(built, &request("http://api.example:8080/v1"));
        assert_eq!(key, "rate_limit:out:reqwest.tests.keys");

        let per_host = RateLimitMiddleware::new("reqwest.tests.keys", &RULES)
            .key_prefix("app:")
            .per_host(true);
        let built = per_host.built();
        let key = per_host.key(built, &request("http://api.example:8080/v1"));
        assert_eq!(key, "app:out:reqwest.tests.keys:api.example");
        // A host is escaped as any identity in a key (an IPv6 literal's colons).
        let key = per_host.key(built, &request("http://[::1]:8080/v1"));
        assert_eq!(key, "app:out:reqwest.tests.keys:[%3A%3A1]");
    }

    #[test]
    #[should_panic(expected = "RateLimitMiddleware::new: malformed name \"a:b\"")]
    fn a_malformed_name_is_refused_naming_it() {
        let _ = RateLimitMiddleware::new("a:b", &[]);
    }

    #[test]
    #[should_panic(expected = "RateLimitMiddleware::new(\"api\", ..): no rules")]
    fn a_middleware_without_rules_is_refused() {
        let _ = RateLimitMiddleware::new("api", &[]);
    }
}
