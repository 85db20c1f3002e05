//! The check pipeline. Every check runs through a [`Plan`]: a programmatic one as a
//! [`Check`] future, a guarded call's (an attribute's or a layer guard's) through the
//! guarded step in `site.rs`, which adds what only guarded sites have (modes, shadow,
//! fail-open).
//!
//! observe -> answer now (deny cache, embedded backend) -> ask Redis (breaker, timeout,
//! fallback) -> wait for room when asked to -> finish (span, metrics). The first two steps
//! are synchronous ([`Plan::begin`]): an answer found there costs no future and no
//! allocation; the rest ([`Plan::resume`]) is one boxed future.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tracing::Instrument as _;

use super::{Limiter, Now};
use crate::backend::Request;
use crate::concurrency::SlotAsk;
use crate::decision::RawDecision;
use crate::lockout::Lockout;
use crate::observe::{Answer, Checker, Observation};
use crate::{clock, random, Algorithm, BackendError, Decision, Rule};

/// A check (or peek) of one key: returned by [`Limiter::check`] and [`Limiter::peek`],
/// refined with [`cost`](Check::cost), [`algorithm`](Check::algorithm),
/// [`wait`](Check::wait), [`block_for`](Check::block_for) and
/// [`allowance`](Check::allowance), and run when awaited (or
/// polled, e.g. by `Runtime::block_on`).
#[must_use = "a check does nothing until it is awaited"]
pub struct Check<'a> {
    // The plan is kept whole, so that the check begins from it in place. A check is moved
    // into its caller's future, and at 128 bytes or fewer it moves without a call to
    // `memcpy` (hence the packed `OnDenial`).
    plan: Plan<'a>,
    /// The rest of the check once it could not be answered at once.
    running: Option<BoxFuture<'a, Result<Decision, BackendError>>>,
}

const _: () = assert!(std::mem::size_of::<Check<'static>>() <= 128);

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The future `make` builds, on the heap, written straight into its allocation:
/// `Box::pin(future)` builds it on the stack first and copies it there, and a check that
/// waits for Redis is a future of several KB.
#[inline(always)]
pub(crate) fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// What a check is to do, and how: everything but its progress. A guarded call runs its
/// steps itself (see `site.rs`), so that an answer at hand costs it no future.
#[derive(Clone, Copy)]
pub(crate) struct Plan<'a> {
    limiter: &'a Limiter,
    request: Request<'a>,
    /// Who makes the check: a guarded site, or the caller of `check`/`peek`.
    site: Checker,
    /// What a denial does.
    on_denial: OnDenial,
}

/// What a check's denial does: it is the answer, it is waited out for up to a budget, or
/// it is reported as a would-be refusal and never waited out (a shadow site's check).
/// Packed in 8 bytes (0, the budget in µs, `u64::MAX`), which keep a check within 128
/// with a request that may take a slot or draw an allowance; read through its methods.
#[derive(Clone, Copy, PartialEq, Eq)]
struct OnDenial(u64);

impl OnDenial {
    const ANSWER: OnDenial = OnDenial(0);
    const SHADOW: OnDenial = OnDenial(u64::MAX);

    /// Waiting up to `wait` for room, if at all: a budget of 0 waits for nothing, as 1 µs
    /// does.
    fn wait(wait: Option<Duration>) -> Self {
        wait.map_or(Self::ANSWER, |budget| {
            OnDenial(clock::micros(budget).clamp(1, u64::MAX - 1))
        })
    }

    /// How long a denial is waited out, if it is.
    fn budget(self) -> Option<Duration> {
        (self != Self::ANSWER && self != Self::SHADOW).then(|| Duration::from_micros(self.0))
    }
}

/// What the first, synchronous step of a check found.
pub(crate) enum Begun {
    /// The answer, observed: a cached denial, the embedded backend's, a misconfiguration.
    /// Still the backend's: see [`decided`].
    Answered(Result<RawDecision, BackendError>),
    /// Redis must answer, or a denial is to be waited out: see [`Plan::resume`].
    Waits(Waits),
}

/// A check begun that waits. Borrows nothing, so that the rest of the check can be moved
/// into a future that owns its key.
pub(crate) struct Waits {
    first: Now,
    observation: Observation,
}

