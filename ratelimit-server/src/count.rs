//! A request -> one `check_all` -> the answer. The one place a request is counted; the
//! gRPC and HTTP faces only translate to and from it.
//!
//! What it decides, as envoyproxy/ratelimit does (`src/service/ratelimit.go`) unless said:
//! - each descriptor's limit: its own `limit` (when the domain is configured), else the
//!   configuration's match ([`crate::matcher`]); `unlimited` answers `OK` with
//!   `limit_remaining` u32::MAX and asks no backend; a limit whose `name` another matched
//!   limit `replaces` is not counted;
//! - its cost: its own `hits_addend`, else the request's; 0 means 1;
//! - **all descriptors are counted as one**: when any descriptor that enforces (not
//!   `shadow_mode`, not `quota_mode`) is over, or every `quota_mode` descriptor is, the
//!   answer is `OVER_LIMIT` and no descriptor consumed anything (there, the others consume
//!   anyway). A shadow or quota descriptor that is over on its own is answered over (shadow:
//!   `OK`) and the request is counted again without it, so the others consume their cost.

use std::io::Write as _;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use redis_ratelimit::key::push_identity;
use redis_ratelimit::{BackendError, BackendErrorKind, Decision, Limiter};

use crate::config::load::rule_of;
use crate::config::{Answer, Limit, Loaded};
use crate::headers;
use crate::matcher::{self, Entry};
use crate::metrics::{HitResult, Hits, ServiceMetrics};

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 32;
/// The longest key or value of an entry, in bytes.
pub const MAX_ENTRY_BYTES: usize = 4096;

/// The service: the engine, the configuration in force, and how it answers.
pub struct Service {
    pub limiter: Limiter,
    /// Swapped whole by a reload; each request reads one version of it.
    pub config: ArcSwap<Loaded>,
    /// Also the prefix of the bans hash read (`{prefix}bans`, as `ratelimit ban --prefix`
    /// writes it); `'static` as the limiter's poller keeps it.
    pub prefix: &'static str,
    pub fail_open: bool,
    pub response_headers: bool,
    pub metrics: ServiceMetrics,
    /// Set at shutdown: health checks answer that the service is going away.
    pub draining: AtomicBool,
}

/// Why a request got no answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// The request is malformed: gRPC `INVALID_ARGUMENT`, HTTP 400.
    Invalid(String),
    /// The backend could not be reached (and `--fail-open` is off): gRPC `UNAVAILABLE`,
    /// HTTP 503.
    Unavailable(String),
}

/// One descriptor of a request on its way through the count.
struct Target {
    limit: Arc<Limit>,
    key: String,
    cost: u64,
    /// Its counters when named by the request's values.
    detailed: Option<Hits>,
    state: State,
}

#[derive(Clone, Copy)]
enum State {
    /// To be checked with the others.
    Pending,
    /// Admitted and counted.
    Passed(Decision),
    /// Would pass, but was not counted: another descriptor refused the request's round.
    Unconsumed(Decision),
    /// Over its limit (`None`: a limit of 0, over without asking).
    Over(Option<Decision>),
    /// Its `remote_address` is banned ([`Limiter::ban`]) for this long still: over,
    /// without asking.
    Banned(Duration),
}

