//! actix-web integration (feature `actix`): a middleware that tells guarded handlers who is
//! calling, checks each request against its [guards](crate::Guard), and describes the
//! decision in the response headers, and HTTP responses for [`RateLimitError`].
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
//! [`RateLimit`] runs every request inside a [`RequestContext`](crate::RequestContext) holding the client IP
//! (the connection's `peer_addr`, or behind [trusted proxies](RateLimit::trust_proxies)
//! the address they forwarded, with IPv6 clients counted per `/64`), the
//! [user id](RateLimit::user_id), and whether the request is [exempt](RateLimit::exempt):
//! the same rules, by the same code, as the axum and tonic layers.
//!
//! # Guards
//!
//! [`RateLimit::guard`] limits every request through the middleware, before it reaches the
//! app's service, with the same answers as a guarded handler's refusal:
//!
//! ```no_run
//! # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::actix; }
//! use actix_web::{web, App, HttpServer};
//! use redis_ratelimit::actix::RateLimit;
//! use redis_ratelimit::{Guard, Rule};
//!
//! static API: [Rule; 2] = [Rule::per_minute(100), Rule::per_hour(1000)];
//!
//! # async fn run() -> std::io::Result<()> {
//! HttpServer::new(|| {
//!     App::new()
//!         .wrap(RateLimit::new().guard(Guard::new("api", &API)))
//!         .route("/search", web::get().to(|| async { "results" }))
//! })
//! .bind("0.0.0.0:3000")?
//! .run()
//! .await
//! # }
//! ```
//!
//! The middleware's response body is then an [`EitherBody`]: the app's, or a refusal's.
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
//! and counts exactly (the end-to-end tests check exact counts with several workers on one
//! Redis). A handler can take it from the app's data with the attribute's `limiter`:
//!
//! ```no_run
//! # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::actix; }
//! # use actix_web::{dev::ServiceRequest, web, App, HttpServer};
//! # fn user_of(req: &ServiceRequest) -> Option<String> { None }
//! use redis_ratelimit::{actix::RateLimit, rate_limiter, Limiter, RateLimitError};
//!
//! #[rate_limiter(rules("5/minute"), prevent_duplicate = true, limit_type = IP,
//!                limiter = *limiter.get_ref())]
//! async fn send_code(limiter: web::Data<&'static Limiter>, phone: String) -> Result<String, RateLimitError> {
//!     Ok(format!("code sent to {phone}"))
//! }
//!
//! # async fn serve() -> std::io::Result<()> {
//! let limiter: &'static Limiter = redis_ratelimit::global();   // one limiter for every worker
//! HttpServer::new(move || {
//!     App::new()
//!         .app_data(web::Data::new(limiter))
//!         .route("/sms/code", web::post().to(send_code))
//!         .wrap(RateLimit::new().trust_proxies(["10.0.0.0/8"]).user_id(|req| user_of(req)))
//! })
//! .workers(4)
//! .bind("0.0.0.0:3000")?
//! .run()
//! .await
//! # }
//! ```
//!
//! `examples/actix_server.rs` is the `axum_server` API of the [axum](crate::axum) docs on
//! actix-web, answering byte for byte the same (`cargo run --example actix_server`).

use std::fmt;
use std::future::{ready, Ready};
use std::rc::Rc;
use std::sync::Arc;

use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::body::{BodySize, BoxBody, EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{HttpResponse, ResponseError};

use crate::web::fields::{self, FieldSink};
use crate::web::held::HeldSlots;
use crate::web::middleware::{self, InnerCall, Settings};
use crate::web::problem::{self, Integration, Problem, PROBLEM_JSON};
pub use crate::web::{InvalidProxyNet, ProxyHeader, ResponseFuture};
use crate::RateLimitError;

/// The actix-web middleware: `App::new().wrap(RateLimit::new()...)`. See the
/// [module docs](self).
///
/// Clones share one configuration, so one can be built outside `HttpServer::new` and cloned
/// into each worker's app.
#[derive(Clone, Default)]
pub struct RateLimit {
    settings: Arc<Settings<ServiceRequest>>,
}

impl RateLimit {
    /// A middleware taking the client IP from the peer address, with no trusted proxies,
    /// no user id and no exemption.
    pub fn new() -> Self {
        Self::default()
    }

    middleware::builder_methods!(ServiceRequest);
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.settings, f)
    }
}

/// Wherever the middleware serves the app's service.
impl<S, B> Transform<S, ServiceRequest> for RateLimit
where
    RateLimitMiddleware<S>:
        Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    type Response = ServiceResponse<B>;
    type Error = actix_web::Error;
    type Transform = RateLimitMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitMiddleware {
            service: Rc::new(service),
            settings: Arc::clone(&self.settings),
        }))
    }
}

