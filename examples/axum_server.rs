//! A small HTTP API rate-limited per client IP, per user and per API key, with axum: a guard
//! on the router for every API request, and attributes on the handlers for their own limits.
//!
//! ```text
//! cargo run --example axum_server                                    # embedded backend
//! RATELIMIT_REDIS_URL=redis://127.0.0.1:6379 cargo run --example axum_server   # shared Redis
//!
//! curl -i -X POST localhost:3000/sms/code -d '+1 555 0100'           # 200, then 429
//! curl -i 'localhost:3000/search?q=rust' -H 'x-user-id: 42'          # 3 per 10 s per user
//! curl -i localhost:3000/reports -H 'x-user-id: 42'                  # 20 an hour per user
//! curl -i localhost:3000/                                            # 60 a minute per IP
//! curl -i localhost:3000/health                                      # never limited
//! curl -i 'localhost:3000/v1/search?q=rust' -H 'x-api-key: k1'       # 10,000 a second per key
//! ```
//!
//! Every API request (not `/health`, nor `/v1`) also counts against 60 a minute per client
//! IP, checked by the layer's guard before any handler runs; a response describes whichever
//! limit binds hardest. `/reports` is behind two guards of one layer, the per-IP one and
//! 20 an hour per user, checked as one: one round trip, and a request refused by either
//! counts against neither. `/v1/search` is the same search for programs: they are counted
//! by their API key alone, whatever address they call from.
//!
//! `LISTEN` sets the address (default `127.0.0.1:3000`); `TRUSTED_PROXIES`
//! (`10.0.0.0/8,192.168.0.0/16`) lists the proxies whose `X-Forwarded-For` is believed.
//! `RATELIMIT_ALLOWANCE=250ms` lets each instance admit a busy key's requests from a local
//! allowance, a part of its budget drawn from Redis in one round trip, instead of one round
//! trip per request (see the guide's chapter on local allowances).

#[path = "common/mod.rs"]
mod common;

use std::net::SocketAddr;

use axum::extract::{FromRequestParts, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use redis_ratelimit::axum::RateLimitLayer;
use redis_ratelimit::{rate_limiter, Guard, LimitType, Limiter, RateLimitError, Rule};

/// Every API request, whatever its route: 60 a minute per client IP.
static API: [Rule; 1] = [Rule::per_minute(60)];

/// The guard counting every API request on `limiter`, under the site name `api` (the one
/// operators override: `ratelimit mode api off`).
pub fn api_guard(limiter: &'static Limiter) -> Guard {
    Guard::new("api", &API).limiter(limiter)
}

/// Reports are costly to build: 20 an hour per user.
static REPORTS: [Rule; 1] = [Rule::per_hour(20)];

/// The guard counting reports per user on `limiter`, under the site name `reports`.
pub fn reports_guard(limiter: &'static Limiter) -> Guard {
    Guard::new("reports", &REPORTS)
        .limit_type(LimitType::UserId)
        .limiter(limiter)
}

/// Per client IP: 5 codes a minute and 10 an hour, and never two within 5 seconds.
#[rate_limiter(
    rules(rule(count = 5, time = 60), rule(count = 10, time = 1, unit = HOURS)),
    prevent_duplicate = true,
    limit_type = IP,
    message = "too many verification codes; wait before asking for another",
    limiter = limiter,
)]
async fn send_code(
    State(limiter): State<&'static Limiter>,
    phone: String,
) -> Result<String, RateLimitError> {
    Ok(format!("code sent to {}\n", phone.trim()))
}

/// Per user: 3 searches per 10 seconds.
#[rate_limiter(rules(rule(count = 3, time = 10)), limit_type = USER_ID, limiter = limiter)]
async fn search(
    State(limiter): State<&'static Limiter>,
    RawQuery(query): RawQuery,
) -> Result<String, RateLimitError> {
    Ok(format!("results for {:?}\n", query.unwrap_or_default()))
}

