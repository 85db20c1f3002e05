//! A small gRPC service with a method rate-limited per client IP, with tonic.
//!
//! ```text
//! cargo run --example grpc_server                         # serves on 127.0.0.1:50051
//! cargo run --example grpc_server -- call '+1 555 0100'   # calls it: OK, then RESOURCE_EXHAUSTED
//! grpcurl -plaintext -import-path proto -proto sms.proto \
//!     -d '{"phone": "+1 555 0100"}' 127.0.0.1:50051 sms.Sms/SendCode
//! ```
//!
//! `RATELIMIT_REDIS_URL` selects a shared Redis (else the embedded backend), `LISTEN` the
//! address, `TRUSTED_PROXIES` (`10.0.0.0/8,192.168.0.0/16`) the proxies whose
//! `x-forwarded-for` is believed.
//!
//! The messages and the service glue are written by hand, as `tonic-build` would generate
//! them from `proto/sms.proto`, so that building needs no `protoc`.

#[allow(dead_code)] // the HTTP examples' authentication
#[path = "common/mod.rs"]
mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use redis_ratelimit::tonic::RateLimitLayer;
use redis_ratelimit::{rate_limiter, Limiter};
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::{NamedService, UnaryService};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// `message CodeRequest { string phone = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct CodeRequest {
    #[prost(string, tag = "1")]
    pub phone: String,
}

/// `message CodeReply { string message = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct CodeReply {
    #[prost(string, tag = "1")]
    pub message: String,
}

/// `service Sms { rpc SendCode(CodeRequest) returns (CodeReply); }`, as tonic-build
/// declares a service: a trait of `#[async_trait]` methods.
#[tonic::async_trait]
pub trait Sms: Send + Sync + 'static {
    /// Sends a verification code.
    async fn send_code(&self, request: Request<CodeRequest>)
        -> Result<Response<CodeReply>, Status>;
}

/// The service, counting on one limiter.
pub struct SmsService {
    pub limiter: &'static Limiter,
}

#[tonic::async_trait]
impl Sms for SmsService {
    /// Per client IP: 5 codes a minute, and never two within 5 seconds. A refused call is a
    /// `RESOURCE_EXHAUSTED` status, through `From<RateLimitError> for Status`.
    #[rate_limiter(
        rules("5/minute"),
        prevent_duplicate = true,
        limit_type = IP,
        message = "too many verification codes; wait before asking for another",
        limiter = self.limiter,
    )]
    async fn send_code(
        &self,
        request: Request<CodeRequest>,
    ) -> Result<Response<CodeReply>, Status> {
        let phone = request.into_inner().phone;
        Ok(Response::new(CodeReply {
            message: format!("code sent to {}", phone.trim()),
        }))
    }
}

/// The full method name of `SendCode`.
pub const SEND_CODE: &str = "/sms.Sms/SendCode";

/// The server side of `Sms`: routes `SendCode` to the trait, as tonic-build's
/// `SmsServer` does.
pub struct SmsServer<T> {
    inner: Arc<T>,
}

impl<T> SmsServer<T> {
    pub fn new(inner: T) -> Self {
        SmsServer {
            inner: Arc::new(inner),
        }
    }
}

impl<T> Clone for SmsServer<T> {
    fn clone(&self) -> Self {
        SmsServer {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> NamedService for SmsServer<T> {
    const NAME: &'static str = "sms.Sms";
}

impl<T: Sms> Service<http::Request<tonic::body::Body>> for SmsServer<T> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        struct SendCode<T>(Arc<T>);

        impl<T: Sms> UnaryService<CodeRequest> for SendCode<T> {
            type Response = CodeReply;
            type Future = BoxFuture<Response<CodeReply>, Status>;

            fn call(&mut self, request: Request<CodeRequest>) -> Self::Future {
                let inner = Arc::clone(&self.0);
                Box::pin(async move { inner.send_code(request).await })
            }
        }

        if req.uri().path() != SEND_CODE {
            return Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) });
        }
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let mut grpc =
                tonic::server::Grpc::new(ProstCodec::<CodeReply, CodeRequest>::default());
            Ok(grpc.unary(SendCode(inner), req).await)
        })
    }
}

/// The rate-limit layer of this server.
pub fn rate_limit_layer() -> RateLimitLayer {
    RateLimitLayer::new()
}

/// Calls `SendCode` on `channel` with `phone`, sending `metadata` along.
pub async fn send_code(
    channel: Channel,
    phone: &str,
    metadata: &[(&'static str, &str)],
) -> Result<Response<CodeReply>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|err| Status::unavailable(err.to_string()))?;
    let mut request = Request::new(CodeRequest {
        phone: phone.to_owned(),
    });
    for (name, value) in metadata {
        let value = value.parse().expect("metadata values are visible ASCII");
        request.metadata_mut().insert(*name, value);
    }
    let path = http::uri::PathAndQuery::from_static(SEND_CODE);
    let codec = ProstCodec::<CodeRequest, CodeReply>::default();
    grpc.unary(request, path, codec).await
}

/// Prints an answer the way `grpcurl -v` shows the parts that matter here.
fn print_answer(answer: &Result<Response<CodeReply>, Status>) {
    let (code, message, metadata) = match answer {
        Ok(response) => (
            "OK",
            response.get_ref().message.as_str(),
            response.metadata(),
        ),
        Err(status) => (
            status_name(status.code()),
            status.message(),
            status.metadata(),
        ),
    };
    println!("{code}: {message}");
    for name in ["retry-after", "ratelimit-policy", "ratelimit"] {
        if let Some(value) = metadata.get(name).and_then(|v| v.to_str().ok()) {
            println!("  {name}: {value}");
        }
    }
}

fn status_name(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        tonic::Code::Unavailable => "UNAVAILABLE",
        tonic::Code::Internal => "INTERNAL",
        _ => "ERROR",
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = common::listen_address("127.0.0.1:50051");
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("call") {
        let phone = args.next().unwrap_or_else(|| "+1 555 0100".into());
        let channel = Channel::from_shared(format!("http://{listen}"))?
            .connect()
            .await?;
        for _ in 0..2 {
            print_answer(&send_code(channel.clone(), &phone, &[]).await);
        }
        return Ok(());
    }

    common::init_logging();
    let rate_limit = rate_limit_layer().try_trust_proxies(common::trusted_proxies())?;
    println!("listening on {listen}");
    // The global limiter: Redis at RATELIMIT_REDIS_URL, else the embedded backend.
    let sms = SmsService {
        limiter: redis_ratelimit::global(),
    };
    tonic::transport::Server::builder()
        .layer(rate_limit)
        .add_service(SmsServer::new(sms))
        .serve(listen.parse()?)
        .await?;
    Ok(())
}
