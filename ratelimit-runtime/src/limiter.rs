use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

mod breaker;
mod deny_cache;

pub use breaker::Breaker;

use self::breaker::{Admission, BreakerState};
use self::deny_cache::DenyCache;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisBackend;
use crate::backend::{Backend, Request};
use crate::clock::Clock;
use crate::observe::{Answer, AnsweredBy, Observation, PROGRAMMATIC};
use crate::overrides::{Overrides, SiteRules, DEFAULT_POLL, DUPLICATE_SUFFIX};
use crate::throttle::LogThrottle;
use crate::{Algorithm, BackendError, BackendErrorKind, ConfigError, Decision, Rule};

/// Checks rules against a backend: Redis (shared by every process) or the embedded
/// in-process memory backend.
///
/// `Limiter` is `Send + Sync`; share one per process (a `static`, an `Arc`, or the global
/// one set with [`init`](crate::init)).
///
/// ```
/// use std::time::Duration;
/// use redis_ratelimit::{Limiter, Rule};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// const REPLY: [Rule; 1] = [Rule::new(5, Duration::from_secs(60))];
/// let limiter = Limiter::memory();
/// let d = limiter.check("hist:tom:reply", &REPLY).await?;
/// assert!(d.allowed);
/// assert_eq!((d.limit, d.remaining), (5, 4));
/// # Ok(()) }
/// ```
pub struct Limiter {
    store: Store,
    fail_open: bool,
    timeout: Duration,
    breaker: BreakerState,
    /// Counts checks while the store cannot answer.
    fallback: Option<Box<Limiter>>,
    deny_cache: Option<DenyCache>,
    warnings: LogThrottle,
    /// Rules overridden at run time, in process or stored in Redis.
    overrides: Arc<Overrides>,
    /// How often the overrides stored in Redis are read; `None`: never.
    rules_poll: Option<Duration>,
}

enum Store {
    // Behind a pointer: its connections make it several times larger than the other
    // variants. Shared with the rule-override poller.
    Redis(Arc<RedisBackend>),
    Memory(MemoryBackend),
    /// Built from an invalid environment; every check fails with this error.
    Misconfigured(ConfigError),
}

impl Limiter {
    /// The default per-check timeout.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

    /// A limiter on the Redis at `url`, in any of these forms:
    ///
    /// ```text
    /// redis://[[user]:password@]host[:port][/db]        one server
    /// rediss://...                                      TLS, verified against the system's roots
    /// redis+cluster://host:port[,host:port...]          Redis Cluster, from seed nodes (rediss+cluster:// for TLS)
    /// redis+sentinel://[[user]:password@]host:port[,host:port...]/master_name[/db]
    ///                                                   the master the sentinels name, followed
    ///                                                   through failovers (rediss+sentinel:// for TLS)
    /// unix:///path/to/redis.sock[?db=N]
    /// ```
    ///
    /// Only validates the URL; connections are made on first use and re-made automatically
    /// whenever they break. In the sentinel form the credentials and database are the
    /// master's; the sentinels are asked without credentials, and with the same ones when
    /// they require them. See the README's "Production" section.
    ///
    /// ```
    /// use redis_ratelimit::Limiter;
    ///
    /// assert!(Limiter::redis("redis://127.0.0.1:6379").is_ok());
    /// assert!(Limiter::redis("redis+cluster://10.0.0.1:7000,10.0.0.2:7000").is_ok());
    /// assert!(Limiter::redis("redis+sentinel://10.0.0.1:26379/mymaster").is_ok());
    /// let err = Limiter::redis("http://127.0.0.1").err().unwrap();
    /// assert!(err.to_string().contains("redis://"));
    /// ```
    pub fn redis(url: &str) -> Result<Limiter, ConfigError> {
        let backend = RedisBackend::new(url)?;
        backend.limit_connect_timeout(Self::DEFAULT_TIMEOUT);
        Ok(Limiter::with_store(Store::Redis(Arc::new(backend))))
    }

