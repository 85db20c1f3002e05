//! The per-request identity that `limit_type = IP` and `USER_ID` read.
//!
//! A framework integration (or your own middleware) runs each request inside [`scope`];
//! guarded calls made while it runs read the context with [`RequestContext::current`].

use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::sync::lock;

use crate::{Decision, Rule};

tokio::task_local! {
    static CURRENT: RequestContext;
    /// Set by a framework layer for the request it serves, so that guarded calls can leave
    /// their decision for the response headers. Unset (and never touched) otherwise.
    static DECISIONS: Arc<DecisionSlot>;
}

/// Who is calling: the client IP and user id of the request being served.
///
/// ```
/// use redis_ratelimit::context::{self, RequestContext};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let ctx = RequestContext::new().with_ip([203, 0, 113, 9].into()).with_user_id("42");
/// let seen = context::scope(ctx, async { RequestContext::current() }).await.unwrap();
/// assert_eq!(seen.user_id(), Some("42"));
/// assert!(RequestContext::current().is_none()); // outside any scope
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestContext {
    ip: Option<IpAddr>,
    user_id: Option<Arc<str>>,
    exempt: bool,
}

impl RequestContext {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the client IP.
    pub fn with_ip(mut self, ip: IpAddr) -> Self {
        self.ip = Some(ip);
        self
    }

    /// Sets the user id.
    pub fn with_user_id(mut self, user_id: impl Into<Arc<str>>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    /// Marks the request exempt (or not): guarded calls made while serving it skip the
    /// check entirely: nothing is counted, no identity is needed, nothing is refused, and
    /// no backend is asked.
    ///
    /// Exempting is the application's decision, for callers it trusts (a health checker, an
    /// internal job): anyone who can make a request look exempt bypasses every limit, so
    /// decide from what a client cannot forge (the peer address of your own network, an
    /// authenticated role), never from a header or a path alone.
    ///
    /// ```
    /// use redis_ratelimit::context::{self, RequestContext};
    /// use redis_ratelimit::{rate_limiter, RateLimitError};
    ///
    /// #[rate_limiter(rules("1/minute"), limit_type = GLOBAL)]
    /// async fn report() -> Result<(), RateLimitError> {
    ///     Ok(())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let internal = RequestContext::new().with_exempt(true);
    /// for _ in 0..3 {
    ///     context::scope(internal.clone(), report()).await.unwrap();
    /// }
    /// report().await.unwrap(); // the budget is still whole
    /// assert!(report().await.is_err());
    /// # }
    /// ```
    pub fn with_exempt(mut self, exempt: bool) -> Self {
        self.exempt = exempt;
        self
    }

    /// Whether guarded calls skip the check for this request (see
    /// [`with_exempt`](Self::with_exempt)).
    pub fn is_exempt(&self) -> bool {
        self.exempt
    }

    /// The client IP, if known.
    pub fn ip(&self) -> Option<IpAddr> {
        self.ip
    }

    /// The user id, if known.
    pub fn user_id(&self) -> Option<&str> {
        self.user_id.as_deref()
    }

    /// The context of the current task's [`scope`], or `None` outside any scope.
    pub fn current() -> Option<RequestContext> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// Whether the current task's context is [exempt](Self::with_exempt): what a guarded
    /// call asks before anything else. Not public API: for `#[rate_limiter]`'s expansion.
    #[doc(hidden)]
    pub fn current_is_exempt() -> bool {
        CURRENT.try_with(|ctx| ctx.exempt).unwrap_or(false)
    }

    /// Reads the current context without cloning it; `None` outside any scope.
    pub(crate) fn with_current<R>(f: impl FnOnce(&RequestContext) -> R) -> Option<R> {
        CURRENT.try_with(f).ok()
    }
}

/// Runs `fut` with `ctx` as its [`RequestContext`].
pub async fn scope<F: Future>(ctx: RequestContext, fut: F) -> F::Output {
    CURRENT.scope(ctx, fut).await
}

/// [`scope`] as a nameable future, for a layer's own future type.
#[cfg(any(feature = "tower", feature = "actix"))]
pub(crate) fn scope_future<F: Future>(
    ctx: RequestContext,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<RequestContext, F> {
    CURRENT.scope(ctx, fut)
}

/// A guarded call's decision together with the rules it was checked against: what a
/// framework layer needs to describe the limits in response headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SiteDecision {
    pub decision: Decision,
    /// The call site's rules, the duplicate-submission rule last when `duplicate_rule`.
    pub rules: &'static [Rule],
    pub duplicate_rule: bool,
    /// The site's limit on calls in flight, when it has one: a policy of its own, bound
    /// when the decision's `rule_index` is past the rules.
    pub concurrency: Option<u64>,
}

impl SiteDecision {
    /// Whether this decision tells the client more urgently to slow down than `other`:
    /// a denial over an allowance, then the longer wait, then the smaller remainder.
    fn binds_harder_than(&self, other: &SiteDecision) -> bool {
        let (this, that) = (&self.decision, &other.decision);
        match (this.allowed, that.allowed) {
            (false, true) => true,
            (true, false) => false,
            (false, false) => this.retry_after > that.retry_after,
            (true, true) => this.remaining < that.remaining,
        }
    }
}

/// The decision of the guarded calls made while serving one request. When a request makes
/// several, the one that binds hardest is kept.
#[derive(Debug, Default)]
pub(crate) struct DecisionSlot(Mutex<Option<SiteDecision>>);

impl DecisionSlot {
    fn offer(&self, decision: SiteDecision) {
        // Held only for this comparison, never across an await.
        let mut kept = lock(&self.0);
        if kept.is_none_or(|kept| decision.binds_harder_than(&kept)) {
            *kept = Some(decision);
        }
    }

    /// The kept decision, if any guarded call decided.
    #[cfg(any(feature = "tower", feature = "actix"))]
    pub(crate) fn take(&self) -> Option<SiteDecision> {
        lock(&self.0).take()
    }
}

/// Leaves the decision `make` gives for the layer serving the current request; outside
/// one, does nothing and does not call `make`.
pub(crate) fn record_with(make: impl FnOnce() -> Option<SiteDecision>) {
    let _ = DECISIONS.try_with(|slot| {
        if let Some(decision) = make() {
            slot.offer(decision);
        }
    });
}

/// The decision kept so far for the request being served, left in place (a refusal's
/// answer names its policy from it); `None` outside a layer.
#[cfg(any(feature = "tower", feature = "actix"))]
pub(crate) fn kept_decision() -> Option<SiteDecision> {
    DECISIONS.try_with(|slot| *lock(&slot.0)).ok().flatten()
}

/// Runs `fut` so that its guarded checks leave no decision for the request being served,
/// if any: an outbound call's budget (feature `reqwest`) is not the client's.
#[cfg(feature = "reqwest")]
pub(crate) async fn unrecorded<F: Future>(fut: F) -> F::Output {
    if DECISIONS.try_with(|_| ()).is_ok() {
        DECISIONS.scope(Arc::default(), fut).await
    } else {
        fut.await
    }
}

/// Runs `fut` so that the decisions of its guarded calls land in `slot`.
#[cfg(any(feature = "tower", feature = "actix"))]
pub(crate) fn recording<F: Future>(
    slot: Arc<DecisionSlot>,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Arc<DecisionSlot>, F> {
    DECISIONS.scope(slot, fut)
}