impl Service {
    /// Answers one `ShouldRateLimit` request.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Failure> {
        let started = Instant::now();
        let answer = self.answer(request).await;
        self.metrics.took(started.elapsed());
        answer
    }

    async fn answer(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Failure> {
        validate(request)?;
        let config = self.config.load_full();
        let Some(domain) = config.domains.get(&request.domain) else {
            self.metrics.unknown_domain.count(false);
            return Ok(all_ok(request));
        };
        let request_hits = u64::from(request.hits_addend.max(1));
        let mut targets: Vec<Option<Target>> = Vec::with_capacity(request.descriptors.len());
        for descriptor in &request.descriptors {
            targets.push(self.target(domain, descriptor, request_hits)?);
        }
        replace(&mut targets);

        // Rounds: a round counts every pending descriptor as one. When only shadow or
        // quota descriptors are over, that round consumed nothing (all or nothing), so the
        // others are counted again without them. Each round settles at least one
        // descriptor, so there are at most as many rounds as descriptors.
        let over = loop {
            if is_over(&targets) {
                break true;
            }
            let pending: Vec<usize> = (0..targets.len())
                .filter(|&i| {
                    targets[i].as_ref().is_some_and(|t| {
                        matches!(t.state, State::Pending | State::Unconsumed(_))
                            && !t.limit.unlimited
                    })
                })
                .collect();
            if pending.is_empty() {
                break false;
            }
            let checks: Vec<_> = pending
                .iter()
                .map(|&i| {
                    let t = targets[i].as_ref().expect("pending targets exist");
                    let check = self
                        .limiter
                        .check(&t.key, &t.limit.rules)
                        .cost(t.cost)
                        .algorithm(t.limit.algorithm);
                    match t.limit.allowance {
                        Some(allowance) => check.allowance(allowance),
                        None => check,
                    }
                })
                .collect();
            let decisions = match self.limiter.check_all(checks).await {
                Ok(decisions) => decisions,
                Err(e) => return self.backend_failed(request, domain, e),
            };
            let admitted = decisions.iter().all(|d| d.allowed);
            for (&i, decision) in pending.iter().zip(decisions) {
                let t = targets[i].as_mut().expect("pending targets exist");
                t.state = match (decision.allowed, admitted) {
                    (true, true) => State::Passed(decision),
                    (true, false) => State::Unconsumed(decision),
                    (false, _) => State::Over(Some(decision)),
                };
            }
            if admitted {
                break false;
            }
        };
        Ok(self.respond(request, domain, &targets, over))
    }

    /// The target of one descriptor, or `None` when no limit applies to it.
    fn target(
        &self,
        domain_config: &crate::config::Domain,
        descriptor: &RateLimitDescriptor,
        request_hits: u64,
    ) -> Result<Option<Target>, Failure> {
        let entries: Vec<Entry<'_>> = descriptor
            .entries
            .iter()
            .map(|e| Entry {
                key: &e.key,
                value: &e.value,
            })
            .collect();
        let cost = match descriptor.hits_addend.as_ref().map(|h| h.value) {
            Some(0) | None => request_hits,
            Some(n) => n,
        };
        let domain = domain_config.name.as_str();
        if let Some(own) = &descriptor.limit {
            let limit = own_limit(own, domain_config)?;
            let key = self.key(domain, &entries, None);
            return Ok(Some(Target {
                limit: Arc::new(limit),
                key,
                cost,
                detailed: None,
                state: self.ban_of(&entries).unwrap_or(State::Pending),
            }));
        }
        let Some(found) = matcher::find(domain_config, &entries) else {
            return Ok(None);
        };
        let detailed = match found.names_values() {
            true => found
                .limit
                .detailed
                .get(domain, &found.metric_name(&entries)),
            false => None,
        };
        let limit = found.limit.clone();
        let state = match (self.ban_of(&entries), limit.refuse_all) {
            (Some(banned), _) => banned,
            (None, true) => State::Over(None),
            (None, false) => State::Pending,
        };
        Ok(Some(Target {
            key: self.key(domain, &entries, Some(&found)),
            limit,
            cost,
            detailed,
            state,
        }))
    }

    /// [`State::Banned`] when an entry `remote_address` is a banned address (or in a banned
    /// network), as `ratelimit ban ip:…` refuses the library's sites: no I/O, and no
    /// allocation while nothing is banned.
    fn ban_of(&self, entries: &[Entry<'_>]) -> Option<State> {
        entries
            .iter()
            .filter(|e| e.key == "remote_address")
            .filter_map(|e| e.value.parse::<IpAddr>().ok())
            .filter_map(|ip| {
                // `ip:` and the longest address text (45 bytes), written in place.
                let mut text = [0u8; 48];
                let mut cursor = std::io::Cursor::new(&mut text[..]);
                write!(cursor, "ip:{ip}").ok()?;
                let written = cursor.position() as usize;
                let identity = std::str::from_utf8(&text[..written]).ok()?;
                self.limiter.banned_under(self.prefix, identity)
            })
            .max()
            .map(State::Banned)
    }

    /// `{prefix}rls:{domain}:{k1}_{v1}:{k2}_{v2}...`, each part escaped (and a long one
    /// hashed) as the library escapes identities; a shared wildcard's entry counted under
    /// its pattern; a `remote_address` in its canonical form.
    fn key(
        &self,
        domain: &str,
        entries: &[Entry<'_>],
        found: Option<&matcher::Found<'_>>,
    ) -> String {
        let mut key =
            String::with_capacity(self.prefix.len() + 8 + domain.len() + 32 * entries.len());
        key.push_str(self.prefix);
        key.push_str("rls:");
        push_identity(&mut key, domain);
        for (i, entry) in entries.iter().enumerate() {
            key.push(':');
            let value = found.and_then(|f| f.shared_value(i)).unwrap_or(entry.value);
            match (entry.key, value.parse::<IpAddr>()) {
                ("remote_address", Ok(ip)) => {
                    push_identity(&mut key, format_args!("{}_{ip}", entry.key))
                }
                _ => push_identity(&mut key, format_args!("{}_{value}", entry.key)),
            }
        }
        key
    }

    fn backend_failed(
        &self,
        request: &RateLimitRequest,
        domain: &crate::config::Domain,
        error: BackendError,
    ) -> Result<RateLimitResponse, Failure> {
        if error.kind() == BackendErrorKind::CostTooLarge {
            return Err(Failure::Invalid(format!(
                "a hits_addend too large for its descriptor's algorithm: {error}"
            )));
        }
        if !self.fail_open {
            tracing::warn!(domain = %request.domain, error = %error, "the backend failed: answering UNAVAILABLE");
            return Err(Failure::Unavailable(format!(
                "the rate-limit backend cannot be reached ({error}); start the service with --fail-open to answer OK meanwhile"
            )));
        }
        tracing::warn!(domain = %request.domain, error = %error, "the backend failed: answering OK (--fail-open)");
        self.metrics.error();
        domain.requests.count(false);
        Ok(all_ok(request))
    }

    fn respond(
        &self,
        request: &RateLimitRequest,
        domain: &crate::config::Domain,
        targets: &[Option<Target>],
        over: bool,
    ) -> RateLimitResponse {
        domain.requests.count(over);
        let mut closest: Option<(&Target, &DescriptorStatus)> = None;
        let statuses: Vec<DescriptorStatus> = targets
            .iter()
            .map(|t| match t {
                None => ok_without_limit(),
                Some(t) => status(t),
            })
            .collect();
        for (t, status) in targets.iter().zip(&statuses) {
            let Some(t) = t else { continue };
            if t.limit.unlimited {
                continue;
            }
            let result = hit_result(t, status);
            match &t.detailed {
                Some(hits) => hits.count(result),
                None => t.limit.hits.count(result),
            }
            let closer = match closest {
                None => true,
                Some((_, best)) => {
                    let over_now = status.code == Code::OverLimit as i32;
                    let best_over = best.code == Code::OverLimit as i32;
                    (over_now && !best_over)
                        || (over_now == best_over && status.limit_remaining < best.limit_remaining)
                }
            };
            if closer && status.current_limit.is_some() {
                closest = Some((t, status));
            }
        }
        let mut response = RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            ..RateLimitResponse::default()
        };
        if self.response_headers {
            if let Some((t, status)) = closest {
                response.response_headers_to_add =
                    headers::fields(&t.limit, decision_of(t), status, over);
            }
        }
        let _ = request;
        response.statuses = statuses;
        response
    }
}

/// Whether the request is over: a descriptor that enforces is over, or every quota
/// descriptor is.
fn is_over(targets: &[Option<Target>]) -> bool {
    let limited = || targets.iter().flatten().filter(|t| !t.limit.unlimited);
    let over = |t: &Target| matches!(t.state, State::Over(_) | State::Banned(_));
    let quotas = limited().filter(|t| t.limit.quota_mode).count();
    let quotas_over = limited().filter(|t| t.limit.quota_mode && over(t)).count();
    limited().any(|t| t.limit.enforces() && over(t)) || (quotas > 0 && quotas == quotas_over)
}

/// Drops the limits that another matched limit `replaces` (by name).
fn replace(targets: &mut [Option<Target>]) {
    let replaced: Vec<String> = targets
        .iter()
        .flatten()
        .flat_map(|t| t.limit.replaces.iter().cloned())
        .collect();
    if replaced.is_empty() {
        return;
    }
    for slot in targets.iter_mut() {
        let is_replaced = slot.as_ref().is_some_and(|t| {
            t.limit
                .name
                .as_ref()
                .is_some_and(|name| replaced.contains(name))
        });
        if is_replaced {
            *slot = None;
        }
    }
}

fn validate(request: &RateLimitRequest) -> Result<(), Failure> {
    let invalid = |m: String| Err(Failure::Invalid(m));
    if request.domain.is_empty() {
        return invalid("rate limit domain must not be empty: set the request's `domain`".into());
    }
    if request.domain.len() > MAX_ENTRY_BYTES {
        return invalid(format!("the domain is longer than {MAX_ENTRY_BYTES} bytes"));
    }
    if request.descriptors.is_empty() {
        return invalid(
            "rate limit descriptor list must not be empty: send at least one descriptor".into(),
        );
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return invalid(format!(
            "{} descriptors in one request: at most {MAX_DESCRIPTORS} are accepted",
            request.descriptors.len()
        ));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return invalid(format!(
                "descriptor {i} has no entries: give it at least one key and value"
            ));
        }
        if d.entries.len() > MAX_ENTRIES {
            return invalid(format!(
                "descriptor {i} has {} entries: at most {MAX_ENTRIES} are accepted",
                d.entries.len()
            ));
        }
        for e in &d.entries {
            if e.key.is_empty() {
                return invalid(format!("descriptor {i} has an entry with an empty key"));
            }
            if e.key.len() > MAX_ENTRY_BYTES || e.value.len() > MAX_ENTRY_BYTES {
                return invalid(format!(
                    "descriptor {i} has an entry longer than {MAX_ENTRY_BYTES} bytes (key `{}`)",
                    e.key.chars().take(64).collect::<String>()
                ));
            }
        }
        if d.is_negative_hits {
            return invalid(format!(
                "descriptor {i} sets is_negative_hits, which this service does not support"
            ));
        }
    }
    Ok(())
}

