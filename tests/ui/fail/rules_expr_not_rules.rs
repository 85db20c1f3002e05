use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules = &["10/minute"])]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
