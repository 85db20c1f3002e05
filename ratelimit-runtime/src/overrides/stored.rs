//! Overrides stored in Redis: the poller that reads every watched prefix's hash, and how
//! what it reads replaces the stored part of the table.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{path_of, Entry, Overrides, Setting, Value, DUPLICATE_SUFFIX, MODE_SUFFIX};
use crate::backend::redis::RedisBackend;
use crate::sync::lock;
use crate::throttle::throttled;
use crate::{random, Rule};

/// The value of a `{path}#duplicate` field that removes the duplicate-submission rule.
const NO_DUPLICATE: &str = "none";

/// What the poller of one limiter keeps between reads.
#[derive(Default)]
pub(super) struct Reading {
    /// Whether a poller thread is running.
    polling: AtomicBool,
    /// The last malformed value warned about, by prefix and field: one warning per value.
    malformed: Mutex<HashMap<(String, String), String>>,
    /// Whether the last read failed, so that an outage is logged once.
    failing: AtomicBool,
}

impl Overrides {
    /// Adds `prefix` to those the poller reads.
    pub fn watch_prefix(&self, prefix: &'static str) {
        self.update(|table| {
            if table.prefixes.contains(&prefix) {
                return false;
            }
            table.prefixes.push(prefix);
            true
        });
    }

    /// Reads `prefix`'s hashes from now on, starting the poller if it is not running:
    /// what a guarded check does for its site, for a caller that only asks about bans
    /// ([`Limiter::banned`](crate::Limiter::banned)). One load while both are so.
    pub fn ensure_watching(
        self: &Arc<Self>,
        prefix: &'static str,
        redis: &Arc<RedisBackend>,
        every: Duration,
    ) {
        if !self.table.load().prefixes.contains(&prefix) {
            self.watch_prefix(prefix);
        }
        self.ensure_polling(redis, every);
    }

    /// Replaces what was read from `prefix`'s hash with `fields`. A malformed value is
    /// skipped (its path keeps its compiled rules) with one warning per value.
    pub(super) fn apply_stored(&self, prefix: &'static str, fields: Vec<(String, String)>) {
        let mut read: HashMap<Box<str>, Entry> = HashMap::new();
        let mut malformed_now = HashSet::new();
        for (field, text) in &fields {
            match Value::parse(field, text).and_then(|value| value.intern(field)) {
                Ok(value) => read.entry(path_of(field).into()).or_default().set(value),
                Err(why) => {
                    malformed_now.insert(field.clone());
                    self.warn_malformed(prefix, field, text, &why);
                }
            }
        }
        self.forget_malformed(prefix, &malformed_now);
        self.update(|table| {
            let before = table.stored.get(prefix);
            if before.map_or(read.is_empty(), |before| *before == read) {
                return false;
            }
            log_changes(prefix, before, &read);
            if read.is_empty() {
                table.stored.remove(prefix);
            } else {
                table.stored.insert(prefix, std::mem::take(&mut read));
            }
            true
        });
    }

    fn warn_malformed(&self, prefix: &str, field: &str, text: &str, why: &str) {
        let mut warned = lock(&self.stored.malformed);
        let slot = (prefix.to_owned(), field.to_owned());
        if warned.get(&slot).map(String::as_str) == Some(text) {
            return;
        }
        tracing::warn!(
            target: "redis_ratelimit",
            hash = %format_args!("{prefix}rules"),
            field,
            value = text,
            "ignoring a malformed rate limit rule override ({why}); the compiled rules stay \
             in force for `{}`",
            path_of(field),
        );
        warned.insert(slot, text.to_owned());
    }

    /// Forgets the malformed values of `prefix` that are no longer there, so that writing
    /// one of them again warns again.
    fn forget_malformed(&self, prefix: &str, still: &HashSet<String>) {
        let mut warned = lock(&self.stored.malformed);
        warned.retain(|(p, field), _| p != prefix || still.contains(field));
    }

    /// Starts the poller for `redis` on a thread of its own, unless one runs, reading every
    /// `every` within the operator timeout of `redis`. Never waits for it.
    ///
    /// Not on the caller's runtime: a limiter outlives the runtimes that check through it
    /// (a `static` limiter shared by `#[tokio::test]`s, each with a runtime that ends with
    /// its test), and a poller spawned on one of them ends with it, or stops while its
    /// threads are busy. One spawned by a check that answered at once (a ban, the deny
    /// cache) on a runtime ending right after was dropped before it first ran, leaving
    /// the limiter marked as polling, with no poller, for good.
    pub fn ensure_polling(self: &Arc<Self>, redis: &Arc<RedisBackend>, every: Duration) {
        if self.stored.polling.load(Ordering::Relaxed) {
            return;
        }
        if self.stored.polling.swap(true, Ordering::AcqRel) {
            return;
        }
        let poller = Poller {
            overrides: Arc::downgrade(self),
            redis: Arc::downgrade(redis),
            every,
            timeout: redis.config().operator_timeout(),
        };
        // Outside the thread's closure's body: dropped with it also when the thread never
        // starts, so that the next check tries again.
        let stopped = Stopped(Arc::downgrade(self));
        // The poller logs where the check that started it does, also when that is a
        // thread's own subscriber (`tracing::subscriber::set_default`), not the global one.
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let started = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .and_then(|runtime| {
                std::thread::Builder::new()
                    .name("ratelimit-poll".into())
                    .spawn(move || {
                        let _stopped = stopped;
                        tracing::dispatcher::with_default(&dispatch, || {
                            runtime.block_on(poller.run())
                        });
                    })
            });
        if let Err(err) = started {
            throttled!(
                warn,
                [error = %err],
                "cannot start reading rate limit rule overrides and bans from Redis; the next \
                 guarded check tries again"
            );
        }
    }
}

