//! axum integration (feature `axum`): a layer that tells guarded handlers who is calling,
//! and HTTP responses for [`RateLimitError`].
//!
//! ```toml
//! redis-ratelimit = { version = "0.5", features = ["axum"] }
//! ```
//!
//! The layer is the [tower layer](crate::tower) for axum's body type, reading the peer
//! address from `ConnectInfo<SocketAddr>`.
//!
//! ```no_run
//! # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::axum; }
//! use std::net::SocketAddr;
//!
//! use axum::{routing::post, Router};
//! use redis_ratelimit::axum::RateLimitLayer;
//! use redis_ratelimit::{rate_limiter, RateLimitError};
//!
//! #[rate_limiter(rules("10/minute"), prevent_duplicate = true, limit_type = IP)]
//! async fn send_code(phone: String) -> Result<String, RateLimitError> {
//!     Ok(format!("code sent to {phone}"))
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let app = Router::new()
//!     .route("/sms/code", post(send_code))
//!     .layer(RateLimitLayer::new().trust_proxies(["10.0.0.0/8"]));
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:3000").await?;
//! // The peer address is the client IP (or the proxy that forwarded the request).
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! ```
//!
//! # Who the caller is
//!
//! [`RateLimitLayer`] runs every request inside a
//! [`RequestContext`](crate::RequestContext) holding:
//!
//! - the **client IP**: the peer address, from `ConnectInfo<SocketAddr>`. When the peer is
//!   in a network given to [`trust_proxies`](RateLimitLayer::trust_proxies), the
//!   [`ProxyHeader`] (`X-Forwarded-For` by default, or `Forwarded`, or `X-Real-IP`) is
//!   walked from the right past trusted hops, and the first untrusted address is the client.
//!   Headers from any other peer are ignored, so a client cannot choose its own budget.
//!   IPv4-mapped IPv6 addresses are IPv4; IPv6 clients are counted per `/64`
//!   ([`ipv6_prefix`](RateLimitLayer::ipv6_prefix)).
//! - the **user id**: what the [`user_id`](RateLimitLayer::user_id) closure returns;
//! - whether it is **exempt**: what the [`exempt`](RateLimitLayer::exempt) closure returns
//!   (guarded calls then skip the check: for callers the application trusts, such as a
//!   health checker; see [`RequestContext::with_exempt`](crate::RequestContext::with_exempt)).
//!
//! Without the layer, or without what a guard needs from it, the guard refuses the call with
//! `MissingIdentity`, which answers `500` with a body saying what is missing: a `USER_ID`
//! route reached without a user id is a configuration error, not a shared bucket.
//!
//! Exempting is your application's decision: anyone who can make a request look exempt
//! bypasses every limit, so decide from what a client cannot forge (the peer address of
//! your monitoring network, an authenticated role), never from a header or a path alone.
//!
//! The client-IP rules are written once, framework-free, and shared by every integration
//! ([tower](crate::tower), [tonic](crate::tonic), [actix](crate::actix)).
//!
//! # Guards on the router
//!
//! [`RateLimitLayer::guard`] limits every request through the layer, before it reaches a
//! handler, with no attribute on the handlers (see [`Guard`](crate::Guard)):
//!
//! ```
//! # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::axum; }
//! use axum::{routing::get, Router};
//! use redis_ratelimit::axum::RateLimitLayer;
//! use redis_ratelimit::{Guard, Rule};
//!
//! static API: [Rule; 2] = [Rule::per_minute(100), Rule::per_hour(1000)];
//!
//! let app: Router = Router::new()
//!     .route("/search", get(|| async { "results" }))
//!     .layer(RateLimitLayer::new().guard(Guard::new("api", &API)));
//! ```
//!
//! A refused request is answered as below, without reaching the handler.
//!
//! # Responses
//!
//! [`RateLimitError`] implements `IntoResponse`:
//!
//! | error | status | headers | body (`application/problem+json`, RFC 9457) |
//! |---|---|---|---|
//! | `Limited` | 429 | `Retry-After`, `RateLimit-Policy`, `RateLimit` | type `https://iana.org/assignments/http-problem-types#quota-exceeded`, `violated-policies` (the policy's name, as below), and a `detail` saying which limit refused and when to retry (after the attribute's `message`, when it has one): "the limit of 10 per 60s is reached; retry in 12s", "4 requests of this caller already in flight; retry when one of them completes" |
//! | `MissingIdentity` | 500 | | what is missing (the layer, the peer address, a user id) |
//! | `Backend` | 503 | | "the rate limiter is unavailable; try again later" |
//!
//! Every response to a request that reached a guarded call, allowed or not, carries the
//! `RateLimit-Policy` and `RateLimit` fields of
//! [draft-ietf-httpapi-ratelimit-headers-11](https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/)
//! (whose wire format is draft 10's):
//!
//! ```text
//! RateLimit-Policy: "p1";q=10;w=60, "p2";q=20;w=120, "dup";q=1;w=5
//! RateLimit: "p1";r=0;t=12
//! Retry-After: 12
//! ```
//!
//! - Policies are named `p1`, `p2`, ... after the attribute's rules in the order written,
//!   `dup` for the `prevent_duplicate` rule and `conc` for `concurrency`; `q` is the
//!   quota (the rule's count, in requests, or units with `cost`), `w` its window in
//!   seconds. A window that is not a whole number of seconds (`250 ms`) has no `w`: the
//!   draft's windows are whole seconds, and rounding would advertise another rate. A
//!   calendar quota (`"2000000 per calendar month"`) has no `w` either, as no fixed window
//!   fits a month, and `conc` (`qu="concurrent-requests"`) has none: a slot is held as long
//!   as its call runs.
//! - `RateLimit` describes the binding policy: `r`, its available quota (units left), and
//!   `t`, its effective window: the seconds (rounded up) until additional quota is
//!   available: when denied, until a call would pass; when allowed, until the rule's
//!   window is free again (for a sliding log, whose units come back one by one, the last
//!   of them; for a calendar quota, the period's end). `conc` has no `t`: nobody knows when
//!   a call in flight ends. When a request makes several guarded calls, the one that binds
//!   hardest is described.
//! - `Retry-After` is in whole seconds, rounded up: never earlier than a retry can pass, nor
//!   than `t`.
//! - A `RateLimitError` turned into a response outside the layer knows only its own rule
//!   and names it `limit`.
//!
//! The same fields, computed by the same code, are sent by the [tonic](crate::tonic) (as
//! metadata) and [actix](crate::actix) integrations.
//!
//! # The example server
//!
//! `examples/axum_server.rs` is a small API on the embedded backend (or Redis with
//! `RATELIMIT_REDIS_URL`), every API request also counted by a guard (60 a minute per
//! client IP), `GET /health` outside it:
//!
//! ```text
//! $ cargo run --example axum_server
//! $ curl -i -X POST localhost:3000/sms/code -d '+1 555 0100'
//! HTTP/1.1 200 OK
//! ratelimit-policy: "p1";q=5;w=60, "p2";q=10;w=3600, "dup";q=1;w=5
//! ratelimit: "dup";r=0;t=5
//!
//! code sent to +1 555 0100
//! $ curl -i -X POST localhost:3000/sms/code -d '+1 555 0100'
//! HTTP/1.1 429 Too Many Requests
//! content-type: application/problem+json
//! retry-after: 5
//! ratelimit-policy: "p1";q=5;w=60, "p2";q=10;w=3600, "dup";q=1;w=5
//! ratelimit: "dup";r=0;t=5
//!
//! {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"too many verification codes; wait before asking for another (the limit of 1 per 5s is reached; retry in 5s)","violated-policies":["dup"]}
//! $ curl -i 'localhost:3000/search?q=rust' -H 'x-user-id: 42'     # 3 per 10 s per user
//! $ curl -i localhost:3000/health                                 # never limited, no headers
//! ```

