//! The HTTP face: `POST /json` (a `RateLimitRequest` in protobuf's JSON form; 200 when
//! `OK`, 429 when `OVER_LIMIT`, as envoyproxy/ratelimit answers), `GET /healthcheck` and
//! `GET /metrics` (Prometheus text).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use metrics_exporter_prometheus::PrometheusHandle;
use redis_ratelimit::Rule;

use crate::count::{Failure, Service};
use crate::json;

#[derive(Clone)]
struct Face {
    service: Arc<Service>,
    metrics: PrometheusHandle,
    /// The key a health check peeks at: whether the backend answers.
    probe_key: Arc<str>,
}

const PROBE: [Rule; 1] = [Rule::per_second(1)];

/// The routes, on `service`.
pub fn router(service: Arc<Service>, metrics: PrometheusHandle) -> Router {
    let probe_key = format!("{}rls:_healthcheck", service.prefix).into();
    Router::new()
        .route("/json", post(should_rate_limit))
        .route("/healthcheck", get(healthcheck))
        .route("/metrics", get(render_metrics))
        .with_state(Face {
            service,
            metrics,
            probe_key,
        })
}

async fn should_rate_limit(State(face): State<Face>, body: Bytes) -> Response {
    let request = match json::request(&body) {
        Ok(request) => request,
        Err(message) => return (StatusCode::BAD_REQUEST, message).into_response(),
    };
    match face.service.should_rate_limit(&request).await {
        Ok(answer) => {
            let status = match answer.overall_code == Code::OverLimit as i32 {
                true => StatusCode::TOO_MANY_REQUESTS,
                false => StatusCode::OK,
            };
            (status, axum::Json(json::response(&answer))).into_response()
        }
        Err(Failure::Invalid(message)) => (StatusCode::BAD_REQUEST, message).into_response(),
        Err(Failure::Unavailable(message)) => {
            (StatusCode::SERVICE_UNAVAILABLE, message).into_response()
        }
    }
}

/// 200 while serving; 503 while shutting down, or while the backend does not answer and
/// the service does not fail open (so a load balancer sends requests elsewhere).
async fn healthcheck(State(face): State<Face>) -> Response {
    let service = &face.service;
    if service.draining.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    if !service.fail_open {
        if let Err(e) = service.limiter.peek(&face.probe_key, &PROBE).await {
            let message = format!("the rate-limit backend cannot be reached: {e}\n");
            return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
        }
    }
    (StatusCode::OK, "OK\n").into_response()
}

async fn render_metrics(State(face): State<Face>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        face.metrics.render(),
    )
        .into_response()
}
