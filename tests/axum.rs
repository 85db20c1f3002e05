//! End to end: the `axum_server` example's app served on loopback and called with a real
//! HTTP client, on a real `redis-server` and on the memory backend. Every status and
//! rate-limit header is checked for its exact value. The scenarios of the example API are
//! the actix-web example's too (`support::http`); the ones here are axum's own.

mod support;

#[allow(dead_code)] // the example's `main` is not run here
#[path = "../examples/axum_server.rs"]
mod axum_server;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use redis_ratelimit::axum::{ProxyHeader, RateLimitLayer};
use redis_ratelimit::clock::ManualClock;
use redis_ratelimit::{Algorithm, Limiter, Rule};
use reqwest::{Client, StatusCode};
use support::http::{
    client_from, header, serve_axum, ExampleApi, Served, Setup, GENERIC_500, PROBLEM, SMS_POLICY,
};

/// The `axum_server` example.
struct AxumExample;

impl ExampleApi for AxumExample {
    type RateLimit = RateLimitLayer;

    fn rate_limit() -> RateLimitLayer {
        axum_server::rate_limit_layer()
    }

    fn trusting(layer: RateLimitLayer, networks: &[&str], header: ProxyHeader) -> RateLimitLayer {
        layer.trust_proxies(networks).proxy_header(header)
    }

    fn exempting(layer: RateLimitLayer, peer: IpAddr) -> RateLimitLayer {
        layer.exempt(move |req: &Request| {
            let connect_info = req.extensions().get::<ConnectInfo<SocketAddr>>();
            connect_info.is_some_and(|ConnectInfo(addr)| addr.ip() == peer)
        })
    }

    async fn serve_with(limiter: &'static Limiter, layer: RateLimitLayer, ip: &str) -> Served {
        serve_axum(axum_server::app(limiter, layer), ip)
    }
}

example_api_tests! {
    AxumExample;

    async fn routes_without_the_layer_answer_a_generic_500() {
        let served = serve_axum(axum_server::routes(support::limiter()), "127.0.0.1");
        let client = client_from("127.0.0.1");
        let response = served.send_code(&client, &[]).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(header(&response, "content-type"), Some(PROBLEM));
        assert_eq!(response.text().await.unwrap(), GENERIC_500);
        assert_eq!(served.health(&client).await.status(), StatusCode::OK);
    }
}

/// An attacker learns nothing of the configuration from a misconfigured site; the log
/// names the site once, and says what the layer lacked and how to give it. The server
/// runs on this test's own thread, where the logs are captured.
#[tokio::test]
async fn a_misconfigured_site_answers_a_generic_500_and_logs_what_to_configure_once() {
    let (logs, _capturing) = support::capture_logs();
    let limiter: &'static Limiter = Box::leak(Box::new(Limiter::memory()));
    let served = serve_axum(
        axum_server::app(limiter, axum_server::rate_limit_layer()),
        "127.0.0.1",
    );
    let client = client_from("127.0.0.1");
    for _ in 0..3 {
        let anonymous = served.search_as(&client, None).await;
        assert_eq!(anonymous.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = anonymous.text().await.unwrap();
        assert_eq!(body, GENERIC_500);
        for secret in ["USER_ID", "user_id", "RateLimitLayer", "misconfigured"] {
            assert!(!body.contains(secret), "{body}");
        }
    }
    let logged = logs.text();
    let site = logged
        .lines()
        .filter(|l| l.contains("rate limit misconfigured") && l.contains("axum_server::search"))
        .count();
    assert_eq!(site, 1, "{logged}");
    let remedy = "give RateLimitLayer::user_id a closure that finds it";
    assert_eq!(logged.matches(remedy).count(), 1, "{logged}");
}

/// The example's app served from 127.0.0.1, on an embedded backend whose clock stands
/// still.
fn serve_on_a_still_clock() -> (&'static Limiter, Served) {
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let limiter: &'static Limiter = Box::leak(Box::new(Limiter::memory_with_clock(clock)));
    let app = axum_server::app(limiter, axum_server::rate_limit_layer());
    (limiter, serve_axum(app, "127.0.0.1"))
}

/// `/v1/search` counts each API key alone, whatever address calls with it, outside the
/// per-IP guard: 61 calls from one address all pass (the guard allows 60 a minute), and
/// another address's call with the same key counts in the same budget; a call without a
/// key answers 401 and counts nothing. The clock stands still, so the one-second window
/// holds every call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_search_is_counted_per_api_key_whatever_the_address() {
    let (limiter, served) = serve_on_a_still_clock();
    let url = format!("{}/v1/search?q=rust", served.base);
    let (first, second) = (client_from("127.0.0.1"), client_from("127.0.0.2"));
    let with_key = |client: &Client| client.get(&url).header("x-api-key", "k1").send();
    for n in 1..=61 {
        let response = with_key(&first).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "call {n}");
    }
    let response = with_key(&second).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let keyless = first.get(&url).send().await.unwrap();
    assert_eq!(keyless.status(), StatusCode::UNAUTHORIZED);

    let rules = [Rule::per_second(10_000)];
    let remaining = |key: &'static str| async move {
        let key = format!("rate_limit:custom:{key}:v1::search");
        let peek = limiter.peek(&key, &rules).algorithm(Algorithm::TokenBucket);
        peek.await.unwrap().remaining
    };
    assert_eq!(remaining("k1").await, 10_000 - 62);
    assert_eq!(remaining("k2").await, 10_000);
}

