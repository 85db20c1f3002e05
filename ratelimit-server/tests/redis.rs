//! The built service on real `redis-server`s (one server, and a Cluster): the keys it
//! writes, instances sharing counts, the backend going away (UNAVAILABLE, or OK with
//! `--fail-open`).

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use common::{config_dir, descriptor, ok, one, over, request, several, Server, GIVE_UP_AFTER};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use support::cluster::RedisCluster;
use support::{eventually, RedisServer, ScratchDir, Topology};
use tonic::Code as GrpcCode;

/// The `shop` domain, shared with the embedded backend's half of the ban test.
const CONFIG: &str = include_str!("common/shop.yaml");

fn on(test: &str, url: &str, extra: &[&str]) -> (ScratchDir, Server) {
    let dir = config_dir(test, "shop.yaml", CONFIG);
    let mut args = vec!["--redis", url];
    args.extend_from_slice(extra);
    let server = Server::start(&dir, &args);
    (dir, server)
}

/// Sends 64 `request()`s at once, alternately to `a` and `b`: how many were admitted.
async fn admitted_between(a: &Server, b: &Server, request: fn() -> RateLimitRequest) -> usize {
    let clients = [a.client().await, b.client().await];
    let mut calls = Vec::new();
    for i in 0..64 {
        let mut client = clients[i % 2].clone();
        calls.push(tokio::spawn(async move {
            client
                .should_rate_limit(request())
                .await
                .unwrap()
                .into_inner()
                .overall_code
        }));
    }
    let mut admitted = 0;
    for call in calls {
        admitted += usize::from(call.await.unwrap() == ok());
    }
    admitted
}

#[tokio::test]
async fn counts_live_in_redis_under_the_rls_keys() {
    let redis = RedisServer::start();
    let (_dir, server) = on("keys", &redis.url(), &[]);
    let answer = server
        .ask(several(
            "shop",
            &[
                &[("user", "alice smith")],
                &[("remote_address", "2001:DB8::1")],
            ],
        ))
        .await;
    assert_eq!(answer.overall_code, ok());
    assert_eq!(answer.statuses[0].limit_remaining, 19);
    let mut conn = redis.connection();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("rate_limit:rls:*")
        .query(&mut conn)
        .unwrap();
    keys.sort();
    // The space escaped as identities are; the address in its canonical form.
    assert_eq!(
        keys,
        [
            "rate_limit:rls:shop:remote_address_2001%3Adb8%3A%3A1",
            "rate_limit:rls:shop:user_alice%20smith",
        ]
    );
    for key in &keys {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).unwrap();
        assert!(ttl > 0 && ttl <= 3_700_000, "{key}: {ttl}");
    }
    // A value too long for a key is hashed, as long identities are.
    let long = "x".repeat(3000);
    server.ask(one("shop", &[("user", long.as_str())])).await;
    let hashed: Vec<String> = redis::cmd("KEYS")
        .arg("rate_limit:rls:shop:#*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(hashed.len(), 1, "{hashed:?}");
    assert!(hashed[0].len() < 80, "{hashed:?}");
}

#[tokio::test]
async fn two_instances_on_one_redis_admit_exactly_the_limit_between_them() {
    let redis = RedisServer::start();
    let (_a_dir, a) = on("two-a", &redis.url(), &[]);
    let (_b_dir, b) = on("two-b", &redis.url(), &[]);
    let admitted = admitted_between(&a, &b, || one("shop", &[("user", "shared")])).await;
    assert_eq!(admitted, 20);
}

/// Two instances, requests of two descriptors where the first refuses: the second consumed
/// exactly what the admitted requests took.
#[tokio::test]
async fn two_instances_refused_requests_consume_nothing_between_them() {
    let redis = RedisServer::start();
    let (_a_dir, a) = on("atomic-a", &redis.url(), &[]);
    let (_b_dir, b) = on("atomic-b", &redis.url(), &[]);
    let both = || several("shop", &[&[("user", "u")], &[("tenant", "t")]]);
    let admitted = admitted_between(&a, &b, both).await;
    assert_eq!(admitted, 20);
    let tenant = a.ask(one("shop", &[("tenant", "t")])).await;
    assert_eq!(tenant.statuses[0].limit_remaining, 1000 - 20 - 1);
}

#[tokio::test]
async fn a_cluster_counts_descriptors_on_every_master() {
    let cluster = RedisCluster::start();
    let (_dir, server) = on("cluster", &cluster.url(), &[]);
    // One user whose key lives on each master.
    let mut users: Vec<(u16, String)> = Vec::new();
    for i in 0..1000 {
        let user = format!("member-{i}");
        let master = cluster.master_of(&format!("rate_limit:rls:shop:user_{user}"));
        if users.iter().all(|(m, _)| *m != master) {
            users.push((master, user));
        }
    }
    assert_eq!(users.len(), cluster.masters().len());
    let all = || {
        request(
            "shop",
            users
                .iter()
                .map(|(_, u)| descriptor(&[("user", u)]))
                .collect(),
        )
    };
    for remaining in [19, 18, 17] {
        let answer = server.ask(all()).await;
        assert_eq!(answer.overall_code, ok());
        assert!(
            answer
                .statuses
                .iter()
                .all(|s| s.limit_remaining == remaining),
            "{answer:?}"
        );
    }
    let first = users[0].1.as_str();
    for _ in 0..17 {
        server.ask(one("shop", &[("user", first)])).await;
    }
    assert_eq!(server.code("shop", &[("user", first)]).await, over());
}

