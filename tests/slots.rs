//! Calls in flight: `concurrency = N` in the attribute and `Limiter::acquire`, written once
//! and run on both backends (a real `redis-server` and the embedded memory backend), plus
//! a holder process that dies, a Cluster, and one `static` limiter shared by several
//! `#[tokio::test]`s.
//!
//! Rendezvous are barriers and channels inside the bodies, never sleeps; what is asserted
//! is the number of slots held (`Limiter::slots_in_use`), not how long anything took.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis_ratelimit::{rate_limiter, Limiter, RateLimitError, Rule, Slot};
use support::{ChildTest, RedisServer};
use tokio::sync::{oneshot, Barrier, Semaphore};

/// How long a handshake, or a slot's release in the background, may take before a test
/// gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// Where a call holds, once it is running: it says so on `entered`, then waits until
/// `leave` lets it go.
#[derive(Clone)]
struct Hold {
    entered: Arc<Barrier>,
    leave: Arc<Semaphore>,
}

impl Hold {
    /// For `calls` calls and the test itself.
    fn new(calls: usize) -> Hold {
        Hold {
            entered: Arc::new(Barrier::new(calls + 1)),
            leave: Arc::new(Semaphore::new(0)),
        }
    }

    async fn inside(&self) {
        self.entered.wait().await;
        self.leave.acquire().await.unwrap().forget();
    }

    /// Waits until every call is inside its body.
    async fn all_entered(&self) {
        tokio::time::timeout(GIVE_UP_AFTER, self.entered.wait())
            .await
            .expect("every call entered its body");
    }

    fn let_go(&self, calls: usize) {
        self.leave.add_permits(calls);
    }
}

/// Sites whose calls stay inside their body until their `Hold` lets them go: each
/// `name(policies)` is a guarded `async fn name(limiter, who, hold)` with those policies.
macro_rules! held_sites {
    ($($name:ident($($policy:tt)*);)*) => {$(
        #[rate_limiter($($policy)*, limit_type = CUSTOM, by = who, limiter = limiter)]
        async fn $name(
            limiter: &'static Limiter,
            who: &'static str,
            hold: Hold,
        ) -> Result<(), RateLimitError> {
            hold.inside().await;
            Ok(())
        }
    )*};
}

held_sites! {
    one_at_a_time(rules("5/minute"), concurrency = 1, name = "slots.one");
    three_at_once(rules("1000/minute"), concurrency = 3, lease = "10s", name = "slots.three");
    waits_its_turn(rules("1000/minute"), concurrency = 1, wait = "30s", name = "slots.waiting");
}

#[rate_limiter(rules("1/minute"), concurrency = 5, limit_type = CUSTOM, by = who, limiter = limiter, name = "slots.rare")]
async fn once_a_minute(limiter: &'static Limiter, who: &'static str) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("1000/minute"), concurrency = 2, limit_type = CUSTOM, by = who, limiter = limiter, name = "slots.panics")]
async fn panics_inside(
    limiter: &'static Limiter,
    who: &'static str,
    hold: Hold,
) -> Result<(), RateLimitError> {
    hold.inside().await;
    panic!("the body failed");
}

/// The key a site named `name` counts `who` under.
fn key(name: &str, who: &str) -> String {
    format!("rate_limit:custom:{who}:{name}")
}

/// Waits until `key` holds `expected` slots: a slot dropped with its call is released by
/// a task of its own, a moment later.
async fn until_slots(limiter: &Limiter, key: &str, expected: u64) {
    support::eventually("the slots to be released", GIVE_UP_AFTER, || async {
        match limiter.slots_in_use(key).await.unwrap() {
            n if n == expected => Ok(()),
            n => Err(format!("{n} slots held, expecting {expected}")),
        }
    })
    .await;
}

/// Starts `n` calls made by `call`, and waits until every one is inside its body, holding
/// its slot until the hold lets it go.
async fn all_inside<F>(
    n: usize,
    call: impl Fn(Hold) -> F,
) -> (Hold, Vec<tokio::task::JoinHandle<F::Output>>)
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let hold = Hold::new(n);
    let calls = (0..n).map(|_| tokio::spawn(call(hold.clone()))).collect();
    hold.all_entered().await;
    (hold, calls)
}

