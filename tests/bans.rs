//! Bans (`Limiter::ban`) on the identities keys escape, on IP addresses in every form they
//! reach a key in, at their limits, and reaching a `static` limiter shared by
//! `#[tokio::test]`s whose runtimes come and go. Both backends where both keep bans; real
//! servers only (the shared-limiter test re-runs this binary as a child process, as
//! tests/runtimes.rs does, since each of its tests must run in one process).

mod support;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use redis_ratelimit::context::{self, RequestContext};
use redis_ratelimit::{rate_limiter, BackendErrorKind, Limiter, RateLimitError};
use support::{leak, ChildTest, RedisServer};

/// How long a ban may take to reach another instance before a test gives up: an order of
/// magnitude more than the poll interval (1 s ± 20 %), for a busy machine.
const GIVE_UP_AFTER: Duration = Duration::from_secs(15);

const HOUR: Duration = Duration::from_secs(3600);

custom_sites! {
    send(rules("1000/minute"), name = "bans.send");
    submit(rules("1000/minute"), name = "bans.submit");
}

#[rate_limiter(rules("1000/minute"), limit_type = USER_ID, limiter = limiter, name = "bans.by_user")]
async fn by_user(limiter: &'static Limiter) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("1000/minute"), limit_type = IP, limiter = limiter, name = "bans.by_ip")]
async fn by_ip(limiter: &'static Limiter) -> Result<(), RateLimitError> {
    Ok(())
}

/// Keyed by the peer's address, as a handler given its connection's `SocketAddr` writes it.
#[rate_limiter(rules("1000/minute"), limit_type = IP, by = peer.ip(), limiter = limiter, name = "bans.by_peer")]
async fn by_peer(limiter: &'static Limiter, peer: SocketAddr) -> Result<(), RateLimitError> {
    Ok(())
}

/// Whether the answer is a refusal for at least `at_least`.
fn refused_for(answer: Result<(), RateLimitError>, at_least: Duration) -> Result<(), String> {
    match answer {
        Err(RateLimitError::Limited { retry_after, .. }) if retry_after >= at_least => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// `by_ip` called with `ip` in the request context.
async fn from_ip(limiter: &'static Limiter, ip: &str) -> Result<(), RateLimitError> {
    let ctx = RequestContext::new().with_ip(ip.parse().unwrap());
    context::scope(ctx, by_ip(limiter)).await
}

/// `by_user` called with `user` in the request context.
async fn as_user(limiter: &'static Limiter, user: &str) -> Result<(), RateLimitError> {
    context::scope(RequestContext::new().with_user_id(user), by_user(limiter)).await
}

fn listed(bans: Vec<(String, Duration)>) -> Vec<String> {
    bans.into_iter().map(|(identity, _)| identity).collect()
}

backend_tests! {
    memory = leak(Limiter::memory()),
    redis = |url: &str| leak(support::redis_limiter(url));

    /// Identities that keys escape or hash: banned as written, they refuse the keys of those
    /// very values, are listed as written, and are lifted by what is listed.
    async fn bans_on_escaped_identities_refuse_those_identities(limiter: &'static Limiter) {
        let long = format!("custom:{}", "x".repeat(200));
        let banned = [
            "custom:john doe",
            "custom:tenant:42",
            "custom:100%",
            "custom:{tag}",
            long.as_str(),
            "user:ann smith",
        ];
        for identity in banned {
            limiter.ban(identity, HOUR).await.unwrap();
        }
        for value in ["john doe", "tenant:42", "100%", "{tag}", &"x".repeat(200)] {
            for (site, answer) in [
                ("send", send(limiter, value).await),
                ("submit", submit(limiter, value).await),
            ] {
                let refused = refused_for(answer, Duration::from_secs(3500));
                assert!(refused.is_ok(), "{site} for {value:?}: {refused:?}");
            }
        }
        assert!(refused_for(as_user(limiter, "ann smith").await, HOUR / 2).is_ok());
        // Neighbours are free: the escaped text is not what was banned.
        for free in ["john%20doe", "tenant", "100", &"x".repeat(199)] {
            assert!(send(limiter, free).await.is_ok(), "{free}");
        }
        assert!(as_user(limiter, "ann").await.is_ok());

        let mut expected: Vec<String> = banned.iter().map(|b| b.to_string()).collect();
        expected.sort();
        let listed = listed(limiter.bans().await.unwrap());
        assert_eq!(listed, expected);
        for identity in &listed {
            limiter.unban(identity).await.unwrap();
        }
        assert_eq!(limiter.bans().await.unwrap(), []);
        for value in ["john doe", "tenant:42", "100%", "{tag}", &"x".repeat(200)] {
            assert!(send(limiter, value).await.is_ok(), "{value:?} still banned");
        }
        assert!(as_user(limiter, "ann smith").await.is_ok());
    }

    /// An IPv4-mapped IPv6 address is its IPv4 address, in a key and in a ban, whether it
    /// comes from the request context or from `by = peer.ip()`.
    async fn ipv4_mapped_addresses_are_their_ipv4_addresses(limiter: &'static Limiter) {
        limiter.ban("ip:203.0.113.0/24", HOUR).await.unwrap();
        limiter.ban("ip:::ffff:198.51.100.7", HOUR).await.unwrap();
        for ip in ["::ffff:203.0.113.9", "::ffff:198.51.100.7", "198.51.100.7"] {
            let refused = refused_for(from_ip(limiter, ip).await, HOUR / 2);
            assert!(refused.is_ok(), "{ip}: {refused:?}");
            let peer = SocketAddr::new(ip.parse().unwrap(), 50_000);
            let refused = refused_for(by_peer(limiter, peer).await, HOUR / 2);
            assert!(refused.is_ok(), "by = peer.ip() of {ip}: {refused:?}");
        }
        assert!(from_ip(limiter, "::ffff:198.51.100.8").await.is_ok());
        let listed = listed(limiter.bans().await.unwrap());
        assert_eq!(listed, ["ip:198.51.100.7", "ip:203.0.113.0/24"]);
        // The mapped form lifts what the IPv4 form banned.
        limiter.unban("ip:::ffff:198.51.100.7").await.unwrap();
        assert!(from_ip(limiter, "198.51.100.7").await.is_ok());
    }

    /// Networks that would cover a whole address family are refused with a message that says
    /// what a ban takes; what is refused bans nothing.
    async fn bans_of_whole_address_families_are_refused(limiter: &'static Limiter) {
        for wide in [
            "ip:1.2.3.4/0",
            "ip:0.0.0.0/0",
            "ip:10.0.0.0/7",
            "ip:::/0",
            "ip:2001::/15",
        ] {
            let err = limiter.ban(wide, HOUR).await.unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::Misconfigured, "{wide}");
            let message = err.to_string();
            assert!(
                message.contains(wide.trim_start_matches("ip:")) && message.contains("/8"),
                "{wide}: {message}"
            );
        }
        assert_eq!(limiter.bans().await.unwrap(), []);
        assert!(from_ip(limiter, "198.51.100.1").await.is_ok());
        // The widest networks a ban takes.
        limiter.ban("ip:10.0.0.0/8", HOUR).await.unwrap();
        limiter.ban("ip:2001::/16", HOUR).await.unwrap();
        assert!(from_ip(limiter, "10.200.0.1").await.is_err());
        assert!(from_ip(limiter, "2001:ffff::1").await.is_err());
    }

    /// The longest ban: a longer one (`Duration::MAX` for "until lifted") lasts that long, is
    /// listed and is enforced, the same on both backends.
    async fn a_ban_longer_than_the_longest_lasts_the_longest(limiter: &'static Limiter) {
        limiter.ban("custom:forever", Duration::MAX).await.unwrap();
        limiter
            .ban("custom:century", Duration::from_secs(200 * 365 * 86_400))
            .await
            .unwrap();
        let longest = Limiter::MAX_BAN;
        let bans = limiter.bans().await.unwrap();
        assert_eq!(listed(bans.clone()), ["custom:century", "custom:forever"]);
        for (identity, left) in bans {
            // Redis keeps a ban's end in whole milliseconds, rounded up.
            assert!(
                left <= longest + Duration::from_millis(1) && left > longest - Duration::from_secs(60),
                "{identity}: {left:?}"
            );
        }
        for who in ["forever", "century"] {
            let refused = refused_for(send(limiter, who).await, longest - Duration::from_secs(60));
            assert!(refused.is_ok(), "{who}: {refused:?}");
        }
        limiter.unban("custom:forever").await.unwrap();
        assert!(send(limiter, "forever").await.is_ok());
    }
}

#[tokio::test]
async fn an_ipv4_mapped_address_is_keyed_as_its_ipv4_address() {
    let server = RedisServer::start();
    let limiter = leak(support::redis_limiter(&server.url()));
    from_ip(limiter, "::ffff:203.0.113.9").await.unwrap();
    let peer = SocketAddr::new("::ffff:203.0.113.10".parse().unwrap(), 50_000);
    by_peer(limiter, peer).await.unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("rate_limit:ip:*")
        .query(&mut server.connection())
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "rate_limit:ip:203.0.113.10:bans.by_peer",
            "rate_limit:ip:203.0.113.9:bans.by_ip",
        ]
    );
}