impl<'a> Check<'a> {
    #[inline]
    pub(super) fn new(limiter: &'a Limiter, request: Request<'a>) -> Self {
        Check {
            plan: Plan {
                limiter,
                request: Request {
                    allowance_ms: limiter.allowance_ms(None),
                    ..request
                },
                site: Checker::Programmatic,
                on_denial: OnDenial::ANSWER,
            },
            running: None,
        }
    }

    /// How many units of every rule the call uses (default 1). The call uses all of them
    /// under every rule, or nothing: a denial consumes nothing. A cost above a rule's count
    /// can never pass: it is denied with `retry_after: None`.
    ///
    /// # Panics
    ///
    /// When `cost` is 0.
    #[inline]
    pub fn cost(mut self, cost: u64) -> Self {
        self.plan.request.cost = NonZeroU64::new(cost).expect("a check's cost must be at least 1");
        self
    }

    /// How the rules are counted (default [`Algorithm::SlidingLog`]). Use one algorithm per
    /// key: each keeps its own kind of state.
    #[inline]
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.plan.request.algorithm = algorithm;
        self
    }

    /// Waits up to `budget` for room instead of answering a denial at once: a denial whose
    /// `retry_after` fits in what is left of the budget sleeps that long (plus a little
    /// jitter, so that waiters do not return in one burst) and checks again. A denial that
    /// does not fit, or that can never pass (`retry_after: None`), is answered at once.
    /// Only the admitted attempt counts; a waiting check holds no lock and no connection
    /// while it sleeps. Waiters are not served in order of arrival.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const API: [Rule; 1] = [Rule::new(1, Duration::from_millis(50))];
    /// let limiter = Limiter::memory();
    /// assert!(limiter.check("partner-api", &API).await?.allowed);
    /// // The next call would be refused for up to 50 ms: it waits for its turn instead.
    /// let d = limiter.check("partner-api", &API).wait(Duration::from_secs(2)).await?;
    /// assert!(d.allowed);
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn wait(mut self, budget: Duration) -> Self {
        self.plan.on_denial = OnDenial::wait(Some(budget));
        self
    }

    /// Once a check of this key is refused by any rule, refuses every check of the key
    /// for `duration` from then, with `retry_after` = what is left of the block. The block
    /// is kept with the key's state in the backend, so every instance sees it; blocked
    /// checks consume nothing; [`Limiter::reset`] lifts it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const LOGIN: [Rule; 1] = [Rule::new(3, Duration::from_secs(60))];
    /// let limiter = Limiter::memory();
    /// let lockout = Duration::from_secs(900);
    /// for _ in 0..3 {
    ///     assert!(limiter.check("login:tom", &LOGIN).block_for(lockout).await?.allowed);
    /// }
    /// let refused = limiter.check("login:tom", &LOGIN).block_for(lockout).await?;
    /// assert!(refused.retry_after > Some(Duration::from_secs(60))); // locked out
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn block_for(mut self, duration: Duration) -> Self {
        self.plan.request.lockout = Lockout::For(duration).packed();
        self
    }

    /// Locks the key out for longer each time it earns it: once a check of this key is
    /// refused by a rule, every check of the key is refused for the nth duration of
    /// `schedule` from then, n being how many lock-outs the key has had in a row, each
    /// starting within 24 hours of the end of the one before (the last duration repeats;
    /// a key that stays out of trouble for 24 hours after a lock-out starts again at the
    /// first). Refusals during a lock-out consume nothing and start no other. The streak
    /// is kept with the key's state in the backend, so every instance sees it (on Redis
    /// in the key itself, Cluster-safe); the key lives 24 hours past its last lock-out to
    /// remember it; [`Limiter::reset`] forgets both. A schedule of one duration is
    /// [`block_for`](Self::block_for).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const LOGIN: [Rule; 1] = [Rule::new(3, Duration::from_secs(60))];
    /// static LOCKOUTS: [Duration; 3] =
    ///     [Duration::from_secs(60), Duration::from_secs(600), Duration::from_secs(3600)];
    /// let limiter = Limiter::memory();
    /// for _ in 0..3 {
    ///     limiter.check("login:tom", &LOGIN).block_schedule(&LOCKOUTS).await?;
    /// }
    /// let refused = limiter.check("login:tom", &LOGIN).block_schedule(&LOCKOUTS).await?;
    /// assert_eq!(refused.retry_after, Some(Duration::from_secs(60))); // the first: 1 minute
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// When `schedule` is empty, or holds a duration under 1 ms or over
    /// [`Rule::MAX_WINDOW`](crate::Rule::MAX_WINDOW).
    #[inline]
    pub fn block_schedule(mut self, schedule: &'static [Duration]) -> Self {
        self.plan.request.lockout = Lockout::of_schedule(schedule).packed();
        self
    }

    /// Warns when this check takes a rule from below `percent` % of its count to at or
    /// above it: the limiter's [`on_warning`](Limiter::on_warning) hook runs, with an
    /// `INFO` event and counter `ratelimit_warnings_total{site, rule}`. The backend
    /// decides it under the key's lock, so of all the checks of every instance only the
    /// one that crossed warns. A peek never warns.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const BUDGET: [Rule; 1] = [Rule::per_minute(10)];
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let heard = Arc::clone(&seen);
    /// let limiter = Limiter::memory().on_warning(move |w| heard.lock().unwrap().push(w.used));
    /// for _ in 0..10 {
    ///     limiter.check("tenant:acme", &BUDGET).warn_at(80).await?;
    /// }
    /// assert_eq!(*seen.lock().unwrap(), [8]); // once, as the 8th call of 10 crossed 80 %
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// When `percent` is 0 or above 99.
    #[inline]
    pub fn warn_at(mut self, percent: u8) -> Self {
        self.plan.request.warn_at = checked_warn_at(percent);
        self
    }

    /// Admits this check, and the checks of its key and rules that follow, from a local
    /// allowance living up to `max_age`, instead of the limiter's default
    /// ([`Limiter::allowance`], which says what it does); `Duration::ZERO` turns it off for
    /// this check. A [`peek`](Limiter::peek) ignores it: it always asks the backend.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_ratelimit::{Limiter, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const SEARCH: [Rule; 1] = [Rule::per_second(1000)];
    /// let limiter = Limiter::memory();
    /// let d = limiter.check("search:acme", &SEARCH).allowance(Duration::from_millis(250)).await?;
    /// assert!(d.allowed);
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn allowance(mut self, max_age: Duration) -> Self {
        self.plan.request.allowance_ms = self.plan.limiter.allowance_ms(Some(max_age));
        self
    }

    /// Runs the check at an explicit time (since the epoch) instead of the backend's
    /// clock. For differential tests only.
    #[cfg(feature = "test-clock")]
    #[doc(hidden)]
    pub fn at(mut self, now: Duration) -> Self {
        self.plan.request.now_us = Some(clock::explicit_us(clock::micros(now)));
        self
    }
}

