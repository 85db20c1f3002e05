//! Who is limited most: the refusals of each guarded site, by identity and minute.
//!
//! Built from what checks already decide, and bounded:
//!
//! - Each refusal of a guarded site (the deny cache's included) is counted in process, by
//!   the key's prefix, the site, the minute (UTC, of this process's clock) and the
//!   identity (`ip:203.0.113.9`, `user:42`, `custom:alice`, `global`). An admitted check
//!   does none of this.
//! - The embedded backend keeps those counts as they are, in its own table.
//! - A Redis limiter sends them every second ([`FLUSH_EVERY`]) by a task of its own, one
//!   script per site and minute (`scripts/most_limited_add.lua`), into the sorted set
//!   `{prefix}limited:{site}:{minute}` (the site in braces: every minute of a site in one
//!   Cluster hash slot), which expires an hour after its minute. Refusals are visible to
//!   every instance within about a second, never more than two.
//! - **Bounded**: a site's minute keeps at most [`CAP`] identities. While a minute has at
//!   most that many refused identities, every count is exact. Past it, each write keeps the
//!   [`CAP`] heaviest (ties: the lowest in byte order go first) and forgets the rest, so
//!   an identity forgotten and refused again later in that minute starts over: its count
//!   is then an undercount, by at most what the lightest identity kept had at the time.
//!   The heavy hitters the view is for stay exact unless they once ranked below the cut.
//!   What waits in process for the next flush is bounded too ([`MAX_PENDING`] identities
//!   over every site; refusals of further identities are dropped until the flush, and
//!   logged).

// Without Redis nothing is flushed: the embedded backend's table is all there is.
#![cfg_attr(not(feature = "redis"), allow(dead_code, unused_imports))]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(feature = "redis")]
use crate::background::TaskHold;
use crate::background::{HasTask, TaskPlace};
use crate::key::split_key;
use crate::sync::lock;

pub(crate) use crate::most_limited_keys::{CAP, KEPT_MINUTES};

/// How often a Redis limiter sends the refusals counted since its last flush.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The most identities waiting in process for the next flush, over every site.
pub(crate) const MAX_PENDING: usize = 100_000;

/// The minute (since the epoch, UTC) of now, on this process's clock.
pub(crate) fn this_minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

/// The minutes `since` reaches back over, ending with `now`: whole minutes, at least 1
/// and at most [`KEPT_MINUTES`].
pub(crate) fn minutes(since: Duration, now: u64) -> std::ops::RangeInclusive<u64> {
    let n = since.as_secs().div_ceil(60).clamp(1, KEPT_MINUTES);
    (now + 1 - n.min(now + 1))..=now
}

/// The `n` heaviest of `counts`, most first (ties: in byte order).
pub(crate) fn heaviest(counts: HashMap<String, u64>, n: usize) -> Vec<(String, u64)> {
    let mut all: Vec<(String, u64)> = counts.into_iter().collect();
    all.sort_unstable_by(|(a, x), (b, y)| y.cmp(x).then_with(|| a.cmp(b)));
    all.truncate(n);
    all
}

/// One site's refusals by identity in one minute, kept to [`CAP`] identities as a flush
/// to Redis keeps them.
#[derive(Default)]
struct Minute {
    minute: u64,
    counts: HashMap<String, u64>,
}

impl Minute {
    fn add(&mut self, identity: String, n: u64) {
        *self.counts.entry(identity).or_default() += n;
        if self.counts.len() > CAP {
            // As ZREMRANGEBYRANK 0 0 drops it: the lowest count, then the lowest member.
            let lightest = self
                .counts
                .iter()
                .min_by(|(a, x), (b, y)| x.cmp(y).then_with(|| a.cmp(b)))
                .map(|(identity, _)| identity.clone())
                .expect("over the cap, so not empty");
            self.counts.remove(&lightest);
        }
    }
}

/// Where this limiter keeps its sites' refusals.
#[derive(Default)]
pub(crate) struct Refusals {
    /// The embedded backend's table (prefix, site) -> its last [`KEPT_MINUTES`] minutes.
    table: Mutex<HashMap<(String, String), VecDeque<Minute>>>,
    /// A Redis limiter's refusals not sent yet: (prefix, site, minute) -> identity -> n.
    pending: Mutex<Pending>,
    /// The flush task's place (see `background.rs`).
    flushing: TaskPlace,
}

/// A site's minute under a prefix: (prefix, site, minute).
pub(crate) type SiteMinute = (String, String, u64);

/// The refusals of a site's minute to send: identity -> refusals.
pub(crate) type Batch = (SiteMinute, HashMap<String, u64>);

#[derive(Default)]
pub(crate) struct Pending {
    pub batches: HashMap<SiteMinute, HashMap<String, u64>>,
    identities: usize,
    dropped: u64,
}

impl Refusals {
    /// Counts a refusal of `key` at `site` in the embedded backend's table.
    pub fn record_here(&self, site: &str, key: &str) {
        let Some((prefix, identity)) = split_key(key, site) else {
            return;
        };
        let minute = this_minute();
        let mut table = lock(&self.table);
        let minutes = table
            .entry((prefix.to_owned(), site.to_owned()))
            .or_default();
        while minutes
            .front()
            .is_some_and(|m| m.minute + KEPT_MINUTES <= minute)
        {
            minutes.pop_front();
        }
        if minutes.back().is_none_or(|m| m.minute < minute) {
            minutes.push_back(Minute {
                minute,
                ..Minute::default()
            });
        }
        let current = minutes.back_mut().expect("just pushed");
        current.add(identity.to_owned(), 1);
    }

