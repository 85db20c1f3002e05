//! The outbound middleware (feature `reqwest`) against a real HTTP server on loopback that
//! records when each request arrives and answers 429s of its own (`support/fake_api.rs`),
//! with a real `redis-server` or the embedded backend: a quota shared by clients in several
//! OS processes, `Retry-After` honoured by every process, waiting and refusing, failures.
//!
//! Multi-process tests re-run this test binary as children (as `tests/processes.rs`
//! does), each running one ignored child test with its orders in environment variables.

#[path = "support/fake_api.rs"]
mod fake_api;
mod support;

use std::future::Future;
use std::pin::pin;
use std::sync::LazyLock;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use fake_api::{most_in_any, FakeApi};
use redis_ratelimit::reqwest::RateLimitMiddleware;
use redis_ratelimit::{Limiter, Mode, RateLimitError, Rule};
use reqwest::StatusCode;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use support::{ChildTest, RedisServer};

const URL_ENV: &str = support::CHILD_URL_ENV;
const API_ENV: &str = "RATELIMIT_CHILD_API";

/// Requests leave the client once admitted and reach the API a little later, each after
/// its own delay: two admitted a whole window apart can arrive closer by the difference of
/// their delays. A window of arrivals is counted this much shorter than the rule's: long
/// enough for a process descheduled on a busy machine, short enough that requests not
/// sharing the quota (twice it, within milliseconds) are still caught.
const DELIVERY: Duration = Duration::from_millis(400);

/// The shape users write: one `static` limiter, shared by tests running in parallel.
static MEMORY: LazyLock<Limiter> = LazyLock::new(Limiter::memory);

/// A client through `middleware`.
fn client(middleware: RateLimitMiddleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .build()
}

/// The upstream's answer to a GET of `url`; panics when the client gave none.
async fn answer(client: &ClientWithMiddleware, url: String) -> reqwest::Response {
    client.get(url).send().await.unwrap()
}

