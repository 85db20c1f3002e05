//! Where a tower layer finds the peer address of a request's connection.

use std::net::{IpAddr, SocketAddr};

use http::Extensions;

/// The peer address of a request's connection, for servers that do not record one where
/// the layer's [`PeerSource`] looks: insert it into the request's extensions before the
/// layer runs. It wins over any other source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Where a server records the peer address of a request's connection: an extension type,
/// and how to read the address from it. [`RateLimitLayerWith`](crate::tower::RateLimitLayerWith) reads it when the request
/// carries no [`PeerAddr`].
///
/// axum's `ConnectInfo<SocketAddr>` (feature `axum`) and tonic's `TcpConnectInfo` (feature
/// `tonic`) are sources; implement it for the extension your own server inserts:
///
/// ```
/// # use ratelimit_runtime as redis_ratelimit; // the facade re-exports it with feature `tower`
/// use std::net::IpAddr;
///
/// use redis_ratelimit::tower::{PeerSource, RateLimitLayerWith};
///
/// /// What our acceptor records for each connection.
/// #[derive(Clone)]
/// struct Remote(IpAddr);
///
/// impl PeerSource for Remote {
///     fn peer_ip(extensions: &http::Extensions) -> Option<IpAddr> {
///         extensions.get::<Remote>().map(|remote| remote.0)
///     }
/// }
///
/// let layer = RateLimitLayerWith::<String, Remote>::new().trust_proxies(["10.0.0.0/8"]);
/// ```
pub trait PeerSource {
    /// How to have requests carry this source's record: what the layer's answer to a
    /// request without a peer address tells the operator, when a [guard](crate::Guard)
    /// needs the client IP.
    const HOW_TO_RECORD: &'static str = "insert a redis_ratelimit::tower::PeerAddr extension \
                                         with the connection's address before the layer";

    /// The peer address this source recorded in a request's extensions, if any.
    fn peer_ip(extensions: &Extensions) -> Option<IpAddr>;
}

impl PeerSource for PeerAddr {
    fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
        extensions.get::<PeerAddr>().map(|PeerAddr(addr)| addr.ip())
    }
}
