//! Calling a rate-limited API through the outbound middleware: several workers share the
//! API's quota, wait for their turn instead of failing, and hold back together when the API
//! answers `503` with `Retry-After`.
//!
//! The API is a stand-in started on a loopback port: it allows 10 requests a second and
//! answers `429` beyond that, and its `/maintenance` asks callers to come back in 2 s.
//!
//! ```text
//! cargo run --example outbound                                              # embedded backend
//! RATELIMIT_REDIS_URL=redis://127.0.0.1:6379 cargo run --example outbound   # shared Redis: run
//!                                                                           # it twice at once
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use redis_ratelimit::reqwest::RateLimitMiddleware;
use redis_ratelimit::{RateLimitError, Rule};
use reqwest_middleware::ClientBuilder;

/// The API's published quota, as the middleware is told it.
static PARTNER_API: [Rule; 1] = [Rule::per_second(10)];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = start_partner_api().await?;
    // The global limiter: Redis from RATELIMIT_REDIS_URL, else the embedded backend.
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RateLimitMiddleware::new("partner-api", &PARTNER_API).wait(Duration::from_secs(30)))
        .build();

    println!("4 workers, 8 requests each, through one quota of 10 a second:");
    let started = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let (client, url) = (client.clone(), format!("{base}/orders"));
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..8 {
                    let response = client.get(&url).send().await.expect("sent");
                    statuses.push(response.status());
                }
                (worker, statuses)
            })
        })
        .collect();
    for worker in workers {
        let (worker, statuses) = worker.await?;
        let refused = statuses
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count();
        println!(
            "  worker {worker}: {} sent, {refused} refused by the API",
            statuses.len()
        );
    }
    println!(
        "  32 requests in {:.1?} (at most 10 a second)",
        started.elapsed()
    );

    println!("\nThe API asks for a pause:");
    let response = client.get(format!("{base}/maintenance")).send().await?;
    println!(
        "  /maintenance: {} with Retry-After: {:?} (returned as it came)",
        response.status(),
        response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap_or("?"))
    );
    let paused = Instant::now();
    let response = client.get(format!("{base}/orders")).send().await?;
    println!(
        "  the next request waited {:.1?} for the pause to end: {}",
        paused.elapsed(),
        response.status()
    );

    println!("\nA client that will not wait:");
    let impatient = ClientBuilder::new(reqwest::Client::new())
        .with(RateLimitMiddleware::new("partner-api", &PARTNER_API).wait(Duration::ZERO))
        .build();
    for _ in 0..12 {
        match impatient.get(format!("{base}/orders")).send().await {
            Ok(response) => print!("{} ", response.status().as_u16()),
            Err(reqwest_middleware::Error::Middleware(err)) => {
                match err.downcast_ref::<RateLimitError>() {
                    Some(RateLimitError::Limited { retry_after, .. }) => {
                        println!("\n  refused unsent: try again in {retry_after:.1?}");
                        break;
                    }
                    _ => return Err(err.into()),
                }
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// Serves the stand-in API on 127.0.0.1, port 0; its base URL.
async fn start_partner_api() -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let window = Arc::new((Instant::now(), AtomicU64::new(0), AtomicU64::new(0)));
    let maintenance_once = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route(
            "/orders",
            get(move || {
                let window = window.clone();
                async move {
                    // 10 a second, counted in whole seconds since the API started.
                    let (start, second, count) = &*window;
                    let now = start.elapsed().as_secs();
                    if second.swap(now, Ordering::SeqCst) != now {
                        count.store(0, Ordering::SeqCst);
                    }
                    if count.fetch_add(1, Ordering::SeqCst) < 10 {
                        "ok".into_response()
                    } else {
                        (
                            StatusCode::TOO_MANY_REQUESTS,
                            [("retry-after", "1")],
                            "slow down",
                        )
                            .into_response()
                    }
                }
            }),
        )
        .route(
            "/maintenance",
            get(move || {
                let once = maintenance_once.clone();
                async move {
                    if once.fetch_add(1, Ordering::SeqCst) == 0 {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [("retry-after", "2")],
                            "back soon",
                        )
                            .into_response()
                    } else {
                        "ok".into_response()
                    }
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}
