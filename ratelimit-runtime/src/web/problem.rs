//! What a [`RateLimitError`] answers: a status and an RFC 9457 problem body, the same for
//! every framework.

use crate::throttle::{throttled, OnceEach};
#[cfg(any(feature = "axum", feature = "tonic"))]
use crate::web::peer::PeerSource;
use crate::{LimitType, RateLimitError, RequestContext};

/// The integration answering, for the advice a misconfiguration's message gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Integration {
    #[cfg(feature = "axum")]
    Axum,
    #[cfg(feature = "tonic")]
    Tonic,
    #[cfg(feature = "actix")]
    Actix,
    /// A tower layer (axum's, tonic's, or one over hyper) answering a guard's refusal:
    /// `peer` is how its server records the peer address where the layer looks (its
    /// [`PeerSource`](crate::web::peer::PeerSource)).
    #[cfg(feature = "tower")]
    Tower { peer: &'static str },
}

impl Integration {
    /// How to put the integration in front of a handler.
    fn install(self) -> &'static str {
        match self {
            #[cfg(feature = "axum")]
            Integration::Axum => "add redis_ratelimit::axum::RateLimitLayer to the router",
            #[cfg(feature = "tonic")]
            Integration::Tonic => {
                "add redis_ratelimit::tonic::RateLimitLayer to the server \
                 (Server::builder().layer(...))"
            }
            #[cfg(feature = "actix")]
            Integration::Actix => "wrap the app in redis_ratelimit::actix::RateLimit",
            #[cfg(feature = "tower")]
            Integration::Tower { .. } => {
                "add a redis_ratelimit::tower::RateLimitLayer in front of the service"
            }
        }
    }

    /// How to let the integration see the peer address.
    fn peer(self) -> &'static str {
        match self {
            #[cfg(feature = "axum")]
            Integration::Axum => {
                <::axum::extract::ConnectInfo<std::net::SocketAddr> as PeerSource>::HOW_TO_RECORD
            }
            #[cfg(feature = "tonic")]
            Integration::Tonic => {
                <::tonic::transport::server::TcpConnectInfo as PeerSource>::HOW_TO_RECORD
            }
            #[cfg(feature = "actix")]
            Integration::Actix => "the connection has no peer address (a Unix socket?)",
            #[cfg(feature = "tower")]
            Integration::Tower { peer } => peer,
        }
    }

    /// Where to give the integration a way to find user ids.
    fn user_id(self) -> &'static str {
        match self {
            #[cfg(feature = "axum")]
            Integration::Axum => "RateLimitLayer::user_id",
            #[cfg(feature = "tonic")]
            Integration::Tonic => "RateLimitLayer::user_id",
            #[cfg(feature = "actix")]
            Integration::Actix => "RateLimit::user_id",
            #[cfg(feature = "tower")]
            Integration::Tower { .. } => "RateLimitLayer::user_id",
        }
    }
}

/// An HTTP problem (`application/problem+json`, RFC 9457): `type` is `about:blank`, so
/// `title` is the status's reason phrase; a refusal's is draft-ietf-httpapi-ratelimit-headers-11's
/// `quota-exceeded`, naming the policies it violated (as `RateLimit-Policy` names them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    pub status: u16,
    pub detail: String,
    /// A refusal's `violated-policies`.
    pub violated: Option<String>,
}

/// The problem type of a refusal (draft-ietf-httpapi-ratelimit-headers-11, "Quota
/// Exceeded").
pub(crate) const QUOTA_EXCEEDED: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The media type of [`Problem::body`].
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// The detail of a backend failure: the cause is logged, never sent.
pub(crate) const UNAVAILABLE: &str = "the rate limiter is unavailable; try again later";

/// The detail of a misconfiguration refusal (no identity for an `IP` or `USER_ID` site):
/// what to configure is logged, never sent, as it tells a client how the server is set up.
pub(crate) const MISCONFIGURED: &str = "the server could not handle this request";

