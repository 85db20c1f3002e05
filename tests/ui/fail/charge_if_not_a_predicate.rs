use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("3/minute"), charge_if = true)]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute"), charge_if = |r: &Result<(), RateLimitError>| r.as_ref().err())]
async fn verify() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
