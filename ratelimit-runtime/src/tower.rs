//! tower integration (feature `tower`; `axum` and `tonic` enable it): a [`Layer`] over
//! `http::Request` that tells guarded handlers who is calling, checks each request against
//! its [guards](crate::Guard), and describes the decision in the response's
//! `RateLimit-Policy` / `RateLimit` headers. It serves axum, tonic, and hyper or any other
//! tower stack alike.
//!
//! The peer address is read from the request's extensions, first found of:
//!
//! 1. [`PeerAddr`], inserted by your own code (a hyper server, a test, a custom acceptor);
//! 2. the extension the layer's [`PeerSource`] names, where the server records it:
//!    `redis_ratelimit::axum::RateLimitLayer` reads axum's `ConnectInfo<SocketAddr>`
//!    (serve the app with `into_make_service_with_connect_info::<SocketAddr>()`),
//!    `redis_ratelimit::tonic::RateLimitLayer` tonic's `TcpConnectInfo` (which
//!    `tonic::transport::Server` inserts). [`RateLimitLayer`] reads [`PeerAddr`] alone.
//!
//! With hyper, insert [`PeerAddr`] for each connection:
//!
//! ```
//! # use ratelimit_runtime as redis_ratelimit; // the facade re-exports it with feature `tower`
//! use std::net::SocketAddr;
//!
//! use http::Request;
//! use redis_ratelimit::tower::{PeerAddr, RateLimitLayer};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let app = service_fn(|_req: Request<String>| async {
//!     let ip = redis_ratelimit::RequestContext::current().and_then(|ctx| ctx.ip());
//!     Ok::<_, std::convert::Infallible>(http::Response::new(format!("{ip:?}")))
//! });
//! let service = RateLimitLayer::new().layer(app);
//!
//! // Per connection, where the peer address is known:
//! let peer: SocketAddr = "203.0.113.9:50000".parse().unwrap();
//! let mut req = Request::new(String::new());
//! req.extensions_mut().insert(PeerAddr(peer));
//! let response = service.oneshot(req).await.unwrap();
//! assert_eq!(response.body(), "Some(203.0.113.9)");
//! # }
//! ```
//!
//! # Guards
//!
//! [`guard`](RateLimitLayerWith::guard) limits every request through the layer, before it
//! reaches the inner service:
//!
//! ```
//! # use ratelimit_runtime as redis_ratelimit; // the facade re-exports it with feature `tower`
//! use std::net::SocketAddr;
//!
//! use http::{Request, Response, StatusCode};
//! use redis_ratelimit::tower::{PeerAddr, RateLimitLayer};
//! use redis_ratelimit::{Guard, Limiter, Rule};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! static API: [Rule; 1] = [Rule::per_minute(1)];
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let limiter: &'static Limiter = Box::leak(Box::new(Limiter::memory()));
//! let app = service_fn(|_req: Request<String>| async {
//!     Ok::<_, std::convert::Infallible>(Response::new("results".to_string()))
//! });
//! let service = RateLimitLayer::new()
//!     .guard(Guard::new("tower_docs::api", &API).limiter(limiter))
//!     .layer(app);
//!
//! let request = || {
//!     let mut req = Request::new(String::new());
//!     req.extensions_mut().insert(PeerAddr("203.0.113.9:50000".parse().unwrap()));
//!     req
//! };
//! let allowed = service.clone().oneshot(request()).await.unwrap();
//! assert_eq!(allowed.headers()["ratelimit"], r#""p1";r=0;t=60"#);
//! let refused = service.oneshot(request()).await.unwrap();
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "60");
//! assert_eq!(refused.headers()["content-type"], "application/problem+json");
//! # }
//! ```
//!
//! Several guards on one layer are checked in the order added; the first refusal answers
//! and the guards after it count nothing. Guards and attributes compose: a request may
//! pass the layer's guards and then a handler's `#[rate_limiter]`, and its response's
//! RateLimit fields describe whichever decision binds hardest (a refusal over an allowance,
//! then the longer wait, then the fewest units left). A layer without guards does no more
//! per request than fill the request context; a guarded request makes one check per guard,
//! each one backend round trip.
//!
//! A refusal is written in the inner service's response body type ([`RefusalBody`]):
//! axum's and tonic's bodies, `String`, and http-body-util's `Full<Bytes>`,
//! `BoxBody<Bytes, E>` and `UnsyncBoxBody<Bytes, E>`; implement [`RefusalBody`] for a body
//! of your own. The inner service is `Clone`, as tower services usually are. A gRPC
//! request (`content-type: application/grpc...`) is refused with a gRPC status when the
//! `tonic` feature is on.
//!
//! Everything else (the client IP behind trusted proxies, the user id, exemptions, the
//! response fields) is as for [axum](crate::axum), by the same code.

