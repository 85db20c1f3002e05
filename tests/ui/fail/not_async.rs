use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"))]
fn send_code(phone: &str) -> Result<String, RateLimitError> {
    Ok(format!("code sent to {phone}"))
}

fn main() {}
