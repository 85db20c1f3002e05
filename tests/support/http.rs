//! What the framework tests share: axum and actix-web servers on a loopback listener bound
//! to port 0, clients connecting from a loopback address of the test's choosing, reading
//! one rate-limit field, limiters whose Redis goes away, and the scenarios of the example
//! API (`POST /sms/code`, `GET /search`, `GET /health`), which the axum and actix-web
//! examples both serve and so both pass: [`example_api_tests!`](crate::example_api_tests).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{App, HttpServer};
use redis_ratelimit::tower::ProxyHeader;
use redis_ratelimit::Limiter;
use reqwest::{Client, Response, StatusCode};

use super::RedisServer;

/// `RateLimit-Policy` of `/sms/code`: 5 a minute, 10 an hour, one per 5 s.
pub const SMS_POLICY: &str = r#""p1";q=5;w=60, "p2";q=10;w=3600, "dup";q=1;w=5"#;
/// `RateLimit-Policy` of `/search`: 3 per 10 s per user.
pub const SEARCH_POLICY: &str = r#""p1";q=3;w=10"#;
/// `RateLimit-Policy` of the guard every API request passes: 60 a minute per client IP.
pub const API_POLICY: &str = r#""p1";q=60;w=60"#;
/// The media type of every refusal's body.
pub const PROBLEM: &str = "application/problem+json";

/// The body of every misconfiguration refusal (no identity for an IP or USER_ID site): it
/// says nothing of how the server is configured; the log does.
pub const GENERIC_500: &str = r#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"the server could not handle this request"}"#;
/// The body of a refused `/sms/code`.
pub const SMS_LIMITED: &str = r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"too many verification codes; wait before asking for another (the limit of 1 per 5s is reached; retry in 5s)","violated-policies":["dup"]}"#;
/// The body of a fail-closed refusal.
pub const UNAVAILABLE: &str = r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter is unavailable; try again later"}"#;

/// A listener on `ip`, port 0: the system picks a free port as it binds, so no other
/// process can take it in between. Returns it with its base URL, `http://{addr}`.
pub fn listen(ip: &str) -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind((ip, 0)).expect("bind a loopback port");
    let addr = listener.local_addr().unwrap();
    (listener, format!("http://{addr}"))
}

/// [`listen`] for tokio-based servers; call it inside a runtime.
pub fn listen_tokio(ip: &str) -> (tokio::net::TcpListener, String) {
    let (listener, base) = listen(ip);
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    (listener, base)
}

/// Serves `app` on `ip`, port 0, as the axum example's `main` does (with the peer address),
/// until the test ends. Call it inside the test's runtime.
pub fn serve_axum(app: axum::Router, ip: &str) -> Served {
    let (listener, base) = listen_tokio(ip);
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.expect("serve");
    });
    Served::new(base)
}

/// Serves the app `factory` builds with `workers` workers (each its own runtime) on `ip`,
/// port 0, in a thread of its own running actix-web's system, as the actix-web example's
/// `main` does; stopped when the answer is dropped.
pub fn serve_actix<F, T, B>(ip: &str, workers: usize, factory: F) -> Served
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    T: ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    B: MessageBody + 'static,
{
    let (listener, base) = listen(ip);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = HttpServer::new(factory)
                .workers(workers)
                .disable_signals()
                .listen(listener)
                .expect("listen")
                .run();
            sender.send(server.handle()).unwrap();
            server.await.expect("serve");
        });
    });
    let handle = receiver.recv().expect("the server starts");
    // The stop command is sent on the call; its completion is not awaited.
    Served::stopped_by(base, move || drop(handle.stop(false)))
}

