use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"), cost = 0)]
async fn upload() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
