//! One attempt at a check: answered now (deny cache, allowance, embedded backend) or
//! asked of Redis, with the fallback on failure.

#[cfg(feature = "redis")]
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "redis")]
use super::allowance::Admission;
use super::allowance::{Drawn, Step};
use super::{allowance, misconfigured, Limiter, Store};
#[cfg(feature = "redis")]
use crate::backend::redis::RedisBackend;
use crate::backend::Request;
use crate::decision::{Bound, RawDecision};
use crate::observe::{Answer, AnsweredBy};
use crate::{BackendError, Rule};

impl Limiter {
    /// Reports the crossings of a check of `key` by `site` (see [`on_warning`](Self::on_warning)).
    #[cold]
    pub(crate) fn warned(
        &self,
        site: &str,
        key: &str,
        rules: &[Rule],
        crossings: &[crate::warning::Crossing],
    ) {
        crate::warning::report(self.warning_hook.as_ref(), site, key, rules, crossings);
    }

    /// Where a slot is kept that a decision with `receipt` took: the backend that counted
    /// it (this limiter's, or a fallback).
    pub(crate) fn slot_store(&self, receipt: &crate::decision::Receipt) -> Option<Store> {
        self.counter_of(receipt.counted_by)?.slot_store()
    }

    /// The answer to `request` when it needs no waiting: a cached denial, a call admitted
    /// from its allowance, or a check of the embedded backend, which is synchronous. `site`
    /// counts the allowance's draws.
    #[inline]
    pub(crate) fn answer_now(&self, request: &Request<'_>, site: &'static str) -> Now {
        self.unused.warn_once(&self.store);
        if !request.algorithm.takes(request.cost.get()) {
            return Now::Answered(Answer {
                result: Err(BackendError::cost_too_large(request.cost.get())),
                by: self.answered_by(),
            });
        }
        if let Some(denial) = self.deny_cache.as_ref().and_then(|c| c.lookup(request)) {
            return Now::Answered(Answer {
                result: Ok(denial),
                by: AnsweredBy::LOCAL,
            });
        }
        let spends = spends_allowance(request);
        let raw = match &self.store {
            // Only on the embedded backend standing for a remote one (see `allowance_ms`).
            Store::Memory(memory) if spends => {
                let answer = self.with_allowance(request, site);
                let answer = now_or_never(answer).expect("the embedded backend answers at once");
                for retired in self.allowances.live.take_retired() {
                    memory.give_back(&retired, request.now_us);
                }
                return Now::Answered(self.answered(request, answer));
            }
            Store::Memory(memory) => memory.check_now(request),
            Store::Misconfigured(err) => Err(misconfigured(err)),
            #[cfg(feature = "redis")]
            Store::Redis(redis) => {
                let admission = spends.then(|| self.allowances.live.admit(request));
                let spends = match admission {
                    Some(Admission::Local(raw)) => {
                        return Now::Answered(Answer {
                            result: Ok(raw),
                            by: AnsweredBy::LOCAL,
                        })
                    }
                    // A key that is not warm: the plain check, at the plain check's cost.
                    Some(Admission::Alone) => {
                        count_draw(site);
                        false
                    }
                    Some(Admission::Step) => true,
                    None => false,
                };
                return Now::Ask(Arc::clone(redis), spends);
            }
        };
        Now::Answered(self.decided(request, raw))
    }

    /// The allowance of a check whose own (a check's, else its site's) is `own`: that one,
    /// else this limiter's default; none where checks spend no allowance. In ms, 0 for
    /// none.
    #[inline]
    pub(crate) fn allowance_ms(&self, own: Option<Duration>) -> u32 {
        self.allowances.ms(own)
    }

    /// One attempt at `request` (made by `site`): answered now, or asked of Redis (and,
    /// when Redis cannot answer, of the fallback).
    pub(crate) async fn answer(&self, request: Request<'_>, site: &'static str) -> Answer {
        match self.answer_now(&request, site) {
            Now::Answered(answer) => answer,
            #[cfg(feature = "redis")]
            Now::Ask(redis, spends) => self.ask(&redis, request, site, spends).await,
        }
    }

    #[cfg(feature = "redis")]
    pub(crate) async fn ask(
        &self,
        redis: &RedisBackend,
        request: Request<'_>,
        site: &'static str,
        spends: bool,
    ) -> Answer {
        let asked = match spends {
            true => self.with_allowance(&request, site).await,
            false => redis
                .check(&request)
                .await
                .map(|raw| (raw, self.answered_by())),
        };
        match asked {
            Ok(answer) => self.answered(&request, Ok(answer)),
            Err(err) => {
                let by = self.answered_by();
                self.failover.check(&request, err, by).await
            }
        }
    }