/// The rate-limit error a request failed with, if it failed with one.
fn rate_limit_error(err: &reqwest_middleware::Error) -> Option<&RateLimitError> {
    match err {
        reqwest_middleware::Error::Middleware(err) => err.downcast_ref(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

/// A middleware counting requests as `name` under `rules` on [`MEMORY`].
fn on_memory(name: &'static str, rules: &'static [Rule]) -> RateLimitMiddleware {
    RateLimitMiddleware::new(name, rules).limiter(&MEMORY)
}

/// Asserts that `err` is the refusal of a request by its rules.
#[track_caller]
fn assert_limited(err: &reqwest_middleware::Error) {
    assert!(
        matches!(rate_limit_error(err), Some(RateLimitError::Limited { .. })),
        "{err}"
    );
}

/// A limiter on the Redis at `url`, patient enough for a loaded machine.
fn redis_limiter(url: &str) -> &'static Limiter {
    support::leak(support::redis_limiter(url))
}

/// A Redis server of its own, a limiter on it, a fake API, and a client whose middleware
/// checks `rules` for `name` on that limiter, with the options `options` sets.
fn on_redis(
    name: &'static str,
    rules: &'static [Rule],
    options: impl FnOnce(RateLimitMiddleware) -> RateLimitMiddleware,
) -> (RedisServer, &'static Limiter, FakeApi, ClientWithMiddleware) {
    let server = RedisServer::start();
    let limiter = redis_limiter(&server.url());
    let api = FakeApi::start();
    let client = client(options(
        RateLimitMiddleware::new(name, rules).limiter(limiter),
    ));
    (server, limiter, api, client)
}

/// For a multi-process test: a server, a fake API (served by the runtime returned), and
/// the environment that tells a child where both are.
fn parent() -> (
    RedisServer,
    tokio::runtime::Runtime,
    FakeApi,
    [(&'static str, String); 2],
) {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = runtime.block_on(async { FakeApi::start() });
    let envs = [(URL_ENV, server.url()), (API_ENV, api.base.clone())];
    (server, runtime, api, envs)
}

/// In a child of [`parent`]: a limiter on the parent's server, and the fake API's base URL.
fn from_parent() -> (&'static Limiter, String) {
    let limiter = redis_limiter(&support::from_parent(URL_ENV));
    (limiter, support::from_parent(API_ENV))
}

/// In a child of [`parent`]: connects and loads the scripts (a peek of `rules`), says
/// "ready", and waits for the parent's "go".
async fn ready_for_go(limiter: &Limiter, rules: &[Rule]) {
    limiter.peek("warm-up", rules).await.unwrap();
    support::tell_parent_then_await("ready", "go").await;
}

// ---------------------------------------------------------------------------------------
// One quota, several processes.

const SHARED_NAME: &str = "outbound.shared";
static SHARED_QUOTA: [Rule; 1] = [Rule::new(4, Duration::from_secs(2))];
/// [`DELIVERY`] for requests of two processes on a busy machine: a child descheduled
/// between admission and sending delays its requests more than a thread does, and its
/// window stays long enough that two processes not sharing the quota (eight requests within
/// milliseconds) are still caught.
const PROCESS_DELIVERY: Duration = Duration::from_secs(1);
const CHILDREN: usize = 2;
const CLIENTS_PER_CHILD: usize = 3;
const REQUESTS_PER_CLIENT: usize = 3;
const QUOTA_CHILD: &str = "child_sends_through_its_clients";

#[test]
fn clients_in_two_processes_share_one_quota_through_redis() {
    let (_server, _runtime, api, envs) = parent();
    let mut children: Vec<ChildTest> = (0..CHILDREN)
        .map(|_| ChildTest::spawn(&[QUOTA_CHILD, "--exact"], &envs))
        .collect();
    for child in &mut children {
        child.wait_for("ready");
    }
    for child in &mut children {
        child.send("go");
    }
    for child in children {
        let sent: usize = child.finish("sent=").parse().unwrap();
        assert_eq!(sent, CLIENTS_PER_CHILD * REQUESTS_PER_CLIENT);
    }
    let arrivals = api.arrivals_at("/shared");
    assert_eq!(
        arrivals.len(),
        CHILDREN * CLIENTS_PER_CHILD * REQUESTS_PER_CLIENT,
        "every request waited for its turn and was sent"
    );
    let most = most_in_any(&arrivals, SHARED_QUOTA[0].window() - PROCESS_DELIVERY);
    assert!(
        most <= SHARED_QUOTA[0].count() as usize,
        "{most} requests reached the API within one window: {arrivals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child of clients_in_two_processes_share_one_quota_through_redis"]
async fn child_sends_through_its_clients() {
    let (limiter, api) = from_parent();
    let middleware = || {
        RateLimitMiddleware::new(SHARED_NAME, &SHARED_QUOTA)
            .limiter(limiter)
            .wait(Duration::from_secs(60))
    };
    let clients: Vec<ClientWithMiddleware> = (0..CLIENTS_PER_CHILD)
        .map(|_| client(middleware()))
        .collect();
    ready_for_go(limiter, &SHARED_QUOTA).await;
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let url = format!("{api}/shared");
            tokio::spawn(async move {
                for _ in 0..REQUESTS_PER_CLIENT {
                    let response = client.get(&url).send().await.expect("admitted in time");
                    assert_eq!(response.status(), StatusCode::OK);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    println!("sent={}", CLIENTS_PER_CHILD * REQUESTS_PER_CLIENT);
}

// ---------------------------------------------------------------------------------------
// Retry-After, honoured by the other process.

const PUSHBACK_NAME: &str = "outbound.pushback";
static PUSHBACK_RULES: [Rule; 1] = [Rule::per_second(100)];
const PUSHBACK_KEY: &str = "rate_limit:out:outbound.pushback";
const PUSHBACK_CHILD: &str = "child_is_held_back_by_the_block";

#[test]
fn a_retry_after_from_the_api_holds_back_the_other_process() {
    let (server, runtime, api, envs) = parent();
    let mut child = ChildTest::spawn(&[PUSHBACK_CHILD, "--exact"], &envs);
    child.wait_for("ready");

    let limiter = redis_limiter(&server.url());
    let client = client(RateLimitMiddleware::new(PUSHBACK_NAME, &PUSHBACK_RULES).limiter(limiter));
    runtime.block_on(async {
        let response = answer(&client, api.url("/busy?status=429&retry_after=2")).await;
        // The answer is the caller's, unchanged.
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "2");
        assert_eq!(response.text().await.unwrap(), "slow down");
        // The key is blocked in Redis for what the API asked.
        let state = limiter
            .inspect(PUSHBACK_KEY)
            .await
            .unwrap()
            .expect("blocked");
        let block = state.block().expect("a block");
        assert!(
            block.ends_in > Duration::ZERO && block.ends_in <= Duration::from_secs(2),
            "{block:?}"
        );
    });
    child.send("go");
    let held_for_ms: u64 = child
        .finish("sent after being held for ms=")
        .parse()
        .unwrap();
    assert!(held_for_ms > 0);

    let busy = api.arrivals_at("/busy");
    let after = api.arrivals_at("/after");
    assert_eq!((busy.len(), after.len()), (1, 1), "nothing is sent again");
    // The block started once the 429 was received, after it left the API.
    let gap = after[0].at - busy[0].at;
    assert!(
        gap >= Duration::from_secs(2),
        "the other process called after {gap:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child of a_retry_after_from_the_api_holds_back_the_other_process"]
async fn child_is_held_back_by_the_block() {
    let (limiter, api) = from_parent();
    let client = client(
        RateLimitMiddleware::new(PUSHBACK_NAME, &PUSHBACK_RULES)
            .limiter(limiter)
            .wait(Duration::from_secs(60)),
    );
    ready_for_go(limiter, &PUSHBACK_RULES).await;
    // The other process's 429 blocks this one's budget ...
    let seen = limiter.peek(PUSHBACK_KEY, &PUSHBACK_RULES).await.unwrap();
    assert!(!seen.allowed, "{seen:?}");
    let held = seen.retry_after.expect("a block ends");
    // ... so its request waits for the block's end, then goes.
    let response = client.get(format!("{api}/after")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    println!("sent after being held for ms={}", held.as_millis());
}

// ---------------------------------------------------------------------------------------
// One process, the embedded backend.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_backend_keeps_one_process_within_its_quota() {
    static QUOTA: [Rule; 1] = [Rule::new(3, Duration::from_millis(500))];
    let api = FakeApi::start();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let client =
                client(on_memory("outbound.embedded", &QUOTA).wait(Duration::from_secs(60)));
            let url = api.url("/embedded");
            tokio::spawn(async move {
                for _ in 0..3 {
                    let response = client.get(&url).send().await.expect("admitted in time");
                    assert_eq!(response.status(), StatusCode::OK);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let arrivals = api.arrivals_at("/embedded");
    assert_eq!(arrivals.len(), 12);
    let most = most_in_any(&arrivals, QUOTA[0].window() - DELIVERY);
    assert!(most <= 3, "{most} arrivals within one window: {arrivals:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_with_an_http_date_blocks_the_embedded_backend_and_is_returned_unchanged() {
    static RULES: [Rule; 1] = [Rule::per_second(100)];
    let api = FakeApi::start();
    let client = client(on_memory("outbound.http_date", &RULES).wait(Duration::from_secs(60)));
    let until = SystemTime::now() + Duration::from_secs(3);
    let date = httpdate::fmt_http_date(until)
        .replace(' ', "%20")
        .replace(',', "%2C");
    let response = answer(
        &client,
        api.url(&format!("/busy?status=503&retry_after={date}")),
    )
    .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.text().await.unwrap(), "slow down");
    let key = "rate_limit:out:outbound.http_date";
    let seen = MEMORY.peek(key, &RULES).await.unwrap();
    assert!(!seen.allowed, "{seen:?}");
    let left = seen.retry_after.unwrap();
    // The date has whole seconds: between 2 and 3 s were left when it was read.
    assert!(left <= Duration::from_secs(3), "{left:?}");
    let response = client.get(api.url("/after-date")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (busy, after) = (api.arrivals_at("/busy"), api.arrivals_at("/after-date"));
    assert!(
        after[0].at - busy[0].at >= left,
        "held back until the block ended"
    );
}

#[tokio::test]
async fn only_a_429_or_503_with_a_retry_after_blocks_and_only_when_respected() {
    static RULES: [Rule; 1] = [Rule::per_second(100)];
    let api = FakeApi::start();
    let cases = [
        ("outbound.no_header", "/busy?status=429", true),
        (
            "outbound.other_status",
            "/busy?status=500&retry_after=60",
            true,
        ),
        (
            "outbound.not_respected",
            "/busy?status=429&retry_after=60",
            false,
        ),
    ];
    for (name, target, respect) in cases {
        let client = client(on_memory(name, &RULES).respect_retry_after(respect));
        let response = client.get(api.url(target)).send().await.unwrap();
        assert!(!response.status().is_success(), "{name}");
        let key = format!("rate_limit:out:{name}");
        let state = MEMORY.inspect(&key).await.unwrap().expect("counted");
        assert!(state.block().is_none(), "{name}: {:?}", state.block());
    }
}

#[tokio::test]
async fn a_malformed_retry_after_is_ignored_with_a_throttled_warning() {
    static RULES: [Rule; 1] = [Rule::per_second(100)];
    let (logs, _guard) = support::capture_logs();
    let api = FakeApi::start();
    let client = client(on_memory("outbound.malformed", &RULES));
    for _ in 0..3 {
        let response = answer(&client, api.url("/busy?status=429&retry_after=soon")).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    let state = MEMORY
        .inspect("rate_limit:out:outbound.malformed")
        .await
        .unwrap();
    assert!(state.expect("counted").block().is_none());
    let text = logs.text();
    assert_eq!(
        text.matches("ignoring a malformed Retry-After").count(),
        1,
        "{text}"
    );
    assert!(text.contains("soon"), "{text}");
}

// ---------------------------------------------------------------------------------------
// Refusing, waiting, cancelling.

#[tokio::test]
async fn a_zero_wait_refuses_at_once_unsent_with_the_limited_error() {
    static RULES: [Rule; 1] = [Rule::per_minute(1)];
    let api = FakeApi::start();
    let client = client(on_memory("outbound.zero", &RULES).wait(Duration::ZERO));
    assert!(client.get(api.url("/zero")).send().await.is_ok());
    let err = client.get(api.url("/zero")).send().await.unwrap_err();
    match rate_limit_error(&err) {
        Some(RateLimitError::Limited {
            key,
            rule,
            retry_after,
            ..
        }) => {
            assert_eq!(key, "rate_limit:out:outbound.zero");
            assert_eq!(*rule, RULES[0]);
            assert!(*retry_after > Duration::ZERO && *retry_after <= Duration::from_secs(60));
        }
        other => panic!("expected Limited, got {other:?} from {err}"),
    }
    assert_eq!(
        api.arrivals_at("/zero").len(),
        1,
        "the refused request was not sent"
    );
}

#[tokio::test]
async fn a_request_that_cannot_be_admitted_within_its_wait_fails_unsent() {
    static RULES: [Rule; 1] = [Rule::per_hour(1)];
    let api = FakeApi::start();
    let client = client(on_memory("outbound.too_long", &RULES).wait(Duration::from_secs(5)));
    assert!(client.get(api.url("/too-long")).send().await.is_ok());
    let err = client.get(api.url("/too-long")).send().await.unwrap_err();
    assert_limited(&err);
    assert_eq!(api.arrivals_at("/too-long").len(), 1);
}

#[tokio::test]
async fn a_dropped_waiting_request_takes_nothing_on_the_embedded_backend() {
    static RULES: [Rule; 1] = [Rule::new(2, Duration::from_secs(2))];
    let key = "rate_limit:out:outbound.dropped";
    let api = FakeApi::start();
    let client = client(on_memory("outbound.dropped", &RULES).wait(Duration::from_secs(60)));
    for _ in 0..2 {
        client.get(api.url("/dropped")).send().await.unwrap();
    }
    let before = MEMORY.peek(key, &RULES).await.unwrap();
    assert_eq!((before.allowed, before.remaining), (false, 0));
    {
        // The embedded backend answers at the first poll: a request still pending after it
        // is asleep, waiting for room. Then it is dropped.
        let mut waiting = pin!(client.get(api.url("/dropped")).send());
        let first = std::future::poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "the third request waits");
    }
    // Once the window has passed, both units are free: the dropped request took none.
    let freed = MEMORY
        .check(key, &RULES)
        .wait(Duration::from_secs(60))
        .await
        .unwrap();
    assert!(freed.allowed);
    assert_eq!(freed.remaining, 1, "{freed:?}");
    assert_eq!(
        api.arrivals_at("/dropped").len(),
        2,
        "the dropped request was not sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiting_request_takes_nothing_on_redis() {
    static RULES: [Rule; 1] = [Rule::new(1, Duration::from_secs(2))];
    let key = "rate_limit:out:outbound.dropped_redis";
    let (_server, limiter, api, client) = on_redis("outbound.dropped_redis", &RULES, |site| {
        site.wait(Duration::from_secs(60))
    });
    client.get(api.url("/dropped")).send().await.unwrap();
    // The second waits for the window (2 s); dropped well before it could be admitted.
    let waiting = client.get(api.url("/dropped")).send();
    assert!(tokio::time::timeout(Duration::from_millis(200), waiting)
        .await
        .is_err());
    let freed = limiter
        .check(key, &RULES)
        .wait(Duration::from_secs(60))
        .await
        .unwrap();
    assert!(freed.allowed, "{freed:?}");
    assert_eq!(api.arrivals_at("/dropped").len(), 1);
}

#[tokio::test]
async fn a_request_s_cost_takes_that_many_units() {
    static RULES: [Rule; 1] = [Rule::per_minute(5)];
    let api = FakeApi::start();
    let client = client(
        on_memory("outbound.cost", &RULES)
            .wait(Duration::ZERO)
            .cost(|request| request.url().query().map_or(1, |q| q.parse().unwrap())),
    );
    assert!(client.get(api.url("/cost?3")).send().await.is_ok());
    assert!(client.get(api.url("/cost?3")).send().await.is_err());
    assert!(client.get(api.url("/cost?2")).send().await.is_ok());
    // Cost 0: sent unchecked.
    assert!(client.get(api.url("/cost?0")).send().await.is_ok());
    assert_eq!(api.arrivals_at("/cost").len(), 3);
}

#[tokio::test]
async fn per_host_gives_each_host_its_own_budget() {
    static RULES: [Rule; 1] = [Rule::per_minute(1)];
    let api = FakeApi::start();
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], api.port));
    let reqwest_client = reqwest::Client::builder()
        .resolve("acme.api.test", loopback)
        .resolve("globex.api.test", loopback)
        .build()
        .unwrap();
    let client = ClientBuilder::new(reqwest_client)
        .with(
            on_memory("outbound.hosts", &RULES)
                .per_host(true)
                .wait(Duration::ZERO),
        )
        .build();
    let url = |host: &str| format!("http://{host}:{}/hosts", api.port);
    assert!(client.get(url("acme.api.test")).send().await.is_ok());
    assert!(client.get(url("acme.api.test")).send().await.is_err());
    assert!(client.get(url("globex.api.test")).send().await.is_ok());
    let acme = MEMORY
        .peek("rate_limit:out:outbound.hosts:acme.api.test", &RULES)
        .await
        .unwrap();
    assert_eq!(acme.remaining, 0);
    assert_eq!(api.arrivals_at("/hosts").len(), 2);
}

#[tokio::test]
async fn mode_off_sends_every_request_unchecked() {
    static RULES: [Rule; 1] = [Rule::per_minute(1)];
    let limiter = support::leak(Limiter::memory());
    let api = FakeApi::start();
    let client = client(
        RateLimitMiddleware::new("outbound.off", &RULES)
            .limiter(limiter)
            .wait(Duration::ZERO),
    );
    limiter.override_mode("out:outbound.off", Mode::Off);
    for _ in 0..3 {
        assert!(client.get(api.url("/off")).send().await.is_ok());
    }
    assert!(limiter
        .inspect("rate_limit:out:outbound.off")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_stored_in_redis_for_out_name_apply_to_every_client() {
    static RULES: [Rule; 1] = [Rule::per_minute(1)];
    let (server, limiter, api, client) =
        on_redis("outbound.stored", &RULES, |site| site.wait(Duration::ZERO));
    // The first request registers the site, whose overrides the limiter then polls.
    assert!(client.get(api.url("/stored")).send().await.is_ok());
    assert!(client.get(api.url("/stored")).send().await.is_err());
    redis::cmd("HSET")
        .arg("rate_limit:rules")
        .arg("out:outbound.stored")
        .arg("5/minute")
        .exec(&mut server.connection())
        .unwrap();
    let stored = [Rule::per_minute(5)];
    support::until_rules_in_force(
        limiter,
        "out:outbound.stored",
        &stored,
        Duration::from_secs(30),
    )
    .await;
    for _ in 0..4 {
        assert!(client.get(api.url("/stored")).send().await.is_ok());
    }
    assert!(client.get(api.url("/stored")).send().await.is_err());
    assert_eq!(api.arrivals_at("/stored").len(), 5);
}

/// With an allowance, requests are admitted in process from what the client drew: a few
/// round trips for many requests, and once it is released the key counts what was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_allowance_requests_are_admitted_in_process_and_counted_exactly() {
    static RULES: [Rule; 1] = [Rule::per_hour(100_000)];
    let (_server, limiter, api, client) = on_redis("outbound.allowance", &RULES, |site| {
        site.allowance(Duration::from_secs(5))
    });
    for _ in 0..100 {
        assert!(client.get(api.url("/allowance")).send().await.is_ok());
    }
    // The key's first two checks alone (cold), the one that tells its room, then draws.
    let round_trips = limiter.allowance_draws();
    assert!(
        round_trips <= 6,
        "{round_trips} round trips for 100 requests"
    );
    limiter.release_allowances().await.unwrap();
    let peek = limiter
        .peek("rate_limit:out:outbound.allowance", &RULES)
        .await
        .unwrap();
    assert_eq!(peek.remaining, 100_000 - 100);
    assert_eq!(api.arrivals_at("/allowance").len(), 100);
}

// ---------------------------------------------------------------------------------------
// Redis down.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_fail_open_sends_and_fail_closed_fails_unsent() {
    static RULES: [Rule; 1] = [Rule::per_minute(1)];
    let mut server = RedisServer::start();
    let url = server.url();
    let open = support::leak(
        Limiter::redis(&url)
            .unwrap()
            .timeout(Duration::from_millis(500)),
    );
    let closed = support::leak(
        Limiter::redis(&url)
            .unwrap()
            .timeout(Duration::from_millis(500))
            .fail_open(false),
    );
    let insured = support::leak(
        Limiter::redis(&url)
            .unwrap()
            .timeout(Duration::from_millis(500))
            .fail_open(false)
            .fallback(Limiter::memory()),
    );
    server.kill();
    let api = FakeApi::start();
    let through = |limiter: &'static Limiter, name: &'static str| {
        client(
            RateLimitMiddleware::new(name, &RULES)
                .limiter(limiter)
                .wait(Duration::ZERO),
        )
    };

    // Fail-open: sent, each time (nothing counts them).
    let open_client = through(open, "outbound.down_open");
    for _ in 0..2 {
        let response = open_client.get(api.url("/open")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(api.arrivals_at("/open").len(), 2);

    // Fail-closed: refused unsent, saying the backend failed.
    let err = through(closed, "outbound.down_closed")
        .get(api.url("/closed"))
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(rate_limit_error(&err), Some(RateLimitError::Backend(_))),
        "{err}"
    );
    assert!(api.arrivals_at("/closed").is_empty());

    // A fallback counts instead.
    let insured_client = through(insured, "outbound.down_insured");
    assert!(insured_client.get(api.url("/insured")).send().await.is_ok());
    let err = insured_client
        .get(api.url("/insured"))
        .send()
        .await
        .unwrap_err();
    assert_limited(&err);
    assert_eq!(api.arrivals_at("/insured").len(), 1);
}

// ---------------------------------------------------------------------------------------
// Tracing and the request being served.

#[tokio::test]
async fn an_outbound_check_is_traced_as_the_site_out_name() {
    static RULES: [Rule; 1] = [Rule::per_minute(1)];
    let (logs, _guard) =
        support::capture_logs_up_to(tracing_subscriber::filter::LevelFilter::DEBUG);
    let api = FakeApi::start();
    let client = client(on_memory("outbound.traced", &RULES).wait(Duration::ZERO));
    client.get(api.url("/traced")).send().await.unwrap();
    client.get(api.url("/traced")).send().await.unwrap_err();
    let text = logs.text();
    assert!(
        text.contains("ratelimit.check") && text.contains("site=\"out:outbound.traced\""),
        "{text}"
    );
}

#[cfg(feature = "metrics")]
#[test]
fn an_outbound_check_is_counted_as_the_site_out_name() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    static RULES: [Rule; 1] = [Rule::per_minute(1)];
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let api = FakeApi::start();
            let client = client(on_memory("outbound.metered", &RULES).wait(Duration::ZERO));
            client.get(api.url("/metered")).send().await.unwrap();
            client.get(api.url("/metered")).send().await.unwrap_err();
        });
    });
    let mut counted = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if let ("ratelimit_checks_total", DebugValue::Counter(n)) = (key.name(), value) {
            let label = |name: &str| {
                key.labels()
                    .find(|l| l.key() == name)
                    .map(|l| l.value().to_owned())
            };
            counted.push((label("site"), label("outcome"), n));
        }
    }
    counted.sort();
    let site = Some("out:outbound.metered".to_owned());
    assert_eq!(
        counted,
        [
            (site.clone(), Some("allowed".to_owned()), 1),
            (site, Some("limited".to_owned()), 1)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbound_decision_never_reaches_the_served_request_s_headers() {
    use redis_ratelimit::axum::RateLimitLayer;

    static RULES: [Rule; 1] = [Rule::per_minute(10)];
    let api = FakeApi::start();
    let outbound = client(on_memory("outbound.inside", &RULES));
    let inner = api.url("/inside");
    let handler = move || {
        let (outbound, inner) = (outbound.clone(), inner.clone());
        async move {
            outbound
                .get(&inner)
                .send()
                .await
                .unwrap()
                .status()
                .to_string()
        }
    };
    let app = axum::Router::new()
        .route("/outer", axum::routing::get(handler))
        .layer(RateLimitLayer::new());
    let served = support::http::serve_axum(app, "127.0.0.1");
    let response = reqwest::get(format!("{}/outer", served.base))
        .await
        .unwrap();
    assert!(response.status().is_success());
    for field in ["ratelimit", "ratelimit-policy", "retry-after"] {
        assert!(
            response.headers().get(field).is_none(),
            "{field}: {response:?}"
        );
    }
    assert_eq!(response.text().await.unwrap(), "200 OK");
    // It was checked and counted all the same.
    let d = MEMORY
        .peek("rate_limit:out:outbound.inside", &RULES)
        .await
        .unwrap();
    assert_eq!(d.remaining, 9);
}
