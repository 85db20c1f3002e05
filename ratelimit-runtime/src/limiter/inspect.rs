//! Reading what a limiter keeps, as operators do (the `ratelimit` command): a key's state
//! ([`Limiter::inspect`]). The rule overrides stored in Redis are read in
//! `stored_overrides`.
//!
//! Nothing here decodes a second time: a key's state is read into the algorithms' own state
//! (`algorithm::StoredState`, the memory backend's type; Redis values are read as
//! `scripts/state.lua` and `scripts/sliding_log.lua` describe them) and judged by their own
//! arithmetic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::algorithm;
use crate::{Algorithm, BackendError, Limiter, Rule};

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
        let mut state = self.inspect_counts(key).await?;
        if let Some(state) = &mut state {
            state.slots_in_use = self.slots_in_use(key).await?;
        }
        Ok(state)
    }

    /// What `key` holds, but for its slots.
    async fn inspect_counts(&self, key: &str) -> Result<Option<KeyState>, BackendError> {
        let found = self.store.read_key(key).await?;
        Ok(found.map(|(state, now_us, ttl)| KeyState {
            state,
            now_us,
            ttl,
            slots_in_use: 0,
        }))
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
    state: algorithm::StoredState,
    /// The store's time when the key was read.
    now_us: u64,
    ttl: Option<Duration>,
    slots_in_use: u64,
}

impl KeyState {
    /// How many of the key's slots (calls in flight, see
    /// [`Limiter::acquire`](crate::Limiter::acquire)) were held when it was read: taken,
    /// neither released nor lapsed. Read just after the counts, not at the same instant. A
    /// key whose only state is its slots has no `KeyState`: see
    /// [`Limiter::slots_in_use`](crate::Limiter::slots_in_use).
    pub fn slots_in_use(&self) -> u64 {
        self.slots_in_use
    }

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

impl Limiter {
    /// How many slots of `key` are held now (see [`acquire`](Self::acquire)): taken and
    /// neither released nor lapsed. Reads this limiter's own store (not its
    /// [`fallback`](Self::fallback)), at the store's time.
    ///
    /// ```
    /// use redis_ratelimit::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::memory();
    /// let slot = limiter.acquire("export:acme", 4).await?;
    /// assert_eq!(limiter.slots_in_use("export:acme").await?, 1);
    /// drop(slot);
    /// assert_eq!(limiter.slots_in_use("export:acme").await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn slots_in_use(&self, key: &str) -> Result<u64, BackendError> {
        self.store.slots_in_use(key).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::clock::ManualClock;
    use crate::{Algorithm, Limiter, Rule};

    /// A fresh embedded limiter whose clock moves only when the test advances it.
    fn memory_on_a_manual_clock() -> (ManualClock, Limiter) {
        let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
        (clock.clone(), Limiter::memory_with_clock(clock))
    }

    #[tokio::test]
    async fn every_algorithm_reports_what_a_check_would_find() {
        // 4 per 10 s: the token bucket refills one every 2.5 s exactly.
        let rules = [Rule::new(4, Duration::from_secs(10))];
        for algorithm in Algorithm::ALL {
            let (clock, limiter) = memory_on_a_manual_clock();
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
            let (clock, limiter) = memory_on_a_manual_clock();
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