mod behind_the_layer {
    use axum::routing::get;
    use axum::Router;
    use redis_ratelimit::axum::{ProxyHeader, RateLimitLayer};

    use super::*;

    #[rate_limiter(rules("1000/minute"), limit_type = IP, limiter = &*LIMITER, name = "bans.layer")]
    async fn hello() -> Result<&'static str, RateLimitError> {
        Ok("hello")
    }

    static LIMITER: LazyLock<Limiter> = LazyLock::new(Limiter::memory);

    /// The status of a request from the client `client`, forwarded by the proxy at ::1.
    async fn status_from(base: &str, client: &str) -> u16 {
        support::http::client_from("::1")
            .get(format!("{base}/"))
            .header("x-forwarded-for", client)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// The layer counts an IPv6 client by its /64: a ban of one IPv6 address refuses
    /// that network behind it (the client as the layer counts it), and an IPv4-mapped
    /// client is its IPv4 address.
    #[tokio::test]
    async fn a_ban_of_one_ipv6_address_refuses_its_network_behind_the_layer() {
        let layer = RateLimitLayer::new()
            .trust_proxies(["::1"])
            .proxy_header(ProxyHeader::XForwardedFor);
        let app = Router::new().route("/", get(hello)).layer(layer);
        let served = support::http::serve_axum(app, "::1");
        let base = &served.base;
        LIMITER.ban("ip:2001:db8:1:2::7", HOUR).await.unwrap();
        LIMITER.ban("ip:203.0.113.0/24", HOUR).await.unwrap();
        for refused in [
            "2001:db8:1:2::7",
            "2001:db8:1:2:ffff::1",
            "::ffff:203.0.113.9",
        ] {
            assert_eq!(status_from(base, refused).await, 429, "{refused}");
        }
        for admitted in ["2001:db8:1:3::7", "2001:db8::7", "::ffff:203.0.114.9"] {
            assert_eq!(status_from(base, admitted).await, 200, "{admitted}");
        }
        // Outside the layer, the address alone is banned.
        assert!(from_ip(&LIMITER, "2001:db8:1:2::7").await.is_err());
        assert!(from_ip(&LIMITER, "2001:db8:1:2::8").await.is_ok());
    }
}

