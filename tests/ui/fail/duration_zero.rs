use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("3/minute"), block_for = "0 minutes", wait = "0ms")]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
