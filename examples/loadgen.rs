//! Load generator: checks random keys through the runtime as fast as it can and prints one
//! line of results.
//!
//! ```text
//! cargo run --release --example loadgen -- --redis-url redis://127.0.0.1:6379 \
//!     --keys 10000 --total 200000 --concurrency 64 --limit 100 --window-s 60 \
//!     [--algorithm token_bucket] [--threads 1] [--deny-cache] [--allowance-ms 250] [--tls-ca ca.pem]
//!     [--keys-per-request 3 [--separate]]
//! cargo run --release --example loadgen -- --memory ...
//! ```
//! `--redis-url` is passed as is to `Limiter::redis`, so it takes every form that does
//! (see [`URL_FORMS`]); `--tls-ca PATH` trusts the CA certificates in a PEM file for a TLS
//! URL, and `--deny-cache` turns the limiter's deny cache on.
//!
//! prints `RESULT name=redis-ratelimit ops=<checks/s> p50_us=<..> p99_us=<..> allowed=<..> denied=<..> draws=<..>`
//! (`draws`: the round trips of checks with an allowance).

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use redis_ratelimit::{Algorithm, Limiter, Rule};

/// Checks random keys through the runtime as fast as it can and prints one line of results.
#[derive(Parser)]
#[command(after_help = URL_FORMS)]
struct Options {
    /// The Redis to check against: any form `Limiter::redis` takes (below).
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Check the embedded in-memory backend instead of Redis.
    #[arg(long, conflicts_with_all = ["redis_url", "tls_ca"])]
    memory: bool,
    /// Trust the CA certificates in this PEM file for a TLS URL.
    #[arg(long, value_name = "PATH")]
    tls_ca: Option<String>,
    /// Turn the limiter's deny cache on.
    #[arg(long)]
    deny_cache: bool,
    /// How many distinct keys the checks pick from at random.
    #[arg(long, default_value_t = 10_000, value_parser = at_least_one())]
    keys: u64,
    /// How many checks to make in all.
    #[arg(long, default_value_t = 200_000)]
    total: u64,
    /// How many checks are in flight at once.
    #[arg(long, default_value_t = 64, value_parser = at_least_one())]
    concurrency: u64,
    /// The rule's count: calls per window per key.
    #[arg(long, default_value_t = 100, value_parser = at_least_one())]
    limit: u64,
    /// The rule's window, in seconds.
    #[arg(long, default_value_t = 60, value_parser = at_least_one())]
    window_s: u64,
    /// How the rule is counted: sliding_log, fixed_window, sliding_window, token_bucket
    /// (or the attribute's spelling, SLIDING_LOG ...).
    #[arg(long, default_value_t = Algorithm::SlidingLog)]
    algorithm: Algorithm,
    /// The Tokio runtime's worker threads (1: a current-thread runtime).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    threads: u16,
    /// After a refusal, block the key this many ms (`Check::block_for`); 0: no block.
    #[arg(long, default_value_t = 0)]
    block_for_ms: u64,
    /// Give back every admitted check (`Limiter::refund`), as a `charge_if` site gives back
    /// a call it does not charge. A refund is a second round trip, counted in the check's
    /// latency, not as a check of its own.
    #[arg(long)]
    refund: bool,
    /// Ask each check to warn at this percentage of the rule's count (`Check::warn_at`,
    /// 1 to 99); 0: no warning.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=99))]
    warn_at: u8,
    /// Admit checks from local allowances living up to this many ms
    /// (`Limiter::allowance`); 0: a round trip per check.
    #[arg(long, default_value_t = 0)]
    allowance_ms: u64,
    /// How many keys each request is checked against (distinct keys, the first random and
    /// the next ones after it), as one `Limiter::check_all`; `--total` then counts
    /// requests, and each key checks with the same rule and algorithm.
    #[arg(long, default_value_t = 1, value_parser = at_least_one())]
    keys_per_request: u64,
    /// Check a request's keys one after another, each awaited in turn, instead of as one
    /// `check_all` (the baseline of `--keys-per-request`).
    #[arg(long)]
    separate: bool,
}

/// A whole number of at least 1.
fn at_least_one() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..)
}

/// What `--redis-url` takes: every form of `Limiter::redis`.
const URL_FORMS: &str = "\
--redis-url URL, any form Limiter::redis takes:
  redis://[[user]:password@]host[:port][/db]
  rediss://...                                TLS (--tls-ca PATH trusts a private CA)
  redis+cluster://host:port[,host:port...]    Redis Cluster (rediss+cluster:// for TLS)
  redis+sentinel://[[user]:password@]host:port[,host:port...]/master_name[/db]
                                              (rediss+sentinel:// for TLS)
  unix:///path/to/redis.sock[?db=N]";

/// xorshift64*: enough randomness to spread keys, no dependency, no shared state.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

fn main() -> ExitCode {
    let o = Options::parse();
    // One client thread by default, like redis-benchmark: on a small machine a second
    // worker would only compete with the server it is measuring.
    let runtime = if o.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(o.threads))
            .enable_all()
            .build()
    };
    runtime.expect("a Tokio runtime").block_on(run(o))
}

