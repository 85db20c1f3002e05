//! The gRPC face: Envoy's `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! (Envoy's own generated messages, so the wire format is Envoy's) and `grpc.health.v1`.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::count::{Failure, Service};

/// `ShouldRateLimit` on the service.
pub struct Grpc(pub Arc<Service>);

/// The service as tonic serves it.
pub fn server(service: Arc<Service>) -> RateLimitServiceServer<Grpc> {
    RateLimitServiceServer::new(Grpc(service))
}

#[tonic::async_trait]
impl RateLimitService for Grpc {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        match self.0.should_rate_limit(request.get_ref()).await {
            Ok(answer) => Ok(Response::new(answer)),
            Err(failure) => Err(status(failure)),
        }
    }
}

/// A failure as gRPC says it: Envoy's `failure_mode_deny` decides on `UNAVAILABLE`.
pub fn status(failure: Failure) -> Status {
    match failure {
        Failure::Invalid(message) => Status::invalid_argument(message),
        Failure::Unavailable(message) => Status::unavailable(message),
    }
}