/// A client whose connections come from `local`: a peer address of the test's choosing
/// (any 127.0.0.0/8 address is loopback on Linux).
pub fn client_from(local: &str) -> Client {
    Client::builder()
        .no_proxy()
        .local_address(local.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A gRPC channel to `base` whose connection comes from `local`: a peer address of the
/// test's choosing (any 127.0.0.0/8 address is loopback on Linux).
pub async fn grpc_channel_from(base: &str, local: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(base.to_owned())
        .unwrap()
        .local_address(Some(local.parse().unwrap()))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect")
}

/// The single value of the gRPC metadata entry `name`, or `None`; panics when it is
/// repeated.
pub fn metadata_field<'a>(
    metadata: &'a tonic::metadata::MetadataMap,
    name: &str,
) -> Option<&'a str> {
    let values = metadata.get_all(name).iter();
    single(name, values.map(|v| v.to_str().unwrap()))
}

/// The single value of the field `name` among `values`, or `None`; panics when the field
/// is repeated.
pub fn single<'a>(name: &str, mut values: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let value = values.next();
    assert!(values.next().is_none(), "{name} appears more than once");
    value
}

/// The single value of the header `name`, or `None`; panics when it is repeated.
pub fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    let values = response.headers().get_all(name).iter();
    single(name, values.map(|v| v.to_str().unwrap()))
}

/// Asserts that `response` is a refusal (429, problem+json saying `detail`) of a rule
/// whose policy is `policy` and that frees up in `retry_after_s` seconds.
pub async fn assert_refused(response: Response, policy: &str, retry_after_s: u64, detail: &str) {
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "content-type"), Some(PROBLEM));
    let retry_after = retry_after_s.to_string();
    assert_eq!(header(&response, "retry-after"), Some(retry_after.as_str()));
    assert_eq!(header(&response, "ratelimit-policy"), Some(policy));
    let status = format!(r#""p1";r=0;t={retry_after_s}"#);
    assert_eq!(header(&response, "ratelimit"), Some(status.as_str()));
    let body: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["type"], QUOTA_EXCEEDED, "{body}");
    assert_eq!(body["status"], 429, "{body}");
    assert_eq!(
        body["violated-policies"],
        serde_json::json!(["p1"]),
        "{body}"
    );
    // The site's message, then which limit refused and when to retry; the default message
    // gives way to the latter alone.
    let said = body["detail"].as_str().unwrap();
    let (message, specific) = match said.split_once(" (") {
        Some((message, specific)) => (message, specific.trim_end_matches(')')),
        None => ("too many requests", said),
    };
    assert_eq!(message, detail, "{body}");
    assert!(specific.starts_with("the limit of "), "{body}");
}

/// The problem type of a refusal (draft-ietf-httpapi-ratelimit-headers-11).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// A limiter on `server` giving up on a check after 200 ms, fail-open or fail-closed;
/// leaked, as the example apps want it `'static`.
pub fn limiter_on(server: &RedisServer, fail_open: bool) -> &'static Limiter {
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .fail_open(fail_open)
        .timeout(Duration::from_millis(200));
    Box::leak(Box::new(limiter))
}

/// How a scenario wants the example's rate limiting configured.
#[derive(Clone, Copy, Debug)]
pub enum Setup {
    /// As the example builds it.
    Plain,
    /// Trusting the proxy at 127.0.0.2, which writes this header.
    BehindProxy(ProxyHeader),
    /// Exempting the requests from this peer.
    Exempting(IpAddr),
}

/// A server of the example API, running until dropped.
pub struct Served {
    /// `http://{addr}`.
    pub base: String,
    stop: Option<Box<dyn FnOnce()>>,
}

impl Served {
    /// A server that stops with the test's runtime.
    pub fn new(base: String) -> Served {
        Served { base, stop: None }
    }

    /// A server that `stop` stops, when dropped.
    pub fn stopped_by(base: String, stop: impl FnOnce() + 'static) -> Served {
        Served {
            base,
            stop: Some(Box::new(stop)),
        }
    }

