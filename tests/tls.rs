//! `rediss://`: checks over TLS to a real `redis-server` whose certificate a throwaway CA
//! signed; trusted through `with_tls_ca`, refused (clearly, before the timeout) without it.

mod support;

use std::time::Duration;

use redis_ratelimit::{BackendErrorKind, Limiter, Rule};
use support::tls::TlsRedisServer;

const THREE_PER_MINUTE: [Rule; 1] = [Rule::new(3, Duration::from_secs(60))];

#[tokio::test]
async fn checks_over_tls_with_a_private_ca_count_exactly() {
    let server = TlsRedisServer::start();
    let limiter = support::counting_limiter(&server.url())
        .with_tls_ca(&server.ca_pem())
        .unwrap();
    for key in ["tls:a", "tls:b"] {
        let mut allowed = 0;
        for _ in 0..5 {
            allowed += u32::from(limiter.check(key, &THREE_PER_MINUTE).await.unwrap().allowed);
        }
        assert_eq!(allowed, 3, "{key}");
        // The entries are on the server, seen through its plain port.
        let entries: u64 = redis::cmd("ZCARD")
            .arg(key)
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(entries, 3, "{key}");
    }
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_clear_error_before_the_timeout() {
    let server = TlsRedisServer::start();
    // The system's roots do not include the test's CA. Had the check waited for its
    // timeout, it would say so (`Timeout`); the refusal comes first.
    let limiter = support::counting_limiter(&server.url());
    let err = limiter.check("tls:k", &THREE_PER_MINUTE).await.unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Misconfigured, "{err}");
    let message = err.to_string();
    assert!(message.contains("not trusted"), "{message}");
    assert!(message.contains("with_tls_ca"), "{message}");
}

#[test]
fn with_tls_ca_says_what_is_wrong() {
    for (limiter, pem, says) in [
        (
            Limiter::redis("redis://127.0.0.1:6379").unwrap(),
            &b""[..],
            "rediss://",
        ),
        (
            Limiter::redis("rediss://127.0.0.1:6379").unwrap(),
            b"not a certificate",
            "BEGIN CERTIFICATE",
        ),
        (Limiter::memory(), b"", "rediss://"),
    ] {
        let err = limiter.with_tls_ca(pem).err().unwrap();
        assert!(err.to_string().contains(says), "{err}");
    }
}