use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt as _, Full};
use tower_layer::Layer;
use tower_service::Service;

use crate::web::fields::{self, FieldSink};
pub use crate::web::held::HeldSlots;
use crate::web::held::SlotBody;
use crate::web::middleware::{self, InnerCall, Settings};
pub use crate::web::peer::{PeerAddr, PeerSource};
use crate::web::problem::{Integration, Problem, PROBLEM_JSON};
pub use crate::web::{InvalidProxyNet, ProxyHeader, ResponseFuture};
use crate::RateLimitError;

/// The layer reading the peer address from [`PeerAddr`] alone: for hyper, or any stack
/// that inserts it. See [`RateLimitLayerWith`] for what it does and how it is configured.
pub type RateLimitLayer<B> = RateLimitLayerWith<B, PeerAddr>;

/// A tower [`Layer`] that runs each `http::Request<B>` inside a
/// [`RequestContext`](crate::RequestContext), so that `limit_type = IP` and `USER_ID`
/// guards in its handlers know the caller, and that puts the guards' decision into
/// `RateLimit-Policy` / `RateLimit` response headers (and `Retry-After` on a 429 that
/// lacks it).
///
/// - **Client IP**: the peer address, from a [`PeerAddr`] extension or else from `P` (see
///   [`PeerSource`]). Proxy headers are read only when the peer is a
///   [trusted proxy](Self::trust_proxies). IPv4-mapped IPv6 addresses count as IPv4; IPv6
///   clients are counted per [network](Self::ipv6_prefix) (`/64`).
/// - **User id**: what the [`user_id`](Self::user_id) closure finds in the request.
/// - **Exemption**: requests the [`exempt`](Self::exempt) closure picks skip every guard.
/// - **Guards**: the layer's own limits ([`guard`](Self::guard)), checked before the inner
///   service is called; a refused request never reaches it, and is answered in the inner
///   service's response body type ([`RefusalBody`]). The inner service is `Clone` (as
///   axum's, tonic's and hyper's are): for a guarded request, the service made ready is
///   moved into the request's future while the guards decide, and a clone takes its place.
///
/// `B` is the request body type: `axum::body::Body` for axum (named
/// `redis_ratelimit::axum::RateLimitLayer`), `tonic::body::Body` for tonic
/// (`redis_ratelimit::tonic::RateLimitLayer`), `hyper::body::Incoming` for hyper
/// ([`RateLimitLayer<Incoming>`](RateLimitLayer)). Clones share one configuration.
///
/// ```
/// # use ratelimit_runtime as redis_ratelimit; // the facade re-exports it with feature `axum`
/// use std::net::{IpAddr, SocketAddr};
///
/// use axum::extract::{ConnectInfo, Request};
/// use redis_ratelimit::axum::RateLimitLayer;
///
/// #[derive(Clone)]
/// struct CurrentUser { id: u64 }
///
/// // Networks read at run time: an error names the one that does not parse.
/// let from_env = "10.0.0.0/8, 192.168.0.0/16";
/// let layer = RateLimitLayer::new().try_trust_proxies(from_env.split(',')).unwrap();
/// let err = RateLimitLayer::new().try_trust_proxies(["10.0.0.0/33"]).err().unwrap();
/// assert!(err.to_string().contains("`10.0.0.0/33` is not a trusted proxy network"));
///
/// let layer = layer
///     // Set by the authentication middleware, added after this layer.
///     .user_id(|req: &Request| req.extensions().get::<CurrentUser>().map(|u| u.id.to_string()))
///     // The health checker calls from 10.1.0.5.
///     .exempt(|req: &Request| {
///         req.extensions()
///             .get::<ConnectInfo<SocketAddr>>()
///             .is_some_and(|ConnectInfo(peer)| peer.ip() == IpAddr::from([10, 1, 0, 5]))
///     });
/// ```
pub struct RateLimitLayerWith<B, P> {
    settings: Arc<Settings<Request<B>>>,
    peer: PhantomData<fn() -> P>,
}

impl<B, P> Clone for RateLimitLayerWith<B, P> {
    fn clone(&self) -> Self {
        RateLimitLayerWith {
            settings: Arc::clone(&self.settings),
            peer: PhantomData,
        }
    }
}

