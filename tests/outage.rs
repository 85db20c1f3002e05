//! What an outage costs: the circuit breaker (a dead or black-holed Redis fails checks in
//! microseconds), the insurance fallback (checks are counted in memory while Redis is away)
//! and the deny cache (a flood on one denied key never reaches Redis). Real servers only.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_ratelimit::{BackendErrorKind, Breaker, Limiter, Rule};
use support::RedisServer;

/// For checks meant to time out: they wait this long each.
const TIMEOUT: Duration = Duration::from_millis(100);
/// For checks that must be answered on a loaded machine, yet may time out a few times.
const PATIENT: Duration = Duration::from_secs(1);
const FIVE_PER_MINUTE: [Rule; 1] = [Rule::new(5, Duration::from_secs(60))];

/// A TCP server on loopback that accepts connections and never answers, as a host whose
/// Redis hangs (or a firewall that drops replies) looks to a client. Stops with the test.
fn black_hole() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten().take(64) {
            let mut reader = stream.try_clone().expect("clone the stream");
            // Read and drop whatever arrives, so the client's writes never block.
            std::thread::spawn(move || {
                let mut sink = [0u8; 4096];
                while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
            });
            held.push(stream);
        }
    });
    format!("redis://127.0.0.1:{port}/")
}

/// A TCP proxy on loopback to the Redis on `port`, whose connections can be frozen: a
/// frozen connection stays open but passes nothing on, as a half-open connection (a peer
/// that vanished, a dropped route) looks to a client. Connections made after a freeze work.
/// Returns the proxy's URL and the freeze counter: add one to freeze.
fn freezing_proxy(port: u16) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let url = format!(
        "redis://127.0.0.1:{}/",
        listener.local_addr().unwrap().port()
    );
    let freezes = Arc::new(AtomicU64::new(0));
    let counter = freezes.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten().take(64) {
            let born = freezes.load(Ordering::SeqCst);
            let server = TcpStream::connect(("127.0.0.1", port)).expect("reach redis-server");
            let directions = [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server, client),
            ];
            for (mut from, mut to) in directions {
                let freezes = freezes.clone();
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 4096];
                    while let Ok(n @ 1..) = from.read(&mut buffer) {
                        let live = freezes.load(Ordering::SeqCst) == born;
                        if live && to.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        }
    });
    (url, counter)
}

fn evalsha_calls(server: &RedisServer) -> u64 {
    support::command_calls(&mut server.connection(), "evalsha")
}

#[tokio::test]
async fn a_black_holed_redis_costs_microseconds_once_the_breaker_opens() {
    let limiter = Limiter::redis(&black_hole()).unwrap().timeout(TIMEOUT);
    let (mut sent, mut refused, mut refusing) = (0, 0, Duration::ZERO);
    let start = Instant::now();
    for _ in 0..300 {
        let started = Instant::now();
        let err = limiter.check("k", &FIVE_PER_MINUTE).await.unwrap_err();
        if err.to_string().contains("circuit breaker open") {
            assert_eq!(err.kind(), BackendErrorKind::Unavailable, "{err}");
            refusing += started.elapsed();
            refused += 1;
        } else {
            assert_eq!(err.kind(), BackendErrorKind::Timeout, "{err}");
            sent += 1;
        }
    }
    // Without the breaker every check waits for the timeout. With it, only the 3 that open
    // it, then one probe per cool-down, however slow the machine.
    let cool_downs = start.elapsed().as_millis() / Breaker::DEFAULT.cool_down().as_millis();
    assert!(
        sent <= 3 + 1 + cool_downs,
        "{sent} checks waited for Redis over {cool_downs} cool-downs"
    );
    // The others cost microseconds: on average, far under a millisecond.
    let each = refusing / refused;
    assert!(
        each < Duration::from_millis(1),
        "{refused} refusals took {each:?} each"
    );
}

