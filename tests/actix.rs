//! End to end: the `actix_server` example's app served by a real actix-web `HttpServer`
//! with several workers (each its own runtime) on loopback, called with a real HTTP client,
//! on a real `redis-server` and on the memory backend. Statuses, headers and bodies are the
//! axum integration's, checked for their exact values.

mod support;

#[allow(dead_code)] // the example's `main` is not run here
#[path = "../examples/actix_server.rs"]
mod actix_server;

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{ServerHandle, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{web, App, HttpServer};
use redis_ratelimit::actix::{ProxyHeader, RateLimit};
use redis_ratelimit::{rate_limiter, Limiter, RateLimitError};
use reqwest::{Client, Response, StatusCode};

const SMS_POLICY: &str = r#""p1";q=5;w=60, "p2";q=10;w=3600, "dup";q=1;w=5"#;
const SEARCH_POLICY: &str = r#""p1";q=3;w=10"#;
const PROBLEM: &str = "application/problem+json";
const SMS_LIMITED: &str = r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many verification codes; wait before asking for another"}"#;

/// A running `HttpServer`, stopped when dropped.
struct Served {
    base: String,
    handle: ServerHandle,
}

impl Drop for Served {
    fn drop(&mut self) {
        // The stop command is sent on the call; its completion is not awaited.
        drop(self.handle.stop(false));
    }
}

/// Serves the app `factory` builds with `workers` workers on `ip`, port 0, in a thread
/// of its own running actix-web's system, as the example's `main` does.
fn serve<F, T, B>(ip: &str, workers: usize, factory: F) -> Served
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
    let listener = std::net::TcpListener::bind((ip, 0)).expect("bind a loopback port");
    let addr = listener.local_addr().unwrap();
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
    Served {
        base: format!("http://{addr}"),
        handle,
    }
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

/// The example's app, served by two workers.
fn example(limiter: &'static Limiter, rate_limit: RateLimit, ip: &str) -> Served {
    serve(ip, 2, move || {
        actix_server::app(limiter, rate_limit.clone())
    })
}

backend_tests! {
    async fn a_repeated_code_request_is_refused_with_every_header() {
        let served = example(support::limiter(), actix_server::rate_limit(), "127.0.0.1");
        let client = client_from("127.0.0.1");

        let first = send_code(&client, &served.base, &[]).await;
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(header(&first, "ratelimit-policy"), Some(SMS_POLICY));
        assert_eq!(header(&first, "ratelimit"), Some(r#""dup";r=0;t=5"#));
        assert_eq!(header(&first, "retry-after"), None);
        assert_eq!(first.text().await.unwrap(), "code sent to +1 555 0100\n");

        let second = send_code(&client, &served.base, &[]).await;
        assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&second, "retry-after"), Some("5"));
        assert_eq!(header(&second, "ratelimit-policy"), Some(SMS_POLICY));
        assert_eq!(header(&second, "ratelimit"), Some(r#""dup";r=0;t=5"#));
        assert_eq!(header(&second, "content-type"), Some(PROBLEM));
        assert_eq!(second.text().await.unwrap(), SMS_LIMITED);
    }

    async fn searches_are_counted_per_user_id_from_the_auth_middleware() {
        let served = example(support::limiter(), actix_server::rate_limit(), "127.0.0.1");
        let client = client_from("127.0.0.1");
        for remaining in [2, 1, 0] {
            let allowed = search_as(&client, &served.base, Some("42")).await;
            assert_eq!(allowed.status(), StatusCode::OK);
            assert_eq!(header(&allowed, "ratelimit-policy"), Some(SEARCH_POLICY));
            let status = format!(r#""p1";r={remaining};t=10"#);
            assert_eq!(header(&allowed, "ratelimit"), Some(status.as_str()));
            assert_eq!(allowed.text().await.unwrap(), "results for \"q=rust\"\n");
        }
        let limited = search_as(&client, &served.base, Some("42")).await;
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&limited, "retry-after"), Some("10"));
        assert_eq!(header(&limited, "ratelimit"), Some(r#""p1";r=0;t=10"#));
        assert_eq!(
            limited.text().await.unwrap(),
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests"}"#
        );
        let other = search_as(&client, &served.base, Some("43")).await;
        assert_eq!(other.status(), StatusCode::OK);
        assert_eq!(header(&other, "ratelimit"), Some(r#""p1";r=2;t=10"#));
    }

    async fn an_anonymous_search_is_refused_naming_the_missing_user_id() {
        let served = example(support::limiter(), actix_server::rate_limit(), "127.0.0.1");
        let response = search_as(&client_from("127.0.0.1"), &served.base, None).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(header(&response, "content-type"), Some(PROBLEM));
        assert_eq!(header(&response, "ratelimit"), None);
        assert_eq!(
            response.text().await.unwrap(),
            r#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit misconfigured: limit_type = USER_ID needs a user id, but the rate-limit layer found no user id for this request: give RateLimit::user_id a closure that finds it, and let only authenticated requests reach USER_ID routes"}"#
        );
    }

    async fn health_is_never_limited_and_carries_no_rate_limit_headers() {
        let served = example(support::limiter(), actix_server::rate_limit(), "127.0.0.1");
        let client = client_from("127.0.0.1");
        for _ in 0..20 {
            let response = client.get(format!("{}/health", served.base)).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(header(&response, "ratelimit"), None);
            assert_eq!(header(&response, "ratelimit-policy"), None);
        }
    }

    async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_changes_nothing() {
        let rate_limit = actix_server::rate_limit().trust_proxies(["127.0.0.2/32"]);
        let served = example(support::limiter(), rate_limit, "127.0.0.1");
        let client = client_from("127.0.0.1");
        let first = send_code(&client, &served.base, &[("x-forwarded-for", "198.51.100.1")]).await;
        assert_eq!(first.status(), StatusCode::OK);
        for spoof in ["198.51.100.2", "garbage", "198.51.100.3, 127.0.0.2"] {
            let again = send_code(&client, &served.base, &[("x-forwarded-for", spoof)]).await;
            assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS, "{spoof}");
        }
        let forwarded = send_code(&client, &served.base, &[("forwarded", "for=198.51.100.9")]).await;
        assert_eq!(forwarded.status(), StatusCode::TOO_MANY_REQUESTS);
    }

    async fn x_forwarded_for_is_believed_from_a_trusted_proxy() {
        let rate_limit = actix_server::rate_limit().trust_proxies(["127.0.0.2/32"]);
        let served = example(support::limiter(), rate_limit, "127.0.0.1");
        let proxy = client_from("127.0.0.2");
        let status = |r: Response| r.status();
        let base = &served.base;

        let a = [("x-forwarded-for", "198.51.100.1")];
        assert_eq!(status(send_code(&proxy, base, &a).await), StatusCode::OK);
        let b = [("x-forwarded-for", "198.51.100.2")];
        assert_eq!(status(send_code(&proxy, base, &b).await), StatusCode::OK);
        let a_spoofing = [("x-forwarded-for", "203.0.113.66, 198.51.100.1")];
        let refused = send_code(&proxy, base, &a_spoofing).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&refused, "ratelimit"), Some(r#""dup";r=0;t=5"#));
        assert_eq!(status(send_code(&proxy, base, &[]).await), StatusCode::OK);
        assert_eq!(status(send_code(&proxy, base, &[]).await), StatusCode::TOO_MANY_REQUESTS);
    }

    async fn forwarded_ipv6_clients_share_their_64() {
        let rate_limit = actix_server::rate_limit()
            .trust_proxies(["127.0.0.2/32"])
            .proxy_header(ProxyHeader::Forwarded);
        let served = example(support::limiter(), rate_limit, "127.0.0.1");
        let proxy = client_from("127.0.0.2");
        let base = &served.base;
        let from = |node: &'static str| [("forwarded", node)];
        let first = send_code(&proxy, base, &from(r#"for="[2001:db8:1:2::1]:4711""#)).await;
        assert_eq!(first.status(), StatusCode::OK);
        let same_net = send_code(&proxy, base, &from(r#"for="[2001:db8:1:2:ffff::9]""#)).await;
        assert_eq!(same_net.status(), StatusCode::TOO_MANY_REQUESTS);
        let next_net = send_code(&proxy, base, &from(r#"for="[2001:db8:1:3::1]""#)).await;
        assert_eq!(next_net.status(), StatusCode::OK);
        let mapped = send_code(&proxy, base, &from(r#"for="[::ffff:198.51.100.7]""#)).await;
        assert_eq!(mapped.status(), StatusCode::OK);
        let v4 = send_code(&proxy, base, &from("for=198.51.100.7:80")).await;
        assert_eq!(v4.status(), StatusCode::TOO_MANY_REQUESTS);
    }

    async fn an_ipv6_loopback_peer_is_served_and_counted() {
        let served = example(support::limiter(), actix_server::rate_limit(), "::1");
        let client = client_from("::1");
        assert_eq!(send_code(&client, &served.base, &[]).await.status(), StatusCode::OK);
        let again = send_code(&client, &served.base, &[]).await;
        assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&again, "retry-after"), Some("5"));
    }

    async fn exempt_requests_are_never_counted() {
        // The "health checker" is the peer 127.0.0.3.
        let rate_limit = actix_server::rate_limit().exempt(|req| {
            req.peer_addr().is_some_and(|addr| addr.ip() == IpAddr::from([127, 0, 0, 3]))
        });
        let served = example(support::limiter(), rate_limit, "127.0.0.1");
        let checker = client_from("127.0.0.3");
        for _ in 0..3 {
            let response = send_code(&checker, &served.base, &[]).await;
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(header(&response, "ratelimit"), None);
        }
        let other = client_from("127.0.0.4");
        assert_eq!(send_code(&other, &served.base, &[]).await.status(), StatusCode::OK);
        assert_eq!(
            send_code(&other, &served.base, &[]).await.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }

    async fn workers_with_runtimes_of_their_own_count_exactly_on_one_limiter() {
        let limiter = support::limiter();
        let served = serve("127.0.0.1", 4, move || {
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

/// A fail-closed limiter whose Redis is gone refuses with 503, without leaking the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_closed_limiter_without_redis_answers_503() {
    let mut server = support::RedisServer::start();
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .fail_open(false)
        .timeout(Duration::from_millis(200));
    let limiter: &'static Limiter = Box::leak(Box::new(limiter));
    let served = example(limiter, actix_server::rate_limit(), "127.0.0.1");
    let client = client_from("127.0.0.1");
    assert_eq!(
        send_code(&client, &served.base, &[]).await.status(),
        StatusCode::OK
    );

    server.kill();
    let response = send_code(&client, &served.base, &[]).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, "content-type"), Some(PROBLEM));
    assert_eq!(header(&response, "ratelimit"), None);
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter is unavailable; try again later"}"#
    );
}
