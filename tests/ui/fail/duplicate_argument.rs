use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"), limit_type = IP, limit_type = USER_ID)]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
