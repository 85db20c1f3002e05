//! Rule overrides: a call site's rules replaced at run time, for every instance at once
//! (stored in Redis, under the hash `{prefix}rules`) or in one process
//! ([`Limiter::override_rules`](crate::Limiter::override_rules)).
//!
//! The hot path reads one [`ArcSwap`] (no lock, no allocation) and, only when some override
//! exists, looks the site's path up in a map. Rule lists are interned (`&'static`), so a check
//! under an override holds no reference count either, and a framework layer can keep them
//! for its response headers.
//!
//! Redis is read by a poller task: started by the first guarded check that finds none
//! running (on that check's Tokio runtime, with `tokio::spawn`), it reads every prefix's hash
//! with `HGETALL` every [`DEFAULT_POLL`] ± 20 %, and stops when the limiter is dropped or its
//! runtime shuts down (the next check then starts another). A check never waits for it: until
//! its first read lands, and while Redis cannot answer, the rules last read stay in force.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::sync::lock;
use crate::{Mode, Rule};

#[cfg(feature = "redis")]
pub(crate) mod stored;

/// How often each instance reads the stored overrides by default (± 20 %).
pub(crate) const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// The suffix of the field that overrides a site's duplicate-submission rule.
pub(crate) const DUPLICATE_SUFFIX: &str = "#duplicate";

/// The suffix of the field that sets a site's [`Mode`].
pub(crate) const MODE_SUFFIX: &str = "#mode";

/// The most distinct rule lists interned over a process's life: past it, new overrides
/// are ignored with a warning (each list costs a few dozen bytes, kept until exit).
const MAX_INTERNED: usize = 4_096;

/// What a field of the `{prefix}rules` hash sets, as every instance reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Setting {
    /// Field `{path}`: the site's ordinary rules.
    Rules(Vec<Rule>),
    /// Field `{path}#duplicate`: the duplicate-submission rule, or none.
    DuplicateRule(Option<Rule>),
    /// Field `{path}#mode`: the site's [`Mode`].
    Mode(Mode),
}

/// The rules a guarded call is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SiteRules {
    /// Every rule, the duplicate-submission rule last when `duplicate_rule`.
    pub rules: &'static [Rule],
    pub duplicate_rule: bool,
}

impl SiteRules {
    /// The rules without the duplicate-submission rule.
    pub(crate) fn ordinary(&self) -> &'static [Rule] {
        match self.duplicate_rule {
            true => &self.rules[..self.rules.len() - 1],
            false => self.rules,
        }
    }

    /// The duplicate-submission rule, if any.
    pub(crate) fn duplicate(&self) -> Option<Rule> {
        self.duplicate_rule
            .then(|| self.rules[self.rules.len() - 1])
    }
}

/// What is in force for a guarded site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InForce {
    pub rules: SiteRules,
    /// The mode an operator set for the site, if any.
    pub mode: Option<Mode>,
}

impl InForce {
    fn compiled(rules: SiteRules) -> InForce {
        InForce { rules, mode: None }
    }
}

/// What is overridden for one path.
#[derive(Clone, Debug, Default)]
struct Entry {
    /// The ordinary rules, instead of the compiled ones.
    rules: Option<&'static [Rule]>,
    /// The duplicate-submission rule (`Some(None)`: none), instead of the compiled one.
    duplicate: Option<Option<Rule>>,
    /// The site's mode, instead of the limiter's and the attribute's.
    mode: Option<Mode>,
    /// The last composition: the compiled rules it was made for, and the result.
    composed: std::sync::OnceLock<(SiteRules, SiteRules)>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.rules == other.rules && self.duplicate == other.duplicate && self.mode == other.mode
    }
}

impl Entry {
    /// Whether this entry overrides the site's rules (not only its mode).
    fn overrides_rules(&self) -> bool {
        self.rules.is_some() || self.duplicate.is_some()
    }

    fn is_empty(&self) -> bool {
        !self.overrides_rules() && self.mode.is_none()
    }

    fn set(&mut self, value: Value<&'static [Rule]>) {
        match value {
            Value::Rules(rules) => self.rules = Some(rules),
            Value::Duplicate(rule) => self.duplicate = Some(rule),
            Value::Mode(mode) => self.mode = Some(mode),
        }
    }

