use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"), name = "send code")]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("10/minute"), name = "billing::")]
async fn send_invoice() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