    /// A check that spends an allowance: admitted from the key's allowance, or from the
    /// draw it makes (or waits for), or sent alone near the limit.
    // Without Redis nothing is waited for: the loop is left at once.
    #[cfg_attr(not(feature = "redis"), allow(clippy::never_loop))]
    async fn with_allowance(
        &self,
        request: &Request<'_>,
        site: &'static str,
    ) -> Result<(RawDecision, AnsweredBy), BackendError> {
        let by_backend = self.answered_by();
        loop {
            let ticket = match self.allowances.live.step(request) {
                Step::Local(raw) => return Ok((raw, AnsweredBy::LOCAL)),
                Step::Wait(drawing) => match &self.store {
                    #[cfg(feature = "redis")]
                    Store::Redis(_) => {
                        let mut drawing = drawing;
                        // Ends with the draw: answered, failed, or dropped with its check.
                        let _ = drawing.changed().await;
                        match allowance::answered(&drawing) {
                            true => continue,
                            false => allowance::Ticket::alone(request),
                        }
                    }
                    // Answered at once: nothing to wait for but another thread's draw.
                    Store::Memory(_) | Store::Misconfigured(_) => {
                        drop(drawing);
                        allowance::Ticket::alone(request)
                    }
                },
                Step::Ask(ticket) => ticket,
            };
            count_draw(site);
            #[cfg(feature = "redis")]
            let drew = ticket.draw.is_some();
            let drawing = Request {
                draw: ticket.draw.as_ref(),
                cost: ticket.units,
                // A draw larger than the check is refused for its size, not the check:
                // no block, no denial to remember; the check alone is asked next.
                lockout: request.lockout.filter(|_| ticket.draw.is_none()),
                refundable: request.refundable || ticket.draw.is_some(),
                ..*request
            };
            let raw = self.store.check(&drawing).await?;
            let drawn = self.allowances.live.drawn(request, ticket, raw);
            // Once a draw made an allowance to give back: started for every check sent
            // alone, the task would be spawned, and end at once, for each.
            #[cfg(feature = "redis")]
            if let (true, Store::Redis(redis)) = (drew, &self.store) {
                self.ensure_giving_back(redis);
            }
            match drawn {
                Drawn::Answer(raw) => return Ok((raw, by_backend)),
                Drawn::Retry => {
                    count_draw(site);
                    let raw = self.store.check(request).await?;
                    self.allowances.live.learn(request, &raw);
                    return Ok((raw, by_backend));
                }
            }
        }
    }

    /// Starts the task that gives allowances back at the end of their life, on the current
    /// Tokio runtime, unless it runs (see `background.rs`).
    #[cfg(feature = "redis")]
    fn ensure_giving_back(&self, redis: &Arc<RedisBackend>) {
        crate::background::start(&self.allowances.live, |hold| {
            allowance::give_backs(hold, Arc::downgrade(redis))
        });
    }

    /// The answer to `request`, by whoever gave it: a denial the backend gave is
    /// remembered by the deny cache.
    fn answered(
        &self,
        request: &Request<'_>,
        asked: Result<(RawDecision, AnsweredBy), BackendError>,
    ) -> Answer {
        match asked {
            Ok((raw, by)) => Answer {
                by,
                ..self.decided(request, Ok(raw))
            },
            Err(err) => self.decided(request, Err(err)),
        }
    }

    /// This limiter's own answer to `request`, from its backend's `raw` one.
    #[inline]
    pub(super) fn decided(
        &self,
        request: &Request<'_>,
        raw: Result<RawDecision, BackendError>,
    ) -> Answer {
        if let (Some(cache), Ok(raw)) = (&self.deny_cache, &raw) {
            // A refusal for want of a slot says nothing of when one frees: not cached.
            if raw.bound == Bound::Rule {
                cache.remember(request, raw);
            }
        }
        Answer {
            result: raw,
            by: self.answered_by(),
        }
    }

    /// The `backend` label of this limiter's own answers (a misconfigured limiter is a Redis
    /// one whose URL was invalid).
    pub(super) fn answered_by(&self) -> AnsweredBy {
        self.store.answered_by()
    }

    /// Whether a guarded call of `key` whose check failed with `err` proceeds (see
    /// `failover.rs`, the one failure policy).
    pub(crate) fn lets_through(&self, key: &str, err: &BackendError) -> bool {
        self.failover.lets_through(key, err)
    }
}

/// Whether `request` spends an allowance: a consuming check that has one and takes no
/// slot (slots and peeks always go to the backend).
#[inline]
fn spends_allowance(request: &Request<'_>) -> bool {
    request.allowance_ms > 0 && request.consume && request.slot.is_none() && request.draw.is_none()
}

/// Counts one round trip of a check with an allowance made for `site`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
fn count_draw(site: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("ratelimit_allowance_draws_total", "site" => site).increment(1);
}

/// The output of `future` if it is ready at its first poll.
fn now_or_never<F: std::future::Future>(future: F) -> Option<F::Output> {
    let future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// What [`Limiter::answer_now`] found.
pub(crate) enum Now {
    /// Answered without waiting: a cached denial, the embedded backend, a misconfiguration.
    Answered(Answer),
    /// Only Redis can answer; `true`: through the key's allowance (see
    /// `Allowances::admit`).
    #[cfg(feature = "redis")]
    Ask(Arc<RedisBackend>, bool),
}
