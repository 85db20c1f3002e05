use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"))]
pub extern "C" fn callback() -> Result<u8, RateLimitError> {
    Ok(42)
}

fn main() {}