async fn run(o: Options) -> ExitCode {
    let limiter = match build_limiter(&o) {
        Ok(limiter) => limiter
            .deny_cache(o.deny_cache)
            .allowance(Duration::from_millis(o.allowance_ms)),
        Err(e) => {
            eprintln!("loadgen: {e}");
            return ExitCode::from(2);
        }
    };
    let rules = [Rule::new(o.limit, Duration::from_secs(o.window_s))];
    // Keys are built up front so the measurement is of checks, not of formatting.
    let run = std::process::id();
    let keys: Arc<Vec<String>> =
        Arc::new((0..o.keys).map(|i| format!("loadgen:{run}:{i}")).collect());

    // Connect (and load the script) before the clock starts.
    if let Err(e) = limiter.peek(&keys[0], &rules).algorithm(o.algorithm).await {
        eprintln!("loadgen: backend not usable: {e}");
        return ExitCode::FAILURE;
    }
    // And the list's script, whose first use sends its body.
    if o.keys_per_request > 1 {
        let peeks = keys
            .iter()
            .take(o.keys_per_request as usize)
            .map(|key| limiter.peek(key, &rules).algorithm(o.algorithm));
        if let Err(e) = limiter.check_all(peeks).await {
            eprintln!("loadgen: backend not usable for lists: {e}");
            return ExitCode::FAILURE;
        }
    }

    let limiter = Arc::new(limiter);
    let issued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..o.concurrency)
        .map(|worker| {
            let (limiter, keys, issued) = (limiter.clone(), keys.clone(), issued.clone());
            let (total, algorithm, refund, warn_at) = (o.total, o.algorithm, o.refund, o.warn_at);
            let block_for = Duration::from_millis(o.block_for_ms);
            let (per_request, separate) = (o.keys_per_request, o.separate);
            tokio::spawn(async move {
                let mut seed =
                    0x9E37_79B9_7F4A_7C15 ^ (worker + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                let mut latencies_us = Vec::with_capacity((total / o.concurrency + 1) as usize);
                let (mut allowed, mut denied, mut errors) = (0u64, 0u64, 0u64);
                while issued.fetch_add(1, Ordering::Relaxed) < total {
                    let first = (next_random(&mut seed) % keys.len() as u64) as usize;
                    let key = &keys[first];
                    let t = Instant::now();
                    if per_request > 1 {
                        let listed = (0..per_request as usize)
                            .map(|i| &keys[(first + i) % keys.len()])
                            .map(|key| limiter.check(key, &rules).algorithm(algorithm));
                        let result = match separate {
                            false => limiter.check_all(listed).await,
                            true => {
                                let mut decisions = Vec::with_capacity(per_request as usize);
                                for check in listed {
                                    match check.await {
                                        Ok(d) => decisions.push(d),
                                        Err(e) => {
                                            decisions.clear();
                                            errors += 1;
                                            let _ = e;
                                            break;
                                        }
                                    }
                                }
                                Ok(decisions)
                            }
                        };
                        latencies_us.push(t.elapsed().as_micros() as u32);
                        match result {
                            Ok(ds) if !ds.is_empty() && ds.iter().all(|d| d.allowed) => {
                                allowed += 1
                            }
                            Ok(ds) if !ds.is_empty() => denied += 1,
                            Ok(_) => {}
                            Err(_) => errors += 1,
                        }
                        continue;
                    }
                    let mut check = limiter.check(key, &rules).algorithm(algorithm);
                    if warn_at > 0 {
                        check = check.warn_at(warn_at);
                    }
                    let mut result = check.block_for(block_for).await;
                    if let (true, Ok(d)) = (refund, &result) {
                        if let Err(e) = limiter.refund(key, &rules, d).await {
                            result = Err(e);
                        }
                    }
                    latencies_us.push(t.elapsed().as_micros() as u32);
                    match result {
                        Ok(d) if d.allowed => allowed += 1,
                        Ok(_) => denied += 1,
                        Err(_) => errors += 1,
                    }
                }
                (latencies_us, allowed, denied, errors)
            })
        })
        .collect();

    let mut latencies = Vec::with_capacity(o.total as usize);
    let (mut allowed, mut denied, mut errors) = (0, 0, 0);
    for worker in workers {
        let (l, a, d, e) = worker.await.expect("worker panicked");
        latencies.extend(l);
        allowed += a;
        denied += d;
        errors += e;
    }
    // What the allowances still hold goes back within the run: their give-backs are part
    // of what allowances cost.
    if o.allowance_ms > 0 {
        if let Err(e) = limiter.release_allowances().await {
            eprintln!("loadgen: giving the allowances back failed: {e}");
            return ExitCode::FAILURE;
        }
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
    };
    let ops = latencies.len() as f64 / elapsed.as_secs_f64();
    println!(
        "RESULT name=redis-ratelimit ops={ops:.0} p50_us={} p99_us={} allowed={allowed} denied={denied} draws={}",
        percentile(0.50).copied().unwrap_or(0),
        percentile(0.99).copied().unwrap_or(0),
        limiter.allowance_draws(),
    );
    if errors > 0 {
        eprintln!("loadgen: {errors} checks failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn build_limiter(o: &Options) -> Result<Limiter, String> {
    if o.memory {
        return Ok(Limiter::memory());
    }
    let limiter = Limiter::redis(&o.redis_url)
        .map_err(|e| e.to_string())?
        .timeout(Duration::from_secs(5));
    let Some(path) = &o.tls_ca else {
        return Ok(limiter);
    };
    let pem = std::fs::read(path).map_err(|e| format!("--tls-ca {path}: {e}"))?;
    limiter.with_tls_ca(&pem).map_err(|e| e.to_string())
}
