//! The one failure policy: what a check answers when its store cannot. The fallbacks
//! count in turn, each while every store before it cannot answer; when none answers, a
//! guarded call goes through (fail-open) or is refused with the error. An open breaker is
//! such a failure, only a sooner one (`backend/redis/breaker.rs`).

use super::Store;
use crate::backend::Request;
use crate::decision::RawDecision;
use crate::observe::{Answer, AnsweredBy};
use crate::throttle::LogThrottle;
use crate::{BackendError, BackendErrorKind};

/// A limiter's failure policy: its fallback stores and whether it fails open.
pub(super) struct Failover {
    /// The stores that count, in turn, while every store before them cannot answer.
    fallbacks: Box<[Store]>,
    /// Whether a guarded call proceeds when no store answers.
    fail_open: bool,
    /// Throttles the warnings of failures.
    warnings: LogThrottle,
}

/// A list's answers, or its one error, with who gave them.
pub(super) type ListAnswer = Result<(Vec<RawDecision>, AnsweredBy), (BackendError, AnsweredBy)>;

impl Failover {
    pub(super) fn new() -> Failover {
        Failover {
            fallbacks: Box::new([]),
            fail_open: true,
            warnings: LogThrottle::new(),
        }
    }

    /// The fallbacks: `own`'s store, then those of its own failover.
    pub(super) fn set_fallback(&mut self, own: Store, failover: Failover) {
        let fallbacks = std::iter::once(own).chain(failover.fallbacks.into_vec());
        self.fallbacks = fallbacks.collect();
    }

    pub(super) fn set_fail_open(&mut self, fail_open: bool) {
        self.fail_open = fail_open;
    }

    pub(super) fn is_fail_open(&self) -> bool {
        self.fail_open
    }

    /// The fallback stores, in the order they are asked.
    pub(super) fn fallbacks(&self) -> &[Store] {
        &self.fallbacks
    }

    /// What a check of `request` answers that failed with `err` on the store answering as
    /// `by`: the first fallback's that answers, or the last error.
    // Only a check of Redis fails: the embedded backend answers at once.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(super) async fn check(
        &self,
        request: &Request<'_>,
        err: BackendError,
        by: AnsweredBy,
    ) -> Answer {
        let answered = self.first_answer(request.key, err, by, |store| store.check(request));
        match answered.await {
            Ok((raw, by)) => Answer {
                result: Ok(raw),
                by,
            },
            Err((err, by)) => Answer {
                result: Err(err),
                by,
            },
        }
    }

    /// What a list `requests` answers that failed with `err` on the store answering as
    /// `by`: as [`check`](Self::check), all or nothing.
    pub(super) async fn check_all(
        &self,
        requests: &[Request<'_>],
        err: BackendError,
        by: AnsweredBy,
    ) -> ListAnswer {
        let key = requests[0].key;
        self.first_answer(key, err, by, |store| store.check_all(requests))
            .await
    }

    /// The answer of the first fallback that gives one to `ask`, after a failure `err` of
    /// the store answering as `by` for `key`; else the last error.
    async fn first_answer<'f, T, F>(
        &'f self,
        key: &str,
        mut err: BackendError,
        mut by: AnsweredBy,
        ask: impl Fn(&'f Store) -> F,
    ) -> Result<(T, AnsweredBy), (BackendError, AnsweredBy)>
    where
        F: std::future::Future<Output = Result<T, BackendError>>,
    {
        for fallback in self.fallbacks.iter() {
            if !hands_over(&err) {
                break;
            }
            self.warn_failed(key, &err, "counting on the fallback");
            by = fallback.answered_by().by_fallback();
            match ask(fallback).await {
                Ok(answer) => return Ok((answer, by)),
                Err(failed) => err = failed,
            }
        }
        Err((err, by))
    }

    /// Whether a guarded call of `key` whose check failed with `err` proceeds: when the
    /// limiter fails open, with a throttled warning.
    pub(super) fn lets_through(&self, key: &str, err: &BackendError) -> bool {
        // A cost the algorithm does not take is refused: letting it through would admit
        // any cost uncounted.
        if !self.fail_open || err.kind() == BackendErrorKind::CostTooLarge {
            return false;
        }
        self.warn_failed(key, err, "letting the call through (fail-open)");
        true
    }

    /// Logs a failure of the check of `key`, and what is done instead, at most once per
    /// [`LogThrottle::INTERVAL`], with the number of failures since the last warning.
    fn warn_failed(&self, key: &str, err: &BackendError, action: &str) {
        let Some(suppressed) = self.warnings.admit() else {
            return;
        };
        // Not a passing failure: it lasts until someone changes the configuration.
        if err.kind() == BackendErrorKind::Misconfigured {
            tracing::error!(
                target: "redis_ratelimit",
                %key,
                error = %err,
                suppressed,
                "rate limiter backend is misconfigured; {action}"
            );
        } else {
            tracing::warn!(
                target: "redis_ratelimit",
                %key,
                error = %err,
                suppressed,
                "rate limiter backend failed; {action}"
            );
        }
    }
}

/// Whether a check that failed with `err` goes to the next store: only a store that
/// cannot answer hands over. An error about the key itself (another algorithm's state)
/// would be the same anywhere.
fn hands_over(err: &BackendError) -> bool {
    err.kind() != BackendErrorKind::Command
}
