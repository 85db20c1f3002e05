//! tonic integration (feature `tonic`): the [tower layer](crate::tower) for gRPC servers,
//! and [`Status`] for [`RateLimitError`].
//!
//! ```
//! # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::tonic; }
//! use redis_ratelimit::tonic::RateLimitLayer;
//!
//! let server = tonic::transport::Server::builder()
//!     .layer(RateLimitLayer::new().trust_proxies(["10.0.0.0/8"]));
//! # let _ = server;
//! ```
//!
//! Then add the services and serve, as usual; `examples/grpc_server.rs` is a whole server
//! with a guarded method. A [guard](crate::Guard) on the layer
//! (`RateLimitLayer::new().guard(..)`) limits every call, before the method runs: a refused
//! call gets the `RESOURCE_EXHAUSTED` status below, as a trailers-only response.
//!
//! The layer reads the peer address from the `TcpConnectInfo` that
//! `tonic::transport::Server` records, and the proxy header, user id and exemption from
//! the request's metadata and extensions, with the same rules as for axum (see
//! [`crate::tower`]). A guarded method returns `Result<Response<T>, Status>`: a refused
//! call becomes the [`Status`] below through `From<RateLimitError>`.
//!
//! | error | code | message | metadata |
//! |---|---|---|---|
//! | `Limited` | `RESOURCE_EXHAUSTED` | the attribute's `message` | `retry-after`, `ratelimit-policy`, `ratelimit` |
//! | `MissingIdentity` | `INTERNAL` | what is missing (the layer, the peer address, a user id) | |
//! | `Backend` | `UNAVAILABLE` | "the rate limiter is unavailable; try again later" | |
//!
//! The metadata carries the same values as the HTTP headers of the other integrations
//! (see [`crate::axum`]): behind the layer, `ratelimit-policy` lists every rule of the call
//! site, and allowed calls carry `ratelimit-policy` and `ratelimit` in their response
//! metadata too.
//!
//! # A guarded method
//!
//! Service traits are `#[async_trait]` traits: write `#[rate_limiter]` below it, on the
//! method.
//!
//! ```
//! # mod redis_ratelimit { pub use ::redis_ratelimit::*; pub use ratelimit_runtime::tonic; }
//! # use tonic::{Request, Response, Status};
//! # pub struct CodeRequest; pub struct CodeReply { message: String } struct SmsService;
//! # #[tonic::async_trait] trait Sms: Send + Sync + 'static {
//! #     async fn send_code(&self, request: Request<CodeRequest>) -> Result<Response<CodeReply>, Status>;
//! # }
//! use redis_ratelimit::rate_limiter;
//!
//! #[tonic::async_trait]
//! impl Sms for SmsService {
//!     #[rate_limiter(rules("5/minute"), prevent_duplicate = true, limit_type = IP)]
//!     async fn send_code(&self, request: Request<CodeRequest>) -> Result<Response<CodeReply>, Status> {
//!         Ok(Response::new(CodeReply { message: "code sent".into() }))
//!     }
//! }
//! ```
//!
//! `examples/grpc_server.rs` writes its messages with `prost` derives, so it builds without
//! `protoc`; `proto/sms.proto` describes it for other clients:
//!
//! ```text
//! $ cargo run --example grpc_server &
//! $ cargo run --example grpc_server -- call '+1 555 0100'
//! OK: code sent to +1 555 0100
//!   ratelimit-policy: "p1";q=5;w=60, "dup";q=1;w=5
//!   ratelimit: "dup";r=0;t=5
//! RESOURCE_EXHAUSTED: too many verification codes; wait before asking for another
//!   retry-after: 5
//!   ratelimit-policy: "p1";q=5;w=60, "dup";q=1;w=5
//!   ratelimit: "dup";r=0;t=5
//! $ grpcurl -plaintext -import-path proto -proto sms.proto \
//!     -d '{"phone": "+1 555 0100"}' 127.0.0.1:50051 sms.Sms/SendCode
//! ```

