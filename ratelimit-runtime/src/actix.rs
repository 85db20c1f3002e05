//! actix-web integration (feature `actix`): a middleware that tells guarded handlers who is
//! calling and describes their decision in the response headers, and HTTP responses for
//! [`RateLimitError`].
//!
//! ```no_run
//! # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::actix; }
//! use actix_web::{web, App, HttpServer};
//! use redis_ratelimit::actix::RateLimit;
//! use redis_ratelimit::{rate_limiter, RateLimitError};
//!
//! #[rate_limiter(rules("10/minute"), prevent_duplicate = true, limit_type = IP)]
//! async fn send_code(phone: String) -> Result<String, RateLimitError> {
//!     Ok(format!("code sent to {phone}"))
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! HttpServer::new(|| {
//!     App::new()
//!         .wrap(RateLimit::new().trust_proxies(["10.0.0.0/8"]))
//!         .route("/sms/code", web::post().to(send_code))
//! })
//! .bind("0.0.0.0:3000")?
//! .run()
//! .await
//! # }
//! ```
//!
//! # Who the caller is
//!
//! [`RateLimit`] runs every request inside a [`RequestContext`] holding the client IP
//! (the connection's `peer_addr`, or behind [trusted proxies](RateLimit::trust_proxies)
//! the address they forwarded, with IPv6 clients counted per `/64`), the
//! [user id](RateLimit::user_id), and whether the request is [exempt](RateLimit::exempt):
//! the same rules, by the same code, as the axum and tonic layers.
//!
//! # Responses
//!
//! [`RateLimitError`] implements [`ResponseError`]: a guarded handler returns
//! `Result<T, RateLimitError>` (or an error type of yours with `From<RateLimitError>`), and
//! a refused call answers exactly as with axum: 429 with `Retry-After`, `RateLimit-Policy`
//! and `RateLimit`, 500 for a missing identity, 503 for a fail-closed backend failure,
//! each with an `application/problem+json` body. Every response to a request that reached
//! a guarded call carries `RateLimit-Policy` and `RateLimit` (see [`crate::axum`] for their
//! values).
//!
//! # Workers
//!
//! actix-web runs one single-threaded Tokio runtime per worker; a [`Limiter`](crate::Limiter)
//! works from all of them at once, so one `static` (or leaked) limiter serves every worker
//! and counts exactly.

use std::fmt;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;

use actix_web::body::BoxBody;
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use crate::context::{self, DecisionSlot, RequestContext};
use crate::web::client_ip::ClientIpConfig;
use crate::web::fields::{self, FieldSink};
use crate::web::problem::{Integration, Problem, PROBLEM_JSON};
pub use crate::web::{InvalidProxyNet, ProxyHeader};
use crate::RateLimitError;

type UserIdFn = dyn Fn(&ServiceRequest) -> Option<Arc<str>> + Send + Sync;
type ExemptFn = dyn Fn(&ServiceRequest) -> bool + Send + Sync;

/// The actix-web middleware: `App::new().wrap(RateLimit::new()...)`. See the
/// [module docs](self).
///
/// Clones share one configuration, so one can be built outside `HttpServer::new` and cloned
/// into each worker's app.
#[derive(Clone, Default)]
pub struct RateLimit {
    config: Arc<Config>,
}

#[derive(Clone, Default)]
struct Config {
    client_ip: ClientIpConfig,
    user_id: Option<Arc<UserIdFn>>,
    exempt: Option<Arc<ExemptFn>>,
}

impl RateLimit {
    /// A middleware taking the client IP from the peer address, with no trusted proxies,
    /// no user id and no exemption.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the proxies in these networks (`"10.0.0.0/8"`, `"2001:db8::/32"`, or a single
    /// address) to tell the client address in the [proxy header](Self::proxy_header).
    /// Adds to the networks already trusted. The header is walked from the right, skipping
    /// trusted hops: the first untrusted address is the client; from any other peer it is
    /// ignored.
    ///
    /// # Panics
    ///
    /// When a network does not parse, naming it; see
    /// [`try_trust_proxies`](Self::try_trust_proxies).
    pub fn trust_proxies<I>(self, networks: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.try_trust_proxies(networks)
            .unwrap_or_else(|err| panic!("RateLimit::trust_proxies: {err}"))
    }

    /// [`trust_proxies`](Self::trust_proxies), returning an error for a network that does
    /// not parse instead of panicking: for networks read from configuration at run time.
    pub fn try_trust_proxies<I>(mut self, networks: I) -> Result<Self, InvalidProxyNet>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.config_mut().client_ip.trust(networks)?;
        Ok(self)
    }

    /// Which header the trusted proxies write the client address in (default
    /// [`ProxyHeader::XForwardedFor`]). Only that header is read.
    pub fn proxy_header(mut self, header: ProxyHeader) -> Self {
        self.config_mut().client_ip.header = header;
        self
    }

    /// How many leading bits of an IPv6 client address identify the client (default 64).
    ///
    /// # Panics
    ///
    /// When `bits` is over 128.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.config_mut()
            .client_ip
            .set_ipv6_prefix(bits, "RateLimit::ipv6_prefix");
        self
    }

    /// How to find the user id of a request, for `limit_type = USER_ID`, typically from an
    /// extension your authentication middleware set (which must then run before this one,
    /// that is, be wrapped after it). `None` means an anonymous request, which a `USER_ID`
    /// guard refuses with [`RateLimitError::MissingIdentity`].
    pub fn user_id<F, U>(mut self, user_id: F) -> Self
    where
        F: Fn(&ServiceRequest) -> Option<U> + Send + Sync + 'static,
        U: Into<Arc<str>>,
    {
        self.config_mut().user_id = Some(Arc::new(move |req: &ServiceRequest| {
            user_id(req).map(Into::into)
        }));
        self
    }

    /// Which requests are exempt: guarded calls made while serving them skip the check
    /// (see [`RequestContext::with_exempt`]). The closure runs once per request.
    ///
    /// Exempting is the application's decision: an exempt request is not counted and never
    /// refused, so anyone who can make a request look exempt bypasses every limit. Decide
    /// from what a client cannot forge (the peer address of your monitoring network, a role
    /// your authentication set), never from a header or a path alone.
    pub fn exempt<F>(mut self, exempt: F) -> Self
    where
        F: Fn(&ServiceRequest) -> bool + Send + Sync + 'static,
    {
        self.config_mut().exempt = Some(Arc::new(exempt));
        self
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }
}

