//! End to end: the `axum_server` example's app served on loopback and called with a real
//! HTTP client, on a real `redis-server` and on the memory backend. Every status and
//! rate-limit header is checked for its exact value.

mod support;

#[allow(dead_code)] // the example's `main` is not run here
#[path = "../examples/axum_server.rs"]
mod axum_server;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::Router;
use redis_ratelimit::axum::{ProxyHeader, RateLimitLayer};
use redis_ratelimit::clock::ManualClock;
use redis_ratelimit::Limiter;
use reqwest::{Client, Response, StatusCode};

const SMS_POLICY: &str = r#""p1";q=5;w=60, "p2";q=10;w=3600, "dup";q=1;w=5"#;
const SEARCH_POLICY: &str = r#""p1";q=3;w=10"#;
const PROBLEM: &str = "application/problem+json";
const SMS_LIMITED: &str = r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many verification codes; wait before asking for another"}"#;

/// Serves `app` on `ip`, port 0, as the example's `main` does (with the peer address), until
/// the test ends. Returns the base URL.
async fn serve(app: Router, ip: &str) -> String {
    let listener = tokio::net::TcpListener::bind((ip, 0))
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.expect("serve");
    });
    format!("http://{addr}")
}

/// A client whose connections come from `local`: a peer address of the test's choosing
/// (any 127.0.0.0/8 address is loopback on Linux).
fn client_from(local: &str) -> Client {
    Client::builder()
        .no_proxy()
        .local_address(local.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// The single value of `name`, or `None`; panics when the header is repeated.
fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    let mut values = response.headers().get_all(name).iter();
    let value = values.next().map(|v| v.to_str().unwrap());
    assert!(values.next().is_none(), "{name} appears more than once");
    value
}

/// Requests a code through `client`, with `headers`.
async fn send_code(client: &Client, base: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = client.post(format!("{base}/sms/code")).body("+1 555 0100");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("POST /sms/code")
}

async fn search_as(client: &Client, base: &str, user: Option<&str>) -> Response {
    let mut request = client.get(format!("{base}/search?q=rust"));
    if let Some(user) = user {
        request = request.header("x-user-id", user);
    }
    request.send().await.expect("GET /search")
}

fn example_app(limiter: &'static Limiter) -> Router {
    axum_server::app(limiter, axum_server::rate_limit_layer())
}

/// The example's app behind a proxy at 127.0.0.2 writing `header`.
fn proxied_app(limiter: &'static Limiter, header: ProxyHeader) -> Router {
    let layer = axum_server::rate_limit_layer()
        .trust_proxies(["127.0.0.2/32"])
        .proxy_header(header);
    axum_server::app(limiter, layer)
}

backend_tests! {
    async fn a_repeated_code_request_is_refused_with_every_header() {
        let base = serve(example_app(support::limiter()), "127.0.0.1").await;
        let client = client_from("127.0.0.1");

        let first = send_code(&client, &base, &[]).await;
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(header(&first, "ratelimit-policy"), Some(SMS_POLICY));
        // The duplicate rule, now spent, is the binding one.
        assert_eq!(header(&first, "ratelimit"), Some(r#""dup";r=0;t=5"#));
        assert_eq!(header(&first, "retry-after"), None);
        assert_eq!(first.text().await.unwrap(), "code sent to +1 555 0100\n");

        let second = send_code(&client, &base, &[]).await;
        assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&second, "retry-after"), Some("5"));
        assert_eq!(header(&second, "ratelimit-policy"), Some(SMS_POLICY));
        assert_eq!(header(&second, "ratelimit"), Some(r#""dup";r=0;t=5"#));
        assert_eq!(header(&second, "content-type"), Some(PROBLEM));
        assert_eq!(second.text().await.unwrap(), SMS_LIMITED);
    }

    async fn searches_are_counted_per_user_id_from_the_auth_middleware() {
        let base = serve(example_app(support::limiter()), "127.0.0.1").await;
        let client = client_from("127.0.0.1");

        for remaining in [2, 1, 0] {
            let allowed = search_as(&client, &base, Some("42")).await;
            assert_eq!(allowed.status(), StatusCode::OK);
            assert_eq!(header(&allowed, "ratelimit-policy"), Some(SEARCH_POLICY));
            let status = format!(r#""p1";r={remaining};t=10"#);
            assert_eq!(header(&allowed, "ratelimit"), Some(status.as_str()));
            assert_eq!(allowed.text().await.unwrap(), "results for \"q=rust\"\n");
        }
        let limited = search_as(&client, &base, Some("42")).await;
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&limited, "retry-after"), Some("10"));
        assert_eq!(header(&limited, "ratelimit-policy"), Some(SEARCH_POLICY));
        assert_eq!(header(&limited, "ratelimit"), Some(r#""p1";r=0;t=10"#));
        assert_eq!(
            limited.text().await.unwrap(),
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests"}"#
        );

        // Same address, another user: another budget.
        let other = search_as(&client, &base, Some("43")).await;
        assert_eq!(other.status(), StatusCode::OK);
        assert_eq!(header(&other, "ratelimit"), Some(r#""p1";r=2;t=10"#));
    }

    async fn an_anonymous_search_is_refused_naming_the_missing_user_id() {
        let base = serve(example_app(support::limiter()), "127.0.0.1").await;
        let response = search_as(&client_from("127.0.0.1"), &base, None).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(header(&response, "content-type"), Some(PROBLEM));
        assert_eq!(header(&response, "ratelimit"), None);
        assert_eq!(
            response.text().await.unwrap(),
            r#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit misconfigured: limit_type = USER_ID needs a user id, but the rate-limit layer found no user id for this request: give RateLimitLayer::user_id a closure that finds it, and let only authenticated requests reach USER_ID routes"}"#
        );
    }

    async fn health_is_never_limited_and_carries_no_rate_limit_headers() {
        let base = serve(example_app(support::limiter()), "127.0.0.1").await;
        let client = client_from("127.0.0.1");
        for _ in 0..20 {
            let response = client.get(format!("{base}/health")).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(header(&response, "ratelimit"), None);
            assert_eq!(header(&response, "ratelimit-policy"), None);
            assert_eq!(response.text().await.unwrap(), "ok\n");
        }
    }

    async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_changes_nothing() {
        // 127.0.0.2 is trusted; 127.0.0.1, the peer here, is not.
        let limiter = support::limiter();
        let base = serve(proxied_app(limiter, ProxyHeader::XForwardedFor), "127.0.0.1").await;
        let client = client_from("127.0.0.1");
        let first = send_code(&client, &base, &[("x-forwarded-for", "198.51.100.1")]).await;
        assert_eq!(first.status(), StatusCode::OK);
        for spoof in ["198.51.100.2", "garbage", "198.51.100.3, 127.0.0.2"] {
            let again = send_code(&client, &base, &[("x-forwarded-for", spoof)]).await;
            assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS, "{spoof}");
        }
        let real_ip = send_code(&client, &base, &[("x-real-ip", "198.51.100.9")]).await;
        assert_eq!(real_ip.status(), StatusCode::TOO_MANY_REQUESTS);
        let forwarded = send_code(&client, &base, &[("forwarded", "for=198.51.100.9")]).await;
        assert_eq!(forwarded.status(), StatusCode::TOO_MANY_REQUESTS);
    }

    async fn x_forwarded_for_is_believed_from_a_trusted_proxy() {
        let base = serve(proxied_app(support::limiter(), ProxyHeader::XForwardedFor), "127.0.0.1").await;
        let proxy = client_from("127.0.0.2");
        let status = |r: Response| r.status();

        let a = [("x-forwarded-for", "198.51.100.1")];
        assert_eq!(status(send_code(&proxy, &base, &a).await), StatusCode::OK);
        // Another client behind the same proxy has a budget of its own.
        let b = [("x-forwarded-for", "198.51.100.2")];
        assert_eq!(status(send_code(&proxy, &base, &b).await), StatusCode::OK);
        // The first client again, having prepended a fake address: walked from the right,
        // the proxy's entry is the first untrusted one.
        let a_spoofing = [("x-forwarded-for", "203.0.113.66, 198.51.100.1")];
        let refused = send_code(&proxy, &base, &a_spoofing).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&refused, "ratelimit"), Some(r#""dup";r=0;t=5"#));
        // Trusted hops are skipped; without the header the proxy itself is the client.
        let via_two = [("x-forwarded-for", "198.51.100.2, 127.0.0.2")];
        assert_eq!(status(send_code(&proxy, &base, &via_two).await), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(status(send_code(&proxy, &base, &[]).await), StatusCode::OK);
        assert_eq!(status(send_code(&proxy, &base, &[]).await), StatusCode::TOO_MANY_REQUESTS);
    }

    async fn forwarded_ipv6_clients_share_their_64() {
        let base = serve(proxied_app(support::limiter(), ProxyHeader::Forwarded), "127.0.0.1").await;
        let proxy = client_from("127.0.0.2");
        let from = |node: &'static str| [("forwarded", node)];
        let first = send_code(&proxy, &base, &from(r#"for="[2001:db8:1:2::1]:4711";proto=http"#)).await;
        assert_eq!(first.status(), StatusCode::OK);
        // Another address of the same /64 is the same client.
        let same_net = send_code(&proxy, &base, &from(r#"for="[2001:db8:1:2:ffff::9]""#)).await;
        assert_eq!(same_net.status(), StatusCode::TOO_MANY_REQUESTS);
        let next_net = send_code(&proxy, &base, &from(r#"for="[2001:db8:1:3::1]""#)).await;
        assert_eq!(next_net.status(), StatusCode::OK);
        // An IPv4-mapped address is the IPv4 client.
        let mapped = send_code(&proxy, &base, &from(r#"for="[::ffff:198.51.100.7]""#)).await;
        assert_eq!(mapped.status(), StatusCode::OK);
        let v4 = send_code(&proxy, &base, &from("for=198.51.100.7:80")).await;
        assert_eq!(v4.status(), StatusCode::TOO_MANY_REQUESTS);
        // An undisclosed client: the proxy stands in for it.
        let unknown = send_code(&proxy, &base, &from("for=unknown")).await;
        assert_eq!(unknown.status(), StatusCode::OK);
        let proxy_itself = send_code(&proxy, &base, &[]).await;
        assert_eq!(proxy_itself.status(), StatusCode::TOO_MANY_REQUESTS);
    }

    async fn an_ipv6_loopback_peer_is_served_and_counted() {
        let base = serve(example_app(support::limiter()), "::1").await;
        let client = client_from("::1");
        assert_eq!(send_code(&client, &base, &[]).await.status(), StatusCode::OK);
        let again = send_code(&client, &base, &[]).await;
        assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&again, "retry-after"), Some("5"));
    }

    async fn exempt_requests_are_never_counted() {
        // The "health checker" is the peer 127.0.0.3.
        let layer = axum_server::rate_limit_layer().exempt(|req: &axum::extract::Request| {
            req.extensions()
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .is_some_and(|info| info.0.ip() == IpAddr::from([127, 0, 0, 3]))
        });
        let base = serve(axum_server::app(support::limiter(), layer), "127.0.0.1").await;
        let checker = client_from("127.0.0.3");
        for _ in 0..3 {
            let response = send_code(&checker, &base, &[]).await;
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(header(&response, "ratelimit"), None);
        }
        let other = client_from("127.0.0.4");
        assert_eq!(send_code(&other, &base, &[]).await.status(), StatusCode::OK);
        assert_eq!(
            send_code(&other, &base, &[]).await.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }

    async fn routes_without_the_layer_answer_500_saying_so() {
        let base = serve(axum_server::routes(support::limiter()), "127.0.0.1").await;
        let client = client_from("127.0.0.1");
        let response = send_code(&client, &base, &[]).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(header(&response, "content-type"), Some(PROBLEM));
        assert_eq!(
            response.text().await.unwrap(),
            r#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit misconfigured: limit_type = IP needs the client IP, but no rate-limit layer runs in front of this handler: add redis_ratelimit::axum::RateLimitLayer to the router (or run the call inside redis_ratelimit::context::scope)"}"#
        );
        let health = client.get(format!("{base}/health")).send().await.unwrap();
        assert_eq!(health.status(), StatusCode::OK);
    }
}

/// With the duplicate rule out of the way (calls 6 s apart on a manual clock), the
/// per-minute rule comes to bind, and `t` / `Retry-After` count until its oldest call
/// leaves the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minute_rule_binds_once_calls_are_spaced_out() {
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let limiter = Limiter::memory_with_clock(clock.clone());
    let limiter: &'static Limiter = Box::leak(Box::new(limiter));
    let base = serve(example_app(limiter), "127.0.0.1").await;
    let client = client_from("127.0.0.1");

    for (n, expected) in [
        (1, r#""dup";r=0;t=5"#),
        (2, r#""dup";r=0;t=5"#),
        (3, r#""dup";r=0;t=5"#),
        (4, r#""dup";r=0;t=5"#),
        // Both spent: equal remainders bind the rule listed first.
        (5, r#""p1";r=0;t=60"#),
    ] {
        let allowed = send_code(&client, &base, &[]).await;
        assert_eq!(allowed.status(), StatusCode::OK, "call {n}");
        assert_eq!(header(&allowed, "ratelimit"), Some(expected), "call {n}");
        clock.advance(Duration::from_secs(6));
    }
    // 30 s after the first call, which leaves the minute window in 30 s.
    let limited = send_code(&client, &base, &[]).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&limited, "retry-after"), Some("30"));
    assert_eq!(header(&limited, "ratelimit"), Some(r#""p1";r=0;t=30"#));
    assert_eq!(header(&limited, "ratelimit-policy"), Some(SMS_POLICY));
    // A fraction of a second later the wait rounds up, never down.
    clock.advance(Duration::from_millis(300));
    let limited = send_code(&client, &base, &[]).await;
    assert_eq!(header(&limited, "retry-after"), Some("30"));
    assert_eq!(header(&limited, "ratelimit"), Some(r#""p1";r=0;t=30"#));
}

/// A fail-closed limiter whose Redis is gone refuses with 503, without leaking the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_closed_limiter_without_redis_answers_503() {
    let mut server = support::RedisServer::start();
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .fail_open(false)
        .timeout(Duration::from_millis(200));
    let limiter: &'static Limiter = Box::leak(Box::new(limiter));
    let base = serve(example_app(limiter), "127.0.0.1").await;
    let client = client_from("127.0.0.1");
    assert_eq!(
        send_code(&client, &base, &[]).await.status(),
        StatusCode::OK
    );

    server.kill();
    let response = send_code(&client, &base, &[]).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, "content-type"), Some(PROBLEM));
    assert_eq!(header(&response, "ratelimit"), None);
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter is unavailable; try again later"}"#
    );
}

/// A fail-open limiter whose Redis is gone lets calls through, with no headers to report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_open_limiter_without_redis_lets_calls_through() {
    let mut server = support::RedisServer::start();
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .timeout(Duration::from_millis(200));
    let limiter: &'static Limiter = Box::leak(Box::new(limiter));
    let base = serve(example_app(limiter), "127.0.0.1").await;
    let client = client_from("127.0.0.1");
    server.kill();
    for _ in 0..2 {
        let response = send_code(&client, &base, &[]).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None);
    }
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
