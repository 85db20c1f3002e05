//! What every framework integration shares, written once and free of any framework: who
//! the client is ([`client_ip`]), the rate-limit fields of a response ([`fields`]), the
//! answer to a [`RateLimitError`](crate::RateLimitError) ([`problem`]), and the middleware
//! itself: its settings and what it does for each request ([`middleware`]). The
//! integrations only translate their request and response types.

pub(crate) mod client_ip;
pub(crate) mod fields;
pub(crate) mod held;
pub(crate) mod middleware;
#[cfg(feature = "tower")]
pub(crate) mod peer;
pub(crate) mod problem;
pub(crate) mod refusal;

pub use client_ip::{InvalidProxyNet, ProxyHeader};
pub use middleware::ResponseFuture;