impl Config {
    fn context_of(&self, req: &ServiceRequest) -> RequestContext {
        let headers = req.headers();
        let peer = req.peer_addr().map(|addr| addr.ip());
        let lines = |name| headers.get_all(name).map(HeaderValue::as_bytes);
        let mut ctx = RequestContext::new();
        if let Some(ip) = self.client_ip.client_ip(peer, lines) {
            ctx = ctx.with_ip(ip);
        }
        if let Some(user_id) = self.user_id.as_ref().and_then(|f| f(req)) {
            ctx = ctx.with_user_id(user_id);
        }
        if self.exempt.as_ref().is_some_and(|f| f(req)) {
            ctx = ctx.with_exempt(true);
        }
        ctx
    }
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let client_ip = &self.config.client_ip;
        f.debug_struct("RateLimit")
            .field("trusted_proxies", &client_ip.trusted)
            .field("proxy_header", &client_ip.header)
            .field("ipv6_prefix", &client_ip.ipv6_prefix)
            .field("user_id", &self.config.user_id.is_some())
            .field("exempt", &self.config.exempt.is_some())
            .finish()
    }
}

impl<S, B> Transform<S, ServiceRequest> for RateLimit
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    S::Future: 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = actix_web::Error;
    type Transform = RateLimitMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitMiddleware {
            service,
            config: Arc::clone(&self.config),
        }))
    }
}

