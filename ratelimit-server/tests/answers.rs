//! What the service answers, over the wire, on the embedded backend: envoyproxy/ratelimit's
//! example configuration and its expected answers, unknown domains, `unlimited`,
//! `replaces`, shadow and quota mode, `hits_addend`, a descriptor's own limit, several
//! rules on one descriptor, a calendar year's limit, malformed requests, `POST /json` and
//! the response headers.
//! Windows are an hour or longer, counted by the sliding log, so no window boundary falls
//! inside a test.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use common::{config_dir, descriptor, ok, one, over, request, several, Server};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::Code as GrpcCode;

/// The domain [`CONFIG`] configures.
const DOMAIN: &str = "test-domain";

const CONFIG: &str = "
domain: test-domain
algorithm: sliding_log
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: hour, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: key2
    value: value3
  - key: key6
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: generic
    rate_limit: {name: generic, unit: hour, requests_per_unit: 1}
  - key: specific
    rate_limit:
      name: specific
      unit: hour
      requests_per_unit: 100
      replaces: [{name: generic}]
  - key: multi
    rate_limit:
      name: multi
      limits: [\"2/hour\", \"100/day\"]
  - key: yearly
    rate_limit: {unit: year, requests_per_unit: 2}
";

fn start(test: &str, extra: &[&str]) -> (support::ScratchDir, Server) {
    let dir = config_dir(test, "config.yaml", CONFIG);
    let server = Server::start(&dir, extra);
    (dir, server)
}

/// Asks `request` `times` times, each answer OK overall: what a request that nothing
/// refuses (no limit, `unlimited`, shadow mode) is answered, however often it comes.
async fn ask_ok(
    server: &Server,
    times: usize,
    request: RateLimitRequest,
) -> Vec<RateLimitResponse> {
    let mut answers = Vec::with_capacity(times);
    for _ in 0..times {
        let answer = server.ask(request.clone()).await;
        assert_eq!(answer.overall_code, ok());
        answers.push(answer);
    }
    answers
}

#[tokio::test]
async fn the_incumbents_example_configuration_answers_as_there() {
    let (_dir, server) = start("basic", &[]);
    for remaining in (0..5).rev() {
        let answer = server
            .ask(one(DOMAIN, &[("key1", "value1"), ("subkey1", "something")]))
            .await;
        assert_eq!(answer.overall_code, ok());
        let status = &answer.statuses[0];
        assert_eq!(status.code, ok());
        assert_eq!(status.limit_remaining, remaining);
        let limit = status.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (5, Unit::Hour as i32)
        );
        assert!(status.duration_until_reset.unwrap().seconds <= 3600);
    }
    let answer = server
        .ask(one(DOMAIN, &[("key1", "value1"), ("subkey1", "something")]))
        .await;
    assert_eq!(answer.overall_code, over());
    assert_eq!(answer.statuses[0].code, over());
    assert_eq!(answer.statuses[0].limit_remaining, 0);
    // Another value of the default key is another counter.
    let other = server
        .ask(one(DOMAIN, &[("key1", "value1"), ("subkey1", "else")]))
        .await;
    assert_eq!(other.statuses[0].limit_remaining, 4);
    // The specific value's own limit.
    let specific = server
        .ask(one(DOMAIN, &[("key1", "value1"), ("subkey1", "subvalue1")]))
        .await;
    let limit = specific.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(limit.requests_per_unit, 10);
    assert_eq!(specific.statuses[0].limit_remaining, 9);
    // A value listed without a limit, and levels without one: OK, no current_limit.
    for entries in [
        &[("key2", "value3")][..],
        &[("key1", "value1")],
        &[("key1", "something")],
        &[("key2", "value2"), ("subkey", "subvalue")],
    ] {
        let answer = server.ask(one(DOMAIN, entries)).await;
        assert_eq!(answer.overall_code, ok(), "{entries:?}");
        assert_eq!(answer.statuses[0].code, ok());
        assert_eq!(answer.statuses[0].current_limit, None, "{entries:?}");
    }
}