    /// Trusts the CA certificates in `pem` (PEM text) instead of the system's roots, for a
    /// TLS URL (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`). The server's
    /// certificate must name the host in the URL (or, for a cluster or sentinel, the
    /// addresses the nodes announce).
    ///
    /// ```no_run
    /// use redis_ratelimit::Limiter;
    ///
    /// let pem = std::fs::read("/etc/redis/ca.crt").expect("the CA");
    /// let limiter = Limiter::redis("rediss://redis.internal:6380")?.with_tls_ca(&pem)?;
    /// # Ok::<(), redis_ratelimit::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When `pem` holds no certificate or an unreadable one, and when this limiter is not
    /// on a TLS URL.
    pub fn with_tls_ca(self, pem: &[u8]) -> Result<Limiter, ConfigError> {
        match &self.store {
            Store::Redis(backend) => backend.trust_ca(pem)?,
            _ => {
                return Err(ConfigError::new(
                    "`with_tls_ca` applies to a Redis limiter on a TLS URL (`rediss://`)",
                ))
            }
        }
        Ok(self)
    }

    /// A limiter on the embedded in-process backend: no server, limits count per process.
    pub fn memory() -> Limiter {
        Limiter::with_store(Store::Memory(MemoryBackend::system()))
    }

    /// The embedded backend reading time from `clock` (see [`ManualClock`](crate::clock::ManualClock)).
    pub fn memory_with_clock(clock: impl Clock) -> Limiter {
        Limiter::with_store(Store::Memory(MemoryBackend::new(Arc::new(clock))))
    }

