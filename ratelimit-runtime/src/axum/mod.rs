//! axum integration (feature `axum`): a layer that tells guarded handlers who is calling,
//! and HTTP responses for [`RateLimitError`](crate::RateLimitError).
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
//! - the **user id**: what the [`user_id`](RateLimitLayer::user_id) closure returns.
//!
//! Without the layer, or without what a guard needs from it, the guard refuses the call with
//! `MissingIdentity`, which answers `500` with a body saying what is missing.
//!
//! # Responses
//!
//! [`RateLimitError`](crate::RateLimitError) implements `IntoResponse`:
//!
//! | error | status | headers | body (`application/problem+json`, RFC 9457) `detail` |
//! |---|---|---|---|
//! | `Limited` | 429 | `Retry-After`, `RateLimit-Policy`, `RateLimit` | the attribute's `message` |
//! | `MissingIdentity` | 500 | | what is missing (the layer, the peer address, a user id) |
//! | `Backend` | 503 | | "the rate limiter is unavailable; try again later" |
//!
//! Every response to a request that reached a guarded call, allowed or not, carries the
//! `RateLimit-Policy` and `RateLimit` headers of draft-ietf-httpapi-ratelimit-headers:
//!
//! ```text
//! RateLimit-Policy: "p1";q=10;w=60, "p2";q=20;w=120, "dup";q=1;w=5
//! RateLimit: "p1";r=0;t=12
//! Retry-After: 12
//! ```
//!
//! - Policies are named `p1`, `p2`, ... after the attribute's rules in the order written,
//!   and `dup` for the `prevent_duplicate` rule; `q` is the rule's count, `w` its window in
//!   seconds (rounded up).
//! - `RateLimit` describes the binding rule: `r` calls left, and `t` seconds until its
//!   window is free again, or, when denied, until a call would pass. When a request makes
//!   several guarded calls, the one that binds hardest is described.
//! - `Retry-After` is in whole seconds, rounded up: never earlier than a retry can pass.
//! - A `RateLimitError` turned into a response outside the layer knows only its own rule
//!   and names it `limit`.

mod client_ip;
mod headers;
mod layer;
mod response;

pub use client_ip::{InvalidProxyNet, ProxyHeader};
pub use layer::{RateLimitLayer, RateLimitService, ResponseFuture};