#[tokio::test]
async fn an_unknown_domain_answers_ok_without_limits() {
    let (_dir, server) = start("unknown", &[]);
    for answer in ask_ok(&server, 3, one("nobody", &[("key2", "x")])).await {
        assert_eq!(answer.statuses.len(), 1);
        assert_eq!(answer.statuses[0].current_limit, None);
    }
}

#[tokio::test]
async fn unlimited_answers_ok_with_everything_remaining() {
    let (_dir, server) = start("unlimited", &[]);
    for answer in ask_ok(&server, 10, one(DOMAIN, &[("key6", "any")])).await {
        assert_eq!(answer.statuses[0].limit_remaining, u32::MAX);
        assert_eq!(answer.statuses[0].current_limit, None);
    }
}

#[tokio::test]
async fn a_limit_that_another_replaces_is_not_counted() {
    let (_dir, server) = start("replaces", &[]);
    let both = || several(DOMAIN, &[&[("generic", "a")], &[("specific", "a")]]);
    for remaining in [99, 98, 97] {
        let answer = server.ask(both()).await;
        assert_eq!(answer.overall_code, ok(), "generic (1/hour) is replaced");
        assert_eq!(answer.statuses[0].current_limit, None);
        assert_eq!(answer.statuses[1].limit_remaining, remaining);
    }
    // Alone, generic is counted: nothing was taken from it above.
    assert_eq!(server.code(DOMAIN, &[("generic", "a")]).await, ok());
    assert_eq!(server.code(DOMAIN, &[("generic", "a")]).await, over());
}

#[tokio::test]
async fn shadow_mode_counts_but_never_refuses() {
    let (_dir, server) = start("shadow", &[]);
    for answer in ask_ok(&server, 3, one(DOMAIN, &[("shadow", "s")])).await {
        assert_eq!(answer.statuses[0].code, ok());
    }
    let (_, metrics) = server.get("/metrics").await;
    let shadowed = metrics
        .lines()
        .find(|l| {
            l.starts_with("ratelimit_server_hits_total")
                && l.contains("descriptor=\"shadow\"")
                && l.contains("result=\"shadow_mode\"")
        })
        .unwrap_or_else(|| panic!("no shadow_mode hits in\n{metrics}"));
    assert!(shadowed.ends_with(" 2"), "{shadowed}");
}

#[tokio::test]
async fn quota_mode_refuses_only_when_every_quota_is_over() {
    let (_dir, server) = start("quota", &[]);
    let alone = || one(DOMAIN, &[("quota", "q")]);
    assert_eq!(server.ask(alone()).await.overall_code, ok());
    let answer = server.ask(alone()).await;
    assert_eq!(
        answer.overall_code,
        over(),
        "its only quota descriptor is over"
    );
    // With a second quota that has room, the request passes; the first still says over.
    let answer = server
        .ask(several(DOMAIN, &[&[("quota", "q")], &[("quota_b", "q")]]))
        .await;
    assert_eq!(answer.overall_code, ok());
    assert_eq!(answer.statuses[0].code, over());
    assert_eq!(answer.statuses[1].code, ok());
}

#[tokio::test]
async fn hits_addend_is_the_cost_the_descriptors_own_first() {
    let (_dir, server) = start("hits", &[]);
    let mut heavy = one(DOMAIN, &[("key1", "value1"), ("subkey1", "h")]);
    heavy.hits_addend = 3;
    let answer = server.ask(heavy.clone()).await;
    assert_eq!(answer.statuses[0].limit_remaining, 2);
    assert_eq!(
        server.ask(heavy).await.overall_code,
        over(),
        "3 more do not fit in 2"
    );
    // The descriptor's own hits_addend wins over the request's; 0 means 1.
    let mut own = one(DOMAIN, &[("key1", "value1"), ("subkey1", "own")]);
    own.hits_addend = 3;
    own.descriptors[0].hits_addend = Some(UInt64Value { value: 4 });
    assert_eq!(server.ask(own).await.statuses[0].limit_remaining, 1);
    let mut zero = one(DOMAIN, &[("key1", "value1"), ("subkey1", "zero")]);
    zero.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    assert_eq!(server.ask(zero).await.statuses[0].limit_remaining, 4);
}