    /// The embedded backend's `n` most refused identities of `site` under `prefix` over
    /// the minutes `since` reaches.
    pub fn read_here(
        &self,
        prefix: &str,
        site: &str,
        since: Duration,
        n: usize,
    ) -> Vec<(String, u64)> {
        let now = this_minute();
        let wanted = minutes(since, now);
        let (first, last) = (*wanted.start(), *wanted.end());
        let table = lock(&self.table);
        let mut sums: HashMap<String, u64> = HashMap::new();
        if let Some(minutes) = table.get(&(prefix.to_owned(), site.to_owned())) {
            for m in minutes
                .iter()
                .filter(|m| m.minute >= first && m.minute <= last)
            {
                for (identity, count) in &m.counts {
                    *sums.entry(identity.clone()).or_default() += count;
                }
            }
        }
        heaviest(sums, n)
    }

    /// Counts a refusal of `key` at `site` for the next flush to Redis. Returns whether a
    /// flush task must be started.
    pub fn record_pending(&self, site: &str, key: &str) -> bool {
        let Some((prefix, identity)) = split_key(key, site) else {
            return false;
        };
        let minute = this_minute();
        let mut guard = lock(&self.pending);
        let pending = &mut *guard;
        let batch = pending
            .batches
            .entry((prefix.to_owned(), site.to_owned(), minute))
            .or_default();
        if let Some(count) = batch.get_mut(identity) {
            *count += 1;
        } else if pending.identities < MAX_PENDING {
            batch.insert(identity.to_owned(), 1);
            pending.identities += 1;
        } else {
            pending.dropped += 1;
        }
        drop(guard);
        !self.flushing.is_taken()
    }

    /// What waits for a flush, taken; and how many refusals were dropped since the last.
    pub fn take_pending(&self) -> (Vec<Batch>, u64) {
        let mut pending = lock(&self.pending);
        let dropped = std::mem::take(&mut pending.dropped);
        pending.identities = 0;
        (pending.batches.drain().collect(), dropped)
    }
}

impl HasTask for Refusals {
    fn task_place(&self) -> &TaskPlace {
        &self.flushing
    }
}

/// Starts the task that sends `refusals` to `redis` every [`FLUSH_EVERY`], on the current
/// Tokio runtime, unless one runs (see `background.rs`). It ends with its limiter, and
/// after a minute with nothing to send.
#[cfg(feature = "redis")]
pub(crate) fn start_flushing(
    refusals: &Arc<Refusals>,
    redis: &Arc<crate::backend::redis::RedisBackend>,
) {
    crate::background::start(refusals, |hold| flush(hold, Arc::downgrade(redis)));
}

#[cfg(feature = "redis")]
async fn flush(
    mut hold: TaskHold<Refusals>,
    redis: std::sync::Weak<crate::backend::redis::RedisBackend>,
) {
    let mut idle = 0;
    loop {
        tokio::time::sleep(FLUSH_EVERY).await;
        let (Some(refusals), Some(redis)) = (hold.owner(), redis.upgrade()) else {
            return;
        };
        let (batches, dropped) = refusals.take_pending();
        if dropped > 0 {
            tracing::warn!(
                target: "redis_ratelimit",
                dropped,
                "too many refused identities to count in one second; {dropped} refusals \
                 are missing from most_limited"
            );
        }
        idle = if batches.is_empty() { idle + 1 } else { 0 };
        for ((prefix, site, minute), counts) in batches {
            if let Err(err) = redis.add_refusals(&prefix, &site, minute, &counts).await {
                tracing::debug!(
                    target: "redis_ratelimit",
                    error = %err,
                    site,
                    "refusals not sent to most_limited"
                );
            }
        }
        if idle >= 60 {
            // Unless a refusal came in meanwhile.
            match hold.end_if_idle(|refusals| lock(&refusals.pending).batches.is_empty()) {
                Some(again) => (hold, idle) = (again, 0),
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_whole_minutes_up_to_an_hour() {
        let read = |since| minutes(Duration::from_secs(since), 1_000).collect::<Vec<_>>();
        assert_eq!(read(0), [1_000]);
        assert_eq!(read(60), [1_000]);
        assert_eq!(read(61), [999, 1_000]);
        assert_eq!(read(15 * 60).len(), 15);
        assert_eq!(read(24 * 3600).len(), 60);
    }

    #[test]
    fn a_minute_keeps_the_heaviest_identities() {
        let mut m = Minute::default();
        for i in 0..CAP {
            m.add(format!("ip:{i}"), 2);
        }
        m.add("ip:heavy".to_owned(), 5);
        assert_eq!(m.counts.len(), CAP);
        assert_eq!(m.counts.get("ip:heavy"), Some(&5));
        // A newcomer lighter than all is the one that goes.
        m.add("ip:light".to_owned(), 1);
        assert_eq!(m.counts.len(), CAP);
        assert!(!m.counts.contains_key("ip:light"));
    }

    #[test]
    fn the_heaviest_come_first_ties_in_byte_order() {
        let counts = HashMap::from([
            ("ip:b".to_owned(), 3),
            ("ip:a".to_owned(), 3),
            ("ip:c".to_owned(), 9),
            ("ip:d".to_owned(), 1),
        ]);
        assert_eq!(
            heaviest(counts, 3),
            [
                ("ip:c".to_owned(), 9),
                ("ip:a".to_owned(), 3),
                ("ip:b".to_owned(), 3)
            ]
        );
    }
}
