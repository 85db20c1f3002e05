//! The per-request identity that `limit_type = IP` and `USER_ID` read.
//!
//! A framework integration (or your own middleware) runs each request inside [`scope`];
//! guarded calls made while it runs read the context with [`RequestContext::current`].

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

tokio::task_local! {
    static CURRENT: RequestContext;
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

    /// Reads the current context without cloning it; `None` outside any scope.
    pub(crate) fn with_current<R>(f: impl FnOnce(&RequestContext) -> R) -> Option<R> {
        CURRENT.try_with(f).ok()
    }
}

/// Runs `fut` with `ctx` as its [`RequestContext`].
pub async fn scope<F: Future>(ctx: RequestContext, fut: F) -> F::Output {
    CURRENT.scope(ctx, fut).await
}
