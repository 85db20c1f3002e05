//! End to end: the `grpc_server` example's service served by tonic on loopback and called
//! with a real tonic client, on a real `redis-server` and on the memory backend. The
//! guarded method is an `#[async_trait]` trait method. Every status and rate-limit
//! metadata entry is checked for its exact value.

mod support;

#[allow(dead_code)] // the example's `main` is not run here
#[path = "../examples/grpc_server.rs"]
mod grpc_server;

use grpc_server::{send_code, CodeReply, SmsServer, SmsService};
use redis_ratelimit::tonic::{ProxyHeader, RateLimitLayer};
use redis_ratelimit::Limiter;
use support::http::{grpc_channel_from as channel_from, metadata_field as field};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Response, Status};

const POLICY: &str = r#""p1";q=5;w=60, "dup";q=1;w=5"#;
const LIMITED: &str = "too many verification codes; wait before asking for another";

/// Serves the example's service on `ip`, port 0, behind `layer` (none: no layer), until the
/// test ends. Returns the base URL.
async fn serve(limiter: &'static Limiter, layer: Option<RateLimitLayer>, ip: &str) -> String {
    let (listener, base) = support::http::listen_tokio(ip);
    let incoming = TcpIncoming::from(listener);
    let service = SmsServer::new(SmsService { limiter });
    tokio::spawn(async move {
        let served = match layer {
            Some(layer) => {
                Server::builder()
                    .layer(layer)
                    .add_service(service)
                    .serve_with_incoming(incoming)
                    .await
            }
            None => {
                Server::builder()
                    .add_service(service)
                    .serve_with_incoming(incoming)
                    .await
            }
        };
        served.expect("serve");
    });
    base
}

fn layer_trusting_127_0_0_2(header: ProxyHeader) -> RateLimitLayer {
    grpc_server::rate_limit_layer()
        .trust_proxies(["127.0.0.2/32"])
        .proxy_header(header)
}

fn allowed(answer: Result<Response<CodeReply>, Status>) -> Response<CodeReply> {
    answer.unwrap_or_else(|status| panic!("expected OK, got {status:?}"))
}

fn refused(answer: Result<Response<CodeReply>, Status>) -> Status {
    match answer {
        Ok(response) => panic!("expected a refusal, got {response:?}"),
        Err(status) => status,
    }
}

