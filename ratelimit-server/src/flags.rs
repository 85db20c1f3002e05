//! The command line: every flag, with its environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Envoy's rate-limit service on redis-ratelimit: reads envoyproxy/ratelimit's
/// configuration files unchanged, answers `ShouldRateLimit` over gRPC and `POST /json`, and
/// counts every descriptor of a request as one: a refused request consumes nothing.
///
/// Examples:
///
///   ratelimit-server --config examples/server                      # embedded backend
///
///   ratelimit-server --config /etc/ratelimit --redis redis://10.0.0.5:6379
///
///   ratelimit-server --config /etc/ratelimit --check-config
///
/// Exit status: 0 after a clean shutdown (SIGTERM, SIGINT) or a configuration that loads
/// with --check-config; 2 for a configuration that does not load, or a bad flag; 1 when the
/// service cannot start (an address in use, a bad Redis URL).
#[derive(Debug, Parser)]
#[command(name = "ratelimit-server", version, verbatim_doc_comment)]
pub struct Flags {
    /// The configuration: a YAML file, or a folder whose *.yaml and *.yml files (in it and
    /// its sub-folders) are read. Watched: a change is in force within 2 s.
    #[arg(long, env = "RATELIMIT_CONFIG", value_name = "FILE or FOLDER")]
    pub config: PathBuf,

    /// Redis, in any form of the library: redis://, rediss://, redis+cluster://,
    /// redis+sentinel://, unix://. Without it the embedded backend counts, per process.
    #[arg(long, env = "RATELIMIT_REDIS_URL", value_name = "URL")]
    pub redis: Option<String>,

    /// Where gRPC (Envoy's RateLimitService and grpc.health.v1) listens. Port 0: any free
    /// port, logged at start.
    #[arg(
        long,
        env = "RATELIMIT_GRPC",
        default_value = "0.0.0.0:8081",
        value_name = "ADDR"
    )]
    pub grpc: SocketAddr,

    /// Where HTTP (POST /json, GET /healthcheck, GET /metrics) listens.
    #[arg(
        long,
        env = "RATELIMIT_HTTP",
        default_value = "0.0.0.0:8080",
        value_name = "ADDR"
    )]
    pub http: SocketAddr,

    /// The embedded backend's state file: restored at start, saved every 10 s and at
    /// shutdown, so a restart keeps the counts.
    #[arg(long, env = "RATELIMIT_STATE_FILE", value_name = "PATH")]
    pub state_file: Option<PathBuf>,

    /// The local allowance of every descriptor without its own (`rate_limit.allowance`),
    /// e.g. `250ms`: hot keys are decided in process, still exactly.
    #[arg(long, env = "RATELIMIT_ALLOWANCE", value_name = "DURATION", value_parser = duration)]
    pub allowance: Option<Duration>,

    /// Answer OK when the backend cannot be reached, instead of gRPC UNAVAILABLE (which
    /// leaves the choice to Envoy's `failure_mode_deny`).
    #[arg(long, env = "RATELIMIT_FAIL_OPEN")]
    pub fail_open: bool,

    /// Add the RateLimit-Policy and RateLimit fields (and Retry-After when over the limit)
    /// to the answer's response_headers_to_add.
    #[arg(long, env = "RATELIMIT_RESPONSE_HEADERS")]
    pub response_headers: bool,

    /// The prefix of every key the service writes.
    #[arg(
        long,
        env = "RATELIMIT_PREFIX",
        default_value = "rate_limit:",
        value_name = "PREFIX"
    )]
    pub prefix: String,

    /// How long one request may wait for the backend before it fails (UNAVAILABLE, or OK
    /// with --fail-open).
    #[arg(long, env = "RATELIMIT_TIMEOUT", default_value = "100ms", value_name = "DURATION", value_parser = duration)]
    pub timeout: Duration,

    /// How the log is written.
    #[arg(
        long,
        env = "RATELIMIT_LOG_FORMAT",
        default_value = "text",
        value_name = "FORMAT"
    )]
    pub log_format: LogFormat,

    /// Load the configuration, print what it holds and exit 0, or print every error and
    /// exit 2.
    #[arg(long)]
    pub check_config: bool,
}

/// The log's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line a person reads.
    Text,
    /// One JSON object a line, for a log pipeline.
    Json,
}

fn duration(text: &str) -> Result<Duration, String> {
    ratelimit_rule_text::parse_duration(text).map_err(|e| e.to_string())
}