impl<'a> Check<'a> {
    /// The check's plan, for a list of checks run as one (`check_all.rs`).
    pub(super) fn into_plan(self) -> Plan<'a> {
        self.plan
    }
}

impl<'a> Plan<'a> {
    /// The request this plan checks.
    pub(crate) fn request(&self) -> &Request<'a> {
        &self.request
    }

    /// Whether this plan is a shadow site's check.
    pub(crate) fn is_shadow(&self) -> bool {
        self.on_denial == OnDenial::SHADOW
    }

    /// Starts observing this plan's check (its span, its metrics once finished).
    pub(crate) fn observe(&self) -> Observation {
        Observation::start(self.site.label(), &self.request, self.is_shadow())
    }

    /// [`report`](Self::report), for a check of a list.
    pub(crate) fn report_answer(&self, answer: &Answer) {
        self.report(answer);
    }

    /// How long this plan's check may wait for room, if at all.
    pub(crate) fn wait_budget(&self) -> Option<Duration> {
        self.wait()
    }

    /// The check of `request` by the guarded site at `site` (see `site.rs`), in shadow
    /// mode when `shadow`, waiting up to `wait` for room.
    #[inline]
    pub(crate) fn guarded(
        limiter: &'a Limiter,
        request: Request<'a>,
        site: &'static str,
        wait: Option<Duration>,
        shadow: bool,
    ) -> Self {
        Plan {
            limiter,
            request,
            site: Checker::Guarded(site),
            on_denial: match shadow {
                true => OnDenial::SHADOW,
                false => OnDenial::wait(wait),
            },
        }
    }

    /// A programmatic check of `request` that waits up to `wait` for room (a slot taken
    /// by [`Limiter::acquire`]).
    #[inline]
    pub(crate) fn programmatic(
        limiter: &'a Limiter,
        request: Request<'a>,
        wait: Option<Duration>,
    ) -> Self {
        Plan {
            limiter,
            request,
            site: Checker::Programmatic,
            on_denial: OnDenial::wait(wait),
        }
    }

    /// The synchronous step: observes the check and answers it now when the deny cache or
    /// the embedded backend can (and no wait is due).
    #[inline]
    pub(crate) fn begin(&self) -> Begun {
        assert!(
            !self.request.rules.is_empty() || self.request.slot.is_some(),
            "a rate-limit check needs at least one rule"
        );
        let site = self.site.label();
        let observation = Observation::start(site, &self.request, self.is_shadow());
        let now = observation.in_scope(|| self.limiter.answer_now(&self.request, site));
        match now {
            Now::Answered(answer) if !self.waits_after(&answer) => {
                self.report(&answer);
                observation.finish(&answer, self.request.rules);
                Begun::Answered(answer.result)
            }
            first => Begun::Waits(Waits { first, observation }),
        }
    }

    /// The rest of a check that [`begin`](Self::begin) could not answer, in its span.
    #[inline]
    pub(crate) fn resume(
        self,
        waits: Waits,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send + 'a {
        let span = waits.observation.span();
        self.wait_for_answer(waits).instrument(span)
    }

    // Without the `redis` feature only the first arm of the match below exists.
    #[allow(clippy::infallible_destructuring_match)]
    async fn wait_for_answer(self, waits: Waits) -> Result<Decision, BackendError> {
        let Waits { first, observation } = waits;
        // Redis's future is awaited here, not in a function of its own: each async layer
        // around it would be built and then moved into place whole (several KB).
        let mut answer = match first {
            Now::Answered(answer) => answer,
            #[cfg(feature = "redis")]
            Now::Ask(redis, spends) => {
                self.limiter
                    .ask(&redis, self.request, self.site.label(), spends)
                    .await
            }
        };
        if let Some(budget) = self.wait() {
            // Rare, and asleep most of its time: boxed, so that it adds nothing to the
            // size of every check's future.
            answer = Box::pin(wait_for_room(self, budget, answer)).await;
        }
        self.report(&answer);
        observation.finish(&answer, self.request.rules);
        match self.request.slot {
            None => decided(answer.result, self.request.rules),
            Some(ask) => decided_with_slot(answer.result, self.request.rules, ask),
        }
    }

    /// [`resume`](Self::resume), boxed. Not inlined: the future is large, and built in
    /// place it would make every caller's stack frame as large, answered at once or not.
    #[inline(never)]
    fn resumed(self, waits: Waits) -> BoxFuture<'a, Result<Decision, BackendError>> {
        boxed_in_place(|| self.resume(waits))
    }

    /// Tells the limiter what `answer` says beyond the decision: the rules it took to
    /// their warning share, and a guarded site's refusal (for `most_limited`).
    #[inline]
    fn report(&self, answer: &Answer) {
        let Ok(raw) = &answer.result else {
            return;
        };
        if let Some(crossings) = &raw.crossed {
            let site = self.site.label();
            self.limiter
                .warned(site, self.request.key, self.request.rules, crossings);
        }
        if let Checker::Guarded(path) = self.site {
            if !raw.allowed && !self.is_shadow() {
                self.limiter.refused(path, self.request.key);
            }
        }
    }

    /// How long to wait for room, if at all.
    #[inline]
    fn wait(&self) -> Option<Duration> {
        self.on_denial.budget()
    }

    /// Whether `answer` is a denial this check waits out rather than answers.
    fn waits_after(&self, answer: &Answer) -> bool {
        self.wait()
            .is_some_and(|budget| pause(answer, budget).is_some())
    }
}