    /// Bounds the embedded backend to at most `max_keys` keys, over all its locks
    /// (default 1,000,000). Each key costs about 100 bytes plus its key text and, for the
    /// sliding log, 8 bytes per call counted in its window.
    ///
    /// When a new key finds no room, a key whose windows have all passed (expired) makes
    /// way first, else the least recently used (checked or peeked) key is forgotten, as if
    /// reset. The embedded backend's keys are split over up to 64 locks (each holding at
    /// least 1,024 keys when `max_keys` allows), and the least recently used key is chosen
    /// among its lock's keys. Expired keys are also dropped a few at a time as new keys
    /// arrive, never by a pass over all keys.
    ///
    /// Call it while building the limiter: keys counted before are forgotten. It has no
    /// effect on a Redis limiter (Redis bounds its memory with `maxmemory`; every key there
    /// expires with its longest window).
    ///
    /// ```
    /// use redis_ratelimit::Limiter;
    ///
    /// let limiter = Limiter::memory().max_keys(10_000);
    /// # drop(limiter);
    /// ```
    ///
    /// # Panics
    ///
    /// When `max_keys` is 0.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        if let Store::Memory(memory) = &mut self.store {
            memory.set_max_keys(max_keys);
        }
        self
    }

    pub(crate) fn misconfigured(err: ConfigError) -> Limiter {
        Limiter::with_store(Store::Misconfigured(err))
    }

    fn with_store(store: Store) -> Limiter {
        Limiter {
            store,
            fail_open: true,
            timeout: Self::DEFAULT_TIMEOUT,
            breaker: BreakerState::new(Breaker::DEFAULT),
            fallback: None,
            deny_cache: None,
            warnings: LogThrottle::new(),
            overrides: Overrides::new(),
            rules_poll: Some(DEFAULT_POLL),
        }
    }

    /// Whether a guarded call proceeds when the backend fails (`true`, the default, with a
    /// rate-limited warning log) or returns [`RateLimitError::Backend`](crate::RateLimitError::Backend).
    pub fn fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// How long one check may take before it counts as a backend failure (default 100 ms).
    /// Connecting to Redis takes at most this long too (or 1 s, if that is shorter).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        if let Store::Redis(backend) = &self.store {
            backend.limit_connect_timeout(timeout);
        }
        self
    }

    /// When to stop sending checks to a Redis that keeps failing, and for how long (default
    /// [`Breaker::DEFAULT`]: after 3 consecutive failures, for 1 second). While the breaker
    /// is open a check fails in microseconds instead of waiting for the timeout, and goes
    /// through the failure policy ([`fail_open`](Self::fail_open) or the
    /// [`fallback`](Self::fallback)). The embedded backend does not fail, so has no breaker.
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = BreakerState::new(breaker);
        self
    }

    /// Insurance: while this limiter's backend cannot answer (down, timed out, breaker
    /// open), checks, guarded and programmatic, are counted by `fallback` with the same keys
    /// and rules instead of being let through or refused; as soon as the backend answers
    /// again, checks go back to it. [`fail_open`](Self::fail_open) then applies to nothing.
    ///
    /// The fallback is typically [`Limiter::memory()`]: each instance of the application
    /// then counts alone, so with `n` instances a caller may get up to `n` times a limit
    /// while Redis is away (divide the rules by `n` if that matters more than availability),
    /// and what was counted in Redis before the outage is not seen by the fallback, nor the
    /// reverse. Bound its memory with [`max_keys`](Self::max_keys).
    ///
    /// ```
    /// use redis_ratelimit::Limiter;
    ///
    /// let limiter = Limiter::redis("redis://127.0.0.1:6379")?.fallback(Limiter::memory());
    /// # Ok::<(), redis_ratelimit::ConfigError>(())
    /// ```
    pub fn fallback(mut self, fallback: Limiter) -> Self {
        self.fallback = Some(Box::new(fallback));
        self
    }

    /// Whether a key the backend denied stays denied locally until its `retry_after`
    /// (default `false`). Then a flood of calls on one key costs Redis nothing: only the
    /// first denial reaches it. It answers the same key, rules and algorithm with a cost at
    /// least the one denied; a [`reset`](Self::reset) through this limiter forgets it.
    ///
    /// The cost: a denial may outlive its real end by the round trip that brought it,
    /// and a reset made by another process is not seen until the denial ends. Memory is
    /// bounded (65,536 denials; past that, denials are simply not cached).
    pub fn deny_cache(mut self, enabled: bool) -> Self {
        self.deny_cache = enabled.then(DenyCache::new);
        self
    }

    /// How often this limiter reads the rule overrides stored in Redis (default every
    /// second, each wait drawn within ± 20 % so that instances spread their reads); `None`
    /// never reads them (overrides set with [`override_rules`](Self::override_rules) still
    /// apply). No effect on the embedded backend.
    ///
    /// Operators override a call site's rules for every instance at once by writing its
    /// path (the function's path, or its `name`) and rule strings into the hash
    /// `{prefix}rules` (the prefix of the site's keys, `rate_limit:` by default):
    ///
    /// ```text
    /// HSET rate_limit:rules my_app::handlers::send_code "5/minute, 20/hour"
    /// HSET rate_limit:rules my_app::handlers::send_code#duplicate "1/10s"   # or "none"
    /// HDEL rate_limit:rules my_app::handlers::send_code                      # compiled rules again
    /// ```
    ///
    /// Each instance applies a change within one interval plus a round trip of its next
    /// read (1.2 s + the round trip by default), from the first guarded check of a site
    /// with that prefix on. Reads run in a task of their own, started on the runtime of a
    /// check: a check never waits for them, and while Redis cannot answer, the rules last
    /// read stay in force. A malformed value is ignored with one warning (the compiled rules
    /// stay in force for that path). The ordinary rules and the duplicate-submission rule
    /// (field `{path}#duplicate`) are overridden separately: an override of the rules keeps
    /// the compiled duplicate-submission rule.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::Limiter;
    ///
    /// let limiter = Limiter::redis("redis://127.0.0.1:6379")?.rules_poll(Some(Duration::from_secs(5)));
    /// # Ok::<(), redis_ratelimit::ConfigError>(())
    /// ```
    pub fn rules_poll(mut self, every: Option<Duration>) -> Self {
        self.rules_poll = every;
        self
    }

    /// Overrides, in this process, the rules of the guarded functions whose key path is
    /// `path` (the function's path, or its `name`), whatever their key prefix. It wins over
    /// an override stored in Redis for the same path, and applies from the next check on.
    ///
    /// `path` may end in `#duplicate` to override the duplicate-submission rule instead: at
    /// most one rule, or none to check without it. Overriding the ordinary rules keeps the
    /// compiled duplicate-submission rule.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// let limiter = Limiter::memory();
    /// limiter.override_rules("my_app::send_code", &[Rule::per_minute(5), Rule::per_hour(20)]);
    /// assert_eq!(limiter.rules_in_force("my_app::send_code"), [Rule::per_minute(5), Rule::per_hour(20)]);
    /// limiter.override_rules("my_app::send_code#duplicate", &[Rule::new(1, Duration::from_secs(10))]);
    /// limiter.clear_override("my_app::send_code");
    /// limiter.clear_override("my_app::send_code#duplicate");
    /// assert!(limiter.rules_in_force("my_app::send_code").is_empty());
    /// ```
    ///
    /// # Panics
    ///
    /// When `rules` is empty for a plain path ([`clear_override`](Self::clear_override)
    /// restores the compiled rules), or holds more than one rule for a `#duplicate` path.
    pub fn override_rules(&self, path: &str, rules: &[Rule]) {
        self.overrides.set_local(path, Some(rules));
    }

    /// Removes the in-process override of `path` (or `path#duplicate`) set with
    /// [`override_rules`](Self::override_rules): the rules stored in Redis for it, if any,
    /// else the compiled ones, are in force again.
    pub fn clear_override(&self, path: &str) {
        self.overrides.set_local(path, None);
    }

    /// The rules this limiter checks the guarded functions of key path `path` against now:
    /// the compiled rules of the first such function checked in this process, with this
    /// limiter's overrides applied, the duplicate-submission rule last. Before any of them
    /// has been checked, only what is overridden (empty when nothing is).
    ///
    /// Overrides stored in Redis show here once this limiter has read them (see
    /// [`rules_poll`](Self::rules_poll)).
    pub fn rules_in_force(&self, path: &str) -> Vec<Rule> {
        let path = path.strip_suffix(DUPLICATE_SUFFIX).unwrap_or(path);
        let compiled = crate::site::compiled_rules(path);
        self.overrides.in_force(
            path,
            compiled.as_ref().map(|(prefix, rules)| (*prefix, *rules)),
        )
    }

    /// The rules in force for a guarded function of key `prefix` and `path` compiled with
    /// `compiled`. Starts reading the overrides stored under `prefix` if this limiter does
    /// not yet. Lock-free and allocation-free once a prefix is known.
    pub(crate) fn site_rules(
        &self,
        prefix: &'static str,
        path: &str,
        compiled: SiteRules,
    ) -> SiteRules {
        let (Store::Redis(redis), Some(every)) = (&self.store, self.rules_poll) else {
            return self.overrides.lookup_local(prefix, path, compiled);
        };
        let (rules, unknown_prefix) = self.overrides.lookup(prefix, path, compiled);
        if unknown_prefix {
            self.overrides.watch_prefix(prefix);
        }
        self.overrides
            .ensure_polling(redis, every, self.timeout.max(Duration::from_secs(1)));
        rules
    }

    /// Whether this limiter lets guarded calls through when the backend fails.
    pub fn is_fail_open(&self) -> bool {
        self.fail_open
    }

    /// Checks `rules` for `key` and, if every rule admits the call, counts it.
    ///
    /// The returned [`Check`] is awaited directly (one unit, the sliding log) or refined
    /// first with [`cost`](Check::cost) and [`algorithm`](Check::algorithm):
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Algorithm, Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const UPLOADS: [Rule; 1] = [Rule::new(10, Duration::from_secs(60))];
    /// let limiter = Limiter::memory();
    /// let d = limiter.check("uploads:tom", &UPLOADS).cost(4).algorithm(Algorithm::TokenBucket).await?;
    /// assert_eq!((d.allowed, d.remaining), (true, 6));
    /// // More than a rule's count can never pass: denied, with no time to retry at.
    /// let d = limiter.check("uploads:tom", &UPLOADS).cost(11).algorithm(Algorithm::TokenBucket).await?;
    /// assert_eq!((d.allowed, d.retry_after), (false, None));
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// When `rules` is empty (when awaited).
    pub fn check<'a>(&'a self, key: &'a str, rules: &'a [Rule]) -> Check<'a> {
        Check::new(self, key, rules, true)
    }

    /// What a [`check`](Self::check) would decide now, counting nothing: `remaining` is
    /// what the binding rule has left *now* (the full count on a fresh key), `allowed`
    /// whether a call of the given [`cost`](Check::cost) would pass.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const REPLY: [Rule; 1] = [Rule::new(5, Duration::from_secs(60))];
    /// let limiter = Limiter::memory();
    /// assert_eq!(limiter.peek("hist:tom:reply", &REPLY).await?.remaining, 5);
    /// limiter.check("hist:tom:reply", &REPLY).await?;
    /// let d = limiter.peek("hist:tom:reply", &REPLY).cost(5).await?;
    /// assert_eq!((d.allowed, d.remaining), (false, 4));
    /// # Ok(()) }
    /// ```
    pub fn peek<'a>(&'a self, key: &'a str, rules: &'a [Rule]) -> Check<'a> {
        Check::new(self, key, rules, false)
    }

    /// `check(key, rules).algorithm(algorithm)`.
    #[deprecated(since = "0.2.0", note = "use `check(key, rules).algorithm(algorithm)`")]
    pub async fn check_with(
        &self,
        algorithm: Algorithm,
        key: &str,
        rules: &[Rule],
    ) -> Result<Decision, BackendError> {
        self.check(key, rules).algorithm(algorithm).await
    }

    /// `peek(key, rules).algorithm(algorithm)`.
    #[deprecated(since = "0.2.0", note = "use `peek(key, rules).algorithm(algorithm)`")]
    pub async fn peek_with(
        &self,
        algorithm: Algorithm,
        key: &str,
        rules: &[Rule],
    ) -> Result<Decision, BackendError> {
        self.peek(key, rules).algorithm(algorithm).await
    }

    /// Forgets everything counted for `key`.
    ///
    /// With a [`fallback`](Self::fallback), the key is forgotten there too.
    pub async fn reset(&self, key: &str) -> Result<(), BackendError> {
        if let Some(cache) = &self.deny_cache {
            cache.forget(key);
        }
        if let Some(fallback) = &self.fallback {
            fallback.reset_store(key).await?;
        }
        self.reset_store(key).await
    }

    async fn reset_store(&self, key: &str) -> Result<(), BackendError> {
        match &self.store {
            Store::Redis(redis) => {
                let pass = match self.breaker.admit() {
                    Admission::Send(pass) => pass,
                    Admission::Refuse(err) => return Err(err),
                };
                let result = self.within_timeout(redis.reset(key)).await;
                pass.record(&result);
                result
            }
            Store::Memory(memory) => memory.reset(key).await,
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Runs `request` on Redis, or, when it fails, on the fallback: a check that
    /// [`answer_now`](Self::answer_now) (the deny cache, the embedded backend) could not
    /// answer.
    pub(crate) async fn wait(&self, request: Request<'_>) -> Answer {
        let Store::Redis(redis) = &self.store else {
            unreachable!("only Redis checks wait for an answer");
        };
        let pass = match self.breaker.admit() {
            Admission::Send(pass) => pass,
            Admission::Refuse(err) => return self.on_failure(&request, err).await,
        };
        let result = self.within_timeout(redis.check(&request)).await;
        pass.record(&result);
        match result {
            Ok(raw) => {
                let decision = raw.into_decision(request.rules);
                self.remember(&request, &decision);
                Answer {
                    result: Ok(decision),
                    by: AnsweredBy::REDIS,
                }
            }
            Err(err) => self.on_failure(&request, err).await,
        }
    }

    /// The answer to `request` when it needs no waiting: a cached denial, or a check of the
    /// embedded backend, which is synchronous. `None` when it must go to Redis.
    #[inline]
    pub(crate) fn answer_now(&self, request: &Request<'_>) -> Option<Answer> {
        if let Some(denial) = self.deny_cache.as_ref().and_then(|c| c.lookup(request)) {
            return Some(Answer {
                result: Ok(denial),
                by: self.answered_by(),
            });
        }
        let raw = match &self.store {
            Store::Memory(memory) => memory.check_now(request),
            Store::Misconfigured(err) => Err(misconfigured(err)),
            Store::Redis(_) => return None,
        };
        let result = raw.map(|raw| {
            let decision = raw.into_decision(request.rules);
            self.remember(request, &decision);
            decision
        });
        Some(Answer {
            result,
            by: self.answered_by(),
        })
    }

    /// The `backend` label of this limiter's own answers (a misconfigured limiter is a Redis
    /// one whose URL was invalid).
    fn answered_by(&self) -> AnsweredBy {
        match self.store {
            Store::Memory(_) => AnsweredBy::MEMORY,
            Store::Redis(_) | Store::Misconfigured(_) => AnsweredBy::REDIS,
        }
    }

    fn remember(&self, request: &Request<'_>, decision: &Decision) {
        if let Some(cache) = &self.deny_cache {
            cache.remember(request, decision);
        }
    }

    /// What a failed check answers: the fallback's decision, or the error. An error about
    /// the key itself (another algorithm's state) would be the same anywhere: only a
    /// backend that cannot answer hands over to the fallback.
    async fn on_failure(&self, request: &Request<'_>, err: BackendError) -> Answer {
        match &self.fallback {
            Some(fallback) if err.kind() != BackendErrorKind::Command => {
                self.warn_backend_failed(request.key, &err, "counting on the fallback");
                let answer = match fallback.answer_now(request) {
                    Some(answer) => answer,
                    // A fallback on Redis of its own: boxed, as the future is recursive.
                    None => Box::pin(fallback.wait(*request)).await,
                };
                Answer {
                    by: AnsweredBy {
                        fallback: true,
                        ..answer.by
                    },
                    ..answer
                }
            }
            _ => Answer {
                result: Err(err),
                by: self.answered_by(),
            },
        }
    }

    async fn within_timeout<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, BackendError>>,
    ) -> Result<T, BackendError> {
        tokio::time::timeout(self.timeout, fut)
            .await
            .unwrap_or_else(|_| Err(BackendError::timeout(self.timeout)))
    }

    /// Logs a backend failure that a fail-open limiter let through, at most once per
    /// [`LogThrottle::INTERVAL`], with the number of failures since the last warning.
    pub(crate) fn warn_fail_open(&self, key: &str, err: &BackendError) {
        self.warn_backend_failed(key, err, "letting the call through (fail-open)");
    }

    fn warn_backend_failed(&self, key: &str, err: &BackendError, action: &str) {
        if let Some(suppressed) = self.warnings.admit() {
            tracing::warn!(
                target: "redis_ratelimit",
                %key,
                error = %err,
                suppressed,
                "rate limiter backend failed; {action}"
            );
        }
    }
}

