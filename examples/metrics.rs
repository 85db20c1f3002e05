//! Metrics of the limiter, served at `/metrics` in Prometheus' text format
//! (`metrics-exporter-prometheus`, rendered by a plain axum route), beside a guarded route.
//!
//! ```text
//! cargo run --example metrics --features metrics                       # embedded backend
//! RATELIMIT_REDIS_URL=redis://127.0.0.1:6379 cargo run --example metrics --features metrics
//! for i in 1 2 3 4; do curl -s localhost:3000/hello/tom; echo; done
//! curl -s localhost:3000/metrics
//! ```
//!
//! `PORT` sets the port (default 3000). Run with `RUST_LOG=redis_ratelimit=debug` to see
//! each check's `ratelimit.check` span and the `rate limited` events.

use std::time::Duration;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use redis_ratelimit::{rate_limiter, RateLimitError};

/// Per name: 3 greetings per minute.
#[rate_limiter(rules("3/minute"), limit_type = CUSTOM, by = name, name = "example.hello")]
async fn greet(name: &str) -> Result<String, RateLimitError> {
    Ok(format!("hello, {name}"))
}

async fn hello(Path(name): Path<String>) -> (StatusCode, String) {
    match greet(&name).await {
        Ok(text) => (StatusCode::OK, text),
        Err(err @ RateLimitError::Limited { .. }) => {
            (StatusCode::TOO_MANY_REQUESTS, err.to_string())
        }
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, err.to_string()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "redis_ratelimit=info".into()),
        )
        .init();
    // Buckets make the check durations a Prometheus histogram (a summary otherwise).
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("ratelimit_check_duration_seconds".into()),
            &[0.000_1, 0.000_5, 0.001, 0.005, 0.025, 0.1, 0.5],
        )?
        .install_recorder()?;
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });

    let app = Router::new()
        .route("/hello/{name}", get(hello))
        .route("/metrics", get(move || async move { prometheus.render() }));
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
