use redis_ratelimit::{rate_limiter, RateLimitError};

const MAX: u64 = 4;

#[rate_limiter(rules("60/minute"), concurrency = MAX)]
async fn complete() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
