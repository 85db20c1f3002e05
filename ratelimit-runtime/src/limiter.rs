use std::fmt;
use std::sync::Arc;
use std::time::Duration;

mod acquire;
mod allowance;
mod bans;
mod check;
mod check_all;
pub(crate) use check::{boxed_in_place, checked_warn_at, decided, decided_with_slot, Begun, Plan};
mod deny_cache;
mod inspect;
pub(crate) mod most_limited;
mod refunds;
mod state_file;
#[cfg(feature = "redis")]
mod stored_overrides;

pub use acquire::Acquire;
pub use check::Check;
pub use check_all::CheckAll;
pub use inspect::{BlockState, KeyState, LogState, RuleState};
#[cfg(feature = "redis")]
pub use stored_overrides::{OverrideError, StoredOverride, StoredOverrides};

#[cfg(feature = "redis")]
use self::allowance::Admission;
use self::allowance::{Allowances, Drawn, Retired, Step};
use self::deny_cache::DenyCache;
use self::refunds::Refunds;
use crate::backend::memory::MemoryBackend;
use crate::backend::memory_state::StateFile;
#[cfg(feature = "redis")]
use crate::backend::redis::{Breaker, RedisBackend, RedisConfig};
use crate::backend::Request;
use crate::clock::Clock;
use crate::decision::{CountedBy, RawDecision};
use crate::observe::{Answer, AnsweredBy};
use crate::overrides::{path_of, InForce, Overrides, SiteRules, DEFAULT_POLL};
use crate::slot::Home as SlotHome;
use crate::throttle::LogThrottle;
use crate::{BackendError, BackendErrorKind, ConfigError, Decision, Mode, Rule};

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
    /// Counts checks while the store cannot answer.
    fallback: Option<Box<Limiter>>,
    deny_cache: Option<DenyCache>,
    /// The decisions of the counting algorithms refunded, each refunded once.
    refunds: Refunds,
    /// Puts every guarded site in shadow mode, unless its own mode is overridden.
    shadow: bool,
    warnings: LogThrottle,
    /// Rules overridden at run time, in process or stored in Redis.
    overrides: Arc<Overrides>,
    /// How often the overrides stored in Redis are read; `None`: never.
    rules_poll: Option<Duration>,
    /// Where the embedded backend saves its state, if anywhere (`limiter/state_file.rs`).
    state_file: Option<Arc<StateFile>>,
    /// Called once per crossing of a `warn_at` share (`on_warning`).
    warning_hook: Option<crate::warning::Hook>,
    /// The guarded sites' refusals by identity (`most_limited`).
    refusals: Arc<most_limited::Refusals>,
    /// The allowance of every check that sets none of its own, in ms (0: none).
    allowance_ms: u32,
    /// The live allowances (see `limiter/allowance.rs`); shared with the give-back task.
    allowances: Arc<Allowances>,
    /// The embedded backend standing for a remote one, for tests: allowances apply.
    remote_memory: bool,
}

enum Store {
    // Behind a pointer: its connections make it several times larger than the other
    // variants. Shared with the rule-override poller.
    #[cfg(feature = "redis")]
    Redis(Arc<RedisBackend>),
    // Shared with the thread that saves its state, if any, and by the limiters of a test
    // that stand for instances over one remote store.
    Memory(Arc<MemoryBackend>),
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
    /// they require them. See the guide's
    /// [production Redis](https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/production/index.html)
    /// chapter.
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
    #[cfg(feature = "redis")]
    pub fn redis(url: &str) -> Result<Limiter, ConfigError> {
        let config = RedisConfig::new(url, Limiter::DEFAULT_TIMEOUT)?;
        Ok(Limiter::with_store(Store::Redis(Arc::new(
            RedisBackend::new(&config),
        ))))
    }

    /// Trusts the CA certificates in `pem` (PEM text) instead of the system's roots, for a
    /// TLS URL (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`). The server's
    /// certificate must name the host in the URL (or, for a cluster or sentinel, the
    /// addresses the nodes announce). Needs the `tls` feature.
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
    #[cfg(feature = "tls")]
    pub fn with_tls_ca(self, pem: &[u8]) -> Result<Limiter, ConfigError> {
        let Store::Redis(backend) = &self.store else {
            return Err(ConfigError::new(
                "`with_tls_ca` applies to a Redis limiter on a TLS URL (`rediss://`)",
            ));
        };
        let mut trusting = backend.config().clone();
        trusting.trust_ca(pem)?;
        Ok(self.reconfigure_redis(|config| *config = trusting))
    }

    /// A limiter on the embedded in-process backend: no server, limits count per process.
    pub fn memory() -> Limiter {
        Limiter::with_store(Store::Memory(Arc::new(MemoryBackend::system())))
    }

