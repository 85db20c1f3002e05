//! The configuration: envoyproxy/ratelimit's YAML files, read unchanged, with ours beside
//! theirs (`algorithm`, `unit_multiplier`, `limits`, `allowance`).
//!
//! - [`yaml`]: a document as nodes that know their lines;
//! - [`grammar`]: one file's fields, every error with its line;
//! - [`load`](mod@load): a file or folder into one [`Loaded`] tree, every error of every file;
//! - this module: the tree requests are matched against, immutable once loaded (a reload
//!   builds a new one and swaps it whole).

pub mod grammar;
pub mod load;
pub mod yaml;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use redis_ratelimit::{Algorithm, Rule};

use crate::metrics::{DetailedHits, Hits, Requests};

pub use load::{load, Loaded};

/// The configuration of one domain: its descriptors, as a tree.
#[derive(Debug)]
pub struct Domain {
    pub name: String,
    pub root: Node,
    pub requests: Requests,
    /// The hits of descriptors that carry their own `limit` (under `descriptor="own_limit"`:
    /// a request's values never name a metric).
    pub own_limit_hits: Hits,
}

/// One level of descriptors: the children by `key` or `key_value`, the wildcard ones in the
/// order written, and this level's own limit.
#[derive(Debug, Default)]
pub struct Node {
    /// By `key` (a descriptor without a value: the default of its key) or `key_value`.
    pub children: HashMap<String, Node>,
    /// The children whose `key_value` has a `*`, in file order: the first that matches wins.
    pub wildcards: Vec<Wildcard>,
    pub limit: Option<Arc<Limit>>,
    pub share_threshold: bool,
    pub value_to_metric: bool,
    /// The pattern of `key_value` when this node is a wildcard with `share_threshold`: the
    /// value part every matching value shares one counter under.
    pub shared_value: Option<String>,
}

/// A wildcard child: its `key_value` as written and that text split at each `*`.
#[derive(Debug)]
pub struct Wildcard {
    pub key: String,
    pub parts: Vec<String>,
}

/// What a descriptor with a `rate_limit` limits, resolved once at load.
#[derive(Debug)]
pub struct Limit {
    /// The descriptor's path in the file, `key1_value1.subkey1` (wildcards as written): the
    /// `descriptor` label of its metrics, bounded by the configuration.
    pub path: String,
    pub rules: Vec<Rule>,
    /// Per rule, how the answer's `current_limit` describes it.
    pub answers: Vec<Answer>,
    pub algorithm: Algorithm,
    /// `None`: the service's default (`--allowance`).
    pub allowance: Option<Duration>,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    pub unlimited: bool,
    /// `requests_per_unit: 0`: every request is over, without asking the backend.
    pub refuse_all: bool,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    /// Its `ratelimit_server_hits_total` under [`path`](Self::path).
    pub hits: Hits,
    /// Its hits under request-valued names (`detailed_metric`, `value_to_metric`).
    pub detailed: DetailedHits,
}

/// A rule as Envoy's `RateLimit` message states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub requests_per_unit: u32,
    pub unit: Unit,
}

impl Limit {
    /// Whether a refusal of this limit refuses the request (shadow and quota descriptors
    /// do not, on their own).
    pub fn enforces(&self) -> bool {
        !self.shadow_mode && !self.quota_mode
    }
}

/// A unit of envoyproxy/ratelimit's `unit`, as its name in the files.
pub fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Unknown => "unknown",
        Unit::Second => "second",
        Unit::Minute => "minute",
        Unit::Hour => "hour",
        Unit::Day => "day",
        Unit::Week => "week",
        Unit::Month => "month",
        Unit::Year => "year",
    }
}

/// One error of a configuration: the file, the line, what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based; 0 when the error is about the file as a whole (it cannot be read).
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file.display(), self.message),
            line => write!(f, "{}:{line}: {}", self.file.display(), self.message),
        }
    }
}

/// Every error of a configuration that did not load, in file and line order.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "error: {error}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