impl<B, P> Default for RateLimitLayerWith<B, P> {
    fn default() -> Self {
        RateLimitLayerWith {
            settings: Arc::default(),
            peer: PhantomData,
        }
    }
}

impl<B, P> RateLimitLayerWith<B, P> {
    /// A layer taking the client IP from the peer address, with no trusted proxies, no
    /// user id and no exemption.
    pub fn new() -> Self {
        Self::default()
    }

    middleware::builder_methods!(Request<B>);
}

impl<B, P> fmt::Debug for RateLimitLayerWith<B, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.settings, f)
    }
}

impl<S, B, P> Layer<S> for RateLimitLayerWith<B, P> {
    type Service = RateLimitService<S, B, P>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            settings: Arc::clone(&self.settings),
            peer: PhantomData,
        }
    }
}

/// The service of [`RateLimitLayerWith`].
pub struct RateLimitService<S, B, P = PeerAddr> {
    inner: S,
    settings: Arc<Settings<Request<B>>>,
    peer: PhantomData<fn() -> P>,
}

impl<S: Clone, B, P> Clone for RateLimitService<S, B, P> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            settings: Arc::clone(&self.settings),
            peer: PhantomData,
        }
    }
}

impl<S: fmt::Debug, B, P> fmt::Debug for RateLimitService<S, B, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, P, ResBody> Service<Request<B>> for RateLimitService<S, B, P>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone,
    P: PeerSource,
    ResBody: RefusalBody,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<PendingCall<S, B, P>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let extensions = req.extensions();
        let peer = PeerAddr::peer_ip(extensions).or_else(|| P::peer_ip(extensions));
        let admission = self.settings.admit(&req, peer);
        if !admission.checks_guards() {
            return admission.run(self.inner.call(req));
        }
        // The service made ready answers once the guards admit the request.
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        admission.run_guarded(PendingCall {
            service,
            req,
            peer: PhantomData,
        })
    }
}

/// A request for the inner service `S`, held by its [`ResponseFuture`] while the layer's
/// guards check it. It appears only in that future's type.
pub struct PendingCall<S, B, P> {
    service: S,
    req: Request<B>,
    peer: PhantomData<fn() -> P>,
}

impl<S, B, P> fmt::Debug for PendingCall<S, B, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingCall")
            .field("method", self.req.method())
            .field("uri", self.req.uri())
            .finish_non_exhaustive()
    }
}

impl<S, B, P, ResBody> InnerCall for PendingCall<S, B, P>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    P: PeerSource,
    ResBody: RefusalBody,
{
    type Future = S::Future;
    type Served = Response<ResBody>;
    type Response = Response<ResBody>;
    type Error = S::Error;

    fn call(mut self) -> S::Future {
        self.service.call(self.req)
    }

    fn served(response: Response<ResBody>) -> Response<ResBody> {
        response
    }

    fn hold(response: Response<ResBody>, held: HeldSlots) -> Response<ResBody> {
        response.map(|body| body.holding(held))
    }

    /// A gRPC status for a gRPC request whose body speaks gRPC (tonic's), else the HTTP
    /// answer of a guarded handler's refusal.
    fn refuse(self, err: RateLimitError) -> Response<ResBody> {
        let err = match is_grpc(self.req.headers()) {
            true => match ResBody::grpc_refusal(err) {
                Ok(status) => return status,
                Err(err) => err,
            },
            false => err,
        };
        answer(
            &err,
            Integration::Tower {
                peer: P::HOW_TO_RECORD,
            },
        )
    }
}

/// Whether a request speaks gRPC (`application/grpc`, `application/grpc+proto`, ...).
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// The HTTP answer to `err`, for every tower stack: its status, an
/// `application/problem+json` body, and for a refusal `Retry-After` and the RateLimit
/// fields of its rule. axum's `IntoResponse` for [`RateLimitError`] is this.
pub(crate) fn answer<Body: RefusalBody>(
    err: &RateLimitError,
    integration: Integration,
) -> Response<Body> {
    let problem = Problem::of(err, integration);
    let mut response = Response::new(Body::from_text(problem.body()));
    *response.status_mut() =
        StatusCode::from_u16(problem.status).expect("a problem's status is valid");
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    if let RateLimitError::Limited {
        rule, retry_after, ..
    } = err
    {
        fields::describe_refusal(rule, *retry_after, headers);
    }
    response
}

