//! Bans: an identity or a network refused at every site, on every instance
//! ([`Limiter::ban`]); the table checks read is `crate::bans`.

use std::time::Duration;

use super::{misconfigured, Limiter, Store};
use crate::bans::{self, Banned};
use crate::key::DEFAULT_PREFIX;
use crate::{BackendError, BackendErrorKind};

impl Limiter {
    /// The longest a ban lasts: 100 years. A longer one ([`Duration::MAX`] for "until
    /// lifted") lasts this long, on both backends.
    pub const MAX_BAN: Duration = Duration::from_secs(100 * 365 * 86_400);

    /// Refuses every guarded check whose key has `identity`, at every site, for
    /// `duration`: the check answers [`RateLimitError::Limited`](crate::RateLimitError::Limited)
    /// with `retry_after` = what is left of the ban, whatever the site's counts, and counts
    /// nothing. The way to shut an abusive client or network out at once.
    ///
    /// `identity` is a key's identity part (`{prefix}{identity}:{path}`), written as the
    /// guarded call gives it, unescaped: `ip:203.0.113.9`, `user:42`, `custom:alice`,
    /// `custom:john doe`, or `global` (every `GLOBAL` site). It refuses the keys of that
    /// very value, however keys escape or hash it, and [`bans`](Self::bans) lists it as
    /// written. `ip:` also takes a network, IPv4 or IPv6 (`ip:203.0.113.0/24`,
    /// `ip:2001:db8::/48`), of /8 (IPv6: /16) or narrower; addresses are read in canonical
    /// form, an IPv4-mapped one (`::ffff:203.0.113.9`) as its IPv4 address, as keys hold
    /// them. Behind the layers, which count an IPv6 client by its network (`/64`), a ban of
    /// one IPv6 address refuses that network. Banning an identity again sets its ban's end
    /// anew; a ban lasts at most [`MAX_BAN`](Self::MAX_BAN).
    ///
    /// On Redis the ban is stored beside the rule overrides, in the hash
    /// `rate_limit:bans` (field: the identity; value: its end, ms since the epoch; the
    /// `ratelimit` command's `--prefix` picks another prefix's hash), and every instance
    /// applies it within its poll interval ([`rules_poll`](Self::rules_poll)), this one at
    /// once; bans apply to sites of every key prefix. The embedded backend keeps its own.
    /// A check reads bans from memory, never with a round trip: while nothing is banned it
    /// costs one atomic load. A site in shadow mode reports a banned call as a would-be
    /// refusal; a site whose mode is `Off` checks nothing. Programmatic checks are not
    /// sites: bans do not apply to them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::memory();
    /// limiter.ban("ip:203.0.113.0/24", Duration::from_secs(3600)).await?;
    /// limiter.ban("user:mallory", Duration::from_secs(600)).await?;
    /// let bans = limiter.bans().await?;
    /// assert_eq!(bans[0].0, "ip:203.0.113.0/24");
    /// limiter.unban("user:mallory").await?;
    /// assert_eq!(limiter.bans().await?.len(), 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`BackendErrorKind::Misconfigured`] for an identity that is none of those forms, a
    /// network wider than /8 (IPv6: /16), or a zero duration; a Redis failure.
    pub async fn ban(&self, identity: &str, duration: Duration) -> Result<(), BackendError> {
        self.ban_under(DEFAULT_PREFIX, identity, duration).await
    }

    /// Lifts the ban on `identity` (as [`ban`](Self::ban) wrote it), on every instance
    /// within its poll interval. Lifting a ban that is not there is no error.
    pub async fn unban(&self, identity: &str) -> Result<(), BackendError> {
        self.unban_under(DEFAULT_PREFIX, identity).await
    }

    /// Every ban in force, and how long each lasts still, ordered by identity: on Redis,
    /// as the hash holds them now; on the embedded backend, this process's.
    pub async fn bans(&self) -> Result<Vec<(String, Duration)>, BackendError> {
        self.bans_under(DEFAULT_PREFIX).await
    }

