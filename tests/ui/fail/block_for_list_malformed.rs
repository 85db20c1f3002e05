use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("3/minute"), block_for = ["1m", "10 minutes or so", "0s"])]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute"), block_for = ["1m", 600])]
async fn reset() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
