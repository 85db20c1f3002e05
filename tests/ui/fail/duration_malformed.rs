use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("3/minute"), block_for = "15 min please", wait = "1.5s")]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