impl Future for Check<'_> {
    type Output = Result<Decision, BackendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let running = match &mut this.running {
            Some(running) => running,
            None => match this.plan.begin() {
                Begun::Answered(result) => {
                    return Poll::Ready(decided(result, this.plan.request.rules))
                }
                Begun::Waits(waits) => this.running.insert(this.plan.resumed(waits)),
            },
        };
        running.as_mut().poll(cx)
    }
}

/// The decision a check of `rules` hands over, from its answer. Made there and nowhere
/// earlier: built in place, as the caller's value, a decision costs no copies (it is
/// larger than the backend's answer, and copying a value just built field by field stalls
/// the processor).
#[inline(always)]
pub(crate) fn decided(
    result: Result<RawDecision, BackendError>,
    rules: &[Rule],
) -> Result<Decision, BackendError> {
    result.map(|raw| raw.into_decision(rules))
}

/// `percent` as a warning share, or a panic naming what is allowed.
pub(crate) fn checked_warn_at(percent: u8) -> u8 {
    assert!(
        (1..=99).contains(&percent),
        "warn_at takes a percentage of a rule's count from 1 to 99, not {percent}"
    );
    percent
}

/// [`decided`] for a check that took a slot: it may be bound by its limit on calls in
/// flight, past its rules.
pub(crate) fn decided_with_slot(
    result: Result<RawDecision, BackendError>,
    rules: &[Rule],
    ask: &SlotAsk,
) -> Result<Decision, BackendError> {
    result.map(|raw| raw.into_decision_with_slot(rules, ask.max))
}

