//! The built service on real `redis-server`s (one server, and a Cluster): the keys it
//! writes, instances sharing counts, the backend going away (UNAVAILABLE, or OK with
//! `--fail-open`).

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use common::{config_dir, descriptor, ok, one, over, request, Server, GIVE_UP_AFTER};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use support::cluster::RedisCluster;
use support::{eventually, RedisServer, ScratchDir, Topology};
use tonic::Code as GrpcCode;

const CONFIG: &str = "
domain: shop
algorithm: sliding_log
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 20}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 5}
";

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
        .ask(request(
            "shop",
            vec![
                descriptor(&[("user", "alice smith")]),
                descriptor(&[("remote_address", "2001:DB8::1")]),
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
    let both = || {
        request(
            "shop",
            vec![descriptor(&[("user", "u")]), descriptor(&[("tenant", "t")])],
        )
    };
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
    assert_eq!(
        server
            .ask(one("shop", &[("user", first)]))
            .await
            .overall_code,
        over()
    );
}

#[tokio::test]
async fn an_unreachable_backend_is_unavailable_and_unhealthy() {
    let mut redis = RedisServer::start();
    let (_dir, server) = on("down", &redis.url(), &["--timeout", "500ms"]);
    assert_eq!(
        server.ask(one("shop", &[("user", "d")])).await.overall_code,
        ok()
    );
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
