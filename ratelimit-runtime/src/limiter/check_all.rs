//! One request, many limits: [`Limiter::check_all`] runs a list of checks as one, all or
//! nothing (see the guide's `check_all` chapter for what each backend does).
//!
//! The list's pipeline is a check's, once for all: observe each check -> answer locally
//! what can be (a cost no algorithm takes, the deny cache) -> ask the backend for every
//! other check at once (breaker, timeout, fallback) -> wait for room when every refusing
//! check asks to -> finish each check (span, metrics, warnings). Allowances are not spent
//! in a list: each of its checks is counted by the backend, so that the list stays all or
//! nothing.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::failover::ListAnswer;
use super::{Limiter, Plan};
use crate::backend::Request;
use crate::decision::RawDecision;
use crate::observe::{Answer, AnsweredBy};
use crate::{random, BackendError, Decision};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Checks of several keys run as one, all or nothing: returned by
/// [`Limiter::check_all`], run when awaited. Answers one [`Decision`] per check, in the
/// order given.
#[must_use = "a list of checks does nothing until it is awaited"]
pub struct CheckAll<'a> {
    checks: usize,
    running: BoxFuture<'a, Result<Vec<Decision>, BackendError>>,
}

impl Limiter {
    /// Runs `checks` as one, **all or nothing**: either every check is admitted and each
    /// consumed its own cost, or none consumed anything. Answers one [`Decision`] per
    /// check, in order; each says whether its own check would pass (`allowed`), with
    /// `retry_after` on those that refuse, so the list was admitted when every decision
    /// is `allowed`. An empty list is admitted (`Ok(vec![])`).
    ///
    /// Each check keeps its own rules, [`cost`](crate::Check::cost),
    /// [`algorithm`](crate::Check::algorithm) (one list may mix them, calendar rules and
    /// rules counting calls included), [`block_for`](crate::Check::block_for) (a check
    /// refused by its own rules starts its own block, whatever the others say) and
    /// [`warn_at`](crate::Check::warn_at) (warned only when the list is admitted). Made by
    /// [`peek`](Limiter::peek), a check in the list consumes nothing but still takes part
    /// in admission: the list is admitted only if the peeked cost would pass too.
    ///
    /// On one Redis server (also behind Sentinel, or every key on one Cluster master and
    /// hash slot) the list is **one round trip**: one script evaluates every key, then
    /// writes every key only if all pass. On a Cluster, the keys of each hash slot are one
    /// script, all sent at once; where one slot's script refused, what the others took is
    /// given back at once (their refunds): never more admitted than a limit, but a refused
    /// list may hold units of the other keys for a round trip. The embedded backend checks
    /// the list under the locks of every key at once.
    ///
    /// What applies to a check applies to each check of the list: the deny cache (a
    /// remembered denial refuses the list without asking the backend for that key; the
    /// others are then peeked, consuming nothing), the breaker, the timeout and the
    /// [`fallback`](Limiter::fallback) (which then counts the whole list). A check's
    /// [`allowance`](crate::Check::allowance) is not spent in a list of two or more: its
    /// units are counted by the backend with the others. A list of one check is that
    /// check alone, run as awaiting it runs it (its allowance spent, its limiter's). A check's [`wait`](crate::Check::wait)
    /// waits for the whole list: when every refusing check has a wait budget that its
    /// `retry_after` fits in, the list sleeps for the longest of them and is checked again,
    /// within the shortest of those budgets.
    ///
    /// The decisions are the checks' own: [`refund`](Limiter::refund),
    /// [`settle`](Limiter::settle) and a guarded site's `charge_if` of one give back to
    /// that check's key alone. Checks are counted by this limiter, whichever made them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Algorithm, Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const PER_IP: [Rule; 1] = [Rule::per_minute(100)];
    /// const PER_TENANT: [Rule; 1] = [Rule::new(3, Duration::from_secs(60))];
    /// let limiter = Limiter::memory();
    /// let ds = limiter
    ///     .check_all([
    ///         limiter.check("ip:203.0.113.9", &PER_IP),
    ///         limiter.check("tenant:acme", &PER_TENANT).cost(3).algorithm(Algorithm::TokenBucket),
    ///     ])
    ///     .await?;
    /// assert!(ds.iter().all(|d| d.allowed));
    /// // The tenant has nothing left: the next request is refused, and its IP keeps
    /// // what it had (99 of 100).
    /// let ds = limiter
    ///     .check_all([
    ///         limiter.check("ip:203.0.113.9", &PER_IP),
    ///         limiter.check("tenant:acme", &PER_TENANT).algorithm(Algorithm::TokenBucket),
    ///     ])
    ///     .await?;
    /// assert_eq!((ds[0].allowed, ds[1].allowed), (true, false));
    /// assert_eq!(limiter.peek("ip:203.0.113.9", &PER_IP).await?.remaining, 99);
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// When a check's rules are empty (when awaited), as a check alone does.
    pub fn check_all<'a>(
        &'a self,
        checks: impl IntoIterator<Item = crate::Check<'a>>,
    ) -> CheckAll<'a> {
        let mut checks: Vec<crate::Check<'a>> = checks.into_iter().collect();
        if checks.len() == 1 {
            // A list of one is that check alone: all or nothing holds trivially, and its
            // allowance and wait apply as they do to the check.
            let check = checks.pop().expect("one check");
            return CheckAll {
                checks: 1,
                running: Box::pin(async move { Ok(vec![check.await?]) }),
            };
        }
        let plans: Vec<Plan<'a>> = checks.into_iter().map(crate::Check::into_plan).collect();
        CheckAll {
            checks: plans.len(),
            running: Box::pin(self.run_all(plans)),
        }
    }

    /// The pipeline of a programmatic list: its decisions, or the backend's error.
    async fn run_all(&self, plans: Vec<Plan<'_>>) -> Result<Vec<Decision>, BackendError> {
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        assert!(
            plans.iter().all(|plan| !plan.request().rules.is_empty()),
            "a rate-limit check needs at least one rule"
        );
        let answers = self.answer_plans(&plans).await;
        let mut decisions = Vec::with_capacity(plans.len());
        for (plan, answer) in plans.iter().zip(answers) {
            decisions.push(super::decided(answer.result, plan.request().rules)?);
        }
        Ok(decisions)
    }

    /// Every plan's answer, observed and reported: the list's pipeline. The answers are
    /// all or nothing: every one allowed and counted, or none counted; all errors when
    /// the backend failed.
    pub(crate) async fn answer_plans(&self, plans: &[Plan<'_>]) -> Vec<Answer> {
        let observations: Vec<_> = plans.iter().map(Plan::observe).collect();
        let requests: Vec<Request<'_>> = plans.iter().map(|plan| listed(plan.request())).collect();
        let mut answers = self.answer_all(&requests).await;
        if let Some(budget) = list_wait(plans) {
            answers = self.wait_for_all(&requests, plans, budget, answers).await;
        }
        for ((plan, observation), answer) in plans.iter().zip(observations).zip(&answers) {
            plan.report_answer(answer);
            observation.finish(answer, plan.request().rules);
        }
        answers
    }

    /// Checks `requests` again while every refusing one's wait fits, up to `budget`.
    async fn wait_for_all(
        &self,
        requests: &[Request<'_>],
        plans: &[Plan<'_>],
        budget: Duration,
        mut answers: Vec<Answer>,
    ) -> Vec<Answer> {
        let deadline = tokio::time::Instant::now() + budget;
        while let Some(pause) = pause_all(plans, &answers, deadline - tokio::time::Instant::now()) {
            tokio::time::sleep(pause).await;
            answers = self.answer_all(requests).await;
        }
        answers
    }

    /// One attempt at every request of a list, all or nothing.
    pub(crate) async fn answer_all(&self, requests: &[Request<'_>]) -> Vec<Answer> {
        self.unused.warn_once(&self.store);
        // Every check of a list that failed fails alike: the first with the error itself.
        let failed = |err: BackendError, by| {
            let again = |_| BackendError::new(err.kind(), err.to_string());
            let copies: Vec<BackendError> = (1..requests.len()).map(again).collect();
            std::iter::once(err)
                .chain(copies)
                .map(|err| Answer {
                    result: Err(err),
                    by,
                })
                .collect()
        };
        if let Some(request) = requests.iter().find(|r| !r.algorithm.takes(r.cost.get())) {
            return failed(
                BackendError::cost_too_large(request.cost.get()),
                self.answered_by(),
            );
        }
        // A remembered denial refuses the list at once; the other checks are then only
        // peeked, so that each decision still says whether its own check would pass.
        let mut cached: Vec<Option<RawDecision>> = match &self.deny_cache {
            Some(cache) => requests.iter().map(|r| cache.lookup(r)).collect(),
            None => Vec::new(),
        };
        let denied_here = cached.iter().any(Option::is_some);
        let asked: Vec<Request<'_>>;
        let sent = match denied_here {
            false => requests,
            true => {
                asked = requests
                    .iter()
                    .zip(&cached)
                    .filter(|(_, cached)| cached.is_none())
                    .map(|(request, _)| Request {
                        consume: false,
                        ..*request
                    })
                    .collect();
                &asked[..]
            }
        };
        let (raws, by) = match self.store_check_all(sent).await {
            Ok(answered) => answered,
            Err((err, by)) => return failed(err, by),
        };
        let mut raws = raws.into_iter();
        let mut answers = Vec::with_capacity(requests.len());
        for (i, request) in requests.iter().enumerate() {
            match cached.get_mut(i).and_then(Option::take) {
                Some(denial) => answers.push(Answer {
                    result: Ok(denial),
                    by: AnsweredBy::LOCAL,
                }),
                None => {
                    let raw = raws.next().expect("one answer per request sent");
                    let answer = self.decided(request, Ok(raw));
                    answers.push(Answer { by, ..answer });
                }
            }
        }
        answers
    }

    /// The store's answers to `requests`, all or nothing; the fallbacks' while it cannot
    /// answer.
    async fn store_check_all(&self, requests: &[Request<'_>]) -> ListAnswer {
        let by = self.answered_by();
        if requests.is_empty() {
            return Ok((Vec::new(), by));
        }
        match self.store.check_all(requests).await {
            Ok(raws) => Ok((raws, by)),
            Err(err) => self.failover.check_all(requests, err, by).await,
        }
    }
}

/// `request` as a list counts it: its allowance unspent (see the module's comment).
fn listed<'a>(request: &Request<'a>) -> Request<'a> {
    Request {
        allowance_ms: 0,
        ..*request
    }
}

/// The longest a list of `plans` may wait for room: the shortest wait budget of its
/// checks that have one; `None` when none has.
fn list_wait(plans: &[Plan<'_>]) -> Option<Duration> {
    plans.iter().filter_map(Plan::wait_budget).min()
}

/// How long a list refused with `answers` sleeps before it is checked again, with `left`
/// of its budget: the longest `retry_after` of its refusing checks, plus a little jitter,
/// when every refusing check waits (has a budget) and each such retry fits in `left`;
/// `None` when the list was admitted or is to be answered now.
fn pause_all(plans: &[Plan<'_>], answers: &[Answer], left: Duration) -> Option<Duration> {
    let mut longest = None;
    for (plan, answer) in plans.iter().zip(answers) {
        let raw = answer.result.as_ref().ok()?;
        if raw.allowed {
            continue;
        }
        plan.wait_budget()?;
        let retry = raw.retry_after()?;
        if retry > left {
            return None;
        }
        longest = longest.max(Some(retry));
    }
    let retry = longest?;
    let spread = (retry / 10)
        .min(Duration::from_millis(50))
        .min(left - retry);
    Some(retry + spread.mul_f64(random::fraction()))
}

impl Future for CheckAll<'_> {
    type Output = Result<Vec<Decision>, BackendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.running.as_mut().poll(cx)
    }
}

impl fmt::Debug for CheckAll<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckAll")
            .field("checks", &self.checks)
            .finish_non_exhaustive()
    }
}
