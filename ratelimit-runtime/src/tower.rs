//! tower integration (feature `tower`; `axum` and `tonic` enable it): a [`Layer`] over
//! `http::Request` that tells guarded handlers who is calling and describes their decision
//! in the response's `RateLimit-Policy` / `RateLimit` headers. It serves axum, tonic, and
//! hyper or any other tower stack alike.
//!
//! The peer address is read from the request's extensions, first found of:
//!
//! 1. [`PeerAddr`], inserted by your own code (a hyper server, a test, a custom acceptor);
//! 2. axum's `ConnectInfo<SocketAddr>` (feature `axum`; serve the app with
//!    `into_make_service_with_connect_info::<SocketAddr>()`);
//! 3. tonic's `TcpConnectInfo` (feature `tonic`; `tonic::transport::Server` inserts it).
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

use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::{HeaderMap, Request, Response, StatusCode};
use tokio::task::futures::TaskLocalFuture;
use tower_layer::Layer;
use tower_service::Service;

use crate::context::{self, DecisionSlot, RequestContext};
use crate::web::client_ip::ClientIpConfig;
use crate::web::fields::{self, FieldSink};
pub use crate::web::{InvalidProxyNet, ProxyHeader};

/// The peer address of a request's connection, for servers that do not record one in a
/// form the layer knows (axum's `ConnectInfo`, tonic's `TcpConnectInfo`): insert it into
/// the request's extensions before the layer runs. It wins over the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

type UserIdFn<B> = dyn Fn(&Request<B>) -> Option<Arc<str>> + Send + Sync;
type ExemptFn<B> = dyn Fn(&Request<B>) -> bool + Send + Sync;

/// A tower [`Layer`] that runs each `http::Request<B>` inside a [`RequestContext`], so that
/// `limit_type = IP` and `USER_ID` guards in its handlers know the caller, and that puts the
/// guards' decision into `RateLimit-Policy` / `RateLimit` response headers (and
/// `Retry-After` on a 429 that lacks it).
///
/// - **Client IP**: the peer address (see the [module docs](self) for where it is read).
///   Proxy headers are read only when the peer is a [trusted proxy](Self::trust_proxies).
///   IPv4-mapped IPv6 addresses count as IPv4; IPv6 clients are counted per
///   [network](Self::ipv6_prefix) (`/64`).
/// - **User id**: what the [`user_id`](Self::user_id) closure finds in the request.
/// - **Exemption**: requests the [`exempt`](Self::exempt) closure picks skip every guard.
///
/// `B` is the request body type: `axum::body::Body` for axum (named
/// `redis_ratelimit::axum::RateLimitLayer`), `tonic::body::Body` for tonic
/// (`redis_ratelimit::tonic::RateLimitLayer`), `hyper::body::Incoming` for hyper. Clones
/// share one configuration.
pub struct RateLimitLayer<B> {
    config: Arc<Config<B>>,
}

struct Config<B> {
    client_ip: ClientIpConfig,
    user_id: Option<Arc<UserIdFn<B>>>,
    exempt: Option<Arc<ExemptFn<B>>>,
}

impl<B> Clone for Config<B> {
    fn clone(&self) -> Self {
        Config {
            client_ip: self.client_ip.clone(),
            user_id: self.user_id.clone(),
            exempt: self.exempt.clone(),
        }
    }
}

impl<B> Default for Config<B> {
    fn default() -> Self {
        Config {
            client_ip: ClientIpConfig::default(),
            user_id: None,
            exempt: None,
        }
    }
}

impl<B> Clone for RateLimitLayer<B> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<B> Default for RateLimitLayer<B> {
    fn default() -> Self {
        RateLimitLayer {
            config: Arc::new(Config::default()),
        }
    }
}