impl Value<Vec<Rule>> {
    fn parse(field: &str, text: &str) -> Result<Self, String> {
        if field.ends_with(MODE_SUFFIX) {
            return text.parse().map(Value::Mode).map_err(|err| err.to_string());
        }
        if field.ends_with(DUPLICATE_SUFFIX) {
            if text.trim().eq_ignore_ascii_case(NO_DUPLICATE) {
                return Ok(Value::Duplicate(None));
            }
            return text
                .parse::<Rule>()
                .map(|rule| Value::Duplicate(Some(rule)))
                .map_err(|err| format!("{err}, or \"{NO_DUPLICATE}\""));
        }
        Rule::parse_list(text)
            .map(Value::Rules)
            .map_err(|err| err.to_string())
    }
}

/// A stored field's value as every instance reads it (for [`Limiter::stored_overrides`](crate::Limiter::stored_overrides)): the same
/// parser the poller uses, so what an operator writes after this accepts it is what the
/// instances apply. An error says why they would ignore it.
pub(crate) fn read_field(field: &str, text: &str) -> Result<Setting, String> {
    Ok(match Value::parse(field, text)? {
        Value::Rules(rules) => Setting::Rules(rules),
        Value::Duplicate(rule) => Setting::DuplicateRule(rule),
        Value::Mode(mode) => Setting::Mode(mode),
    })
}

/// Logs, at info level, what a new read of `prefix`'s hash changes.
fn log_changes(
    prefix: &str,
    before: Option<&HashMap<Box<str>, Entry>>,
    after: &HashMap<Box<str>, Entry>,
) {
    let empty = HashMap::new();
    let before = before.unwrap_or(&empty);
    for (path, entry) in after {
        if before.get(path) != Some(entry) {
            tracing::info!(
                target: "redis_ratelimit",
                prefix,
                path = &**path,
                rules = %Described(entry),
                "rate limit rules overridden from Redis",
            );
        }
    }
    for path in before.keys().filter(|path| !after.contains_key(*path)) {
        tracing::info!(
            target: "redis_ratelimit",
            prefix,
            path = &**path,
            "rate limit rule override removed; the compiled rules are back in force",
        );
    }
}

/// An entry in the attribute's terms: `[5 per 60s, 20 per 3600s], duplicate rule none`.
struct Described<'a>(&'a Entry);

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.rules {
            Some(rules) => {
                f.write_str("[")?;
                for (i, rule) in rules.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{rule}")?;
                }
                f.write_str("]")?;
            }
            None => f.write_str("compiled")?,
        }
        match self.0.duplicate {
            None => {}
            Some(None) => f.write_str(", duplicate rule none")?,
            Some(Some(rule)) => write!(f, ", duplicate rule {rule}")?,
        }
        match self.0.mode {
            None => Ok(()),
            Some(mode) => write!(f, ", mode {mode}"),
        }
    }
}

/// What the thread reading the stored overrides and bans of one limiter runs: until the
/// limiter is dropped.
struct Poller {
    overrides: Weak<Overrides>,
    redis: Weak<RedisBackend>,
    every: Duration,
    timeout: Duration,
}

/// Marks the poller stopped when its thread ends.
struct Stopped(Weak<Overrides>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(overrides) = self.0.upgrade() {
            overrides.stored.polling.store(false, Ordering::Release);
        }
    }
}

impl Poller {
    async fn run(self) {
        loop {
            let (Some(overrides), Some(redis)) = (self.overrides.upgrade(), self.redis.upgrade())
            else {
                return;
            };
            let prefixes = overrides.table.load().prefixes.clone();
            for prefix in prefixes {
                let key = format!("{prefix}rules");
                let read = tokio::time::timeout(self.timeout, redis.hash_fields(&key)).await;
                match read {
                    Ok(Ok(fields)) => {
                        if overrides.stored.failing.swap(false, Ordering::Relaxed) {
                            tracing::info!(
                                target: "redis_ratelimit",
                                "rate limit rule overrides are read from Redis again"
                            );
                        }
                        overrides.apply_stored(prefix, fields);
                    }
                    Ok(Err(err)) => overrides.read_failed(&key, &err),
                    Err(_) => {
                        overrides.read_failed(&key, &format!("no answer within {:?}", self.timeout))
                    }
                }
                // The prefix's bans, beside its rules (limiter/bans.rs); while they cannot
                // be read, those last read stay in force.
                let key = format!("{prefix}bans");
                let writes = overrides.bans.writes();
                let read = tokio::time::timeout(self.timeout, redis.hash_fields(&key)).await;
                if let Ok(Ok(fields)) = read {
                    let read = crate::bans::read_stored(fields);
                    overrides.bans.set_stored(prefix, read, writes);
                }
            }
            // Not held while sleeping: a dropped limiter ends the poller at its next turn.
            drop((overrides, redis));
            // ± 20 %, so that instances started together spread their reads.
            tokio::time::sleep(random::around(self.every, 0.2)).await;
        }
    }
}

impl Overrides {
    /// Logs the first failed read of an outage; the rules last read stay in force.
    fn read_failed(&self, key: &str, err: &dyn std::fmt::Display) {
        if !self.stored.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "redis_ratelimit",
                hash = key,
                error = %err,
                "cannot read rate limit rule overrides from Redis; the rules last read stay in \
                 force until it answers again"
            );
        } else {
            tracing::debug!(target: "redis_ratelimit", hash = key, error = %err, "rule overrides not read");
        }
    }
}
