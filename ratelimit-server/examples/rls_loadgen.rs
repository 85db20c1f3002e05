//! A load generator for the rate-limit service, speaking Envoy's protocol with Envoy's
//! generated client (envoy-types): `scripts/bench-rls` runs it. Each request carries one
//! descriptor `{key}={value}` per key of `--key` (comma-separated), the value cycling
//! through `--values` of them; requests are
//! spread over `--connections` HTTP/2 connections (across every `--target`), `--in-flight`
//! at a time. Prints one line of JSON: requests/s, latency percentiles, and how many
//! requests were admitted, refused or failed.
//!
//! ```text
//! cargo run --release -p ratelimit-server --example rls_loadgen -- \
//!     --target 127.0.0.1:8081 --requests 200000 --in-flight 64 --connections 4 --values 10000
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::{Channel, Endpoint};

#[derive(Parser)]
struct Args {
    /// A service's gRPC address; give it twice to spread the load over two instances.
    #[arg(long, required = true)]
    target: Vec<String>,
    #[arg(long, default_value_t = 200_000)]
    requests: usize,
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// HTTP/2 connections, spread over the targets in turn.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Distinct descriptor values.
    #[arg(long, default_value_t = 10_000)]
    values: usize,
    #[arg(long, default_value = "bench")]
    domain: String,
    /// The descriptors' keys, comma-separated: one descriptor of one entry each.
    #[arg(long, default_value = "value")]
    key: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut channels: Vec<Channel> = Vec::new();
    for i in 0..args.connections.max(1) {
        let target = &args.target[i % args.target.len()];
        channels.push(
            Endpoint::from_shared(format!("http://{target}"))?
                .tcp_nodelay(true)
                .connect()
                .await?,
        );
    }
    let next = Arc::new(AtomicUsize::new(0));
    let args = Arc::new(args);
    let started = Instant::now();
    let workers: Vec<_> = (0..args.in_flight)
        .map(|w| {
            let mut client = RateLimitServiceClient::new(channels[w % channels.len()].clone());
            let (next, args) = (next.clone(), args.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let (mut ok, mut over, mut failed) = (0usize, 0usize, 0usize);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= args.requests {
                        break;
                    }
                    let value = (i % args.values.max(1)).to_string();
                    let request = RateLimitRequest {
                        domain: args.domain.clone(),
                        descriptors: args
                            .key
                            .split(',')
                            .map(|key| RateLimitDescriptor {
                                entries: vec![Entry {
                                    key: key.to_owned(),
                                    value: value.clone(),
                                }],
                                ..RateLimitDescriptor::default()
                            })
                            .collect(),
                        hits_addend: 0,
                    };
                    let sent = Instant::now();
                    match client.should_rate_limit(request).await {
                        Ok(answer) if answer.get_ref().overall_code == Code::Ok as i32 => ok += 1,
                        Ok(_) => over += 1,
                        Err(_) => failed += 1,
                    }
                    latencies.push(sent.elapsed());
                }
                (latencies, ok, over, failed)
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = Vec::with_capacity(args.requests);
    let (mut ok, mut over, mut failed) = (0, 0, 0);
    for worker in workers {
        let (l, o, v, f) = worker.await?;
        latencies.extend(l);
        ok += o;
        over += v;
        failed += f;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let at = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "{{\"requests\":{},\"seconds\":{:.3},\"requests_per_s\":{:.0},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"ok\":{ok},\"over_limit\":{over},\"failed\":{failed}}}",
        latencies.len(),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        at(0.50),
        at(0.99),
    );
    Ok(())
}