use std::net::{IpAddr, SocketAddr};

use ::axum::body::Body;
use ::axum::extract::ConnectInfo;
use ::axum::http::Extensions;
use ::axum::response::{IntoResponse, Response};

pub use crate::tower::{InvalidProxyNet, PeerAddr, ProxyHeader, ResponseFuture};
use crate::tower::{PeerSource, RefusalBody};
use crate::web::problem::Integration;
use crate::RateLimitError;

/// The [tower layer](crate::tower::RateLimitLayerWith) for axum's requests: it reads the
/// peer address from [`ConnectInfo<SocketAddr>`](ConnectInfo) (serve the app with
/// `into_make_service_with_connect_info::<SocketAddr>()`), or from a [`PeerAddr`]
/// extension. See the [module docs](self) for an example.
pub type RateLimitLayer = crate::tower::RateLimitLayerWith<Body, ConnectInfo<SocketAddr>>;

/// The service of [`RateLimitLayer`].
pub type RateLimitService<S> = crate::tower::RateLimitService<S, Body, ConnectInfo<SocketAddr>>;

/// Where `into_make_service_with_connect_info::<SocketAddr>()` records the peer address.
impl PeerSource for ConnectInfo<SocketAddr> {
    const HOW_TO_RECORD: &'static str =
        "serve the app with into_make_service_with_connect_info::<SocketAddr>()";

    fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
        extensions.get::<Self>().map(|ConnectInfo(addr)| addr.ip())
    }
}

