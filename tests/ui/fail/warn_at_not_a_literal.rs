use redis_ratelimit::{rate_limiter, RateLimitError};

const WARN: u8 = 80;

#[rate_limiter(rules("60/minute"), warn_at = WARN)]
async fn search() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
