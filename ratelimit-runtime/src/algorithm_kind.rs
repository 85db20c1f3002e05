//! Which algorithm counts a set of rules: [`Algorithm`] and its names. A leaf of its own,
//! apart from the arithmetic in `algorithm`, because what a decision records (its receipt)
//! names the algorithm that counted it, and the algorithms make decisions.

use std::fmt;

use crate::spelling::spelled;

/// How a set of rules is counted.
///
/// Every algorithm keeps all rules of a key in that one key, checks all rules before
/// updating any (so a denial consumes nothing), and takes time from the backend's clock.
///
/// Its names: [`name`](Self::name) is the attribute's spelling (`algorithm = TOKEN_BUCKET`),
/// [`label`](Self::label) the metrics' (`algorithm="token_bucket"`);
/// [`FromStr`](std::str::FromStr) reads either, in any case.
///
/// ```
/// use redis_ratelimit::Algorithm;
///
/// assert_eq!("token_bucket".parse(), Ok(Algorithm::TokenBucket));
/// assert_eq!("SLIDING_LOG".parse(), Ok(Algorithm::SlidingLog));
/// assert_eq!(Algorithm::FixedWindow.name(), "FIXED_WINDOW");
/// assert_eq!(Algorithm::FixedWindow.label(), "fixed_window");
/// assert_eq!(Algorithm::ALL.len(), 4);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Exact: one log entry per admitted unit; never more than `count` in any window.
    #[default]
    SlidingLog,
    /// One counter per rule per aligned window.
    FixedWindow,
    /// The previous aligned window's count weighted by its overlap, plus the current count.
    SlidingWindow,
    /// GCRA: bursts of up to `count`, refilled at one every `window / count`.
    TokenBucket,
}

spelled! {
    Algorithm;
    /// Every algorithm, the default first.
    ALL;
    /// The attribute's spelling: `SLIDING_LOG`, `FIXED_WINDOW`, `SLIDING_WINDOW`,
    /// `TOKEN_BUCKET`. Also what [`Display`](fmt::Display) writes.
    fn name {
        SlidingLog => "SLIDING_LOG",
        FixedWindow => "FIXED_WINDOW",
        SlidingWindow => "SLIDING_WINDOW",
        TokenBucket => "TOKEN_BUCKET",
    }
    /// Reads a [`name`](Algorithm::name) in any case, so also a [`label`](Algorithm::label).
    from_str(text) -> Result<_, ParseAlgorithmError> else ParseAlgorithmError(text.into());
}

impl Algorithm {
    /// The largest cost one sliding-log check, peek or settle takes: 10,000 units. The
    /// sliding log records one entry per unit, so a check of `n` units writes `n`
    /// entries in one script run (about 1.2 µs and 120 bytes of Redis each): at this
    /// cost, about 12 ms during which Redis answers nobody else. A larger cost is refused
    /// before the backend is asked ([`BackendErrorKind::CostTooLarge`]); count large costs
    /// (bytes, tokens) with [`TokenBucket`](Self::TokenBucket),
    /// [`FixedWindow`](Self::FixedWindow) or [`SlidingWindow`](Self::SlidingWindow),
    /// which take any cost up to [`Rule::MAX_COUNT`](crate::Rule::MAX_COUNT) in constant
    /// time.
    ///
    /// [`BackendErrorKind::CostTooLarge`]: crate::BackendErrorKind::CostTooLarge
    pub const SLIDING_LOG_MAX_COST: u64 = 10_000;

    /// Whether one check of this algorithm takes `cost` units (see
    /// [`SLIDING_LOG_MAX_COST`](Self::SLIDING_LOG_MAX_COST)).
    #[inline(always)]
    pub(crate) fn takes(self, cost: u64) -> bool {
        cost <= Algorithm::SLIDING_LOG_MAX_COST || !matches!(self, Algorithm::SlidingLog)
    }

    /// The metrics' spelling, the [`name`](Self::name) in lower case: `sliding_log`,
    /// `fixed_window`, `sliding_window`, `token_bucket` (the `algorithm` label of
    /// `ratelimit_checks_total`). Also the name its Lua check is called by in
    /// `check_all.lua` and the one its scripts store (`scripts/state.lua`).
    pub const fn label(self) -> &'static str {
        match self {
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
        }
    }
}

/// A text that names no [`Algorithm`]; says which names do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseAlgorithmError(Box<str>);

impl fmt::Display for ParseAlgorithmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown algorithm `{}`: expected one of ", self.0)?;
        for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{algorithm}")?;
        }
        f.write_str(" (in any case)")
    }
}

impl std::error::Error for ParseAlgorithmError {}

#[cfg(test)]
mod tests {
    use super::{Algorithm, ParseAlgorithmError};

    #[test]
    fn names_are_read_back_in_either_spelling_and_any_case() {
        for algorithm in Algorithm::ALL {
            assert_eq!(algorithm.name().parse(), Ok(algorithm));
            assert_eq!(algorithm.label().parse(), Ok(algorithm));
            assert_eq!(algorithm.label(), algorithm.name().to_ascii_lowercase());
            assert_eq!(algorithm.to_string(), algorithm.name());
        }
        assert_eq!("Token_Bucket".parse(), Ok(Algorithm::TokenBucket));
        let err: ParseAlgorithmError = "leaky_bucket".parse::<Algorithm>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown algorithm `leaky_bucket`: expected one of SLIDING_LOG, FIXED_WINDOW, \
             SLIDING_WINDOW, TOKEN_BUCKET (in any case)"
        );
    }
}
