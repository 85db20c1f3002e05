//! Reading what a limiter keeps, as operators do (the `ratelimit` command): a key's state
//! ([`Limiter::inspect`]) and, with the `redis` feature, the rule overrides and modes stored
//! in Redis ([`Limiter::stored_overrides`]).
//!
//! Nothing here decodes a second time: a key's state is read into the algorithms' own state
//! (`algorithm::KeyState`, the memory backend's type; Redis values are read as
//! `scripts/state.lua` and `scripts/sliding_log.lua` describe them) and judged by their own
//! arithmetic, and a stored value is read by the parser every instance's poller uses.

#[cfg(feature = "redis")]
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::algorithm;
use crate::backend::memory::MemoryBackend;
#[cfg(feature = "redis")]
use crate::backend::redis::RedisBackend;
use crate::{Algorithm, BackendError, Limiter, Rule};
#[cfg(feature = "redis")]
use crate::{BackendErrorKind, Mode};

/// Where a limiter counts, as [`Limiter::inspect`] reads it.
pub(crate) enum Store<'a> {
    #[cfg(feature = "redis")]
    Redis(&'a Arc<RedisBackend>),
    Memory(&'a MemoryBackend),
}

impl Limiter {
    /// What `key` holds now, changing nothing: its [`Algorithm`], how much of each rule is
    /// used and when it frees up, its block, the sliding log's entries; `None` when the key
    /// holds nothing (never counted, reset, or expired).
    ///
    /// Reads this limiter's own store (not its [`fallback`](Self::fallback)), at the
    /// store's time: Redis's `TIME` (this process's clock on a server that refuses it), or
    /// the embedded backend's clock. On Redis the key is read at one instant, by a script
    /// that writes nothing, and decoded by the algorithms' own code.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Algorithm, Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const UPLOADS: [Rule; 2] = [Rule::per_minute(10), Rule::per_hour(100)];
    /// let limiter = Limiter::memory();
    /// assert!(limiter.inspect("uploads:tom").await?.is_none());
    /// limiter.check("uploads:tom", &UPLOADS).cost(4).algorithm(Algorithm::FixedWindow).await?;
    ///
    /// let state = limiter.inspect("uploads:tom").await?.expect("counted");
    /// assert_eq!(state.algorithm(), Algorithm::FixedWindow);
    /// let minute = state.rules()[0];
    /// assert_eq!((minute.rule, minute.used, minute.remaining), (UPLOADS[0], 4, 6));
    /// assert_eq!(minute.retry_after, Duration::ZERO); // a unit passes now
    /// assert!(state.block().is_none());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When the store cannot answer, and when the key holds something the limiter never
    /// writes (then [`BackendErrorKind::Command`](crate::BackendErrorKind::Command)).
    pub async fn inspect(&self, key: &str) -> Result<Option<KeyState>, BackendError> {
        match self.store()? {
            #[cfg(feature = "redis")]
            Store::Redis(redis) => Ok(redis.read_key(key).await?.map(|held| KeyState {
                state: held.state,
                now_us: held.now_us,
                ttl: held.ttl,
            })),
            Store::Memory(memory) => {
                Ok(memory
                    .inspect(key)
                    .map(|(state, now_us, expires)| KeyState {
                        state,
                        now_us,
                        ttl: Some(Duration::from_micros(expires.saturating_sub(now_us))),
                    }))
            }
        }
    }
}

/// What a key holds, as [`Limiter::inspect`] read it.
///
/// **Where the rules come from.** The fixed window, the sliding window and the token bucket
/// store each rule's count and window with its record, so [`rules`](Self::rules) tells
/// every rule of the last write on its own. The sliding log stores only the times of the
/// units it admitted: its rules are not in the key, so `rules` is empty and
/// [`rule`](Self::rule) counts the entries under the rules you give it, e.g. the ones in
/// force for the site (the override stored for the key's [`site_path`](crate::key::site_path),
/// which the `ratelimit` command uses, or the compiled ones).
#[derive(Clone, Debug)]
pub struct KeyState {
    state: algorithm::KeyState,
    /// The store's time when the key was read.
    now_us: u64,
    ttl: Option<Duration>,
}

impl KeyState {
    /// The algorithm whose state the key holds.
    pub fn algorithm(&self) -> Algorithm {
        self.state.algorithm()
    }

    /// The store's time when the key was read; every duration here counts from it.
    pub fn read_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.now_us)
    }

    /// How long until the key expires and is forgotten (`None`: it does not expire). Every
    /// key expires a little after its longest window, or its block, ends.
    pub fn expires_in(&self) -> Option<Duration> {
        self.ttl
    }

    /// Each rule the state keeps a record of (the rules of its last admitted check, in that
    /// check's order), as it stands now; for the sliding log, whose entries name no rule
    /// (see [`rule`](Self::rule)), only its rules counting in calendar periods, which
    /// keep a counter each.
    pub fn rules(&self) -> Vec<RuleState> {
        self.state
            .stored_rules()
            .into_iter()
            .map(|rule| self.rule(rule))
            .collect()
    }

    /// How `rule` stands in this state now, as a check would count it: for the sliding log,
    /// the entries in its window; for the other algorithms, its record (a rule without a
    /// record stands unused, as a check would start it).
    ///
    /// ```
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::memory();
    /// limiter.check("reply:tom", &[Rule::per_minute(5)]).cost(2).await?; // the sliding log
    /// let state = limiter.inspect("reply:tom").await?.expect("counted");
    /// assert!(state.rules().is_empty());
    /// assert_eq!(state.rule(Rule::per_minute(5)).used, 2);
    /// assert_eq!(state.log().expect("a sliding log").entries, 2);
    /// # Ok(()) }
    /// ```
    pub fn rule(&self, rule: Rule) -> RuleState {
        let standing = self.state.standing(&rule, self.now_us);
        RuleState {
            rule,
            used: standing.held,
            debt: standing.held.saturating_sub(rule.count()),
            remaining: standing.left,
            retry_after: Duration::from_micros(standing.retry_after_us),
            reset_after: Duration::from_micros(standing.reset_after_us),
        }
    }

    /// The key's block, while it lasts (see `block_for`): every check of the key is refused
    /// until it ends. `None` when there is none or it has passed.
    pub fn block(&self) -> Option<BlockState> {
        let (until_us, rule_index) = self.state.block()?;
        (until_us > self.now_us).then(|| BlockState {
            until: UNIX_EPOCH + Duration::from_micros(until_us),
            ends_in: Duration::from_micros(until_us - self.now_us),
            rule_index,
        })
    }

    /// The sliding log's entries (one per admitted unit, also those past every window that
    /// no write has trimmed yet); `None` for another algorithm or an empty log.
    pub fn log(&self) -> Option<LogState> {
        let (entries, oldest_us, newest_us) = self.state.log_entries()?;
        Some(LogState {
            entries: entries as u64,
            oldest: UNIX_EPOCH + Duration::from_micros(oldest_us),
            newest: UNIX_EPOCH + Duration::from_micros(newest_us),
        })
    }
}

