//! Draws and give-backs straight on a backend, at explicit times: what the tests of the
//! allowance primitive (`tests/draws.rs`) drive on both backends. Not public API (feature
//! `test-clock`).

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use super::memory::MemoryBackend;
use super::{Draw, GiveBack, Request};
use crate::clock::{self, SystemClock};
use crate::decision::{RawDecision, Receipt};
use crate::{Algorithm, BackendError, Rule};

/// One backend, spoken to directly.
pub struct Backend(ProbeStore);

enum ProbeStore {
    Memory(MemoryBackend),
    #[cfg(feature = "redis")]
    Redis(Box<super::redis::RedisBackend>),
}

/// A draw's answer, and what its give-back needs.
#[derive(Clone, Debug)]
pub struct Drawn {
    /// Whether the draw was admitted.
    pub allowed: bool,
    /// What the key has left after the draw (now, when refused).
    pub remaining: u64,
    /// When refused: until a draw of the same size and hold would pass.
    pub retry_after_us: u64,
    /// The time the draw was counted at, on the backend's clock.
    pub at_us: u64,
    /// Its hold: its units are recorded as spent at `at_us + hold_us`.
    pub hold_us: u64,
    key: String,
    rules: Vec<Rule>,
    draw: Draw,
    receipt: Receipt,
}

impl Backend {
    /// The embedded backend (every call gives its time).
    pub fn memory() -> Backend {
        Backend(ProbeStore::Memory(MemoryBackend::new(Arc::new(
            SystemClock,
        ))))
    }

    /// Redis at `url`.
    #[cfg(feature = "redis")]
    pub fn redis(url: &str) -> Backend {
        let config = super::redis::RedisConfig::new(url, Duration::from_secs(5)).expect("a URL");
        Backend(ProbeStore::Redis(Box::new(
            super::redis::RedisBackend::new(config),
        )))
    }

    async fn run(&self, request: &Request<'_>) -> Result<RawDecision, BackendError> {
        match &self.0 {
            ProbeStore::Memory(memory) => memory.check_now(request),
            #[cfg(feature = "redis")]
            ProbeStore::Redis(redis) => redis.check(request).await,
        }
    }

    /// Draws `units` of every rule counting units and `calls` of every rule counting
    /// calls, held for `hold`, by `algorithm`, at `now_us`.
    #[allow(clippy::too_many_arguments)]
    pub async fn draw(
        &self,
        key: &str,
        rules: &[Rule],
        algorithm: Algorithm,
        units: u64,
        calls: u64,
        hold: Duration,
        now_us: u64,
    ) -> Result<Drawn, BackendError> {
        let draw = Draw {
            calls: NonZeroU64::new(calls).expect("at least one call"),
            hold_us: hold.as_micros() as u64,
        };
        let request = Request {
            algorithm,
            cost: NonZeroU64::new(units).expect("at least one unit"),
            now_us: Some(clock::explicit_us(now_us)),
            draw: Some(&draw),
            ..Request::new(key, rules, true)
        };
        let raw = self.run(&request).await?;
        let at_us = raw.receipt.at_us;
        Ok(Drawn {
            allowed: raw.allowed,
            remaining: raw.remaining,
            retry_after_us: raw.retry_after_us,
            at_us,
            hold_us: draw.hold_at(rules, algorithm, at_us),
            key: key.into(),
            rules: rules.to_vec(),
            draw,
            receipt: raw.receipt,
        })
    }

    /// A plain check (`consume`) or peek of `cost` at `now_us`: (allowed, remaining).
    pub async fn check(
        &self,
        key: &str,
        rules: &[Rule],
        algorithm: Algorithm,
        cost: u64,
        consume: bool,
        now_us: u64,
    ) -> Result<(bool, u64), BackendError> {
        let request = Request {
            algorithm,
            cost: NonZeroU64::new(cost).expect("at least one unit"),
            now_us: Some(clock::explicit_us(now_us)),
            ..Request::new(key, rules, consume)
        };
        let raw = self.run(&request).await?;
        Ok((raw.allowed, raw.remaining))
    }

    /// How long until a check of `cost` at `now_us` would pass (0 when it passes): a peek,
    /// for a test to read its `retry_after`.
    pub async fn retry_after_us(
        &self,
        key: &str,
        rules: &[Rule],
        algorithm: Algorithm,
        cost: u64,
        now_us: u64,
    ) -> Result<u64, BackendError> {
        let peek = Request {
            algorithm,
            now_us: Some(clock::explicit_us(now_us)),
            ..Request::new(key, rules, false)
        };
        let cost = NonZeroU64::new(cost).expect("at least one unit");
        let raw = self.run(&Request { cost, ..peek }).await?;
        Ok(raw.retry_after_us)
    }

    /// Forgets `key`, as an operator's reset does.
    pub async fn reset(&self, key: &str) -> Result<(), BackendError> {
        match &self.0 {
            ProbeStore::Memory(memory) => {
                memory.reset_now(key);
                Ok(())
            }
            #[cfg(feature = "redis")]
            ProbeStore::Redis(redis) => redis.reset(key).await,
        }
    }

    /// Gives back `drawn`: `used_calls` calls and `used_units` units were spent, the last
    /// at `last_spend_us`; at `now_us`.
    pub async fn give_back(
        &self,
        drawn: &Drawn,
        used_calls: u64,
        used_units: u64,
        last_spend_us: u64,
        now_us: u64,
    ) -> Result<(), BackendError> {
        let give_back = GiveBack {
            key: drawn.key.as_str().into(),
            rules: drawn.rules.as_slice().into(),
            draw: drawn.draw,
            receipt: drawn.receipt,
            used_calls,
            used_units,
            last_spend_us,
        };
        match &self.0 {
            ProbeStore::Memory(memory) => {
                memory.give_back(&give_back, Some(clock::explicit_us(now_us)));
                Ok(())
            }
            #[cfg(feature = "redis")]
            ProbeStore::Redis(redis) => redis.give_back(&give_back).await,
        }
    }
}
