use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("60/minute"), concurrency = 4, lease = "0s")]
async fn complete() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("60/minute"), concurrency = 4, lease = "ten seconds")]
async fn summarize() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