#[tokio::test]
async fn a_descriptors_own_limit_is_counted() {
    let (_dir, server) = start("own", &[]);
    let mut own = one(DOMAIN, &[("unconfigured", "x")]);
    own.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: RateLimitUnit::Hour as i32,
    });
    for expected in [ok(), ok(), over()] {
        let answer = server.ask(own.clone()).await;
        assert_eq!(answer.overall_code, expected);
        let limit = answer.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (2, Unit::Hour as i32)
        );
    }
}

#[tokio::test]
async fn several_rules_answer_with_the_one_closest_to_its_limit() {
    let (_dir, server) = start("multi", &[]);
    let answer = server.ask(one(DOMAIN, &[("multi", "m")])).await;
    let status = &answer.statuses[0];
    let limit = status.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (2, Unit::Hour as i32, "multi")
    );
    assert_eq!(status.limit_remaining, 1);
    server.ask(one(DOMAIN, &[("multi", "m")])).await;
    assert_eq!(server.code(DOMAIN, &[("multi", "m")]).await, over());
}

#[tokio::test]
async fn a_calendar_year_limit_counts_and_answers_in_years() {
    let (_dir, server) = start("yearly", &[]);
    let answer = server.ask(one(DOMAIN, &[("yearly", "y")])).await;
    assert_eq!(answer.overall_code, ok());
    let status = &answer.statuses[0];
    let limit = status.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (2, Unit::Year as i32)
    );
    assert_eq!(status.limit_remaining, 1);
    // Its reset is the next January 1: never more than a (leap) year away.
    let reset = status.duration_until_reset.as_ref().unwrap();
    assert!(
        reset.seconds > 0 && reset.seconds <= 366 * 86_400,
        "{reset:?}"
    );
    assert_eq!(server.code(DOMAIN, &[("yearly", "y")]).await, ok());
    assert_eq!(server.code(DOMAIN, &[("yearly", "y")]).await, over());
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments_that_say_why() {
    let (_dir, server) = start("invalid", &[]);
    let no_domain = server.refuse(one("", &[("key2", "x")])).await;
    assert_eq!(no_domain.code(), GrpcCode::InvalidArgument);
    assert!(no_domain.message().contains("domain"), "{no_domain:?}");
    let none = server.refuse(request(DOMAIN, vec![])).await;
    assert_eq!(none.code(), GrpcCode::InvalidArgument);
    assert!(none.message().contains("descriptor"), "{none:?}");
    let empty = server.refuse(request(DOMAIN, vec![descriptor(&[])])).await;
    assert_eq!(empty.code(), GrpcCode::InvalidArgument);
    assert!(empty.message().contains("no entries"), "{empty:?}");
    let many = server
        .refuse(request(
            DOMAIN,
            (0..65).map(|_| descriptor(&[("key2", "x")])).collect(),
        ))
        .await;
    assert_eq!(many.code(), GrpcCode::InvalidArgument);
    assert!(many.message().contains("at most 64"), "{many:?}");
    let long = "v".repeat(5000);
    let long = server.refuse(one(DOMAIN, &[("key2", long.as_str())])).await;
    assert_eq!(long.code(), GrpcCode::InvalidArgument);
    // A cost the descriptor's algorithm cannot count (the sliding log's cap) is the
    // request's fault, not the backend's.
    let mut heavy = one(DOMAIN, &[("key2", "x")]);
    heavy.hits_addend = 20_000;
    let heavy = server.refuse(heavy).await;
    assert_eq!(heavy.code(), GrpcCode::InvalidArgument, "{heavy:?}");
    assert!(heavy.message().contains("hits_addend"), "{heavy:?}");
    // None of it reached a counter, and the service still answers.
    assert_eq!(
        server.ask(one(DOMAIN, &[("key2", "x")])).await.statuses[0].limit_remaining,
        2
    );
}