/// How one rule stands in a key's state ([`KeyState::rule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleState {
    /// The rule.
    pub rule: Rule,
    /// Units (calls, for a rule counting calls) of `rule.count()` in use now (the sliding
    /// window's weighted estimate, rounded up; for the token bucket, units not refilled
    /// yet). Above the count when a settle left the rule in debt.
    pub used: u64,
    /// How far `used` is above the count: the debt of costs settled past their
    /// reservations ([`Limiter::settle`]), which later calls wait out; 0 when none.
    pub debt: u64,
    /// Units a call could use now: `count - used`.
    pub remaining: u64,
    /// Until one more unit passes this rule: zero when one passes now.
    pub retry_after: Duration,
    /// Until every unit of the rule is free again, with nothing more counted: zero when
    /// none is used.
    pub reset_after: Duration,
}

/// A key's block ([`KeyState::block`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockState {
    /// When it ends.
    pub until: SystemTime,
    /// How long it still lasts.
    pub ends_in: Duration,
    /// The index, among the refused check's rules, of the rule that started it.
    pub rule_index: usize,
}

/// The sliding log's entries ([`KeyState::log`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogState {
    /// How many: one per admitted unit.
    pub entries: u64,
    /// When the oldest was counted.
    pub oldest: SystemTime,
    /// When the newest was counted.
    pub newest: SystemTime,
}

/// What a field of the `{prefix}rules` hash sets, as every instance reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Setting {
    /// Field `{path}`: the site's ordinary rules.
    Rules(Vec<Rule>),
    /// Field `{path}#duplicate`: the duplicate-submission rule, or none.
    DuplicateRule(Option<Rule>),
    /// Field `{path}#mode`: the site's [`Mode`](crate::Mode).
    Mode(crate::Mode),
}

#[cfg(feature = "redis")]
pub use self::stored::{OverrideError, StoredOverride, StoredOverrides};

#[cfg(feature = "redis")]
mod stored {
    use super::*;
    use crate::overrides::stored::read_field;
    use crate::overrides::{path_of, DUPLICATE_SUFFIX, MODE_SUFFIX};