    /// [`ban`](Self::ban) in the `{prefix}bans` hash of another key prefix (the command's
    /// `--prefix`).
    #[doc(hidden)]
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub async fn ban_under(
        &self,
        prefix: &str,
        identity: &str,
        duration: Duration,
    ) -> Result<(), BackendError> {
        let banned = Banned::parse(identity).map_err(refused)?;
        if duration.is_zero() {
            return Err(refused("a ban lasts longer than 0 s".into()));
        }
        let duration = duration.min(Self::MAX_BAN);
        let until_us = bans::now_us().saturating_add(crate::clock::micros(duration));
        match &self.store {
            Store::Memory(_) => self.overrides.bans.set_local(&banned, until_us),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                let until_ms = until_us.div_ceil(1000);
                let hash = format!("{prefix}bans");
                redis
                    .hash_set(&hash, &banned.text(), &until_ms.to_string())
                    .await?;
                // In force here at once; the others read it with their next poll.
                let stored_us = until_ms.saturating_mul(1000);
                self.overrides
                    .bans
                    .change_stored(prefix, &banned, Some(stored_us));
            }
            Store::Misconfigured(err) => return Err(misconfigured(err)),
        }
        Ok(())
    }

    /// [`unban`](Self::unban) in another key prefix's hash.
    #[doc(hidden)]
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub async fn unban_under(&self, prefix: &str, identity: &str) -> Result<(), BackendError> {
        let banned = Banned::parse(identity).map_err(refused)?;
        match &self.store {
            Store::Memory(_) => {
                self.overrides.bans.remove_local(&banned);
            }
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                redis
                    .hash_delete(&format!("{prefix}bans"), &[banned.text()])
                    .await?;
                self.overrides.bans.change_stored(prefix, &banned, None);
            }
            Store::Misconfigured(err) => return Err(misconfigured(err)),
        }
        Ok(())
    }

    /// [`bans`](Self::bans) of another key prefix's hash.
    #[doc(hidden)]
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub async fn bans_under(&self, prefix: &str) -> Result<Vec<(String, Duration)>, BackendError> {
        match &self.store {
            Store::Memory(_) => Ok(self.overrides.bans.local()),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                let fields = redis.hash_fields(&format!("{prefix}bans")).await?;
                let now = bans::now_us();
                let mut in_force: Vec<(String, Duration)> = bans::read_stored(fields)
                    .into_iter()
                    .map(|(identity, end)| (identity, Duration::from_micros(end - now.min(end))))
                    .collect();
                in_force.sort();
                Ok(in_force)
            }
            Store::Misconfigured(err) => Err(misconfigured(err)),
        }
    }

    /// How long the ban on `identity` (written as [`ban`](Self::ban) takes it:
    /// `ip:203.0.113.9`, `user:42`) lasts still; `None` when it is not banned. For a caller
    /// that checks by other means than guarded sites, as the rate-limit service does for a
    /// request's `remote_address`. No I/O: it reads the bans this limiter holds, on Redis
    /// those of the `rate_limit:bans` hash as its poll last read them (the first call
    /// starts the poll, so a ban set elsewhere is seen within
    /// [`rules_poll`](Self::rules_poll)); while nothing is banned, no allocation and no
    /// lock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::memory();
    /// limiter.ban("ip:203.0.113.0/24", Duration::from_secs(3600)).await?;
    /// assert!(limiter.banned("ip:203.0.113.9").is_some());
    /// assert_eq!(limiter.banned("ip:198.51.100.1"), None);
    /// # Ok(()) }
    /// ```
    pub fn banned(&self, identity: &str) -> Option<Duration> {
        self.banned_under(DEFAULT_PREFIX, identity)
    }

    /// [`banned`](Self::banned), reading the `{prefix}bans` hash of another key prefix
    /// (beside those of the sites checked so far).
    #[doc(hidden)]
    pub fn banned_under(&self, prefix: &'static str, identity: &str) -> Option<Duration> {
        #[cfg(feature = "redis")]
        if let Some((redis, every)) = self.polled() {
            self.overrides.ensure_watching(prefix, redis, every);
        }
        #[cfg(not(feature = "redis"))]
        let _ = prefix;
        self.overrides
            .bans
            .left_us_of(identity)
            .map(Duration::from_micros)
    }

    /// How long the ban on the identity of `key` (of a site with key prefix `prefix` and
    /// path `path`) lasts still, in µs; `None` when it is not banned.
    #[inline]
    pub(crate) fn ban_left_us(&self, key: &str, prefix: &str, path: &str) -> Option<u64> {
        let bans = &self.overrides.bans;
        if bans.is_empty() {
            return None;
        }
        match crate::key::split_key(key, path)? {
            (of_prefix, identity) if of_prefix == prefix => bans.left_us(identity),
            _ => None,
        }
    }
}

fn refused(why: String) -> BackendError {
    BackendError::new(
        BackendErrorKind::Misconfigured,
        format!("not banned: {why}"),
    )
}