fn misconfigured(err: &ConfigError) -> BackendError {
    BackendError::new(BackendErrorKind::Misconfigured, err.to_string())
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match &self.store {
            Store::Redis(_) => "redis",
            Store::Memory(_) => "memory",
            Store::Misconfigured(_) => "misconfigured",
        };
        f.debug_struct("Limiter")
            .field("backend", &backend)
            .field("fail_open", &self.fail_open)
            .field("timeout", &self.timeout)
            .field("breaker", &self.breaker.config())
            .field("fallback", &self.fallback)
            .field("deny_cache", &self.deny_cache.is_some())
            .field("rules_poll", &self.rules_poll)
            .finish()
    }
}

/// A check (or peek) of one key: returned by [`Limiter::check`] and [`Limiter::peek`],
/// refined with [`cost`](Check::cost) and [`algorithm`](Check::algorithm), and run when
/// awaited (or polled, e.g. by `Runtime::block_on`).
#[must_use = "a check does nothing until it is awaited"]
pub struct Check<'a> {
    limiter: &'a Limiter,
    request: Request<'a>,
    /// The check under way, once polled.
    running: Option<BoxFuture<'a, Answer>>,
    /// Its span and metrics, from the first poll to the answer.
    observation: Option<Observation>,
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

impl<'a> Check<'a> {
    fn new(limiter: &'a Limiter, key: &'a str, rules: &'a [Rule], consume: bool) -> Self {
        Check {
            limiter,
            request: Request {
                key,
                rules,
                algorithm: Algorithm::SlidingLog,
                cost: 1,
                consume,
                now_us: None,
                block_for_us: 0,
                refundable: false,
            },
            running: None,
            observation: None,
        }
    }