/// A descriptor's own `limit`: counted by the fixed window, never in shadow mode.
fn own_limit(own: &RateLimitOverride, domain: &crate::config::Domain) -> Result<Limit, Failure> {
    let unit = Unit::try_from(own.unit).unwrap_or(Unit::Unknown);
    let rule = rule_of(u64::from(own.requests_per_unit), unit, 1).map_err(|e| {
        Failure::Invalid(format!(
            "a descriptor's own limit: {e} (use second, minute, hour, day, week, month or year)"
        ))
    })?;
    Ok(Limit {
        path: String::new(),
        refuse_all: rule.is_none(),
        rules: rule.into_iter().collect(),
        answers: vec![Answer {
            requests_per_unit: own.requests_per_unit,
            unit,
        }],
        algorithm: redis_ratelimit::Algorithm::FixedWindow,
        allowance: None,
        name: None,
        replaces: Vec::new(),
        unlimited: false,
        shadow_mode: false,
        quota_mode: false,
        detailed_metric: false,
        hits: domain.own_limit_hits.clone(),
        detailed: Default::default(),
    })
}

fn ok_without_limit() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..DescriptorStatus::default()
    }
}

/// OK for the request and each of its descriptors, none of them limited: the answer for an
/// unknown domain and for a backend failure under `--fail-open`.
fn all_ok(request: &RateLimitRequest) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: request
            .descriptors
            .iter()
            .map(|_| ok_without_limit())
            .collect(),
        ..RateLimitResponse::default()
    }
}