/// The service of [`RateLimit`], wrapping the app's. Its responses' body is the app's
/// ([`EitherBody::Left`]) or a guard's refusal ([`EitherBody::Right`]).
pub struct RateLimitMiddleware<S> {
    /// Shared with the requests its guards are checking.
    service: Rc<S>,
    settings: Arc<Settings<ServiceRequest>>,
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
    // As `App::wrap` requires of every body; the slots' holding body boxes it.
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = ResponseFuture<PendingCall<S>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let peer = req.peer_addr().map(|addr| addr.ip());
        let admission = self.settings.admit(&req, peer);
        if !admission.checks_guards() {
            return admission.run(self.service.call(req));
        }
        admission.run_guarded(PendingCall {
            service: Rc::clone(&self.service),
            req,
        })
    }
}

/// A request for the app's service `S`, held by its [`ResponseFuture`] while the
/// middleware's guards check it. It appears only in that future's type.
pub struct PendingCall<S> {
    service: Rc<S>,
    req: ServiceRequest,
}

impl<S> fmt::Debug for PendingCall<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingCall")
            .field("method", self.req.method())
            .field("uri", self.req.uri())
            .finish_non_exhaustive()
    }
}

impl<S, B> InnerCall for PendingCall<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    type Future = S::Future;
    type Served = ServiceResponse<B>;
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;

    fn call(self) -> S::Future {
        self.service.call(self.req)
    }

    fn served(response: ServiceResponse<B>) -> ServiceResponse<EitherBody<B>> {
        response.map_into_left_body()
    }

    /// The [`ResponseError`] answer, as a guarded handler's refusal gets.
    fn refuse(self, err: RateLimitError) -> ServiceResponse<EitherBody<B>> {
        let response = err.error_response();
        self.req.into_response(response).map_into_right_body()
    }

    /// The app's body, boxed with the slots of the guards that admitted it, which it holds
    /// until it has been sent to its end (a streamed answer) or dropped.
    fn hold(
        response: ServiceResponse<EitherBody<B>>,
        held: HeldSlots,
    ) -> ServiceResponse<EitherBody<B>> {
        response.map_body(|_, body| match body {
            EitherBody::Left { body } => EitherBody::right(BoxBody::new(Holding {
                body,
                held: Some(held),
            })),
            refusal => refusal,
        })
    }
}

pin_project_lite::pin_project! {
    /// An app's response body holding its request's slots until it has been sent.
    struct Holding<B> {
        #[pin]
        body: B,
        held: Option<HeldSlots>,
    }
}

impl<B: MessageBody> MessageBody for Holding<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.project();
        let next = std::task::ready!(this.body.poll_next(cx));
        if next.is_none() {
            this.held.take();
        }
        Poll::Ready(next)
    }
}

impl middleware::Request for ServiceRequest {
    const BUILDER: &'static str = "RateLimit";

    fn header_lines(&self, name: &'static str) -> impl Iterator<Item = &[u8]> {
        self.headers().get_all(name).map(HeaderValue::as_bytes)
    }
}

impl<B> middleware::Response for ServiceResponse<B> {
    type Fields = HeaderMap;

    fn is_refusal(&self) -> bool {
        self.status() == StatusCode::TOO_MANY_REQUESTS
    }

    fn fields(&mut self) -> &mut HeaderMap {
        self.headers_mut()
    }
}

/// The same answers as axum's `IntoResponse`: `Limited` is 429 with `Retry-After`,
/// `RateLimit-Policy` and `RateLimit`; `MissingIdentity` 500 saying what is missing;
/// `Backend` 503 (the cause is logged, not sent); each with an `application/problem+json`
/// body.
impl ResponseError for RateLimitError {
    fn status_code(&self) -> StatusCode {
        status(problem::status_of(self))
    }

    fn error_response(&self) -> HttpResponse<BoxBody> {
        let problem = Problem::of(self, Integration::Actix);
        let mut response = HttpResponse::build(status(problem.status));
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

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).expect("a problem's status is valid")
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
    use actix_web::body::to_bytes;

    use super::*;
    use crate::web::problem::tests::{assert_limited_fields, backend_failure, limited};
    use crate::LimitType;

    async fn body_of(response: HttpResponse) -> String {
        let bytes = to_bytes(response.into_body()).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn errors_answer_as_axum_does() {
        actix_web::rt::System::new().block_on(errors_answer_as_axum_does_on_a_runtime());
    }

    async fn errors_answer_as_axum_does_on_a_runtime() {
        let limited = limited("too many codes");
        assert_eq!(limited.status_code(), StatusCode::TOO_MANY_REQUESTS);
        let response = limited.error_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let headers = response.headers();
        assert_limited_fields(|name| headers.get(name).map(|v| v.to_str().unwrap()));
        assert_eq!(headers.get("content-type").unwrap(), PROBLEM_JSON);
        assert_eq!(
            body_of(response).await,
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"too many codes (the limit of 10 per 60s is reached; retry in 12s)","violated-policies":["limit"]}"#
        );

        let backend = backend_failure();
        assert_eq!(backend.status_code(), StatusCode::SERVICE_UNAVAILABLE);
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
        assert_eq!(missing.status_code(), StatusCode::INTERNAL_SERVER_ERROR);
        let response = missing.error_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body_of(response).await,
            r#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"the server could not handle this request"}"#
        );
    }
}