use std::net::IpAddr;

use ::tonic::body::Body;
use ::tonic::metadata::{MetadataMap, MetadataValue};
use ::tonic::transport::server::TcpConnectInfo;
use ::tonic::Status;
use http::Extensions;

pub use crate::tower::{InvalidProxyNet, PeerAddr, ProxyHeader, ResponseFuture};
use crate::tower::{PeerSource, RefusalBody};
use crate::web::fields::{self, FieldSink};
use crate::web::problem::{self, Integration, Problem};
use crate::{RateLimitError, RequestContext};

/// The [tower layer](crate::tower::RateLimitLayerWith) for tonic's requests: it reads the
/// peer address from tonic's `TcpConnectInfo`, or from a [`PeerAddr`] extension. Add it
/// with `Server::builder().layer(...)`.
pub type RateLimitLayer = crate::tower::RateLimitLayerWith<Body, TcpConnectInfo>;

/// The service of [`RateLimitLayer`].
pub type RateLimitService<S> = crate::tower::RateLimitService<S, Body, TcpConnectInfo>;

/// Where `tonic::transport::Server` records the peer address of a TCP connection.
impl PeerSource for TcpConnectInfo {
    const HOW_TO_RECORD: &'static str =
        "serve with tonic's transport::Server over TCP (which records TcpConnectInfo), or \
         insert a redis_ratelimit::tower::PeerAddr extension before the layer";

    fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
        let info = extensions.get::<Self>()?;
        info.remote_addr().map(|addr| addr.ip())
    }
}

/// - `Limited` → `RESOURCE_EXHAUSTED` with the attribute's `message`, and metadata
///   `retry-after` (whole seconds, rounded up; none for a cost that can never pass),
///   `ratelimit-policy` and `ratelimit`;
/// - `MissingIdentity` → `INTERNAL`, generic; what is missing is logged, not sent;
/// - `Backend` → `UNAVAILABLE`; the cause is logged, not sent.
impl From<RateLimitError> for Status {
    fn from(err: RateLimitError) -> Status {
        match &err {
            RateLimitError::Limited {
                rule,
                retry_after,
                message,
                ..
            } => {
                let mut metadata = MetadataMap::new();
                fields::describe_refusal(rule, *retry_after, &mut metadata);
                Status::with_metadata(::tonic::Code::ResourceExhausted, *message, metadata)
            }
            RateLimitError::MissingIdentity { limit_type } => {
                let detail = problem::missing_identity(
                    *limit_type,
                    RequestContext::current(),
                    Integration::Tonic,
                );
                problem::log_missing_identity(&detail);
                Status::internal(problem::MISCONFIGURED)
            }
            RateLimitError::Backend(_) => {
                Status::unavailable(Problem::of(&err, Integration::Tonic).detail)
            }
        }
    }
}

/// A guard's refusal in tonic's body: to a gRPC request, the [`Status`] a guarded
/// method's refusal becomes, as a trailers-only response.
impl RefusalBody for Body {
    fn from_text(text: String) -> Self {
        if text.is_empty() {
            Body::empty()
        } else {
            Body::new(text)
        }
    }

    fn grpc_refusal(err: RateLimitError) -> Result<http::Response<Self>, RateLimitError> {
        Ok(Status::from(err).into_http::<()>().map(|()| Body::empty()))
    }

    /// A streaming method's answer holds the slots to its end.
    fn holding(self, held: crate::tower::HeldSlots) -> Self {
        Body::new(crate::web::held::SlotBody::new(self, held))
    }
}

impl FieldSink for MetadataMap {
    fn set(&mut self, name: &'static str, value: String) {
        let value = MetadataValue::try_from(value).expect("structured-field text is visible ASCII");
        self.insert(name, value);
    }

