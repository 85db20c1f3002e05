//! A small HTTP API rate-limited per client IP and per user, with actix-web: the
//! `axum_server` example's API, answering the same statuses, headers and bodies: a guard on
//! the middleware for every API request, and attributes on the handlers for their own
//! limits.
//!
//! ```text
//! cargo run --example actix_server                                    # embedded backend
//! RATELIMIT_REDIS_URL=redis://127.0.0.1:6379 cargo run --example actix_server   # shared Redis
//!
//! curl -i -X POST localhost:3000/sms/code -d '+1 555 0100'           # 200, then 429
//! curl -i 'localhost:3000/search?q=rust' -H 'x-user-id: 42'          # 3 per 10 s per user
//! curl -i localhost:3000/health                                      # never limited
//! ```
//!
//! `LISTEN` sets the address (default `127.0.0.1:3000`), `WORKERS` the number of workers
//! (each with its own runtime, all counting on one limiter), `TRUSTED_PROXIES`
//! (`10.0.0.0/8,192.168.0.0/16`) the proxies whose `X-Forwarded-For` is believed.

#[path = "common/mod.rs"]
mod common;

use actix_web::body::MessageBody;
use actix_web::dev::{Service as _, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{web, App, HttpMessage as _, HttpRequest, HttpServer};
use redis_ratelimit::actix::RateLimit;
use redis_ratelimit::{rate_limiter, Guard, Limiter, RateLimitError, Rule};

/// Every API request, whatever its route: 60 a minute per client IP.
static API: [Rule; 1] = [Rule::per_minute(60)];

/// The guard counting every API request on `limiter`, under the site name `api` (the one
/// operators override: `ratelimit mode api off`).
pub fn api_guard(limiter: &'static Limiter) -> Guard {
    Guard::new("api", &API).limiter(limiter)
}

/// The limiter every worker counts on.
type SharedLimiter = web::Data<&'static Limiter>;

/// Per client IP: 5 codes a minute and 10 an hour, and never two within 5 seconds.
#[rate_limiter(
    rules(rule(count = 5, time = 60), rule(count = 10, time = 1, unit = HOURS)),
    prevent_duplicate = true,
    limit_type = IP,
    message = "too many verification codes; wait before asking for another",
    limiter = *limiter.get_ref(),
)]
async fn send_code(limiter: SharedLimiter, phone: String) -> Result<String, RateLimitError> {
    Ok(format!("code sent to {}\n", phone.trim()))
}

/// Per user: 3 searches per 10 seconds.
#[rate_limiter(
    rules(rule(count = 3, time = 10)),
    limit_type = USER_ID,
    limiter = *limiter.get_ref(),
)]
async fn search(limiter: SharedLimiter, req: HttpRequest) -> Result<String, RateLimitError> {
    Ok(format!("results for {:?}\n", req.query_string()))
}

async fn health() -> &'static str {
    "ok\n"
}

pub use common::UserId;

/// The rate-limit middleware of this app: the user id is the one the authentication set.
pub fn rate_limit() -> RateLimit {
    RateLimit::new()
        .user_id(|req: &ServiceRequest| req.extensions().get::<UserId>().map(|u| u.0.clone()))
}

/// The whole app: the API behind `rate_limit` with the [`api_guard`], `/health` outside
/// it, all behind the example's authentication (see [`common::toy_authentication`]).
pub fn app(
    limiter: &'static Limiter,
    rate_limit: RateLimit,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(web::Data::new(limiter))
        // Outside the API's scope: never limited.
        .route("/health", web::get().to(health))
        .service(
            web::scope("")
                .route("/sms/code", web::post().to(send_code))
                .route("/search", web::get().to(search))
                .wrap(rate_limit.guard(api_guard(limiter))),
        )
        // Wrapped last, so it runs first: the rate-limit middleware reads the user it finds.
        .wrap_fn(|req, srv| {
            let x_user_id = req.headers().get("x-user-id").and_then(|v| v.to_str().ok());
            if let Some(user) = common::toy_authentication(x_user_id) {
                req.extensions_mut().insert(user);
            }
            srv.call(req)
        })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // actix-web's own runtime: one system, a runtime per worker.
    actix_web::rt::System::new().block_on(serve())
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logging();
    let rate_limit = rate_limit().try_trust_proxies(common::trusted_proxies())?;
    let listen = common::listen_address("127.0.0.1:3000");
    let workers = std::env::var("WORKERS").map_or(Ok(2), |w| w.parse())?;
    println!("listening on http://{listen}");

    // The global limiter: Redis at RATELIMIT_REDIS_URL, else the embedded backend; one for
    // every worker.
    let limiter = redis_ratelimit::global();
    HttpServer::new(move || app(limiter, rate_limit.clone()))
        .workers(workers)
        .bind(&listen)?
        .run()
        .await?;
    Ok(())
}