impl<B> RateLimitLayer<B> {
    /// A layer taking the client IP from the peer address, with no trusted proxies, no
    /// user id and no exemption.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the proxies in these networks (`"10.0.0.0/8"`, `"2001:db8::/32"`, or a single
    /// address such as `"127.0.0.2"`) to tell the client address in the
    /// [proxy header](Self::proxy_header). Adds to the networks already trusted.
    ///
    /// The header is walked from the right, skipping trusted hops: the first untrusted
    /// address is the client. A request from a peer outside these networks is counted under
    /// the peer's own address whatever headers it sends.
    ///
    /// # Panics
    ///
    /// When a network does not parse, with a message naming it: the networks are usually
    /// written in the code, like routes. Use [`try_trust_proxies`](Self::try_trust_proxies)
    /// for networks read from configuration at run time.
    pub fn trust_proxies<I>(self, networks: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.try_trust_proxies(networks)
            .unwrap_or_else(|err| panic!("RateLimitLayer::trust_proxies: {err}"))
    }

    /// [`trust_proxies`](Self::trust_proxies), returning an error for a network that does
    /// not parse instead of panicking.
    ///
    /// ```
    /// # use ratelimit_runtime as redis_ratelimit; // the facade re-exports it with feature `axum`
    /// use redis_ratelimit::axum::RateLimitLayer;
    ///
    /// let from_env = "10.0.0.0/8, 192.168.0.0/16";
    /// let layer = RateLimitLayer::new().try_trust_proxies(from_env.split(','));
    /// assert!(layer.is_ok());
    /// let err = RateLimitLayer::new().try_trust_proxies(["10.0.0.0/33"]).err().unwrap();
    /// assert!(err.to_string().contains("`10.0.0.0/33` is not a trusted proxy network"));
    /// ```
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
    /// One host usually holds a whole `/64` and can pick any address in it, so IPv6 clients
    /// are counted per network: the context IP is the network address (`2001:db8:1:2::`).
    /// Use 128 to count every address apart, 56 or 48 for providers that hand out larger
    /// blocks.
    ///
    /// # Panics
    ///
    /// When `bits` is over 128.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.config_mut()
            .client_ip
            .set_ipv6_prefix(bits, "RateLimitLayer::ipv6_prefix");
        self
    }

    /// How to find the user id of a request, for `limit_type = USER_ID`: typically from an
    /// extension your authentication middleware set (which must then run before this
    /// layer, that is, be added after it). `None` means an anonymous request; a `USER_ID`
    /// guard refuses it with [`RateLimitError::MissingIdentity`](crate::RateLimitError).
    ///
    /// ```
    /// # use ratelimit_runtime as redis_ratelimit; // the facade re-exports it with feature `axum`
    /// use axum::extract::Request;
    /// use redis_ratelimit::axum::RateLimitLayer;
    ///
    /// #[derive(Clone)]
    /// struct CurrentUser { id: u64 }
    ///
    /// let layer = RateLimitLayer::new()
    ///     .user_id(|req: &Request| req.extensions().get::<CurrentUser>().map(|u| u.id.to_string()));
    /// ```
    pub fn user_id<F, U>(mut self, user_id: F) -> Self
    where
        F: Fn(&Request<B>) -> Option<U> + Send + Sync + 'static,
        U: Into<Arc<str>>,
    {
        self.config_mut().user_id = Some(Arc::new(move |req: &Request<B>| {
            user_id(req).map(Into::into)
        }));
        self
    }

    /// Which requests are exempt: guarded calls made while serving them skip the check
    /// (see [`RequestContext::with_exempt`]). The closure runs once per request.
    ///
    /// Exempting is the application's decision: an exempt request is not counted and never
    /// refused, so anyone who can make a request look exempt bypasses every limit. Decide
    /// from what a client cannot forge, such as the peer address of your monitoring network
    /// or a role your authentication set, never from a header or a path alone.
    ///
    /// ```
    /// # use ratelimit_runtime as redis_ratelimit; // the facade re-exports it with feature `axum`
    /// use std::net::SocketAddr;
    ///
    /// use axum::extract::{ConnectInfo, Request};
    /// use redis_ratelimit::axum::RateLimitLayer;
    ///
    /// // The health checker calls from 10.1.0.5.
    /// let layer = RateLimitLayer::new().exempt(|req: &Request| {
    ///     req.extensions()
    ///         .get::<ConnectInfo<SocketAddr>>()
    ///         .is_some_and(|ConnectInfo(peer)| peer.ip() == std::net::IpAddr::from([10, 1, 0, 5]))
    /// });
    /// ```
    pub fn exempt<F>(mut self, exempt: F) -> Self
    where
        F: Fn(&Request<B>) -> bool + Send + Sync + 'static,
    {
        self.config_mut().exempt = Some(Arc::new(exempt));
        self
    }

    fn config_mut(&mut self) -> &mut Config<B> {
        Arc::make_mut(&mut self.config)
    }
}