/// A response body the layer can write a [guard](crate::Guard)'s refusal in: the inner
/// service's response body type. Implemented for axum's and tonic's bodies, `String`, and
/// http-body-util's `Full<Bytes>`, `BoxBody<Bytes, E>` and `UnsyncBoxBody<Bytes, E>`;
/// implement it for a body type of your own.
pub trait RefusalBody: Sized {
    /// A body holding `text` (an `application/problem+json` document; empty for a gRPC
    /// refusal, whose status is in the headers).
    fn from_text(text: String) -> Self;

    /// The answer to a gRPC request refused with `err`, for a body that carries gRPC
    /// (tonic's: a trailers-only status); `Err(err)` (the default) answers it as HTTP.
    fn grpc_refusal(err: RateLimitError) -> Result<Response<Self>, RateLimitError> {
        Err(err)
    }

    /// This body holding `held`, the slots of the guards with a concurrency limit
    /// ([`Guard::concurrency`](crate::Guard::concurrency)), until it has been sent to its
    /// end or dropped. The bodies that box another (axum's, tonic's, `BoxBody`,
    /// `UnsyncBoxBody`) do so; the default, for a body held whole in memory, releases them
    /// as the response is handed over.
    fn holding(self, held: HeldSlots) -> Self {
        drop(held);
        self
    }
}

impl RefusalBody for String {
    fn from_text(text: String) -> Self {
        text
    }
}

impl RefusalBody for Full<Bytes> {
    fn from_text(text: String) -> Self {
        Full::new(Bytes::from(text))
    }
}

/// The boxed bodies, `Send + Sync` or not: each boxed by its own method.
macro_rules! boxed_refusal_body {
    ($($body:ident => $boxed:ident),+) => {$(
        impl<E: 'static> RefusalBody for $body<Bytes, E> {
            fn from_text(text: String) -> Self {
                Full::new(Bytes::from(text))
                    .map_err(|never: Infallible| match never {})
                    .$boxed()
            }

            fn holding(self, held: HeldSlots) -> Self {
                SlotBody::new(self, held).$boxed()
            }
        }
    )+};
}

boxed_refusal_body!(BoxBody => boxed, UnsyncBoxBody => boxed_unsync);

impl<B> middleware::Request for Request<B> {
    const BUILDER: &'static str = "RateLimitLayer";

    fn header_lines(&self, name: &'static str) -> impl Iterator<Item = &[u8]> {
        self.headers()
            .get_all(name)
            .into_iter()
            .map(HeaderValue::as_bytes)
    }
}

impl<B> middleware::Response for Response<B> {
    type Fields = HeaderMap;

    /// A 429, or a gRPC `RESOURCE_EXHAUSTED` (code 8) answered in the headers (a gRPC error
    /// before any message is a trailers-only response, whose `grpc-status` is a header).
    fn is_refusal(&self) -> bool {
        self.status() == StatusCode::TOO_MANY_REQUESTS
            || self
                .headers()
                .get("grpc-status")
                .is_some_and(|code| code == "8")
    }

    fn fields(&mut self) -> &mut HeaderMap {
        self.headers_mut()
    }
}

impl FieldSink for HeaderMap {
    fn set(&mut self, name: &'static str, value: String) {
        let value = HeaderValue::try_from(value).expect("structured-field text is visible ASCII");
        self.insert(http::HeaderName::from_static(name), value);
    }

