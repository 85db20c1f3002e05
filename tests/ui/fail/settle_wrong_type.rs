use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("100/minute"), cost = 10, settle = |r: &Option<u64>| r.unwrap_or(0))]
async fn complete() -> Result<u64, RateLimitError> {
    Ok(1)
}

#[rate_limiter(rules("100/minute"), cost = 10, settle = |r: &Result<u64, RateLimitError>| r.is_ok())]
async fn export() -> Result<u64, RateLimitError> {
    Ok(1)
}

fn main() {}