/// The peer address of a request, from the first extension that records one.
fn peer_of<B>(req: &Request<B>) -> Option<IpAddr> {
    let extensions = req.extensions();
    if let Some(PeerAddr(addr)) = extensions.get::<PeerAddr>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "axum")]
    if let Some(::axum::extract::ConnectInfo(addr)) =
        extensions.get::<::axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(addr.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = extensions
        .get::<::tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr.ip());
    }
    None
}

impl<B> Config<B> {
    fn context_of(&self, req: &Request<B>) -> RequestContext {
        let headers = req.headers();
        let mut ctx = RequestContext::new();
        let lines = |name| headers.get_all(name).into_iter().map(|v| v.as_bytes());
        if let Some(ip) = self.client_ip.client_ip(peer_of(req), lines) {
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

impl<B> fmt::Debug for RateLimitLayer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let client_ip = &self.config.client_ip;
        f.debug_struct("RateLimitLayer")
            .field("trusted_proxies", &client_ip.trusted)
            .field("proxy_header", &client_ip.header)
            .field("ipv6_prefix", &client_ip.ipv6_prefix)
            .field("user_id", &self.config.user_id.is_some())
            .field("exempt", &self.config.exempt.is_some())
            .finish()
    }
}

impl<S, B> Layer<S> for RateLimitLayer<B> {
    type Service = RateLimitService<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service of [`RateLimitLayer`].
pub struct RateLimitService<S, B> {
    inner: S,
    config: Arc<Config<B>>,
}

impl<S: Clone, B> Clone for RateLimitService<S, B> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, B> fmt::Debug for RateLimitService<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, ResBody> Service<Request<B>> for RateLimitService<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let ctx = self.config.context_of(&req);
        let slot = Arc::new(DecisionSlot::default());
        let inner = self.inner.call(req);
        ResponseFuture {
            inner: context::scope_future(ctx, context::recording(Arc::clone(&slot), inner)),
            slot,
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`RateLimitService`].
    pub struct ResponseFuture<F> {
        #[pin]
        inner: TaskLocalFuture<RequestContext, TaskLocalFuture<Arc<DecisionSlot>, F>>,
        slot: Arc<DecisionSlot>,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some(outcome) = this.slot.take() {
            let refused = is_refusal(response.status(), response.headers());
            fields::describe(&outcome, refused, response.headers_mut());
        }
        Poll::Ready(Ok(response))
    }
}

/// A 429, or a gRPC `RESOURCE_EXHAUSTED` (code 8) answered in the headers (a gRPC error
/// before any message is a trailers-only response, whose `grpc-status` is a header).
fn is_refusal(status: StatusCode, headers: &HeaderMap) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || headers.get("grpc-status").is_some_and(|code| code == "8")
}

impl FieldSink for HeaderMap {
    fn set(&mut self, name: &'static str, value: String) {
        let value =
            http::HeaderValue::try_from(value).expect("structured-field text is visible ASCII");
        self.insert(http::HeaderName::from_static(name), value);
    }

