//! `--response-headers`: the answer's `response_headers_to_add`, for the descriptor closest
//! to its limit, in the fields of draft-ietf-httpapi-ratelimit-headers-11 as the library's
//! HTTP layer writes them: `RateLimit-Policy: "<name>";q=<count>;w=<window s>` (no `w` for
//! a calendar period), `RateLimit: "<name>";r=<remaining>;t=<s until reset>`, and
//! `Retry-After: <s>` when the request is over.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
use redis_ratelimit::Decision;

use crate::config::Limit;

/// The fields of `limit`'s answer (`decision`, when it was asked).
pub fn fields(
    limit: &Limit,
    decision: Option<&Decision>,
    status: &DescriptorStatus,
    over: bool,
) -> Vec<HeaderValue> {
    let name =
        limit
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(if limit.path.is_empty() {
                "own_limit"
            } else {
                &limit.path
            });
    let name = sf_string(name);
    let rule = decision
        .map(|d| d.rule)
        .or_else(|| limit.rules.first().copied());
    let mut policy = name.clone();
    if let Some(rule) = rule {
        policy.push_str(&format!(";q={}", rule.count()));
        if rule.calendar().is_none() {
            policy.push_str(&format!(";w={}", ceil_secs(rule.window())));
        }
    }
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds as u64 + u64::from(d.nanos > 0));
    let mut headers = vec![
        header("RateLimit-Policy", policy),
        header(
            "RateLimit",
            format!("{name};r={};t={reset}", status.limit_remaining),
        ),
    ];
    if over {
        let retry = decision
            .and_then(|d| d.retry_after)
            .map_or(reset, ceil_secs);
        headers.push(header("Retry-After", retry.max(1).to_string()));
    }
    headers
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..HeaderValue::default()
    }
}

/// Whole seconds, rounded up: a client waiting that long finds room.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `text` as a structured-field string: quoted, `"` and `\` escaped, anything outside
/// printable ASCII dropped.
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::sf_string;

    #[test]
    fn names_are_structured_field_strings() {
        assert_eq!(sf_string("key1_value1.sub"), "\"key1_value1.sub\"");
        assert_eq!(sf_string("a\"b\\c\u{e9}"), "\"a\\\"b\\\\c\"");
    }
}