/// With the duplicate rule out of the way (calls 6 s apart on a manual clock), the
/// per-minute rule comes to bind, and `t` / `Retry-After` count until its oldest call
/// leaves the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minute_rule_binds_once_calls_are_spaced_out() {
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let limiter = Limiter::memory_with_clock(clock.clone());
    let limiter: &'static Limiter = Box::leak(Box::new(limiter));
    let served = AxumExample::serve(limiter, Setup::Plain, "127.0.0.1").await;
    let client = client_from("127.0.0.1");

    for (n, expected) in [
        (1, r#""dup";r=0;t=5"#),
        (2, r#""dup";r=0;t=5"#),
        (3, r#""dup";r=0;t=5"#),
        (4, r#""dup";r=0;t=5"#),
        // Both spent: equal remainders bind the rule listed first.
        (5, r#""p1";r=0;t=60"#),
    ] {
        let allowed = served.send_code(&client, &[]).await;
        assert_eq!(allowed.status(), StatusCode::OK, "call {n}");
        assert_eq!(header(&allowed, "ratelimit"), Some(expected), "call {n}");
        clock.advance(Duration::from_secs(6));
    }
    // 30 s after the first call, which leaves the minute window in 30 s.
    let limited = served.send_code(&client, &[]).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&limited, "retry-after"), Some("30"));
    assert_eq!(header(&limited, "ratelimit"), Some(r#""p1";r=0;t=30"#));
    assert_eq!(header(&limited, "ratelimit-policy"), Some(SMS_POLICY));
    // A fraction of a second later the wait rounds up, never down.
    clock.advance(Duration::from_millis(300));
    let limited = served.send_code(&client, &[]).await;
    assert_eq!(header(&limited, "retry-after"), Some("30"));
    assert_eq!(header(&limited, "ratelimit"), Some(r#""p1";r=0;t=30"#));
}

/// `/reports` is behind two guards of one layer, checked as one: a request refused by
/// either counts against neither. Ann's 21st report is refused by the per-user guard and
/// leaves her address's per-IP count at 20; from an address whose 60 a minute are spent
/// (on `/`, behind the per-IP guard alone), Bob's report is refused by the per-IP guard and
/// counts nothing against his 20 an hour. The clock stands still.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_refused_by_one_guard_counts_against_neither() {
    let (limiter, served) = serve_on_a_still_clock();
    // `admitted` requests of `user` from `ip` to `path` pass, then their report is refused.
    let spend_then_report = |ip: &'static str, user: &'static str, path: &'static str, admitted| {
        let client = client_from(ip);
        let url = |path: &str| format!("{}{path}", served.base);
        async move {
            for n in 1..=admitted {
                let response = client.get(url(path)).header("x-user-id", user).send().await;
                assert_eq!(response.unwrap().status(), StatusCode::OK, "{path} {n}");
            }
            let refused = client
                .get(url("/reports"))
                .header("x-user-id", user)
                .send()
                .await;
            assert_eq!(refused.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
        }
    };
    let remaining = |key: &'static str, rules: &'static [Rule]| async move {
        limiter.peek(key, rules).await.unwrap().remaining
    };
    const API: [Rule; 1] = [Rule::per_minute(60)];
    const REPORTS: [Rule; 1] = [Rule::per_hour(20)];

    spend_then_report("127.0.0.1", "ann", "/reports", 20).await;
    assert_eq!(remaining("rate_limit:user:ann:reports", &REPORTS).await, 0);
    assert_eq!(remaining("rate_limit:ip:127.0.0.1:api", &API).await, 40);

    spend_then_report("127.0.0.2", "bob", "/", 60).await;
    assert_eq!(remaining("rate_limit:ip:127.0.0.2:api", &API).await, 0);
    assert_eq!(remaining("rate_limit:user:bob:reports", &REPORTS).await, 20);
}

/// The layer's configuration is what the example's users would write.
#[test]
fn the_layer_is_configurable_from_strings_read_at_run_time() {
    let err = RateLimitLayer::new()
        .try_trust_proxies("10.0.0.0/8,not-a-network".split(','))
        .unwrap_err();
    assert!(err
        .to_string()
        .starts_with("`not-a-network` is not a trusted proxy network"));
}