/// As [`all_inside`], for `n` calls of `site` by `who`; then asserts that they hold `n`
/// slots of the site, named `name`.
async fn all_holding<F>(
    limiter: &'static Limiter,
    (name, who): (&str, &'static str),
    n: usize,
    site: fn(&'static Limiter, &'static str, Hold) -> F,
) -> (Hold, Vec<tokio::task::JoinHandle<F::Output>>)
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let inside = all_inside(n, |hold| site(limiter, who, hold)).await;
    assert_eq!(slots_held(limiter, name, who).await, n as u64);
    inside
}

/// Lets the calls `hold` holds return, and asserts that each one returned `Ok`.
async fn all_return_ok(
    hold: Hold,
    calls: Vec<tokio::task::JoinHandle<Result<(), RateLimitError>>>,
) {
    hold.let_go(calls.len());
    for call in calls {
        call.await.unwrap().unwrap();
    }
}

/// The slot `acquired` took; panics, saying `why` one was expected, when none was free.
fn taken<E: std::fmt::Debug>(acquired: Result<Option<Slot>, E>, why: &str) -> Slot {
    acquired.unwrap().expect(why)
}

/// Asserts that the one slot of `key`, which lapsed, can be taken again and released.
async fn take_the_lapsed_slot(limiter: &Limiter, key: &str) {
    let slot = taken(limiter.acquire(key, 1).await, "the lapsed slot is free");
    slot.release().await.unwrap();
}

/// How many slots `who` holds at the site named `name`.
async fn slots_held(limiter: &Limiter, name: &str, who: &str) -> u64 {
    limiter.slots_in_use(&key(name, who)).await.unwrap()
}

