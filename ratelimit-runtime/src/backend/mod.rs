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
}

/// A place where rule state lives.
pub(crate) trait Backend {
    /// Runs `request` atomically.
    async fn check(&self, request: &Request<'_>) -> Result<RawDecision, BackendError>;
    /// Forgets `key`.
    async fn reset(&self, key: &str) -> Result<(), BackendError>;
}
