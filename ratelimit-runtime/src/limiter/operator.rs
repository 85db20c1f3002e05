//! The operator surface: rule and mode overrides, most-limited identities, resets and
//! blocks.

#[cfg(feature = "redis")]
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "redis")]
use super::most_limited;
use super::{Limiter, Store};
#[cfg(feature = "redis")]
use crate::backend::redis::RedisBackend;
use crate::overrides::{path_of, InForce, SiteRules};
use crate::{BackendError, Mode, Rule};

impl Limiter {
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
        self.store
            .most_limited(&self.refusals, prefix, site, since, n)
            .await
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
    pub(super) fn mode_of(&self, overridden: Option<Mode>, shadow: bool) -> Mode {
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
    pub(super) fn site_overrides(
        &self,
        prefix: &'static str,
        path: &str,
        compiled: SiteRules,
    ) -> InForce {
        #[cfg(feature = "redis")]
        if let Some((redis, every)) = self.polled() {
            let (in_force, unknown_prefix) = self.overrides.lookup(prefix, path, compiled);
            if unknown_prefix {
                self.overrides.watch_prefix(prefix);
            }
            self.overrides.ensure_polling(redis, every);
            return in_force;
        }
        self.overrides.lookup_local(prefix, path, compiled)
    }

    /// The Redis backend whose stored overrides and bans this limiter polls, and how often;
    /// `None` when it polls none (the embedded backend, or `rules_poll(None)`).
    #[cfg(feature = "redis")]
    #[inline]
    pub(super) fn polled(&self) -> Option<(&Arc<RedisBackend>, Duration)> {
        match (&self.store, self.rules_poll) {
            (Store::Redis(redis), Some(every)) => Some((redis, every)),
            _ => None,
        }
    }

    /// Forgets everything counted for `key`, and any block on it, and frees its slots
    /// ([`acquire`](Self::acquire)).
    ///
    /// With a [`fallback`](Self::fallback), the key is forgotten there too.
    pub async fn reset(&self, key: &str) -> Result<(), BackendError> {
        self.forget_denial(key);
        self.allowances.live.forget(key);
        for store in self.stores().rev() {
            store.reset(key).await?;
        }
        Ok(())
    }

    /// Refuses every check of `key` for `duration` from now, whatever its rules and
    /// algorithm: each is denied with `retry_after` = what is left of the block, consuming
    /// nothing, in every process sharing the backend. The block a refusal with
    /// [`block_for`](crate::Check::block_for) starts, written the same way: kept with the key's
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
    /// writes ([`BackendErrorKind::Command`](crate::BackendErrorKind::Command)).
    ///
    /// # Panics
    ///
    /// When `duration` is over [`Rule::MAX_WINDOW`].
    pub async fn block(&self, key: &str, duration: Duration) -> Result<(), BackendError> {
        self.block_at_us(key, duration, None).await
    }

    /// [`block`](Self::block) at an explicit time instead of the backend's clock, as
    /// [`Check::at`](crate::Check::at) checks. For differential tests only.
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
    pub(super) async fn block_at_us(
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
        self.allowances.live.end(key);
        for store in self.stores().rev() {
            store.block(key, block_for_us, now_us).await?;
        }
        self.forget_denial(key);
        Ok(())
    }
}
