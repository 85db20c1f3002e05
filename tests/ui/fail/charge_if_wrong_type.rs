use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("3/minute"), charge_if = Option::is_none)]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute"), charge_if = |denied: &bool| *denied)]
async fn verify() -> Result<u8, RateLimitError> {
    Ok(1)
}

#[rate_limiter(rules("3/minute"), charge_if = |r: &Result<u8, RateLimitError>| r.is_ok())]
async fn lookup() -> Result<u16, RateLimitError> {
    Ok(1)
}

fn main() {}
