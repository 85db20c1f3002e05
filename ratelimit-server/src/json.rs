//! `RateLimitRequest` and `RateLimitResponse` in protobuf's JSON form: fields in
//! lowerCamelCase (the original snake_case names accepted on input, as protobuf's parsers
//! accept them), enums by name (numbers accepted on input), 64-bit integers as strings or
//! numbers on input, durations as `"1.5s"`, fields at their default value left out.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Reads a request; the error says what is wrong with the JSON.
pub fn request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let parsed: JsonRequest = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not a RateLimitRequest: {e}"))?;
    Ok(RateLimitRequest {
        domain: parsed.domain,
        descriptors: parsed
            .descriptors
            .into_iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .into_iter()
                    .map(|e| Entry {
                        key: e.key,
                        value: e.value,
                    })
                    .collect(),
                limit: d.limit.map(|l| RateLimitOverride {
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit.0,
                }),
                hits_addend: d.hits_addend.map(|Num(value)| UInt64Value { value }),
                is_negative_hits: d.is_negative_hits,
            })
            .collect(),
        hits_addend: parsed.hits_addend.0,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, rename = "hitsAddend", alias = "hits_addend")]
    hits_addend: Num<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(default, rename = "hitsAddend", alias = "hits_addend")]
    hits_addend: Option<Num<u64>>,
    #[serde(default, rename = "isNegativeHits", alias = "is_negative_hits")]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(default, rename = "requestsPerUnit", alias = "requests_per_unit")]
    requests_per_unit: u32,
    #[serde(default)]
    unit: JsonUnit,
}

/// An integer written as a number or a string, as protobuf's JSON allows.
#[derive(Default)]
struct Num<T>(T);

impl<'de, T> Deserialize<'de> for Num<T>
where
    T: TryFrom<u64> + std::str::FromStr,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        let out_of_range = || de::Error::custom("expected a whole number in range");
        match Raw::deserialize(d)? {
            Raw::N(n) => T::try_from(n).map(Num).map_err(|_| out_of_range()),
            Raw::S(s) => s.parse().map(Num).map_err(|_| out_of_range()),
        }
    }
}

/// `envoy.type.v3.RateLimitUnit` by name or number.
#[derive(Default)]
struct JsonUnit(i32);

impl<'de> Deserialize<'de> for JsonUnit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(i32),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(JsonUnit(n)),
            Raw::S(s) => RateLimitUnit::from_str_name(&s)
                .map(|u| JsonUnit(u as i32))
                .ok_or_else(|| {
                    de::Error::custom(format!(
                        "unknown unit `{s}`: expected SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
                    ))
                }),
        }
    }
}

/// Writes an answer.
pub fn response(answer: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    let code = |c: i32| Code::try_from(c).unwrap_or(Code::Unknown).as_str_name();
    if answer.overall_code != 0 {
        out.insert("overallCode".into(), json!(code(answer.overall_code)));
    }
    let statuses: Vec<Value> = answer
        .statuses
        .iter()
        .map(|s| {
            let mut status = Map::new();
            if s.code != 0 {
                status.insert("code".into(), json!(code(s.code)));
            }
            if let Some(limit) = &s.current_limit {
                let mut current = Map::new();
                if !limit.name.is_empty() {
                    current.insert("name".into(), json!(limit.name));
                }
                if limit.requests_per_unit != 0 {
                    current.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
                }
                if limit.unit != 0 {
                    let unit = Unit::try_from(limit.unit).unwrap_or(Unit::Unknown);
                    current.insert("unit".into(), json!(unit.as_str_name()));
                }
                status.insert("currentLimit".into(), Value::Object(current));
            }
            if s.limit_remaining != 0 {
                status.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                status.insert(
                    "durationUntilReset".into(),
                    json!(duration(d.seconds, d.nanos)),
                );
            }
            Value::Object(status)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !answer.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = answer
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

/// A duration as protobuf's JSON writes it: seconds, with 3, 6 or 9 fractional digits when
/// there is a fraction.
fn duration(seconds: i64, nanos: i32) -> String {
    match nanos {
        0 => format!("{seconds}s"),
        n if n % 1_000_000 == 0 => format!("{seconds}.{:03}s", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{seconds}.{:06}s", n / 1_000),
        n => format!("{seconds}.{n:09}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_and_both_integer_forms_are_read() {
        let camel = request(
            br#"{"domain":"d","hitsAddend":3,"descriptors":[{"entries":[{"key":"k","value":"v"}],
                "hitsAddend":"7","limit":{"requestsPerUnit":5,"unit":"MINUTE"}}]}"#,
        )
        .unwrap();
        let snake = request(
            br#"{"domain":"d","hits_addend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],
                "hits_addend":7,"limit":{"requests_per_unit":5,"unit":2}}]}"#,
        )
        .unwrap();
        assert_eq!(camel, snake);
        assert_eq!(camel.hits_addend, 3);
        assert_eq!(
            camel.descriptors[0].hits_addend,
            Some(UInt64Value { value: 7 })
        );
        assert_eq!(
            camel.descriptors[0].limit.unwrap().unit,
            RateLimitUnit::Minute as i32
        );
    }

    #[test]
    fn unknown_fields_and_units_are_refused_with_their_name() {
        let e = request(br#"{"domain":"d","descriptor":[]}"#).unwrap_err();
        assert!(e.contains("descriptor"), "{e}");
        let e = request(br#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#).unwrap_err();
        assert!(e.contains("FORTNIGHT"), "{e}");
    }

    #[test]
    fn durations_are_written_as_protobuf_does() {
        assert_eq!(duration(59, 0), "59s");
        assert_eq!(duration(1, 500_000_000), "1.500s");
        assert_eq!(duration(0, 1_000), "0.000001s");
        assert_eq!(duration(0, 7), "0.000000007s");
    }
}