    /// How many units of every rule the call uses (default 1). The call uses all of them
    /// under every rule, or nothing: a denial consumes nothing. A cost above a rule's count
    /// can never pass: it is denied with `retry_after: None`.
    ///
    /// # Panics
    ///
    /// When `cost` is 0.
    pub fn cost(mut self, cost: u64) -> Self {
        assert!(cost > 0, "a check's cost must be at least 1");
        self.request.cost = cost;
        self
    }

    /// How the rules are counted (default [`Algorithm::SlidingLog`]). Use one algorithm per
    /// key: each keeps its own kind of state.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.request.algorithm = algorithm;
        self
    }

    /// Runs the check at an explicit time instead of the backend's clock. For differential
    /// tests only.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub fn at(mut self, now: Duration) -> Self {
        self.request.now_us = Some(now.as_micros() as u64);
        self
    }
}

impl Future for Check<'_> {
    type Output = Result<Decision, BackendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.running.is_none() {
            assert!(
                !this.request.rules.is_empty(),
                "a rate-limit check needs at least one rule"
            );
            let observation = Observation::start(PROGRAMMATIC, &this.request);
            // The embedded backend answers at once: no future to allocate.
            let answer = observation.in_scope(|| this.limiter.answer_now(&this.request));
            if let Some(answer) = answer {
                observation.finish(&answer);
                return Poll::Ready(answer.result);
            }
            this.observation = Some(observation);
        }
        let running = this
            .running
            .get_or_insert_with(|| Box::pin(this.limiter.wait(this.request)));
        let polled = match &this.observation {
            Some(observation) => observation.in_scope(|| running.as_mut().poll(cx)),
            None => running.as_mut().poll(cx),
        };
        let Poll::Ready(answer) = polled else {
            return Poll::Pending;
        };
        if let Some(observation) = this.observation.take() {
            observation.finish(&answer);
        }
        Poll::Ready(answer.result)
    }
}

impl fmt::Debug for Check<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("request", &self.request)
            .field("running", &self.running.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Limiter>();
    }
}