#[tokio::test]
async fn an_unreachable_backend_is_unavailable_and_unhealthy() {
    let mut redis = RedisServer::start();
    let (_dir, server) = on("down", &redis.url(), &["--timeout", "500ms"]);
    assert_eq!(server.code("shop", &[("user", "d")]).await, ok());
    assert_eq!(server.get("/healthcheck").await.0, 200);
    redis.kill();
    let status = server.refuse(one("shop", &[("user", "d")])).await;
    assert_eq!(status.code(), GrpcCode::Unavailable, "{status:?}");
    assert!(status.message().contains("--fail-open"), "{status:?}");
    let (code, body) = server.get("/healthcheck").await;
    assert_eq!(code, 503, "{body}");
    // Back up: answers again, without a restart.
    redis.restart();
    eventually("the service to answer again", GIVE_UP_AFTER, || async {
        match server
            .client()
            .await
            .should_rate_limit(one("shop", &[("user", "d")]))
            .await
        {
            Ok(answer) if answer.get_ref().overall_code == ok() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn fail_open_answers_ok_and_counts_the_error() {
    let mut redis = RedisServer::start();
    let (_dir, server) = on(
        "fail-open",
        &redis.url(),
        &["--fail-open", "--timeout", "500ms"],
    );
    redis.kill();
    let answer = server.ask(one("shop", &[("user", "f")])).await;
    assert_eq!(answer.overall_code, ok());
    let (code, _) = server.get("/healthcheck").await;
    assert_eq!(code, 200, "failing open, the service stays in rotation");
    let (_, metrics) = server.get("/metrics").await;
    assert!(
        metrics.contains("ratelimit_server_errors_total 1"),
        "{metrics}"
    );
}

/// A ban set by the library (as `ratelimit ban` sets it) on the service's Redis refuses a
/// `remote_address` in the network within the service's poll, consuming nothing; lifted,
/// the address is admitted again.
#[tokio::test]
async fn a_ban_in_redis_refuses_the_remote_address_and_consumes_nothing() {
    let redis = RedisServer::start();
    let (_dir, server) = on("ban", &redis.url(), &[]);
    // The first request starts the service's poll of the bans.
    let first = one("shop", &[("remote_address", "203.0.113.1")]);
    assert_eq!(server.ask(first).await.overall_code, ok());
    let operator = redis_ratelimit::Limiter::redis(&redis.url()).unwrap();
    operator
        .ban("ip:203.0.113.0/24", std::time::Duration::from_secs(3600))
        .await
        .unwrap();
    // Each attempt from another address of the network, so none runs out of its own 5.
    let attempt = std::sync::atomic::AtomicU32::new(1);
    let both = |last: u32| {
        several(
            "shop",
            &[
                &[("user", "from-banned")],
                &[("remote_address", &format!("203.0.113.{last}"))],
            ],
        )
    };
    eventually("the ban to reach the service", GIVE_UP_AFTER, || async {
        let n = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let answer = server.ask(one(
            "shop",
            &[("remote_address", &format!("203.0.113.{n}"))],
        ));
        match answer.await.overall_code {
            code if code == over() => Ok(()),
            code => Err(format!("attempt {n}: code {code}")),
        }
    })
    .await;
    let answer = server.ask(both(200)).await;
    assert_eq!(answer.overall_code, over());
    assert_eq!(answer.statuses[0].code, ok());
    assert_eq!(answer.statuses[1].code, over());
    assert!(answer.statuses[1].duration_until_reset.unwrap().seconds > 3000);
    // Neither descriptor consumed: no key for the refused address, the user has all 20.
    let mut conn = redis.connection();
    let exists: bool = redis::cmd("EXISTS")
        .arg("rate_limit:rls:shop:remote_address_203.0.113.200")
        .query(&mut conn)
        .unwrap();
    assert!(!exists);
    let user = server.ask(one("shop", &[("user", "from-banned")])).await;
    assert_eq!(user.statuses[0].limit_remaining, 19);
    // Outside the network, admitted.
    let outside = one("shop", &[("remote_address", "198.51.100.1")]);
    assert_eq!(server.ask(outside).await.overall_code, ok());

    operator.unban("ip:203.0.113.0/24").await.unwrap();
    eventually(
        "the lifted ban to reach the service",
        GIVE_UP_AFTER,
        || async {
            match server.ask(both(201)).await.overall_code {
                code if code == ok() => Ok(()),
                code => Err(format!("code {code}")),
            }
        },
    )
    .await;
}
