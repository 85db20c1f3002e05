//! Where the refusals `Limiter::most_limited` reads are kept, and how many: shared by the
//! limiter, which counts them, and the Redis backend, which stores them (a leaf, so that
//! neither imports the other for it).

/// The most identities a site's minute keeps.
pub(crate) const CAP: usize = 1_000;

/// How long a minute is kept: an hour, the longest `since` read.
pub(crate) const KEPT_MINUTES: u64 = 60;

/// The Redis key of a site's minute.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn minute_key(prefix: &str, site: &str, minute: u64) -> String {
    format!("{prefix}limited:{{{site}}}:{minute}")
}
