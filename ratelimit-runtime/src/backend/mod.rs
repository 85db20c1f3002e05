//! Storage: one trait, two implementations (Redis, in-process memory).

pub(crate) mod memory;
pub(crate) mod redis;

use crate::decision::RawDecision;
use crate::{Algorithm, BackendError, Rule};

/// One check of one key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    pub key: &'a str,
    pub rules: &'a [Rule],
    pub algorithm: Algorithm,
    /// How many units of every rule the call uses (at least 1).
    pub cost: u64,
    /// `false` for a peek: answer as a check would, record nothing.
    pub consume: bool,
    /// An explicit time in µs since the epoch, for differential tests; `None` means the
    /// backend's own clock (Redis `TIME`).
    pub now_us: Option<u64>,
    /// When a consuming check is refused by a rule, the key then refuses every check (and
    /// peek) for this many µs, consuming nothing (see `algorithm::Block`); 0: no block.
    /// Below 2^53, as every number the scripts handle.
    pub block_for_us: u64,
    /// Whether the caller may refund the decision (`Receipt`). The memory backend and the
    /// sliding log can always refund; a string-state script (fixed window, sliding window,
    /// token bucket) then also answers the time the check was counted at, which a refund
    /// needs and which costs Redis about 2 % more per check (a string to make). Without it,
    /// the receipt of such a decision counted by Redis is empty: a refund gives nothing
    /// back.
    pub refundable: bool,
}

/// A place where rule state lives.
pub(crate) trait Backend {
    /// Runs `request` atomically.
    async fn check(&self, request: &Request<'_>) -> Result<RawDecision, BackendError>;
    /// Forgets `key`.
    async fn reset(&self, key: &str) -> Result<(), BackendError>;
}
