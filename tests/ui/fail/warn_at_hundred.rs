use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("60/minute"), warn_at = 100)]
async fn search() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
