//! Building a limiter: its store and the options set before the first check.

use std::sync::Arc;
use std::time::Duration;

use super::allowance::{Allowances, LocalAllowances};
use super::deny_cache::DenyCache;
use super::failover::Failover;
use super::refunds::Refunds;
use super::unused::{Unused, UnusedOption};
use super::{state_file, Limiter, Store};
use crate::backend::memory::MemoryBackend;
#[cfg(feature = "redis")]
use crate::backend::redis::{Breaker, RedisBackend, RedisConfig};
use crate::clock::Clock;
use crate::overrides::{Overrides, DEFAULT_POLL};
use crate::ConfigError;

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
            RedisBackend::new(config),
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
    /// expires with its longest window), and a `WARN` says so at its first check.
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
        match &mut self.store {
            Store::Memory(memory) => {
                *memory = state_file::kept_in(memory, max_keys, self.state_file.as_ref());
            }
            store => self.unused.add_on(store, UnusedOption::MaxKeys),
        }
        self
    }

    pub(crate) fn misconfigured(err: ConfigError) -> Limiter {
        Limiter::with_store(Store::Misconfigured(err))
    }

    pub(super) fn with_store(store: Store) -> Limiter {
        #[cfg(feature = "redis")]
        let spends_allowances = matches!(store, Store::Redis(_));
        #[cfg(not(feature = "redis"))]
        let spends_allowances = false;
        Limiter {
            store,
            failover: Failover::new(),
            deny_cache: None,
            refunds: Refunds::default(),
            shadow: false,
            overrides: Overrides::new(),
            rules_poll: Some(DEFAULT_POLL),
            state_file: None,
            warning_hook: None,
            refusals: Arc::default(),
            allowances: LocalAllowances::new(spends_allowances, Allowances::new()),
            unused: Unused::default(),
        }
    }

    /// Calls `hook` whenever a check with `warn_at` (the attribute's, [`Check::warn_at`](crate::Check::warn_at),
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

    /// Whether a guarded call proceeds when the backend fails (`true`, the default, with a
    /// rate-limited warning log) or returns [`RateLimitError::Backend`](crate::RateLimitError::Backend).
    pub fn fail_open(mut self, fail_open: bool) -> Self {
        self.failover.set_fail_open(fail_open);
        self
    }

    /// How long one check may take before it counts as a backend failure (default 100 ms).
    /// Connecting to Redis takes at most this long too (or 1 s, if that is shorter). The
    /// embedded backend answers at once, so has no timeout (a `WARN` at the first check
    /// says that this one does nothing).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.unused.add_on(&self.store, UnusedOption::Timeout);
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
    /// backend does not fail, so has no breaker (a `WARN` at the first check says so).
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
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.unused.add_on(&self.store, UnusedOption::Breaker);
        self.reconfigure_redis(|config| config.set_breaker(breaker))
    }

    /// Changes the Redis backend's configuration by `change`; no effect on other backends.
    /// The backend builds its servers from it at first use, so an option only changes the
    /// configuration, in any order. An option set once checks run (the backend shared with
    /// its tasks) takes a backend of its own, built from the changed configuration.
    #[cfg(feature = "redis")]
    pub(super) fn reconfigure_redis(mut self, change: impl FnOnce(&mut RedisConfig)) -> Self {
        if let Store::Redis(backend) = &mut self.store {
            match Arc::get_mut(backend) {
                Some(unshared) => unshared.configure(change),
                None => {
                    let mut config = backend.config().clone();
                    change(&mut config);
                    *backend = Arc::new(RedisBackend::new(config));
                }
            }
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
    /// What `fallback` lends is its store: its backend with that backend's options
    /// (`max_keys`, a state file, a timeout) and, in turn, its own fallback, which counts
    /// while both cannot answer. Its options of the check path (deny cache, allowance,
    /// shadow, rule polling, the warning hook, fail-open) are not used: this limiter's
    /// apply.
    ///
    /// ```
    /// use redis_ratelimit::Limiter;
    ///
    /// let limiter = Limiter::redis("redis://127.0.0.1:6379")?.fallback(Limiter::memory());
    /// # Ok::<(), redis_ratelimit::ConfigError>(())
    /// ```
    pub fn fallback(mut self, fallback: Limiter) -> Self {
        self.failover
            .set_fallback(fallback.store, fallback.failover);
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
        self.allowances.set_default(max_age);
        self
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
            allowances: LocalAllowances::new(true, Allowances::on_clock(Arc::clone(&clock))),
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
            self.allowances.spends(),
            "sharing_backend: not a remote embedded backend"
        );
        Limiter {
            allowances: self
                .allowances
                .beside(Allowances::on_clock(Arc::new(clock))),
            ..Limiter::with_store(Store::Memory(Arc::clone(memory)))
        }
    }

    /// Draws allowances the naive way: recorded when drawn, spent as long as a real hold
    /// (units then leave a window before they are spent). Only to show that the
    /// differential test catches it.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub fn naive_allowances(self, naive: bool) -> Self {
        self.allowances.live.set_naive(naive);
        self
    }

    /// How often this limiter reads the rule overrides stored in Redis (default every
    /// second, each wait drawn within ± 20 % so that instances spread their reads); `None`
    /// never reads them (overrides set with [`override_rules`](Self::override_rules) still
    /// apply). No effect on the embedded backend: `Some` there is said, once, by a `WARN`
    /// at the first check.
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
        if every.is_some() {
            self.unused.add_on(&self.store, UnusedOption::RulesPoll);
        }
        self.rules_poll = every;
        self
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

    /// Whether this limiter lets guarded calls through when the backend fails.
    pub fn is_fail_open(&self) -> bool {
        self.failover.is_fail_open()
    }
}
