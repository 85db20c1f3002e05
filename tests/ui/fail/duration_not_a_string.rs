use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("3/minute"), block_for = std::time::Duration::from_secs(900), wait = 2)]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