    fn has(&self, name: &'static str) -> bool {
        self.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use http::HeaderValue;
    use tower::{service_fn, ServiceExt};

    use super::*;
    use crate::context::SiteDecision;
    use crate::{Decision, Rule};

    static RULES: [Rule; 2] = [Rule::per_minute(10), Rule::new(1, Duration::from_secs(5))];

    type Body = ();

    fn request_from(peer: &str) -> Request<Body> {
        let mut req = Request::new(());
        let addr: SocketAddr = peer.parse().unwrap();
        req.extensions_mut().insert(PeerAddr(addr));
        req
    }

    /// Serves `req` through `layer` with a handler answering with the context it saw.
    async fn seen_context(
        layer: &RateLimitLayer<Body>,
        req: Request<Body>,
    ) -> Option<RequestContext> {
        let handler = service_fn(|_req: Request<Body>| async {
            let seen = RequestContext::current();
            let mut response = Response::new(());
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

    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn the_peer_comes_from_axum_connect_info() {
        let mut req = Request::new(());
        let addr: SocketAddr = "198.51.100.4:1".parse().unwrap();
        req.extensions_mut()
            .insert(::axum::extract::ConnectInfo(addr));
        let ctx = seen_context(&RateLimitLayer::new(), req).await.unwrap();
        assert_eq!(ctx.ip(), Some(addr.ip()));
    }

    #[cfg(feature = "tonic")]
    #[tokio::test]
    async fn the_peer_comes_from_tonic_tcp_connect_info() {
        let mut req = Request::new(());
        let addr: SocketAddr = "198.51.100.5:1".parse().unwrap();
        req.extensions_mut()
            .insert(::tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: Some(addr),
            });
        let ctx = seen_context(&RateLimitLayer::new(), req).await.unwrap();
        assert_eq!(ctx.ip(), Some(addr.ip()));
    }

    #[tokio::test]
    async fn a_peer_addr_extension_wins() {
        let mut req = request_from("192.0.2.77:1");
        #[cfg(feature = "axum")]
        req.extensions_mut()
            .insert(::axum::extract::ConnectInfo(SocketAddr::from((
                [192, 0, 2, 1],
                1,
            ))));
        req.extensions_mut().insert(0u8);
        let ctx = seen_context(&RateLimitLayer::new(), req).await.unwrap();
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
        assert!(Arc::ptr_eq(&a.config, &b.config));
        let b = b.ipv6_prefix(56);
        assert_eq!(a.config.client_ip.ipv6_prefix, 64);
        assert_eq!(b.config.client_ip.ipv6_prefix, 56);
        assert_eq!(b.config.client_ip.trusted, a.config.client_ip.trusted);
    }

    fn decision(allowed: bool, rule_index: usize, remaining: u64) -> Decision {
        Decision {
            allowed,
            limit: RULES[rule_index].count(),
            remaining,
            reset_after: Duration::from_secs(60),
            retry_after: (!allowed).then(|| Duration::from_millis(2_500)),
            rule: RULES[rule_index],
            rule_index,
            receipt: Default::default(),
        }
    }

    /// A handler whose "guarded calls" record these decisions, then answers `status`.
    async fn respond_after(decisions: Vec<Decision>, status: StatusCode) -> Response<Body> {
        let handler = service_fn(move |_req: Request<Body>| {
            let decisions = decisions.clone();
            async move {
                for decision in decisions {
                    // Across an await, as a guard in a handler would be.
                    tokio::task::yield_now().await;
                    context::record(SiteDecision {
                        decision,
                        rules: &RULES,
                        duplicate_rule: true,
                    });
                }
                let mut response = Response::new(());
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
        let response = respond_after(
            vec![
                decision(true, 0, 9),
                decision(true, 0, 3),
                decision(true, 0, 5),
            ],
            StatusCode::OK,
        )
        .await;
        assert_eq!(response.headers()["ratelimit"], r#""p1";r=3;t=60"#);

        let response = respond_after(
            vec![
                decision(true, 0, 0),
                decision(false, 1, 0),
                decision(true, 0, 0),
            ],
            StatusCode::TOO_MANY_REQUESTS,
        )
        .await;
        assert_eq!(response.headers()["ratelimit"], r#""dup";r=0;t=3"#);
        assert_eq!(response.headers()["retry-after"], "3");
    }

    #[tokio::test]
    async fn responses_without_a_guarded_call_are_untouched() {
        let response = respond_after(vec![], StatusCode::OK).await;
        assert!(response.headers().is_empty());
    }

    #[tokio::test]
    async fn outside_the_layer_recording_does_nothing() {
        // No scope: must neither panic nor leak into a later request.
        context::record(SiteDecision {
            decision: decision(false, 0, 0),
            rules: &RULES,
            duplicate_rule: false,
        });
        let response = respond_after(vec![], StatusCode::OK).await;
        assert!(response.headers().is_empty());
    }
}
