//! What goes back after a check: refunds, settles and allowance give-backs.

use std::num::NonZeroU64;
#[cfg(feature = "test-clock")]
use std::time::Duration;

use super::Limiter;
use crate::backend::{GiveBack, Refund, Request, Settle};
use crate::decision::CountedBy;
use crate::{BackendError, Decision, Rule};

impl Limiter {
    /// Gives back, at once, every allowance this limiter holds: what they did not use
    /// stops counting in the backend, what they used counts as spent when it was. Call it
    /// at shutdown, after the last check; a check after it draws again. Batched: one round
    /// trip per key, sent concurrently.
    ///
    /// ```
    /// use redis_ratelimit::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::memory(); // holds none: nothing to give back
    /// limiter.release_allowances().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When a give-back cannot reach the backend: what it held then stays counted as
    /// spent until its windows pass (the safe side). The others are still given back.
    pub async fn release_allowances(&self) -> Result<(), BackendError> {
        self.give_back(self.allowances.live.release_all()).await
    }

    /// How many round trips this limiter's checks with an allowance have made (draws, and
    /// checks sent alone near a limit). For tests and benchmarks.
    #[doc(hidden)]
    pub fn allowance_draws(&self) -> u64 {
        self.allowances.live.draws()
    }

    /// Gives back the allowances whose life has ended by the local clock, as the give-back
    /// task does.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub async fn give_back_due(&self) -> Result<(), BackendError> {
        self.give_back(self.allowances.live.collect_due()).await
    }

    /// Sends the give-backs of `retired` allowances, concurrently, at the backend's clock.
    pub(super) async fn give_back(&self, retired: Vec<GiveBack>) -> Result<(), BackendError> {
        if retired.is_empty() {
            return Ok(());
        }
        self.store.give_back(&retired).await
    }

    /// Gives back exactly the units `decision` took from `key` under `rules`: a no-op for a
    /// denied decision (which took nothing) and once the units have left every window.
    /// Never gives back twice: the sliding log removes exactly the entries of that check,
    /// so a repeated refund changes nothing; the other algorithms count units without
    /// names, so the limiter remembers the decisions it refunded (its last 4096 refunds)
    /// and ignores a repeated one, and gives back only what the key still holds in the
    /// same window (or has not refilled). A refund whose connection broke is not sent again
    /// blindly (its units then stay used, the safe side). A decision counted by the
    /// [`fallback`](Self::fallback) is refunded there.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const EXPORTS: [Rule; 1] = [Rule::new(10, Duration::from_secs(3600))];
    /// let limiter = Limiter::memory();
    /// let d = limiter.check("exports:acme", &EXPORTS).cost(3).await?;
    /// assert_eq!(d.remaining, 7);
    /// // The export failed before doing any work: it should not count.
    /// limiter.refund("exports:acme", &EXPORTS, &d).await?;
    /// assert_eq!(limiter.peek("exports:acme", &EXPORTS).await?.remaining, 10);
    /// # Ok(()) }
    /// ```
    pub async fn refund(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
    ) -> Result<(), BackendError> {
        self.refund_at_us(key, rules, decision, None).await
    }

    /// [`refund`](Self::refund) at an explicit time instead of the backend's clock, as
    /// [`Check::at`](crate::Check::at) checks. For differential tests only.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub async fn refund_at(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        now: Duration,
    ) -> Result<(), BackendError> {
        self.refund_at_us(key, rules, decision, Some(crate::clock::micros(now)))
            .await
    }

    /// A refund at `now_us` (`None`: the backend's clock).
    pub(super) async fn refund_at_us(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        now_us: Option<u64>,
    ) -> Result<(), BackendError> {
        let receipt = decision.receipt();
        if receipt.is_empty() {
            return Ok(());
        }
        if receipt.counted_by == CountedBy::Allowance {
            // Back to its allowance while it lives, once: an allowance, unlike the sliding
            // log's entries, has no names to make a second refund a no-op. Once given back,
            // the call stays used.
            if self.refunds.first_settle(key, receipt) {
                self.allowances.live.settle_local(key, rules, receipt, None);
            }
            return Ok(());
        }
        if !self.refunds.first(key, receipt) {
            return Ok(());
        }
        let Some(counter) = self.counter_of(receipt.counted_by) else {
            return Ok(());
        };
        let refund = Refund {
            key,
            rules,
            receipt: *receipt,
            now_us,
        };
        counter.refund(&refund).await?;
        self.forget_denial(key);
        Ok(())
    }

    /// Forgets the deny cache's denial of `key` once a settle, refund, block or reset
    /// changed what it holds: the next check asks the backend.
    pub(super) fn forget_denial(&self, key: &str) {
        if let Some(cache) = &self.deny_cache {
            cache.forget(key);
        }
    }

    /// Settles the cost `decision` reserved at the call's `actual` cost, in every rule of
    /// `rules` counting units (rules counting calls keep their one), and answers how `key`
    /// stands after it, as a [`peek`](Self::peek) of cost 1 would: `remaining` under the
    /// binding rule, `reset_after`, and whether a call of one unit passes now. One round
    /// trip on Redis.
    ///
    /// - `actual` below the reservation gives back the difference, as far as the key still
    ///   counts it (a window that has moved on has nothing to give back);
    /// - `actual` above it takes the difference at once, **even past a rule's count**: the
    ///   work is done, so the rule is in debt, and later calls are refused until the
    ///   window has room again (their `retry_after` says when);
    /// - equal changes nothing; a denied decision (which reserved nothing) settles nothing
    ///   and is answered as it is.
    ///
    /// Each algorithm counts the settled cost as if the check had used `actual` units when
    /// it was counted; the token bucket takes an excess from now. A decision is settled
    /// (or [refunded](Self::refund)) once: the limiter remembers its last 4096 settles and
    /// refunds and ignores a repeated one. A settle whose connection broke is not sent
    /// again blindly (its reservation then stays, the safe side), but for the sliding log's,
    /// which settles the check's own entries by name and may run twice.
    ///
    /// Under any concurrency, when every reservation is at least its call's actual cost,
    /// no rule ever holds more than its count.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 60 calls and 90,000 tokens a minute.
    /// const LLM: [Rule; 2] = [Rule::per_minute(60).calls(), Rule::per_minute(90_000)];
    /// let limiter = Limiter::memory();
    /// let reserved = limiter.check("llm:ann", &LLM).cost(4_000).await?; // max_tokens
    /// assert!(reserved.allowed);
    /// // The completion used 1,250 tokens: 2,750 go back.
    /// let after = limiter.settle("llm:ann", &LLM, &reserved, 1_250).await?;
    /// assert_eq!((after.rule_index, after.remaining), (0, 59)); // the calls rule binds
    /// let tokens = limiter.peek("llm:ann", &LLM[1..]).await?;
    /// assert_eq!(tokens.remaining, 90_000 - 1_250);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When the backend cannot answer; the reservation then stays as it was.
    pub async fn settle(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        actual: u64,
    ) -> Result<Decision, BackendError> {
        self.settle_at_us(key, rules, decision, actual, None).await
    }

    /// [`settle`](Self::settle) at an explicit time instead of the backend's clock, as
    /// [`Check::at`](crate::Check::at) checks. For differential tests only.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub async fn settle_at(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        actual: u64,
        now: Duration,
    ) -> Result<Decision, BackendError> {
        let now_us = Some(crate::clock::explicit_us(crate::clock::micros(now)));
        self.settle_at_us(key, rules, decision, actual, now_us)
            .await
    }

    /// A settle at `now_us` (`None`: the backend's clock).
    pub(super) async fn settle_at_us(
        &self,
        key: &str,
        rules: &[Rule],
        decision: &Decision,
        actual: u64,
        now_us: Option<NonZeroU64>,
    ) -> Result<Decision, BackendError> {
        let receipt = decision.receipt();
        if !receipt.algorithm.takes(actual) {
            return Err(BackendError::cost_too_large(actual));
        }
        if receipt.is_empty() || !self.refunds.first_settle(key, receipt) {
            return Ok(*decision);
        }
        if receipt.counted_by == CountedBy::Allowance {
            let settled = self
                .allowances
                .live
                .settle_local(key, rules, receipt, Some(actual));
            return Ok(settled.map_or(*decision, |raw| raw.into_decision(rules)));
        }
        let peek = Request {
            algorithm: receipt.algorithm,
            now_us,
            ..Request::new(key, rules, false)
        };
        let Some(counter) = self.counter_of(receipt.counted_by) else {
            return Ok(*decision);
        };
        let settle = Settle {
            peek,
            receipt: *receipt,
            actual,
        };
        let settled = counter.settle(&settle).await?;
        self.forget_denial(key);
        Ok(settled.map_or(*decision, |raw| raw.into_decision(rules)))
    }
}
