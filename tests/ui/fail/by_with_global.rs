use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL, by = phone)]
async fn send_code(phone: &str) -> Result<(), RateLimitError> {
    let _ = phone;
    Ok(())
}

fn main() {}
