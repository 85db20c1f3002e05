use redis_ratelimit::{rate_limiter, RateLimitError};

const SHADOW: bool = true;

#[rate_limiter(rules("10/minute"), shadow = SHADOW)]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("10/minute"), shadow = "true")]
async fn send_invoice() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
