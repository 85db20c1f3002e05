//! `RateLimitError` as an HTTP response, with an RFC 9457 problem body.

use std::time::Duration;

use ::axum::http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use ::axum::http::StatusCode;
use ::axum::response::{IntoResponse, Response};

use super::headers::{self, RATELIMIT, RATELIMIT_POLICY};
use crate::{LimitType, RateLimitError, RequestContext};

/// - `Limited`: `429 Too Many Requests` with `Retry-After` (whole seconds, rounded up; none
///   for a call whose cost exceeds a rule's count, which can never pass),
///   `RateLimit-Policy` and `RateLimit` for the binding rule (named `"limit"`; behind a
///   [`RateLimitLayer`](super::RateLimitLayer) they list every rule of the call site
///   instead), and the attribute's `message` as the problem `detail`.
/// - `MissingIdentity`: `500 Internal Server Error` saying what is missing: the layer, the
///   peer address, or a user id.
/// - `Backend`: `503 Service Unavailable`; the cause is logged, not sent.
///
/// Bodies are `application/problem+json` (RFC 9457).
impl IntoResponse for RateLimitError {
    fn into_response(self) -> Response {
        match self {
            RateLimitError::Limited {
                rule,
                retry_after,
                message,
                ..
            } => {
                let mut response = problem(StatusCode::TOO_MANY_REQUESTS, message);
                // `Duration::MAX`: a cost above the rule's count, which no wait lets pass;
                // the client is not invited to retry.
                let never = retry_after == Duration::MAX;
                let wait = if never { rule.window() } else { retry_after };
                let (policy, status) = headers::lone_policy(&rule, wait);
                let headers = response.headers_mut();
                if !never {
                    headers.insert(RETRY_AFTER, headers::retry_after(retry_after));
                }
                headers.insert(RATELIMIT_POLICY, policy);
                headers.insert(RATELIMIT, status);
                response
            }
            RateLimitError::MissingIdentity { limit_type } => {
                let detail = missing_identity(limit_type, RequestContext::current());
                tracing::error!(target: "redis_ratelimit", "{detail}");
                problem(StatusCode::INTERNAL_SERVER_ERROR, &detail)
            }
            RateLimitError::Backend(err) => {
                tracing::error!(
                    target: "redis_ratelimit",
                    error = %err,
                    "rate limiter backend failed; refusing the call (fail-closed)"
                );
                problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the rate limiter is unavailable; try again later",
                )
            }
        }
    }
}

/// Why a request reached a guarded call without the identity its limit type needs.
/// The context is the one the layer set, if any (the response is built inside its scope).
fn missing_identity(limit_type: LimitType, ctx: Option<RequestContext>) -> String {
    let what = match limit_type {
        LimitType::UserId => "a user id",
        _ => "the client IP",
    };
    let why = match (ctx, limit_type) {
        (None, _) => {
            "no rate-limit layer runs in front of this handler: add \
             redis_ratelimit::axum::RateLimitLayer to the router (or run the call inside \
             redis_ratelimit::context::scope)"
        }
        (Some(_), LimitType::UserId) => {
            "the rate-limit layer found no user id for this request: give \
             RateLimitLayer::user_id a closure that finds it, and let only authenticated \
             requests reach USER_ID routes"
        }
        (Some(_), _) => {
            "the rate-limit layer found no peer address: serve the app with \
             into_make_service_with_connect_info::<SocketAddr>()"
        }
    };
    format!("rate limit misconfigured: limit_type = {limit_type} needs {what}, but {why}")
}

/// An `application/problem+json` response: `type` is `about:blank`, so `title` is the
/// status's reason phrase.
fn problem(status: StatusCode, detail: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let mut body = String::with_capacity(96 + detail.len());
    body.push_str(r#"{"type":"about:blank","title":"#);
    push_json_string(&mut body, title);
    body.push_str(r#","status":"#);
    body.push_str(status.as_str());
    body.push_str(r#","detail":"#);
    push_json_string(&mut body, detail);
    body.push('}');
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

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
mod tests {
    use ::axum::body::to_bytes;

    use super::*;
    use crate::context::{self, RequestContext};
    use crate::{BackendError, BackendErrorKind, Rule};

    async fn body_of(response: Response) -> String {
        let bytes = to_bytes(response.into_body(), 64 * 1024).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn limited_is_429_with_retry_after_rounded_up_and_the_rule() {
        let err = RateLimitError::Limited {
            key: "rate_limit:ip:203.0.113.9:app::send_code".into(),
            rule: Rule::per_minute(10),
            retry_after: Duration::from_millis(11_250),
            message: "too many codes, \"slow\" down",
        };
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let headers = response.headers();
        assert_eq!(headers[RETRY_AFTER], "12");
        assert_eq!(headers[RATELIMIT_POLICY], r#""limit";q=10;w=60"#);
        assert_eq!(headers[RATELIMIT], r#""limit";r=0;t=12"#);
        assert_eq!(headers[CONTENT_TYPE], "application/problem+json");
        assert_eq!(
            body_of(response).await,
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many codes, \"slow\" down"}"#
        );
    }

    #[test]
    fn a_cost_that_can_never_pass_is_429_without_retry_after() {
        let err = RateLimitError::Limited {
            key: "rate_limit:custom:tom:app::upload".into(),
            rule: Rule::per_minute(10),
            retry_after: Duration::MAX,
            message: "too many requests",
        };
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let headers = response.headers();
        assert!(!headers.contains_key(RETRY_AFTER));
        assert_eq!(headers[RATELIMIT_POLICY], r#""limit";q=10;w=60"#);
        assert_eq!(headers[RATELIMIT], r#""limit";r=0;t=60"#);
    }

    #[tokio::test]
    async fn backend_failure_is_503_without_its_cause() {
        let err = RateLimitError::Backend(BackendError::new(
            BackendErrorKind::Unavailable,
            "redis://secret@10.0.0.9 refused",
        ));
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        assert!(!response.headers().contains_key(RETRY_AFTER));
        assert_eq!(
            body_of(response).await,
            r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter is unavailable; try again later"}"#
        );
    }

    #[tokio::test]
    async fn missing_identity_is_500_naming_the_missing_layer() {
        let err = RateLimitError::MissingIdentity {
            limit_type: LimitType::Ip,
        };
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(
            body_of(response).await,
            "{\"type\":\"about:blank\",\"title\":\"Internal Server Error\",\"status\":500,\
             \"detail\":\"rate limit misconfigured: limit_type = IP needs the client IP, but no \
             rate-limit layer runs in front of this handler: add \
             redis_ratelimit::axum::RateLimitLayer to the router (or run the call inside \
             redis_ratelimit::context::scope)\"}"
        );
    }

    #[tokio::test]
    async fn missing_identity_inside_the_layer_names_what_the_layer_lacked() {
        let respond = |limit_type| {
            context::scope(RequestContext::new(), async move {
                let response = RateLimitError::MissingIdentity { limit_type }.into_response();
                assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
                body_of(response).await
            })
        };
        let body = respond(LimitType::UserId).await;
        assert!(
            body.contains("USER_ID needs a user id, but the rate-limit layer found no user id"),
            "{body}"
        );
        let body = respond(LimitType::Ip).await;
        assert!(
            body.contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "{body}"
        );
    }

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        let mut out = String::new();
        push_json_string(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
    }
}