#[tokio::test]
async fn json_answers_200_then_429_in_protobufs_json() {
    let (_dir, server) = start("json", &[]);
    let camel =
        r#"{"domain":"test-domain","descriptors":[{"entries":[{"key":"multi","value":"j"}]}]}"#;
    let (status, body) = server.post_json(camel).await;
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["overallCode"], "OK");
    assert_eq!(body["statuses"][0]["code"], "OK");
    assert_eq!(body["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    assert_eq!(body["statuses"][0]["currentLimit"]["unit"], "HOUR");
    assert_eq!(body["statuses"][0]["limitRemaining"], 1);
    assert!(body["statuses"][0]["durationUntilReset"]
        .as_str()
        .unwrap()
        .ends_with('s'));
    let snake = r#"{"domain":"test-domain","hits_addend":1,"descriptors":[{"entries":[{"key":"multi","value":"j"}]}]}"#;
    assert_eq!(server.post_json(snake).await.0, 200);
    let (status, body) = server.post_json(camel).await;
    assert_eq!(status, 429, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["overallCode"], "OVER_LIMIT");
    let (status, body) = server.post_json("{\"domain\": 3}").await;
    assert_eq!(status, 400);
    assert!(body.contains("RateLimitRequest"), "{body}");
    let (status, _) = server.post_json(r#"{"domain":"","descriptors":[]}"#).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn response_headers_carry_the_ratelimit_fields() {
    let (_dir, server) = start("headers", &["--response-headers"]);
    let answer = server.ask(one(DOMAIN, &[("multi", "h")])).await;
    let field = |answer: &RateLimitResponse, name: &str| {
        answer
            .response_headers_to_add
            .iter()
            .find(|h| h.key.eq_ignore_ascii_case(name))
            .map(|h| h.value.clone())
    };
    assert_eq!(
        field(&answer, "RateLimit-Policy").as_deref(),
        Some("\"multi\";q=2;w=3600")
    );
    let ratelimit = field(&answer, "RateLimit").unwrap();
    assert!(ratelimit.starts_with("\"multi\";r=1;t="), "{ratelimit}");
    assert_eq!(field(&answer, "Retry-After"), None);
    server.ask(one(DOMAIN, &[("multi", "h")])).await;
    let refused = server.ask(one(DOMAIN, &[("multi", "h")])).await;
    assert_eq!(refused.overall_code, over());
    let retry: u64 = field(&refused, "Retry-After").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    // Without the flag, none.
    let (_dir2, plain) = start("headers-off", &[]);
    let answer = plain.ask(one(DOMAIN, &[("multi", "h")])).await;
    assert!(answer.response_headers_to_add.is_empty());
}

/// A request refused by one descriptor consumes nothing from the others.
#[tokio::test]
async fn a_refused_request_consumes_nothing_from_its_other_descriptors() {
    let (_dir, server) = start("atomic", &[]);
    for _ in 0..2 {
        server.ask(one(DOMAIN, &[("multi", "a")])).await;
    }
    for _ in 0..5 {
        let answer = server
            .ask(several(DOMAIN, &[&[("key2", "a")], &[("multi", "a")]]))
            .await;
        assert_eq!(answer.overall_code, over());
    }
    // key2 (3/hour) still has all of its three.
    for remaining in [2, 1, 0] {
        let answer = server.ask(one(DOMAIN, &[("key2", "a")])).await;
        assert_eq!(answer.overall_code, ok());
        assert_eq!(answer.statuses[0].limit_remaining, remaining);
    }
}