fn decision_of(t: &Target) -> Option<&Decision> {
    match &t.state {
        State::Passed(d) | State::Unconsumed(d) | State::Over(Some(d)) => Some(d),
        _ => None,
    }
}

fn status(t: &Target) -> DescriptorStatus {
    if t.limit.unlimited {
        return DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..DescriptorStatus::default()
        };
    }
    let (index, remaining, reset) = match (decision_of(t), t.state) {
        (Some(d), _) => (d.rule_index, d.remaining, d.reset_after),
        (None, State::Banned(left)) => (0, 0, left),
        (None, _) => (0, 0, Duration::ZERO),
    };
    let over = matches!(t.state, State::Over(_) | State::Banned(_));
    let answer = t.limit.answers.get(index).or(t.limit.answers.first());
    let code = match (over, t.limit.shadow_mode) {
        (true, false) => Code::OverLimit,
        _ => Code::Ok,
    };
    DescriptorStatus {
        code: code as i32,
        current_limit: answer.map(|a| RateLimit {
            name: t.limit.name.clone().unwrap_or_default(),
            requests_per_unit: a.requests_per_unit,
            unit: a.unit as i32,
        }),
        limit_remaining: if over {
            0
        } else {
            u32::try_from(remaining).unwrap_or(u32::MAX)
        },
        duration_until_reset: Some(proto_duration(reset)),
        quota: None,
    }
}