#[tokio::test]
async fn a_connection_that_stops_answering_is_made_anew_after_three_timeouts() {
    let server = RedisServer::start();
    let (url, freezes) = freezing_proxy(server.port());
    let limiter = Limiter::redis(&url)
        .unwrap()
        .timeout(PATIENT)
        .breaker(Breaker::never());
    const MANY: [Rule; 1] = [Rule::new(1000, Duration::from_secs(60))];
    // Both of this runtime's connections are made and work.
    for _ in 0..4 {
        assert!(limiter.check("k", &MANY).await.unwrap().allowed);
    }
    freezes.fetch_add(1, Ordering::SeqCst);
    // Each connection is given up after its third unanswered call: at most six checks
    // time out, then checks are answered on new connections.
    let mut timeouts = 0;
    let decision = loop {
        match limiter.check("k", &MANY).await {
            Ok(decision) => break decision,
            Err(err) => {
                assert_eq!(err.kind(), BackendErrorKind::Timeout, "{err}");
                timeouts += 1;
                assert!(timeouts <= 6, "still timing out after {timeouts} checks");
            }
        }
    };
    assert!(decision.allowed);
    assert!(timeouts >= 1);
}

#[tokio::test]
async fn a_password_refused_at_connect_is_tried_again_at_the_next_check() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    support::require_password(&mut admin, "old-secret");
    let url = format!("redis://:new-secret@127.0.0.1:{}/", server.port());
    let limiter = support::redis_limiter(&url).breaker(Breaker::never());
    let err = limiter.check("k", &FIVE_PER_MINUTE).await.unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Misconfigured, "{err}");
    assert!(err.to_string().contains("password"), "{err}");
    assert!(!err.to_string().contains("new-secret"), "{err}");

    // The operator fixes the password: no restart needed.
    support::require_password(&mut admin, "new-secret");
    assert!(limiter.check("k", &FIVE_PER_MINUTE).await.unwrap().allowed);
}

#[tokio::test]
async fn checks_reach_redis_again_one_cool_down_after_it_hung() {
    let server = RedisServer::start();
    // Long next to the gap between two checks, however loaded the machine.
    let cool_down = Duration::from_secs(2);
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .timeout(PATIENT)
        .breaker(Breaker::new(3, cool_down));
    limiter.check("k", &FIVE_PER_MINUTE).await.unwrap();

    server.freeze();
    // Three timeouts open the breaker; then checks fail at once, without reaching Redis.
    for _ in 0..3 {
        let err = limiter.check("k", &FIVE_PER_MINUTE).await.unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Timeout, "{err}");
    }
    let err = limiter.check("k", &FIVE_PER_MINUTE).await.unwrap_err();
    assert!(err.to_string().contains("circuit breaker open"), "{err}");

    // Once Redis answers again, the first check after the cool-down is let through.
    server.thaw();
    tokio::time::sleep(cool_down).await;
    assert!(limiter.check("k", &FIVE_PER_MINUTE).await.unwrap().allowed);
}

#[tokio::test]
async fn the_fallback_counts_exactly_while_redis_is_gone_and_hands_back() {
    let mut server = RedisServer::start();
    let limiter = support::counting_limiter(&server.url()).fallback(Limiter::memory());
    assert!(limiter.check("k", &FIVE_PER_MINUTE).await.unwrap().allowed);

    server.kill();
    // The fallback knows nothing of the call counted in Redis: five more pass, then none.
    let mut allowed = 0;
    for _ in 0..20 {
        let d = limiter
            .check("k", &FIVE_PER_MINUTE)
            .await
            .expect("no error with a fallback");
        allowed += u64::from(d.allowed);
    }
    assert_eq!(allowed, 5);
    // Costs are counted there too, all or nothing.
    let d = limiter.check("w", &FIVE_PER_MINUTE).cost(4).await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 1));
    assert!(
        !limiter
            .check("w", &FIVE_PER_MINUTE)
            .cost(2)
            .await
            .unwrap()
            .allowed
    );

    // Back on Redis (an empty one) with the first check the breaker lets through: every
    // failure above came before the restart, so one cool-down after it, the next check.
    server.restart();
    tokio::time::sleep(Breaker::DEFAULT.cool_down()).await;
    assert!(
        limiter
            .check("fresh", &FIVE_PER_MINUTE)
            .await
            .unwrap()
            .allowed
    );
    let on_redis: i64 = redis::cmd("EXISTS")
        .arg("fresh")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(
        on_redis, 1,
        "the check after the cool-down was not sent to Redis"
    );
}

