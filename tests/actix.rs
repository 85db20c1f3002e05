//! End to end: the `actix_server` example's app served by a real actix-web `HttpServer`
//! with several workers (each its own runtime) on loopback, called with a real HTTP client,
//! on a real `redis-server` and on the memory backend. Statuses, headers and bodies are the
//! axum integration's, checked for their exact values: the scenarios of the example API
//! are the axum example's too (`support::http`); the ones here are actix-web's own.

mod support;

#[allow(dead_code)] // the example's `main` is not run here
#[path = "../examples/actix_server.rs"]
mod actix_server;

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Mutex;
use std::thread::ThreadId;

use actix_web::dev::ServiceRequest;
use actix_web::{web, App};
use redis_ratelimit::actix::{ProxyHeader, RateLimit};
use redis_ratelimit::{rate_limiter, Limiter, RateLimitError};
use reqwest::{Client, StatusCode};
use support::http::{client_from, serve_actix, ExampleApi, Served};

/// The `actix_server` example, served by two workers.
struct ActixExample;

impl ExampleApi for ActixExample {
    type RateLimit = RateLimit;

    fn rate_limit() -> RateLimit {
        actix_server::rate_limit()
    }

    fn trusting(rate_limit: RateLimit, networks: &[&str], header: ProxyHeader) -> RateLimit {
        rate_limit.trust_proxies(networks).proxy_header(header)
    }

    fn exempting(rate_limit: RateLimit, peer: IpAddr) -> RateLimit {
        rate_limit.exempt(move |req: &ServiceRequest| {
            req.peer_addr().is_some_and(|addr| addr.ip() == peer)
        })
    }

    async fn serve_with(limiter: &'static Limiter, rate_limit: RateLimit, ip: &str) -> Served {
        serve_actix(ip, 2, move || {
            actix_server::app(limiter, rate_limit.clone())
        })
    }
}

example_api_tests! {
    ActixExample;

    async fn workers_with_runtimes_of_their_own_count_exactly_on_one_limiter() {
        let limiter = support::limiter();
        let served = serve_actix("127.0.0.1", 4, move || {
            App::new()
                .app_data(web::Data::new(limiter))
                .wrap(RateLimit::new())
                .route("/counted", web::get().to(counted))
        });
        // Separate clients: separate connections, spread over the workers.
        let clients: Vec<Client> = (0..8).map(|_| client_from("127.0.0.1")).collect();
        let mut calls = tokio::task::JoinSet::new();
        for n in 0..(3 * COUNTED_LIMIT) {
            let client = clients[n as usize % clients.len()].clone();
            let url = format!("{}/counted", served.base);
            calls.spawn(async move { client.get(url).send().await.expect("GET /counted").status() });
        }
        let mut ok = 0;
        let mut limited = 0;
        while let Some(status) = calls.join_next().await {
            match status.unwrap() {
                StatusCode::OK => ok += 1,
                StatusCode::TOO_MANY_REQUESTS => limited += 1,
                other => panic!("unexpected {other}"),
            }
        }
        assert_eq!((ok, limited), (COUNTED_LIMIT, 2 * COUNTED_LIMIT));
        let threads = SERVING_THREADS.lock().unwrap().as_ref().map_or(0, HashSet::len);
        assert!(threads > 1, "served by {threads} worker(s)");
    }
}

const COUNTED_LIMIT: u64 = 30;

/// The worker threads that ran `counted`.
static SERVING_THREADS: Mutex<Option<HashSet<ThreadId>>> = Mutex::new(None);

/// `COUNTED_LIMIT` calls a minute per client IP.
#[rate_limiter(
    rules(rule(count = 30, time = 60)),
    limit_type = IP,
    limiter = *limiter.get_ref(),
)]
async fn counted(limiter: web::Data<&'static Limiter>) -> Result<&'static str, RateLimitError> {
    SERVING_THREADS
        .lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(std::thread::current().id());
    Ok("ok")
}
