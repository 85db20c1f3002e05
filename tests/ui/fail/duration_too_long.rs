use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("3/minute"), block_for = "100000000 days")]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