/// The `static` limiter the `#[tokio::test]`s below share, as an application's tests share
/// one: on Redis, polling the stored bans every second (the default).
static SHARED: LazyLock<Limiter> =
    LazyLock::new(|| support::redis_limiter(support::process_server_url()));

/// How many of the tests below have got to each step.
static STEP: AtomicUsize = AtomicUsize::new(0);

/// Marks a step done when dropped.
struct DoneWhenDropped(usize);

impl Drop for DoneWhenDropped {
    fn drop(&mut self) {
        STEP.store(self.0, Ordering::SeqCst);
    }
}

thread_local! {
    /// Dropped when the test's thread ends: after its function has returned, so after its
    /// runtime has shut down.
    static DONE: RefCell<Option<DoneWhenDropped>> = const { RefCell::new(None) };
}

/// Marks `step` done once this test's runtime is gone. (libtest runs each test on a
/// thread of its own when it runs several at once.)
fn done_with_the_runtime(step: usize) {
    DONE.with(|done| *done.borrow_mut() = Some(DoneWhenDropped(step)));
}

async fn until_step(step: usize) {
    support::eventually(&format!("step {step}"), GIVE_UP_AFTER, || async {
        match STEP.load(Ordering::SeqCst) {
            at if at >= step => Ok(()),
            at => Err(format!("at step {at}")),
        }
    })
    .await;
}

/// `#[tokio::test]`s in one process (each has a runtime of its own, ending with it) share
/// one `static` limiter. The first checks first, and ends; the second's last check is
/// answered at once (its identity is banned) and it ends; only then does an operator ban
/// an identity, which must reach the limiter within its poll interval.
#[test]
fn a_ban_reaches_a_static_limiter_whose_tests_come_and_go() {
    let child = ChildTest::spawn(&["sharing_tests::", "--test-threads", "3"], &[]);
    let result = child.finish("test result:");
    assert!(result.starts_with("ok. 3 passed"), "{result}");
}

mod sharing_tests {
    use super::*;

    #[tokio::test]
    #[ignore = "run in one process by a_ban_reaches_a_static_limiter_whose_tests_come_and_go"]
    async fn first_checks_and_ends() {
        assert!(send(&SHARED, "first").await.is_ok());
        done_with_the_runtime(1);
    }

    #[tokio::test]
    #[ignore = "run in one process by a_ban_reaches_a_static_limiter_whose_tests_come_and_go"]
    async fn second_ends_on_an_answer_at_hand() {
        until_step(1).await;
        SHARED.ban("custom:mallory", HOUR).await.unwrap();
        assert!(send(&SHARED, "mallory").await.is_err());
        done_with_the_runtime(2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "run in one process by a_ban_reaches_a_static_limiter_whose_tests_come_and_go"]
    async fn third_sees_a_ban_made_after_the_others_ended() {
        until_step(2).await;
        let operator = support::redis_limiter(support::process_server_url());
        operator.ban("custom:eve", HOUR).await.unwrap();
        support::eventually("the ban to arrive", GIVE_UP_AFTER, || async {
            refused_for(send(&SHARED, "eve").await, HOUR / 2)
        })
        .await;
        operator.unban("custom:eve").await.unwrap();
        support::eventually("the lifting to arrive", GIVE_UP_AFTER, || async {
            send(&SHARED, "eve").await.map_err(|err| err.to_string())
        })
        .await;
    }
}