    fn has(&self, name: &'static str) -> bool {
        self.contains_key(name)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::{IpAddr, SocketAddr};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use http::Extensions;

    use tower::{service_fn, ServiceExt};

    use super::*;
    use crate::context::{self, RequestContext, SiteDecision};
    use crate::web::fields::tests::decision_under;
    use crate::{Decision, Guard, LimitType, Limiter, Rule};

    static RULES: [Rule; 2] = [Rule::per_minute(10), Rule::new(1, Duration::from_secs(5))];

    type Body = ();

    fn request_from(peer: &str) -> Request<Body> {
        let mut req = Request::new(());
        let addr: SocketAddr = peer.parse().unwrap();
        req.extensions_mut().insert(PeerAddr(addr));
        req
    }

    /// Serves `req` through `layer` with a handler answering with the context it saw.
    pub(crate) async fn seen_context<B, P: PeerSource>(
        layer: &RateLimitLayerWith<B, P>,
        req: Request<B>,
    ) -> Option<RequestContext> {
        let handler = service_fn(|_req: Request<B>| async {
            let seen = RequestContext::current();
            let mut response = Response::new(String::new());
            response.extensions_mut().insert(seen);
            Ok::<_, Infallible>(response)
        });
        let response = layer.layer(handler).oneshot(req).await.unwrap();
        response
            .extensions()
            .get::<Option<RequestContext>>()
            .cloned()
            .expect("the handler ran")
    }

    #[tokio::test]
    async fn the_handler_runs_with_the_peer_ip_and_user_id() {
        let layer = RateLimitLayer::new().user_id(|req: &Request<Body>| {
            req.headers()
                .get("x-user-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
        let mut req = request_from("203.0.113.9:5000");
        req.headers_mut()
            .insert("x-user-id", HeaderValue::from_static("42"));
        let ctx = seen_context(&layer, req).await.unwrap();
        assert_eq!(ctx.ip(), Some("203.0.113.9".parse().unwrap()));
        assert_eq!(ctx.user_id(), Some("42"));

        // Anonymous: no user id; no peer address: no IP. The context is still there.
        let ctx = seen_context(&layer, Request::new(())).await.unwrap();
        assert_eq!((ctx.ip(), ctx.user_id()), (None, None));
        assert!(!ctx.is_exempt());
    }

    #[tokio::test]
    async fn the_exempt_closure_marks_the_context() {
        let layer = RateLimitLayer::new().exempt(|req: &Request<Body>| {
            req.extensions().get::<PeerAddr>().map(|p| p.0.ip()) == Some([10, 1, 0, 5].into())
        });
        let ctx = seen_context(&layer, request_from("10.1.0.5:1"))
            .await
            .unwrap();
        assert!(ctx.is_exempt());
        assert_eq!(ctx.ip(), Some([10, 1, 0, 5].into()));
        let ctx = seen_context(&layer, request_from("10.1.0.6:1"))
            .await
            .unwrap();
        assert!(!ctx.is_exempt());
    }

    /// What a server of the tests' own records for each connection.
    #[derive(Clone, Copy)]
    struct Recorded(IpAddr);

    impl PeerSource for Recorded {
        fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
            extensions.get::<Recorded>().map(|recorded| recorded.0)
        }
    }

    #[tokio::test]
    async fn the_peer_comes_from_the_layer_s_source() {
        let layer = RateLimitLayerWith::<Body, Recorded>::new();
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(Recorded([198, 51, 100, 4].into()));
        let ctx = seen_context(&layer, req).await.unwrap();
        assert_eq!(ctx.ip(), Some([198, 51, 100, 4].into()));

        // The plain layer reads no source but `PeerAddr`.
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(Recorded([198, 51, 100, 4].into()));
        let ctx = seen_context(&RateLimitLayer::new(), req).await.unwrap();
        assert_eq!(ctx.ip(), None);
    }

    #[tokio::test]
    async fn a_peer_addr_extension_wins() {
        let mut req = request_from("192.0.2.77:1");
        req.extensions_mut().insert(Recorded([192, 0, 2, 1].into()));
        req.extensions_mut().insert(0u8);
        let layer = RateLimitLayerWith::<Body, Recorded>::new();
        let ctx = seen_context(&layer, req).await.unwrap();
        assert_eq!(ctx.ip(), Some([192, 0, 2, 77].into()));
    }

    #[tokio::test]
    async fn configuration_reaches_the_extraction() {
        let layer = RateLimitLayer::new()
            .trust_proxies(["10.0.0.0/8"])
            .trust_proxies(vec!["127.0.0.2".to_string()])
            .proxy_header(ProxyHeader::XRealIp)
            .ipv6_prefix(48);
        let mut req = request_from("127.0.0.2:1");
        req.headers_mut()
            .insert("x-real-ip", HeaderValue::from_static("2001:db8:1:2::9"));
        req.headers_mut()
            .insert("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        let ctx = seen_context(&layer, req).await.unwrap();
        assert_eq!(ctx.ip(), Some("2001:db8:1::".parse().unwrap()));

        let mut spoofing = request_from("192.0.2.1:1");
        spoofing
            .headers_mut()
            .insert("x-real-ip", HeaderValue::from_static("198.51.100.1"));
        let ctx = seen_context(&layer, spoofing).await.unwrap();
        assert_eq!(ctx.ip(), Some("192.0.2.1".parse().unwrap()));
    }

    #[test]
    #[should_panic(
        expected = "RateLimitLayer::trust_proxies: `10.0.0.300/8` is not a trusted proxy network"
    )]
    fn a_bad_network_panics_naming_it() {
        let _ = RateLimitLayer::<Body>::new().trust_proxies(["10.0.0.0/8", "10.0.0.300/8"]);
    }

    #[test]
    #[should_panic(expected = "at most 128 bits, not 129")]
    fn an_ipv6_prefix_over_128_panics() {
        let _ = RateLimitLayer::<Body>::new().ipv6_prefix(129);
    }

    #[test]
    fn clones_share_the_configuration_until_changed() {
        let a = RateLimitLayer::<Body>::new().trust_proxies(["10.0.0.0/8"]);
        let b = a.clone();
        assert!(Arc::ptr_eq(&a.settings, &b.settings));
        let b = b.ipv6_prefix(56);
        assert_eq!(a.settings.client_ip.ipv6_prefix, 64);
        assert_eq!(b.settings.client_ip.ipv6_prefix, 56);
        assert_eq!(b.settings.client_ip.trusted, a.settings.client_ip.trusted);
    }

    /// Reset in 60 s; when denied, retry in 2.5 s.
    fn decision(allowed: bool, rule_index: usize, remaining: u64) -> Decision {
        let wait = Duration::from_millis(2_500);
        decision_under(
            &RULES,
            rule_index,
            remaining,
            Duration::from_secs(60),
            (!allowed).then_some(wait),
        )
    }

    /// A handler whose "guarded calls" record these decisions, then answers `status`.
    async fn respond_after(decisions: Vec<Decision>, status: StatusCode) -> Response<String> {
        let handler = service_fn(move |_req: Request<Body>| {
            let decisions = decisions.clone();
            async move {
                for decision in decisions {
                    // Across an await, as a guard in a handler would be.
                    tokio::task::yield_now().await;
                    context::record_with(|| {
                        Some(SiteDecision {
                            decision,
                            rules: &RULES,
                            duplicate_rule: true,
                            concurrency: None,
                        })
                    });
                }
                let mut response = Response::new(String::new());
                *response.status_mut() = status;
                Ok::<_, Infallible>(response)
            }
        });
        RateLimitLayer::new()
            .layer(handler)
            .oneshot(request_from("192.0.2.1:1"))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn allowed_responses_carry_the_decision() {
        let response = respond_after(vec![decision(true, 0, 9)], StatusCode::OK).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["ratelimit-policy"],
            r#""p1";q=10;w=60, "dup";q=1;w=5"#
        );
        assert_eq!(response.headers()["ratelimit"], r#""p1";r=9;t=60"#);
    }

    #[tokio::test]
    async fn the_decision_that_binds_hardest_is_described() {
        let least_remaining = [(true, 9), (true, 3), (true, 5)].map(|(a, r)| decision(a, 0, r));
        let denied = [
            decision(true, 0, 0),
            decision(false, 1, 0),
            decision(true, 0, 0),
        ];
        for (decisions, status, ratelimit, retry_after) in [
            (least_remaining, StatusCode::OK, r#""p1";r=3;t=60"#, None),
            (
                denied,
                StatusCode::TOO_MANY_REQUESTS,
                r#""dup";r=0;t=3"#,
                Some("3"),
            ),
        ] {
            let response = respond_after(decisions.to_vec(), status).await;
            assert_eq!(response.headers()["ratelimit"], ratelimit);
            if let Some(retry_after) = retry_after {
                assert_eq!(response.headers()["retry-after"], retry_after);
            }
        }
    }

    #[tokio::test]
    async fn responses_without_a_guarded_call_are_untouched() {
        let response = respond_after(vec![], StatusCode::OK).await;
        assert!(response.headers().is_empty());
    }

    #[tokio::test]
    async fn outside_the_layer_recording_does_nothing() {
        // No scope: must neither panic nor leak into a later request.
        context::record_with(|| {
            Some(SiteDecision {
                decision: decision(false, 0, 0),
                rules: &RULES,
                duplicate_rule: false,
                concurrency: None,
            })
        });
        let response = respond_after(vec![], StatusCode::OK).await;
        assert!(response.headers().is_empty());
    }

    /// The inner service of the guard tests: counts its calls and its clones, and answers
    /// `200 served`.
    struct Counted {
        calls: Arc<AtomicUsize>,
        clones: Arc<AtomicUsize>,
    }

    impl Counted {
        fn new() -> Counted {
            Counted {
                calls: Arc::default(),
                clones: Arc::default(),
            }
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl Clone for Counted {
        fn clone(&self) -> Self {
            self.clones.fetch_add(1, Ordering::SeqCst);
            Counted {
                calls: Arc::clone(&self.calls),
                clones: Arc::clone(&self.clones),
            }
        }
    }

    impl Service<Request<Body>> for Counted {
        type Response = Response<String>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<String>, Infallible>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _req: Request<Body>) -> Self::Future {
            self.calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(Response::new("served".to_owned())))
        }
    }

    static ONE_A_MINUTE: [Rule; 1] = [Rule::per_minute(1)];
    static TWO_A_MINUTE: [Rule; 1] = [Rule::per_minute(2)];
    static FIVE_A_MINUTE: [Rule; 1] = [Rule::per_minute(5)];

    fn memory_limiter() -> &'static Limiter {
        Box::leak(Box::new(Limiter::memory()))
    }

    /// Serves one request through `service`, as a server does: ready, then called.
    async fn serve<S>(service: &mut S, req: Request<Body>) -> Response<String>
    where
        S: Service<Request<Body>, Response = Response<String>, Error = Infallible>,
    {
        service.ready().await.unwrap().call(req).await.unwrap()
    }

    #[tokio::test]
    async fn a_refused_request_never_reaches_the_inner_service() {
        let guard = Guard::new("tower::tests::refused", &TWO_A_MINUTE).limiter(memory_limiter());
        let inner = Counted::new();
        let mut service = RateLimitLayer::new().guard(guard).layer(inner.clone());
        for remaining in [1, 0] {
            let allowed = serve(&mut service, request_from("192.0.2.1:1")).await;
            assert_eq!(allowed.status(), StatusCode::OK);
            assert_eq!(allowed.headers()["ratelimit-policy"], r#""p1";q=2;w=60"#);
            let limit = format!(r#""p1";r={remaining};t=60"#);
            assert_eq!(allowed.headers()["ratelimit"], limit.as_str());
            assert_eq!(allowed.body(), "served");
        }
        let refused = serve(&mut service, request_from("192.0.2.1:1")).await;
        assert_eq!(inner.calls(), 2);
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let headers = refused.headers();
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(headers["retry-after"], "60");
        assert_eq!(headers["ratelimit-policy"], r#""p1";q=2;w=60"#);
        assert_eq!(headers["ratelimit"], r#""p1";r=0;t=60"#);
        assert_eq!(
            refused.body(),
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"the limit of 2 per 60s is reached; retry in 1m00s","violated-policies":["p1"]}"#
        );
        // Another client, another budget.
        let other = serve(&mut service, request_from("192.0.2.2:1")).await;
        assert_eq!(other.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn guards_are_checked_in_order_up_to_the_first_refusal() {
        let limiter = memory_limiter();
        let per_ip = Guard::new("tower::tests::first", &ONE_A_MINUTE).limiter(limiter);
        let shared = Guard::new("tower::tests::second", &FIVE_A_MINUTE)
            .limit_type(LimitType::Global)
            .limiter(limiter);
        let inner = Counted::new();
        let mut service = RateLimitLayer::new()
            .guard(per_ip)
            .guard(shared)
            .layer(inner.clone());

        let allowed = serve(&mut service, request_from("192.0.2.1:1")).await;
        // Both admitted it; the per-IP guard, with nothing left, binds harder.
        assert_eq!(allowed.headers()["ratelimit"], r#""p1";r=0;t=60"#);
        assert_eq!(allowed.headers()["ratelimit-policy"], r#""p1";q=1;w=60"#);
        let refused = serve(&mut service, request_from("192.0.2.1:1")).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(inner.calls(), 1);
        // The second guard was not asked for the refused request: it counted one call.
        let shared_key = "rate_limit:global:tower::tests::second";
        let left = limiter.peek(shared_key, &FIVE_A_MINUTE).await.unwrap();
        assert_eq!(left.remaining, 4);
    }

    #[tokio::test]
    async fn exempt_requests_are_not_checked() {
        let guard = Guard::new("tower::tests::exempt", &ONE_A_MINUTE).limiter(memory_limiter());
        let inner = Counted::new();
        let mut service = RateLimitLayer::new()
            .exempt(|req: &Request<Body>| req.headers().contains_key("x-internal"))
            .guard(guard)
            .layer(inner.clone());
        for _ in 0..3 {
            let mut req = request_from("192.0.2.1:1");
            req.headers_mut()
                .insert("x-internal", HeaderValue::from_static("1"));
            let response = serve(&mut service, req).await;
            assert_eq!(response.status(), StatusCode::OK);
            assert!(!response.headers().contains_key("ratelimit"));
        }
        // The budget is still whole.
        let counted = serve(&mut service, request_from("192.0.2.1:1")).await;
        assert_eq!(counted.headers()["ratelimit"], r#""p1";r=0;t=60"#);
        assert_eq!(inner.calls(), 4);
    }

    #[tokio::test]
    async fn only_a_layer_with_guards_clones_its_service() {
        let inner = Counted::new();
        let mut plain = RateLimitLayer::new().layer(inner.clone());
        let clones_before = inner.clones.load(Ordering::SeqCst);
        for _ in 0..3 {
            serve(&mut plain, request_from("192.0.2.1:1")).await;
        }
        assert_eq!(inner.clones.load(Ordering::SeqCst), clones_before);

        let guard = Guard::new("tower::tests::clones", &FIVE_A_MINUTE).limiter(memory_limiter());
        let mut guarded = RateLimitLayer::new().guard(guard).layer(inner.clone());
        let clones_before = inner.clones.load(Ordering::SeqCst);
        for _ in 0..3 {
            serve(&mut guarded, request_from("192.0.2.1:1")).await;
        }
        assert_eq!(inner.clones.load(Ordering::SeqCst), clones_before + 3);
        assert_eq!(inner.calls(), 6);
    }

    #[tokio::test]
    async fn a_missing_identity_is_answered_a_generic_500_before_the_inner_service() {
        let limiter = memory_limiter();
        let per_user = Guard::new("tower::tests::per_user", &FIVE_A_MINUTE)
            .limit_type(LimitType::UserId)
            .limiter(limiter);
        let inner = Counted::new();
        let mut service = RateLimitLayer::new().guard(per_user).layer(inner.clone());
        let anonymous = serve(&mut service, request_from("192.0.2.1:1")).await;
        assert_eq!(anonymous.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            anonymous.headers()["content-type"],
            "application/problem+json"
        );
        assert!(!anonymous.headers().contains_key("ratelimit"));
        let generic = r#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"the server could not handle this request"}"#;
        assert_eq!(anonymous.body(), generic);

        let per_ip = Guard::new("tower::tests::per_ip", &FIVE_A_MINUTE).limiter(limiter);
        let mut service = RateLimitLayer::new().guard(per_ip).layer(inner.clone());
        let without_peer = serve(&mut service, Request::new(())).await;
        assert_eq!(without_peer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(without_peer.body(), generic);
        assert_eq!(inner.calls(), 0);
    }

    #[tokio::test]
    async fn the_guard_and_the_handler_s_calls_share_one_decision_slot() {
        let limiter = memory_limiter();
        // The handler's guarded call: 9 of RULES's 10 left, or a refusal.
        let handler = |allowed: bool| {
            service_fn(move |_req: Request<Body>| async move {
                context::record_with(|| {
                    Some(SiteDecision {
                        decision: decision(allowed, 0, if allowed { 9 } else { 0 }),
                        rules: &RULES,
                        duplicate_rule: true,
                        concurrency: None,
                    })
                });
                let mut response = Response::new(String::new());
                if !allowed {
                    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                }
                Ok::<_, Infallible>(response)
            })
        };
        let guard = Guard::new("tower::tests::slot", &TWO_A_MINUTE).limiter(limiter);
        let layer = RateLimitLayer::new().guard(guard);

        // The guard, with 1 of 2 left, binds harder than the handler's 9 of 10.
        let response = serve(&mut layer.layer(handler(true)), request_from("192.0.2.1:1")).await;
        assert_eq!(response.headers()["ratelimit-policy"], r#""p1";q=2;w=60"#);
        assert_eq!(response.headers()["ratelimit"], r#""p1";r=1;t=60"#);
        // The handler's refusal binds harder than the guard's last unit.
        let response = serve(
            &mut layer.layer(handler(false)),
            request_from("192.0.2.1:1"),
        )
        .await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            response.headers()["ratelimit-policy"],
            r#""p1";q=10;w=60, "dup";q=1;w=5"#
        );
        assert_eq!(response.headers()["ratelimit"], r#""p1";r=0;t=3"#);
        assert_eq!(response.headers()["retry-after"], "3");
    }

    #[test]
    fn the_layer_s_debug_names_its_guards() {
        let a = Guard::new("tower::tests::debug_a", &ONE_A_MINUTE);
        let b = Guard::new("tower::tests::debug_b", &ONE_A_MINUTE);
        let layer = RateLimitLayer::<Body>::new().guard(a).guard(b);
        let debug = format!("{layer:?}");
        assert!(
            debug.contains(r#"guards: ["tower::tests::debug_a", "tower::tests::debug_b"]"#),
            "{debug}"
        );
    }
}
