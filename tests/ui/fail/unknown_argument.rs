use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"), limit = 10)]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