    /// The embedded backend reading time from `clock` (see [`ManualClock`](crate::clock::ManualClock)).
    pub fn memory_with_clock(clock: impl Clock) -> Limiter {
        Limiter::with_store(Store::Memory(Arc::new(MemoryBackend::new(Arc::new(clock)))))
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
            *memory = Arc::new(memory.resized(max_keys));
            self.restore_state();
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
            fallback: None,
            deny_cache: None,
            refunds: Refunds::default(),
            shadow: false,
            warnings: LogThrottle::new(),
            overrides: Overrides::new(),
            rules_poll: Some(DEFAULT_POLL),
            state_file: None,
            warning_hook: None,
            refusals: Arc::default(),
            allowance_ms: 0,
            allowances: Arc::new(Allowances::new()),
            remote_memory: false,
        }
    }

    /// Calls `hook` whenever a check with `warn_at` (the attribute's, [`Check::warn_at`],
    /// [`Guard::warn_at`](crate::Guard::warn_at)) takes a rule from below that share of its
    /// count to at or above it. The backend decides it from the counts it holds (the
    /// script, under Redis's one thread; the embedded backend, under the key's lock), so a
    /// crossing warns once, on the instance whose check made it, and never twice however
    /// many instances share the key. The hook runs on the checking task, before the check
    /// returns: hand slow work (an HTTP call) to a task or a channel. Each crossing is also
    /// an `INFO` event of target `redis_ratelimit` and, with feature `metrics`, counter
    /// `ratelimit_warnings_total{site, rule}`.
    ///
    /// A crossing whose answer never reached the instance (a connection broken after
    /// Redis ran the check) warns nowhere: at most once, never twice. See the guide's
    /// [operating](https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/operating/index.html#warned-before-the-limit)
    /// chapter for a hook that posts to a webhook.
    ///
    /// ```
    /// use redis_ratelimit::{Limiter, Warning};
    ///
    /// let limiter = Limiter::memory().on_warning(|w: &Warning| {
    ///     eprintln!("{} has used {} of {} ({})", w.key, w.used, w.rule.count(), w.site);
    /// });
    /// # drop(limiter);
    /// ```
    pub fn on_warning(mut self, hook: impl Fn(&crate::Warning) + Send + Sync + 'static) -> Self {
        self.warning_hook = Some(Arc::new(hook));
        self
    }

    /// Reports the crossings of a check of `key` by `site` (see [`on_warning`](Self::on_warning)).
    #[cold]
    pub(crate) fn warned(
        &self,
        site: &str,
        key: &str,
        rules: &[Rule],
        crossings: &[crate::warning::Crossing],
    ) {
        crate::warning::report(self.warning_hook.as_ref(), site, key, rules, crossings);
    }

    /// The identities of the guarded site `site` (its path or `name`, as in the metrics'
    /// `site` label) with the most refusals over the last `since` (whole minutes, from 1
    /// to 60), most first, at most `n`: across every instance on a Redis limiter, this
    /// process's on the embedded backend. An identity is the key's identity part with its
    /// type: `ip:203.0.113.9`, `user:42`, `custom:alice`, or `global`. Sites under the
    /// default key prefix; see [`most_limited_in`](Self::most_limited_in) for another.
    ///
    /// Every refusal of a guarded site counts (the deny cache's and a block's too; a
    /// shadow site's would-be refusals do not). An admitted check costs nothing more: each
    /// instance counts its refusals in process and sends them every second, so they are
    /// seen within 2 s. Exact while a site has at most 1,000 refused identities a minute;
    /// past that each minute keeps its 1,000 heaviest, so the counts of identities that
    /// fell below the cut and came back are undercounts (see the guide's
    /// [operating](https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/operating/index.html#who-is-limited-most)
    /// chapter). `ratelimit top <site>` shows the same.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{rate_limiter, Limiter, RateLimitError};
    /// use std::sync::LazyLock;
    ///
    /// static LIMITER: LazyLock<Limiter> = LazyLock::new(Limiter::memory);
    ///
    /// #[rate_limiter(rules("1/minute"), limit_type = CUSTOM, by = user, name = "login", limiter = &*LIMITER)]
    /// async fn login(user: &str) -> Result<(), RateLimitError> { Ok(()) }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// for _ in 0..4 {
    ///     let _ = login("mallory").await;
    /// }
    /// let _ = login("alice").await;
    /// let top = LIMITER.most_limited("login", Duration::from_secs(15 * 60), 10).await?;
    /// assert_eq!(top, [("custom:mallory".to_owned(), 3)]);
    /// # Ok(()) }
    /// ```
    pub async fn most_limited(
        &self,
        site: &str,
        since: Duration,
        n: usize,
    ) -> Result<Vec<(String, u64)>, BackendError> {
        self.most_limited_in(crate::key::DEFAULT_PREFIX, site, since, n)
            .await
    }

    /// [`most_limited`](Self::most_limited) of a site whose keys have the prefix `prefix`
    /// (the attribute's `key`, [`Guard::key_prefix`](crate::Guard::key_prefix)).
    pub async fn most_limited_in(
        &self,
        prefix: &str,
        site: &str,
        since: Duration,
        n: usize,
    ) -> Result<Vec<(String, u64)>, BackendError> {
        match &self.store {
            Store::Memory(_) => Ok(self.refusals.read_here(prefix, site, since, n)),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                let minutes = most_limited::minutes(since, most_limited::this_minute());
                redis.most_limited(prefix, site, minutes, n).await
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Counts a refusal of `key` by the guarded site `site` (see
    /// [`most_limited`](Self::most_limited)).
    #[cold]
    pub(crate) fn refused(&self, site: &str, key: &str) {
        match &self.store {
            Store::Memory(_) | Store::Misconfigured(_) => self.refusals.record_here(site, key),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                if self.refusals.record_pending(site, key) {
                    most_limited::start_flushing(&self.refusals, redis);
                }
            }
        }
    }

    /// Whether a guarded call proceeds when the backend fails (`true`, the default, with a
    /// rate-limited warning log) or returns [`RateLimitError::Backend`](crate::RateLimitError::Backend).
    pub fn fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// How long one check may take before it counts as a backend failure (default 100 ms).
    /// Connecting to Redis takes at most this long too (or 1 s, if that is shorter). The
    /// embedded backend answers at once, so has no timeout.
    pub fn timeout(self, timeout: Duration) -> Self {
        #[cfg(feature = "redis")]
        return self.reconfigure_redis(|config| config.set_timeout(timeout));
        #[cfg(not(feature = "redis"))]
        {
            let _ = timeout;
            self
        }
    }

    /// When to stop sending checks to a Redis server that keeps failing, and for how long
    /// (default [`Breaker::DEFAULT`]: after 3 consecutive failures, for 1 second).
    ///
    /// Every server has a breaker of its own with this configuration: the one server, each
    /// master of a Redis Cluster (kept by address, so a promoted replica starts closed), the
    /// master the sentinels name. While a server's breaker is open, checks of the keys it
    /// serves fail in microseconds instead of waiting for the timeout, and go through the
    /// failure policy ([`fail_open`](Self::fail_open) or the [`fallback`](Self::fallback),
    /// which then counts those keys only); checks of keys on other servers go on as before.
    /// After the cool-down one check probes that server alone. See [`Breaker`]. The embedded
    /// backend does not fail, so has no breaker.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Breaker, Limiter};
    ///
    /// // A hung master costs the checks of its keys a few timeouts, then microseconds (on
    /// // the fallback), with a probe every 500 ms.
    /// let limiter = Limiter::redis("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")?
    ///     .breaker(Breaker::new(3, Duration::from_millis(500)))
    ///     .fallback(Limiter::memory());
    /// # Ok::<(), redis_ratelimit::ConfigError>(())
    /// ```
    #[cfg(feature = "redis")]
    pub fn breaker(self, breaker: Breaker) -> Self {
        self.reconfigure_redis(|config| config.set_breaker(breaker))
    }

    /// Builds the Redis backend again from its configuration changed by `change` (nothing
    /// is connected yet while a limiter is being built); no effect on other backends.
    #[cfg(feature = "redis")]
    fn reconfigure_redis(mut self, change: impl FnOnce(&mut RedisConfig)) -> Self {
        if let Store::Redis(backend) = &self.store {
            let mut config = backend.config().clone();
            change(&mut config);
            self.store = Store::Redis(Arc::new(RedisBackend::new(&config)));
        }
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
    /// least the one denied; a [`reset`](Self::reset), [`block`](Self::block),
    /// [`settle`](Self::settle) or [`refund`](Self::refund) of the key through this
    /// limiter forgets it (the next check asks the backend).
    ///
    /// The cost: a denial may outlive its real end by the round trip that brought it,
    /// and a reset made by another process is not seen until the denial ends. Memory is
    /// bounded (65,536 denials; past that, denials are simply not cached).
    pub fn deny_cache(mut self, enabled: bool) -> Self {
        self.deny_cache = enabled.then(DenyCache::new);
        self
    }

    /// Lets every check through this limiter draw a **local allowance** of `max_age` (the
    /// default of every check and guarded site that sets none of its own; a site's or a
    /// check's own setting wins; `Duration::ZERO`, the default, turns it off).
    ///
    /// A check with an allowance reserves part of its key's budget in one round trip (all
    /// or nothing over every rule, as a check of that cost would take it), and the checks of
    /// that key and rules that follow in this process are admitted **locally** from it,
    /// without a round trip, for at most `max_age` (and never past a quarter of the
    /// shortest rule's window, nor the end of the fixed window or calendar period it was
    /// drawn in). Then what is left goes back. Refusals still come from the backend. What
    /// the fleet admits stays within every rule at the moments calls are admitted, exactly
    /// as with a round trip per check; see the guide's
    /// [local allowances](https://docs.rs/redis-ratelimit/*/redis_ratelimit/guide/allowances/index.html)
    /// chapter for what is guaranteed, what changes and how to choose `max_age`. On the
    /// embedded backend it changes nothing: every check is local already.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::Limiter;
    ///
    /// let limiter = Limiter::redis("redis://127.0.0.1:6379")?.allowance(Duration::from_millis(250));
    /// # Ok::<(), redis_ratelimit::ConfigError>(())
    /// ```
    pub fn allowance(mut self, max_age: Duration) -> Self {
        self.allowance_ms = allowance::max_age_ms(max_age);
        self
    }

    /// Gives back, at once, every allowance this limiter holds: what they did not use
    /// stops counting in the backend, what they used counts as spent when it was. Call it
    /// at shutdown, after the last check; a check after it draws again. Batched: one round
    /// trip per key, sent concurrently.
    ///
    /// ```
    /// use redis_ratelimit::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::memory(); // holds none: nothing to give back
    /// limiter.release_allowances().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When a give-back cannot reach the backend: what it held then stays counted as
    /// spent until its windows pass (the safe side). The others are still given back.
    pub async fn release_allowances(&self) -> Result<(), BackendError> {
        self.give_back(self.allowances.release_all()).await
    }

    /// How many round trips this limiter's checks with an allowance have made (draws, and
    /// checks sent alone near a limit). For tests and benchmarks.
    #[doc(hidden)]
    pub fn allowance_draws(&self) -> u64 {
        self.allowances.draws()
    }

    /// A limiter on an embedded backend read by `clock`, standing for a remote store
    /// (allowances apply), that other limiters share with
    /// [`sharing_backend`](Self::sharing_backend): instances of a fleet, for differential
    /// tests.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub fn remote_memory_with_clock(clock: impl Clock) -> Limiter {
        let clock: Arc<dyn Clock> = Arc::new(clock);
        Limiter {
            remote_memory: true,
            allowances: Arc::new(Allowances::on_clock(Arc::clone(&clock))),
            ..Limiter::with_store(Store::Memory(Arc::new(MemoryBackend::new(clock))))
        }
    }

    /// Another instance over this limiter's remote embedded backend (see
    /// [`remote_memory_with_clock`](Self::remote_memory_with_clock)), with its own
    /// allowances and the same default allowance.
    ///
    /// # Panics
    ///
    /// When this limiter is not on a remote embedded backend.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub fn sharing_backend(&self, clock: impl Clock) -> Limiter {
        let Store::Memory(memory) = &self.store else {
            panic!("sharing_backend: not an embedded backend");
        };
        assert!(
            self.remote_memory,
            "sharing_backend: not a remote embedded backend"
        );
        Limiter {
            remote_memory: true,
            allowance_ms: self.allowance_ms,
            allowances: Arc::new(Allowances::on_clock(Arc::new(clock))),
            ..Limiter::with_store(Store::Memory(Arc::clone(memory)))
        }
    }

    /// Draws allowances the naive way: recorded when drawn, spent as long as a real hold
    /// (units then leave a window before they are spent). Only to show that the
    /// differential test catches it.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub fn naive_allowances(self, naive: bool) -> Self {
        self.allowances.set_naive(naive);
        self
    }

    /// Gives back the allowances whose life has ended by the local clock, as the give-back
    /// task does.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub async fn give_back_due(&self) -> Result<(), BackendError> {
        self.give_back(self.allowances.collect_due()).await
    }

    /// Sends the give-backs of `retired` allowances, concurrently, at the backend's clock.
    async fn give_back(&self, retired: Vec<Retired>) -> Result<(), BackendError> {
        if retired.is_empty() {
            return Ok(());
        }
        match &self.store {
            Store::Memory(memory) => {
                for retired in &retired {
                    memory.give_back(&retired.give_back(0));
                }
                Ok(())
            }
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                let backs: Vec<_> = retired.iter().map(|r| r.give_back(0)).collect();
                redis.give_back_all(&backs).await.into_iter().collect()
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
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
    /// with that prefix on. Reads run on a thread of their own (`ratelimit-poll`, one per
    /// limiter, ending after the limiter is dropped), so that they go on whichever runtimes
    /// come and go: a check never waits for them, and while Redis cannot answer, the rules last
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

    /// Removes the in-process overrides of the site `path` set with
    /// [`override_rules`](Self::override_rules) and [`override_mode`](Self::override_mode):
    /// its rules, duplicate-submission rule and mode. What is stored in Redis for it, if
    /// anything, else what was compiled, is in force again. `path#duplicate` clears only the
    /// duplicate-submission rule's override.
    pub fn clear_override(&self, path: &str) {
        if path_of(path).len() == path.len() {
            self.overrides.clear_local(path);
        } else {
            self.overrides.set_local(path, None);
        }
    }

    /// Puts every guarded site of this limiter (attributes and layer guards) in shadow
    /// mode (default `false`): checks count exactly as enforcing ones would, but no call is
    /// refused; would-be refusals are reported (metrics outcome `shadow_limited`, a
    /// throttled `info` event). The way to roll limits out. A site's own override
    /// ([`override_mode`](Self::override_mode), or `{path}#mode` in Redis) wins over it.
    /// Programmatic [`check`](Self::check)s are not guarded sites: modes do not apply.
    ///
    /// ```
    /// use redis_ratelimit::{Limiter, Mode};
    ///
    /// let limiter = Limiter::memory().shadow(true);
    /// assert_eq!(limiter.mode_in_force("my_app::send_code"), Mode::Shadow);
    /// limiter.override_mode("my_app::send_code", Mode::Enforce);
    /// assert_eq!(limiter.mode_in_force("my_app::send_code"), Mode::Enforce);
    /// ```
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Sets, in this process, the [`Mode`] of the guarded site `path` (the function's path
    /// or its `name`, or a guard's name), whatever its key prefix, from the next check on.
    /// It wins over a mode stored in Redis for the path, over [`shadow`](Self::shadow) and
    /// over the attribute's `shadow`. [`clear_override`](Self::clear_override) removes it.
    ///
    /// Operators set it for every instance at once in the `{prefix}rules` hash, field
    /// `{path}#mode`, value `enforce`, `shadow` or `off` (read with the rule overrides,
    /// see [`rules_poll`](Self::rules_poll); a malformed value is ignored with a warning):
    ///
    /// ```text
    /// HSET rate_limit:rules my_app::handlers::send_code#mode off   # the kill switch
    /// ```
    pub fn override_mode(&self, path: &str, mode: Mode) {
        self.overrides.set_local_mode(path_of(path), Some(mode));
    }

    /// The mode the guarded site `path` runs in now: its override (in process, else read
    /// from Redis), else [`Mode::Shadow`] when this limiter is in [`shadow`](Self::shadow)
    /// mode or the first such site checked in this process has `shadow = true`, else
    /// [`Mode::Enforce`].
    pub fn mode_in_force(&self, path: &str) -> Mode {
        let path = path_of(path);
        let attribute = crate::registry::compiled(path).is_some_and(|site| site.shadow);
        self.mode_of(self.overrides.mode(path), attribute)
    }

    /// The mode of a site whose override is `overridden` and whose attribute says `shadow`.
    fn mode_of(&self, overridden: Option<Mode>, shadow: bool) -> Mode {
        match overridden {
            Some(mode) => mode,
            None if self.shadow || shadow => Mode::Shadow,
            None => Mode::Enforce,
        }
    }

    /// The rules this limiter checks the guarded functions of key path `path` against now:
    /// the compiled rules of the first such function checked in this process, with this
    /// limiter's overrides applied, the duplicate-submission rule last. Before any of them
    /// has been checked, only what is overridden (empty when nothing is).
    ///
    /// Overrides stored in Redis show here once this limiter has read them (see
    /// [`rules_poll`](Self::rules_poll)).
    pub fn rules_in_force(&self, path: &str) -> Vec<Rule> {
        let path = path_of(path);
        let compiled = crate::registry::compiled(path);
        self.overrides
            .in_force(path, compiled.map(|site| (site.prefix, site.rules)))
    }

    /// The rules and mode in force for a guarded site of key `prefix` and `path` compiled
    /// with `compiled` and the attribute's `shadow`. Starts reading the overrides stored
    /// under `prefix` if this limiter does not yet. Lock-free and allocation-free once a
    /// prefix is known.
    #[inline]
    pub(crate) fn site_policy(
        &self,
        prefix: &'static str,
        path: &str,
        compiled: SiteRules,
        shadow: bool,
    ) -> (SiteRules, Mode) {
        let InForce { rules, mode } = self.site_overrides(prefix, path, compiled);
        (rules, self.mode_of(mode, shadow))
    }

    #[inline]
    fn site_overrides(&self, prefix: &'static str, path: &str, compiled: SiteRules) -> InForce {
        #[cfg(feature = "redis")]
        if let (Store::Redis(redis), Some(every)) = (&self.store, self.rules_poll) {
            let (in_force, unknown_prefix) = self.overrides.lookup(prefix, path, compiled);
            if unknown_prefix {
                self.overrides.watch_prefix(prefix);
            }
            let timeout = redis.config().timeout().max(Duration::from_secs(1));
            self.overrides.ensure_polling(redis, every, timeout);
            return in_force;
        }
        self.overrides.lookup_local(prefix, path, compiled)
    }

    /// Whether this limiter lets guarded calls through when the backend fails.
    pub fn is_fail_open(&self) -> bool {
        self.fail_open
    }

    /// Checks `rules` for `key` and, if every rule admits the call, counts it.
    ///
    /// The returned [`Check`] is awaited directly (one unit, the sliding log) or refined
    /// first with [`cost`](Check::cost), [`algorithm`](Check::algorithm),
    /// [`wait`](Check::wait) and [`block_for`](Check::block_for):
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
    #[inline]
    pub fn check<'a>(&'a self, key: &'a str, rules: &'a [Rule]) -> Check<'a> {
        Check::new(self, Request::new(key, rules, true))
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
        Check::new(self, Request::new(key, rules, false))
    }

    /// Takes one of `max` slots of `key` for a call in flight: at most `max` holders of
    /// `key`'s slots at once, in every process sharing the backend. The returned
    /// [`Acquire`](crate::Acquire) is awaited directly (a 30 s lease, no waiting) or refined
    /// first with [`lease`](crate::Acquire::lease) and [`wait`](crate::Acquire::wait); it
    /// answers `None` when every slot is taken (after waiting, when asked to).
    ///
    /// The [`Slot`](crate::Slot) is held until it is released or dropped, and renewed
    /// meanwhile; a holder that stops renewing (its process died) leaves a slot that lapses
    /// `lease` later. [`reset`](Self::reset) frees every slot of the key. A slot is kept on
    /// Redis in a second key in the hash slot of `key` (so a Cluster serves both from one
    /// node): `{key}:slots`, or `key` then `:slots` when `key` has a hash tag of its own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::memory();
    /// let slot = limiter.acquire("report:acme", 2).lease(Duration::from_secs(10)).await?;
    /// let Some(slot) = slot else {
    ///     return Ok(()); // two reports of acme are running already
    /// };
    /// // ... build the report ...
    /// slot.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// When `max` is 0 or above [`Rule::MAX_COUNT`].
    pub fn acquire<'a>(&'a self, key: &'a str, max: u64) -> Acquire<'a> {
        Acquire::new(self, key, max)
    }

    /// Where a slot is kept that a decision with `receipt` took: the backend that counted
    /// it (this limiter's, or its fallback's).
    pub(crate) fn slot_home(&self, receipt: &crate::decision::Receipt) -> Option<SlotHome> {
        match (&self.store, receipt.counted_by) {
            #[cfg(feature = "redis")]
            (Store::Redis(redis), CountedBy::Redis) => Some(SlotHome::Redis(Arc::clone(redis))),
            (Store::Memory(memory), CountedBy::Memory) => {
                Some(SlotHome::Memory(Arc::clone(memory.slots())))
            }
            _ => self.fallback.as_ref()?.slot_home(receipt),
        }
    }

    /// Forgets everything counted for `key`, and any block on it, and frees its slots
    /// ([`acquire`](Self::acquire)).
    ///
    /// With a [`fallback`](Self::fallback), the key is forgotten there too.
    pub async fn reset(&self, key: &str) -> Result<(), BackendError> {
        self.forget_denial(key);
        self.allowances.forget(key);
        if let Some(fallback) = &self.fallback {
            Box::pin(fallback.reset(key)).await?;
        }
        match &self.store {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.reset(key).await,
            Store::Memory(memory) => {
                memory.reset_now(key);
                Ok(())
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// Refuses every check of `key` for `duration` from now, whatever its rules and
    /// algorithm: each is denied with `retry_after` = what is left of the block, consuming
    /// nothing, in every process sharing the backend. The block a refusal with
    /// [`block_for`](Check::block_for) starts, written the same way: kept with the key's
    /// state (which it keeps), answered by the key's first rule, lifted by
    /// [`reset`](Self::reset). It never shortens a block that lasts longer already. A key
    /// that holds nothing yet is blocked too: the first algorithm to check it after the
    /// block takes it over. The end is counted from the backend's clock (Redis `TIME`).
    ///
    /// What to do when a third party answers `429 Too Many Requests` with `Retry-After`:
    /// the outbound middleware (feature `reqwest`) does it for you.
    ///
    /// With a [`fallback`](Self::fallback), the key is blocked there too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const API: [Rule; 1] = [Rule::per_second(50)];
    /// let limiter = Limiter::memory();
    /// limiter.block("out:maps-api", Duration::from_secs(30)).await?;
    ///
    /// let refused = limiter.check("out:maps-api", &API).await?;
    /// assert!(!refused.allowed);
    /// assert!(refused.retry_after > Some(Duration::from_secs(29)));
    ///
    /// limiter.reset("out:maps-api").await?; // lifts it
    /// assert!(limiter.check("out:maps-api", &API).await?.allowed);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When the backend cannot be reached, or `key` holds something the limiter never
    /// writes ([`BackendErrorKind::Command`]).
    ///
    /// # Panics
    ///
    /// When `duration` is over [`Rule::MAX_WINDOW`].
    pub async fn block(&self, key: &str, duration: Duration) -> Result<(), BackendError> {
        self.block_at_us(key, duration, None).await
    }

    /// [`block`](Self::block) at an explicit time instead of the backend's clock, as
    /// [`Check::at`] checks. For differential tests only.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub async fn block_at(
        &self,
        key: &str,
        duration: Duration,
        now: Duration,
    ) -> Result<(), BackendError> {
        self.block_at_us(key, duration, Some(crate::clock::micros(now)))
            .await
    }

    /// A block at `now_us` (`None`: the backend's clock).
    async fn block_at_us(
        &self,
        key: &str,
        duration: Duration,
        now_us: Option<u64>,
    ) -> Result<(), BackendError> {
        assert!(
            duration <= Rule::MAX_WINDOW,
            "Limiter::block: cannot block `{key}` for {duration:?}; a block lasts at most 2^52 \
             microseconds (about 142 years)"
        );
        let block_for_us = crate::clock::micros(duration);
        if block_for_us == 0 {
            return Ok(());
        }
        // What this instance holds of the key goes back; its next check meets the block.
        self.allowances.end(key);
        if let Some(fallback) = &self.fallback {
            Box::pin(fallback.block_at_us(key, duration, now_us)).await?;
        }
        match &self.store {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.block(key, block_for_us, now_us).await?,
            Store::Memory(memory) => memory.block(key, block_for_us, now_us),
            Store::Misconfigured(err) => return Err(misconfigured(err)),
        }
        self.forget_denial(key);
        Ok(())
    }

    /// Gives back exactly the units `decision` took from `key` under `rules`: a no-op for a
    /// denied decision (which took nothing) and once the units have left every window.
    /// Never gives back twice: the sliding log removes exactly the entries of that check,
    /// so a repeated refund changes nothing; the other algorithms count units without
    /// names, so the limiter remembers the decisions it refunded (its last 4096 refunds)
    /// and ignores a repeated one, and gives back only what the key still holds in the
    /// same window (or has not refilled). A refund whose connection broke is not sent again
    /// blindly (its units then stay used, the safe side). A decision counted by the
    /// [`fallback`](Self::fallback) is refunded there.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const EXPORTS: [Rule; 1] = [Rule::new(10, Duration::from_secs(3600))];
    /// let limiter = Limiter::memory();
    /// let d = limiter.check("exports:acme", &EXPORTS).cost(3).await?;
    /// assert_eq!(d.remaining, 7);
    /// // The export failed before doing any work: it should not count.
    /// limiter.refund("exports:acme", &EXPORTS, &d).await?;
    /// assert_eq!(limiter.peek("exports:acme", &EXPORTS).await?.remaining, 10);
    /// # Ok(()) }
    /// ```
    pub async fn refund(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
    ) -> Result<(), BackendError> {
        self.refund_at_us(key, rules, decision, None).await
    }

    /// [`refund`](Self::refund) at an explicit time instead of the backend's clock, as
    /// [`Check::at`] checks. For differential tests only.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub async fn refund_at(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        now: Duration,
    ) -> Result<(), BackendError> {
        self.refund_at_us(key, rules, decision, Some(crate::clock::micros(now)))
            .await
    }

    /// A refund at `now_us` (`None`: the backend's clock).
    async fn refund_at_us(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        now_us: Option<u64>,
    ) -> Result<(), BackendError> {
        let receipt = decision.receipt();
        if receipt.is_empty() {
            return Ok(());
        }
        if receipt.counted_by == CountedBy::Allowance {
            // Back to its allowance while it lives, once: an allowance, unlike the sliding
            // log's entries, has no names to make a second refund a no-op. Once given back,
            // the call stays used.
            if self.refunds.first_settle(key, receipt) {
                self.allowances.settle_local(key, rules, receipt, None);
            }
            return Ok(());
        }
        if !self.refunds.first(key, receipt) {
            return Ok(());
        }
        if !self.counted_here(receipt.counted_by) {
            return match &self.fallback {
                Some(fallback) => {
                    Box::pin(fallback.refund_at_us(key, rules, decision, now_us)).await
                }
                None => Ok(()),
            };
        }
        match &self.store {
            Store::Memory(memory) => memory.refund(key, rules, receipt, now_us),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.refund(key, rules, receipt, now_us).await?,
            Store::Misconfigured(err) => return Err(misconfigured(err)),
        }
        self.forget_denial(key);
        Ok(())
    }

    /// Whether this limiter's own store counted a receipt counted by `counted_by`: one
    /// counted elsewhere (by its fallback) is refunded or settled there.
    fn counted_here(&self, counted_by: CountedBy) -> bool {
        match (&self.store, counted_by) {
            (Store::Memory(_), CountedBy::Memory) => true,
            #[cfg(feature = "redis")]
            (Store::Redis(_), CountedBy::Redis) => true,
            _ => false,
        }
    }

    /// Forgets the deny cache's denial of `key` once a settle, refund, block or reset
    /// changed what it holds: the next check asks the backend.
    fn forget_denial(&self, key: &str) {
        if let Some(cache) = &self.deny_cache {
            cache.forget(key);
        }
    }

    /// Settles the cost `decision` reserved at the call's `actual` cost, in every rule of
    /// `rules` counting units (rules counting calls keep their one), and answers how `key`
    /// stands after it, as a [`peek`](Self::peek) of cost 1 would: `remaining` under the
    /// binding rule, `reset_after`, and whether a call of one unit passes now. One round
    /// trip on Redis.
    ///
    /// - `actual` below the reservation gives back the difference, as far as the key still
    ///   counts it (a window that has moved on has nothing to give back);
    /// - `actual` above it takes the difference at once, **even past a rule's count**: the
    ///   work is done, so the rule is in debt, and later calls are refused until the
    ///   window has room again (their `retry_after` says when);
    /// - equal changes nothing; a denied decision (which reserved nothing) settles nothing
    ///   and is answered as it is.
    ///
    /// Each algorithm counts the settled cost as if the check had used `actual` units when
    /// it was counted; the token bucket takes an excess from now. A decision is settled
    /// (or [refunded](Self::refund)) once: the limiter remembers its last 4096 settles and
    /// refunds and ignores a repeated one. A settle whose connection broke is not sent
    /// again blindly (its reservation then stays, the safe side), but for the sliding log's,
    /// which settles the check's own entries by name and may run twice.
    ///
    /// Under any concurrency, when every reservation is at least its call's actual cost,
    /// no rule ever holds more than its count.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 60 calls and 90,000 tokens a minute.
    /// const LLM: [Rule; 2] = [Rule::per_minute(60).calls(), Rule::per_minute(90_000)];
    /// let limiter = Limiter::memory();
    /// let reserved = limiter.check("llm:ann", &LLM).cost(4_000).await?; // max_tokens
    /// assert!(reserved.allowed);
    /// // The completion used 1,250 tokens: 2,750 go back.
    /// let after = limiter.settle("llm:ann", &LLM, &reserved, 1_250).await?;
    /// assert_eq!((after.rule_index, after.remaining), (0, 59)); // the calls rule binds
    /// let tokens = limiter.peek("llm:ann", &LLM[1..]).await?;
    /// assert_eq!(tokens.remaining, 90_000 - 1_250);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When the backend cannot answer; the reservation then stays as it was.
    pub async fn settle(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        actual: u64,
    ) -> Result<Decision, BackendError> {
        self.settle_at_us(key, rules, decision, actual, 0).await
    }

    /// [`settle`](Self::settle) at an explicit time instead of the backend's clock, as
    /// [`Check::at`] checks. For differential tests only.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub async fn settle_at(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        actual: u64,
        now: Duration,
    ) -> Result<Decision, BackendError> {
        let now_us = crate::clock::micros(now).max(1);
        self.settle_at_us(key, rules, decision, actual, now_us)
            .await
    }

    /// A settle at `now_us` (0: the backend's clock).
    async fn settle_at_us(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        actual: u64,
        now_us: u64,
    ) -> Result<Decision, BackendError> {
        let receipt = decision.receipt();
        if !receipt.algorithm.takes(actual) {
            return Err(BackendError::cost_too_large(actual));
        }
        if receipt.is_empty() || !self.refunds.first_settle(key, receipt) {
            return Ok(*decision);
        }
        if receipt.counted_by == CountedBy::Allowance {
            let settled = self
                .allowances
                .settle_local(key, rules, receipt, Some(actual));
            return Ok(settled.map_or(*decision, |raw| raw.into_decision(rules)));
        }
        let peek = Request {
            algorithm: receipt.algorithm,
            now_us,
            ..Request::new(key, rules, false)
        };
        if !self.counted_here(receipt.counted_by) {
            return match &self.fallback {
                Some(fallback) => {
                    Box::pin(fallback.settle_at_us(key, rules, decision, actual, now_us)).await
                }
                None => Ok(*decision),
            };
        }
        let settled = match &self.store {
            Store::Memory(memory) => memory.settle(&peek, receipt, actual).transpose()?,
            #[cfg(feature = "redis")]
            Store::Redis(redis) => redis.settle(peek, receipt, actual).await?,
            Store::Misconfigured(err) => return Err(misconfigured(err)),
        };
        self.forget_denial(key);
        Ok(settled.map_or(*decision, |raw| raw.into_decision(rules)))
    }

    /// The answer to `request` when it needs no waiting: a cached denial, a call admitted
    /// from its allowance, or a check of the embedded backend, which is synchronous. `site`
    /// counts the allowance's draws.
    #[inline]
    pub(crate) fn answer_now(&self, request: &Request<'_>, site: &'static str) -> Now {
        if !request.algorithm.takes(request.cost.get()) {
            return Now::Answered(Answer {
                result: Err(BackendError::cost_too_large(request.cost.get())),
                by: self.answered_by(),
            });
        }
        if let Some(denial) = self.deny_cache.as_ref().and_then(|c| c.lookup(request)) {
            return Now::Answered(Answer {
                result: Ok(denial),
                by: AnsweredBy::LOCAL,
            });
        }
        let spends = spends_allowance(request);
        let raw = match &self.store {
            Store::Memory(memory) if spends && self.remote_memory => {
                let remote = Remote::Memory(memory);
                let answer = self.with_allowance(remote, request, site);
                let answer = now_or_never(answer).expect("the embedded backend answers at once");
                for retired in self.allowances.take_retired() {
                    memory.give_back(&retired.give_back(request.now_us));
                }
                return Now::Answered(self.answered(request, answer));
            }
            Store::Memory(memory) => memory.check_now(request),
            Store::Misconfigured(err) => Err(misconfigured(err)),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                let admission = spends.then(|| self.allowances.admit(request));
                let spends = match admission {
                    Some(Admission::Local(raw)) => {
                        return Now::Answered(Answer {
                            result: Ok(raw),
                            by: AnsweredBy::LOCAL,
                        })
                    }
                    // A key that is not warm: the plain check, at the plain check's cost.
                    Some(Admission::Alone) => {
                        count_draw(site);
                        false
                    }
                    Some(Admission::Step) => true,
                    None => false,
                };
                return Now::Ask(Arc::clone(redis), spends);
            }
        };
        Now::Answered(self.decided(request, raw))
    }

    /// The allowance of a check whose own (a check's, else its site's) is `own`: that one,
    /// else this limiter's default. In ms, 0 for none.
    #[inline]
    pub(crate) fn allowance_ms(&self, own: Option<Duration>) -> u32 {
        own.map_or(self.allowance_ms, allowance::max_age_ms)
    }

    /// One attempt at `request` (made by `site`): answered now, or asked of Redis (and,
    /// when Redis cannot answer, of the fallback).
    pub(crate) async fn answer(&self, request: Request<'_>, site: &'static str) -> Answer {
        match self.answer_now(&request, site) {
            Now::Answered(answer) => answer,
            #[cfg(feature = "redis")]
            Now::Ask(redis, spends) => self.ask(&redis, request, site, spends).await,
        }
    }

    #[cfg(feature = "redis")]
    pub(crate) async fn ask(
        &self,
        redis: &RedisBackend,
        request: Request<'_>,
        site: &'static str,
        spends: bool,
    ) -> Answer {
        let asked = match spends {
            true => {
                self.with_allowance(Remote::Redis(redis), &request, site)
                    .await
            }
            false => redis
                .check(&request)
                .await
                .map(|raw| (raw, self.answered_by())),
        };
        match asked {
            Ok(answer) => self.answered(&request, Ok(answer)),
            Err(err) => self.on_failure(request, err).await,
        }
    }

    /// A check that spends an allowance: admitted from the key's allowance, or from the
    /// draw it makes (or waits for), or sent alone near the limit.
    // Without Redis nothing is waited for: the loop is left at once.
    #[cfg_attr(not(feature = "redis"), allow(clippy::never_loop))]
    async fn with_allowance(
        &self,
        remote: Remote<'_>,
        request: &Request<'_>,
        site: &'static str,
    ) -> Result<(RawDecision, AnsweredBy), BackendError> {
        let by_backend = self.answered_by();
        loop {
            let ticket = match self.allowances.step(request) {
                Step::Local(raw) => return Ok((raw, AnsweredBy::LOCAL)),
                Step::Wait(drawing) => match remote {
                    #[cfg(feature = "redis")]
                    Remote::Redis(_) => {
                        let mut drawing = drawing;
                        // Ends with the draw: answered, failed, or dropped with its check.
                        let _ = drawing.changed().await;
                        match allowance::answered(&drawing) {
                            true => continue,
                            false => allowance::Ticket::alone(request),
                        }
                    }
                    // Answered at once: nothing to wait for but another thread's draw.
                    Remote::Memory(_) => {
                        drop(drawing);
                        allowance::Ticket::alone(request)
                    }
                },
                Step::Ask(ticket) => ticket,
            };
            count_draw(site);
            #[cfg(feature = "redis")]
            let drew = ticket.draw.is_some();
            let drawing = Request {
                draw: ticket.draw.as_ref(),
                cost: ticket.units,
                // A draw larger than the check is refused for its size, not the check:
                // no block, no denial to remember; the check alone is asked next.
                block_for_us: request.block_for_us.filter(|_| ticket.draw.is_none()),
                refundable: request.refundable || ticket.draw.is_some(),
                ..*request
            };
            let raw = remote.check(&drawing).await?;
            let drawn = self.allowances.drawn(request, ticket, raw);
            // Once a draw made an allowance to give back: started for every check sent
            // alone, the task would be spawned, and end at once, for each.
            #[cfg(feature = "redis")]
            if let (true, Remote::Redis(_), Store::Redis(redis)) = (drew, remote, &self.store) {
                self.ensure_giving_back(redis);
            }
            match drawn {
                Drawn::Answer(raw) => return Ok((raw, by_backend)),
                Drawn::Retry => {
                    count_draw(site);
                    let raw = remote.check(request).await?;
                    self.allowances.learn(request, &raw);
                    return Ok((raw, by_backend));
                }
            }
        }
    }

    /// Starts the task that gives allowances back at the end of their life, on the current
    /// Tokio runtime, unless it runs (or there is no runtime). Like the overrides poll, it
    /// holds the limiter's parts weakly and ends with its runtime; the next draw starts it
    /// again, on its own runtime.
    #[cfg(feature = "redis")]
    fn ensure_giving_back(&self, redis: &Arc<RedisBackend>) {
        if self.allowances.is_giving_back() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.allowances.start_giving_back() {
            runtime.spawn(allowance::give_backs(
                Arc::downgrade(&self.allowances),
                Arc::downgrade(redis),
            ));
        }
    }

    /// The answer to `request`, by whoever gave it: a denial the backend gave is
    /// remembered by the deny cache.
    fn answered(
        &self,
        request: &Request<'_>,
        asked: Result<(RawDecision, AnsweredBy), BackendError>,
    ) -> Answer {
        match asked {
            Ok((raw, by)) => Answer {
                by,
                ..self.decided(request, Ok(raw))
            },
            Err(err) => self.decided(request, Err(err)),
        }
    }

    /// This limiter's own answer to `request`, from its backend's `raw` one.
    #[inline]
    fn decided(&self, request: &Request<'_>, raw: Result<RawDecision, BackendError>) -> Answer {
        if let (Some(cache), Ok(raw)) = (&self.deny_cache, &raw) {
            // A refusal for want of a slot says nothing of when one frees: not cached.
            if raw.rule_index < request.rules.len() {
                cache.remember(request, raw);
            }
        }
        Answer {
            result: raw,
            by: self.answered_by(),
        }
    }

    /// The `backend` label of this limiter's own answers (a misconfigured limiter is a Redis
    /// one whose URL was invalid).
    fn answered_by(&self) -> AnsweredBy {
        match self.store {
            Store::Memory(_) => AnsweredBy::MEMORY,
            #[cfg(feature = "redis")]
            Store::Redis(_) => AnsweredBy::REDIS,
            Store::Misconfigured(_) => AnsweredBy::REDIS,
        }
    }

    /// What a failed check answers: the fallback's decision, or the error. An error about
    /// the key itself (another algorithm's state) would be the same anywhere: only a
    /// backend that cannot answer hands over to the fallback.
    #[cfg(feature = "redis")]
    async fn on_failure(&self, request: Request<'_>, err: BackendError) -> Answer {
        match &self.fallback {
            Some(fallback) if err.kind() != BackendErrorKind::Command => {
                self.warn_backend_failed(request.key, &err, "counting on the fallback");
                // Boxed: a fallback on Redis of its own makes the future recursive.
                let site = crate::observe::PROGRAMMATIC;
                let answer = Box::pin(fallback.answer(request, site)).await;
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

    /// Logs a backend failure that a fail-open limiter let through, at most once per
    /// [`LogThrottle::INTERVAL`], with the number of failures since the last warning.
    pub(crate) fn warn_fail_open(&self, key: &str, err: &BackendError) {
        self.warn_backend_failed(key, err, "letting the call through (fail-open)");
    }

    fn warn_backend_failed(&self, key: &str, err: &BackendError, action: &str) {
        let Some(suppressed) = self.warnings.admit() else {
            return;
        };
        // Not a passing failure: it lasts until someone changes the configuration.
        if err.kind() == BackendErrorKind::Misconfigured {
            tracing::error!(
                target: "redis_ratelimit",
                %key,
                error = %err,
                suppressed,
                "rate limiter backend is misconfigured; {action}"
            );
        } else {
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

/// Whether `request` spends an allowance: a consuming check that has one and takes no
/// slot (slots and peeks always go to the backend).
#[inline]
fn spends_allowance(request: &Request<'_>) -> bool {
    request.allowance_ms > 0 && request.consume && request.slot.is_none() && request.draw.is_none()
}

/// Counts one round trip of a check with an allowance made for `site`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
fn count_draw(site: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("ratelimit_allowance_draws_total", "site" => site).increment(1);
}

/// The store a check with an allowance asks.
#[derive(Clone, Copy)]
enum Remote<'a> {
    #[cfg(feature = "redis")]
    Redis(&'a RedisBackend),
    /// The embedded backend standing for a remote one (tests).
    Memory(&'a MemoryBackend),
}

impl Remote<'_> {
    async fn check(self, request: &Request<'_>) -> Result<RawDecision, BackendError> {
        match self {
            #[cfg(feature = "redis")]
            Remote::Redis(redis) => redis.check(request).await,
            Remote::Memory(memory) => memory.check_now(request),
        }
    }
}

/// The output of `future` if it is ready at its first poll.
fn now_or_never<F: std::future::Future>(future: F) -> Option<F::Output> {
    let future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// What [`Limiter::answer_now`] found.
pub(crate) enum Now {
    /// Answered without waiting: a cached denial, the embedded backend, a misconfiguration.
    Answered(Answer),
    /// Only Redis can answer; `true`: through the key's allowance (see
    /// `Allowances::admit`).
    #[cfg(feature = "redis")]
    Ask(Arc<RedisBackend>, bool),
}

fn misconfigured(err: &ConfigError) -> BackendError {
    BackendError::new(BackendErrorKind::Misconfigured, err.to_string())
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match &self.store {
            #[cfg(feature = "redis")]
            Store::Redis(_) => "redis",
            Store::Memory(_) => "memory",
            Store::Misconfigured(_) => "misconfigured",
        };
        let mut debug = f.debug_struct("Limiter");
        debug.field("backend", &backend);
        #[cfg(feature = "redis")]
        if let Store::Redis(redis) = &self.store {
            debug.field("redis", redis.config());
        }
        debug
            .field("fail_open", &self.fail_open)
            .field("fallback", &self.fallback)
            .field("deny_cache", &self.deny_cache.is_some())
            .field("shadow", &self.shadow)
            .field("rules_poll", &self.rules_poll)
            .field("on_warning", &crate::warning::HookSet(&self.warning_hook))
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