/// The caller of `/v1`, as its `x-api-key` header names it (a real app would look the key
/// up before trusting it); without one, 401.
pub struct ApiKey(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ApiKey {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match parts.headers.get("x-api-key").map(|v| v.to_str()) {
            Some(Ok(key)) if !key.is_empty() => Ok(ApiKey(key.to_owned())),
            _ => Err((
                StatusCode::UNAUTHORIZED,
                "an x-api-key header is required\n",
            )),
        }
    }
}

/// Per API key: 10,000 searches a second, under the site name `v1::search` (keys
/// `rate_limit:custom:<key>:v1::search`). A limit this high is best kept by a token bucket:
/// the default sliding log stores one entry per request in the window.
#[rate_limiter(
    rules("10000/second"),
    algorithm = TOKEN_BUCKET,
    limit_type = CUSTOM,
    by = api_key.0,
    name = "v1::search",
    limiter = limiter,
)]
async fn search_by_key(
    State(limiter): State<&'static Limiter>,
    api_key: ApiKey,
    RawQuery(query): RawQuery,
) -> Result<String, RateLimitError> {
    Ok(format!("results for {:?}\n", query.unwrap_or_default()))
}

/// What the API serves; limited by the per-IP guard alone.
async fn index() -> &'static str {
    "POST /sms/code, GET /search?q=, GET /reports, GET /v1/search?q= (x-api-key)\n"
}

async fn report() -> &'static str {
    "your report\n"
}

async fn health() -> &'static str {
    "ok\n"
}

pub use common::UserId;

/// The example's authentication, as axum middleware: see [`common::toy_authentication`].
async fn toy_auth(mut req: Request, next: Next) -> Response {
    let x_user_id = req.headers().get("x-user-id").and_then(|v| v.to_str().ok());
    if let Some(user) = common::toy_authentication(x_user_id) {
        req.extensions_mut().insert(user);
    }
    next.run(req).await
}

/// The rate-limit layer of this app: the user id is the one the authentication set.
pub fn rate_limit_layer() -> RateLimitLayer {
    RateLimitLayer::new()
        .user_id(|req: &Request| req.extensions().get::<UserId>().map(|u| u.0.clone()))
}

/// The API's routes, without any layer.
fn api(limiter: &'static Limiter) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/sms/code", post(send_code))
        .route("/search", get(search))
        .with_state(limiter)
}

/// The routes behind both the per-IP guard and the per-user report guard, in one layer:
/// one check of both.
fn reports(limiter: &'static Limiter, rate_limit: &RateLimitLayer) -> Router {
    let guards = rate_limit
        .clone()
        .guard(api_guard(limiter))
        .guard(reports_guard(limiter));
    Router::new().route("/reports", get(report)).layer(guards)
}

/// The routes counted per API key alone: outside the per-IP guard.
fn keyed_api(limiter: &'static Limiter) -> Router {
    Router::new()
        .route("/v1/search", get(search_by_key))
        .with_state(limiter)
}

/// The routes alone, without the layers.
pub fn routes(limiter: &'static Limiter) -> Router {
    api(limiter)
        .merge(keyed_api(limiter))
        .route("/reports", get(report))
        .route("/health", get(health))
}

/// The whole app: the API behind `rate_limit` with the [`api_guard`], `/reports` behind a
/// layer with both that and the [`reports_guard`]; `/v1` (counted by its own attribute) and
/// `/health` outside them; all behind the authentication.
pub fn app(limiter: &'static Limiter, rate_limit: RateLimitLayer) -> Router {
    let reports = reports(limiter, &rate_limit);
    api(limiter)
        .layer(rate_limit.guard(api_guard(limiter)))
        // Added after the layer, so outside it.
        .merge(reports)
        .merge(keyed_api(limiter))
        .route("/health", get(health))
        // Added last, so it runs first: the rate-limit layer reads the user it finds.
        .layer(middleware::from_fn(toy_auth))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logging();
    let rate_limit = rate_limit_layer().try_trust_proxies(common::trusted_proxies())?;
    let listener = tokio::net::TcpListener::bind(common::listen_address("127.0.0.1:3000")).await?;
    println!("listening on http://{}", listener.local_addr()?);

    // The global limiter: Redis at RATELIMIT_REDIS_URL, else the embedded backend.
    let app = app(redis_ratelimit::global(), rate_limit);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