    /// `compiled` with this entry's overrides applied. Composed once per entry and table
    /// (sites sharing a path share their compiled rules, or were warned about it).
    fn apply(&self, compiled: SiteRules) -> SiteRules {
        if let Some((made_for, composed)) = self.composed.get() {
            if *made_for == compiled {
                return *composed;
            }
        }
        let rules = self.rules.unwrap_or_else(|| compiled.ordinary());
        let duplicate = self.duplicate.unwrap_or_else(|| compiled.duplicate());
        let composed = match duplicate {
            None => SiteRules {
                rules,
                duplicate_rule: false,
            },
            Some(duplicate) => {
                let mut all = rules.to_vec();
                all.push(duplicate);
                SiteRules {
                    // Beyond the interning bound, the override's own list without the
                    // duplicate rule would be wrong: keep what was compiled.
                    rules: match intern(&all) {
                        Some(all) => all,
                        None => return compiled,
                    },
                    duplicate_rule: true,
                }
            }
        };
        let _ = self.composed.set((compiled, composed));
        composed
    }
}

/// Everything overridden, swapped whole on every change.
#[derive(Clone, Debug, Default)]
struct Table {
    /// The prefixes whose hash the poller reads: those of the sites checked so far.
    prefixes: Vec<&'static str>,
    /// Set in process, for sites of any prefix; they win over stored ones.
    local: HashMap<Box<str>, Entry>,
    /// Read from Redis, by prefix then path.
    stored: HashMap<&'static str, HashMap<Box<str>, Entry>>,
}

/// A limiter's overrides, shared with its poller.
pub(crate) struct Overrides {
    table: ArcSwap<Table>,
    /// Whether the table holds any override, so that a check of a limiter that reads no
    /// prefixes from Redis (the embedded backend) need not load it while none does.
    overridden: AtomicBool,
    /// Serialises writers: each builds the next table from the current one.
    write: Mutex<()>,
    /// The poller's state.
    #[cfg(feature = "redis")]
    stored: stored::Reading,
    /// Identities banned from every site: set in process, or read by the same poller.
    pub(crate) bans: crate::bans::Bans,
}

impl Overrides {
    pub fn new() -> Arc<Overrides> {
        Arc::new(Overrides {
            table: ArcSwap::from_pointee(Table::default()),
            overridden: AtomicBool::new(false),
            write: Mutex::new(()),
            #[cfg(feature = "redis")]
            stored: stored::Reading::default(),
            bans: crate::bans::Bans::default(),
        })
    }

    /// What is in force for a site of `prefix` and `path` compiled with `compiled`, and
    /// whether `prefix` is not yet among those read from Redis.
    ///
    /// Each part is overridden on its own: an in-process override of the rules wins over a
    /// stored one, and so does an in-process mode.
    pub fn lookup(&self, prefix: &str, path: &str, compiled: SiteRules) -> (InForce, bool) {
        let table = self.table.load();
        let unknown_prefix = !table.prefixes.contains(&prefix);
        if table.local.is_empty() && table.stored.is_empty() {
            return (InForce::compiled(compiled), unknown_prefix);
        }
        let local = table.local.get(path);
        let stored = table.stored.get(prefix).and_then(|hash| hash.get(path));
        let rules = [local, stored]
            .into_iter()
            .flatten()
            .find(|entry| entry.overrides_rules())
            .map_or(compiled, |entry| entry.apply(compiled));
        let mode = [local, stored].into_iter().flatten().find_map(|e| e.mode);
        (InForce { rules, mode }, unknown_prefix)
    }

    /// What is in force for a site, for a limiter that reads no overrides from Redis: no
    /// load of the table while nothing is overridden.
    pub fn lookup_local(&self, prefix: &str, path: &str, compiled: SiteRules) -> InForce {
        if !self.overridden.load(Ordering::Acquire) {
            return InForce::compiled(compiled);
        }
        self.lookup(prefix, path, compiled).0
    }

    /// The mode an operator set for `path`, in process or in any prefix's stored hash.
    pub fn mode(&self, path: &str) -> Option<Mode> {
        let table = self.table.load();
        table.local.get(path).and_then(|e| e.mode).or_else(|| {
            table
                .stored
                .values()
                .find_map(|hash| hash.get(path).and_then(|e| e.mode))
        })
    }

    /// Sets (or with `None`, clears) the in-process override of `field`'s rules.
    ///
    /// # Panics
    ///
    /// On a rule list that `field` cannot hold (see [`Limiter::override_rules`](crate::Limiter::override_rules)).
    pub fn set_local(&self, field: &str, rules: Option<&[Rule]>) {
        let (path, value) = match rules {
            None => (path_of(field), None),
            Some(rules) => {
                let (path, value) = Value::of_rules(field, rules);
                (path, Some(value))
            }
        };
        let value = match value.map(|value| value.intern(field)).transpose() {
            Ok(value) => value,
            Err(why) => {
                tracing::warn!(target: "redis_ratelimit", field, "ignoring a rule override: {why}");
                return;
            }
        };
        self.update_local(path, |entry| match value {
            Some(value) => entry.set(value),
            None if field.ends_with(DUPLICATE_SUFFIX) => entry.duplicate = None,
            None => entry.rules = None,
        });
    }