async fn call(
    channel: &Channel,
    metadata: &[(&'static str, &str)],
) -> Result<Response<CodeReply>, Status> {
    send_code(channel.clone(), "+1 555 0100", metadata).await
}

backend_tests! {
    async fn a_repeated_code_request_is_resource_exhausted_with_every_field() {
        let base = serve(support::limiter(), Some(grpc_server::rate_limit_layer()), "127.0.0.1").await;
        let channel = channel_from(&base, "127.0.0.1").await;

        let first = allowed(call(&channel, &[]).await);
        assert_eq!(first.get_ref().message, "code sent to +1 555 0100");
        assert_eq!(field(first.metadata(), "ratelimit-policy"), Some(POLICY));
        assert_eq!(field(first.metadata(), "ratelimit"), Some(r#""dup";r=0;t=5"#));
        assert_eq!(field(first.metadata(), "retry-after"), None);

        let second = refused(call(&channel, &[]).await);
        assert_eq!(second.code(), Code::ResourceExhausted);
        assert_eq!(second.message(), LIMITED);
        let metadata = second.metadata();
        assert_eq!(field(metadata, "retry-after"), Some("5"));
        assert_eq!(field(metadata, "ratelimit-policy"), Some(POLICY));
        assert_eq!(field(metadata, "ratelimit"), Some(r#""dup";r=0;t=5"#));
    }

    async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_changes_nothing() {
        let layer = layer_trusting_127_0_0_2(ProxyHeader::XForwardedFor);
        let base = serve(support::limiter(), Some(layer), "127.0.0.1").await;
        let channel = channel_from(&base, "127.0.0.1").await;
        allowed(call(&channel, &[("x-forwarded-for", "198.51.100.1")]).await);
        for spoof in ["198.51.100.2", "garbage", "198.51.100.3, 127.0.0.2"] {
            let again = refused(call(&channel, &[("x-forwarded-for", spoof)]).await);
            assert_eq!(again.code(), Code::ResourceExhausted, "{spoof}");
        }
        let real_ip = refused(call(&channel, &[("x-real-ip", "198.51.100.9")]).await);
        assert_eq!(real_ip.code(), Code::ResourceExhausted);
    }

    async fn x_forwarded_for_is_believed_from_a_trusted_proxy() {
        let layer = layer_trusting_127_0_0_2(ProxyHeader::XForwardedFor);
        let base = serve(support::limiter(), Some(layer), "127.0.0.1").await;
        let proxy = channel_from(&base, "127.0.0.2").await;

        allowed(call(&proxy, &[("x-forwarded-for", "198.51.100.1")]).await);
        // Another client behind the same proxy has a budget of its own.
        allowed(call(&proxy, &[("x-forwarded-for", "198.51.100.2")]).await);
        // The first client again, having prepended a fake address: walked from the right,
        // the proxy's entry is the first untrusted one.
        let spoofing = [("x-forwarded-for", "203.0.113.66, 198.51.100.1")];
        let again = refused(call(&proxy, &spoofing).await);
        assert_eq!(again.code(), Code::ResourceExhausted);
        assert_eq!(field(again.metadata(), "ratelimit"), Some(r#""dup";r=0;t=5"#));
        // Without the header the proxy itself is the client.
        allowed(call(&proxy, &[]).await);
        refused(call(&proxy, &[]).await);
    }

    async fn forwarded_ipv6_clients_share_their_64() {
        let layer = layer_trusting_127_0_0_2(ProxyHeader::Forwarded);
        let base = serve(support::limiter(), Some(layer), "127.0.0.1").await;
        let proxy = channel_from(&base, "127.0.0.2").await;
        let from = |node: &'static str| [("forwarded", node)];
        allowed(call(&proxy, &from(r#"for="[2001:db8:1:2::1]:4711";proto=http"#)).await);
        // Another address of the same /64 is the same client.
        refused(call(&proxy, &from(r#"for="[2001:db8:1:2:ffff::9]""#)).await);
        allowed(call(&proxy, &from(r#"for="[2001:db8:1:3::1]""#)).await);
        // An IPv4-mapped address is the IPv4 client.
        allowed(call(&proxy, &from(r#"for="[::ffff:198.51.100.7]""#)).await);
        refused(call(&proxy, &from("for=198.51.100.7:80")).await);
    }

    async fn an_ipv6_loopback_peer_is_served_and_counted() {
        let base = serve(support::limiter(), Some(grpc_server::rate_limit_layer()), "::1").await;
        let channel = channel_from(&base, "::1").await;
        allowed(call(&channel, &[]).await);
        let again = refused(call(&channel, &[]).await);
        assert_eq!(field(again.metadata(), "retry-after"), Some("5"));
    }

    async fn a_server_without_the_layer_answers_a_generic_internal_error() {
        let base = serve(support::limiter(), None, "127.0.0.1").await;
        let channel = channel_from(&base, "127.0.0.1").await;
        let status = refused(call(&channel, &[]).await);
        assert_eq!(status.code(), Code::Internal);
        assert_eq!(status.message(), "the server could not handle this request");
        assert_eq!(field(status.metadata(), "ratelimit"), None);
    }

    async fn exempt_requests_are_never_counted() {
        // The "health checker" is the peer 127.0.0.3.
        let layer = grpc_server::rate_limit_layer().exempt(|req| {
            req.extensions()
                .get::<tonic::transport::server::TcpConnectInfo>()
                .and_then(|info| info.remote_addr())
                .is_some_and(|addr| addr.ip() == std::net::IpAddr::from([127, 0, 0, 3]))
        });
        let base = serve(support::limiter(), Some(layer), "127.0.0.1").await;
        let checker = channel_from(&base, "127.0.0.3").await;
        for _ in 0..3 {
            let answer = allowed(call(&checker, &[]).await);
            assert_eq!(field(answer.metadata(), "ratelimit"), None);
        }
        let other = channel_from(&base, "127.0.0.4").await;
        allowed(call(&other, &[]).await);
        refused(call(&other, &[]).await);
    }
}

/// A fail-closed limiter whose Redis is gone answers UNAVAILABLE, without the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_closed_limiter_without_redis_answers_unavailable() {
    let mut server = support::RedisServer::start();
    let limiter = support::http::limiter_on(&server, false);
    let base = serve(limiter, Some(grpc_server::rate_limit_layer()), "127.0.0.1").await;
    let channel = channel_from(&base, "127.0.0.1").await;
    allowed(call(&channel, &[]).await);

    server.kill();
    let status = refused(call(&channel, &[]).await);
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.message(),
        "the rate limiter is unavailable; try again later"
    );
    assert_eq!(field(status.metadata(), "ratelimit"), None);
}