/// The status each error answers, for every framework: 429 for `Limited`, 500 for
/// `MissingIdentity`, 503 for `Backend`.
pub(crate) fn status_of(err: &RateLimitError) -> u16 {
    match err {
        RateLimitError::Limited { .. } => 429,
        RateLimitError::MissingIdentity { .. } => 500,
        RateLimitError::Backend(_) => 503,
    }
}

impl Problem {
    /// The problem `err` answers, with its [status](status_of), logging what the client is
    /// not told.
    ///
    /// - `Limited`: 429 with the attribute's `message`;
    /// - `MissingIdentity`: a generic 500; what is missing (the integration, the peer
    ///   address, a user id, as read from the current request context) is logged;
    /// - `Backend`: 503.
    pub(crate) fn of(err: &RateLimitError, integration: Integration) -> Problem {
        let mut violated = None;
        let detail = match err {
            RateLimitError::Limited {
                message,
                rule,
                retry_after,
                ..
            } => {
                let refusal = crate::web::refusal::Refusal::of(rule, *retry_after);
                violated = Some(refusal.policy.clone());
                refusal.detail(message)
            }
            RateLimitError::MissingIdentity { limit_type } => {
                log_missing_identity(&missing_identity(
                    *limit_type,
                    RequestContext::current(),
                    integration,
                ));
                MISCONFIGURED.to_owned()
            }
            RateLimitError::Backend(cause) => {
                log_backend_failure(cause);
                UNAVAILABLE.to_owned()
            }
        };
        Problem {
            status: status_of(err),
            detail,
            violated,
        }
    }

