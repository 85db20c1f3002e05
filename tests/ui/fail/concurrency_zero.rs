use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("60/minute"), concurrency = 0)]
async fn complete() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