    /// Sets (or with `None`, clears) the in-process mode of `path`.
    pub fn set_local_mode(&self, path: &str, mode: Option<Mode>) {
        self.update_local(path, |entry| match mode {
            Some(mode) => entry.set(Value::Mode(mode)),
            None => entry.mode = None,
        });
    }

    /// Clears every in-process override of `path`: rules, duplicate rule and mode.
    pub fn clear_local(&self, path: &str) {
        self.update_local(path, |entry| *entry = Entry::default());
    }

    fn update_local(&self, path: &str, change: impl FnOnce(&mut Entry)) {
        self.update(|table| {
            let current = table.local.remove(path).unwrap_or_default();
            let mut next = current.clone();
            change(&mut next);
            let changed = next != current;
            if changed {
                next.composed = Default::default();
            }
            if !next.is_empty() {
                table.local.insert(path.into(), next);
            }
            changed
        });
    }

    /// The compiled rules for `path` with the overrides applied, or the overrides alone
    /// when no site of that path has been checked yet.
    pub fn in_force(&self, path: &str, compiled: Option<(&str, SiteRules)>) -> Vec<Rule> {
        match compiled {
            Some((prefix, compiled)) => self.lookup(prefix, path, compiled).0.rules.rules.to_vec(),
            None => {
                let table = self.table.load();
                let entry = table
                    .local
                    .get(path)
                    .filter(|entry| entry.overrides_rules())
                    .or_else(|| {
                        let mut stored = table.stored.values().filter_map(|hash| hash.get(path));
                        stored.find(|entry| entry.overrides_rules())
                    });
                entry.map_or_else(Vec::new, |entry| {
                    let mut rules = entry.rules.unwrap_or_default().to_vec();
                    rules.extend(entry.duplicate.flatten());
                    rules
                })
            }
        }
    }

    /// Builds the next table with `change` (which says whether it changed anything) and
    /// publishes it.
    fn update(&self, change: impl FnOnce(&mut Table) -> bool) {
        let _writer = lock(&self.write);
        let mut next = Table::clone(&self.table.load());
        if change(&mut next) {
            let overridden = !next.local.is_empty() || !next.stored.is_empty();
            self.table.store(Arc::new(next));
            self.overridden.store(overridden, Ordering::Release);
        }
    }
}

/// The field's path: `path` for `path`, `path#duplicate` and `path#mode`.
pub(crate) fn path_of(field: &str) -> &str {
    field
        .strip_suffix(DUPLICATE_SUFFIX)
        .or_else(|| field.strip_suffix(MODE_SUFFIX))
        .unwrap_or(field)
}

/// One field's value, understood.
enum Value<R> {
    /// Of a `path` field: the ordinary rules.
    Rules(R),
    /// Of a `path#duplicate` field: the duplicate-submission rule, or none.
    Duplicate(Option<Rule>),
    /// Of a `path#mode` field.
    Mode(Mode),
}

impl Value<Vec<Rule>> {
    fn intern(self, field: &str) -> Result<Value<&'static [Rule]>, String> {
        match self {
            Value::Duplicate(rule) => Ok(Value::Duplicate(rule)),
            Value::Mode(mode) => Ok(Value::Mode(mode)),
            Value::Rules(rules) => intern(&rules).map(Value::Rules).ok_or_else(|| {
                format!(
                    "more than {MAX_INTERNED} distinct rule lists were set in this process; \
                     `{field}` keeps its rules"
                )
            }),
        }
    }
}

impl<'a> Value<&'a [Rule]> {
    /// The value `rules` sets for `field`, and the field's path.
    fn of_rules(field: &'a str, rules: &'a [Rule]) -> (&'a str, Value<Vec<Rule>>) {
        let path = path_of(field);
        if path.len() != field.len() {
            assert!(
                rules.len() <= 1,
                "`{field}` takes at most one rule: the duplicate-submission rule, or none"
            );
            return (path, Value::Duplicate(rules.first().copied()));
        }
        assert!(
            !rules.is_empty(),
            "an override needs at least one rule; `clear_override` restores the compiled rules"
        );
        (path, Value::Rules(rules.to_vec()))
    }
}