    /// The reason phrase of the statuses a problem has.
    fn title(&self) -> &'static str {
        match self.status {
            429 => "Too Many Requests",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "Error",
        }
    }

    /// `{"type":"about:blank","title":...,"status":...,"detail":...}`.
    pub(crate) fn body(&self) -> String {
        let mut body = String::with_capacity(96 + self.detail.len());
        body.push_str(r#"{"type":"#);
        push_json_string(
            &mut body,
            self.violated
                .as_ref()
                .map_or("about:blank", |_| QUOTA_EXCEEDED),
        );
        body.push_str(r#","title":"#);
        push_json_string(&mut body, self.title());
        body.push_str(r#","status":"#);
        body.push_str(&self.status.to_string());
        body.push_str(r#","detail":"#);
        push_json_string(&mut body, &self.detail);
        if let Some(violated) = &self.violated {
            body.push_str(r#","violated-policies":["#);
            push_json_string(&mut body, violated);
            body.push(']');
        }
        body.push('}');
        body
    }
}

/// Logs a fail-closed refusal's cause, which the client is not told: once per
/// [`LogThrottle::INTERVAL`](crate::throttle::LogThrottle::INTERVAL), with how many were
/// held back, as an outage refuses every request.
pub(crate) fn log_backend_failure(cause: &crate::BackendError) {
    throttled!(
        error,
        [error = %cause],
        "rate limiter backend failed; refusing the call (fail-closed)",
    );
}

/// Logs what a request that reached a guarded call without its identity lacked, and how
/// to give it: a configuration error, which then hits every such request, so each
/// distinct cause is logged once (the site is named once by the check, `site.rs`).
pub(crate) fn log_missing_identity(detail: &str) {
    static SEEN: OnceEach = OnceEach::new();
    if SEEN.first(detail) {
        tracing::error!(target: "redis_ratelimit", "{detail}");
    }
}

/// Why a request reached a guarded call without the identity its limit type needs.
/// The context is the one the integration set, if any (the answer is built inside its
/// scope).
pub(crate) fn missing_identity(
    limit_type: LimitType,
    ctx: Option<RequestContext>,
    integration: Integration,
) -> String {
    let what = match limit_type {
        LimitType::UserId => "a user id",
        _ => "the client IP",
    };
    let why = match (ctx, limit_type) {
        (None, _) => format!(
            "no rate-limit layer runs in front of this handler: {} (or run the call inside \
             redis_ratelimit::context::scope)",
            integration.install()
        ),
        (Some(_), LimitType::UserId) => format!(
            "the rate-limit layer found no user id for this request: give {} a closure that \
             finds it, and let only authenticated requests reach USER_ID routes",
            integration.user_id()
        ),
        (Some(_), _) => format!(
            "the rate-limit layer found no peer address: {}",
            integration.peer()
        ),
    };
    format!("rate limit misconfigured: limit_type = {limit_type} needs {what}, but {why}")
}

// HTTP bodies only; gRPC carries the detail as the status message.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = std::fmt::Write::write_fmt(out, format_args!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{BackendError, BackendErrorKind, Rule};

    /// Refused under 10 calls a minute, to be retried in 11.25 s, with `message`.
    pub(crate) fn limited(message: &'static str) -> RateLimitError {
        RateLimitError::Limited {
            key: "rate_limit:ip:203.0.113.9:app::send_code".into(),
            rule: Rule::per_minute(10),
            retry_after: Duration::from_millis(11_250),
            message,
        }
    }

    /// Asserts the fields a [`limited`] error answers with, as `field` reads them from a
    /// response: the rule alone (named `limit`), and the wait rounded up.
    #[cfg_attr(
        not(any(feature = "axum", feature = "tonic", feature = "actix")),
        allow(dead_code)
    )]
    pub(crate) fn assert_limited_fields<'a>(field: impl Fn(&str) -> Option<&'a str>) {
        assert_eq!(field("retry-after"), Some("12"));
        assert_eq!(field("ratelimit-policy"), Some(r#""limit";q=10;w=60"#));
        assert_eq!(field("ratelimit"), Some(r#""limit";r=0;t=12"#));
    }

    /// Refused under 10 calls a minute for a cost above 10: it never passes.
    #[cfg_attr(not(any(feature = "axum", feature = "tonic")), allow(dead_code))]
    pub(crate) fn never_passes() -> RateLimitError {
        RateLimitError::Limited {
            key: "rate_limit:custom:tom:app::upload".into(),
            rule: Rule::per_minute(10),
            retry_after: Duration::MAX,
            message: "too many requests",
        }
    }

    /// A fail-closed backend failure whose cause holds a password: never to be sent.
    pub(crate) fn backend_failure() -> RateLimitError {
        RateLimitError::Backend(BackendError::new(
            BackendErrorKind::Unavailable,
            "redis://secret@10.0.0.9 refused",
        ))
    }

    fn any_integration() -> Integration {
        #[cfg(feature = "axum")]
        return Integration::Axum;
        #[cfg(all(not(feature = "axum"), feature = "tonic"))]
        return Integration::Tonic;
        #[cfg(all(not(feature = "axum"), not(feature = "tonic"), feature = "actix"))]
        return Integration::Actix;
        #[cfg(all(not(feature = "axum"), not(feature = "tonic"), not(feature = "actix")))]
        return Integration::Tower { peer: "" };
    }

    #[test]
    fn each_error_has_its_status_and_a_detail_that_leaks_nothing() {
        let limited = limited("too many codes, \"slow\" down");
        let problem = Problem::of(&limited, any_integration());
        assert_eq!(problem.status, 429);
        assert_eq!(
            problem.body(),
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"too many codes, \"slow\" down (the limit of 10 per 60s is reached; retry in 12s)","violated-policies":["limit"]}"#
        );
        let backend = backend_failure();
        assert_eq!(
            Problem::of(&backend, any_integration()).body(),
            r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter is unavailable; try again later"}"#
        );
        let missing = RateLimitError::MissingIdentity {
            limit_type: LimitType::Ip,
        };
        let problem = Problem::of(&missing, any_integration());
        assert_eq!(problem.status, 500);
        assert_eq!(
            problem.body(),
            r#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"the server could not handle this request"}"#
        );
    }

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        let mut out = String::new();
        push_json_string(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
    }
}
