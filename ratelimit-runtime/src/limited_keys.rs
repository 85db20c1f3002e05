//! Where the refusals of `Limiter::most_limited` are kept, and how much of them
//! (`limiter/most_limited.rs` counts them, `backend/redis/most_limited.rs` stores them):
//! shared by both, importing neither.

/// The most identities a site's minute keeps.
pub(crate) const CAP: usize = 1_000;

/// How long a minute is kept: an hour, the longest `since` read.
pub(crate) const KEPT_MINUTES: u64 = 60;

/// The Redis key of a site's minute: the site in braces, so that every minute of a site
/// is in one Cluster hash slot.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn minute_key(prefix: &str, site: &str, minute: u64) -> String {
    format!("{prefix}limited:{{{site}}}:{minute}")
}