#[tokio::test]
async fn what_the_fallback_counted_is_refunded_settled_reset_and_blocked_there() {
    let mut server = RedisServer::start();
    let limiter = support::counting_limiter(&server.url()).fallback(Limiter::memory());
    server.kill();

    let d = limiter.check("r", &FIVE_PER_MINUTE).cost(3).await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 2));
    limiter.refund("r", &FIVE_PER_MINUTE, &d).await.unwrap();
    assert_eq!(
        limiter.peek("r", &FIVE_PER_MINUTE).await.unwrap().remaining,
        5
    );

    let reserved = limiter.check("r", &FIVE_PER_MINUTE).cost(4).await.unwrap();
    assert_eq!(reserved.remaining, 1);
    let settled = limiter
        .settle("r", &FIVE_PER_MINUTE, &reserved, 1)
        .await
        .unwrap();
    assert_eq!(settled.remaining, 4);

    // A block and a reset reach every store: the fallback takes them, Redis cannot.
    let err = limiter
        .block("r", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), BackendErrorKind::Command);
    assert!(!limiter.check("r", &FIVE_PER_MINUTE).await.unwrap().allowed);
    assert!(limiter.reset("r").await.is_err());
    let d = limiter.check("r", &FIVE_PER_MINUTE).await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 4));
}

#[tokio::test]
async fn a_fallbacks_own_fallback_counts_checks_and_lists_while_both_are_gone() {
    let (mut first, mut second) = (RedisServer::start(), RedisServer::start());
    let limiter = support::counting_limiter(&first.url())
        .fallback(support::counting_limiter(&second.url()).fallback(Limiter::memory()));
    first.kill();
    second.kill();

    let d = limiter.check("k", &FIVE_PER_MINUTE).cost(4).await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 1));
    // A list is counted by the same last store, all or nothing.
    let refused = limiter
        .check_all([
            limiter.check("k", &FIVE_PER_MINUTE).cost(2),
            limiter.check("other", &FIVE_PER_MINUTE),
        ])
        .await
        .expect("the embedded store counts the list");
    assert_eq!(
        refused.iter().map(|d| d.allowed).collect::<Vec<_>>(),
        [false, true]
    );
    assert_eq!(
        limiter
            .peek("other", &FIVE_PER_MINUTE)
            .await
            .unwrap()
            .remaining,
        5
    );
    let admitted = limiter
        .check_all([
            limiter.check("k", &FIVE_PER_MINUTE),
            limiter.check("other", &FIVE_PER_MINUTE),
        ])
        .await
        .unwrap();
    assert!(admitted.iter().all(|d| d.allowed));
    assert_eq!(
        limiter.peek("k", &FIVE_PER_MINUTE).await.unwrap().remaining,
        0
    );
}

#[tokio::test]
async fn the_deny_cache_keeps_a_flood_on_one_key_off_redis() {
    let server = RedisServer::start();
    let limiter = support::counting_limiter(&server.url()).deny_cache(true);
    let before = evalsha_calls(&server);
    let mut allowed = 0;
    for _ in 0..3_000 {
        let d = limiter.check("hot", &FIVE_PER_MINUTE).await.unwrap();
        if d.allowed {
            allowed += 1;
        } else {
            let retry = d.retry_after.expect("a wait");
            assert!(retry > Duration::from_secs(50) && retry <= Duration::from_secs(60));
        }
    }
    assert_eq!(allowed, 5);
    let scripts = evalsha_calls(&server) - before;
    // Five admissions and the first denial; a NOSCRIPT retry may add one.
    assert!(
        scripts <= 7,
        "{scripts} scripts ran on Redis for 3,000 checks"
    );
    // Another key is not affected, and a reset through the limiter forgets the denial.
    assert!(
        limiter
            .check("cold", &FIVE_PER_MINUTE)
            .await
            .unwrap()
            .allowed
    );
    limiter.reset("hot").await.unwrap();
    assert!(
        limiter
            .check("hot", &FIVE_PER_MINUTE)
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test]
async fn without_the_deny_cache_every_denial_reaches_redis() {
    let server = RedisServer::start();
    let limiter = support::counting_limiter(&server.url());
    let before = evalsha_calls(&server);
    for _ in 0..100 {
        limiter.check("hot", &FIVE_PER_MINUTE).await.unwrap();
    }
    assert!(evalsha_calls(&server) - before >= 100);
}