/// - `Limited`: `429 Too Many Requests` with `Retry-After` (whole seconds, rounded up; none
///   for a call whose cost exceeds a rule's count, which can never pass),
///   `RateLimit-Policy` and `RateLimit` for the binding rule (named `"limit"`; behind a
///   [`RateLimitLayer`] they list every rule of the call site instead), and the
///   attribute's `message` as the problem `detail`.
/// - `MissingIdentity`: `500 Internal Server Error` saying what is missing: the layer, the
///   peer address, or a user id.
/// - `Backend`: `503 Service Unavailable`; the cause is logged, not sent.
///
/// Bodies are `application/problem+json` (RFC 9457).
impl IntoResponse for RateLimitError {
    fn into_response(self) -> Response {
        crate::tower::answer(&self, Integration::Axum)
    }
}

/// A guard's refusal in axum's body.
impl RefusalBody for Body {
    fn from_text(text: String) -> Self {
        Body::from(text)
    }

    /// A streamed answer holds the slots to its end.
    fn holding(self, held: crate::tower::HeldSlots) -> Self {
        Body::new(crate::web::held::SlotBody::new(self, held))
    }
}

#[cfg(test)]
mod tests {
    use ::axum::body::to_bytes;
    use ::axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
    use ::axum::http::StatusCode;

    use super::*;
    use crate::tower::tests::seen_context;
    use crate::web::problem::tests::{
        assert_limited_fields, backend_failure, limited, never_passes,
    };
    use crate::{LimitType, RequestContext};

    async fn body_of(response: Response) -> String {
        let bytes = to_bytes(response.into_body(), 64 * 1024).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn limited_is_429_with_retry_after_rounded_up_and_the_rule() {
        let err = limited("too many codes, \"slow\" down");
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let headers = response.headers();
        assert_limited_fields(|name| headers.get(name).map(|v| v.to_str().unwrap()));
        assert_eq!(headers[CONTENT_TYPE], "application/problem+json");
        assert_eq!(
            body_of(response).await,
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"too many codes, \"slow\" down (the limit of 10 per 60s is reached; retry in 12s)","violated-policies":["limit"]}"#
        );
    }

    #[test]
    fn a_cost_that_can_never_pass_is_429_without_retry_after() {
        let err = never_passes();
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let headers = response.headers();
        assert!(!headers.contains_key(RETRY_AFTER));
        assert_eq!(headers["ratelimit-policy"], r#""limit";q=10;w=60"#);
        assert_eq!(headers["ratelimit"], r#""limit";r=0;t=60"#);
    }

    #[tokio::test]
    async fn backend_failure_is_503_without_its_cause() {
        let err = backend_failure();
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        assert!(!response.headers().contains_key(RETRY_AFTER));
        assert_eq!(
            body_of(response).await,
            r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter is unavailable; try again later"}"#
        );
    }

    #[tokio::test]
    async fn missing_identity_is_a_generic_500_that_says_nothing_of_the_configuration() {
        let err = RateLimitError::MissingIdentity {
            limit_type: LimitType::Ip,
        };
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(
            body_of(response).await,
            "{\"type\":\"about:blank\",\"title\":\"Internal Server Error\",\"status\":500,\
             \"detail\":\"the server could not handle this request\"}"
        );
    }

    #[tokio::test]
    async fn the_peer_comes_from_connect_info_unless_a_peer_addr_is_given() {
        let request_from = |addr: SocketAddr| {
            let mut req = ::axum::extract::Request::new(Body::empty());
            req.extensions_mut().insert(ConnectInfo(addr));
            req
        };
        let addr: SocketAddr = "198.51.100.4:1".parse().unwrap();
        let ctx = seen_context(&RateLimitLayer::new(), request_from(addr)).await;
        assert_eq!(ctx.unwrap().ip(), Some(addr.ip()));

        let mut req = request_from(SocketAddr::from(([192, 0, 2, 1], 1)));
        req.extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([192, 0, 2, 77], 1))));
        let ctx = seen_context(&RateLimitLayer::new(), req).await;
        assert_eq!(ctx.unwrap().ip(), Some([192, 0, 2, 77].into()));
    }

    #[test]
    fn what_a_missing_identity_lacked_is_said_for_the_log() {
        use crate::web::problem::{missing_identity, Integration};
        let outside = missing_identity(LimitType::Ip, None, Integration::Axum);
        assert!(
            outside.contains("add redis_ratelimit::axum::RateLimitLayer to the router"),
            "{outside}"
        );
        let inside = |limit_type| {
            missing_identity(limit_type, Some(RequestContext::new()), Integration::Axum)
        };
        let user = inside(LimitType::UserId);
        assert!(
            user.contains("USER_ID needs a user id, but the rate-limit layer found no user id"),
            "{user}"
        );
        let ip = inside(LimitType::Ip);
        assert!(
            ip.contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "{ip}"
        );
    }
}
