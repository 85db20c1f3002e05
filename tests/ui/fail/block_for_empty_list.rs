use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("3/minute"), block_for = [])]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