/// `rules` as a list that lives as long as the process, shared by every equal list; `None`
/// past [`MAX_INTERNED`] lists.
pub(crate) fn intern(rules: &[Rule]) -> Option<&'static [Rule]> {
    static INTERNED: Mutex<Option<HashSet<&'static [Rule]>>> = Mutex::new(None);
    let mut interned = lock(&INTERNED);
    let interned = interned.get_or_insert_with(HashSet::new);
    if let Some(rules) = interned.get(rules) {
        return Some(rules);
    }
    if interned.len() >= MAX_INTERNED {
        return None;
    }
    let rules: &'static [Rule] = Box::leak(rules.into());
    interned.insert(rules);
    Some(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPILED: [Rule; 2] = [Rule::per_minute(10), Rule::new(1, Duration::from_secs(5))];
    const SITE: SiteRules = SiteRules {
        rules: &COMPILED,
        duplicate_rule: true,
    };

    #[test]
    fn without_overrides_the_compiled_rules_are_in_force() {
        let overrides = Overrides::new();
        assert_eq!(
            overrides.lookup("p:", "app::f", SITE),
            (InForce::compiled(SITE), true)
        );
        #[cfg(feature = "redis")]
        {
            overrides.watch_prefix("p:");
            assert_eq!(
                overrides.lookup("p:", "app::f", SITE),
                (InForce::compiled(SITE), false)
            );
        }
    }

    #[test]
    fn an_override_replaces_the_ordinary_rules_and_keeps_the_duplicate_rule() {
        let overrides = Overrides::new();
        overrides.set_local("app::f", Some(&[Rule::per_minute(3), Rule::per_hour(9)]));
        let rules = overrides.lookup("p:", "app::f", SITE).0.rules;
        assert_eq!(
            rules.rules,
            [Rule::per_minute(3), Rule::per_hour(9), COMPILED[1]]
        );
        assert!(rules.duplicate_rule);
        // Another path is untouched.
        assert_eq!(overrides.lookup("p:", "app::g", SITE).0.rules, SITE);
        // The duplicate rule goes only when overridden explicitly.
        overrides.set_local("app::f#duplicate", Some(&[]));
        let rules = overrides.lookup("p:", "app::f", SITE).0.rules;
        assert_eq!(rules.rules, [Rule::per_minute(3), Rule::per_hour(9)]);
        assert!(!rules.duplicate_rule);
        overrides.set_local("app::f", None);
        overrides.set_local("app::f#duplicate", None);
        assert_eq!(overrides.lookup("p:", "app::f", SITE).0.rules, SITE);
    }

    /// The fields of a `{prefix}rules` hash as read from Redis.
    #[cfg(feature = "redis")]
    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|&(field, value)| (field.to_owned(), value.to_owned()))
            .collect()
    }

    #[test]
    #[cfg(feature = "redis")]
    fn stored_values_are_parsed_per_field_and_malformed_ones_skipped() {
        let overrides = Overrides::new();
        overrides.apply_stored(
            "p:",
            fields(&[
                ("app::f", "5/minute, 20/hour"),
                ("app::f#duplicate", "NONE"),
                ("app::g", "5 per fortnight"),
            ]),
        );
        let rules = overrides.lookup("p:", "app::f", SITE).0.rules;
        assert_eq!(rules.rules, [Rule::per_minute(5), Rule::per_hour(20)]);
        assert_eq!(overrides.lookup("p:", "app::g", SITE).0.rules, SITE);
        // Another prefix's sites are not touched by this hash.
        assert_eq!(overrides.lookup("q:", "app::f", SITE).0.rules, SITE);
        overrides.apply_stored("p:", Vec::new());
        assert_eq!(overrides.lookup("p:", "app::f", SITE).0.rules, SITE);
    }

    #[test]
    #[cfg(feature = "redis")]
    fn a_mode_is_overridden_apart_from_the_rules() {
        let overrides = Overrides::new();
        let stored = [("app::f", "5/minute"), ("app::f#mode", "SHADOW")];
        overrides.apply_stored("p:", fields(&stored));
        let (in_force, _) = overrides.lookup("p:", "app::f", SITE);
        assert_eq!(in_force.mode, Some(Mode::Shadow));
        assert_eq!(in_force.rules.rules, [Rule::per_minute(5), COMPILED[1]]);
        // In process, the mode wins over the stored one and leaves the stored rules.
        overrides.set_local_mode("app::f", Some(Mode::Off));
        let (in_force, _) = overrides.lookup("p:", "app::f", SITE);
        assert_eq!(in_force.mode, Some(Mode::Off));
        assert_eq!(in_force.rules.rules, [Rule::per_minute(5), COMPILED[1]]);
        assert_eq!(overrides.mode("app::f"), Some(Mode::Off));
        overrides.clear_local("app::f");
        assert_eq!(overrides.mode("app::f"), Some(Mode::Shadow));
        // A malformed mode is skipped: the site keeps its mode.
        overrides.apply_stored("p:", fields(&[("app::f#mode", "loud")]));
        assert_eq!(
            overrides.lookup("p:", "app::f", SITE).0,
            InForce::compiled(SITE)
        );
    }

    #[test]
    fn equal_lists_are_interned_once() {
        let a = intern(&[Rule::per_second(7)]).unwrap();
        let b = intern(&[Rule::per_second(7)]).unwrap();
        assert!(std::ptr::eq(a, b));
    }
}