    fn has(&self, name: &'static str) -> bool {
        self.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use ::tonic::Code;

    use super::*;
    use crate::tower::tests::seen_context;
    use crate::web::problem::tests::{
        assert_limited_fields, backend_failure, limited, never_passes,
    };
    use crate::LimitType;

    #[test]
    fn limited_is_resource_exhausted_with_the_wait_in_metadata() {
        let status = Status::from(limited("too many codes"));
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(status.message(), "too many codes");
        let metadata = status.metadata();
        assert_limited_fields(|name| metadata.get(name).map(|v| v.to_str().unwrap()));
    }

    #[test]
    fn a_cost_that_can_never_pass_has_no_retry_after() {
        let status = Status::from(never_passes());
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.metadata().get("retry-after").is_none());
    }

    #[test]
    fn a_backend_failure_is_unavailable_without_its_cause() {
        let status = Status::from(backend_failure());
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(
            status.message(),
            "the rate limiter is unavailable; try again later"
        );
        assert!(status.metadata().is_empty());
    }

    #[tokio::test]
    async fn the_peer_comes_from_tcp_connect_info() {
        let mut req = http::Request::new(Body::empty());
        let addr: SocketAddr = "198.51.100.5:1".parse().unwrap();
        req.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(addr),
        });
        let ctx = seen_context(&RateLimitLayer::new(), req).await.unwrap();
        assert_eq!(ctx.ip(), Some(addr.ip()));
    }

    #[test]
    fn a_missing_identity_is_a_generic_internal_error_and_the_log_says_what_is_missing() {
        let status = Status::from(RateLimitError::MissingIdentity {
            limit_type: LimitType::Ip,
        });
        assert_eq!(status.code(), Code::Internal);
        assert_eq!(status.message(), "the server could not handle this request");
        let outside = problem::missing_identity(LimitType::Ip, None, Integration::Tonic);
        assert!(
            outside.contains("add redis_ratelimit::tonic::RateLimitLayer to the server"),
            "{outside}"
        );
        let inside = problem::missing_identity(
            LimitType::Ip,
            Some(RequestContext::new()),
            Integration::Tonic,
        );
        assert!(inside.contains("TcpConnectInfo"), "{inside}");
    }

    static ONE_A_MINUTE: [crate::Rule; 1] = [crate::Rule::per_minute(1)];

    #[tokio::test]
    async fn a_grpc_request_a_guard_refuses_gets_resource_exhausted() {
        use std::convert::Infallible;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        use tower::{service_fn, Layer, ServiceExt};

        let limiter: &'static crate::Limiter = Box::leak(Box::new(crate::Limiter::memory()));
        let guard = crate::Guard::new("tonic::tests::grpc", &ONE_A_MINUTE).limiter(limiter);
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let service = RateLimitLayer::new().guard(guard).layer(service_fn(
            move |_req: http::Request<Body>| {
                counted.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Infallible>(http::Response::new(Body::empty())) }
            },
        ));
        let call = || {
            let mut req = http::Request::new(Body::empty());
            req.headers_mut()
                .insert("content-type", "application/grpc".parse().unwrap());
            req.extensions_mut()
                .insert(PeerAddr(([192, 0, 2, 1], 1).into()));
            service.clone().oneshot(req)
        };
        let allowed = call().await.unwrap();
        assert_eq!(allowed.headers()["ratelimit"], r#""p1";r=0;t=60"#);
        let refused = call().await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // A trailers-only response: the status and its metadata are headers.
        let headers = refused.headers();
        assert_eq!(refused.status(), http::StatusCode::OK);
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(headers["grpc-status"], "8");
        assert_eq!(headers["grpc-message"], "too%20many%20requests");
        assert_eq!(headers["retry-after"], "60");
        assert_eq!(headers["ratelimit-policy"], r#""p1";q=1;w=60"#);
        assert_eq!(headers["ratelimit"], r#""p1";r=0;t=60"#);
    }
}
