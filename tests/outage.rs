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

const TIMEOUT: Duration = Duration::from_millis(100);
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
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

#[tokio::test]
async fn a_black_holed_redis_costs_microseconds_once_the_breaker_opens() {
    let limiter = Limiter::redis(&black_hole()).unwrap().timeout(TIMEOUT);
    let checks = 300;
    let start = Instant::now();
    let mut fast_failures = 0;
    for _ in 0..checks {
        let started = Instant::now();
        let err = limiter.check("k", &FIVE_PER_MINUTE).await.unwrap_err();
        assert!(
            matches!(
                err.kind(),
                BackendErrorKind::Timeout | BackendErrorKind::Unavailable
            ),
            "{err}"
        );
        if started.elapsed() < Duration::from_millis(5) {
            assert!(err.to_string().contains("circuit breaker open"), "{err}");
            fast_failures += 1;
        }
    }
    let elapsed = start.elapsed();
    // Without the breaker: 300 x 100 ms = 30 s. With it: 3 timeouts to open, then one
    // probe (one timeout) per second of cool-down.
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(
        fast_failures >= checks - 10,
        "{fast_failures} fast failures"
    );
}

#[tokio::test]
async fn a_connection_that_stops_answering_is_made_anew_after_three_timeouts() {
    let server = RedisServer::start();
    let (url, freezes) = freezing_proxy(server.port());
    let limiter = Limiter::redis(&url)
        .unwrap()
        .timeout(TIMEOUT)
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
    loop {
        match limiter.check("k", &MANY).await {
            Ok(decision) => {
                assert!(decision.allowed);
                break;
            }
            Err(err) => {
                assert_eq!(err.kind(), BackendErrorKind::Timeout, "{err}");
                timeouts += 1;
                assert!(timeouts <= 6, "still timing out after {timeouts} checks");
            }
        }
    }
    assert!(timeouts >= 1);
}

#[tokio::test]
async fn a_password_refused_at_connect_is_tried_again_at_the_next_check() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    support::require_password(&mut admin, "old-secret");
    let url = format!("redis://:new-secret@127.0.0.1:{}/", server.port());
    let limiter = Limiter::redis(&url)
        .unwrap()
        .timeout(TIMEOUT)
        .breaker(Breaker::never());
    let err = limiter.check("k", &FIVE_PER_MINUTE).await.unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Misconfigured, "{err}");
    assert!(err.to_string().contains("password"), "{err}");
    assert!(!err.to_string().contains("new-secret"), "{err}");

    // The operator fixes the password: no restart needed.
    support::require_password(&mut admin, "new-secret");
    assert!(limiter.check("k", &FIVE_PER_MINUTE).await.unwrap().allowed);
}

#[tokio::test]
async fn checks_reach_redis_again_within_the_cool_down_after_a_pause() {
    let server = RedisServer::start();
    let cool_down = Duration::from_millis(300);
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .timeout(TIMEOUT)
        .breaker(Breaker::new(3, cool_down));
    limiter.check("k", &FIVE_PER_MINUTE).await.unwrap();

    let pause = Duration::from_millis(600);
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis() as u64)
        .arg("ALL")
        .query(&mut server.connection())
        .unwrap();
    let paused_at = Instant::now();
    // Three timeouts open the breaker; then checks fail at once.
    for _ in 0..3 {
        assert!(limiter.check("k", &FIVE_PER_MINUTE).await.is_err());
    }
    let started = Instant::now();
    let err = limiter.check("k", &FIVE_PER_MINUTE).await.unwrap_err();
    assert!(err.to_string().contains("circuit breaker open"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(5));

    // Once Redis answers again, a probe goes through within one cool-down (plus the
    // timeout of a probe that may still have met the pause).
    tokio::time::sleep(pause.saturating_sub(paused_at.elapsed())).await;
    let resumed = Instant::now();
    loop {
        match limiter.check("k", &FIVE_PER_MINUTE).await {
            Ok(d) => {
                assert!(d.allowed);
                break;
            }
            Err(err) => {
                assert!(
                    resumed.elapsed() < cool_down + TIMEOUT + Duration::from_millis(400),
                    "checks still fail {:?} after the pause: {err}",
                    resumed.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

#[tokio::test]
async fn the_fallback_counts_exactly_while_redis_is_gone_and_hands_back() {
    let mut server = RedisServer::start();
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .timeout(TIMEOUT)
        .fail_open(false)
        .fallback(Limiter::memory());
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

    server.restart();
    let back = Instant::now();
    // Back on Redis (an empty one) as soon as the breaker lets a probe through.
    loop {
        let d = limiter.check("fresh", &FIVE_PER_MINUTE).await.unwrap();
        let on_redis: i64 = redis::cmd("EXISTS")
            .arg("fresh")
            .query(&mut server.connection())
            .unwrap();
        if on_redis == 1 {
            assert!(d.allowed);
            break;
        }
        assert!(
            back.elapsed() < Breaker::DEFAULT.cool_down() + Duration::from_secs(1),
            "still on the fallback"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_deny_cache_keeps_a_flood_on_one_key_off_redis() {
    let server = RedisServer::start();
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .timeout(Duration::from_secs(2))
        .deny_cache(true);
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
    let limiter = Limiter::redis(&server.url())
        .unwrap()
        .timeout(Duration::from_secs(2));
    let before = evalsha_calls(&server);
    for _ in 0..100 {
        limiter.check("hot", &FIVE_PER_MINUTE).await.unwrap();
    }
    assert!(evalsha_calls(&server) - before >= 100);
}
