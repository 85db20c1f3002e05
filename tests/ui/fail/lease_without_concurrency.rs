use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("60/minute"), lease = "10s")]
async fn complete() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