    /// Requests a code, with `headers`, through `client`.
    pub async fn send_code(&self, client: &Client, headers: &[(&str, &str)]) -> Response {
        let mut request = client
            .post(format!("{}/sms/code", self.base))
            .body("+1 555 0100");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("POST /sms/code")
    }

    /// Searches as `user` (the `x-user-id` the example's authentication believes), or
    /// anonymously.
    pub async fn search_as(&self, client: &Client, user: Option<&str>) -> Response {
        let mut request = client.get(format!("{}/search?q=rust", self.base));
        if let Some(user) = user {
            request = request.header("x-user-id", user);
        }
        request.send().await.expect("GET /search")
    }

    /// `GET /health`.
    pub async fn health(&self, client: &Client) -> Response {
        let url = format!("{}/health", self.base);
        client.get(url).send().await.expect("GET /health")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
    }
}

/// An example server of the API: the axum or the actix-web one.
pub trait ExampleApi {
    /// The rate-limit builder's type.
    type RateLimit;

    /// The example's rate limiting, as it configures it.
    fn rate_limit() -> Self::RateLimit;

    /// `rate_limit` trusting the proxies in `networks`, which write `header`.
    fn trusting(
        rate_limit: Self::RateLimit,
        networks: &[&str],
        header: ProxyHeader,
    ) -> Self::RateLimit;

    /// `rate_limit` exempting the requests from `peer`.
    fn exempting(rate_limit: Self::RateLimit, peer: IpAddr) -> Self::RateLimit;

    /// Serves the example's app counting on `limiter`, behind `rate_limit`, on `ip`,
    /// port 0.
    fn serve_with(
        limiter: &'static Limiter,
        rate_limit: Self::RateLimit,
        ip: &str,
    ) -> impl Future<Output = Served>;

    /// Serves the example's app counting on `limiter`, configured as `setup` says, on
    /// `ip`, port 0.
    fn serve(limiter: &'static Limiter, setup: Setup, ip: &str) -> impl Future<Output = Served> {
        let rate_limit = match setup {
            Setup::Plain => Self::rate_limit(),
            Setup::BehindProxy(header) => {
                Self::trusting(Self::rate_limit(), &["127.0.0.2/32"], header)
            }
            Setup::Exempting(peer) => Self::exempting(Self::rate_limit(), peer),
        };
        Self::serve_with(limiter, rate_limit, ip)
    }
}