    impl Limiter {
        /// The rule overrides and modes stored in Redis for every instance at once, in the
        /// hash `{prefix}rules` (see [`rules_poll`](Self::rules_poll)): list, read, write
        /// and clear them as the instances will read them. Needs a Redis limiter.
        ///
        /// ```no_run
        /// use redis_ratelimit::{Limiter, Mode};
        ///
        /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// let limiter = Limiter::redis("redis://127.0.0.1:6379")?;
        /// let stored = limiter.stored_overrides("rate_limit:");
        /// stored.set("my_app::send_code", "5/minute, 20/hour").await?;
        /// stored.set_mode("my_app::send_code", Mode::Shadow).await?;
        /// for field in stored.list().await? {
        ///     println!("{} = {}", field.field, field.value);
        /// }
        /// stored.clear("my_app::send_code").await?; // its rules and its mode
        /// # Ok(()) }
        /// ```
        pub fn stored_overrides(&self, prefix: &str) -> StoredOverrides<'_> {
            StoredOverrides {
                limiter: self,
                hash: format!("{prefix}rules"),
            }
        }
    }

    /// The `{prefix}rules` hash of one key prefix ([`Limiter::stored_overrides`]).
    ///
    /// Its fields: `{path}` (the site's rules, in the attribute's rule text, e.g.
    /// `"5/minute, 20/hour"`), `{path}#duplicate` (the duplicate-submission rule, or
    /// `none`) and `{path}#mode` (`enforce`, `shadow` or `off`). Instances apply a change
    /// within their poll interval ([`Limiter::rules_poll`]).
    #[derive(Debug)]
    pub struct StoredOverrides<'a> {
        limiter: &'a Limiter,
        hash: String,
    }

    /// One field of the `{prefix}rules` hash.
    #[derive(Clone, Debug, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct StoredOverride {
        /// The hash field: `{path}`, `{path}#duplicate` or `{path}#mode`.
        pub field: String,
        /// The site's path (the field without its suffix).
        pub path: String,
        /// The value as stored.
        pub value: String,
        /// What the instances make of it; an error (saying why) when they ignore it as
        /// malformed, keeping the compiled rules or mode.
        pub setting: Result<Setting, String>,
    }

    /// Why an override was not written.
    #[derive(Debug)]
    #[non_exhaustive]
    pub enum OverrideError {
        /// The value is not one the field takes; nothing was written.
        Invalid {
            /// The field.
            field: String,
            /// Why the instances would ignore it.
            reason: String,
        },
        /// Redis failed.
        Backend(BackendError),
    }

    impl std::fmt::Display for OverrideError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                OverrideError::Invalid { field, reason } => {
                    write!(f, "not written: `{field}` cannot hold that value: {reason}")
                }
                OverrideError::Backend(err) => write!(f, "{err}"),
            }
        }
    }

    impl std::error::Error for OverrideError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            match self {
                OverrideError::Backend(err) => Some(err),
                OverrideError::Invalid { .. } => None,
            }
        }
    }

    impl From<BackendError> for OverrideError {
        fn from(err: BackendError) -> Self {
            OverrideError::Backend(err)
        }
    }

    impl StoredOverrides<'_> {
        /// The hash's key: `{prefix}rules`.
        pub fn hash(&self) -> &str {
            &self.hash
        }

        fn redis(&self) -> Result<&RedisBackend, BackendError> {
            match self.limiter.store()? {
                Store::Redis(redis) => Ok(redis),
                Store::Memory(_) => Err(BackendError::new(
                    BackendErrorKind::Misconfigured,
                    "overrides are stored in Redis: use a limiter made with `Limiter::redis`",
                )),
            }
        }

        /// Every field of the hash, ordered by field.
        pub async fn list(&self) -> Result<Vec<StoredOverride>, BackendError> {
            let mut fields: Vec<StoredOverride> = self
                .redis()?
                .hash_fields(&self.hash)
                .await?
                .into_iter()
                .map(|(field, value)| StoredOverride {
                    path: path_of(&field).to_owned(),
                    setting: read_field(&field, &value),
                    field,
                    value,
                })
                .collect();
            fields.sort_by(|a, b| a.field.cmp(&b.field));
            Ok(fields)
        }

        /// The fields of the site `path` (`{path}`, `{path}#duplicate`, `{path}#mode`),
        /// those that are set.
        pub async fn get(&self, path: &str) -> Result<Vec<StoredOverride>, BackendError> {
            let path = path_of(path);
            let mut fields = self.list().await?;
            fields.retain(|field| field.path == path);
            Ok(fields)
        }

        /// Sets `field` (`{path}`, `{path}#duplicate` or `{path}#mode`) to `value` after
        /// reading it as every instance will (the attribute's rule grammar for rules):
        /// a value they would ignore is refused and nothing is written.
        ///
        /// # Errors
        ///
        /// [`OverrideError::Invalid`] for such a value, [`OverrideError::Backend`] when
        /// Redis fails.
        pub async fn set(&self, field: &str, value: &str) -> Result<Setting, OverrideError> {
            let setting = read_field(field, value).map_err(|reason| OverrideError::Invalid {
                field: field.to_owned(),
                reason,
            })?;
            self.redis()?.hash_set(&self.hash, field, value).await?;
            Ok(setting)
        }

        /// Sets the [`Mode`] of the site `path`: field `{path}#mode`.
        pub async fn set_mode(&self, path: &str, mode: Mode) -> Result<(), BackendError> {
            let field = format!("{}{MODE_SUFFIX}", path_of(path));
            self.redis()?
                .hash_set(&self.hash, &field, mode.as_str())
                .await
        }

        /// Clears the site `path`'s rules, duplicate-submission rule and mode (its compiled
        /// ones are back in force), or, for a field ending in `#duplicate` or `#mode`, that
        /// field alone, as [`Limiter::clear_override`] does in process. How many fields
        /// were set.
        pub async fn clear(&self, path: &str) -> Result<u64, BackendError> {
            let fields = match path_of(path).len() == path.len() {
                true => [DUPLICATE_SUFFIX, MODE_SUFFIX]
                    .iter()
                    .map(|suffix| format!("{path}{suffix}"))
                    .chain([path.to_owned()])
                    .collect(),
                false => vec![path.to_owned()],
            };
            self.redis()?.hash_delete(&self.hash, &fields).await
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::clock::ManualClock;
    use crate::{Algorithm, Limiter, Rule};

    #[tokio::test]
    async fn every_algorithm_reports_what_a_check_would_find() {
        // 4 per 10 s: the token bucket refills one every 2.5 s exactly.
        let rules = [Rule::new(4, Duration::from_secs(10))];
        for algorithm in Algorithm::ALL {
            let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
            let limiter = Limiter::memory_with_clock(clock.clone());
            for _ in 0..4 {
                let d = limiter
                    .check("k", &rules)
                    .algorithm(algorithm)
                    .await
                    .unwrap();
                assert!(d.allowed, "{algorithm}");
            }
            let denied = limiter
                .peek("k", &rules)
                .algorithm(algorithm)
                .await
                .unwrap();
            let state = limiter.inspect("k").await.unwrap().expect("counted");
            assert_eq!(state.algorithm(), algorithm);
            let rule = state.rule(rules[0]);
            assert_eq!((rule.used, rule.remaining), (4, 0), "{algorithm}");
            assert_eq!(Some(rule.retry_after), denied.retry_after, "{algorithm}");
            assert!(rule.reset_after >= rule.retry_after, "{algorithm}");
            match algorithm {
                Algorithm::SlidingLog => assert!(state.rules().is_empty()),
                _ => assert_eq!(state.rules(), [rule], "{algorithm}"),
            }
            // Once the window has passed (the sliding window's previous one weighs for one
            // more), nothing is used.
            let windows = if algorithm == Algorithm::SlidingWindow {
                2
            } else {
                1
            };
            clock.advance(Duration::from_secs(10 * windows));
            if let Some(state) = limiter.inspect("k").await.unwrap() {
                let rule = state.rule(rules[0]);
                assert_eq!(
                    (rule.used, rule.reset_after),
                    (0, Duration::ZERO),
                    "{algorithm}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_block_is_reported_until_it_ends() {
        let rules = [Rule::new(1, Duration::from_secs(10))];
        for algorithm in Algorithm::ALL {
            let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
            let limiter = Limiter::memory_with_clock(clock.clone());
            let block = Duration::from_secs(60);
            for _ in 0..2 {
                let check = limiter.check("k", &rules).algorithm(algorithm);
                check.block_for(block).await.unwrap();
            }
            let state = limiter.inspect("k").await.unwrap().expect("blocked");
            let blocked = state.block().expect("a block");
            assert_eq!(
                (blocked.ends_in, blocked.rule_index),
                (block, 0),
                "{algorithm}"
            );
            clock.advance(block);
            let state = limiter.inspect("k").await.unwrap();
            assert!(state.and_then(|s| s.block()).is_none(), "{algorithm}");
        }
    }

    #[tokio::test]
    async fn an_absent_key_has_no_state() {
        assert!(Limiter::memory()
            .inspect("nothing")
            .await
            .unwrap()
            .is_none());
    }
}