fn hit_result(t: &Target, status: &DescriptorStatus) -> HitResult {
    match t.state {
        State::Over(_) | State::Banned(_) if t.limit.shadow_mode => HitResult::ShadowMode,
        State::Over(_) | State::Banned(_) => HitResult::OverLimit,
        State::Passed(d) | State::Unconsumed(d) => {
            let used = d.limit.saturating_sub(d.remaining);
            match used * 5 >= d.limit * 4 {
                true => HitResult::NearLimit,
                false => HitResult::WithinLimit,
            }
        }
        State::Pending => {
            let _ = status;
            HitResult::WithinLimit
        }
    }
}

/// `d` as protobuf's `Duration`.
pub fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry as ProtoEntry;

    use super::*;

    fn service(limiter: Limiter) -> Service {
        // The configuration of the ban test's Redis half (tests/redis.rs).
        let yaml = include_str!("../tests/common/shop.yaml");
        let sources = vec![(PathBuf::from("shop.yaml"), yaml.to_owned())];
        Service {
            limiter,
            config: ArcSwap::from_pointee(crate::config::load::build(&sources).unwrap()),
            prefix: "rate_limit:",
            fail_open: false,
            response_headers: false,
            metrics: ServiceMetrics::new(),
            draining: AtomicBool::new(false),
        }
    }

    fn request(descriptors: &[(&str, &str)]) -> RateLimitRequest {
        RateLimitRequest {
            domain: "shop".into(),
            descriptors: descriptors
                .iter()
                .map(|(key, value)| RateLimitDescriptor {
                    entries: vec![ProtoEntry {
                        key: (*key).into(),
                        value: (*value).into(),
                    }],
                    ..RateLimitDescriptor::default()
                })
                .collect(),
            ..RateLimitRequest::default()
        }
    }

    /// The embedded backend's half of the ban test (the Redis half, across processes, is
    /// in tests/redis.rs): nothing outside the process can ban on it.
    #[tokio::test]
    async fn a_banned_remote_address_is_over_and_nothing_is_consumed() {
        let service = service(Limiter::memory());
        service
            .limiter
            .ban("ip:203.0.113.0/24", Duration::from_secs(3600))
            .await
            .unwrap();
        let banned = request(&[("user", "alice"), ("remote_address", "203.0.113.9")]);
        let answer = service.should_rate_limit(&banned).await.unwrap();
        assert_eq!(answer.overall_code, Code::OverLimit as i32);
        assert_eq!(answer.statuses[0].code, Code::Ok as i32);
        assert_eq!(answer.statuses[1].code, Code::OverLimit as i32);
        let reset = answer.statuses[1].duration_until_reset.unwrap();
        assert!((3500..=3600).contains(&reset.seconds), "{reset:?}");

        // Neither descriptor consumed: alice has all 20, the address all 5 once lifted.
        let alice = service
            .should_rate_limit(&request(&[("user", "alice")]))
            .await
            .unwrap();
        assert_eq!(alice.statuses[0].limit_remaining, 19);
        let other = request(&[("remote_address", "198.51.100.1")]);
        let answer = service.should_rate_limit(&other).await.unwrap();
        assert_eq!(answer.overall_code, Code::Ok as i32);
        service.limiter.unban("ip:203.0.113.0/24").await.unwrap();
        let address = request(&[("remote_address", "203.0.113.9")]);
        let answer = service.should_rate_limit(&address).await.unwrap();
        assert_eq!(answer.statuses[0].limit_remaining, 4);
    }
}