pub async fn a_repeated_code_request_is_refused_with_every_header<A: ExampleApi>() {
    let served = A::serve(super::limiter(), Setup::Plain, "127.0.0.1").await;
    let client = client_from("127.0.0.1");

    let first = served.send_code(&client, &[]).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "ratelimit-policy"), Some(SMS_POLICY));
    // The duplicate rule, now spent, is the binding one.
    assert_eq!(header(&first, "ratelimit"), Some(r#""dup";r=0;t=5"#));
    assert_eq!(header(&first, "retry-after"), None);
    assert_eq!(first.text().await.unwrap(), "code sent to +1 555 0100\n");

    let second = served.send_code(&client, &[]).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&second, "retry-after"), Some("5"));
    assert_eq!(header(&second, "ratelimit-policy"), Some(SMS_POLICY));
    assert_eq!(header(&second, "ratelimit"), Some(r#""dup";r=0;t=5"#));
    assert_eq!(header(&second, "content-type"), Some(PROBLEM));
    assert_eq!(second.text().await.unwrap(), SMS_LIMITED);
}

pub async fn searches_are_counted_per_user_id_from_the_auth_middleware<A: ExampleApi>() {
    let served = A::serve(super::limiter(), Setup::Plain, "127.0.0.1").await;
    let client = client_from("127.0.0.1");

    for remaining in [2, 1, 0] {
        let allowed = served.search_as(&client, Some("42")).await;
        assert_eq!(allowed.status(), StatusCode::OK);
        assert_eq!(header(&allowed, "ratelimit-policy"), Some(SEARCH_POLICY));
        let status = format!(r#""p1";r={remaining};t=10"#);
        assert_eq!(header(&allowed, "ratelimit"), Some(status.as_str()));
        assert_eq!(allowed.text().await.unwrap(), "results for \"q=rust\"\n");
    }
    let limited = served.search_as(&client, Some("42")).await;
    assert_refused(limited, SEARCH_POLICY, 10, "too many requests").await;

    // Same address, another user: another budget.
    let other = served.search_as(&client, Some("43")).await;
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(header(&other, "ratelimit"), Some(r#""p1";r=2;t=10"#));
}

pub async fn an_anonymous_search_is_refused_with_a_generic_500<A: ExampleApi>() {
    let served = A::serve(super::limiter(), Setup::Plain, "127.0.0.1").await;
    let response = served.search_as(&client_from("127.0.0.1"), None).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(header(&response, "content-type"), Some(PROBLEM));
    // The API guard admitted the request (by IP) before the handler found no user id.
    assert_eq!(header(&response, "ratelimit-policy"), Some(API_POLICY));
    assert_eq!(header(&response, "ratelimit"), Some(r#""p1";r=59;t=60"#));
    assert_eq!(response.text().await.unwrap(), GENERIC_500);
}

pub async fn every_api_request_counts_against_the_guard<A: ExampleApi>() {
    let served = A::serve(super::limiter(), Setup::Plain, "127.0.0.1").await;
    let client = client_from("127.0.0.1");
    // Each search as another user: the handler's own limit never binds.
    for n in 1..=60 {
        let user = n.to_string();
        let allowed = served.search_as(&client, Some(&user)).await;
        assert_eq!(allowed.status(), StatusCode::OK, "search {n}");
        // The guard binds once it has fewer units left than the user's 2.
        if n == 60 {
            assert_eq!(header(&allowed, "ratelimit-policy"), Some(API_POLICY));
            assert_eq!(header(&allowed, "ratelimit"), Some(r#""p1";r=0;t=60"#));
        }
    }
    // Refused by the guard, whatever the route, before any handler: not the handlers'
    // messages or policies.
    let search = served.search_as(&client, Some("61")).await;
    let code = served.send_code(&client, &[]).await;
    for refused in [search, code] {
        assert_refused(refused, API_POLICY, 60, "too many requests").await;
    }
    // Another client has a budget of its own; health checks are outside the guard.
    let other = client_from("127.0.0.2");
    assert_eq!(served.send_code(&other, &[]).await.status(), StatusCode::OK);
    assert_eq!(served.health(&client).await.status(), StatusCode::OK);
}

pub async fn health_is_never_limited_and_carries_no_rate_limit_headers<A: ExampleApi>() {
    let served = A::serve(super::limiter(), Setup::Plain, "127.0.0.1").await;
    let client = client_from("127.0.0.1");
    for _ in 0..20 {
        let response = served.health(&client).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None);
        assert_eq!(header(&response, "ratelimit-policy"), None);
        assert_eq!(response.text().await.unwrap(), "ok\n");
    }
}

pub async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_changes_nothing<A: ExampleApi>() {
    // 127.0.0.2 is trusted; 127.0.0.1, the peer here, is not.
    let setup = Setup::BehindProxy(ProxyHeader::XForwardedFor);
    let served = A::serve(super::limiter(), setup, "127.0.0.1").await;
    let client = client_from("127.0.0.1");
    let first = served
        .send_code(&client, &[("x-forwarded-for", "198.51.100.1")])
        .await;
    assert_eq!(first.status(), StatusCode::OK);
    for spoof in ["198.51.100.2", "garbage", "198.51.100.3, 127.0.0.2"] {
        let again = served
            .send_code(&client, &[("x-forwarded-for", spoof)])
            .await;
        assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS, "{spoof}");
    }
    let real_ip = served
        .send_code(&client, &[("x-real-ip", "198.51.100.9")])
        .await;
    assert_eq!(real_ip.status(), StatusCode::TOO_MANY_REQUESTS);
    let forwarded = served
        .send_code(&client, &[("forwarded", "for=198.51.100.9")])
        .await;
    assert_eq!(forwarded.status(), StatusCode::TOO_MANY_REQUESTS);
}

pub async fn x_forwarded_for_is_believed_from_a_trusted_proxy<A: ExampleApi>() {
    let setup = Setup::BehindProxy(ProxyHeader::XForwardedFor);
    let served = A::serve(super::limiter(), setup, "127.0.0.1").await;
    let proxy = client_from("127.0.0.2");
    let status = |r: Response| r.status();

    let a = [("x-forwarded-for", "198.51.100.1")];
    assert_eq!(status(served.send_code(&proxy, &a).await), StatusCode::OK);
    // Another client behind the same proxy has a budget of its own.
    let b = [("x-forwarded-for", "198.51.100.2")];
    assert_eq!(status(served.send_code(&proxy, &b).await), StatusCode::OK);
    // The first client again, having prepended a fake address: walked from the right,
    // the proxy's entry is the first untrusted one.
    let a_spoofing = [("x-forwarded-for", "203.0.113.66, 198.51.100.1")];
    let refused = served.send_code(&proxy, &a_spoofing).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "ratelimit"), Some(r#""dup";r=0;t=5"#));
    // Trusted hops are skipped; without the header the proxy itself is the client.
    let via_two = [("x-forwarded-for", "198.51.100.2, 127.0.0.2")];
    let refused = served.send_code(&proxy, &via_two).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let own = served.send_code(&proxy, &[]).await;
    assert_eq!(own.status(), StatusCode::OK);
    let own_again = served.send_code(&proxy, &[]).await;
    assert_eq!(own_again.status(), StatusCode::TOO_MANY_REQUESTS);
}

pub async fn forwarded_ipv6_clients_share_their_64<A: ExampleApi>() {
    let setup = Setup::BehindProxy(ProxyHeader::Forwarded);
    let served = A::serve(super::limiter(), setup, "127.0.0.1").await;
    let proxy = client_from("127.0.0.2");
    let send_for = |node: &'static str| {
        let served = &served;
        let proxy = &proxy;
        async move {
            served
                .send_code(proxy, &[("forwarded", node)])
                .await
                .status()
        }
    };
    let first = send_for(r#"for="[2001:db8:1:2::1]:4711";proto=http"#).await;
    assert_eq!(first, StatusCode::OK);
    // Another address of the same /64 is the same client.
    let same_net = send_for(r#"for="[2001:db8:1:2:ffff::9]""#).await;
    assert_eq!(same_net, StatusCode::TOO_MANY_REQUESTS);
    let next_net = send_for(r#"for="[2001:db8:1:3::1]""#).await;
    assert_eq!(next_net, StatusCode::OK);
    // An IPv4-mapped address is the IPv4 client.
    let mapped = send_for(r#"for="[::ffff:198.51.100.7]""#).await;
    assert_eq!(mapped, StatusCode::OK);
    let v4 = send_for("for=198.51.100.7:80").await;
    assert_eq!(v4, StatusCode::TOO_MANY_REQUESTS);
    // An undisclosed client: the proxy stands in for it.
    let unknown = send_for("for=unknown").await;
    assert_eq!(unknown, StatusCode::OK);
    let proxy_itself = served.send_code(&proxy, &[]).await;
    assert_eq!(proxy_itself.status(), StatusCode::TOO_MANY_REQUESTS);
}

pub async fn an_ipv6_loopback_peer_is_served_and_counted<A: ExampleApi>() {
    let served = A::serve(super::limiter(), Setup::Plain, "::1").await;
    let client = client_from("::1");
    assert_eq!(
        served.send_code(&client, &[]).await.status(),
        StatusCode::OK
    );
    let again = served.send_code(&client, &[]).await;
    assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&again, "retry-after"), Some("5"));
}

pub async fn exempt_requests_are_never_counted<A: ExampleApi>() {
    // The "health checker" is the peer 127.0.0.3.
    let setup = Setup::Exempting(IpAddr::from([127, 0, 0, 3]));
    let served = A::serve(super::limiter(), setup, "127.0.0.1").await;
    let checker = client_from("127.0.0.3");
    for _ in 0..3 {
        let response = served.send_code(&checker, &[]).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None);
    }
    let other = client_from("127.0.0.4");
    assert_eq!(served.send_code(&other, &[]).await.status(), StatusCode::OK);
    assert_eq!(
        served.send_code(&other, &[]).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// A fail-closed limiter whose Redis is gone refuses with 503, without leaking the cause.
pub async fn a_fail_closed_limiter_without_redis_answers_503<A: ExampleApi>() {
    let mut server = RedisServer::start();
    let served = A::serve(limiter_on(&server, false), Setup::Plain, "127.0.0.1").await;
    let client = client_from("127.0.0.1");
    assert_eq!(
        served.send_code(&client, &[]).await.status(),
        StatusCode::OK
    );

    server.kill();
    let response = served.send_code(&client, &[]).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, "content-type"), Some(PROBLEM));
    assert_eq!(header(&response, "ratelimit"), None);
    assert_eq!(response.text().await.unwrap(), UNAVAILABLE);
}

/// A fail-open limiter whose Redis is gone lets calls through, with no headers to report.
pub async fn a_fail_open_limiter_without_redis_lets_calls_through<A: ExampleApi>() {
    let mut server = RedisServer::start();
    let served = A::serve(limiter_on(&server, true), Setup::Plain, "127.0.0.1").await;
    let client = client_from("127.0.0.1");
    server.kill();
    for _ in 0..2 {
        let response = served.send_code(&client, &[]).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit"), None);
    }
}

/// The scenarios of the example API for the server `$api` (an [`ExampleApi`]), each on
/// Redis and on the memory backend (see [`backend_tests!`](crate::backend_tests)) together
/// with the test file's own scenarios that follow, and the fail-closed and fail-open
/// answers once Redis is gone.
///
/// ```ignore
/// example_api_tests! {
///     AxumExample;
///     async fn a_scenario_of_axum_alone() { let limiter = support::limiter(); ... }
/// }
/// ```
#[macro_export]
macro_rules! example_api_tests {
    ($api:ty; $($own:tt)*) => {
        $crate::example_api_tests!(@ $api; [$($own)*];
            a_repeated_code_request_is_refused_with_every_header,
            searches_are_counted_per_user_id_from_the_auth_middleware,
            an_anonymous_search_is_refused_with_a_generic_500,
            every_api_request_counts_against_the_guard,
            health_is_never_limited_and_carries_no_rate_limit_headers,
            a_spoofed_x_forwarded_for_from_an_untrusted_peer_changes_nothing,
            x_forwarded_for_is_believed_from_a_trusted_proxy,
            forwarded_ipv6_clients_share_their_64,
            an_ipv6_loopback_peer_is_served_and_counted,
            exempt_requests_are_never_counted,
        );

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_fail_closed_limiter_without_redis_answers_503() {
            $crate::support::http::a_fail_closed_limiter_without_redis_answers_503::<$api>()
                .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_fail_open_limiter_without_redis_lets_calls_through() {
            $crate::support::http::a_fail_open_limiter_without_redis_lets_calls_through::<$api>()
                .await;
        }
    };
    (@ $api:ty; [$($own:tt)*]; $($scenario:ident,)*) => {
        $crate::backend_tests! {
            $(
                async fn $scenario() {
                    $crate::support::http::$scenario::<$api>().await;
                }
            )*
            $($own)*
        }
    };
}