/// The service of [`RateLimit`], wrapping the app's.
pub struct RateLimitMiddleware<S> {
    service: S,
    config: Arc<Config>,
}

impl<S> fmt::Debug for RateLimitMiddleware<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitMiddleware")
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<ServiceRequest> for RateLimitMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    S::Future: 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<ServiceResponse<B>, actix_web::Error>>>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let ctx = self.config.context_of(&req);
        let slot = Arc::new(DecisionSlot::default());
        // The handler turns a refusal into its response inside these scopes, so that the
        // response can say what was missing from the context.
        let inner = context::scope_future(
            ctx,
            context::recording(Arc::clone(&slot), self.service.call(req)),
        );
        Box::pin(async move {
            let mut response = inner.await?;
            if let Some(outcome) = slot.take() {
                let refused = response.status() == StatusCode::TOO_MANY_REQUESTS;
                fields::describe(&outcome, refused, response.headers_mut());
            }
            Ok(response)
        })
    }
}

/// The same answers as axum's `IntoResponse`: `Limited` is 429 with `Retry-After`,
/// `RateLimit-Policy` and `RateLimit`; `MissingIdentity` 500 saying what is missing;
/// `Backend` 503 (the cause is logged, not sent); each with an `application/problem+json`
/// body.
impl ResponseError for RateLimitError {
    fn status_code(&self) -> StatusCode {
        match self {
            RateLimitError::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            RateLimitError::MissingIdentity { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            RateLimitError::Backend(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse<BoxBody> {
        let problem = Problem::of(self, Integration::Actix);
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((CONTENT_TYPE, PROBLEM_JSON));
        let mut response = response.body(problem.body());
        if let RateLimitError::Limited {
            rule, retry_after, ..
        } = self
        {
            fields::describe_refusal(rule, *retry_after, response.headers_mut());
        }
        response
    }
}

impl FieldSink for HeaderMap {
    fn set(&mut self, name: &'static str, value: String) {
        let value = HeaderValue::try_from(value).expect("structured-field text is visible ASCII");
        self.insert(HeaderName::from_static(name), value);
    }

    fn has(&self, name: &'static str) -> bool {
        self.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use actix_web::body::to_bytes;

    use super::*;
    use crate::{BackendError, BackendErrorKind, LimitType, Rule};

    async fn body_of(response: HttpResponse) -> String {
        let bytes = to_bytes(response.into_body()).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn errors_answer_as_axum_does() {
        actix_web::rt::System::new().block_on(errors_answer_as_axum_does_on_a_runtime());
    }

    async fn errors_answer_as_axum_does_on_a_runtime() {
        let limited = RateLimitError::Limited {
            key: "rate_limit:ip:203.0.113.9:app::send_code".into(),
            rule: Rule::per_minute(10),
            retry_after: Duration::from_millis(11_250),
            message: "too many codes",
        };
        let response = limited.error_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let headers = response.headers();
        assert_eq!(headers.get("retry-after").unwrap(), "12");
        assert_eq!(
            headers.get("ratelimit-policy").unwrap(),
            r#""limit";q=10;w=60"#
        );
        assert_eq!(headers.get("ratelimit").unwrap(), r#""limit";r=0;t=12"#);
        assert_eq!(headers.get("content-type").unwrap(), PROBLEM_JSON);
        assert_eq!(
            body_of(response).await,
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many codes"}"#
        );

        let backend = RateLimitError::Backend(BackendError::new(
            BackendErrorKind::Unavailable,
            "redis://secret@10.0.0.9 refused",
        ));
        let response = backend.error_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().get("retry-after").is_none());
        assert_eq!(
            body_of(response).await,
            r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter is unavailable; try again later"}"#
        );

        let missing = RateLimitError::MissingIdentity {
            limit_type: LimitType::Ip,
        };
        let response = missing.error_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = body_of(response).await;
        assert!(
            body.contains("wrap the app in redis_ratelimit::actix::RateLimit"),
            "{body}"
        );
    }
}
