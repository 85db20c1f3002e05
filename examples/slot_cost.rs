//! What calls in flight cost Redis: runs one kind of call `--calls` times, one at a time,
//! over 100 keys, against the Redis at `--redis-url`, for `scripts/bench-slots` to count
//! the server's instructions under callgrind.
//!
//! ```text
//! cargo run --release --example slot_cost -- --redis-url redis://127.0.0.1:6379 --calls 2000 \
//!     --kind plain|concurrency|acquire|acquire-release
//! ```
//! - `plain`: a guarded call of one rule (one round trip);
//! - `concurrency`: the same call with `concurrency = 4` (its check takes a slot; its
//!   release after the body is the second round trip);
//! - `acquire-release`, `acquire`: `Limiter::acquire` of a slot, released or kept: their
//!   difference is a release's cost.

use std::process::ExitCode;
use std::sync::OnceLock;

use clap::{Parser, ValueEnum};
use redis_ratelimit::{rate_limiter, Limiter, RateLimitError};

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Plain,
    Concurrency,
    Acquire,
    AcquireRelease,
}

#[derive(Parser)]
struct Options {
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    #[arg(long, default_value_t = 2000)]
    calls: u32,
    #[arg(long, value_enum)]
    kind: Kind,
}

static LIMITER: OnceLock<Limiter> = OnceLock::new();

fn limiter() -> &'static Limiter {
    LIMITER.get().expect("set in main")
}

#[rate_limiter(rules("1000000/minute"), limit_type = CUSTOM, by = who, limiter = limiter(), name = "cost.plain")]
async fn plain(who: u32) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("1000000/minute"), concurrency = 4, limit_type = CUSTOM, by = who, limiter = limiter(), name = "cost.concurrency")]
async fn concurrency(who: u32) -> Result<(), RateLimitError> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let options = Options::parse();
    let built = Limiter::redis(&options.redis_url)
        .expect("a Redis URL")
        .fail_open(false)
        .timeout(std::time::Duration::from_secs(5));
    LIMITER.set(built).expect("set once");
    let mut kept = Vec::new();
    for n in 0..options.calls {
        let who = n % 100;
        let done = match options.kind {
            Kind::Plain => plain(who).await.is_ok(),
            Kind::Concurrency => concurrency(who).await.is_ok(),
            Kind::Acquire | Kind::AcquireRelease => {
                let key = format!("cost:acquire:{n}");
                match limiter().acquire(&key, 4).await {
                    Ok(Some(slot)) if matches!(options.kind, Kind::Acquire) => {
                        // Kept: released by nobody, so the run counts takes alone.
                        kept.push(slot);
                        true
                    }
                    Ok(Some(slot)) => slot.release().await.is_ok(),
                    _ => false,
                }
            }
        };
        if !done {
            eprintln!("slot_cost: call {n} failed or was refused");
            return ExitCode::FAILURE;
        }
    }
    // Dropped outside the runtime: nothing more is sent.
    std::mem::forget(kept);
    println!("RESULT calls={}", options.calls);
    ExitCode::SUCCESS
}
