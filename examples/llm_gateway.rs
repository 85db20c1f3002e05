//! An LLM gateway: an axum endpoint in front of a completion API, metered per user.
//!
//! ```text
//! cargo run --example llm_gateway                                   # embedded backend
//! RATELIMIT_REDIS_URL=redis://127.0.0.1:6379 cargo run --example llm_gateway   # a fleet
//!
//! curl -i localhost:3000/v1/completions -H 'x-user-id: 42' \
//!      -d '{"prompt": "Write a haiku about rate limits", "max_tokens": 200}'
//! ```
//!
//! Each user may make 60 requests a minute, use 90,000 tokens a minute and 2,000,000 in a
//! calendar month (UTC), with at most 4 requests in flight. A request reserves its
//! `max_tokens` before the completion API is called, so concurrent requests can never
//! overrun a budget; when the answer comes back, the reservation is settled to the tokens
//! the API says it used (`usage.total_tokens`). The completion API here is a local fake
//! that answers with a few words per prompt.
//!
//! `LISTEN` sets the address (default `127.0.0.1:3000`).

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Json, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use redis_ratelimit::axum::RateLimitLayer;
use redis_ratelimit::{rate_limiter, RateLimitError};
use serde::{Deserialize, Serialize};

/// What a client asks for.
#[derive(Debug, Deserialize)]
pub struct Prompt {
    pub prompt: String,
    /// The most tokens the answer may use: what the request reserves.
    pub max_tokens: u64,
}

/// What the completion API answers.
#[derive(Debug, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    pub usage: Usage,
}

/// The tokens a completion used, as the API counts them.
#[derive(Debug, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// Why a request got no completion.
#[derive(Debug)]
pub enum GatewayError {
    /// A budget is spent: 429 with `Retry-After` and the RateLimit fields.
    Limited(RateLimitError),
    /// The request cannot be served (400).
    BadRequest(&'static str),
}

impl From<RateLimitError> for GatewayError {
    fn from(err: RateLimitError) -> Self {
        GatewayError::Limited(err)
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        match self {
            GatewayError::Limited(err) => err.into_response(),
            GatewayError::BadRequest(why) => (StatusCode::BAD_REQUEST, why).into_response(),
        }
    }
}

/// The tokens a call used: what its reservation is settled to. A refused call used none.
pub fn tokens_used(answer: &Result<Json<Completion>, GatewayError>) -> u64 {
    answer.as_ref().map_or(0, |c| c.usage.total_tokens)
}

/// `POST /v1/completions`, per user: 60 requests and 90,000 tokens a minute, 2,000,000
/// tokens a calendar month, 4 in flight.
#[rate_limiter(
    rules("60 calls/minute", "90000/minute", "2000000 per calendar month"),
    // Any reservation in constant time; the default sliding log takes at most 10,000.
    algorithm = TOKEN_BUCKET,
    limit_type = USER_ID,
    cost = prompt.max_tokens.max(1),
    settle = tokens_used,
    concurrency = 4,
    name = "llm::completions",
)]
pub async fn complete(Json(prompt): Json<Prompt>) -> Result<Json<Completion>, GatewayError> {
    if prompt.max_tokens == 0 {
        return Err(GatewayError::BadRequest("max_tokens must be at least 1"));
    }
    Ok(Json(fake_completion_api(&prompt).await))
}

/// A stand-in for the completion API: a short pause, then a few words, counted as tokens
/// the way such APIs report them.
async fn fake_completion_api(prompt: &Prompt) -> Completion {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let prompt_tokens = prompt.prompt.split_whitespace().count() as u64;
    let words = [
        "limits", "hold", "across", "the", "fleet", "and", "nothing", "overruns",
    ];
    let completion_tokens = (words.len() as u64).min(prompt.max_tokens);
    Completion {
        text: words[..completion_tokens as usize].join(" "),
        usage: Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        },
    }
}

/// The gateway: the user is the `x-user-id` header (a stand-in for real authentication).
pub fn app() -> Router {
    Router::new()
        .route("/v1/completions", post(complete))
        .layer(RateLimitLayer::new().user_id(|req: &Request| {
            let user = req.headers().get("x-user-id")?.to_str().ok()?;
            Some(user.to_owned())
        }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(address).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app().into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