fn refused(result: Result<(), RateLimitError>) -> (Rule, Duration) {
    match result {
        Err(RateLimitError::Limited {
            rule, retry_after, ..
        }) => (rule, retry_after),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

backend_tests! {
    async fn a_full_set_of_slots_takes_no_units() {
        let limiter = support::limiter();
        let who = "full";
        let (hold, mut calls) = all_holding(limiter, ("slots.one", who), 1, one_at_a_time).await;
        let first = calls.remove(0);

        // Refused by the concurrency limit, which its error names with the short hint.
        let (rule, retry_after) = refused(one_at_a_time(limiter, who, Hold::new(0)).await);
        assert_eq!(rule.count(), 1);
        assert_eq!(retry_after, Slot::RETRY_HINT);
        // Only the running call's unit is counted.
        let d = limiter.peek(&key("slots.one", who), &[Rule::per_minute(5)]).await.unwrap();
        assert_eq!(d.remaining, 4);

        hold.let_go(1);
        first.await.unwrap().unwrap();
        assert_eq!(slots_held(limiter, "slots.one", who).await, 0);
    }

    async fn a_refusal_by_a_rule_takes_no_slot() {
        let limiter = support::limiter();
        let who = "rare";
        once_a_minute(limiter, who).await.unwrap();
        let (rule, _) = refused(once_a_minute(limiter, who).await);
        assert_eq!(rule, Rule::per_minute(1));
        // A slot taken by the refused call would never be released: none is held.
        assert_eq!(slots_held(limiter, "slots.rare", who).await, 0);
    }

    async fn n_concurrent_guarded_calls_hold_exactly_n_slots_and_release_them_on_completion() {
        let limiter = support::limiter();
        let who = "three";
        let (hold, calls) = all_holding(limiter, ("slots.three", who), 3, three_at_once).await;
        refused(three_at_once(limiter, who, Hold::new(0)).await);
        assert_eq!(slots_held(limiter, "slots.three", who).await, 3);

        all_return_ok(hold, calls).await;
        // Released as each call returned, before it did.
        assert_eq!(slots_held(limiter, "slots.three", who).await, 0);
    }

    async fn a_cancelled_call_releases_its_slot() {
        let limiter = support::limiter();
        let who = "cancelled";
        let (_, calls) = all_holding(limiter, ("slots.one", who), 1, one_at_a_time).await;
        // The call's future is dropped mid-body, as when a client goes away.
        calls[0].abort();
        for call in calls {
            assert!(call.await.unwrap_err().is_cancelled());
        }
        until_slots(limiter, &key("slots.one", who), 0).await;
        let (hold, next) = all_inside(1, |hold| one_at_a_time(limiter, who, hold)).await;
        all_return_ok(hold, next).await;
    }

    async fn a_call_that_panics_releases_its_slot() {
        let limiter = support::limiter();
        let who = "panics";
        let (hold, calls) = all_holding(limiter, ("slots.panics", who), 2, panics_inside).await;
        hold.let_go(2);
        for call in calls {
            assert!(call.await.unwrap_err().is_panic());
        }
        until_slots(limiter, &key("slots.panics", who), 0).await;
    }

    async fn a_waiting_call_gets_a_slot_when_one_frees() {
        let limiter = support::limiter();
        let who = "waiting";
        let first = Hold::new(1);
        let running = tokio::spawn(waits_its_turn(limiter, who, first.clone()));
        first.all_entered().await;
        // The second call finds the one slot taken and waits for it.
        let second = Hold::new(1);
        let waiting = tokio::spawn(waits_its_turn(limiter, who, second.clone()));
        first.let_go(1);
        running.await.unwrap().unwrap();
        second.all_entered().await;
        assert_eq!(slots_held(limiter, "slots.waiting", who).await, 1);
        second.let_go(1);
        waiting.await.unwrap().unwrap();
    }

    async fn acquire_hands_out_max_slots_and_release_frees_one() {
        let limiter = support::limiter();
        let key = "slots:acquire";
        let a = limiter.acquire(key, 2).await.unwrap().expect("a free slot");
        let b = limiter.acquire(key, 2).lease(Duration::from_secs(5)).await.unwrap().expect("a second");
        assert_eq!((a.key(), b.lease()), (key, Duration::from_secs(5)));
        assert!(limiter.acquire(key, 2).await.unwrap().is_none(), "every slot is taken");
        assert_eq!(limiter.slots_in_use(key).await.unwrap(), 2);
        a.release().await.unwrap();
        assert_eq!(limiter.slots_in_use(key).await.unwrap(), 1);
        let c = limiter.acquire(key, 2).await.unwrap().expect("the freed slot");
        drop(b);
        until_slots(limiter, key, 1).await;
        c.release().await.unwrap();
        assert_eq!(limiter.slots_in_use(key).await.unwrap(), 0);
    }

    async fn acquire_with_wait_gets_the_slot_released_meanwhile() {
        let limiter = support::limiter();
        let key = "slots:acquire-wait";
        let held = limiter.acquire(key, 1).await.unwrap().expect("a free slot");
        assert!(limiter.acquire(key, 1).await.unwrap().is_none());
        let (started, start) = oneshot::channel();
        let waiter = tokio::spawn(async move {
            started.send(()).unwrap();
            limiter.acquire(key, 1).wait(GIVE_UP_AFTER).await
        });
        start.await.unwrap();
        held.release().await.unwrap();
        let slot = waiter.await.unwrap().unwrap().expect("the slot, once released");
        assert_eq!(limiter.slots_in_use(key).await.unwrap(), 1);
        slot.release().await.unwrap();
    }

    async fn a_streamed_axum_answer_holds_its_guard_s_slot_until_its_body_ends() {
        use redis_ratelimit::{axum::RateLimitLayer, Guard};
        let limiter = support::limiter();
        let (chunks, receiver) = tokio::sync::mpsc::channel(4);
        let receiver = Arc::new(std::sync::Mutex::new(Some(receiver)));
        let handler = move || {
            let receiver = receiver.lock().unwrap().take();
            async move {
                match receiver {
                    Some(receiver) => axum::body::Body::new(Streamed(receiver)),
                    None => axum::body::Body::from("short"),
                }
            }
        };
        let guard = Guard::new("slots.stream", &STREAM_RULES).concurrency(1).limiter(limiter);
        let app = axum::Router::new()
            .route("/complete", axum::routing::get(handler))
            .layer(RateLimitLayer::new().guard(guard));
        let served = support::http::serve_axum(app, "127.0.0.1");
        let client = support::http::client_from("127.0.0.1");
        let url = format!("{}/complete", served.base);
        let key = "rate_limit:ip:127.0.0.1:slots.stream";

        let mut streaming = client.get(&url).send().await.unwrap();
        assert_eq!(streaming.status(), 200);
        chunks.send(axum::body::Bytes::from("first ")).await.unwrap();
        assert_eq!(streaming.chunk().await.unwrap().unwrap(), "first ");
        // The answer is being streamed: its slot is held.
        assert_eq!(limiter.slots_in_use(key).await.unwrap(), 1);
        let refused = client.get(&url).send().await.unwrap();
        assert_eq!(refused.status(), 429);
        let policy = support::http::header(&refused, "ratelimit-policy").unwrap().to_owned();
        assert_eq!(policy, r#""p1";q=1000;w=60, "conc";q=1;qu="concurrent-requests""#);
        // Draft 11: a policy on calls in flight has no effective window.
        assert_eq!(support::http::header(&refused, "ratelimit"), Some(r#""conc";r=0"#));
        assert_eq!(support::http::header(&refused, "retry-after"), Some("1"));
        let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
        assert_eq!(body["violated-policies"], serde_json::json!(["conc"]));
        assert_eq!(
            body["detail"],
            "1 request of this caller already in flight; retry when one of them completes"
        );

        // The body ends: the slot is released.
        chunks.send(axum::body::Bytes::from("last")).await.unwrap();
        drop(chunks);
        assert_eq!(streaming.text().await.unwrap(), "last");
        until_slots(limiter, key, 0).await;
        let next = client.get(&url).send().await.unwrap();
        assert_eq!(next.status(), 200);
        assert_eq!(next.text().await.unwrap(), "short");
        until_slots(limiter, key, 0).await;
    }

    async fn a_streamed_actix_answer_holds_its_guard_s_slot_until_its_body_ends() {
        use actix_web::{web, App, HttpResponse};
        use redis_ratelimit::{actix::RateLimit, Guard};
        let limiter = support::limiter();
        let (chunks, receiver) = tokio::sync::mpsc::unbounded_channel();
        let receiver = Arc::new(std::sync::Mutex::new(Some(receiver)));
        let guard = Guard::new("slots.actix", &STREAM_RULES).concurrency(1).limiter(limiter);
        let rate_limit = RateLimit::new().guard(guard);
        let served = support::http::serve_actix("127.0.0.1", 1, move || {
            let receiver = Arc::clone(&receiver);
            App::new().wrap(rate_limit.clone()).route(
                "/complete",
                web::get().to(move || {
                    let receiver = receiver.lock().unwrap().take();
                    async move {
                        match receiver {
                            Some(receiver) => HttpResponse::Ok().body(ActixStreamed(receiver)),
                            None => HttpResponse::Ok().body("short"),
                        }
                    }
                }),
            )
        });
        let client = support::http::client_from("127.0.0.1");
        let url = format!("{}/complete", served.base);
        let key = "rate_limit:ip:127.0.0.1:slots.actix";

        let mut streaming = client.get(&url).send().await.unwrap();
        assert_eq!(streaming.status(), 200);
        chunks.send(actix_web::web::Bytes::from("first ")).unwrap();
        assert_eq!(streaming.chunk().await.unwrap().unwrap(), "first ");
        assert_eq!(limiter.slots_in_use(key).await.unwrap(), 1);
        let refused = client.get(&url).send().await.unwrap();
        assert_eq!(refused.status(), 429);
        assert_eq!(
            support::http::header(&refused, "ratelimit-policy"),
            Some(r#""p1";q=1000;w=60, "conc";q=1;qu="concurrent-requests""#)
        );

        chunks.send(actix_web::web::Bytes::from("last")).unwrap();
        drop(chunks);
        assert_eq!(streaming.text().await.unwrap(), "last");
        until_slots(limiter, key, 0).await;
        let next = client.get(&url).send().await.unwrap();
        assert_eq!(next.text().await.unwrap(), "short");
    }

    async fn reset_frees_every_slot_of_the_key() {
        let limiter = support::limiter();
        let key = "slots:reset";
        let slot = limiter.acquire(key, 1).await.unwrap().expect("a free slot");
        limiter.reset(key).await.unwrap();
        assert_eq!(limiter.slots_in_use(key).await.unwrap(), 0);
        let again = limiter.acquire(key, 1).await.unwrap().expect("free after the reset");
        // Releasing the slot the reset freed frees nothing else.
        slot.release().await.unwrap();
        assert_eq!(limiter.slots_in_use(key).await.unwrap(), 1);
        again.release().await.unwrap();
    }
}

const URL_ENV: &str = support::CHILD_URL_ENV;
const KEY_ENV: &str = "RATELIMIT_CHILD_KEY";
const LEASE: Duration = Duration::from_secs(1);

/// A response body streamed from a channel: it ends when the sender is dropped.
struct Streamed(tokio::sync::mpsc::Receiver<axum::body::Bytes>);

impl http_body::Body for Streamed {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|chunk| Ok(http_body::Frame::data(chunk))))
    }
}

/// An actix-web response body streamed from a channel.
struct ActixStreamed(tokio::sync::mpsc::UnboundedReceiver<actix_web::web::Bytes>);

impl actix_web::body::MessageBody for ActixStreamed {
    type Error = std::convert::Infallible;

    fn size(&self) -> actix_web::body::BodySize {
        actix_web::body::BodySize::Stream
    }

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<actix_web::web::Bytes, Self::Error>>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(Ok))
    }
}

static STREAM_RULES: [Rule; 1] = [Rule::per_minute(1000)];

/// The end of the lease of the one slot of `key` (on a single server), µs.
fn lease_end(server: &RedisServer, key: &str) -> u64 {
    let held: Vec<(Vec<u8>, u64)> = redis::cmd("ZRANGE")
        .arg(format!("{{{key}}}:slots"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(held.len(), 1, "one slot of {key}");
    held[0].1
}

/// A slot is renewed while its holder runs, past its lease; when the holder's process
/// dies without releasing it, it lapses, and is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_slot_is_renewed_and_lapses_after_its_process_dies() {
    let server = RedisServer::start();
    let limiter = support::counting_limiter(&server.url());
    let key = "slots:crashed";
    let mut child = ChildTest::spawn(
        &["child_takes_a_slot_and_dies", "--exact"],
        &[(URL_ENV, server.url()), (KEY_ENV, key.to_owned())],
    );
    child.wait_for("held");
    assert_eq!(limiter.slots_in_use(key).await.unwrap(), 1);
    // Renewed: the end of its lease moves on while the holder lives.
    let first = lease_end(&server, key);
    support::eventually("the slot to be renewed", GIVE_UP_AFTER, || async {
        match lease_end(&server, key) {
            end if end > first => Ok(()),
            end => Err(format!("the lease still ends at {end}")),
        }
    })
    .await;
    assert!(
        limiter.acquire(key, 1).await.unwrap().is_none(),
        "held by the child"
    );
    // The child dies holding it: nothing releases it, nothing renews it.
    child.send("die");
    assert_eq!(child.finish("dying"), "");
    until_slots(&limiter, key, 0).await;
    take_the_lapsed_slot(&limiter, key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child of a_held_slot_is_renewed_and_lapses_after_its_process_dies"]
async fn child_takes_a_slot_and_dies() {
    let limiter = support::counting_limiter(&support::from_parent(URL_ENV));
    let key = support::from_parent(KEY_ENV);
    let slot = taken(limiter.acquire(&key, 1).lease(LEASE).await, "a free slot");
    support::tell_parent_then_await("held", "die").await;
    println!("dying");
    // Dies as a crashed process would: no release, no destructor.
    std::mem::forget(slot);
    std::process::exit(0);
}

/// On a Cluster the key's slots live beside its rules: one node, one script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_slots_live_on_the_node_of_their_key() {
    use support::Topology;
    let cluster = support::cluster::RedisCluster::start();
    let limiter = support::leak(support::counting_limiter(&cluster.url()));
    for who in ["alice", "bob", "carol", "dave", "erin"] {
        let key = key("slots.three", who);
        assert_eq!(
            cluster.master_of(&key),
            cluster.master_of(&slots_key_of(&key)),
            "{key}"
        );
        let hold = Hold::new(1);
        let call = tokio::spawn(three_at_once(limiter, who, hold.clone()));
        hold.all_entered().await;
        let held: u64 = redis::cmd("ZCARD")
            .arg(slots_key_of(&key))
            .query(&mut cluster.connection(cluster.master_of(&key)))
            .unwrap();
        assert_eq!(held, 1, "{key}");
        hold.let_go(1);
        call.await.unwrap().unwrap();
        assert_eq!(limiter.slots_in_use(&key).await.unwrap(), 0);
    }
    // A programmatic key with a hash tag of its own keeps it.
    let tagged = "{acme}:exports";
    let slot = taken(limiter.acquire(tagged, 1).await, "a free slot");
    let held: u64 = redis::cmd("ZCARD")
        .arg("{acme}:exports:slots")
        .query(&mut cluster.connection(cluster.master_of(tagged)))
        .unwrap();
    assert_eq!(held, 1);
    slot.release().await.unwrap();
}

/// The slots key of a key built by the attribute (identities are percent-encoded, so it
/// has no hash tag).
fn slots_key_of(key: &str) -> String {
    format!("{{{key}}}:slots")
}

/// The shape users write: several `#[tokio::test]`s on runtimes of their own share one
/// `static` limiter, each holding slots of one shared key. Run in one process, as
/// `cargo test` runs them (nextest gives each test a process).
#[test]
fn tokio_tests_in_parallel_share_the_slots_of_one_static_limiter() {
    let child = ChildTest::spawn(&["a_tokio_test_holds_", "--test-threads", "3"], &[]);
    let result = child.finish("test result:");
    assert!(result.starts_with("ok. 3 passed"), "{result}");
}

static SHARED: LazyLock<Limiter> =
    LazyLock::new(|| support::counting_limiter(support::process_server_url()));

/// Each test takes one of 3 slots of one key and holds it until all three hold theirs:
/// together they hold exactly 3, and a fourth is refused.
async fn a_test_holds_one_of_three() {
    static HOLDING: AtomicUsize = AtomicUsize::new(0);
    let key = "slots:static";
    let slot = taken(SHARED.acquire(key, 3).await, "one of 3 slots");
    HOLDING.fetch_add(1, Ordering::SeqCst);
    support::until_counted("every test to hold its slot", GIVE_UP_AFTER, 3, || {
        HOLDING.load(Ordering::SeqCst)
    })
    .await;
    assert_eq!(SHARED.slots_in_use(key).await.unwrap(), 3);
    assert!(SHARED.acquire(key, 3).await.unwrap().is_none());
    // Every test has seen all three before any lets go.
    static CHECKED: AtomicUsize = AtomicUsize::new(0);
    CHECKED.fetch_add(1, Ordering::SeqCst);
    support::until_counted("every test to have checked", GIVE_UP_AFTER, 3, || {
        CHECKED.load(Ordering::SeqCst)
    })
    .await;
    // Released before this test's runtime ends: a slot dropped after it would lapse.
    slot.release().await.unwrap();
}

#[tokio::test]
#[ignore = "run in one process by tokio_tests_in_parallel_share_the_slots_of_one_static_limiter"]
async fn a_tokio_test_holds_a_slot_on_a_current_thread_runtime() {
    a_test_holds_one_of_three().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in one process by tokio_tests_in_parallel_share_the_slots_of_one_static_limiter"]
async fn a_tokio_test_holds_a_slot_on_a_multi_thread_runtime() {
    a_test_holds_one_of_three().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[ignore = "run in one process by tokio_tests_in_parallel_share_the_slots_of_one_static_limiter"]
async fn a_tokio_test_holds_a_slot_on_a_single_worker_runtime() {
    a_test_holds_one_of_three().await;
}

/// The embedded backend's slots lapse by its clock, as Redis's do by `TIME`.
#[tokio::test]
async fn in_memory_a_forgotten_slot_lapses_by_the_backend_s_clock() {
    use redis_ratelimit::clock::ManualClock;
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let limiter = Limiter::memory_with_clock(clock.clone());
    let key = "slots:memory-lapse";
    // A lease long enough that its renewal (every third of it, in real time) never comes.
    let slot = taken(
        limiter
            .acquire(key, 1)
            .lease(Duration::from_secs(1000))
            .await,
        "a free slot",
    );
    // Its holder stops without releasing it.
    std::mem::forget(slot);
    clock.advance(Duration::from_secs(999));
    assert_eq!(limiter.slots_in_use(key).await.unwrap(), 1);
    assert!(limiter.acquire(key, 1).await.unwrap().is_none());
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.slots_in_use(key).await.unwrap(), 0);
    take_the_lapsed_slot(&limiter, key).await;
}
