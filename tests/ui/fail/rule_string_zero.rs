use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("0/minute", "10/0s"))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
