//! What the outbound middleware adds to a request: a plain `reqwest` client against the same
//! client through `RateLimitMiddleware`, on the embedded backend and on a real
//! `redis-server`, each sending GETs one after another over a kept-alive connection to one
//! local HTTP server (axum on loopback), with a quota so large that every request passes.
//!
//! The three take turns, round after round, so that whatever else the machine does falls on
//! all of them alike; each one's figure is the median of its rounds, and the overhead is
//! printed as the ratio of each to the plain client, in one run.
//!
//! `cargo bench --bench outbound` (needs `redis-server` on `PATH`, as the tests do).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use redis_ratelimit::reqwest::RateLimitMiddleware;
use redis_ratelimit::{Limiter, Rule};
use reqwest_middleware::ClientWithMiddleware;

/// Requests per round, per client.
const REQUESTS: usize = 2_000;
const ROUNDS: usize = 15;
/// Far more than the benchmark sends: every request passes.
static QUOTA: [Rule; 1] = [Rule::new(100_000_000, Duration::from_secs(1))];

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` from the harness is ignored.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = support::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&server));
}

async fn run(server: &support::RedisServer) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(|| async { "ok" });
    tokio::spawn(async move { axum::serve(listener, app).await });

    let memory: &'static Limiter = Box::leak(Box::new(Limiter::memory()));
    // Fail-closed and patient: a check answered late on a busy machine is measured, never
    // let through unchecked.
    let redis = Limiter::redis(&server.url())
        .unwrap()
        .fail_open(false)
        .timeout(Duration::from_secs(5));
    let redis: &'static Limiter = Box::leak(Box::new(redis));
    let through = |limiter: &'static Limiter, name: &'static str| {
        reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(RateLimitMiddleware::new(name, &QUOTA).limiter(limiter))
            .build()
    };
    let plain = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).build();
    let embedded = through(memory, "bench-memory");
    let shared = through(redis, "bench-redis");
    // Connections made, scripts loaded, code paths warm.
    for client in [&plain, &embedded, &shared] {
        send(client, &url, 200).await;
    }
    let mut stats = server.connection();
    let runs_before = script_runs(&mut stats);

    // Each round runs every variant once, in turn, so that whatever else the machine does
    // falls on all of them alike.
    const NAMES: [&str; 4] = [
        "plain reqwest",
        "middleware, embedded",
        "middleware, redis",
        "redis check alone",
    ];
    let mut rounds: [Vec<Duration>; 4] = Default::default();
    for _ in 0..ROUNDS {
        rounds[0].push(send(&plain, &url, REQUESTS).await);
        rounds[1].push(send(&embedded, &url, REQUESTS).await);
        rounds[2].push(send(&shared, &url, REQUESTS).await);
        let started = Instant::now();
        for _ in 0..REQUESTS {
            let d = redis.check("rate_limit:out:bench-alone", &QUOTA).await;
            assert!(d.unwrap().allowed);
        }
        rounds[3].push(started.elapsed());
    }
    let runs_per_check =
        (script_runs(&mut stats) - runs_before) as f64 / (2 * ROUNDS * REQUESTS) as f64;
    let per_request: Vec<f64> = rounds.iter_mut().map(|times| median_us(times)).collect();

    println!(
        "outbound: {REQUESTS} sequential GETs per round to one local server, median of \
         {ROUNDS} rounds"
    );
    println!("{:<24} {:>12} {:>10}", "", "µs/request", "vs plain");
    for (name, us) in NAMES.iter().zip(&per_request) {
        println!("{name:<24} {us:>12.1} {:>9.2}x", us / per_request[0]);
    }
    println!("Redis round trips per request (middleware and check alone): {runs_per_check:.2}");
}

/// How many scripts clients have run on Redis: `EVALSHA`, and `EVAL` after a flushed
/// script cache. (The commands a script calls are counted apart from it.)
fn script_runs(connection: &mut redis::Connection) -> u64 {
    ["evalsha", "eval"]
        .iter()
        .map(|command| support::command_calls(connection, command))
        .sum()
}

/// The median of `times`, in µs per request.
fn median_us(times: &mut [Duration]) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e6 / REQUESTS as f64
}

/// Sends `n` GETs to `url` one after another; how long they took.
async fn send(client: &ClientWithMiddleware, url: &str, n: usize) -> Duration {
    let started = Instant::now();
    for _ in 0..n {
        let response = client.get(url).send().await.expect("sent");
        assert!(response.status().is_success());
        response.bytes().await.expect("read");
    }
    started.elapsed()
}
