//! Options set on a limiter that do nothing on its backend: each is said once, as a
//! `WARN`, at the limiter's first check (when logging is set up, whenever the limiter
//! was built), not silently ignored.

use std::sync::OnceLock;

use super::Store;

/// The options set that do nothing on the limiter's backend.
#[derive(Default)]
pub(super) struct Unused {
    /// One bit per option, by its [`UnusedOption`] number.
    set: u8,
    warned: OnceLock<()>,
}

/// An option that does nothing on a backend.
#[derive(Clone, Copy)]
pub(super) enum UnusedOption {
    MaxKeys,
    StateFile,
    Timeout,
    // Without Redis there is no breaker to set.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Breaker,
    RulesPoll,
}

impl UnusedOption {
    const ALL: [UnusedOption; 5] = [
        UnusedOption::MaxKeys,
        UnusedOption::StateFile,
        UnusedOption::Timeout,
        UnusedOption::Breaker,
        UnusedOption::RulesPoll,
    ];

    /// Whether the option does something on `store`.
    fn applies_to(self, store: &Store) -> bool {
        let memory = matches!(store, Store::Memory(_));
        match self {
            UnusedOption::MaxKeys | UnusedOption::StateFile => memory,
            UnusedOption::Timeout | UnusedOption::Breaker | UnusedOption::RulesPoll => !memory,
        }
    }

    /// The option's name, and why it does nothing where it does nothing.
    fn describe(self) -> (&'static str, &'static str) {
        match self {
            UnusedOption::MaxKeys => (
                "max_keys",
                "Redis bounds its memory with `maxmemory`, and every key expires with its \
                 longest window",
            ),
            UnusedOption::StateFile => (
                "state_file",
                "Redis keeps the state itself; give the limiter's fallback a state file if it \
                 matters",
            ),
            UnusedOption::Timeout => ("timeout", "the embedded backend answers at once"),
            UnusedOption::Breaker => ("breaker", "the embedded backend does not fail"),
            UnusedOption::RulesPoll => (
                "rules_poll",
                "rule overrides are read from Redis; `override_rules` sets them in this process",
            ),
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl Unused {
    /// Notes that `option` was set on a limiter on `store`, if it does nothing there.
    pub(super) fn add_on(&mut self, store: &Store, option: UnusedOption) {
        // A misconfigured limiter fails every check already, with the reason.
        if !option.applies_to(store) && !matches!(store, Store::Misconfigured(_)) {
            self.set |= option.bit();
        }
    }

    /// Says, once, which options do nothing on `store`.
    #[inline]
    pub(super) fn warn_once(&self, store: &Store) {
        if self.set != 0 {
            self.warned.get_or_init(|| self.warn(store.name()));
        }
    }

    #[cold]
    fn warn(&self, backend: &str) {
        for option in UnusedOption::ALL {
            if self.set & option.bit() == 0 {
                continue;
            }
            let (option, why) = option.describe();
            tracing::warn!(
                target: "redis_ratelimit",
                option,
                backend,
                "Limiter::{option} has no effect on this {backend} limiter ({why}): remove it, \
                 or set it on the limiter it applies to"
            );
        }
    }
}
