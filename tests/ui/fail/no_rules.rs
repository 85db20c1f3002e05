use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(limit_type = GLOBAL, prevent_duplicate = false)]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
