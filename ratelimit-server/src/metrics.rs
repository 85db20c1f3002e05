//! The service's metrics, on the `metrics` facade beside the library's, rendered as
//! Prometheus text on `GET /metrics`.
//!
//! Every label comes from the configuration, never from a request: a domain a request
//! names that is not configured counts as `domain="unknown"`, and a descriptor is named by
//! its path in the file. `detailed_metric` and `value_to_metric` name a descriptor by the
//! request's values, as envoyproxy/ratelimit does, for at most [`MAX_DETAILED`] names per
//! descriptor; later ones count under the descriptor's path. The counters a request bumps
//! are registered once, at load, so counting them is an atomic add.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Names per descriptor that `detailed_metric` or `value_to_metric` may add.
pub const MAX_DETAILED: usize = 100;

/// The domain label of a domain that is not configured.
pub const UNKNOWN_DOMAIN: &str = "unknown";

/// Installs the Prometheus recorder (process-wide: the library's counters land there too).
pub fn install() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    metrics::describe_counter!(
        "ratelimit_server_requests_total",
        "ShouldRateLimit requests by domain and overall code"
    );
    metrics::describe_counter!(
        "ratelimit_server_hits_total",
        "Descriptors counted, by domain, descriptor and result"
    );
    metrics::describe_counter!(
        "ratelimit_server_errors_total",
        "Requests answered OK because the backend failed (--fail-open)"
    );
    metrics::describe_counter!(
        "ratelimit_server_config_errors_total",
        "Errors of configurations that did not load"
    );
    Ok(handle)
}

/// How a descriptor's hit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HitResult {
    WithinLimit,
    /// At or above 80 % of the limit after the hit.
    NearLimit,
    OverLimit,
    /// Over, in `shadow_mode`: answered OK.
    ShadowMode,
}

impl HitResult {
    const ALL: [HitResult; 4] = [
        HitResult::WithinLimit,
        HitResult::NearLimit,
        HitResult::OverLimit,
        HitResult::ShadowMode,
    ];

    fn label(self) -> &'static str {
        match self {
            HitResult::WithinLimit => "within_limit",
            HitResult::NearLimit => "near_limit",
            HitResult::OverLimit => "over_limit",
            HitResult::ShadowMode => "shadow_mode",
        }
    }
}

/// `ratelimit_server_hits_total` of one descriptor, one counter per result.
#[derive(Debug, Clone)]
pub struct Hits([Counter; 4]);

impl Hits {
    pub fn new(domain: &str, descriptor: &str) -> Hits {
        Hits(HitResult::ALL.map(|result| {
            metrics::counter!(
                "ratelimit_server_hits_total",
                "domain" => domain.to_owned(),
                "descriptor" => descriptor.to_owned(),
                "result" => result.label(),
            )
        }))
    }

    pub fn count(&self, result: HitResult) {
        self.0[result as usize].increment(1);
    }
}

/// The request-valued names of one descriptor's hits, at most [`MAX_DETAILED`].
#[derive(Debug, Default)]
pub struct DetailedHits(Mutex<HashMap<String, Hits>>);

impl DetailedHits {
    /// The counters of `name`, or `None` once the descriptor has its share of names.
    pub fn get(&self, domain: &str, name: &str) -> Option<Hits> {
        let mut names = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hits) = names.get(name) {
            return Some(hits.clone());
        }
        if names.len() >= MAX_DETAILED {
            return None;
        }
        let hits = Hits::new(domain, name);
        names.insert(name.to_owned(), hits.clone());
        Some(hits)
    }
}

/// `ratelimit_server_requests_total` of one domain: `OK` and `OVER_LIMIT`.
#[derive(Debug, Clone)]
pub struct Requests {
    ok: Counter,
    over_limit: Counter,
}

impl Requests {
    pub fn new(domain: &str) -> Requests {
        let counter = |code: &'static str| {
            metrics::counter!(
                "ratelimit_server_requests_total",
                "domain" => domain.to_owned(),
                "code" => code,
            )
        };
        Requests {
            ok: counter("OK"),
            over_limit: counter("OVER_LIMIT"),
        }
    }

    pub fn count(&self, over_limit: bool) {
        match over_limit {
            true => self.over_limit.increment(1),
            false => self.ok.increment(1),
        }
    }
}

/// The counters and the histogram that do not belong to a configuration.
#[derive(Debug)]
pub struct ServiceMetrics {
    pub unknown_domain: Requests,
    errors: Counter,
    config_errors: Counter,
    duration: Histogram,
}

impl ServiceMetrics {
    pub fn new() -> ServiceMetrics {
        ServiceMetrics {
            unknown_domain: Requests::new(UNKNOWN_DOMAIN),
            errors: metrics::counter!("ratelimit_server_errors_total"),
            config_errors: metrics::counter!("ratelimit_server_config_errors_total"),
            duration: metrics::histogram!("ratelimit_server_request_duration_seconds"),
        }
    }

    /// A request answered OK because the backend failed.
    pub fn error(&self) {
        self.errors.increment(1);
    }

    /// `n` errors of a configuration that did not load.
    pub fn config_errors(&self, n: usize) {
        self.config_errors.increment(n as u64);
    }

    pub fn took(&self, elapsed: Duration) {
        self.duration.record(elapsed.as_secs_f64());
    }
}
