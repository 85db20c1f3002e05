//! Options set on a limiter that do nothing on its backend: each is said once, as a
//! `WARN`, at the limiter's first check (when logging is set up, whenever the limiter
//! was built), not silently ignored.

use std::sync::OnceLock;

use super::Store;

/// The options set that do nothing on the limiter's backend.
#[derive(Default)]
pub(super) struct Unused {
    /// One bit per option of [`OPTIONS`].
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

/// Each option's name and why it does nothing, in the order of [`UnusedOption`].
const OPTIONS: [(&str, &str); 5] = [
    (
        "max_keys",
        "Redis bounds its memory with `maxmemory`, and every key expires with its longest \
         window",
    ),
    (
        "state_file",
        "Redis keeps the state itself; give the limiter's fallback a state file if it matters",
    ),
    ("timeout", "the embedded backend answers at once"),
    ("breaker", "the embedded backend does not fail"),
    (
        "rules_poll",
        "rule overrides are read from Redis; `override_rules` sets them in this process",
    ),
];

impl Unused {
    /// Notes that `option` was set on a limiter on `store`, if it does nothing there.
    pub(super) fn add_on(&mut self, store: &Store, option: UnusedOption) {
        let applies = match option {
            UnusedOption::MaxKeys | UnusedOption::StateFile => matches!(store, Store::Memory(_)),
            UnusedOption::Timeout | UnusedOption::Breaker | UnusedOption::RulesPoll => {
                !matches!(store, Store::Memory(_))
            }
        };
        // A misconfigured limiter fails every check already, with the reason.
        if !applies && !matches!(store, Store::Misconfigured(_)) {
            self.set |= 1 << option as u8;
        }
    }

    /// Says, once, which options do nothing on the backend named `backend`.
    #[inline]
    pub(super) fn warn_once(&self, backend: &str) {
        if self.set != 0 {
            self.warned.get_or_init(|| self.warn(backend));
        }
    }

    #[cold]
    fn warn(&self, backend: &str) {
        for (bit, (option, why)) in OPTIONS.iter().enumerate() {
            if self.set & (1 << bit) != 0 {
                tracing::warn!(
                    target: "redis_ratelimit",
                    option,
                    backend,
                    "Limiter::{option} has no effect on this {backend} limiter ({why}): \
                     remove it, or set it on the limiter it applies to"
                );
            }
        }
    }
}