/// Waits up to `budget` for room after `answer`: sleeps while it is a denial that fits in
/// what is left of the budget, and checks again.
async fn wait_for_room(plan: Plan<'_>, budget: Duration, mut answer: Answer) -> Answer {
    let deadline = tokio::time::Instant::now() + budget;
    while let Some(pause) = pause(&answer, deadline - tokio::time::Instant::now()) {
        tokio::time::sleep(pause).await;
        answer = plan.limiter.answer(plan.request, plan.site.label()).await;
    }
    answer
}

/// How long to sleep before checking again after `answer`, with `left` of the wait
/// budget: `None` unless it is a denial whose `retry_after` fits in `left`. The jitter (up
/// to a tenth of the wait, at most 50 ms, never past the budget) spreads waiters freed at
/// one instant.
fn pause(answer: &Answer, left: Duration) -> Option<Duration> {
    let retry_after = answer.result.as_ref().ok()?.retry_after()?;
    if retry_after > left {
        return None;
    }
    let spread = (retry_after / 10)
        .min(Duration::from_millis(50))
        .min(left - retry_after);
    Some(retry_after + spread.mul_f64(random::fraction()))
}

impl fmt::Debug for Check<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("request", &self.plan.request)
            .field("wait", &self.plan.wait())
            .field("running", &self.running.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::AnsweredBy;

    fn denied(retry_after: Option<Duration>) -> Answer {
        Answer {
            result: Ok(RawDecision::refused(
                0,
                1_000_000,
                retry_after.map_or(RawDecision::NEVER, clock::micros),
            )),
            by: AnsweredBy::MEMORY,
        }
    }

    #[test]
    fn a_check_stays_within_128_bytes() {
        // Moved into its caller's future whole: within 128 bytes, without a `memcpy` call.
        assert!(
            std::mem::size_of::<Check<'_>>() <= 128,
            "{}",
            std::mem::size_of::<Check<'_>>()
        );
    }

    #[test]
    fn a_wait_sleeps_only_when_the_retry_fits_in_the_budget() {
        let second = Duration::from_secs(1);
        let pause_for = |retry, left| pause(&denied(retry), left);
        assert_eq!(pause_for(Some(second), second / 2), None);
        assert_eq!(pause_for(None, second * 10), None);
        // Exactly the retry when no budget is left for jitter.
        assert_eq!(pause_for(Some(second), second), Some(second));
        for _ in 0..100 {
            let slept = pause_for(Some(second), second * 10).unwrap();
            assert!(slept >= second && slept <= second + Duration::from_millis(50));
        }
    }
}
